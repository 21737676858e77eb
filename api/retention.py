"""The retention sweep: every RETENTION_SWEEP_INTERVAL_SECONDS, delete the expired sessions.

A session has expired at its `expires_at`, or once idle longer than SESSION_IDLE_TTL_DAYS
(`api.store.retention.unexpired`); clients lose it at that moment, and the sweep reclaims its
rows afterwards. A sweep finds the sessions past their `expires_at` through their partial
index, and (idle expiry on) walks every session by key in pages of `IDLE_SCAN_PAGE`, reading
no index on `updated_at`. Each session goes in short transactions: each locks its row (skipped
when another replica's sweep holds it), deletes a window of `MESSAGES_PER_TRANSACTION` of its
messages (their summary links with them), and the last deletes its summaries and the row (its
job and lease with it). Appends to other sessions never wait on a sweep: it locks only rows of
expired sessions. `precis_expired_deleted_total{kind}` counts what each committed transaction
deleted, so sweeps of several replicas at once count each row once. With idle expiry on, the
background responses that ended (failed, cancelled) as long ago go too, each by its key.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime
from functools import partial

from sqlalchemy.ext.asyncio import AsyncSession

from api import metrics
from api.db.models import utcnow
from api.db.transactions import Database, RetryPolicy, retry_budget, retrying
from api.settings import Settings
from api.store import background, retention
from api.store.retention import Expiry

logger = logging.getLogger("precis.retention")

SESSIONS_PER_PAGE = 100
"""Sessions past their `expires_at` read per page: a small read, ordered by the index."""

IDLE_SCAN_PAGE = 1000
"""Sessions read per page of the idle walk (a range of the primary key, a millisecond or so):
pages small enough never to hold a connection long, large enough that a walk of a million
sessions is a thousand round trips."""

MESSAGES_PER_TRANSACTION = 2000
"""Messages one sweep transaction deletes at most (with their links): short enough that no
transaction holds a session's row for long or writes a burst of WAL; a session larger than
this goes in several."""


@dataclass
class Swept:
    """What a sweep deleted."""

    sessions: int = 0
    messages: int = 0
    summaries: int = 0
    background_responses: int = 0
    """Background responses that failed or were cancelled, idle as long as a session expires."""

    def add(self, other: Swept) -> None:
        self.sessions += other.sessions
        self.messages += other.messages
        self.summaries += other.summaries


class Sweeper:
    """Runs the sweep every RETENTION_SWEEP_INTERVAL_SECONDS in the worker's process (started
    by `api.main` beside the summarization worker); `sweep` runs one."""

    def __init__(self, database: Database, settings: Settings) -> None:
        self._database = database
        self._settings = settings
        self._task: asyncio.Task[None] | None = None
        self._retries = RetryPolicy(settings.database_retry_seconds)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        """Stop sweeping; a transaction cut short rolls back, and the next sweep deletes what
        it held."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._settings.retention_sweep_interval_seconds)
            try:
                with retry_budget(self._retries):
                    await self.sweep()
            except Exception as exc:
                logger.warning("the retention sweep failed; the next one goes on: %r", exc)

    async def sweep(self) -> Swept:
        """Delete every session expired now (that no other sweep holds meanwhile)."""
        expiry = Expiry.at(utcnow(), self._settings.session_idle_ttl_days)
        swept = Swept()
        skipped: set[int] = set()
        while True:
            reading = partial(self._past_expiry, expiry, frozenset(skipped))
            page = await retrying(reading, "reading expired sessions", "read")
            for session_key in page:
                deleted = await self._delete(session_key, expiry)
                swept.add(deleted)
                if not deleted.sessions:
                    skipped.add(session_key)  # another sweep holds it
            if len(page) < SESSIONS_PER_PAGE:
                break
        if self._settings.session_idle_ttl_days is not None:
            swept.add(await self._sweep_idle(expiry))
            swept.background_responses = await self._sweep_ended_background(expiry.idle_cutoff)
        if swept.sessions:
            logger.info(
                "the retention sweep deleted %d sessions (%d messages, %d summaries)",
                swept.sessions,
                swept.messages,
                swept.summaries,
            )
        return swept

    async def _past_expiry(self, expiry: Expiry, skipped: frozenset[int]) -> list[int]:
        async with self._database.reading() as db:
            return await retention.past_expiry(db, expiry, skipped, SESSIONS_PER_PAGE)

    async def _sweep_idle(self, expiry: Expiry) -> Swept:
        """Walk every session by key, a page at a time, deleting the expired ones."""
        swept = Swept()
        after_key = 0
        while True:
            walking = partial(self._expired_in_page, expiry, after_key)
            found, last_key = await retrying(walking, "walking sessions", "read")
            if last_key is None:
                return swept
            for session_key in found:
                swept.add(await self._delete(session_key, expiry))
            after_key = last_key

    async def _sweep_ended_background(self, cutoff: datetime) -> int:
        """Delete the background responses that ended (failed, cancelled) before `cutoff`,
        each by its key."""
        deleted = 0
        while True:
            page = await retrying(
                partial(self._ended_page, cutoff), "reading ended background responses", "read"
            )
            for key, response_id in page:
                work = partial(_delete_ended, key=key, response_id=response_id, cutoff=cutoff)
                if await self._database.write(work, repeatable=True):
                    metrics.EXPIRED_DELETED.labels("background_responses").inc()
                    deleted += 1
            if len(page) < SESSIONS_PER_PAGE:
                return deleted

    async def _ended_page(self, cutoff: datetime) -> list[tuple[int, str]]:
        async with self._database.reading() as db:
            return await background.ended_before(db, cutoff, SESSIONS_PER_PAGE)

    async def _expired_in_page(
        self, expiry: Expiry, after_key: int
    ) -> tuple[list[int], int | None]:
        async with self._database.reading() as db:
            return await retention.expired_in_key_range(db, expiry, after_key, IDLE_SCAN_PAGE)

    async def _delete(self, session_key: int, expiry: Expiry) -> Swept:
        """Delete one expired session in windows of its messages, each a transaction of its
        own on the session's row; nothing when another sweep holds it, or it is gone."""
        deleted = Swept()
        after_seq = 0
        while True:
            work = partial(
                _delete_step, session_key=session_key, expiry=expiry, after_seq=after_seq
            )
            step = await self._database.write(work, repeatable=True)
            if step is None:
                return deleted
            done, part = step
            _count(part)
            deleted.add(part)
            if done:
                return deleted
            after_seq += MESSAGES_PER_TRANSACTION


async def _delete_step(
    db: AsyncSession, *, session_key: int, expiry: Expiry, after_seq: int
) -> tuple[bool, Swept] | None:
    """One transaction of a session's deletion: the messages after `after_seq`, a window of
    them, and when no more are left, its summaries and row; whether it is done, and what it
    deleted. None when the session is not expired, gone, or held by another sweep."""
    last_seq = await retention.lock_expired(db, session_key, expiry)
    if last_seq is None:
        return None
    upto_seq = after_seq + MESSAGES_PER_TRANSACTION
    if last_seq > upto_seq:
        if after_seq == 0:
            await retention.keep_expired(db, session_key, expiry.now)
        messages = await retention.delete_messages(db, session_key, after_seq, upto_seq)
        return False, Swept(messages=messages)
    messages = await retention.delete_messages(db, session_key, after_seq, last_seq)
    summaries = await retention.delete_summaries(db, session_key)
    sessions = int(await retention.delete_session_row(db, session_key))
    return True, Swept(sessions, messages, summaries)


async def _delete_ended(db: AsyncSession, *, key: int, response_id: str, cutoff: datetime) -> bool:
    return await background.delete_ended(db, key, response_id, cutoff)


def _count(deleted: Swept) -> None:
    for kind in ("sessions", "messages", "summaries"):
        amount = getattr(deleted, kind)
        if amount:
            metrics.EXPIRED_DELETED.labels(kind).inc(amount)
