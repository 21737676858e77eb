"""The limit of the HTTP comparison: the least a chat backend needs, on the raw driver.

- `POST /v1/sessions/{id}/messages` (`{"messages": [...]}`): one indexed INSERT per message
  (in one transaction when there are several), its id and time returned, JSON out.
- `GET /v1/sessions/{id}/history?max_tokens=N`: one indexed SELECT of the session's newest
  rows, the newest kept while they fit `max_tokens` (by a token count stored with each
  message: a character estimate, `CHARS_PER_TOKEN`), JSON out.

Nothing else: no framework, no authentication, no validation, no metrics, no seqs, no
idempotency, no summaries, no real token counting. It does the job of a chat history and
nothing of Precis's contract, so the ratio against it is what the whole of Precis costs
(`scripts/bench/hot_path.py`); the minimal app (`scripts/bench/minimal_app.py`) does
Precis's work without the framework, and sits between the two.

PostgreSQL through an asyncpg pool of the size Precis's request pool has; SQLite through one
sqlite3 connection (WAL) on a thread of its own. The table (`least_messages`) is created at
start-up if missing. Served like the others: `uvicorn scripts.bench.least_app:app` with
`DATABASE_URL` in the environment.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

import asyncpg
import pydantic_core
from sqlalchemy.engine import make_url
from starlette.types import Receive, Scope, Send

from api.settings import get_settings
from tests.support.live_server import served_app

CHARS_PER_TOKEN = 4
"""The token estimate of a message: its characters over this (a chat backend's rule of thumb)."""

HISTORY_ROWS = 200
"""The newest rows a history reads; more than any budget of the benchmark keeps."""

JSON_HEADERS = [(b"content-type", b"application/json")]

POSTGRES_TABLE = """
CREATE TABLE IF NOT EXISTS least_messages (
    id bigserial PRIMARY KEY,
    session_id text NOT NULL,
    role text NOT NULL,
    content text NOT NULL,
    token_count integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS ix_least_messages_session_id ON least_messages (session_id, id);
"""

SQLITE_TABLE = """
CREATE TABLE IF NOT EXISTS least_messages (
    id integer PRIMARY KEY,
    session_id text NOT NULL,
    role text NOT NULL,
    content text NOT NULL,
    token_count integer NOT NULL,
    created_at text NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_least_messages_session_id ON least_messages (session_id, id);
"""

INSERT = (
    "INSERT INTO least_messages (session_id, role, content, token_count) "
    "VALUES ($1, $2, $3, $4) RETURNING id, created_at"
)
SELECT = (
    "SELECT id, role, content, token_count, created_at FROM least_messages "
    "WHERE session_id = $1 ORDER BY id DESC LIMIT $2"
)
SQLITE_INSERT = (
    "INSERT INTO least_messages (session_id, role, content, token_count, created_at) "
    "VALUES (?, ?, ?, ?, ?) RETURNING id, created_at"
)
SQLITE_SELECT = SELECT.replace("$1", "?").replace("$2", "?")

Row = tuple[int, str, str, int, Any]
"""id, role, content, token count, created at."""


class PostgresHistory:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def append(self, session: str, messages: Sequence[dict[str, Any]]) -> list[Row]:
        async with self.pool.acquire() as connection:
            if len(messages) == 1:
                return [await self._insert(connection, session, messages[0])]
            async with connection.transaction():
                return [await self._insert(connection, session, one) for one in messages]

    @staticmethod
    async def _insert(connection: Any, session: str, message: dict[str, Any]) -> Row:
        role, content = message["role"], str(message.get("content") or "")
        tokens = len(content) // CHARS_PER_TOKEN + 1
        row = await connection.fetchrow(INSERT, session, role, content, tokens)
        return (row[0], role, content, tokens, row[1])

    async def newest(self, session: str) -> list[Row]:
        rows = await self.pool.fetch(SELECT, session, HISTORY_ROWS)
        return [tuple(row) for row in rows]

    async def close(self) -> None:
        await self.pool.close()


class SqliteHistory:
    def __init__(self, path: str) -> None:
        self.thread = ThreadPoolExecutor(1)
        self.connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.connection.execute("PRAGMA journal_mode=WAL")
        self.connection.execute("PRAGMA synchronous=NORMAL")
        self.connection.executescript(SQLITE_TABLE)

    async def append(self, session: str, messages: Sequence[dict[str, Any]]) -> list[Row]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.thread, self._append, session, messages)

    def _append(self, session: str, messages: Sequence[dict[str, Any]]) -> list[Row]:
        now = datetime.now(UTC).isoformat()
        rows: list[Row] = []
        with self.connection:  # one transaction
            self.connection.execute("BEGIN")
            for message in messages:
                role, content = message["role"], str(message.get("content") or "")
                tokens = len(content) // CHARS_PER_TOKEN + 1
                row = self.connection.execute(
                    SQLITE_INSERT, (session, role, content, tokens, now)
                ).fetchone()
                rows.append((row[0], role, content, tokens, row[1]))
        return rows

    async def newest(self, session: str) -> list[Row]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.thread, self._newest, session)

    def _newest(self, session: str) -> list[Row]:
        return self.connection.execute(SQLITE_SELECT, (session, HISTORY_ROWS)).fetchall()

    async def close(self) -> None:
        self.connection.close()
        self.thread.shutdown()


Store = PostgresHistory | SqliteHistory


async def open_store(database_url: str, pool_size: int) -> Store:
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        return SqliteHistory(url.database or ":memory:")
    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=pool_size)
    await pool.execute(POSTGRES_TABLE)
    return PostgresHistory(pool)


def message_out(row: Row) -> dict[str, Any]:
    return {"id": row[0], "role": row[1], "content": row[2], "created_at": row[4]}


def within(rows: Sequence[Row], max_tokens: int | None) -> tuple[list[Row], int]:
    """The newest rows (given newest first) that fit `max_tokens`, oldest first; their tokens."""
    kept: list[Row] = []
    total = 0
    for row in rows:
        if max_tokens is not None and total + row[3] > max_tokens:
            break
        kept.append(row)
        total += row[3]
    kept.reverse()
    return kept, total


class LeastApp:
    """A raw ASGI callable over one `Store`, opened by the ASGI lifespan."""

    def __init__(self) -> None:
        self.store: Store | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        status, body = await self._answer(scope, receive)
        headers = [*JSON_HEADERS, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _answer(self, scope: Scope, receive: Receive) -> tuple[int, bytes]:
        store = self.store
        assert store is not None, "the app was not started"
        parts = scope["path"].split("/")
        if scope["path"] == "/healthz":
            return 200, b'{"status":"ok"}'
        if len(parts) != 5 or parts[:3] != ["", "v1", "sessions"]:
            return 404, b'{"error":"NotFound"}'
        session = parts[3]
        if parts[4] == "messages" and scope["method"] == "POST":
            messages = json.loads(await _body(receive))["messages"]
            rows = await store.append(session, messages)
            return 201, pydantic_core.to_json({"messages": [message_out(r) for r in rows]})
        if parts[4] == "history" and scope["method"] == "GET":
            query = dict(parse_qsl(scope["query_string"].decode("latin-1")))
            budget = int(query["max_tokens"]) if "max_tokens" in query else None
            rows, tokens = within(await store.newest(session), budget)
            answer = {"messages": [message_out(r) for r in rows], "token_estimate": tokens}
            return 200, pydantic_core.to_json(answer)
        return 404, b'{"error":"NotFound"}'

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                settings = get_settings()
                self.store = await open_store(settings.database_url, settings.database_pool_size)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.store is not None:
                    await self.store.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


app = LeastApp()
"""The ASGI app: `uvicorn scripts.bench.least_app:app`; DATABASE_URL is read at start-up."""


@contextmanager
def served(database_url: str, **settings: str) -> Iterator[str]:
    """The least-work app under uvicorn in a subprocess, served as Precis is; its base URL."""
    with served_app("scripts.bench.least_app:app", database_url, **settings) as url:
        yield url
