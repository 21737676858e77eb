"""Invariants 1 and 2 of docs/design.md section 2, checked straight from the tables."""

from __future__ import annotations

from collections import Counter

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from api.db.models import Message, Session, Summary, SummaryMessage


async def invariant_violations(db: AsyncSession, session_key: int) -> list[str]:
    """Every way the session breaks invariants 1 (no message lost; removed ones left out) and 2
    (live summaries in order, never overlapping; a hole between them only where a removal
    erased the leaf there, so it holds a tombstone: its messages are linked to no live
    summary)."""
    live = list(
        await db.scalars(
            select(Summary)
            .where(
                Summary.session_id == session_key,
                Summary.superseded_by.is_(None),
                Summary.erased_at.is_(None),
            )
            .order_by(Summary.first_seq)
        )
    )
    problems: list[str] = []
    pinned_seq = int(
        await db.scalar(select(Session.pinned_seq).where(Session.id == session_key)) or 0
    )
    # the first live summary starts at 1, or after the pinned prefix it leaves out
    pinned = min(pinned_seq, live[0].first_seq - 1) if live else pinned_seq
    expected_first = pinned + 1
    in_holes: set[int] = set()
    holes: list[tuple[int, int]] = []
    for summary in live:
        if summary.first_seq < expected_first:
            problems.append(f"live summary {summary.id} starts at {summary.first_seq}")
        elif summary.first_seq > expected_first:
            holes.append((expected_first, summary.first_seq - 1))
            in_holes.update(range(expected_first, summary.first_seq))
        expected_first = summary.last_seq + 1
    newest_last = live[-1].last_seq if live else 0
    live_ids = [summary.id for summary in live]
    links = Counter(
        (
            await db.execute(
                select(SummaryMessage.message_id).where(SummaryMessage.summary_id.in_(live_ids))
            )
        ).scalars()
    )
    messages = (
        await db.execute(
            select(Message.id, Message.seq, Message.removed_at, Message.orphaned_at).where(
                Message.session_id == session_key
            )
        )
    ).all()
    removed = {seq for _, seq, removed_at, _ in messages if removed_at is not None}
    for first, last in holes:
        # a hole between live summaries is one a removal opened: it holds a tombstone
        if not removed.intersection(range(first, last + 1)):
            problems.append(f"seqs {first}..{last} are in no live summary and hold no removal")
    for message_id, seq, removed_at, orphaned_at in messages:
        count = links.get(message_id, 0)
        if removed_at is not None or orphaned_at is not None:
            if count:
                problems.append(f"removed or orphaned message seq {seq} is in a live summary")
        elif seq <= pinned and count != 0:
            problems.append(f"pinned message seq {seq} is linked")
        elif seq in in_holes and count != 0:
            problems.append(f"message seq {seq} in a hole is linked to {count} live summaries")
        elif pinned < seq <= newest_last and seq not in in_holes and count != 1:
            problems.append(f"message seq {seq} is linked to {count} live summaries")
        if seq > newest_last and count != 0:
            problems.append(f"message seq {seq} after the newest summary is linked")
    return problems
