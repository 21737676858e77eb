"""Messages: the append and the listings (the history loader reads in `api.store.loader`).

Functions take the caller's AsyncSession and never commit: the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from api.db.models import Message, utcnow
from api.errors import Conflict
from api.store import sessions
from api.store.rows import MESSAGE_COLUMNS, UNBOUNDED, MessageRow, NewMessage, SessionRow

CREATE_ATTEMPTS = 3
"""Rounds of create-then-lock an append tries while concurrent DELETEs remove the session."""


_MESSAGE_TABLE = cast(Table, Message.__table__)
_messages = _MESSAGE_TABLE.c

# The statements are built once: SQLAlchemy memoizes a statement's cache key on the object,
# so reusing it skips the per-call traversal that a freshly built select() pays.
_RANGE = (
    select(*MESSAGE_COLUMNS)
    .where(
        _messages.session_id == bindparam("session_id"),
        _messages.seq > bindparam("after_seq"),
        _messages.seq <= bindparam("last_seq"),
    )
    .order_by(_messages.seq)
    .limit(bindparam("limit"))
)


@dataclass(frozen=True)
class AppendOutcome:
    session: SessionRow
    messages: list[MessageRow]
    inserted: int


def in_batch_order(
    batch: Sequence[NewMessage], fresh: Sequence[MessageRow], stored: dict[str, MessageRow]
) -> list[MessageRow]:
    """The answer to an append, one row per message of `batch`: the `fresh` rows it inserted
    (in order: each message without a client id, and the first with each client id that
    `stored` does not hold), and the `stored` row for every repeated client id."""
    by_client_id = dict(stored)
    inserted = iter(fresh)
    answer: list[MessageRow] = []
    for new in batch:
        if new.client_id is not None and new.client_id in by_client_id:
            answer.append(by_client_id[new.client_id])
            continue
        row = next(inserted)
        if new.client_id is not None:
            by_client_id[new.client_id] = row
        answer.append(row)
    return answer


def _bind(name: str) -> Any:
    return bindparam(f"p_{name}", type_=_messages[name].type)


_INSERT_MESSAGES = (
    insert(_MESSAGE_TABLE)
    .values({name: _bind(name) for name in MessageRow._fields if name != "id"})
    .returning(_messages.seq, _messages.id)
)
"""One Core INSERT for the whole batch (insertmanyvalues), returning the new ids by seq.

Matching ids by seq instead of asking for `sort_by_parameter_order` keeps the statement a
plain multi-row INSERT (no sentinel column, no sort on the server).
"""


_INSERT_PARAMETERS = tuple(f"p_{name}" for name in MessageRow._fields if name != "id")
"""The INSERT's parameter names, in `MessageRow` order: session_id, seq, the message, created_at."""


def _message_row(session_id: int, seq: int, message: NewMessage, now: datetime) -> dict[str, Any]:
    return dict(zip(_INSERT_PARAMETERS, (session_id, seq, *message, now), strict=True))


async def _insert_messages(
    db: AsyncSession,
    session_id: int,
    first_seq: int,
    batch: Sequence[NewMessage],
    now: datetime,
) -> list[MessageRow]:
    """Insert `batch` at seqs `first_seq...`; returns the stored messages."""
    rows = [_message_row(session_id, first_seq + i, new, now) for i, new in enumerate(batch)]
    id_of_seq: dict[int, int] = {seq: id_ for seq, id_ in await db.execute(_INSERT_MESSAGES, rows)}
    return [
        MessageRow(id_of_seq[first_seq + i], session_id, first_seq + i, *new, now)
        for i, new in enumerate(batch)
    ]


async def _messages_by_client_id(
    db: AsyncSession, session_id: int, batch: Sequence[NewMessage]
) -> dict[str, MessageRow]:
    client_ids = {message.client_id for message in batch if message.client_id is not None}
    if not client_ids:
        return {}
    result = await db.execute(
        select(*MESSAGE_COLUMNS).where(
            _messages.session_id == session_id, _messages.client_id.in_(client_ids)
        )
    )
    rows = [MessageRow._make(row) for row in result]
    return {row.client_id: row for row in rows if row.client_id is not None}


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
    leading = sessions.leading_pinned(batch) if reserve else 0
    session = await sessions.lock_session(db, tenant, external_id, reserve, leading)
    for _attempt in range(CREATE_ATTEMPTS):
        if session is not None:
            break
        await sessions.create_if_missing(db, tenant, external_id)
        # None again only if a concurrent DELETE removed the row just inserted or found.
        session = await sessions.lock_session(db, tenant, external_id, reserve, leading)
    if session is None:
        raise Conflict("the session was deleted while this append ran; retry")
    now = utcnow()
    if reserve:
        first_seq = session.last_seq - reserve + 1
        inserted = await _insert_messages(db, session.id, first_seq, batch, now)
        return AppendOutcome(session, inserted, len(inserted))

    stored = await _messages_by_client_id(db, session.id, batch)
    fresh: list[NewMessage] = []
    seen = set(stored)
    for new in batch:
        if new.client_id is not None:
            if new.client_id in seen:
                continue
            seen.add(new.client_id)
        fresh.append(new)
    new_rows: list[MessageRow] = []
    if fresh:
        new_rows = await _insert_messages(db, session.id, session.last_seq + 1, fresh, now)
        last_seq = session.last_seq + len(fresh)
        pinned_seq = session.pinned_seq
        if pinned_seq == session.last_seq:
            pinned_seq += sessions.leading_pinned(fresh)
        await sessions.set_last_seq(db, session.id, last_seq, pinned_seq)
        session = session._replace(last_seq=last_seq, pinned_seq=pinned_seq)
    return AppendOutcome(session, in_batch_order(batch, new_rows, stored), len(fresh))


async def messages_in_range(
    db: AsyncSession,
    session_id: int,
    after_seq: int,
    last_seq: int = UNBOUNDED,
    limit: int = UNBOUNDED,
) -> list[MessageRow]:
    """The first `limit` messages of seqs `after_seq + 1..last_seq`, ascending: an index
    range scan on `(session_id, seq)`."""
    result = await db.execute(
        _RANGE,
        {"session_id": session_id, "after_seq": after_seq, "last_seq": last_seq, "limit": limit},
    )
    return [MessageRow._make(row) for row in result]
