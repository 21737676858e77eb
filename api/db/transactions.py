"""The unit of work: every scope that opens a connection for work and ends it, and what each
does when the connection dies under it or none can be made.

Who begins and commits: `Database` below, and nothing else. A request's reads run in a read
session (`Database.reading`, opened by its dependency, `api.deps`, or by its use case); its
writes in a transaction (`Database.transaction`, or `Database.write`, which runs it again when
its connection is lost); the append on SQLite in one transaction on the driver's own
connection (`Database.driver_transaction`). Summarization (`api.summarization`), its lease
(`api.locks`) and the worker (`api.worker`) take the same `Database`, built on the pool
of their own. Store functions never commit. The exceptions: the append on PostgreSQL is one
autocommit statement, which commits itself (`api.append.postgresql`), and so is a write that
may run twice to the same effect (`api.db.driver.write`, a stored response's row).

One retry policy for every lost connection (a connection dropped, a server refusing connections
or shutting down, as during a restart): the work runs again on a fresh connection, after a
pause that doubles from try to try (with jitter), until the `RetryBudget` of its request or
job is spent: DATABASE_RETRY_SECONDS from its first lost connection. Then the error goes up
(503 with Retry-After for a request). Only work that a second run cannot store twice runs
again:

- A read (`ReadSession`, autocommit, and the driver's `fetch`) runs a statement that lost its
  connection again: each statement stands alone, so the second run is the same as the first.
- A write (`transaction`) commits when its block ends and rolls back on any error. A lost
  connection before COMMIT was sent stored nothing, so `Database.write` runs the whole unit
  again; one lost while COMMIT was under way raises `CommitConnectionLost` (its outcome is
  unknown), run again only for units whose second run answers as the first did. The append
  on PostgreSQL is one autocommit statement instead, which finds out by its own id whether
  it landed (`api.append`); `api.db.driver.write`'s one statement, which does nothing when
  its row is there, runs again whenever the connection died under it, unless its caller
  reads back what landed first (`repeat=False`: a background response's queue insert).
- Summarization (jobs, their bookkeeping, inline summarizations) and the probes run through
  `retrying`.

The budget reaches the code through a context variable, set per request by the app's
middleware (`api.main`) and per job by the worker (`retry_budget`): the driver's hot reads
take no settings. Outside both (scripts, tests calling the store), each call has a budget of
its own of the default length.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    asynccontextmanager,
    contextmanager,
    nullcontext,
    suppress,
)
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.util import greenlet_spawn

from api import metrics
from api.db.faults import connection_lost, describe_fault
from api.db.pooler import transaction_pooled
from api.settings import DEFAULT_DATABASE_RETRY_SECONDS

logger = logging.getLogger("precis.db")

T = TypeVar("T")

RETRY_PAUSE_SECONDS = 0.05
"""Pause before the first retry on a fresh connection: long enough for the pool to see the
others die too (a failover takes them all), short enough that a client does not notice."""

MAX_RETRY_PAUSE_SECONDS = 0.5
"""Longest pause between two tries: once the database is back, a waiting request notices
within this long; shorter would knock on a restarting server more often for nothing."""

RetryKind = Literal["read", "write", "append", "summarization"]
"""The label of `precis_database_retries_total` a retry counts under."""


class CommitConnectionLost(Exception):
    """The connection was lost while COMMIT was under way: the transaction may or may not have
    landed."""


@dataclass(frozen=True)
class RetryPolicy:
    """How long work waits for a database that lost its connections or refuses new ones."""

    budget_seconds: float = DEFAULT_DATABASE_RETRY_SECONDS
    """Counted from the first lost connection of a request or job (DATABASE_RETRY_SECONDS)."""
    first_pause_seconds: float = RETRY_PAUSE_SECONDS
    max_pause_seconds: float = MAX_RETRY_PAUSE_SECONDS


class RetryBudget:
    """The retries of one request or job: exponential backoff with jitter, until
    `policy.budget_seconds` have passed since its first lost connection."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.retries = 0
        self._deadline: float | None = None

    def next_pause(self) -> float | None:
        """Seconds to wait before the next try; None when the budget is spent."""
        now = time.monotonic()
        if self._deadline is None:
            self._deadline = now + self.policy.budget_seconds
        remaining = self._deadline - now
        if remaining <= 0:
            return None
        policy = self.policy
        pause = min(policy.max_pause_seconds, policy.first_pause_seconds * 2.0**self.retries)
        self.retries += 1
        return min(pause * random.uniform(0.5, 1.0), remaining)

    async def wait_to_retry(self, exc: BaseException, what: str, kind: RetryKind) -> bool:
        """After `exc` lost the connection under `what`: count, log and wait before the next
        try. False, at once, when the budget is spent."""
        pause = self.next_pause()
        if pause is None:
            return False
        metrics.DATABASE_RETRIES.labels(kind).inc()
        # One WARNING per request or job; a restart would otherwise log every try of each.
        level = logging.WARNING if self.retries == 1 else logging.DEBUG
        logger.log(
            level, "%s lost its database connection; retrying: %s", what, describe_fault(exc)
        )
        await asyncio.sleep(pause)
        return True


_budget: ContextVar[RetryBudget | None] = ContextVar("precis_retry_budget", default=None)


@contextmanager
def retry_budget(policy: RetryPolicy) -> Iterator[RetryBudget]:
    """Run the block (one request, one job) with a retry budget of its own."""
    budget = RetryBudget(policy)
    token = _budget.set(budget)
    try:
        yield budget
    finally:
        _budget.reset(token)


def current_budget() -> RetryBudget:
    """The budget of the request or job running; a fresh default one outside both."""
    return _budget.get() or RetryBudget(RetryPolicy())


class ReadSession(AsyncSession):
    """The session of work that only reads: a statement that lost its connection runs again
    on a fresh connection, within the request's or job's retry budget.

    The session is closed in between (the dead connection goes back to the pool, which
    discards it); rows and objects already read stay usable.
    """

    def __init__(self, *args: Any, driver: AsyncEngine | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.driver = driver
        """The engine whose driver runs the hot reads in this scope (`api.db.driver.fetch`),
        as `api.db.engine.create_read_sessionmaker` chose it; None: they go through the
        session."""

    async def __aexit__(self, type_: Any, value: Any, traceback: Any) -> None:
        # The hot reads run on the driver (`api.db.driver`) and never open the session: it
        # then holds nothing to close, and closing would cost a task and a hop through
        # SQLAlchemy's greenlet bridge (about a tenth of a history load).
        if self.sync_session.in_transaction() or self.sync_session.identity_map:
            await super().__aexit__(type_, value, traceback)

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        return await self._again_if_connection_lost(super().execute, *args, **kwargs)

    async def scalar(self, *args: Any, **kwargs: Any) -> Any:
        return await self._again_if_connection_lost(super().scalar, *args, **kwargs)

    async def scalars(self, *args: Any, **kwargs: Any) -> Any:
        return await self._again_if_connection_lost(super().scalars, *args, **kwargs)

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        return await self._again_if_connection_lost(super().get, *args, **kwargs)

    async def _again_if_connection_lost(
        self, statement: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any
    ) -> Any:
        return await read_again_if_connection_lost(partial(statement, *args, **kwargs), self.close)


class PooledReadSession(ReadSession):
    """A read session behind a transaction pooler: each statement runs in a transaction of its
    own, ended at once, so no read holds a server connection while its request goes on (a
    `compact` waits on the LLM). Rows come back fully fetched, and objects stay loaded."""

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        return await self._ended(await super().execute(*args, **kwargs))

    async def scalar(self, *args: Any, **kwargs: Any) -> Any:
        return await self._ended(await super().scalar(*args, **kwargs))

    async def scalars(self, *args: Any, **kwargs: Any) -> Any:
        return await self._ended(await super().scalars(*args, **kwargs))

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        return await self._ended(await super().get(*args, **kwargs))

    async def _ended(self, answer: Any) -> Any:
        await self.commit()
        return answer


async def read_again_if_connection_lost(
    read: Callable[[], Awaitable[T]], release: Callable[[], Awaitable[None]] | None = None
) -> T:
    """`read`, run again on a fresh connection while it loses its connection, within the
    retry budget (after `release` hands the dead one back to the pool, which discards it)."""
    budget = current_budget()
    while True:
        try:
            return await read()
        except Exception as exc:
            if not connection_lost(exc):
                raise
            if release is not None:
                await release()
            if not await budget.wait_to_retry(exc, "a read", "read"):
                raise


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
                raise CommitConnectionLost(str(exc)) from exc
            raise


@asynccontextmanager
async def driver_connection(engine: AsyncEngine) -> AsyncIterator[Any]:
    """The driver connection (asyncpg's, or aiosqlite's) of a connection checked out of
    `engine`'s pool, outside any transaction: each statement on it commits on its own. Behind
    a transaction pooler (`api.db.pooler`), inside one transaction that commits when the block
    ends.

    A connection that failed, or whose operation was cancelled halfway, never goes back to the
    pool (the next checkout would find it busy): it is invalidated. The pool's own calls
    (check-in, invalidation) run in SQLAlchemy's greenlet bridge, as they do for its async
    engine.
    """
    pooled = await engine.raw_connection()
    connection: Any = pooled.driver_connection
    try:
        if transaction_pooled(engine):
            # a transaction pooler lends a server connection per transaction
            async with connection.transaction():
                yield connection
        else:
            yield connection
    except BaseException as exc:
        await greenlet_spawn(pooled.invalidate, exc if isinstance(exc, Exception) else None)
        raise
    await greenlet_spawn(pooled.close)


async def sqlite_driver_transaction(
    engine: AsyncEngine, work: Callable[[sqlite3.Connection], T]
) -> T:
    """`work` in one SQLite transaction on the driver's own connection, begun (taking the
    database's write lock: BEGIN IMMEDIATE) and committed, or rolled back on any error, around
    it in the same call to the driver's thread: one hop, where SQLAlchemy's session makes one
    per statement."""
    async with driver_connection(engine) as connection:
        # aiosqlite's own queue to its thread (as SQLAlchemy's dialect uses it too)
        done: T = await connection._execute(_in_transaction, connection._conn, work)
    return done


def _in_transaction(connection: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """Run in the driver's thread: `work` between BEGIN IMMEDIATE and COMMIT (or ROLLBACK)."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        done = work(connection)
    except BaseException:
        connection.rollback()
        raise
    connection.commit()
    return done


def connection_lost_or_commit_unknown(exc: BaseException) -> bool:
    """The connection was lost under the work, before or during its COMMIT: nothing was wrong
    with the work itself. Unlike `connection_lost`, it includes `CommitConnectionLost`, whose
    outcome is unknown: only work that may run twice retries on it."""
    return isinstance(exc, CommitConnectionLost) or connection_lost(exc)


@dataclass(frozen=True)
class Database:
    """The units of work on one engine: write transactions, autocommit reads, and the SQLite
    append's transaction on the driver. The requests have one, on their pool; summarization,
    its lease and the worker share another, on the pool of their own (`api.main`)."""

    sessionmaker: async_sessionmaker[AsyncSession]
    read_sessionmaker: async_sessionmaker[AsyncSession]
    write_lock: asyncio.Lock | None
    """SQLite only: the process's writers take turns (see `transaction`)."""

    def transaction(self) -> AbstractAsyncContextManager[AsyncSession]:
        """A write transaction: commits when its block ends, rolls back on any error."""
        return transaction(self.sessionmaker, self.write_lock)

    async def write(
        self, work: Callable[[AsyncSession], Awaitable[T]], *, repeatable: bool = False
    ) -> T:
        """`work` in one transaction, run again within the retry budget when the connection
        was lost before COMMIT (the transaction rolled back: nothing was stored).

        `repeatable`: a second run of work that landed answers as the first did (a merge
        patch, removing a given message), so a connection lost during COMMIT runs it again too;
        otherwise `CommitConnectionLost` goes up (503: read it back, or retry).
        """
        budget = current_budget()
        while True:
            try:
                async with self.transaction() as db:
                    return await work(db)
            except Exception as exc:
                again = connection_lost(exc) or (
                    repeatable and connection_lost_or_commit_unknown(exc)
                )
                if not again or not await budget.wait_to_retry(exc, "a write", "write"):
                    raise

    async def driver_transaction(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """SQLite: `work` (its statements on the driver's sqlite3 connection) in one
        transaction in one call to the driver's thread, after the process's other writers
        (`sqlite_driver_transaction`). A local COMMIT loses no connection, so it never runs
        twice."""
        async with self.write_lock or nullcontext():
            return await sqlite_driver_transaction(self.engine, work)

    @property
    def engine(self) -> AsyncEngine:
        engine: AsyncEngine = self.sessionmaker.kw["bind"]
        return engine

    def reading(self) -> AsyncSession:
        """A read session: autocommit, each statement run again if it loses its connection."""
        return self.read_sessionmaker()


async def retrying(operation: Callable[[], Awaitable[T]], what: str, kind: RetryKind) -> T:
    """Run `operation`, again on a fresh connection while the connection dies under it,
    within the retry budget.

    For work that is safe to repeat: a read, a job's bookkeeping (the second run of one that
    landed changes nothing), a summarization (it summarizes what is still unsummarized).
    `kind` labels `precis_database_retries_total`.
    """
    budget = current_budget()
    while True:
        try:
            return await operation()
        except Exception as exc:
            if not connection_lost_or_commit_unknown(exc) or not await budget.wait_to_retry(
                exc, what, kind
            ):
                raise
