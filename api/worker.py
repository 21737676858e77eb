"""The background summarization worker: claims durable jobs from the database and runs them.

Jobs live in `summary_jobs`, so a restart resumes them and any replica can run them. A
failed job goes back to pending with exponential backoff; appends never wait on it. While the
database is unreachable (a restart), each claim, job and repair round waits for it within a
retry budget of its own (DATABASE_RETRY_SECONDS), and a job that lost its connection goes back
to pending without counting as failed. A running
job's lease is renewed while it runs (a heartbeat), so the lease can be short: a killed
worker's job is taken over within a minute, a slow one's never. Its claims, bookkeeping and
reads are units of work of the `Database` it is given, the one summarization runs in. A job
that finds the summarizer model unavailable stores nothing and goes back to pending with the
same backoff, until the session's backlog passes the outage bound
(`api.summary_plans.outage_defers`); then it stores a fallback summary.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from datetime import timedelta
from functools import partial

from api import metrics, store
from api.db.faults import describe_fault
from api.db.models import utcnow
from api.db.transactions import (
    Database,
    RetryPolicy,
    connection_lost_or_commit_unknown,
    retry_budget,
    retrying,
)
from api.errors import SummarizationDeferred, SummarizationInProgress
from api.summarization import Summarization
from api.summary_jobs import schedule_remake_if_owed, schedule_summary_if_due
from summarizer.retry import describe

logger = logging.getLogger("precis.worker")

JOB_LEASE = timedelta(seconds=60)
"""How long a claim lasts unrenewed: a killed worker's job waits this long to be taken over.

Shorter resumes sooner but lets a database outage of about this length cost the lease.
"""

HEARTBEATS_PER_LEASE = 3
"""Renewals per lease period: one may fail (and be retried at the next) before the lease runs
out."""

POLL_SECONDS = 1.0
"""Idle workers look for jobs this often (others' replicas schedule without waking us)."""

BUSY_RETRY_SECONDS = 0.5
"""Delay before retrying a job whose session an inline summarization is summarizing."""

CONNECTION_RETRY_SECONDS = 1.0
"""Delay before retrying a job that lost its database connection: a fresh connection
will most likely do, so the job neither backs off nor counts as failed."""

BACKOFF_BASE_SECONDS = 2.0
"""First retry delay of a failed job; doubles per attempt, with jitter."""

BACKOFF_MAX_SECONDS = 600.0
"""Longest delay between retries of a failed job."""

REPAIRS_PER_ROUND = 20
"""Fallback summaries one repair round takes on at most; the next round takes the rest."""


def backoff(attempts: int) -> float:
    delay = min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2.0 ** max(attempts - 1, 0))
    return delay * random.uniform(0.5, 1.0)


class Worker:
    def __init__(self, database: Database, summarization: Summarization, concurrency: int) -> None:
        self._database = database
        self._summarization = summarization
        self._concurrency = concurrency
        self._wake = asyncio.Event()
        self._stopping = False
        self._loops: list[asyncio.Task[None]] = []
        self._summarizing: set[asyncio.Task[None]] = set()
        self._repairing: asyncio.Task[None] | None = None
        self._retries = RetryPolicy(summarization.settings.database_retry_seconds)

    def start(self) -> None:
        self._stopping = False
        self._loops = [asyncio.create_task(self._loop()) for _ in range(self._concurrency)]
        self._repairing = asyncio.create_task(self._repair_loop())

    def wake(self) -> None:
        """A job was scheduled and committed: look now instead of at the next poll."""
        self._wake.set()

    async def stop(self) -> None:
        """Stop claiming; a summarization cut short puts its job back to pending.

        Only the summarizations are cancelled: a claim always runs to its end, so no
        database statement is abandoned halfway with a transaction (and a lock) open.
        """
        self._stopping = True
        self._wake.set()
        for task in self._summarizing:
            task.cancel()
        if self._repairing is not None:
            self._repairing.cancel()  # a repair cut short stores nothing
            await asyncio.gather(self._repairing, return_exceptions=True)
            self._repairing = None
        await asyncio.gather(*self._loops, return_exceptions=True)
        self._loops = []

    async def _repair_loop(self) -> None:
        """Every SUMMARY_REPAIR_INTERVAL_SECONDS, re-make live fallback summaries with the model.

        A round stops at the first fallback the model still cannot replace: while it is down,
        one attempt per interval is all it costs.
        """
        interval = self._summarization.settings.summary_repair_interval_seconds
        while not self._stopping:
            await asyncio.sleep(interval)
            try:
                with retry_budget(self._retries):
                    await self._repair_round()
            except Exception as exc:
                logger.warning("repairing fallback summaries failed: %s", describe(exc))

    async def _repair_round(self) -> None:
        """Repair live fallbacks until the model fails one; a repair that lost its
        connection runs again (a second run of one that landed finds it superseded)."""

        async def live_fallbacks() -> list[store.SummaryRow]:
            async with self._database.reading() as db:
                return await store.live_fallback_summaries(db, REPAIRS_PER_ROUND)

        looking = "looking for fallback summaries"
        fallbacks = await retrying(live_fallbacks, looking, "summarization")
        for fallback in fallbacks:
            repair = partial(self._summarization.repair, fallback.session_id, fallback.id)
            what = f"repairing fallback summary {fallback.id}"
            if await retrying(repair, what, "summarization") is None:
                break

    async def _loop(self) -> None:
        while not self._stopping:
            self._wake.clear()  # before the claim: a job scheduled during it wakes the wait
            try:
                with retry_budget(self._retries):
                    job = await retrying(
                        self._claim, "claiming a summarization job", "summarization"
                    )
            except Exception as exc:
                _log_failure("could not claim a summarization job", exc)
                job = None
            if job is None:
                if not self._stopping:
                    with suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), timeout=POLL_SECONDS)
                continue
            if self._stopping:
                await self._release(job, 0.0, "worker stopped")
                return
            summarizing = asyncio.create_task(self._run(job))
            self._summarizing.add(summarizing)
            try:
                await asyncio.gather(summarizing, return_exceptions=True)
            finally:
                self._summarizing.discard(summarizing)

    async def _claim(self) -> store.JobRow | None:
        async with self._database.transaction() as db:
            return await store.claim_job(db, JOB_LEASE)

    async def _run(self, job: store.JobRow) -> None:
        """Run a claimed job with a retry budget of its own."""
        with retry_budget(self._retries):
            await self._run_budgeted(job)

    async def _run_budgeted(self, job: store.JobRow) -> None:
        try:
            async with self._database.reading() as db:
                before = await store.get_session_by_key(db, job.session_id)
            seen = (before.last_seq, before.removed_count) if before is not None else None
            async with self._leased(job):
                summary = await self._summarization.run(
                    job.session_id, job.trigger, job.reason, defer_outage=True
                )
        except asyncio.CancelledError:
            await self._release(job, 0.0, "worker stopped")
            raise
        except SummarizationInProgress:
            await self._release(job, BUSY_RETRY_SECONDS, None)
            return
        except SummarizationDeferred as exc:
            # No fallback replaces raw messages nobody needs gone yet: try again later.
            metrics.DEFERRED_SUMMARIES.inc()
            # at most one repair interval: once the model is back, the session is summarized
            # as soon as its fallbacks would be repaired
            repair_interval = self._summarization.settings.summary_repair_interval_seconds
            delay = min(backoff(job.attempts), repair_interval)
            logger.warning(
                "summarization job of session %s deferred for %.1f s: %s",
                job.session_id,
                delay,
                exc.detail,
            )
            await self._release(job, delay, f"deferred: {exc.detail}"[:2000])
            return
        except Exception as exc:
            if connection_lost_or_commit_unknown(exc):
                metrics.DATABASE_RETRIES.labels("summarization").inc()
                logger.warning(
                    "summarization job of session %s lost its database connection; "
                    "retrying in %g s: %s",
                    job.session_id,
                    CONNECTION_RETRY_SECONDS,
                    describe_fault(exc),
                )
                await self._release(job, CONNECTION_RETRY_SECONDS, describe_fault(exc))
                return
            metrics.JOB_FAILURES.inc()
            logger.exception("summarization job of session %s failed", job.session_id)
            await self._release(job, backoff(job.attempts), f"{type(exc).__name__}: {exc}"[:2000])
            return
        finish = partial(self._finish, job, summary is not None, seen)
        try:
            await retrying(
                finish, f"finishing summarization job of session {job.session_id}", "summarization"
            )
        except Exception as exc:
            # its summary is stored; the job runs again, finding nothing, once its lease ends
            _log_failure(f"could not finish summarization job of session {job.session_id}", exc)

    async def _finish(
        self, job: store.JobRow, summarized: bool, seen: tuple[int, int] | None
    ) -> None:
        """Delete the done job; look again at what arrived or was removed while it ran.

        `seen`: the session's `last_seq` and `removed_count` when the job started."""
        async with self._database.transaction() as db:
            await store.finish_job(db, job)
            session = await store.get_session_by_key(db, job.session_id)
            if session is None:
                return
            policy = self._summarization.settings.policy(session.settings)
            seen_seq, seen_removed = seen or (None, None)
            reason = None
            # Messages that arrived while the job ran found it queued and scheduled nothing:
            # look again. After a job that summarized nothing (the backlog was one tool call
            # and its results), only new messages warrant a look, or the job would spin.
            if summarized or session.last_seq != seen_seq:
                reason = await schedule_summary_if_due(db, session, policy)
            # A removal while the job ran found it queued: if it erased summaries whose range
            # no live summary covers again, that range is owed a job of its own.
            if reason is None and session.removed_count != seen_removed:
                await schedule_remake_if_owed(db, session, policy)

    async def _release(self, job: store.JobRow, delay: float, error: str | None) -> None:
        """Put the job back to pending; a lost connection is retried, or the job would wait
        for its lease to run out."""

        async def release() -> None:
            run_after = utcnow() + timedelta(seconds=delay)
            async with self._database.transaction() as db:
                await store.release_job(db, job, run_after, error)

        try:
            await retrying(
                release, f"releasing summarization job of session {job.session_id}", "summarization"
            )
        except Exception as exc:
            _log_failure(f"could not release summarization job of session {job.session_id}", exc)

    @asynccontextmanager
    async def _leased(self, job: store.JobRow) -> AsyncIterator[None]:
        """Renew the job's lease while the block runs; stop when it ends, however it ends.

        The heartbeat is not cancelled but told to stop and awaited, so a renewal under way
        finishes its transaction instead of being abandoned with the write lock held.
        """
        done = asyncio.Event()
        heartbeat = asyncio.create_task(self._heartbeat(job, done))
        try:
            yield
        finally:
            done.set()
            await asyncio.gather(heartbeat, return_exceptions=True)

    async def _heartbeat(self, job: store.JobRow, done: asyncio.Event) -> None:
        """Every lease/HEARTBEATS_PER_LEASE, extend the lease in a short transaction of its own.

        A failed renewal is logged and retried at the next period; a claim found lost (the
        lease ran out and another worker took the job, or the session was deleted) ends the
        heartbeat, while the summarization goes on: the session's summarization lock and the
        range check of `store.save_summary` keep a duplicate run from storing anything wrong.
        """
        while True:
            period = JOB_LEASE.total_seconds() / HEARTBEATS_PER_LEASE
            with suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), timeout=period)
            if done.is_set():
                return
            try:
                async with self._database.transaction() as db:
                    held = await store.renew_job_lease(db, job, JOB_LEASE)
            except Exception as exc:
                _log_failure(
                    f"could not renew the lease of summarization job of session {job.session_id}",
                    exc,
                )
                continue
            if not held:
                logger.warning(
                    "summarization job of session %s is no longer this worker's; "
                    "its lease is not renewed",
                    job.session_id,
                )
                return


def _log_failure(what: str, exc: BaseException) -> None:
    """A lost connection is a WARNING of one line (retried); anything else an ERROR with its
    traceback."""
    if connection_lost_or_commit_unknown(exc):
        logger.warning("%s: %s", what, describe_fault(exc))
    else:
        logger.error("%s", what, exc_info=exc)
