"""Background summarization jobs: enqueue, claim, renew, finish, release.

Functions take the caller's AsyncSession and never commit: the caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
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


async def claim_job(db: AsyncSession, lease: timedelta) -> JobRow | None:
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
    result = await db.execute(
        update(SummaryJob)
        .where(SummaryJob.id == due)
        .values(status="running", attempts=SummaryJob.attempts + 1, locked_until=now + lease)
        .returning(*JOB_COLUMNS)
    )
    row = result.first()
    return None if row is None else JobRow._make(row)


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


async def pending_job_count(db: AsyncSession) -> int:
    return int(await db.scalar(select(func.count()).select_from(SummaryJob)) or 0)
