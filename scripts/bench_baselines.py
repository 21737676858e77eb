"""What Precis is measured against: the raw drivers, and the libraries users would pick instead.

- `RawPostgres` / `RawSqlite`: asyncpg and sqlite3 (WAL) doing the same inserts into a minimal
  table indexed on `(session_id, id)`, and one indexed query for the same rows a load returns.
- `AgentsPeer`: the OpenAI Agents SDK `SQLAlchemySession` (`add_items` / `get_items(limit=50)`).
- `LangchainPeer`: langchain-postgres `PostgresChatMessageHistory` (add / get messages).

The peers are imported only when used: they live in the bench virtualenv, never in the product.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import asyncpg

from scripts.bench_lib import Stats, timed

RAW_TABLE = "bench_raw_messages"

LOAD_COLUMNS = (
    "id, seq, role, content, content_parts, name, tool_calls, tool_call_id, metadata, "
    "client_id, token_count, created_at"
)
"""The columns the Precis loader reads, so the raw query moves the same bytes."""

Row = tuple[str, str, int]
"""A raw insert: role, content, token count."""


class RawPostgres:
    """asyncpg straight to the server: the floor for PostgreSQL."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    async def setup(self) -> None:
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute(
                f"CREATE TABLE {RAW_TABLE} (id bigserial PRIMARY KEY, session_id bigint NOT NULL,"
                " role text NOT NULL, content text, token_count integer NOT NULL,"
                " created_at timestamptz NOT NULL DEFAULT now())"
            )
            await conn.execute(f"CREATE INDEX ON {RAW_TABLE} (session_id, id)")
        finally:
            await conn.close()

    _INSERT = (
        f"INSERT INTO {RAW_TABLE} (session_id, role, content, token_count) VALUES ($1, $2, $3, $4)"
    )

    async def append_single(self, rows: Sequence[Row], count: int) -> Stats:
        conn = await asyncpg.connect(self.dsn)
        try:

            async def one(i: int) -> None:
                role, content, tokens = rows[i % len(rows)]
                async with conn.transaction():
                    await conn.fetchval(self._INSERT + " RETURNING id", 1, role, content, tokens)

            return await timed(one, count)
        finally:
            await conn.close()

    async def append_concurrent(self, rows: Sequence[Row], workers: int, per_worker: int) -> Stats:
        conns = [await asyncpg.connect(self.dsn) for _ in range(workers)]
        try:
            latencies: list[float] = []

            async def run(worker: int) -> None:
                conn = conns[worker]
                for i in range(-1, per_worker):
                    role, content, tokens = rows[(worker * 31 + i) % len(rows)]
                    t0 = time.perf_counter()
                    async with conn.transaction():
                        await conn.fetchval(
                            self._INSERT + " RETURNING id", 100 + worker, role, content, tokens
                        )
                    if i >= 0:
                        latencies.append(time.perf_counter() - t0)

            started = time.perf_counter()
            await asyncio.gather(*(run(w) for w in range(workers)))
            return Stats.of(latencies, 1, time.perf_counter() - started)
        finally:
            for conn in conns:
                await conn.close()

    async def append_batches(self, rows: Sequence[Row], batch: int, count: int) -> Stats:
        conn = await asyncpg.connect(self.dsn)
        try:

            async def one(i: int) -> None:
                start = (i * batch) % len(rows)
                chunk = [(2, *rows[(start + k) % len(rows)]) for k in range(batch)]
                async with conn.transaction():
                    await conn.executemany(self._INSERT, chunk)

            return await timed(one, count, items_per_op=batch)
        finally:
            await conn.close()

    async def load(
        self, session_id: int, after_seq: int, limit: int | None, count: int
    ) -> tuple[Stats, int]:
        """One indexed query for the rows the loader returns (newest first when limited)."""
        conn = await asyncpg.connect(self.dsn)
        if limit is None:
            query = (
                f"SELECT {LOAD_COLUMNS} FROM messages WHERE session_id = $1 AND seq > $2 "
                "ORDER BY seq"
            )
            args: tuple[Any, ...] = (session_id, after_seq)
        else:
            query = (
                f"SELECT {LOAD_COLUMNS} FROM messages WHERE session_id = $1 AND seq > $2 "
                "ORDER BY seq DESC LIMIT $3"
            )
            args = (session_id, after_seq, limit)
        returned = 0
        try:

            async def one(_i: int) -> None:
                nonlocal returned
                returned = len(await conn.fetch(query, *args))

            return await timed(one, count), returned
        finally:
            await conn.close()


class RawSqlite:
    """The stdlib sqlite3 module in WAL mode, synchronous=NORMAL: the floor for SQLite."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    async def setup(self) -> None:
        conn = self._connect()
        try:
            conn.execute(
                f"CREATE TABLE {RAW_TABLE} (id INTEGER PRIMARY KEY, session_id INTEGER NOT NULL,"
                " role TEXT NOT NULL, content TEXT, token_count INTEGER NOT NULL,"
                " created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)"
            )
            conn.execute(f"CREATE INDEX ix_{RAW_TABLE} ON {RAW_TABLE} (session_id, id)")
            conn.commit()
        finally:
            conn.close()

    _INSERT = (
        f"INSERT INTO {RAW_TABLE} (session_id, role, content, token_count) VALUES (?, ?, ?, ?)"
    )

    async def append_single(self, rows: Sequence[Row], count: int) -> Stats:
        conn = self._connect()
        try:

            async def one(i: int) -> None:
                role, content, tokens = rows[i % len(rows)]
                conn.execute(self._INSERT, (1, role, content, tokens))
                conn.commit()

            return await timed(one, count)
        finally:
            conn.close()

    async def append_concurrent(self, rows: Sequence[Row], workers: int, per_worker: int) -> Stats:
        """One thread and connection per session; SQLite serializes the writers."""
        conns = [self._connect() for _ in range(workers)]
        latencies: list[float] = []

        def run(worker: int) -> None:
            conn = conns[worker]
            for i in range(per_worker):
                role, content, tokens = rows[(worker * 31 + i) % len(rows)]
                t0 = time.perf_counter()
                conn.execute(self._INSERT, (100 + worker, role, content, tokens))
                conn.commit()
                latencies.append(time.perf_counter() - t0)

        try:
            started = time.perf_counter()
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(run, range(workers)))
            return Stats.of(latencies, 1, time.perf_counter() - started)
        finally:
            for conn in conns:
                conn.close()

    async def append_batches(self, rows: Sequence[Row], batch: int, count: int) -> Stats:
        conn = self._connect()
        try:

            async def one(i: int) -> None:
                start = (i * batch) % len(rows)
                chunk = [(2, *rows[(start + k) % len(rows)]) for k in range(batch)]
                conn.executemany(self._INSERT, chunk)
                conn.commit()

            return await timed(one, count, items_per_op=batch)
        finally:
            conn.close()

    async def load(
        self, session_id: int, after_seq: int, limit: int | None, count: int
    ) -> tuple[Stats, int]:
        conn = self._connect()
        if limit is None:
            query = (
                f"SELECT {LOAD_COLUMNS} FROM messages WHERE session_id = ? AND seq > ? ORDER BY seq"
            )
            args: tuple[Any, ...] = (session_id, after_seq)
        else:
            query = (
                f"SELECT {LOAD_COLUMNS} FROM messages WHERE session_id = ? AND seq > ? "
                "ORDER BY seq DESC LIMIT ?"
            )
            args = (session_id, after_seq, limit)
        returned = 0
        try:

            async def one(_i: int) -> None:
                nonlocal returned
                returned = len(conn.execute(query, args).fetchall())

            return await timed(one, count), returned
        finally:
            conn.close()


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

    async def connect(self) -> Any:
        conn = await self._psycopg.AsyncConnection.connect(self.dsn)
        if not self._connections:
            await self._history.acreate_tables(conn, self.table)
        self._connections.append(conn)
        return conn

    def history(self, conn: Any, session_uuid: str) -> Any:
        return self._history(self.table, session_uuid, async_connection=conn)

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
