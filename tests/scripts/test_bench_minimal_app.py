"""The benchmark's minimal ASGI app answers Precis's bytes: for the same history load and the
same append (replayed by `client_id`, so both answers name the same stored rows), the two
bodies are equal byte for byte, else the HTTP comparison of `make bench` would not compare the
same work."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from api import store
from api.auth import DEVELOPMENT_TENANT
from scripts.bench.minimal_app import MinimalApp
from tests.conftest import make_settings
from tests.helpers import summary_draft

MODULE_SETTINGS: dict[str, Any] = {
    "dynamic_summary_enabled": True,
    "summary_workers": 0,
    "summary_message_limit": 4,
    "summary_keep_last_n": 2,
    "summary_limit": 2,
}
"""Summarization on (appends record jobs: `scheduled` and `summarization_pending` are
exercised) but no worker runs them, so nothing changes between two apps' answers."""


@pytest.fixture(scope="module")
def module_settings() -> dict[str, Any]:
    return dict(MODULE_SETTINGS)


@pytest.fixture(scope="module")
async def minimal(database_url: str, app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """The minimal app on Precis's database and settings (`app` is started first)."""
    floor = MinimalApp(make_settings(database_url, **MODULE_SETTINGS))
    async with (
        floor.lifespan(),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=floor), base_url="http://localhost"
        ) as http,
    ):
        yield http


CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "developer", "content": "Answer in French.", "name": "ops"},
    {"role": "user", "content": "Où est mon colis ? 📦", "metadata": {"turn": 1, "w": 0.5}},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "track", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "Lyon, Monday"},
    {"role": "assistant", "content": "À Lyon depuis lundi.", "metadata": {"n": [1, None, 1e16]}},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "And this one?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/p.png"}},
        ],
        "client_id": "u-2",
    },
    {"role": "assistant", "content": 'Tab\tand "quotes" and \\ and \u2028.'},
]


async def post(http: httpx.AsyncClient, sid: str, *messages: dict[str, Any]) -> httpx.Response:
    return await http.post(f"/v1/sessions/{sid}/messages", json={"messages": list(messages)})


async def both_get(
    api: httpx.AsyncClient, minimal: httpx.AsyncClient, path: str, **params: Any
) -> tuple[bytes, bytes]:
    precis, floor = await api.get(path, params=params), await minimal.get(path, params=params)
    assert precis.status_code == floor.status_code == 200, (precis.text, floor.text)
    assert floor.headers["content-type"] == precis.headers["content-type"]
    return precis.content, floor.content


async def test_history_bytes_are_precis_bytes(
    api: httpx.AsyncClient, minimal: httpx.AsyncClient, sid: str
) -> None:
    assert (await post(api, sid, *CHAT)).status_code == 201
    path = f"/v1/sessions/{sid}/history"
    precis, floor = await both_get(api, minimal, path)
    assert floor == precis
    assert b'"summarization_pending":true' in precis  # the batch reached the message limit


async def test_history_bytes_with_summaries_and_a_budget_are_precis_bytes(
    api: httpx.AsyncClient, minimal: httpx.AsyncClient, app: FastAPI, sid: str
) -> None:
    created = await api.post(
        "/v1/sessions", json={"id": sid, "settings": {"dynamic_summary_enabled": False}}
    )
    assert created.status_code == 201, created.text
    turns = [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n}: " + "lorem " * 30}
        for n in range(12)
    ]
    assert (await post(api, sid, CHAT[0], *turns)).status_code == 201
    async with app.state.sessionmaker() as db:
        session = await store.get_session(db, DEVELOPMENT_TENANT, sid)
        for first, last in ((2, 4), (5, 7), (8, 9)):
            await store.save_summary(db, session.id, summary_draft(first, last))
        await db.commit()
    path = f"/v1/sessions/{sid}/history"
    for params in ({}, {"max_tokens": 120}, {"max_tokens": 100_000, "summary_limit": 3}):
        precis, floor = await both_get(api, minimal, path, **params)
        assert floor == precis, params
    truncated, _ = await both_get(api, minimal, path, max_tokens=120)
    assert b'"truncated_messages":0' not in truncated  # the budget cut the tail


async def test_a_replayed_append_is_the_same_bytes(
    api: httpx.AsyncClient, minimal: httpx.AsyncClient, sid: str
) -> None:
    """Stored once, then replayed by `client_id` to both apps: the answers name the same rows."""
    batch = [{**message, "client_id": f"m-{n}"} for n, message in enumerate(CHAT)]
    assert (await post(minimal, sid, *batch)).status_code == 201
    precis, floor = await post(api, sid, *batch), await post(minimal, sid, *batch)
    assert precis.status_code == floor.status_code == 201, (precis.text, floor.text)
    assert floor.headers["content-type"] == precis.headers["content-type"]
    assert floor.content == precis.content
    assert b'"scheduled":true,"reason":"message_limit"' in precis.content


STORED_PER_APPEND = re.compile(rb'"(id|created_at)":("[^"]*"|[0-9]+)')
"""What two fresh appends of the same batch cannot share: row ids and insert times."""


async def test_a_fresh_append_is_the_same_bytes_but_its_ids_and_times(
    api: httpx.AsyncClient, minimal: httpx.AsyncClient, sid: str
) -> None:
    """A first append answers what was sent (a replay answers what the database stored, which
    PostgreSQL's jsonb may have reordered), so each app appends the batch to its own session."""
    for batch in (CHAT, [{"role": "user", "content": "Still there?", "client_id": "once"}]):
        precis = await post(api, f"{sid}-p", *batch)
        floor = await post(minimal, f"{sid}-m", *batch)
        assert precis.status_code == floor.status_code == 201, (precis.text, floor.text)
        assert STORED_PER_APPEND.sub(b"", floor.content) == STORED_PER_APPEND.sub(
            b"", precis.content
        )


async def test_a_missing_session_is_the_same_404(
    api: httpx.AsyncClient, minimal: httpx.AsyncClient, sid: str
) -> None:
    path = f"/v1/sessions/{sid}/history"
    precis, floor = await api.get(path), await minimal.get(path)
    assert precis.status_code == floor.status_code == 404
    assert floor.content == precis.content
