"""Units of work, and what each does when the connection dies under it.

Who commits: `transaction` below, and nothing else. A request's own reads and writes run in
the scope its dependency opens (`api.deps`); an append opens its own, to run it again when its
connection dies (`api.appending.store_batch`); summarization writes in short scopes of its own
(`Compactor.writing`), never in the request's. Store functions never commit.

- A read (`ReadSession`, autocommit) runs a statement cut by a lost connection once more on a
  fresh connection: each statement stands alone, so the second run is the same as the first.
- A write (`transaction`) commits when its block ends and rolls back on any error. A lost
  connection before COMMIT was sent stored nothing, so its caller may run it again; one lost
  while COMMIT was under way raises `CommitInterrupted` (its outcome is unknown). The append
  on PostgreSQL is one autocommit statement instead, which finds out by its own id whether
  it landed (`api.appending`).
- Summarization (jobs, their bookkeeping, inline compactions) and the readiness probe run
  through `retrying`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext, suppress
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api import metrics
from api.db.faults import connection_lost, describe_fault

logger = logging.getLogger("precis.db")

T = TypeVar("T")

RETRY_PAUSE_SECONDS = 0.05
"""Pause before a retry on a fresh connection: long enough for the pool to see the others
die too (a failover takes them all), short enough that a client does not notice."""


class CommitInterrupted(Exception):
    """The connection died while COMMIT was under way: the transaction may or may not have
    landed."""


class ReadSession(AsyncSession):
    """The session of a request that only reads: a statement cut by a lost connection runs
    once more on a fresh connection.

    The session is closed in between (the dead connection goes back to the pool, which
    discards it); rows and objects already read stay usable.
    """

    async def __aexit__(self, type_: Any, value: Any, traceback: Any) -> None:
        # The hot reads run on the driver (`api.db.driver`) and never open the session: it
        # then holds nothing to close, and closing would cost a task and a hop through
        # SQLAlchemy's greenlet bridge (about a tenth of a history load).
        if self.sync_session.in_transaction() or self.sync_session.identity_map:
            await super().__aexit__(type_, value, traceback)

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        return await self._once_more_if_cut(super().execute, *args, **kwargs)

    async def scalar(self, *args: Any, **kwargs: Any) -> Any:
        return await self._once_more_if_cut(super().scalar, *args, **kwargs)

    async def scalars(self, *args: Any, **kwargs: Any) -> Any:
        return await self._once_more_if_cut(super().scalars, *args, **kwargs)

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        return await self._once_more_if_cut(super().get, *args, **kwargs)

    async def _once_more_if_cut(
        self, statement: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any
    ) -> Any:
        return await read_once_more_if_cut(partial(statement, *args, **kwargs), self.close)


async def read_once_more_if_cut(
    read: Callable[[], Awaitable[T]], release: Callable[[], Awaitable[None]] | None = None
) -> T:
    """`read`, run once more on a fresh connection if a lost connection cut it (after
    `release` hands the dead one back to the pool, which discards it)."""
    try:
        return await read()
    except Exception as exc:
        if not connection_lost(exc):
            raise
        if release is not None:
            await release()
        metrics.DATABASE_RETRIES.labels("read").inc()
        logger.warning("a read lost its database connection; retrying: %s", describe_fault(exc))
    await asyncio.sleep(RETRY_PAUSE_SECONDS)
    return await read()


@asynccontextmanager
async def transaction(
    sessionmaker: async_sessionmaker[AsyncSession], write_lock: asyncio.Lock | None = None
) -> AsyncIterator[AsyncSession]:
    """One write transaction: commits when the block ends, rolls back on any error.

    On SQLite the process's writers queue on `write_lock` first (one write lock per database:
    a writer that finds it taken polls with growing sleeps, and under many concurrent
    appends some would starve for seconds).
    """
    async with write_lock or nullcontext(), sessionmaker() as db:
        try:
            yield db
        except BaseException:
            with suppress(Exception):
                await db.rollback()
            raise
        try:
            await db.commit()
        except DBAPIError as exc:
            with suppress(Exception):
                await db.rollback()
            if connection_lost(exc):
                raise CommitInterrupted(str(exc)) from exc
            raise


def cut_off(exc: BaseException) -> bool:
    """The connection died under the work, before or during its COMMIT: nothing was wrong
    with the work itself."""
    return isinstance(exc, CommitInterrupted) or connection_lost(exc)


@dataclass(frozen=True)
class Database:
    """The request side's units of work: write transactions, and autocommit reads."""

    sessionmaker: async_sessionmaker[AsyncSession]
    read_sessionmaker: async_sessionmaker[AsyncSession]
    write_lock: asyncio.Lock | None
    """SQLite only: the process's writers take turns (see `transaction`)."""

    def transaction(self) -> AbstractAsyncContextManager[AsyncSession]:
        return transaction(self.sessionmaker, self.write_lock)

    @property
    def engine(self) -> AsyncEngine:
        engine: AsyncEngine = self.sessionmaker.kw["bind"]
        return engine

    def reading(self) -> AsyncSession:
        return self.read_sessionmaker()


async def retrying(
    operation: Callable[[], Awaitable[T]], what: str, kind: Literal["read", "summarization"]
) -> T:
    """Run `operation`, once more on a fresh connection if the connection died under it.

    For work that is safe to repeat: a read, a job's bookkeeping (the second run of one that
    landed changes nothing), a summarization (it summarizes what is still unsummarized).
    `kind` labels `precis_database_retries_total`.
    """
    try:
        return await operation()
    except Exception as exc:
        if not cut_off(exc):
            raise
        metrics.DATABASE_RETRIES.labels(kind).inc()
        logger.warning("%s lost its database connection; retrying: %s", what, describe_fault(exc))
        await asyncio.sleep(RETRY_PAUSE_SECONDS)
        return await operation()
