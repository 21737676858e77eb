"""The hot path on PostgreSQL: statements run on a pooled connection's asyncpg connection,
past SQLAlchemy's execution layer (the history reads here, compiled once; the append in
`api.store.pg_append`).

The pool, its checkout checks (`api.db.engine`), the dialect's JSON codecs and the statements
themselves (SQLAlchemy Core, so they stay portable and typed) are SQLAlchemy's; only the
execution is the driver's, which measured about half of a history load's cost
(`docs/performance.md`). A read cut by a lost connection runs once more on a fresh one, as
`api.db.transactions.ReadSession` does for the others.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql import ClauseElement, Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.util import greenlet_spawn

from api.db.transactions import read_once_more_if_cut


@dataclass(frozen=True)
class DriverStatement:
    """A statement as the driver takes it: SQL text, and its parameters' names in order."""

    sql: str
    names: tuple[str, ...]
    constants: Mapping[str, Any]
    """Values bound in the statement itself (literals), by name."""

    @classmethod
    def compile(cls, statement: Executable, dialect: Dialect) -> DriverStatement:
        compiled = cast(SQLCompiler, cast(ClauseElement, statement).compile(dialect=dialect))
        return cls(str(compiled), tuple(compiled.positiontup or ()), dict(compiled.params))

    def arguments(self, params: Mapping[str, Any]) -> list[Any]:
        return [params[name] if name in params else self.constants[name] for name in self.names]


_compiled: dict[tuple[int, str], tuple[Executable, DriverStatement]] = {}
"""Compiled statements by statement and dialect; each entry keeps its statement alive, so
its id cannot name another statement later."""


def _driver_statement(statement: Executable, dialect: Dialect) -> DriverStatement:
    key = (id(statement), dialect.name)
    found = _compiled.get(key)
    if found is None:
        found = _compiled[key] = (statement, DriverStatement.compile(statement, dialect))
    return found[1]


def uses_driver(engine: AsyncEngine) -> bool:
    """Whether `fetch` runs on this engine's driver (PostgreSQL through asyncpg)."""
    return engine.dialect.name == "postgresql" and engine.dialect.driver == "asyncpg"


async def fetch(engine: AsyncEngine, statement: Executable, params: Mapping[str, Any]) -> list[Any]:
    """The rows of a read-only `statement` (built once, at import), run on the driver.

    Outside any transaction: each statement sees what was committed when it started, as the
    read sessions' autocommit statements do.
    """
    compiled = _driver_statement(statement, engine.dialect)
    arguments = compiled.arguments(params)
    return await read_once_more_if_cut(partial(_fetch_once, engine, compiled, arguments))


async def _fetch_once(
    engine: AsyncEngine, compiled: DriverStatement, arguments: list[Any]
) -> list[Any]:
    async with checked_out(engine) as connection:
        rows: list[Any] = await connection.fetch(compiled.sql, *arguments)
    return rows


@asynccontextmanager
async def checked_out(engine: AsyncEngine) -> AsyncIterator[Any]:
    """The asyncpg connection of a connection checked out of `engine`'s pool, outside any
    transaction: each statement on it commits on its own.

    A connection that failed, or whose operation was cancelled halfway, never goes back to the
    pool (the next checkout would find it busy): it is invalidated. The pool's own calls
    (check-in, invalidation) run in SQLAlchemy's greenlet bridge, as they do for its async
    engine.
    """
    pooled = await engine.raw_connection()
    try:
        yield pooled.driver_connection
    except BaseException as exc:
        await greenlet_spawn(pooled.invalidate, exc if isinstance(exc, Exception) else None)
        raise
    await greenlet_spawn(pooled.close)
