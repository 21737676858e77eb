"""What Precis is measured against: the raw drivers, and the libraries users would pick instead.

- `RawPostgres` / `RawSqlite`: asyncpg and sqlite3 (WAL) doing the same inserts into a minimal
  table indexed on `(session_id, id)`, and one indexed query for the same rows a load returns:
  the limit.
- `RawPostgres.store_statement`, `RawPostgres.load_statement` and `RawAiosqlite`: the raw
  driver (on a bare connection) running exactly the store's own statements, so a ratio
  against them is what the service adds around its SQL.
- `AgentsPeer`: the OpenAI Agents SDK `SQLAlchemySession` (`add_items` / `get_items(limit=50)`).
- `LangchainPeer`: langchain-postgres `PostgresChatMessageHistory` (add / get messages).

The peers are imported only when used: they live in the bench virtualenv, never in the product.
"""

from __future__ import annotations

import itertools
import sqlite3
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import asyncpg
from sqlalchemy.dialects import postgresql, sqlite

from api.append.postgresql import arguments, statement
from api.append.sqlite import (
    SUMMARIZED_AND_QUEUED,
    UPDATE_SESSION,
    encode_time,
    insert_statement,
    insert_values,
)
from api.db.driver import DriverStatement
from api.db.models import utcnow
from api.store.loader import HistoryStart, load_parameters, load_statement
from api.store.retention import NEVER_IDLE
from api.store.rows import MessageRow, NewMessage
from api.summary_plans import BacklogCounting
from scripts.bench.lib import TENANT, RoundFn, concurrent, sequential

RAW_TABLE = "bench_raw_messages"

SUMMARY_LIMIT = 3
"""Live summaries a bench load asks for (`PrecisStore.load`)."""

postgresql_dialect = postgresql.asyncpg.dialect()  # type: ignore[no-untyped-call]
sqlite_dialect = sqlite.aiosqlite.dialect()

LOAD_COLUMNS = (
    "id, seq, role, content, content_parts, name, tool_calls, tool_call_id, metadata, "
    "client_id, token_count, created_at"
)
"""The columns the Precis loader reads, so the raw query moves the same bytes."""

Row = tuple[str, str, int]
"""A raw insert: role, content, token count."""

Query = tuple[str, tuple[Any, ...]]
"""SQL in the driver's placeholder style, and its arguments."""


def load_query(
    placeholders: tuple[str, str, str], session_id: int, after_seq: int, limit: int | None
) -> Query:
    """The raw load: the loader's rows by one indexed range scan (newest first when limited)."""
    first, second, third = placeholders
    query = f"SELECT {LOAD_COLUMNS} FROM messages WHERE session_id = {first} AND seq > {second} "
    if limit is None:
        return query + "ORDER BY seq", (session_id, after_seq)
    return query + f"ORDER BY seq DESC LIMIT {third}", (session_id, after_seq, limit)


class RawPostgres:
    """asyncpg straight to the server: the floor for PostgreSQL."""

    label = "raw asyncpg"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.conns: list[Any] = []

    async def setup(self, connections: int) -> None:
        self.conns = [await asyncpg.connect(self.dsn) for _ in range(connections)]
        await self.conns[0].execute(
            f"CREATE TABLE {RAW_TABLE} (id bigserial PRIMARY KEY, session_id bigint NOT NULL,"
            " role text NOT NULL, content text, token_count integer NOT NULL,"
            " created_at timestamptz NOT NULL DEFAULT now())"
        )
        await self.conns[0].execute(f"CREATE INDEX ON {RAW_TABLE} (session_id, id)")

    async def close(self) -> None:
        for conn in self.conns:
            await conn.close()

    _INSERT = (
        f"INSERT INTO {RAW_TABLE} (session_id, role, content, token_count) VALUES ($1, $2, $3, $4)"
    )

    def single(self, rows: Sequence[Row]) -> RoundFn:
        """One INSERT ... RETURNING id per transaction, one session."""
        conn = self.conns[0]

        async def one(i: int) -> None:
            async with conn.transaction():
                await conn.fetchval(self._INSERT + " RETURNING id", 1, *rows[i % len(rows)])

        return sequential(one)

    def concurrent(self, rows: Sequence[Row], workers: int) -> RoundFn:
        """The same, one connection and session per worker, all at once."""

        async def one(worker: int, i: int) -> None:
            conn = self.conns[worker]
            async with conn.transaction():
                await conn.fetchval(
                    self._INSERT + " RETURNING id",
                    100 + worker,
                    *rows[(worker * 31 + i) % len(rows)],
                )

        return concurrent(one, workers)

    def batches(self, rows: Sequence[Row], batch: int) -> RoundFn:
        """`executemany` of `batch` rows per transaction."""
        conn = self.conns[0]

        async def one(i: int) -> None:
            chunk = [(2, *rows[(i * batch + k) % len(rows)]) for k in range(batch)]
            async with conn.transaction():
                await conn.executemany(self._INSERT, chunk)

        return sequential(one)

    def store_statement(self, news: Sequence[NewMessage], keyed: bool = False) -> RoundFn:
        """The store's own append statement (`api.append.postgresql.statement`), one message at a
        time on a bare connection: what the service's append costs without the service;
        `keyed`: each message with a new client_id."""
        conn = self.conns[0]
        counting = BacklogCounting(pinned_floor=True, tokens_below=80)
        keys = itertools.count()
        session = "raw-keyed" if keyed else "raw-statement"

        async def one(i: int) -> None:
            message = news[i % len(news)]
            if keyed:
                message = message._replace(client_id=f"raw-{next(keys)}")
            values = arguments("bench", session, [message], utcnow(), i, counting)
            await conn.fetchrow(statement([message]), *values)

        return sequential(one)

    def store_statement_concurrent(self, news: Sequence[NewMessage], workers: int) -> RoundFn:
        """The store's append statement on `workers` bare connections at once, one session
        each: what concurrent appends cost the server without the service."""
        counting = BacklogCounting(pinned_floor=True, tokens_below=80)

        async def one(worker: int, i: int) -> None:
            message = news[(worker * 31 + i) % len(news)]
            values = arguments("bench", f"raw-statement-{worker}", [message], utcnow(), i, counting)
            await self.conns[worker].fetchrow(statement([message]), *values)

        return concurrent(one, workers)

    def load_statement(self, start: HistoryStart, max_tokens: int | None) -> RoundFn:
        """The loader's own statement (`api.store.loader.load_statement`: the tail's first
        page, with the pinned prefix and the live summaries when the session has them) on a
        bare connection."""
        conn = self.conns[0]
        statement = load_statement(start.session, start.summarized)
        compiled = DriverStatement.compile(statement, postgresql_dialect)
        args = compiled.arguments(load_parameters(start.session, SUMMARY_LIMIT, max_tokens))

        async def one(_i: int) -> None:
            await conn.fetch(compiled.sql, *args)

        return sequential(one)

    @staticmethod
    def loader_query(session_id: int, after_seq: int, limit: int | None) -> Query:
        """One indexed query for the rows the loader returns (newest first when limited)."""
        return load_query(("$1", "$2", "$3"), session_id, after_seq, limit)

    def loader(self, session_id: int, after_seq: int, limit: int | None) -> RoundFn:
        conn = self.conns[0]
        query, args = self.loader_query(session_id, after_seq, limit)

        async def one(_i: int) -> None:
            await conn.fetch(query, *args)

        return sequential(one)


class RawSqlite:
    """The stdlib sqlite3 module in WAL mode, synchronous=NORMAL: the floor for SQLite."""

    label = "raw sqlite3"

    def __init__(self, path: str) -> None:
        self.path = path
        self.conns: list[sqlite3.Connection] = []

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    async def setup(self, connections: int) -> None:
        self.conns = [self._connect() for _ in range(connections)]
        self.conns[0].execute(
            f"CREATE TABLE {RAW_TABLE} (id INTEGER PRIMARY KEY, session_id INTEGER NOT NULL,"
            " role TEXT NOT NULL, content TEXT, token_count INTEGER NOT NULL,"
            " created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)"
        )
        self.conns[0].execute(f"CREATE INDEX ix_{RAW_TABLE} ON {RAW_TABLE} (session_id, id)")
        self.conns[0].commit()

    async def close(self) -> None:
        for conn in self.conns:
            conn.close()

    _INSERT = (
        f"INSERT INTO {RAW_TABLE} (session_id, role, content, token_count) VALUES (?, ?, ?, ?)"
    )

    def single(self, rows: Sequence[Row]) -> RoundFn:
        conn = self.conns[0]

        async def one(i: int) -> None:
            conn.execute(self._INSERT, (1, *rows[i % len(rows)]))
            conn.commit()

        return sequential(one)

    def concurrent(self, rows: Sequence[Row], workers: int) -> RoundFn:
        """One thread and connection per session; SQLite serializes the writers."""

        async def run(n: int, offset: int) -> list[float]:
            latencies: list[float] = []

            def worker(w: int) -> None:
                conn = self.conns[w]
                for i in range(offset, offset + n):
                    t0 = time.perf_counter()
                    conn.execute(self._INSERT, (100 + w, *rows[(w * 31 + i) % len(rows)]))
                    conn.commit()
                    latencies.append(time.perf_counter() - t0)

            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(worker, range(workers)))
            return latencies

        return run

    def batches(self, rows: Sequence[Row], batch: int) -> RoundFn:
        conn = self.conns[0]

        async def one(i: int) -> None:
            chunk = [(2, *rows[(i * batch + k) % len(rows)]) for k in range(batch)]
            conn.executemany(self._INSERT, chunk)
            conn.commit()

        return sequential(one)

    @staticmethod
    def loader_query(session_id: int, after_seq: int, limit: int | None) -> Query:
        return load_query(("?", "?", "?"), session_id, after_seq, limit)

    def loader(self, session_id: int, after_seq: int, limit: int | None) -> RoundFn:
        conn = self.conns[0]
        query, args = self.loader_query(session_id, after_seq, limit)

        async def one(_i: int) -> None:
            conn.execute(query, args).fetchall()

        return sequential(one)


class RawAiosqlite:
    """aiosqlite, the driver Precis uses on SQLite: every call is a hop to its thread.

    `single` inserts into the minimal table (how much of the gap to sqlite3 is the async
    driver itself); `store_statements` and `load_statement` run exactly the store's
    statements, one call each, the reference of the SQLite targets.
    """

    label = "raw aiosqlite"

    def __init__(self, path: str) -> None:
        self.path = path
        self.conn: Any = None

    async def setup(self) -> None:
        import aiosqlite

        self.conn = await aiosqlite.connect(self.path)
        await self.conn.execute("PRAGMA synchronous=NORMAL")

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()

    def single(self, rows: Sequence[Row]) -> RoundFn:
        async def one(i: int) -> None:
            await self.conn.execute(RawSqlite._INSERT, (3, *rows[i % len(rows)]))
            await self.conn.commit()

        return sequential(one)

    def store_statements(self, news: Sequence[NewMessage], external_id: str) -> RoundFn:
        """The statements every append of one message without a client id runs
        (`api.append.sqlite`), one call each: BEGIN IMMEDIATE, the session's UPDATE,
        the INSERT, the trigger's look at summaries and jobs, COMMIT. The session must exist.
        """
        conn = self.conn

        async def one(i: int) -> None:
            now = utcnow()
            at = encode_time(now)
            await conn.execute("BEGIN IMMEDIATE")
            [row] = await conn.execute_fetchall(
                UPDATE_SESSION,
                (at, 1, 0, "openai", TENANT, external_id, "openai", encode_time(NEVER_IDLE)),
            )
            session_id, last_seq = row[0], row[5]
            message = MessageRow(0, session_id, last_seq, *news[i % len(news)], now, None, None)
            await conn.execute_fetchall(insert_statement(1), insert_values([message]))
            await conn.execute_fetchall(SUMMARIZED_AND_QUEUED, (session_id, session_id))
            await conn.commit()

        return sequential(one)

    def load_statement(self, start: HistoryStart, max_tokens: int | None) -> RoundFn:
        """The loader's own statement (`api.store.loader.load_statement`) in one call."""
        statement = load_statement(start.session, start.summarized)
        compiled = DriverStatement.compile(statement, sqlite_dialect)
        args = compiled.arguments(load_parameters(start.session, SUMMARY_LIMIT, max_tokens))

        async def one(_i: int) -> None:
            await self.conn.execute_fetchall(compiled.sql, args)

        return sequential(one)


# --- peers ----------------------------------------------------------------------------------


class PeerMissing(Exception):
    """The peer library is not installed (run through `make bench`, which installs it)."""


class AgentsPeer:
    """OpenAI Agents SDK `SQLAlchemySession`, on its own engine with default options."""

    name = "openai-agents SQLAlchemySession"

    def __init__(self, url: str) -> None:
        try:
            from agents.extensions.memory.sqlalchemy_session import (  # type: ignore[import-not-found, unused-ignore]
                SQLAlchemySession,
            )
        except ImportError as exc:
            raise PeerMissing(f"{self.name}: {exc}") from exc
        from sqlalchemy.ext.asyncio import create_async_engine

        self._cls: Any = SQLAlchemySession
        self.engine = create_async_engine(url)
        self._tables_made = False

    def session(self, session_id: str) -> Any:
        made = self._tables_made
        self._tables_made = True
        return self._cls(session_id, engine=self.engine, create_tables=not made)

    @staticmethod
    def item(message: dict[str, str]) -> dict[str, str]:
        return {"role": message["role"], "content": message["content"]}

    async def close(self) -> None:
        await self.engine.dispose()


class LangchainPeer:
    """langchain-postgres `PostgresChatMessageHistory` on psycopg async connections."""

    name = "langchain-postgres PostgresChatMessageHistory"
    table = "langchain_chat_history"

    def __init__(self, dsn: str) -> None:
        try:
            import psycopg  # type: ignore[import-not-found, unused-ignore]
            from langchain_core.messages import (  # type: ignore[import-not-found, unused-ignore]
                AIMessage,
                HumanMessage,
            )
            from langchain_postgres import (  # type: ignore[import-not-found, unused-ignore]
                PostgresChatMessageHistory,
            )
        except ImportError as exc:
            raise PeerMissing(f"{self.name}: {exc}") from exc
        self.dsn = dsn
        self._psycopg: Any = psycopg
        self._history: Any = PostgresChatMessageHistory
        self._human: Any = HumanMessage
        self._ai: Any = AIMessage
        self._connections: list[Any] = []

    async def connect(self, connections: int) -> None:
        """One psycopg connection per concurrent session (a connection runs one query at once)."""
        for _ in range(connections):
            self._connections.append(await self._psycopg.AsyncConnection.connect(self.dsn))
        await self._history.acreate_tables(self._connections[0], self.table)

    def history(self, connection: int, session_uuid: str) -> Any:
        return self._history(
            self.table, session_uuid, async_connection=self._connections[connection]
        )

    def message(self, message: dict[str, str]) -> Any:
        kind = self._human if message["role"] == "user" else self._ai
        return kind(content=message["content"])

    @staticmethod
    def new_session() -> str:
        return str(uuid.uuid4())

    async def close(self) -> None:
        for conn in self._connections:
            await conn.close()
        self._connections = []
