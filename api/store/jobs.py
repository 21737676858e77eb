"""Background summarization jobs: enqueue, claim, renew, finish, release.

Functions take the caller's AsyncSession and never commit: the caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    and_,
    delete,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from api.db.models import SummaryJob, utcnow
from api.store.rows import JOB_COLUMNS, JobRow
from summarizer.triggers import Reason, Trigger


async def enqueue_job(db: AsyncSession, session_key: int, trigger: Trigger, reason: Reason) -> None:
    """Record pending summarization for a session; a job already pending or running stays."""
    dialect = postgresql if db.get_bind().dialect.name == "postgresql" else sqlite
    now = utcnow()
    await db.execute(
        dialect.insert(SummaryJob)
        .values(
            session_id=session_key,
            trigger=trigger,
            reason=reason,
            status="pending",
            attempts=0,
            run_after=now,
            created_at=now,
        )
        .on_conflict_do_nothing(index_elements=["session_id"])
    )


CLAIM_CANDIDATES = 8
"""Due jobs a claim reads before trying them one by one: enough that replicas racing for the
oldest still find one left."""


def _due(now: datetime) -> ColumnElement[bool]:
    """A job a worker may claim: pending and due, or running with its worker's lease run out."""
    return or_(
        and_(SummaryJob.status == "pending", SummaryJob.run_after <= now),
        and_(SummaryJob.status == "running", SummaryJob.locked_until < now),
    )


async def claim_job(db: AsyncSession, lease: timedelta) -> JobRow | None:
    """Claim the next due job (or one whose worker's lease ran out).

    A plain read picks the oldest due jobs across sessions, then each is claimed by an UPDATE
    of its own session's row that holds only while the job is still due and not locked by
    another claim (PostgreSQL: `FOR UPDATE SKIP LOCKED` on that one row; SQLite: the UPDATE
    holds the write lock): of replicas racing for one job, one claims it and the others try
    the next, never waiting. No lock spans sessions (Citus runs `FOR UPDATE` within one shard
    only: docs/design.md section 6).
    """
    now = utcnow()
    candidates = await db.scalars(
        select(SummaryJob.session_id)
        .where(_due(now))
        .order_by(SummaryJob.run_after)
        .limit(CLAIM_CANDIDATES)
    )
    for session_key in candidates.all():
        still_due = (
            select(SummaryJob.session_id)
            .where(SummaryJob.session_id == session_key, _due(now))
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
        result = await db.execute(
            update(SummaryJob)
            .where(SummaryJob.session_id == session_key, SummaryJob.session_id == still_due)
            .values(status="running", attempts=SummaryJob.attempts + 1, locked_until=now + lease)
            .returning(*JOB_COLUMNS)
        )
        row = result.first()
        if row is not None:
            return JobRow._make(row)
    return None


def _claimed(claim: JobRow) -> list[Any]:
    """WHERE clauses for the session's job while `claim` still holds it.

    A job is the session's job created at `created_at` (a session has one at a time, and its
    next one is created later), and every claim of it increments `attempts`: together they
    name one claim, so a worker whose lease ran out, and whose job another worker claimed
    again or finished and a new one replaced, no longer matches.
    """
    return [
        SummaryJob.session_id == claim.session_id,
        SummaryJob.created_at == claim.created_at,
        SummaryJob.status == "running",
        SummaryJob.attempts == claim.attempts,
    ]


async def renew_job_lease(db: AsyncSession, claim: JobRow, lease: timedelta) -> bool:
    """Extend a running job's lease to `lease` from now; False if the claim is no longer held.

    The claim is lost when the job was finished or released, its session deleted, or its
    lease ran out and another worker claimed it.
    """
    renewed = await db.scalar(
        update(SummaryJob)
        .where(*_claimed(claim))
        .values(locked_until=utcnow() + lease)
        .returning(SummaryJob.session_id)
    )
    return renewed is not None


async def finish_job(db: AsyncSession, claim: JobRow) -> None:
    """Delete a done job, if `claim` still holds it."""
    await db.execute(delete(SummaryJob).where(*_claimed(claim)))


async def release_job(
    db: AsyncSession, claim: JobRow, run_after: datetime, error: str | None
) -> None:
    """Put a claimed job back to pending, to run again at `run_after`.

    Only if `claim` still holds it: a worker that lost its lease must not hand back a job
    another worker is running.
    """
    await db.execute(
        update(SummaryJob)
        .where(*_claimed(claim))
        .values(status="pending", locked_until=None, run_after=run_after, last_error=error)
    )


async def pending_job_count(db: AsyncSession) -> int:
    return int(await db.scalar(select(func.count()).select_from(SummaryJob)) or 0)
