"""The floor of the HTTP comparison: a raw ASGI app serving Precis's two hot routes.

`GET /v1/sessions/{id}/history` (with `max_tokens`, `summary_limit`) and
`POST /v1/sessions/{id}/messages` do what Precis does for a valid request, on the same
kind of engine (`api.db.engine.create_engine`, the same settings) through the same store
functions (`store.session_for_history` and `store.load_rows`, `api.append.store_batch`), so
the same SQL on the same pool, and answer the same bytes (`tests/scripts/test_bench_minimal_app.py`
proves it). What is left is the least an HTTP layer can add: no framework, no request
model, the answer encoded by pydantic-core's serializer straight from the rows.

Kept, because Precis does them on every such request: authentication (the same
`api.auth.authenticate`, development mode's loopback check or the bearer keys of
API_KEYS), the latency histograms of `api.metrics`, the token count of each appended
message (off the event loop above `OFFLOAD_CHARS`, as Precis does), the context assembly
under `max_tokens`, the proactive trigger's check and job.

Left out, none of which reads the database or changes the answer to a valid request:
validation of the input (the session id's pattern, unknown query parameters, the body's
content type and size limit, the message model, metadata size), the OpenAPI error
mapping of database faults (503), the inline summarization of an over-budget load (the
benchmark's sessions never summarize on load) and waking the summarization worker.

Served like Precis: `python -m scripts.bench.minimal_app --host H --port P` (what
`python -m api` does, for this app), or `uvicorn scripts.bench.minimal_app:app`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import pydantic_core
from starlette.types import Receive, Scope, Send

from api import metrics, store
from api.append import store_batch
from api.auth import authenticate
from api.context import loaded_context, shown_summaries
from api.db.engine import create_engine, create_read_sessionmaker, create_sessionmaker
from api.db.transactions import Database
from api.errors import PrecisError, Unauthorized
from api.items import parse_item
from api.settings import Settings, get_settings
from summarizer.text import OFFLOAD_CHARS
from summarizer.tokens import count_message, encoding
from tests.support.live_server import served_app

JSON_HEADERS = [(b"content-type", b"application/json")]
OPENAI_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")
"""The keys of a message in OpenAI chat shape, in the order Precis counts them."""


@dataclass(frozen=True)
class Running:
    """What the app holds between start-up and shutdown."""

    settings: Settings
    database: Database
    keys: dict[str, str]


class MinimalApp:
    """A raw ASGI callable; `lifespan()` starts and stops it (the ASGI lifespan does too)."""

    def __init__(self, settings: Settings | None = None) -> None:
        self._settings = settings
        self._running: Running | None = None

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Build the engine from the settings (Precis's request-side engine, the same way)."""
        settings = self._settings or get_settings()
        encoding()
        engine = create_engine(
            settings.database_url, pool_size=settings.database_pool_size, max_overflow=0
        )
        write_lock = asyncio.Lock() if engine.dialect.name == "sqlite" else None
        database = Database(
            create_sessionmaker(engine), create_read_sessionmaker(engine), write_lock
        )
        self._running = Running(settings, database, settings.tenant_keys())
        try:
            yield
        finally:
            self._running = None
            await engine.dispose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._serve_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        running = self._running
        assert running is not None, "the app was not started"
        status, body, headers = await self._answer(running, scope, receive)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _answer(
        self, running: Running, scope: Scope, receive: Receive
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        path: str = scope["path"]
        if path == "/healthz":
            return 200, b'{"status":"ok"}', JSON_HEADERS
        parts = path.split("/")
        method = scope["method"]
        if len(parts) != 5 or parts[:3] != ["", "v1", "sessions"] or not parts[3]:
            return _error(404, "NotFound", "Not Found")
        try:
            tenant = _tenant(running.keys, scope)
            if parts[4] == "history" and method == "GET":
                return 200, await history(running, scope, tenant, parts[3]), JSON_HEADERS
            if parts[4] == "messages" and method == "POST":
                body = await _body(receive)
                return 201, await append(running, body, tenant, parts[3]), JSON_HEADERS
        except PrecisError as exc:
            headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else {}
            return _error(exc.status_code, type(exc).__name__, exc.detail, headers)
        return _error(404, "NotFound", "Not Found")

    async def _serve_lifespan(self, receive: Receive, send: Send) -> None:
        started = self.lifespan()
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await started.__aenter__()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": repr(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await started.__aexit__(None, None, None)
                await send({"type": "lifespan.shutdown.complete"})
                return


async def history(running: Running, scope: Scope, tenant: str, external_id: str) -> bytes:
    """What Precis's history route answers, as bytes."""
    query = dict(parse_qsl(scope["query_string"].decode("latin-1")))
    max_tokens = int(query["max_tokens"]) if "max_tokens" in query else None
    summary_limit = int(query["summary_limit"]) if "summary_limit" in query else None
    with metrics.HISTORY_SECONDS.time():
        async with running.database.reading() as db:
            start = await store.session_for_history(db, tenant, external_id)
            session = start.session
            rows = await store.load_rows(
                db, session, store.EVERY_LIVE_SUMMARY, max_tokens, summarized=start.summarized
            )
        rows, left_out, left_out_messages = shown_summaries(rows, summary_limit)
        context = loaded_context(
            rows, max_tokens, left_out=left_out, left_out_messages=left_out_messages
        )
        return pydantic_core.to_json(
            {
                "session_id": session.external_id,
                "pinned": [message_out(message) for message in rows.pinned],
                "summaries": [summary_out(s, session.external_id) for s in rows.summaries],
                "messages": [message_out(m) for m in [*rows.holes, *rows.messages]],
                "context": context.messages,
                "token_estimate": context.token_estimate,
                "truncated_messages": context.truncated_messages,
                "omitted": context.omitted.as_json(),
                "cleared": [],
                # No summarization runs in this process, so none holds the session's lock.
                "summarization_pending": start.job_pending,
            }
        )


async def append(running: Running, body: bytes, tenant: str, external_id: str) -> bytes:
    """What Precis's append route answers, as bytes."""
    messages: list[dict[str, Any]] = json.loads(body)["messages"]
    with metrics.APPEND_SECONDS.time():
        size = sum(len(str(message.get("content") or "")) for message in messages)
        batch = (
            await asyncio.to_thread(new_messages, messages)
            if size > OFFLOAD_CHARS
            else new_messages(messages)
        )
        settings = running.settings
        outcome, reason = await store_batch(running.database, settings, tenant, external_id, batch)
    return pydantic_core.to_json(
        {
            "messages": [message_out(message) for message in outcome.messages],
            "summarization": {"scheduled": reason is not None, "reason": reason},
        }
    )


def new_messages(messages: Sequence[dict[str, Any]]) -> list[store.NewMessage]:
    """The rows to store, token counts included (the input is trusted to be valid)."""
    batch = []
    for message in messages:
        openai = {key: message[key] for key in OPENAI_KEYS if message.get(key) is not None}
        content = openai.get("content")
        batch.append(
            store.NewMessage(
                role=message["role"],
                content=content if isinstance(content, str) else None,
                content_parts=content if isinstance(content, list) else None,
                name=message.get("name"),
                tool_calls=openai.get("tool_calls"),
                tool_call_id=message.get("tool_call_id"),
                metadata=message.get("metadata"),
                client_id=message.get("client_id"),
                token_count=count_message(openai),
            )
        )
    return batch


def message_out(row: store.MessageRow) -> dict[str, Any]:
    """`api.schemas.MessageOut` of a row, as a dict in the same field order."""
    return {
        "id": row.id,
        "seq": row.seq,
        "role": row.role,
        "content": row.body,
        "name": row.name,
        "tool_calls": row.tool_calls,
        "tool_call_id": row.tool_call_id,
        "metadata": row.metadata,
        "client_id": row.client_id,
        "token_count": row.token_count,
        "created_at": row.created_at,
        "item": None if row.item is None else parse_item(row.item),
    }


def summary_out(row: store.SummaryRow, session_external_id: str) -> dict[str, Any]:
    """`api.schemas.SummaryOut` of a row, as a dict in the same field order."""
    return {
        "id": row.id,
        "session_id": session_external_id,
        "level": row.level,
        "first_seq": row.first_seq,
        "last_seq": row.last_seq,
        "first_message_id": row.first_message_id,
        "last_message_id": row.last_message_id,
        "message_count": row.message_count,
        "approx_tokens": row.approx_tokens,
        "summary_text": row.summary_text,
        "model": row.model,
        "superseded_by": row.superseded_by,
        "metadata": row.metadata,
        "created_at": row.created_at,
        "erased_at": row.erased_at,
    }


def _tenant(keys: dict[str, str], scope: Scope) -> str:
    authorization = ""
    for name, value in scope["headers"]:
        if name == b"authorization":
            authorization = value.decode("latin-1")
    client = scope.get("client")
    return authenticate(keys, client[0] if client else None, authorization)


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _error(
    status: int, name: str, detail: str, headers: dict[str, str] | None = None
) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    extra = [(key.lower().encode(), value.encode()) for key, value in (headers or {}).items()]
    # as Starlette's JSONResponse renders Precis's error bodies
    content = {"error": name, "detail": detail}
    body = json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode()
    return status, body, [*JSON_HEADERS, *extra]


app = MinimalApp()
"""The ASGI app: `uvicorn scripts.bench.minimal_app:app`; settings are read at start-up."""


@contextmanager
def served(database_url: str, **settings: str) -> Iterator[str]:
    """The minimal app under uvicorn in a subprocess, with the environment, flags and
    settings `tests.support.live_server.served` gives Precis; yields its base URL."""
    with served_app("scripts.bench.minimal_app:app", database_url, **settings) as url:
        yield url


def main() -> None:
    """`python -m scripts.bench.minimal_app --host H --port P`, as `python -m api` serves."""
    import uvicorn

    from api.__main__ import LOG_FORMAT

    parser = argparse.ArgumentParser(description="Serve the minimal app of the benchmark.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    logging.basicConfig(format=LOG_FORMAT, level=logging.WARNING)
    uvicorn.run("scripts.bench.minimal_app:app", host=args.host, port=args.port)


if __name__ == "__main__":
    main()
