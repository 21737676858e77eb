"""Summaries: the live ones, saving one with its links, the backlog a trigger reads.

Functions take the caller's AsyncSession and never commit: the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import (
    BigInteger,
    bindparam,
    delete,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession

from api.db.models import MESSAGES, SUMMARIES, Message, Session, Summary, SummaryMessage, utcnow
from api.errors import (
    SessionGone,
    SummaryNotFound,
    SummaryRangeConflict,
)
from api.store.keys import new_id
from api.store.retention import Expiry, unexpired
from api.store.rows import SUMMARY_COLUMNS, UNBOUNDED, SummaryRow, live, shown
from summarizer.summarize import FALLBACK_MODEL

_summaries = SUMMARIES.c
_messages = MESSAGES.c

_LIVE_SUMMARIES = (
    select(*SUMMARY_COLUMNS)
    .where(
        _summaries.session_id == bindparam("p_session_id"),
        live(_summaries),
    )
    .order_by(_summaries.last_seq.desc())
    .limit(bindparam("p_limit"))
)


async def live_summaries(
    db: AsyncSession, session_key: int, limit: int = UNBOUNDED
) -> list[SummaryRow]:
    """The newest `limit` live summaries, oldest first (index on `(session_id, last_seq)`)."""
    result = await db.execute(_LIVE_SUMMARIES, {"p_session_id": session_key, "p_limit": limit})
    newest_first = [SummaryRow._make(row) for row in result]
    newest_first.reverse()
    return newest_first


def holes(live: Sequence[SummaryRow], floor: int) -> list[tuple[int, int]]:
    """The seq ranges (first, last) before or between `live` summaries that none covers,
    after `floor` (the pinned prefix): what a removal erased, loaded raw until its leaf is
    made again. A range may hold removed messages only: it then needs no leaf."""
    found: list[tuple[int, int]] = []
    end = floor
    for summary in sorted(live, key=lambda summary: summary.first_seq):
        if summary.first_seq > end + 1:
            found.append((end + 1, summary.first_seq - 1))
        end = max(end, summary.last_seq)
    return found


_IN_RANGE = (
    _messages.session_id == bindparam("p_session_id"),
    _messages.seq.between(bindparam("p_first"), bindparam("p_last")),
)
_SHOWN_IN_RANGE = select(_messages.seq).where(*_IN_RANGE, shown(_messages)).limit(1)
_REMOVED_IN_RANGE = select(_messages.seq).where(*_IN_RANGE, _messages.removed_at.is_not(None))


async def open_holes(
    db: AsyncSession, session_key: int, ranges: Sequence[tuple[int, int]]
) -> list[tuple[int, int]]:
    """Those of `ranges` (`holes`) a removal opened (they hold a tombstone: a range before the
    oldest live summary may be a pinned prefix that is no longer pinned) and that hold a shown
    message: the ones a leaf is owed for."""
    found: list[tuple[int, int]] = []
    for first, last in ranges:
        params = {"p_session_id": session_key, "p_first": first, "p_last": last}
        if (await db.execute(_SHOWN_IN_RANGE, params)).first() is not None and (
            await db.execute(_REMOVED_IN_RANGE.limit(1), params)
        ).first() is not None:
            found.append((first, last))
    return found


def _summary(row: Any) -> SummaryRow | None:
    return None if row is None else SummaryRow._make(row)


async def live_summary_counts(db: AsyncSession, session_keys: Sequence[int]) -> dict[int, int]:
    if not session_keys:
        return {}
    rows = await db.execute(
        select(Summary.session_id, func.count())
        .where(
            Summary.session_id.in_(session_keys),
            live(Summary),
        )
        .group_by(Summary.session_id)
    )
    return {session_key: count for session_key, count in rows}


async def list_summaries(
    db: AsyncSession,
    session_key: int,
    include_superseded: bool,
    limit: int,
    before_id: int | None,
) -> list[SummaryRow]:
    """Summaries newest first, keyset-paginated by id."""
    query = select(*SUMMARY_COLUMNS).where(_summaries.session_id == session_key)
    if not include_superseded:
        query = query.where(live(_summaries))
    if before_id is not None:
        query = query.where(_summaries.id < before_id)
    result = await db.execute(query.order_by(_summaries.id.desc()).limit(limit))
    return [SummaryRow._make(row) for row in result]


async def get_summary(db: AsyncSession, tenant: str, summary_id: int) -> tuple[SummaryRow, str]:
    """A tenant's summary, with its session's session id (the client's); none of an expired
    session."""
    row = (
        await db.execute(
            select(*SUMMARY_COLUMNS, Session.external_id)
            .join(Session, Session.id == _summaries.session_id)
            .where(_summaries.id == summary_id, Session.tenant == tenant, unexpired(Session)),
            Expiry.of(db).params(),
        )
    ).first()
    if row is None:
        raise SummaryNotFound(summary_id)
    *values, external_id = row
    return SummaryRow._make(values), external_id


async def get_summary_by_id(
    db: AsyncSession, session_key: int, summary_id: int
) -> SummaryRow | None:
    found = select(*SUMMARY_COLUMNS).where(
        _summaries.session_id == session_key, _summaries.id == summary_id
    )
    return _summary((await db.execute(found)).first())


async def summary_message_ids(db: AsyncSession, summary: SummaryRow) -> list[int]:
    rows = await db.scalars(
        select(SummaryMessage.message_id)
        .where(
            SummaryMessage.session_id == summary.session_id,
            SummaryMessage.summary_id == summary.id,
        )
        .order_by(SummaryMessage.message_id)
    )
    return list(rows)


async def absorbed_by(db: AsyncSession, summary: SummaryRow) -> list[SummaryRow]:
    """The summaries `summary` absorbed (superseded by it), oldest first: read in its range
    of the index on `(session_id, last_seq)`."""
    result = await db.execute(
        select(*SUMMARY_COLUMNS)
        .where(
            _summaries.session_id == summary.session_id,
            _summaries.last_seq.between(summary.first_seq, summary.last_seq),
            _summaries.superseded_by == summary.id,
        )
        .order_by(_summaries.first_seq)
    )
    return [SummaryRow._make(row) for row in result]


async def delete_covers(db: AsyncSession, session_key: int, cover_ids: Sequence[int]) -> None:
    """Delete live covers (`api.summary_forest`), under the session's lock: what they stood
    for is live again (its `superseded_by` set null first), their links go with them. A
    cover is a view of forest roots that stay stored, so no fact's trace is lost."""
    await db.execute(
        update(Session).where(Session.id == session_key).values(last_seq=Session.last_seq)
    )
    await db.execute(
        update(Summary)
        .where(Summary.session_id == session_key, Summary.superseded_by.in_(cover_ids))
        .values(superseded_by=None)
    )
    await db.execute(
        delete(Summary).where(Summary.session_id == session_key, Summary.id.in_(cover_ids))
    )


async def summary_before(db: AsyncSession, session_key: int, first_seq: int) -> SummaryRow | None:
    """The live summary ending right before `first_seq`, if any."""
    query = select(*SUMMARY_COLUMNS).where(
        _summaries.session_id == session_key,
        live(_summaries),
        _summaries.last_seq == first_seq - 1,
    )
    return _summary((await db.execute(query)).first())


async def live_fallback_summaries(db: AsyncSession, limit: int) -> list[SummaryRow]:
    """Live summaries written without the model (any session), oldest first."""
    result = await db.execute(
        select(*SUMMARY_COLUMNS)
        .where(
            _summaries.model == FALLBACK_MODEL,
            live(_summaries),
        )
        .order_by(_summaries.id)
        .limit(limit)
    )
    return [SummaryRow._make(row) for row in result]


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
    source_count: int | None = None
    """The messages of the range the summary was made from (not for a roll-up): if the range
    holds another number when it is saved, a message was removed meanwhile."""


class SourceSpan(NamedTuple):
    """What a summary's row says of the messages it was made from."""

    first_message_id: int
    last_message_id: int
    message_count: int
    first_message_at: datetime
    last_message_at: datetime


def summary_values(
    draft: SummaryDraft, session_key: int, sources: SourceSpan, created_at: datetime
) -> dict[str, Any]:
    """The columns of the row `draft` becomes, but its id and its later states (superseded,
    erased): what `save_summary` inserts and what a preview shows unsaved."""
    return {
        "session_id": session_key,
        "summary_text": draft.summary_text,
        "summary_prompt": draft.summary_prompt,
        "model": draft.model,
        "temperature": draft.temperature,
        "target_summary_tokens": draft.target_summary_tokens,
        "keep_last_n": draft.keep_last_n,
        "approx_tokens": draft.approx_tokens,
        "first_seq": draft.first_seq,
        "last_seq": draft.last_seq,
        "level": draft.level,
        "metadata": draft.metadata,
        "created_at": created_at,
        **sources._asdict(),
    }


async def _check_range(
    db: AsyncSession, session_key: int, draft: SummaryDraft, pinned_seq: int
) -> None:
    live = await live_summaries(db, session_key)
    if not draft.absorbs:
        # a leaf follows the live summary before it (the session's first starts at 1, or after
        # its pinned prefix) and fills the hole up to the one after it, if any
        before = [summary for summary in live if summary.last_seq < draft.first_seq]
        after = [summary for summary in live if summary.first_seq > draft.last_seq]
        expected = {before[-1].last_seq + 1} if before else {1, pinned_seq + 1}
        if draft.first_seq not in expected:
            raise SummaryRangeConflict(
                f"summary must start at seq {' or '.join(map(str, sorted(expected)))}, "
                f"not {draft.first_seq}"
            )
        if len(before) + len(after) != len(live):
            raise SummaryRangeConflict(
                f"seqs {draft.first_seq}..{draft.last_seq} overlap a live summary"
            )
        if after and after[0].first_seq != draft.last_seq + 1:
            raise SummaryRangeConflict(
                f"a summary filling a hole ends at seq {after[0].first_seq - 1}, "
                f"not {draft.last_seq}"
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


async def _link_messages(
    db: AsyncSession, summary_id: int, session_key: int, first_seq: int, last_seq: int
) -> None:
    """Link the summary to every message of its range (roll-ups included; removed and
    orphaned ones left out), in one statement."""
    await db.execute(
        insert(SummaryMessage).from_select(
            ["session_id", "summary_id", "message_id"],
            select(
                literal(session_key, BigInteger), literal(summary_id, BigInteger), Message.id
            ).where(
                Message.session_id == session_key,
                Message.seq.between(first_seq, last_seq),
                shown(Message),
            ),
        )
    )


async def save_summary(db: AsyncSession, session_key: int, draft: SummaryDraft) -> SummaryRow:
    """Write a summary, its links and any superseding update, under the session's lock.

    The range is checked inside the transaction against the live summaries, so a
    duplicate or overlapping summary cannot land even when two writers race.
    """
    locked = (
        await db.execute(
            update(Session)
            .where(Session.id == session_key)
            .values(last_seq=Session.last_seq)
            .returning(Session.last_seq, Session.pinned_seq)
        )
    ).first()
    if locked is None:
        raise SessionGone("the session no longer exists")
    last_seq, pinned_seq = locked
    if draft.last_seq < draft.first_seq or draft.last_seq > last_seq or draft.first_seq < 1:
        raise SummaryRangeConflict(f"seq range {draft.first_seq}..{draft.last_seq} is not stored")
    await _check_range(db, session_key, draft, pinned_seq)

    stats = (
        await db.execute(
            select(
                func.min(Message.id),
                func.max(Message.id),
                func.count(),
                func.min(Message.created_at),
                func.max(Message.created_at),
            ).where(
                Message.session_id == session_key,
                Message.seq.between(draft.first_seq, draft.last_seq),
                shown(Message),
            )
        )
    ).one()
    first_id, last_id, count, first_at, last_at = stats
    if count == 0 or (draft.source_count is not None and count != draft.source_count):
        raise SummaryRangeConflict(
            f"a message of seqs {draft.first_seq}..{draft.last_seq} was removed while it was "
            "being summarized"
        )
    sources = SourceSpan(first_id, last_id, count, first_at, last_at)
    insert_summary = insert(SUMMARIES).values(
        **summary_values(draft, session_key, sources, utcnow()),
        **new_id(db.get_bind().dialect.name, SUMMARIES),
    )
    summary = SummaryRow._make((await db.execute(insert_summary.returning(*SUMMARY_COLUMNS))).one())
    await _link_messages(db, summary.id, session_key, draft.first_seq, draft.last_seq)
    if draft.absorbs:
        await db.execute(
            update(Summary)
            .where(Summary.session_id == session_key, Summary.id.in_(draft.absorbs))
            .values(superseded_by=summary.id)
        )
    return summary


@dataclass(frozen=True)
class Backlog:
    """What lies after the newest live summary: the input of the proactive trigger."""

    after_seq: int
    message_count: int
    token_count: int | None
    """Of the first `message_limit` messages at most: more cannot change the trigger's answer
    (that many messages reach the message limit whatever their tokens). None where an
    append's statement did not count them, the messages alone deciding (`BacklogCounting`)."""


_summarized_seq = (
    select(func.coalesce(func.max(Summary.last_seq), 0))
    .where(
        Summary.session_id == bindparam("p_session_id"),
        live(Summary),
    )
    .scalar_subquery()
)
_BACKLOG = select(
    _summarized_seq,
    select(func.coalesce(func.sum(_messages.token_count), 0))
    .where(
        _messages.session_id == bindparam("p_session_id"),
        _messages.seq > _summarized_seq,
        _messages.seq > bindparam("p_floor"),
        # after_seq is the larger of the two, so this reads at most `p_limit` + the smaller
        _messages.seq <= _summarized_seq + bindparam("p_floor") + bindparam("p_limit"),
    )
    .scalar_subquery(),
)
"""The newest live summary's last seq and the tokens after it, in one round trip."""


async def backlog(
    db: AsyncSession, session_key: int, last_seq: int, floor: int, message_limit: int
) -> Backlog:
    """Count and tokens of the messages after the newest live summary and after `floor`
    (the pinned prefix), in an index range scan of at most about `message_limit` rows."""
    params = {"p_session_id": session_key, "p_floor": floor, "p_limit": message_limit}
    row = (await db.execute(_BACKLOG, params)).one()
    after_seq, tokens = row
    after_seq = max(int(after_seq or 0), floor)
    return Backlog(
        after_seq=after_seq, message_count=last_seq - after_seq, token_count=int(tokens or 0)
    )
