"""The durable job queue of background summarization, at the store layer.

A job whose worker died (a SIGKILL leaves it `running`) is claimed again once its lease runs
out; a live lease and a future `run_after` keep it unclaimed; on PostgreSQL two workers never
claim the same job and neither waits for the other.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api import store
from api.db.models import SummaryJob, utcnow
from api.worker import JOB_LEASE
from tests.helpers import claim, new_job


async def test_job_of_a_killed_worker_is_claimed_again_after_its_lease(
    sessionmaker: async_sessionmaker[AsyncSession], db: AsyncSession
) -> None:
    session_key = await new_job(db, "killed-worker")
    first = await claim(sessionmaker)
    assert first is not None and first.session_id == session_key
    assert (first.status, first.attempts) == ("running", 1)

    # The worker is killed here: the job stays `running`, and its lease protects it.
    assert await claim(sessionmaker) is None

    async with sessionmaker() as expire, expire.begin():
        await expire.execute(
            update(SummaryJob)
            .where(SummaryJob.session_id == first.session_id)
            .values(locked_until=utcnow() - timedelta(seconds=1))
        )
    again = await claim(sessionmaker)
    assert again is not None
    assert (again.session_id, again.status, again.attempts) == (first.session_id, "running", 2)


async def test_job_released_with_backoff_waits_for_its_run_after(
    sessionmaker: async_sessionmaker[AsyncSession], db: AsyncSession
) -> None:
    await new_job(db, "backoff")
    job = await claim(sessionmaker)
    assert job is not None
    async with sessionmaker() as release, release.begin():
        await store.release_job(release, job, utcnow() + timedelta(hours=1), "LLM down")
    assert await claim(sessionmaker) is None

    async with sessionmaker() as due, due.begin():
        await due.execute(
            update(SummaryJob)
            .where(SummaryJob.session_id == job.session_id)
            .values(run_after=utcnow() - timedelta(seconds=1))
        )
    again = await claim(sessionmaker)
    assert again is not None
    assert (again.session_id, again.attempts, again.last_error) == (job.session_id, 2, "LLM down")


async def test_enqueue_keeps_one_job_per_session(
    sessionmaker: async_sessionmaker[AsyncSession], db: AsyncSession
) -> None:
    session_key = await new_job(db, "one-job")
    await store.enqueue_job(db, session_key, "proactive", "token_limit")
    await db.commit()
    assert await claim(sessionmaker) is not None
    assert await claim(sessionmaker) is None


@pytest.mark.postgresql_only
async def test_two_workers_claim_different_jobs_without_waiting(
    sessionmaker: async_sessionmaker[AsyncSession], db: AsyncSession
) -> None:
    sessions = {await new_job(db, "replica-a"), await new_job(db, "replica-b")}
    async with sessionmaker() as first_worker, first_worker.begin():
        first = await store.claim_job(first_worker, JOB_LEASE)
        # The first claim is not committed yet: its row is locked, and SKIP LOCKED passes it.
        async with sessionmaker() as second_worker, second_worker.begin():
            second = await store.claim_job(second_worker, JOB_LEASE)
            assert first is not None and second is not None
            assert {first.session_id, second.session_id} == sessions
            async with sessionmaker() as third_worker, third_worker.begin():
                assert await store.claim_job(third_worker, JOB_LEASE) is None
