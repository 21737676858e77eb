"""Read-only integrity queries of `scripts/verify`: the invariants of docs/design.md section 2.

Every query is scoped to one session and bounded by a `limit` where it can return many rows,
so a check's memory does not grow with the session. They run on `audit.read_only_engine`.

Removals (`api.store.removal`) shape what must hold: a removed message stays as a tombstone
keeping its seq, linked to no live summary; an erased summary keeps the links it was made
with (some of them now tombstones) and is not live; a summary made after a removal links the
messages of its range that were not removed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, and_, case, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from api.db.models import Message, Summary, SummaryMessage
from api.store.rows import LINK_OF_MESSAGE, LINK_OF_SUMMARY, SummaryRow, live, shown

EXAMPLE_LIMIT = 5
"""Offending rows named per check and session: enough to act on, bounded for broken databases."""


@dataclass(frozen=True)
class MessageStats:
    """Count (tombstones included), seq bounds and tombstones of a session's messages."""

    count: int
    min_seq: int | None
    max_seq: int | None
    removed: int = 0


@dataclass(frozen=True)
class SeqGap:
    """Seqs `first..last` are missing from a session."""

    first: int
    last: int


@dataclass(frozen=True)
class MessageRef:
    """A message named in a report."""

    id: int
    seq: int


@dataclass(frozen=True)
class Sample:
    """How many rows break a rule, and the first few of them (at most EXAMPLE_LIMIT)."""

    total: int
    examples: list[MessageRef]


@dataclass(frozen=True)
class LinkStats:
    """Links of one summary against the messages of its seq range.

    `linked`: links it has; `in_range`: links to messages of its session inside its range;
    `kept_in_range`: those of them to messages not removed; `range_messages`: messages of its
    session inside its range that are not removed; `removed_linked`: links to tombstones.
    """

    summary_id: int
    linked: int
    in_range: int
    kept_in_range: int
    range_messages: int
    removed_linked: int


@dataclass(frozen=True)
class CoverageProblem:
    """A message at or before the newest live summary's end, linked to `live_links` live ones."""

    message: MessageRef
    live_links: int


_REMOVED = Message.removed_at.is_not(None)
_KEPT = shown(Message)
"""Messages a summary made after them links: neither removed nor orphaned."""
_LIVE = live(Summary)


def _count_where(condition: Any) -> Any:
    """A portable `count(*) FILTER (WHERE condition)`: 0, not NULL, over no rows."""
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)


async def message_stats(db: AsyncSession, session_key: int) -> MessageStats:
    count, min_seq, max_seq, removed = (
        await db.execute(
            select(
                func.count(), func.min(Message.seq), func.max(Message.seq), _count_where(_REMOVED)
            ).where(Message.session_id == session_key)
        )
    ).one()
    return MessageStats(count=int(count), min_seq=min_seq, max_seq=max_seq, removed=int(removed))


async def seq_gaps(db: AsyncSession, session_key: int, limit: int = EXAMPLE_LIMIT) -> list[SeqGap]:
    """Missing seq ranges of a session (seqs start at 1), oldest first."""
    previous = func.lag(Message.seq, 1, 0).over(order_by=Message.seq)
    ordered = (
        select(Message.seq.label("seq"), previous.label("previous"))
        .where(Message.session_id == session_key)
        .subquery()
    )
    rows = await db.execute(
        select(ordered.c.previous + 1, ordered.c.seq - 1)
        .where(ordered.c.seq - ordered.c.previous > 1)
        .order_by(ordered.c.seq)
        .limit(limit)
    )
    return [SeqGap(first=int(first), last=int(last)) for first, last in rows]


async def bad_token_counts(db: AsyncSession, session_key: int) -> Sample:
    """Messages whose stored token count is missing or negative."""
    condition = and_(
        Message.session_id == session_key,
        (Message.token_count.is_(None)) | (Message.token_count < 0),
    )
    return await _sample(db, condition)


async def tombstones_with_content(db: AsyncSession, session_key: int) -> Sample:
    """Removed messages that still hold anything of what was appended (a tombstone keeps only
    its seq, role and times)."""
    held = or_(
        Message.content.is_not(None),
        Message.content_parts.is_not(None),
        Message.name.is_not(None),
        Message.tool_calls.is_not(None),
        Message.tool_call_id.is_not(None),
        Message.metadata_.is_not(None),
        Message.client_id.is_not(None),
        Message.item.is_not(None),
        Message.token_count != 0,
    )
    return await _sample(db, and_(Message.session_id == session_key, _REMOVED, held))


async def link_stats(db: AsyncSession, session_key: int) -> list[LinkStats]:
    """Per summary of the session: its links against the messages of its range."""
    in_range = and_(
        Message.session_id == Summary.session_id,
        Message.seq.between(Summary.first_seq, Summary.last_seq),
    )
    links = (
        select(
            Summary.id.label("summary_id"),
            func.count(SummaryMessage.message_id).label("linked"),
            _count_where(in_range).label("in_range"),
            _count_where(and_(in_range, _KEPT)).label("kept_in_range"),
            _count_where(_REMOVED).label("removed_linked"),
        )
        .select_from(Summary)
        .outerjoin(SummaryMessage, LINK_OF_SUMMARY)
        .outerjoin(Message, LINK_OF_MESSAGE)
        .where(Summary.session_id == session_key)
        .group_by(Summary.id)
        .subquery()
    )
    ranges = (
        select(Summary.id.label("summary_id"), func.count(Message.id).label("range_messages"))
        .select_from(Summary)
        .outerjoin(Message, and_(in_range, _KEPT))
        .where(Summary.session_id == session_key)
        .group_by(Summary.id)
        .subquery()
    )
    rows = await db.execute(
        select(
            links.c.summary_id,
            links.c.linked,
            links.c.in_range,
            links.c.kept_in_range,
            ranges.c.range_messages,
            links.c.removed_linked,
        )
        .join(ranges, ranges.c.summary_id == links.c.summary_id)
        .order_by(links.c.summary_id)
    )
    return [
        LinkStats(*(int(value) for value in (sid, linked, inr, kept, n, removed)))
        for sid, linked, inr, kept, n, removed in rows
    ]


def _links_of(summary: SummaryRow) -> Select[Any]:
    """The ids of the messages a summary links."""
    return select(SummaryMessage.message_id).where(
        SummaryMessage.session_id == summary.session_id, SummaryMessage.summary_id == summary.id
    )


async def unlinked_in_range(db: AsyncSession, summary: SummaryRow) -> Sample:
    """Messages inside a summary's range, not removed, that it does not link."""
    linked = _links_of(summary)
    condition = and_(
        Message.session_id == summary.session_id,
        Message.seq.between(summary.first_seq, summary.last_seq),
        _KEPT,
        Message.id.not_in(linked),
    )
    return await _sample(db, condition)


async def removed_linked(db: AsyncSession, summary: SummaryRow) -> Sample:
    """Removed messages a summary links."""
    linked = _links_of(summary)
    return await _sample(db, and_(Message.id.in_(linked), _REMOVED))


async def linked_outside_range(db: AsyncSession, summary: SummaryRow) -> Sample:
    """Messages a summary links that are not in its range or not of its session."""
    condition = and_(
        Message.id.in_(_links_of(summary)),
        ~and_(
            Message.session_id == summary.session_id,
            Message.seq.between(summary.first_seq, summary.last_seq),
        ),
    )
    return await _sample(db, condition)


@dataclass(frozen=True)
class EndMismatch:
    """A summary's `first_message_id` or `last_message_id` is not the message at that end.

    The message at an end is the first (last) message of the range that the summary was made
    from: not removed, or linked to it (removed after it was made); tombstones removed before
    it was made are skipped, so that is the message at `seq` unless a removal intervened.
    `end`: "first" or "last"; `seq`: the summary's seq at that end; `actual_id` and
    `actual_seq`: the message at that end, None if its range holds none; `recorded_session_key`
    and `recorded_seq`: where the recorded id points, None if no message has that id.
    """

    summary_id: int
    end: str
    seq: int
    recorded_id: int
    actual_id: int | None
    actual_seq: int | None
    recorded_session_key: int | None
    recorded_seq: int | None


async def end_mismatches(db: AsyncSession, session_key: int) -> list[EndMismatch]:
    """Summaries of a session whose first/last message ids are not the messages at their ends.

    At most two rows per summary, by summary id, first end before last.
    """
    found: list[EndMismatch] = []
    ends = (
        ("first", Summary.first_seq, Summary.first_message_id, func.min),
        ("last", Summary.last_seq, Summary.last_message_id, func.max),
    )
    for end, seq, recorded_id, pick in ends:
        source, at_end, recorded = aliased(Message), aliased(Message), aliased(Message)
        linked = select(SummaryMessage.message_id).where(LINK_OF_SUMMARY).correlate(Summary)
        end_seq = (
            select(pick(source.seq))
            .where(
                source.session_id == Summary.session_id,
                source.seq.between(Summary.first_seq, Summary.last_seq),
                or_(shown(source), source.id.in_(linked)),
            )
            .correlate(Summary)
            .scalar_subquery()
        )
        rows = await db.execute(
            select(
                Summary.id,
                seq,
                recorded_id,
                at_end.id,
                at_end.seq,
                recorded.session_id,
                recorded.seq,
            )
            .select_from(Summary)
            .outerjoin(at_end, and_(at_end.session_id == Summary.session_id, at_end.seq == end_seq))
            .outerjoin(recorded, recorded.id == recorded_id)
            .where(
                Summary.session_id == session_key,
                or_(at_end.id.is_(None), at_end.id != recorded_id),
            )
        )
        found.extend(
            EndMismatch(int(sid), end, int(at), int(rid), actual, actual_seq, rec_session, rec_seq)
            for sid, at, rid, actual, actual_seq, rec_session, rec_seq in rows
        )
    return sorted(found, key=lambda mismatch: (mismatch.summary_id, mismatch.end != "first"))


async def coverage_problems(
    db: AsyncSession,
    session_key: int,
    through_seq: int,
    limit: int = EXAMPLE_LIMIT,
    after_seq: int = 0,
) -> tuple[int, list[CoverageProblem]]:
    """Messages with seq in `after_seq+1..through_seq`, not removed, not linked to exactly
    one live summary (invariant 1; the pinned prefix, up to `after_seq`, is never summarized).

    Returns how many there are and the first few.
    """
    live_links = func.count(Summary.id)
    per_message = (
        select(Message.id.label("id"), Message.seq.label("seq"), live_links.label("live_links"))
        .select_from(Message)
        .outerjoin(SummaryMessage, LINK_OF_MESSAGE)
        .outerjoin(Summary, and_(LINK_OF_SUMMARY, _LIVE))
        .where(
            Message.session_id == session_key,
            Message.seq > after_seq,
            Message.seq <= through_seq,
            _KEPT,
        )
        .group_by(Message.id, Message.seq)
        .having(live_links != 1)
        .subquery()
    )
    total = int(await db.scalar(select(func.count()).select_from(per_message)) or 0)
    if total == 0:
        return 0, []
    rows = await db.execute(select(per_message).order_by(per_message.c.seq).limit(limit))
    problems = [
        CoverageProblem(message=MessageRef(id=int(mid), seq=int(seq)), live_links=int(count))
        for mid, seq, count in rows
    ]
    return total, problems


async def removed_in_live(db: AsyncSession, session_key: int) -> Sample:
    """Removed messages linked to a live summary: a live summary must not cover one."""
    in_live = (
        select(SummaryMessage.message_id)
        .join(Summary, LINK_OF_SUMMARY)
        .where(SummaryMessage.session_id == session_key, Summary.session_id == session_key, _LIVE)
    )
    return await _sample(
        db, and_(Message.session_id == session_key, _REMOVED, Message.id.in_(in_live))
    )


async def _sample(db: AsyncSession, condition: Any) -> Sample:
    total = int(await db.scalar(select(func.count()).select_from(Message).where(condition)) or 0)
    if total == 0:
        return Sample(total=0, examples=[])
    rows = await db.execute(
        select(Message.id, Message.seq).where(condition).order_by(Message.seq).limit(EXAMPLE_LIMIT)
    )
    return Sample(
        total=total, examples=[MessageRef(id=int(mid), seq=int(seq)) for mid, seq in rows]
    )


async def removed_between(db: AsyncSession, session_key: int, first: int, last: int) -> bool:
    """Whether seqs `first..last` hold a removed message: a hole between live summaries
    is one a removal opened (its leaf erased) only then."""
    found = await db.scalar(
        select(Message.id)
        .where(Message.session_id == session_key, Message.seq.between(first, last), _REMOVED)
        .limit(1)
    )
    return found is not None
