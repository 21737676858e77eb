"""All SQL of the service. Functions take the caller's AsyncSession and never commit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple, TypeVar, cast

from sqlalchemy import (
    BigInteger,
    Select,
    Table,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import class_mapper
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.instrumentation import ClassManager
from sqlalchemy.sql.functions import FunctionElement

from api.db.models import Message, Session, Summary, SummaryJob, SummaryMessage, utcnow
from api.errors import (
    Conflict,
    SessionExists,
    SessionGone,
    SessionNotFound,
    SummaryNotFound,
    SummaryRangeConflict,
)
from summarizer.engine import FALLBACK_MODEL

Model = TypeVar("Model")

CREATE_ATTEMPTS = 3
"""Rounds of create-then-lock an append tries while concurrent DELETEs remove the session."""

TAIL_PAGE_SIZE = 64
"""Messages read per round trip when the loader walks back from the newest under a token budget."""


@dataclass(frozen=True)
class NewMessage:
    """A validated message ready to insert; `token_count` is counted before the transaction."""

    role: str
    content: str | None
    content_parts: list[Any] | None
    name: str | None
    tool_calls: list[Any] | None
    tool_call_id: str | None
    metadata: dict[str, Any] | None
    client_id: str | None
    token_count: int


class MessageRow(NamedTuple):
    """A stored message as the history loader reads it: plain values, no ORM identity.

    Same attribute names as `Message`; building one is a tuple, not an ORM instance, which
    is most of a load's cost once the query itself is an index range scan.
    """

    id: int
    seq: int
    role: str
    content: str | None
    content_parts: list[Any] | None
    name: str | None
    tool_calls: list[Any] | None
    tool_call_id: str | None
    metadata_: dict[str, Any] | None
    client_id: str | None
    token_count: int
    created_at: datetime


_MESSAGE_TABLE = cast(Table, Message.__table__)
_messages = _MESSAGE_TABLE.c
_MESSAGE_ROW_COLUMNS = (
    _messages.id,
    _messages.seq,
    _messages.role,
    _messages.content,
    _messages.content_parts,
    _messages.name,
    _messages.tool_calls,
    _messages.tool_call_id,
    _messages.metadata,
    _messages.client_id,
    _messages.token_count,
    _messages.created_at,
)

# The loader's statements are built once: SQLAlchemy memoizes a statement's cache key on the
# object, so reusing it skips the per-call traversal that a freshly built select() pays.
_TAIL_PAGE = (
    select(*_MESSAGE_ROW_COLUMNS)
    .where(
        _messages.session_id == bindparam("session_id"),
        _messages.seq > bindparam("after_seq"),
        _messages.seq < bindparam("before_seq"),
    )
    .order_by(_messages.seq.desc())
    .limit(TAIL_PAGE_SIZE)
)
_ALL_AFTER = (
    select(*_MESSAGE_ROW_COLUMNS)
    .where(_messages.session_id == bindparam("session_id"), _messages.seq > bindparam("after_seq"))
    .order_by(_messages.seq)
)

NO_UPPER_SEQ = 2**62
"""An upper seq bound above every stored seq: the first page of the tail walk."""


@dataclass(frozen=True)
class AppendOutcome:
    session: Session
    messages: list[Message]
    inserted: int
    transaction_id: int | None
    """PostgreSQL's id of the appending transaction (None on SQLite): if the connection dies
    during COMMIT, `transaction_status` tells whether the batch landed."""


# --- sessions -------------------------------------------------------------------------------


async def create_session(
    db: AsyncSession,
    tenant: str,
    external_id: str,
    metadata: dict[str, Any],
    settings: dict[str, Any],
) -> Session:
    now = utcnow()
    session = Session(
        tenant=tenant,
        external_id=external_id,
        metadata_=metadata,
        settings=settings,
        last_seq=0,
        created_at=now,
        updated_at=now,
    )
    db.add(session)
    try:
        async with db.begin_nested():
            await db.flush()
    except IntegrityError as exc:
        raise SessionExists(external_id) from exc
    return session


_SESSION_BY_EXTERNAL_ID = select(Session).where(
    Session.tenant == bindparam("p_tenant"), Session.external_id == bindparam("p_external_id")
)


async def get_session(db: AsyncSession, tenant: str, external_id: str) -> Session:
    session = await db.scalar(
        _SESSION_BY_EXTERNAL_ID, {"p_tenant": tenant, "p_external_id": external_id}
    )
    if session is None:
        raise SessionNotFound(external_id)
    return session


async def list_sessions(
    db: AsyncSession, tenant: str, limit: int, before_id: int | None
) -> list[Session]:
    """Newest first (by internal id, which grows with creation), keyset-paginated."""
    query = select(Session).where(Session.tenant == tenant)
    if before_id is not None:
        query = query.where(Session.id < before_id)
    return list(await db.scalars(query.order_by(Session.id.desc()).limit(limit)))


async def update_session(
    db: AsyncSession, tenant: str, external_id: str, changes: dict[str, Any]
) -> Session:
    """Replace `metadata` and/or `settings` in one UPDATE (a concurrent DELETE makes it 404)."""
    values = {key: changes[key] for key in ("metadata", "settings") if key in changes}
    result = await db.execute(
        update(_SESSION_TABLE)
        .where(_sessions.tenant == tenant, _sessions.external_id == external_id)
        .values(updated_at=utcnow(), **values)
        .returning(*_SESSION_TABLE.columns)
    )
    row = result.first()
    if row is None:
        raise SessionNotFound(external_id)
    return _stored(_SESSION_MANAGER, dict(zip(_SESSION_ATTRIBUTES, row, strict=True)))


async def delete_session(db: AsyncSession, tenant: str, external_id: str) -> None:
    """Delete a session; its messages, summaries and links go with it (ON DELETE CASCADE)."""
    result = await db.execute(
        delete(Session)
        .where(Session.tenant == tenant, Session.external_id == external_id)
        .returning(Session.id)
    )
    if result.first() is None:
        raise SessionNotFound(external_id)


async def live_summary_counts(db: AsyncSession, session_ids: Sequence[int]) -> dict[int, int]:
    if not session_ids:
        return {}
    rows = await db.execute(
        select(Summary.session_id, func.count())
        .where(Summary.session_id.in_(session_ids), Summary.superseded_by.is_(None))
        .group_by(Summary.session_id)
    )
    return {session_id: count for session_id, count in rows.tuples()}


# --- messages -------------------------------------------------------------------------------


async def append_messages(
    db: AsyncSession, tenant: str, external_id: str, batch: Sequence[NewMessage]
) -> AppendOutcome:
    """Append a batch with contiguous seqs, creating the session if missing.

    The first statement is an UPDATE of the session row: it takes the row lock on
    PostgreSQL and the write lock on SQLite, so concurrent appends to one session queue
    up while different sessions proceed in parallel. A message whose `client_id` is
    already stored is not inserted again; the stored one is returned in its place.

    Without client ids every message is new, so that UPDATE also reserves the seqs and
    the append is two statements: lock-and-reserve, then one multi-row INSERT.
    """
    reserve = 0 if any(message.client_id is not None for message in batch) else len(batch)
    leading = leading_pinned(batch) if reserve else 0
    locked = await _lock_session(db, tenant, external_id, reserve, leading)
    for _attempt in range(CREATE_ATTEMPTS):
        if locked is not None:
            break
        await db.execute(_insert_ignoring_conflicts(db, tenant, external_id))
        # None again only if a concurrent DELETE removed the row just inserted or found.
        locked = await _lock_session(db, tenant, external_id, reserve, leading)
    if locked is None:
        raise Conflict("the session was deleted while this append ran; retry")
    session, transaction_id = locked
    now = utcnow()
    if reserve:
        first_seq = session.last_seq - reserve + 1
        inserted = await _insert_messages(db, session.id, first_seq, batch, now)
        return AppendOutcome(session, inserted, len(inserted), transaction_id)

    known = await _messages_by_client_id(db, session.id, batch)
    fresh: list[NewMessage] = []
    placement: list[int | str] = []
    for new in batch:
        if new.client_id is not None and new.client_id in known:
            placement.append(new.client_id)
            continue
        if new.client_id is not None:
            known[new.client_id] = None
        fresh.append(new)
        placement.append(len(fresh) - 1)

    inserted = []
    if fresh:
        inserted = await _insert_messages(db, session.id, session.last_seq + 1, fresh, now)
        last_seq = session.last_seq + len(fresh)
        pinned_seq = session.pinned_seq
        if pinned_seq == session.last_seq:
            pinned_seq += leading_pinned(fresh)
        await db.execute(
            _SET_LAST_SEQ,
            {"p_session_id": session.id, "p_last_seq": last_seq, "p_pinned_seq": pinned_seq},
        )
        # Committed values, not changes: the UPDATE above already wrote them.
        set_committed_value(session, "last_seq", last_seq)
        set_committed_value(session, "pinned_seq", pinned_seq)
        for message in inserted:
            if message.client_id is not None:
                known[message.client_id] = message

    ordered: list[Message] = []
    for slot in placement:
        if isinstance(slot, int):
            ordered.append(inserted[slot])
        else:
            stored = known[slot]
            assert stored is not None
            ordered.append(stored)
    return AppendOutcome(session, ordered, len(fresh), transaction_id)


_SESSION_TABLE = cast(Table, Session.__table__)
_sessions = _SESSION_TABLE.c


class current_transaction_id(FunctionElement[int]):
    """The id of the transaction running the statement: `txid_current()` on PostgreSQL, NULL
    on SQLite (whose COMMIT cannot be cut off halfway by a network)."""

    type = BigInteger()
    inherit_cache = True


@compiles(current_transaction_id)
def _no_transaction_id(_element: Any, _compiler: Any, **_kw: Any) -> str:
    return "NULL"


@compiles(current_transaction_id, "postgresql")
def _txid_current(_element: Any, _compiler: Any, **_kw: Any) -> str:
    return "txid_current()"


_LOCK_SESSION = (
    update(_SESSION_TABLE)
    .where(
        _sessions.tenant == bindparam("p_tenant"),
        _sessions.external_id == bindparam("p_external_id"),
    )
    .values(
        updated_at=bindparam("p_now", type_=_sessions.updated_at.type),
        last_seq=_sessions.last_seq + bindparam("p_reserve", type_=_sessions.last_seq.type),
        # the pinned prefix grows while every message so far belongs to it
        pinned_seq=case(
            (
                _sessions.pinned_seq == _sessions.last_seq,
                _sessions.last_seq + bindparam("p_leading", type_=_sessions.last_seq.type),
            ),
            else_=_sessions.pinned_seq,
        ),
    )
    .returning(*_SESSION_TABLE.columns, current_transaction_id())
)

PINNED_ROLES = frozenset({"system", "developer"})
"""Roles of the pinned prefix: the leading messages that are never summarized."""


def leading_pinned(batch: Sequence[NewMessage]) -> int:
    """How many messages at the start of `batch` have a pinned role."""
    count = 0
    for message in batch:
        if message.role not in PINNED_ROLES:
            break
        count += 1
    return count


"""A Core UPDATE: the ORM-enabled one rebuilt its cache key and an ORM object on every append."""

_SESSION_ATTRIBUTES = tuple(
    class_mapper(Session).get_property_by_column(column).key for column in _SESSION_TABLE.columns
)

_SET_LAST_SEQ = (
    update(_SESSION_TABLE)
    .where(_sessions.id == bindparam("p_session_id"))
    .values(
        last_seq=bindparam("p_last_seq", type_=_sessions.last_seq.type),
        pinned_seq=bindparam("p_pinned_seq", type_=_sessions.pinned_seq.type),
    )
)


async def _lock_session(
    db: AsyncSession, tenant: str, external_id: str, reserve: int, leading: int
) -> tuple[Session, int | None] | None:
    """Lock the session row, touch `updated_at`, add `reserve` to `last_seq` (and `leading`
    to `pinned_seq` while the session holds nothing but its pinned prefix).

    Returns the row as a `Session` outside the ORM session (the append only reads it), with
    the transaction's id.
    """
    result = await db.execute(
        _LOCK_SESSION,
        {
            "p_tenant": tenant,
            "p_external_id": external_id,
            "p_now": utcnow(),
            "p_reserve": reserve,
            "p_leading": leading,
        },
    )
    row = result.first()
    if row is None:
        return None
    *columns, transaction_id = row
    session = _stored(_SESSION_MANAGER, dict(zip(_SESSION_ATTRIBUTES, columns, strict=True)))
    return session, transaction_id


async def transaction_status(db: AsyncSession, transaction_id: int) -> str | None:
    """PostgreSQL's word on a transaction: "committed", "aborted", "in progress", or None
    when it is too old to tell."""
    status: str | None = await db.scalar(
        select(func.txid_status(bindparam("p_xid", transaction_id, type_=BigInteger)))
    )
    return status


def _insert_ignoring_conflicts(db: AsyncSession, tenant: str, external_id: str) -> Any:
    """INSERT of a new session that does nothing if a concurrent request created it first."""
    dialect = postgresql if db.get_bind().dialect.name == "postgresql" else sqlite
    now = utcnow()
    return (
        dialect.insert(Session)
        .values(
            tenant=tenant,
            external_id=external_id,
            metadata={},
            settings={},
            last_seq=0,
            pinned_seq=0,
            created_at=now,
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=["tenant", "external_id"])
    )


async def _messages_by_client_id(
    db: AsyncSession, session_id: int, batch: Sequence[NewMessage]
) -> dict[str, Message | None]:
    client_ids = {message.client_id for message in batch if message.client_id is not None}
    if not client_ids:
        return {}
    stored = await db.scalars(
        select(Message).where(Message.session_id == session_id, Message.client_id.in_(client_ids))
    )
    return {message.client_id: message for message in stored if message.client_id is not None}


def _bind(name: str) -> Any:
    return bindparam(f"p_{name}", type_=_messages[name].type)


_INSERT_MESSAGES = (
    insert(_MESSAGE_TABLE)
    .values(
        session_id=_bind("session_id"),
        seq=_bind("seq"),
        role=_bind("role"),
        content=_bind("content"),
        content_parts=_bind("content_parts"),
        name=_bind("name"),
        tool_calls=_bind("tool_calls"),
        tool_call_id=_bind("tool_call_id"),
        metadata=_bind("metadata"),
        client_id=_bind("client_id"),
        token_count=_bind("token_count"),
        created_at=_bind("created_at"),
    )
    .returning(_messages.seq, _messages.id)
)
"""One Core INSERT for the whole batch (insertmanyvalues), returning the new ids by seq.

Matching ids by seq instead of asking for `sort_by_parameter_order` keeps the statement a
plain multi-row INSERT (no sentinel column, no sort on the server).
"""


async def _insert_messages(
    db: AsyncSession,
    session_id: int,
    first_seq: int,
    batch: Sequence[NewMessage],
    now: datetime,
) -> list[Message]:
    """Insert `batch` at seqs `first_seq...`; returns the stored messages (not in the session)."""
    rows = [_message_row(session_id, first_seq + i, new, now) for i, new in enumerate(batch)]
    id_of_seq: dict[int, int] = dict((await db.execute(_INSERT_MESSAGES, rows)).tuples().all())
    return [
        _stored(
            _MESSAGE_MANAGER,
            {
                "id": id_of_seq[row["p_seq"]],
                "session_id": session_id,
                "seq": row["p_seq"],
                "role": new.role,
                "content": new.content,
                "content_parts": new.content_parts,
                "name": new.name,
                "tool_calls": new.tool_calls,
                "tool_call_id": new.tool_call_id,
                "metadata_": new.metadata,
                "client_id": new.client_id,
                "token_count": new.token_count,
                "created_at": now,
            },
        )
        for row, new in zip(rows, batch, strict=True)
    ]


_MESSAGE_MANAGER = class_mapper(Message).class_manager
_SESSION_MANAGER = class_mapper(Session).class_manager


def _stored(manager: ClassManager[Model], values: dict[str, Any]) -> Model:
    """A model instance for a row just written, filled the way the ORM loader fills one.

    The values go straight into the instance dict, without the change events the constructor
    fires for each attribute, and the instance joins no ORM session: the caller only reads
    it. For a message this is about 13x cheaper than the constructor (most of a 50-message
    batch's CPU before).
    """
    instance = manager.new_instance()
    instance.__dict__.update(values)
    return instance


def _message_row(session_id: int, seq: int, message: NewMessage, now: datetime) -> dict[str, Any]:
    return {
        "p_session_id": session_id,
        "p_seq": seq,
        "p_role": message.role,
        "p_content": message.content,
        "p_content_parts": message.content_parts,
        "p_name": message.name,
        "p_tool_calls": message.tool_calls,
        "p_tool_call_id": message.tool_call_id,
        "p_metadata": message.metadata,
        "p_client_id": message.client_id,
        "p_token_count": message.token_count,
        "p_created_at": now,
    }


async def list_messages(
    db: AsyncSession, session_id: int, after_seq: int, limit: int
) -> list[Message]:
    """Messages in ascending seq order: an index range scan on `(session_id, seq)`."""
    return list(
        await db.scalars(
            select(Message)
            .where(Message.session_id == session_id, Message.seq > after_seq)
            .order_by(Message.seq)
            .limit(limit)
        )
    )


async def messages_after(db: AsyncSession, session_id: int, after_seq: int) -> list[Message]:
    """Every message after `after_seq`, ascending."""
    return await messages_between(db, session_id, after_seq + 1, NO_UPPER_SEQ)


async def tail_within_budget(
    db: AsyncSession, session_id: int, after_seq: int, token_budget: int | None
) -> list[MessageRow]:
    """The newest messages after `after_seq` whose stored token counts reach `token_budget`.

    Walks back from the newest in pages, so the cost follows what is returned, not the
    session's size. Keeps walking while the oldest loaded message is a tool result, so
    a tool call is not cut off from its results at the window's edge. With no budget,
    every message after `after_seq`, in one ascending range scan.
    """
    if token_budget is None:
        result = await db.execute(_ALL_AFTER, {"session_id": session_id, "after_seq": after_seq})
        return list(map(MessageRow._make, result.tuples()))
    loaded: list[MessageRow] = []
    total = 0
    upper = NO_UPPER_SEQ
    while True:
        result = await db.execute(
            _TAIL_PAGE,
            {
                "session_id": session_id,
                "after_seq": after_seq,
                "before_seq": upper,
            },
        )
        page = list(map(MessageRow._make, result.tuples()))
        for message in page:
            loaded.append(message)
            total += message.token_count
            if total > token_budget and message.role != "tool":
                loaded.reverse()
                return loaded
        if len(page) < TAIL_PAGE_SIZE:
            loaded.reverse()
            return loaded
        upper = page[-1].seq


# --- summaries ------------------------------------------------------------------------------


class SummaryRow(NamedTuple):
    """A live summary as the history loader reads it: plain values, like `MessageRow`."""

    id: int
    level: int
    first_seq: int
    last_seq: int
    first_message_id: int
    last_message_id: int
    message_count: int
    approx_tokens: int
    summary_text: str
    model: str
    superseded_by: int | None
    metadata_: dict[str, Any]
    created_at: datetime


_SUMMARY_TABLE = cast(Table, Summary.__table__)
_summaries = _SUMMARY_TABLE.c

_LIVE_SUMMARIES = (
    select(
        _summaries.id,
        _summaries.level,
        _summaries.first_seq,
        _summaries.last_seq,
        _summaries.first_message_id,
        _summaries.last_message_id,
        _summaries.message_count,
        _summaries.approx_tokens,
        _summaries.summary_text,
        _summaries.model,
        _summaries.superseded_by,
        _summaries.metadata,
        _summaries.created_at,
    )
    .where(_summaries.session_id == bindparam("p_session_id"), _summaries.superseded_by.is_(None))
    .order_by(_summaries.last_seq.desc())
    .limit(bindparam("p_limit"))
)


async def live_summaries(db: AsyncSession, session_id: int, limit: int) -> list[SummaryRow]:
    """The newest `limit` live summaries, oldest first (index on `(session_id, last_seq)`)."""
    result = await db.execute(_LIVE_SUMMARIES, {"p_session_id": session_id, "p_limit": limit})
    newest_first = list(map(SummaryRow._make, result.tuples()))
    newest_first.reverse()
    return newest_first


def _summaries_query(session_id: int, include_superseded: bool) -> Select[Summary]:
    query = select(Summary).where(Summary.session_id == session_id)
    if not include_superseded:
        query = query.where(Summary.superseded_by.is_(None))
    return query


async def list_summaries(
    db: AsyncSession,
    session_id: int,
    include_superseded: bool,
    limit: int,
    before_id: int | None,
) -> list[Summary]:
    """Summaries newest first, keyset-paginated by id."""
    query = _summaries_query(session_id, include_superseded)
    if before_id is not None:
        query = query.where(Summary.id < before_id)
    return list(await db.scalars(query.order_by(Summary.id.desc()).limit(limit)))


async def get_summary(db: AsyncSession, tenant: str, summary_id: int) -> tuple[Summary, Session]:
    row = (
        await db.execute(
            select(Summary, Session)
            .join(Session, Session.id == Summary.session_id)
            .where(Summary.id == summary_id, Session.tenant == tenant)
        )
    ).first()
    if row is None:
        raise SummaryNotFound(summary_id)
    return row.tuple()


async def summary_message_ids(db: AsyncSession, summary_id: int) -> list[int]:
    rows = await db.scalars(
        select(SummaryMessage.message_id)
        .where(SummaryMessage.summary_id == summary_id)
        .order_by(SummaryMessage.message_id)
    )
    return list(rows)


@dataclass(frozen=True)
class SummaryDraft:
    """A summary to persist over the seq range `first_seq..last_seq` of one session.

    A roll-up names the live summaries it absorbs in `absorbs`; its range is their union.
    """

    first_seq: int
    last_seq: int
    summary_text: str
    summary_prompt: str
    model: str
    temperature: float
    target_summary_tokens: int
    keep_last_n: int
    approx_tokens: int
    metadata: dict[str, Any]
    level: int = 0
    absorbs: tuple[int, ...] = ()


async def save_summary(db: AsyncSession, session_id: int, draft: SummaryDraft) -> Summary:
    """Write a summary, its links and any superseding update, under the session's lock.

    The range is checked inside the transaction against the live summaries, so a
    duplicate or overlapping summary cannot land even when two writers race.
    """
    locked = (
        await db.execute(
            update(Session)
            .where(Session.id == session_id)
            .values(last_seq=Session.last_seq)
            .returning(Session.last_seq, Session.pinned_seq)
        )
    ).first()
    if locked is None:
        raise SessionGone("the session no longer exists")
    last_seq, pinned_seq = locked
    if draft.last_seq < draft.first_seq or draft.last_seq > last_seq or draft.first_seq < 1:
        raise SummaryRangeConflict(f"seq range {draft.first_seq}..{draft.last_seq} is not stored")
    await _check_range(db, session_id, draft, pinned_seq)

    stats = (
        await db.execute(
            select(
                func.min(Message.id),
                func.max(Message.id),
                func.count(),
                func.min(Message.created_at),
                func.max(Message.created_at),
            ).where(
                Message.session_id == session_id,
                Message.seq.between(draft.first_seq, draft.last_seq),
            )
        )
    ).one()
    first_id, last_id, count, first_at, last_at = stats
    summary = Summary(
        session_id=session_id,
        summary_text=draft.summary_text,
        summary_prompt=draft.summary_prompt,
        model=draft.model,
        temperature=draft.temperature,
        target_summary_tokens=draft.target_summary_tokens,
        keep_last_n=draft.keep_last_n,
        message_count=count,
        approx_tokens=draft.approx_tokens,
        first_message_id=first_id,
        last_message_id=last_id,
        first_seq=draft.first_seq,
        last_seq=draft.last_seq,
        first_message_at=first_at,
        last_message_at=last_at,
        level=draft.level,
        metadata_=draft.metadata,
        created_at=utcnow(),
    )
    db.add(summary)
    await db.flush()
    await _link_messages(db, summary.id, session_id, draft.first_seq, draft.last_seq)
    if draft.absorbs:
        await db.execute(
            update(Summary).where(Summary.id.in_(draft.absorbs)).values(superseded_by=summary.id)
        )
    return summary


async def _link_messages(
    db: AsyncSession, summary_id: int, session_id: int, first_seq: int, last_seq: int
) -> None:
    """Link the summary to every message of its range (roll-ups included), in one statement."""
    await db.execute(
        insert(SummaryMessage).from_select(
            ["summary_id", "message_id"],
            select(literal(summary_id, BigInteger), Message.id).where(
                Message.session_id == session_id, Message.seq.between(first_seq, last_seq)
            ),
        )
    )


async def _check_range(
    db: AsyncSession, session_id: int, draft: SummaryDraft, pinned_seq: int
) -> None:
    live = list(
        await db.scalars(
            select(Summary)
            .where(Summary.session_id == session_id, Summary.superseded_by.is_(None))
            .order_by(Summary.last_seq)
        )
    )
    if not draft.absorbs:
        # a session's first summary starts at 1, or after its pinned prefix
        expected = {live[-1].last_seq + 1} if live else {1, pinned_seq + 1}
        if draft.first_seq not in expected:
            raise SummaryRangeConflict(
                f"summary must start at seq {' or '.join(map(str, sorted(expected)))}, "
                f"not {draft.first_seq}"
            )
        return
    absorbed = [summary for summary in live if summary.id in draft.absorbs]
    if len(absorbed) != len(draft.absorbs):
        raise SummaryRangeConflict("a summary to absorb is no longer live")
    start = live.index(absorbed[0])
    if live[start : start + len(absorbed)] != absorbed:
        raise SummaryRangeConflict("a roll-up absorbs consecutive live summaries, in order")
    if (draft.first_seq, draft.last_seq) != (absorbed[0].first_seq, absorbed[-1].last_seq):
        raise SummaryRangeConflict("a roll-up covers exactly the summaries it absorbs")


async def all_live_summaries(db: AsyncSession, session_id: int) -> list[Summary]:
    """Every live summary of a session, oldest first."""
    return list(
        await db.scalars(
            select(Summary)
            .where(Summary.session_id == session_id, Summary.superseded_by.is_(None))
            .order_by(Summary.last_seq)
        )
    )


@dataclass(frozen=True)
class Backlog:
    """What lies after the newest live summary: the input of the proactive trigger."""

    after_seq: int
    message_count: int
    token_count: int


_summarized_seq = (
    select(func.coalesce(func.max(Summary.last_seq), 0))
    .where(Summary.session_id == bindparam("p_session_id"), Summary.superseded_by.is_(None))
    .scalar_subquery()
)
_BACKLOG = select(
    _summarized_seq,
    select(func.coalesce(func.sum(_messages.token_count), 0))
    .where(
        _messages.session_id == bindparam("p_session_id"),
        _messages.seq > _summarized_seq,
        _messages.seq > bindparam("p_floor"),
    )
    .scalar_subquery(),
)
"""The newest live summary's last seq and the tokens after it, in one round trip."""


async def backlog(db: AsyncSession, session_id: int, last_seq: int, floor: int) -> Backlog:
    """Count and tokens of the messages after the newest live summary and after `floor`
    (the pinned prefix), in an index range scan."""
    row = (await db.execute(_BACKLOG, {"p_session_id": session_id, "p_floor": floor})).one()
    after_seq, tokens = row
    after_seq = max(int(after_seq or 0), floor)
    return Backlog(
        after_seq=after_seq, message_count=last_seq - after_seq, token_count=int(tokens or 0)
    )


async def messages_between(
    db: AsyncSession, session_id: int, first_seq: int, last_seq: int
) -> list[Message]:
    """The messages of seqs `first_seq..last_seq`, ascending."""
    return list(
        await db.scalars(
            select(Message)
            .where(Message.session_id == session_id, Message.seq.between(first_seq, last_seq))
            .order_by(Message.seq)
        )
    )


async def live_fallback_summaries(db: AsyncSession, limit: int) -> list[Summary]:
    """Live summaries written without the model (any session), oldest first."""
    return list(
        await db.scalars(
            select(Summary)
            .where(Summary.model == FALLBACK_MODEL, Summary.superseded_by.is_(None))
            .order_by(Summary.id)
            .limit(limit)
        )
    )


async def summary_before(db: AsyncSession, session_id: int, first_seq: int) -> Summary | None:
    """The live summary ending right before `first_seq`, if any."""
    return await db.scalar(
        select(Summary).where(
            Summary.session_id == session_id,
            Summary.superseded_by.is_(None),
            Summary.last_seq == first_seq - 1,
        )
    )


async def get_session_by_id(db: AsyncSession, session_id: int) -> Session | None:
    return await db.get(Session, session_id)


async def get_summary_by_id(db: AsyncSession, summary_id: int) -> Summary | None:
    return await db.get(Summary, summary_id)


# --- background jobs ------------------------------------------------------------------------


async def enqueue_job(db: AsyncSession, session_id: int, trigger: str, reason: str) -> None:
    """Record pending summarization for a session; a job already pending or running stays."""
    dialect = postgresql if db.get_bind().dialect.name == "postgresql" else sqlite
    now = utcnow()
    await db.execute(
        dialect.insert(SummaryJob)
        .values(
            session_id=session_id,
            trigger=trigger,
            reason=reason,
            status="pending",
            attempts=0,
            run_after=now,
            created_at=now,
        )
        .on_conflict_do_nothing(index_elements=["session_id"])
    )


async def claim_job(db: AsyncSession, lease: timedelta) -> SummaryJob | None:
    """Claim the next due job (or one whose worker's lease ran out).

    PostgreSQL: `FOR UPDATE SKIP LOCKED`, so replicas never claim the same job;
    SQLite: the UPDATE holds the write lock.
    """
    now = utcnow()
    due = (
        select(SummaryJob.id)
        .where(
            or_(
                and_(SummaryJob.status == "pending", SummaryJob.run_after <= now),
                and_(SummaryJob.status == "running", SummaryJob.locked_until < now),
            )
        )
        .order_by(SummaryJob.run_after)
        .limit(1)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    return await db.scalar(
        update(SummaryJob)
        .where(SummaryJob.id == due)
        .values(status="running", attempts=SummaryJob.attempts + 1, locked_until=now + lease)
        .returning(SummaryJob)
        .execution_options(populate_existing=True)
    )


def _claimed(job_id: int, attempt: int) -> list[Any]:
    """WHERE clauses for the job's row while the claim `attempt` still holds it.

    Every claim increments `attempts`, so `(id, attempts)` names one claim: a worker whose
    lease ran out and whose job another worker claimed again no longer matches.
    """
    return [SummaryJob.id == job_id, SummaryJob.status == "running", SummaryJob.attempts == attempt]


async def renew_job_lease(db: AsyncSession, job_id: int, attempt: int, lease: timedelta) -> bool:
    """Extend a running job's lease to `lease` from now; False if the claim is no longer held.

    The claim is lost when the job was finished or released, its session deleted, or its
    lease ran out and another worker claimed it.
    """
    renewed = await db.scalar(
        update(SummaryJob)
        .where(*_claimed(job_id, attempt))
        .values(locked_until=utcnow() + lease)
        .returning(SummaryJob.id)
    )
    return renewed is not None


async def finish_job(db: AsyncSession, job_id: int, *, attempt: int) -> None:
    """Delete a done job, if the claim `attempt` still holds it."""
    await db.execute(delete(SummaryJob).where(*_claimed(job_id, attempt)))


async def release_job(
    db: AsyncSession,
    job_id: int,
    run_after: datetime,
    error: str | None,
    *,
    attempt: int,
) -> None:
    """Put a claimed job back to pending, to run again at `run_after`.

    Only if the claim `attempt` still holds it: a worker that lost its lease must not hand
    back a job another worker is running.
    """
    await db.execute(
        update(SummaryJob)
        .where(*_claimed(job_id, attempt))
        .values(status="pending", locked_until=None, run_after=run_after, last_error=error)
    )


_PENDING_JOB = select(SummaryJob.id).where(SummaryJob.session_id == bindparam("p_session_id"))


async def has_pending_job(db: AsyncSession, session_id: int) -> bool:
    found = await db.scalar(_PENDING_JOB, {"p_session_id": session_id})
    return found is not None


async def pending_job_count(db: AsyncSession) -> int:
    return int(await db.scalar(select(func.count()).select_from(SummaryJob)) or 0)
