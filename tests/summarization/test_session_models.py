"""A session may choose its summary model only among those the server allows.

Each test runs its own app summarizing with the fake LLM, which also allows `openai/other`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from tests.helpers import fake_llm_app, user
from tests.support.fake_llm import FakeLLM


@pytest.fixture
async def fake_llm_client(
    database_url: str,
    engine: Any,
    fake_llm: FakeLLM,
) -> AsyncIterator[httpx.AsyncClient]:
    """An app summarizing with the fake LLM, which also allows the session model `openai/other`."""
    async with fake_llm_app(fake_llm, database_url, summary_allowed_models="openai/other") as http:
        yield http


@pytest.mark.parametrize(
    ("chosen", "used"),
    [("openai/other", "openai/other"), ("local", "local")],
    ids=["allowed", "local"],
)
async def test_a_session_model_the_server_allows_writes_its_summaries(
    fake_llm_client: httpx.AsyncClient, chosen: str, used: str
) -> None:
    http = fake_llm_client
    created = await http.post("/v1/sessions", json={"id": "m", "settings": {"model": chosen}})
    assert created.status_code == 201, created.text
    batch = {"messages": [user(f"question {i}") for i in range(4)]}
    assert (await http.post("/v1/sessions/m/messages", json=batch)).status_code == 201
    answer = await http.post("/v1/sessions/m/compact", json={"trigger": "overflow_retry"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["summary"]["model"] == used


async def test_a_session_model_the_server_does_not_allow_is_refused(
    fake_llm_client: httpx.AsyncClient,
) -> None:
    http = fake_llm_client
    refused = await http.post(
        "/v1/sessions", json={"id": "m", "settings": {"model": "ollama/llama3"}}
    )
    assert refused.status_code == 422, refused.text
    assert set(refused.json()) == {"error", "detail"}
    assert refused.json()["error"] == "ValidationFailed"
    assert "'ollama/llama3' is not allowed" in refused.json()["detail"]
    assert "openai/other" in refused.json()["detail"]
    assert (await http.get("/v1/sessions/m")).status_code == 404

    assert (await http.post("/v1/sessions", json={"id": "m"})).status_code == 201
    patched = await http.patch("/v1/sessions/m", json={"settings": {"model": "ollama/llama3"}})
    assert patched.status_code == 422, patched.text
    assert set(patched.json()) == {"error", "detail"}
    assert patched.json()["error"] == "ValidationFailed"
    assert (await http.get("/v1/sessions/m")).json()["settings"] == {}


async def test_a_stored_model_no_longer_allowed_is_summarized_with_the_server_model(
    fake_llm_client: httpx.AsyncClient, engine: Any
) -> None:
    """A model allowed when the session was configured, then dropped from the allow-list."""
    http = fake_llm_client
    assert (await http.post("/v1/sessions", json={"id": "m"})).status_code == 201
    async with engine.begin() as connection:
        await connection.execute(
            text("UPDATE sessions SET settings = :settings WHERE external_id = 'm'"),
            {"settings": json.dumps({"model": "ollama/llama3"})},
        )
    batch = {"messages": [user(f"question {i}") for i in range(4)]}
    assert (await http.post("/v1/sessions/m/messages", json=batch)).status_code == 201
    answer = await http.post("/v1/sessions/m/compact", json={"trigger": "overflow_retry"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["summary"]["model"] == "openai/fake"
