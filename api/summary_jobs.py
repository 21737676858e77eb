"""When a proactive summary is due, and recording a session's summarization job: read in the
caller's transaction (an append's, a removal's, the worker's), run later by the worker."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy.ext.asyncio import AsyncSession

from api import store
from api.context import edited_tokens
from api.context_edits import ContextEdits
from api.session_settings import SummaryPolicy
from api.summary_plans import pinned_floor, proactive_reason
from summarizer.triggers import ProactiveReason, Reason


async def schedule_summary(db: AsyncSession, session_key: int, reason: Reason) -> None:
    """Leave the session's summarization to a background job, recorded in the caller's
    transaction (durable once it commits); a job already pending or running stays."""
    await store.enqueue_job(db, session_key, "proactive", reason)


async def due_reason(
    db: AsyncSession, session: store.SessionRow, policy: SummaryPolicy
) -> ProactiveReason | None:
    """`proactive_reason` of the session's backlog, read from `db`; None with summarization
    off."""
    if not policy.dynamic_summary_enabled:
        return None
    floor = pinned_floor(session, policy)
    backlog = await store.backlog(db, session.id, session.last_seq, floor, policy.message_limit)
    reason = proactive_reason(policy, backlog)
    edits = ContextEdits.of(policy)
    if reason == "token_limit" and edits.active:
        # the trigger reads the tail as a history load shows it, old tool results cleared
        tail = await store.messages_in_range(db, session.id, backlog.after_seq)
        shown = replace(backlog, token_count=edited_tokens(tail, edits))
        reason = proactive_reason(policy, shown)
    return reason


async def schedule_summary_if_due(
    db: AsyncSession, session: store.SessionRow, policy: SummaryPolicy
) -> ProactiveReason | None:
    """Record a summarization job when the session's backlog reaches a limit, in the caller's
    transaction; returns the reason."""
    reason = await due_reason(db, session, policy)
    if reason is not None:
        await schedule_summary(db, session.id, reason)
    return reason


async def schedule_remake_if_owed(
    db: AsyncSession, session: store.SessionRow, policy: SummaryPolicy
) -> None:
    """Record an erasure job when a hole a removal opened (or a range it erased after the
    newest live summary) waits for its summary, in the caller's transaction."""
    floor = pinned_floor(session, policy)
    if policy.dynamic_summary_enabled and await store.remake_owed(db, session.id, floor):
        await schedule_summary(db, session.id, "erasure")
