"""One summarizer per session: an in-process lock, plus a PostgreSQL advisory lock across replicas.

On SQLite (one process) the in-process lock serializes summarizations; the range check in
`store.save_summary`, made under the write lock, keeps even racing processes from storing
an overlapping summary.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

ADVISORY_LOCK_NAMESPACE = 0x50524543
"""First key of every advisory lock Precis takes ("PREC"), so other applications' locks differ."""

ADVISORY_POLL_SECONDS = 0.05
"""How often a waiter retries the advisory lock: short, since summarizations take seconds."""


class CompactionBusy(Exception):
    """Another summarization of the session holds the lock."""


class SessionLocks:
    """Per-session summarizer locks; with `max_running`, also a bound on summarizations at once.

    A running summarization holds one connection for its advisory lock and, at times, one
    for its reads and writes: with `max_running` and a pool of at least twice that, the
    summarizations of a process can never starve each other of connections.
    """

    def __init__(self, engine: AsyncEngine, max_running: int | None = None) -> None:
        self._engine = engine
        self._slots = asyncio.Semaphore(max_running) if max_running else None
        # Weak values: a session's lock lives while a holder or a waiter references it.
        self._local: weakref.WeakValueDictionary[int, asyncio.Lock] = weakref.WeakValueDictionary()
        self._postgres = engine.dialect.name == "postgresql"

    def is_held(self, session_id: int) -> bool:
        lock = self._local.get(session_id)
        return lock is not None and lock.locked()

    @asynccontextmanager
    async def hold(self, session_id: int, wait_seconds: float) -> AsyncIterator[None]:
        """Hold the session's summarizer lock, waiting at most `wait_seconds` for it."""
        deadline = time.monotonic() + wait_seconds
        lock = self._local.get(session_id)
        if lock is None:
            lock = asyncio.Lock()
            self._local[session_id] = lock
        try:
            await asyncio.wait_for(lock.acquire(), timeout=max(wait_seconds, 0.001))
        except TimeoutError as exc:
            raise CompactionBusy(f"session {session_id} is being summarized") from exc
        try:
            async with self._slot(session_id, deadline), self._advisory(session_id, deadline):
                yield
        finally:
            lock.release()

    @asynccontextmanager
    async def _slot(self, session_id: int, deadline: float) -> AsyncIterator[None]:
        if self._slots is None:
            yield
            return
        try:
            remaining = max(deadline - time.monotonic(), 0.001)
            await asyncio.wait_for(self._slots.acquire(), timeout=remaining)
        except TimeoutError as exc:
            raise CompactionBusy(
                f"session {session_id} waits: every summarization slot is in use"
            ) from exc
        try:
            yield
        finally:
            self._slots.release()

    @asynccontextmanager
    async def _advisory(self, session_id: int, deadline: float) -> AsyncIterator[None]:
        """PostgreSQL: the advisory lock, on a connection held for the whole summarization."""
        if not self._postgres:
            yield
            return
        async with self._engine.connect() as connection:
            await self._advisory_lock(connection, session_id, deadline)
            try:
                yield
            finally:
                # A dead connection has released the lock with it.
                with suppress(Exception):
                    await connection.scalar(
                        select(func.pg_advisory_unlock(ADVISORY_LOCK_NAMESPACE, _key(session_id)))
                    )
                    await connection.commit()

    async def _advisory_lock(
        self, connection: AsyncConnection, session_id: int, deadline: float
    ) -> None:
        while True:
            acquired = await connection.scalar(
                select(func.pg_try_advisory_lock(ADVISORY_LOCK_NAMESPACE, _key(session_id)))
            )
            await connection.commit()
            if acquired:
                return
            if time.monotonic() >= deadline:
                raise CompactionBusy(f"session {session_id} is being summarized elsewhere")
            await asyncio.sleep(ADVISORY_POLL_SECONDS)


def _key(session_id: int) -> int:
    return session_id & 0x7FFFFFFF
