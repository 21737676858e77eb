"""One summarization per session: an in-process lock, plus a lease on a database row across
processes and replicas.

The lease (`api.store.leases`) holds nothing on a server connection, so it is correct behind a
transaction pooler too; its holder renews it while it works, and a holder that died loses it
when it expires. A summary is saved only while its maker still holds the lease (`fenced`), and
the range check in `store.save_summary`, made under the session row's lock, stays the last line
of defence.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from api import store
from api.db.faults import describe_fault
from api.db.models import utcnow
from api.db.transactions import Database, connection_lost_or_commit_unknown, retrying
from api.errors import SessionGone, SummarizationInProgress
from api.store import leases

logger = logging.getLogger("precis.locks")

LEASE_DURATION = timedelta(seconds=30)
"""How long a lease lasts unrenewed: how long a crashed summarizer keeps its session from
being summarized again. Shorter frees sessions sooner but lets a shorter database outage
cost a running summarization its lease."""

RENEWALS_PER_LEASE = 3
"""Renewals per lease period: one may fail (the database down a moment) and the next one
still comes in time."""

LEASE_POLL_SECONDS = 0.05
"""How often a waiter tries the lease again: short, since summarizations take seconds."""


BUSY_DETAIL = "a summarization of this session is still running; retry shortly"
"""What a caller that could not have the session in time is told (the 409's detail)."""


class LeaseLost(SummarizationInProgress):
    """The summarization lease ran out and another took the session over: what it made is not
    saved."""


class SessionLocks:
    """Per-session summarization locks; with `max_running`, also a bound on summarizations at once.

    A running summarization holds, at times, a connection for its lease's writes and one for
    its reads and writes: with `max_running` and a pool of at least twice that, the
    summarizations of a process can never starve each other of connections. The lease's
    writes are transactions of `database`, the unit of work summarization runs in.
    """

    def __init__(self, database: Database, max_running: int | None = None) -> None:
        self._database = database
        self._slots = asyncio.Semaphore(max_running) if max_running else None
        # Weak values: a session's lock lives while a holder or a waiter references it.
        self._local: weakref.WeakValueDictionary[int, asyncio.Lock] = weakref.WeakValueDictionary()
        self._tokens: dict[int, int] = {}

    def is_held(self, session_key: int) -> bool:
        lock = self._local.get(session_key)
        return lock is not None and lock.locked()

    @asynccontextmanager
    async def hold(self, session_key: int, wait_seconds: float) -> AsyncIterator[None]:
        """Hold the session's summarization lock, waiting at most `wait_seconds` for it."""
        deadline = time.monotonic() + wait_seconds
        lock = self._local.get(session_key)
        if lock is None:
            lock = asyncio.Lock()
            self._local[session_key] = lock
        try:
            await asyncio.wait_for(lock.acquire(), timeout=max(wait_seconds, 0.001))
        except TimeoutError as exc:
            raise SummarizationInProgress(BUSY_DETAIL) from exc
        try:
            async with self._slot(session_key, deadline), self._lease(session_key, deadline):
                yield
        finally:
            lock.release()

    @asynccontextmanager
    async def fenced(self, session_key: int) -> AsyncIterator[AsyncSession]:
        """A write transaction that commits only while this process still holds the session's
        lease (on PostgreSQL its row stays locked until the commit); `LeaseLost` otherwise, or
        `SessionGone` if the session was deleted."""
        token = self._tokens.get(session_key)
        async with self._database.transaction() as db:
            if token is None or not await leases.holds_lease(db, session_key, token, utcnow()):
                if await store.get_session_by_key(db, session_key) is None:
                    raise SessionGone("the session no longer exists")  # its lease went with it
                raise LeaseLost(BUSY_DETAIL)  # another summarization took the session over
            yield db

    @asynccontextmanager
    async def _slot(self, session_key: int, deadline: float) -> AsyncIterator[None]:
        if self._slots is None:
            yield
            return
        try:
            remaining = max(deadline - time.monotonic(), 0.001)
            await asyncio.wait_for(self._slots.acquire(), timeout=remaining)
        except TimeoutError as exc:
            raise SummarizationInProgress(BUSY_DETAIL) from exc  # every slot is in use
        try:
            yield
        finally:
            self._slots.release()

    @asynccontextmanager
    async def _lease(self, session_key: int, deadline: float) -> AsyncIterator[None]:
        """The session's lease, renewed while the block runs and given back after it."""
        token = secrets.randbits(63)
        while not await self._take(session_key, token):
            if time.monotonic() >= deadline:
                raise SummarizationInProgress(BUSY_DETAIL)  # by another process
            await asyncio.sleep(LEASE_POLL_SECONDS)
        self._tokens[session_key] = token
        renewing = asyncio.create_task(self._renew(session_key, token))
        try:
            yield
        finally:
            del self._tokens[session_key]
            renewing.cancel()
            with suppress(asyncio.CancelledError):
                await renewing
            await self._give_back(session_key, token)

    async def _take(self, session_key: int, token: int) -> bool:
        async with self._database.transaction() as db:
            return await leases.take_lease(db, session_key, token, utcnow(), LEASE_DURATION)

    async def _renew(self, session_key: int, token: int) -> None:
        interval = LEASE_DURATION.total_seconds() / RENEWALS_PER_LEASE
        while True:
            await asyncio.sleep(interval)
            try:
                async with self._database.transaction() as db:
                    held = await leases.renew_lease(
                        db, session_key, token, utcnow(), LEASE_DURATION
                    )
            except Exception as exc:
                if not connection_lost_or_commit_unknown(exc):
                    raise
                logger.warning(
                    "session %s: lease not renewed: %s", session_key, describe_fault(exc)
                )
                continue
            if not held:
                logger.warning("session %s: the summarization lease ran out", session_key)
                return

    async def _give_back(self, session_key: int, token: int) -> None:
        """End the lease, waiting within the retry budget for a database that went away (a
        lease left behind keeps the session from being summarized until it runs out); past
        the budget it runs out by itself."""

        async def give_back() -> None:
            async with self._database.transaction() as db:
                await leases.give_back_lease(db, session_key, token)

        try:
            await retrying(give_back, f"giving back session {session_key}'s lease", "summarization")
        except Exception as exc:
            if not connection_lost_or_commit_unknown(exc):
                raise
            logger.warning("session %s: lease left to expire: %s", session_key, describe_fault(exc))
