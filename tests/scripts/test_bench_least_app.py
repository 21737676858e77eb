"""The benchmark's least-work app does the job of a chat history, or its ratio would flatter
Precis: an append stores each message and answers it, a history load answers the newest
messages that fit `max_tokens`, oldest first, and sessions do not mix. On SQLite and on
PostgreSQL (a scratch table in the run's database, dropped after)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from scripts.bench.least_app import CHARS_PER_TOKEN, LeastApp, open_store


@pytest.fixture
async def least(database_url: str, engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    app = LeastApp()
    app.store = await open_store(database_url, 2)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            yield http
    finally:
        await app.store.close()
        async with engine.begin() as connection:
            await connection.execute(text("DROP TABLE least_messages"))


def message(index: int) -> dict[str, str]:
    # 4 tokens each by the app's estimate
    return {"role": "user", "content": f"m{index:02d}".ljust(3 * CHARS_PER_TOKEN, ".")}


async def test_appended_messages_come_back_newest_within_the_budget_oldest_first(
    least: httpx.AsyncClient,
) -> None:
    appended = await least.post(
        "/v1/sessions/a/messages", json={"messages": [message(i) for i in range(10)]}
    )
    assert appended.status_code == 201
    stored = appended.json()["messages"]
    assert [m["content"][:3] for m in stored] == [f"m{i:02d}" for i in range(10)]
    assert len({m["id"] for m in stored}) == 10
    await least.post("/v1/sessions/b/messages", json={"messages": [message(99)]})

    history = await least.get("/v1/sessions/a/history", params={"max_tokens": 13})
    assert history.status_code == 200
    body = history.json()
    assert [m["content"][:3] for m in body["messages"]] == ["m07", "m08", "m09"]
    assert body["token_estimate"] == 12

    whole = (await least.get("/v1/sessions/a/history")).json()
    assert len(whole["messages"]) == 10


async def test_an_unknown_route_is_404(least: httpx.AsyncClient) -> None:
    assert (await least.get("/v1/sessions/a/summaries")).status_code == 404
