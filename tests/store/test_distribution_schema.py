"""The migrated schema is distributable by session: every key of a session table holds its
session key (SQLite and PostgreSQL).

Citus distributes a table by one column and refuses a primary key, unique constraint or unique
index without it (each shard enforces its own), and a foreign key between distributed tables
that does not pair their distribution columns (both rows must live on one shard). Every table
holding a session's data is distributed by the session key, co-located with `sessions`
(docs/design.md section 6), so in the schema `alembic upgrade head` makes, read back with
SQLAlchemy's inspector, each session table's primary key, unique constraints and unique
indexes include its key column, and each of its foreign keys to a session table pairs its key
column with that table's. Citus is not installed here: the rules it would enforce at
`create_distributed_table` are checked on the schema itself, on both databases, and every
table is classified as a session table or not, so a new one cannot slip past the rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeVar

import pytest
from sqlalchemy import (
    Column,
    ForeignKey,
    ForeignKeyConstraint,
    Integer,
    MetaData,
    Table,
    UniqueConstraint,
    create_engine,
    inspect,
)
from sqlalchemy.engine import Connection, Inspector

from api.db.engine import create_engine as create_async_engine
from api.db.models import SESSION_KEYS

NOT_SESSION_TABLES = frozenset({"console_logins", "model_token_ratios", "alembic_version"})
"""Tables holding no session's data (reference or local tables on Citus)."""


def _named(kind: str, name: str | None, columns: Sequence[str | None]) -> str:
    """`unique index uq_x (a, b)`: a key as a violation names it."""
    named = f"{kind} {name}" if name else kind
    return f"{named} ({', '.join(column or '?' for column in columns)})"


def unique_keys(inspector: Inspector, table: str) -> Iterator[tuple[str, Sequence[str | None]]]:
    """`table`'s primary key, unique constraints and unique indexes: how each is named, and
    its columns."""
    primary = inspector.get_pk_constraint(table)
    columns: Sequence[str | None] = primary["constrained_columns"]
    yield _named("primary key", primary.get("name"), columns), columns
    for unique in inspector.get_unique_constraints(table):
        columns = unique["column_names"]
        yield _named("unique constraint", unique["name"], columns), columns
    for index in inspector.get_indexes(table):
        # PostgreSQL lists a unique constraint's index too: the constraint names it already
        if index["unique"] and "duplicates_constraint" not in index:
            columns = index["column_names"]
            yield _named("unique index", index["name"], columns), columns


def table_violations(inspector: Inspector, table: str, keys: Mapping[str, str]) -> list[str]:
    """How `table`'s keys break distribution by its session key column, `keys[table]`."""
    key = keys[table]
    names = {column["name"] for column in inspector.get_columns(table)}
    missing = [] if key in names else [f"{table}: no {key} column"]
    problems = {
        f"{table}: {named} lacks {key}"
        for named, columns in unique_keys(inspector, table)
        if key not in columns
    }
    return missing + sorted(problems) + foreign_key_violations(inspector, table, keys)


def foreign_key_violations(inspector: Inspector, table: str, keys: Mapping[str, str]) -> list[str]:
    """Foreign keys from `table` to a session table that do not pair the two key columns."""
    problems = []
    for foreign in inspector.get_foreign_keys(table):
        referred = foreign["referred_table"]
        if referred not in keys:
            continue
        pairs = set(zip(foreign["constrained_columns"], foreign["referred_columns"], strict=True))
        if (keys[table], keys[referred]) not in pairs:
            source = _named("foreign key", foreign.get("name"), foreign["constrained_columns"])
            target = _named(referred, None, foreign["referred_columns"])
            problems.append(
                f"{table}: {source} -> {target} does not pair "
                f"{table}.{keys[table]} with {referred}.{keys[referred]}"
            )
    return problems


def schema_violations(inspector: Inspector, keys: Mapping[str, str]) -> list[str]:
    """Every way the session tables' keys break distribution by the session key."""
    return [
        problem
        for table in sorted(keys)
        for problem in (
            table_violations(inspector, table, keys)
            if inspector.has_table(table)
            else [f"{table}: no such table"]
        )
    ]


T = TypeVar("T")


async def read_schema(url: str, read: Callable[[Inspector], T]) -> T:
    """`read(inspector)` of the database at `url`."""
    engine = create_async_engine(url)

    def run(connection: Connection) -> T:
        return read(inspect(connection))

    try:
        async with engine.connect() as connection:
            return await connection.run_sync(run)
    finally:
        await engine.dispose()


both_backends = pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)


# --- the checker can fail ---------------------------------------------------------------------


def test_the_checker_names_every_key_without_the_session_key() -> None:
    schema = MetaData()
    Table("sessions", schema, Column("id", Integer, primary_key=True))
    Table(
        "messages",
        schema,
        Column("id", Integer, primary_key=True),
        Column("session_id", Integer, ForeignKey("sessions.id")),
        Column("seq", Integer),
        Column("summary_id", Integer, ForeignKey("session_summaries.id")),
        UniqueConstraint("seq", name="uq_messages_seq"),
    )
    Table(
        "session_summaries",
        schema,
        Column("session_id", Integer, ForeignKey("sessions.id"), primary_key=True),
        Column("id", Integer, primary_key=True),
    )
    Table(
        "session_summary_messages",
        schema,
        Column("session_id", Integer, primary_key=True),
        Column("summary_id", Integer, primary_key=True),
        ForeignKeyConstraint(
            ["session_id", "summary_id"], ["session_summaries.session_id", "session_summaries.id"]
        ),
    )
    engine = create_engine("sqlite://")
    schema.create_all(engine)
    keys = {
        "sessions": "id",
        "messages": "session_id",
        "session_summaries": "session_id",
        "session_summary_messages": "session_id",
    }
    with engine.connect() as connection:
        found = schema_violations(inspect(connection), keys)
    engine.dispose()
    assert found == [
        "messages: primary key (id) lacks session_id",
        "messages: unique constraint uq_messages_seq (seq) lacks session_id",
        "messages: foreign key (summary_id) -> session_summaries (id) does not pair "
        "messages.session_id with session_summaries.session_id",
    ]


# --- the migrated schema ----------------------------------------------------------------------


@both_backends
async def test_every_table_is_classified_as_holding_sessions_or_not(database_url: str) -> None:
    tables = set(await read_schema(database_url, lambda inspector: inspector.get_table_names()))
    unclassified = tables - set(SESSION_KEYS) - NOT_SESSION_TABLES
    assert not unclassified, f"tables neither session nor reference tables: {unclassified}"


@both_backends
async def test_every_key_of_a_session_table_includes_the_session_key(database_url: str) -> None:
    found = await read_schema(
        database_url, lambda inspector: schema_violations(inspector, SESSION_KEYS)
    )
    if found:
        pytest.fail(f"{len(found)} violations:\n" + "\n".join(found), pytrace=False)
