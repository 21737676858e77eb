"""The hot path: statements run on a pooled connection's driver connection, past
SQLAlchemy's execution layer (the history reads here, compiled once; the appends in
`api.append.postgresql` and `api.append.sqlite`).

The pool, its checkout checks (`api.db.engine`), the column types' encoding and decoding and
the statements themselves (SQLAlchemy Core, so they stay portable and typed) are
SQLAlchemy's; only the execution is the driver's, which measured about half of a history
load's cost on PostgreSQL and most of it on SQLite (`docs/performance.md`).

- PostgreSQL: asyncpg, one round trip per statement; asyncpg decodes every column itself
  (the dialect registers its JSON codecs).
- SQLite: aiosqlite runs each call in its connection's thread, a hop that costs about as much
  as a small query. A read of at most a page of rows runs on the event loop instead, on the
  same sqlite3 connection: in WAL mode a reader never waits for a writer, so it cannot block
  the loop for longer than the read itself. Larger reads take the hop.

A read that lost its connection runs once more on a fresh one, as
`api.db.transactions.ReadSession` does for the others. The connections come from the unit of
work (`api.db.transactions.driver_connection`), which owns every transaction on them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.sql import ClauseElement, ColumnElement, Executable
from sqlalchemy.sql.compiler import SQLCompiler

from api.db.transactions import (
    Database,
    ReadSession,
    driver_connection,
    read_again_if_connection_lost,
    retrying,
)

Processor = Callable[[Any], Any]


Decoders = tuple[tuple[int, Processor], ...]
"""The columns that need decoding, by position, each with its processor."""


def decoders(columns: Iterable[ColumnElement[Any]], dialect: Dialect) -> Decoders:
    """What turns each column's stored value into its Python value on `dialect`'s driver
    (SQLite keeps JSON and timestamps as text); none where the driver does it itself."""
    if dialect.name == "postgresql":
        return ()
    processors = (
        column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns
    )
    return tuple((i, process) for i, process in enumerate(processors) if process is not None)


def encoders(
    columns: Iterable[ColumnElement[Any]], dialect: Dialect
) -> tuple[Processor | None, ...]:
    """What turns each column's Python value into what `dialect`'s driver stores."""
    return tuple(column.type.dialect_impl(dialect).bind_processor(dialect) for column in columns)


def decode(rows: Iterable[Sequence[Any]], columns: Decoders) -> list[Any]:
    """`rows` with the values of `columns` decoded (`decoders`); as they are if none."""
    if not columns:
        return list(rows)
    decoded = []
    for row in rows:
        values = list(row)
        for i, process in columns:
            value = values[i]
            if value is not None:
                values[i] = process(value)
        decoded.append(values)
    return decoded


@dataclass(frozen=True)
class DriverStatement:
    """A statement as the driver takes it: SQL text, its parameters' names in order, and the
    decoders of its result columns."""

    sql: str
    names: tuple[str, ...]
    constants: Mapping[str, Any]
    """Values bound in the statement itself (literals), by name."""
    decoders: Decoders
    encoders: tuple[Processor | None, ...]
    """What turns each parameter's Python value into what the driver stores, by position
    (`write` applies them; the reads' callers pass values as the driver takes them)."""

    @classmethod
    def compile(cls, statement: Executable, dialect: Dialect) -> DriverStatement:
        compiled = cast(SQLCompiler, cast(ClauseElement, statement).compile(dialect=dialect))
        names = tuple(compiled.positiontup or ())
        selected = getattr(statement, "selected_columns", ())
        binds = (compiled.binds[name].type.dialect_impl(dialect) for name in names)
        return cls(
            str(compiled),
            names,
            dict(compiled.params),
            decoders(selected, dialect),
            tuple(bind.bind_processor(dialect) for bind in binds),
        )

    def arguments(self, params: Mapping[str, Any]) -> list[Any]:
        return [params[name] if name in params else self.constants[name] for name in self.names]

    def encoded(self, params: Mapping[str, Any]) -> list[Any]:
        """`arguments`, each encoded as the driver stores it."""
        return [
            value if encode is None or value is None else encode(value)
            for value, encode in zip(self.arguments(params), self.encoders, strict=True)
        ]


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
    """Whether `fetch` and the appends run on this engine's driver (asyncpg or aiosqlite)."""
    return (engine.dialect.name, engine.dialect.driver) in {
        ("postgresql", "asyncpg"),
        ("sqlite", "aiosqlite"),
    }


async def fetch(
    engine: AsyncEngine, statement: Executable, params: Mapping[str, Any], *, paged: bool = True
) -> list[Any]:
    """The rows of a read-only `statement` (built once, at import), run on the driver.

    Outside any transaction: each statement sees what was committed when it started, as the
    read sessions' autocommit statements do. `paged`: the statement returns at most a page
    of rows (on SQLite it then runs on the event loop).
    """
    compiled = _driver_statement(statement, engine.dialect)
    arguments = compiled.arguments(params)
    rows = await read_again_if_connection_lost(
        partial(_fetch_once, engine, compiled.sql, arguments, paged)
    )
    return decode(rows, compiled.decoders)


def reading_engine(db: AsyncSession) -> AsyncEngine | None:
    """The engine whose driver runs `db`'s next read (`read`), or None: `db` reads itself."""
    engine = db.driver if isinstance(db, ReadSession) else None
    return engine if engine is not None and not db.in_transaction() else None


async def read(
    db: AsyncSession, statement: Executable, params: Mapping[str, Any], paged: bool = True
) -> list[Any]:
    """The rows of a read, run on the driver (`fetch`) where the unit of work gave the read
    session one (`ReadSession.driver`), else in `db`; `paged`: at most a page of them. In a
    read session the statement runs outside any transaction either way.

    A read session that already holds a connection (a read through SQLAlchemy before this one)
    reads on it: the driver would take a second one from the pool, and requests each holding
    one while waiting for another would wait for each other until the pool's timeout."""
    engine = reading_engine(db)
    if engine is not None:
        return await fetch(engine, statement, params, paged=paged)
    return list(await db.execute(statement, params))


async def write(
    database: Database, statement: Executable, params: Mapping[str, Any], *, repeat: bool = True
) -> int:
    """A write `statement` (built once, at import) that may run twice to the same effect (an
    insert that does nothing on a conflict, a conditional update whose second run matches as
    the first did), run on the driver: on PostgreSQL in autocommit, one round trip, run again
    on a fresh connection when the connection died under it, within the retry budget (once
    only when not `repeat`: the caller reads back what landed); on SQLite in one transaction
    in one call to the driver's thread. The rows it changed."""
    engine = database.engine
    compiled = _driver_statement(statement, engine.dialect)
    arguments = compiled.encoded(params)
    if engine.dialect.name == "postgresql":

        async def once() -> int:
            async with driver_connection(engine) as connection:
                status: str = await connection.execute(compiled.sql, *arguments)
            return int(status.rsplit(" ", 1)[-1])  # "UPDATE 1", "INSERT 0 1"

        return await retrying(once, "a write", "write") if repeat else await once()
    changed: int = await database.driver_transaction(
        lambda connection: connection.execute(compiled.sql, arguments).rowcount
    )
    return changed


async def _fetch_once(engine: AsyncEngine, sql: str, arguments: list[Any], paged: bool) -> Any:
    async with driver_connection(engine) as connection:
        if engine.dialect.name == "postgresql":
            return await connection.fetch(sql, *arguments)
        if paged:
            # aiosqlite's sqlite3 connection (the driver's own attribute, as SQLAlchemy's
            # dialect uses it too), opened with check_same_thread=False (`api.db.engine`)
            return connection._conn.execute(sql, arguments).fetchall()
        return await connection.execute_fetchall(sql, arguments)
