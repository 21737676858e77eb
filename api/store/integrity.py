"""Read-only integrity queries of `scripts/verify`: the invariants of docs/design.md section 2.

Every query is scoped to one session and bounded by a `limit` where it can return many rows,
so a check's memory does not grow with the session. They run on `audit.read_only_engine`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from api.db.models import Message, Summary, SummaryMessage
from api.store.rows import SummaryRow

EXAMPLE_LIMIT = 5
"""Offending rows named per check and session: enough to act on, bounded for broken databases."""


@dataclass(frozen=True)
class MessageStats:
    """Count and seq bounds of a session's messages."""

    count: int
    min_seq: int | None
    max_seq: int | None


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
    `range_messages`: messages of its session inside its range.
    """

    summary_id: int
    linked: int
    in_range: int
    range_messages: int


@dataclass(frozen=True)
class CoverageProblem:
    """A message at or before the newest live summary's end, linked to `live_links` live ones."""

    message: MessageRef
    live_links: int


async def message_stats(db: AsyncSession, session_id: int) -> MessageStats:
    count, min_seq, max_seq = (
        await db.execute(
            select(func.count(), func.min(Message.seq), func.max(Message.seq)).where(
                Message.session_id == session_id
            )
        )
    ).one()
    return MessageStats(count=int(count), min_seq=min_seq, max_seq=max_seq)


async def seq_gaps(db: AsyncSession, session_id: int, limit: int = EXAMPLE_LIMIT) -> list[SeqGap]:
    """Missing seq ranges of a session (seqs start at 1), oldest first."""
    previous = func.lag(Message.seq, 1, 0).over(order_by=Message.seq)
    ordered = (
        select(Message.seq.label("seq"), previous.label("previous"))
        .where(Message.session_id == session_id)
        .subquery()
    )
    rows = await db.execute(
        select(ordered.c.previous + 1, ordered.c.seq - 1)
        .where(ordered.c.seq - ordered.c.previous > 1)
        .order_by(ordered.c.seq)
        .limit(limit)
    )
    return [SeqGap(first=int(first), last=int(last)) for first, last in rows]


async def bad_token_counts(db: AsyncSession, session_id: int) -> Sample:
    """Messages whose stored token count is missing or negative."""
    condition = and_(
        Message.session_id == session_id,
        (Message.token_count.is_(None)) | (Message.token_count < 0),
    )
    return await _sample(db, condition)


async def link_stats(db: AsyncSession, session_id: int) -> list[LinkStats]:
    """Per summary of the session: its links against the messages of its range."""
    in_range = and_(
        Message.session_id == Summary.session_id,
        Message.seq.between(Summary.first_seq, Summary.last_seq),
    )
    links = (
        select(
            Summary.id.label("summary_id"),
            func.count(SummaryMessage.message_id).label("linked"),
            func.coalesce(func.sum(case((in_range, 1), else_=0)), 0).label("in_range"),
        )
        .select_from(Summary)
        .outerjoin(SummaryMessage, SummaryMessage.summary_id == Summary.id)
        .outerjoin(Message, Message.id == SummaryMessage.message_id)
        .where(Summary.session_id == session_id)
        .group_by(Summary.id)
        .subquery()
    )
    ranges = (
        select(Summary.id.label("summary_id"), func.count(Message.id).label("range_messages"))
        .select_from(Summary)
        .outerjoin(Message, in_range)
        .where(Summary.session_id == session_id)
        .group_by(Summary.id)
        .subquery()
    )
    rows = await db.execute(
        select(links.c.summary_id, links.c.linked, links.c.in_range, ranges.c.range_messages)
        .join(ranges, ranges.c.summary_id == links.c.summary_id)
        .order_by(links.c.summary_id)
    )
    return [
        LinkStats(summary_id=int(sid), linked=int(linked), in_range=int(inr), range_messages=int(n))
        for sid, linked, inr, n in rows
    ]


async def unlinked_in_range(db: AsyncSession, summary: SummaryRow) -> Sample:
    """Messages inside a summary's range that it does not link."""
    linked = select(SummaryMessage.message_id).where(SummaryMessage.summary_id == summary.id)
    condition = and_(
        Message.session_id == summary.session_id,
        Message.seq.between(summary.first_seq, summary.last_seq),
        Message.id.not_in(linked),
    )
    return await _sample(db, condition)


async def linked_outside_range(db: AsyncSession, summary: SummaryRow) -> Sample:
    """Messages a summary links that are not in its range or not of its session."""
    condition = and_(
        Message.id.in_(
            select(SummaryMessage.message_id).where(SummaryMessage.summary_id == summary.id)
        ),
        ~and_(
            Message.session_id == summary.session_id,
            Message.seq.between(summary.first_seq, summary.last_seq),
        ),
    )
    return await _sample(db, condition)


@dataclass(frozen=True)
class EndMismatch:
    """A summary's `first_message_id` or `last_message_id` is not the message at that end.

    `end`: "first" or "last"; `seq`: the summary's seq at that end; `actual_id`: the message
    of the session at `seq`, None if there is none; `recorded_session_id` and `recorded_seq`:
    where the recorded id points, None if no message has that id.
    """

    summary_id: int
    end: str
    seq: int
    recorded_id: int
    actual_id: int | None
    recorded_session_id: int | None
    recorded_seq: int | None


async def end_mismatches(db: AsyncSession, session_id: int) -> list[EndMismatch]:
    """Summaries of a session whose first/last message ids are not the messages at their ends.

    At most two rows per summary, by summary id, first end before last.
    """
    found: list[EndMismatch] = []
    ends = (
        ("first", Summary.first_seq, Summary.first_message_id),
        ("last", Summary.last_seq, Summary.last_message_id),
    )
    for end, seq, recorded_id in ends:
        at_seq, recorded = aliased(Message), aliased(Message)
        rows = await db.execute(
            select(Summary.id, seq, recorded_id, at_seq.id, recorded.session_id, recorded.seq)
            .select_from(Summary)
            .outerjoin(at_seq, and_(at_seq.session_id == Summary.session_id, at_seq.seq == seq))
            .outerjoin(recorded, recorded.id == recorded_id)
            .where(
                Summary.session_id == session_id,
                or_(at_seq.id.is_(None), at_seq.id != recorded_id),
            )
        )
        found.extend(
            EndMismatch(int(sid), end, int(at), int(rid), actual, rec_session, rec_seq)
            for sid, at, rid, actual, rec_session, rec_seq in rows
        )
    return sorted(found, key=lambda mismatch: (mismatch.summary_id, mismatch.end != "first"))


async def coverage_problems(
    db: AsyncSession,
    session_id: int,
    through_seq: int,
    limit: int = EXAMPLE_LIMIT,
    after_seq: int = 0,
) -> tuple[int, list[CoverageProblem]]:
    """Messages with seq in `after_seq+1..through_seq` not linked to exactly one live summary
    (invariant 1; the pinned prefix, up to `after_seq`, is never summarized).

    Returns how many there are and the first few.
    """
    live_links = func.count(Summary.id)
    per_message = (
        select(Message.id.label("id"), Message.seq.label("seq"), live_links.label("live_links"))
        .select_from(Message)
        .outerjoin(SummaryMessage, SummaryMessage.message_id == Message.id)
        .outerjoin(
            Summary,
            and_(Summary.id == SummaryMessage.summary_id, Summary.superseded_by.is_(None)),
        )
        .where(
            Message.session_id == session_id,
            Message.seq > after_seq,
            Message.seq <= through_seq,
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
