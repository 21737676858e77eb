"""Sizes and limits: metadata over its byte or depth limit, a message, a batch or a request body
over its own gets its 413 (or 422) and stores nothing; what is at the limit is accepted.

Tests share the module's app (`api`), each on its own session id (the `session_id` and `url`
fixtures of `tests/routes/conftest.py`); the
limits are set per test on the per-test `client`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from api.json_values import MAX_JSON_DEPTH
from tests.conftest import QUIET
from tests.helpers import assert_error, assert_session_absent, nested, user


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return dict(QUIET)


# --- session metadata: size and depth -------------------------------------------------------

METADATA_LIMIT = 1_000

SMALL_METADATA = pytest.mark.parametrize(
    "settings_overrides", [{**QUIET, "max_metadata_bytes": METADATA_LIMIT}]
)


def metadata_of_size(size: int) -> dict[str, Any]:
    """A metadata object whose JSON encoding is exactly `size` bytes (multi-byte text)."""
    overhead = len(json.dumps({"k": ""}, ensure_ascii=False).encode())
    body = "é" * ((size - overhead) // 2) + "x" * ((size - overhead) % 2)
    metadata = {"k": body}
    assert len(json.dumps(metadata, ensure_ascii=False).encode()) == size
    return metadata


@SMALL_METADATA
async def test_session_metadata_at_the_limit_is_accepted(
    client: httpx.AsyncClient, session_id: str
) -> None:
    body = {"id": session_id, "metadata": metadata_of_size(METADATA_LIMIT)}
    assert (await client.post("/v1/sessions", json=body)).status_code == 201


@SMALL_METADATA
async def test_session_metadata_over_the_limit_gets_413_and_creates_nothing(
    client: httpx.AsyncClient, session_id: str
) -> None:
    body = {"id": session_id, "metadata": metadata_of_size(METADATA_LIMIT + 1)}
    answer = await client.post("/v1/sessions", json=body)
    assert_error(answer, 413, "metadata", str(METADATA_LIMIT))
    await assert_session_absent(client, session_id)


@SMALL_METADATA
async def test_patched_metadata_over_the_limit_gets_413_and_changes_nothing(
    client: httpx.AsyncClient, session_id: str
) -> None:
    await client.post("/v1/sessions", json={"id": session_id, "metadata": {"kept": 1}})
    answer = await client.patch(
        f"/v1/sessions/{session_id}", json={"metadata": metadata_of_size(METADATA_LIMIT + 1)}
    )
    assert_error(answer, 413, "metadata")
    assert (await client.get(f"/v1/sessions/{session_id}")).json()["metadata"] == {"kept": 1}


@SMALL_METADATA
async def test_message_metadata_over_the_limit_gets_413_and_stores_nothing_of_the_batch(
    client: httpx.AsyncClient, url: str, session_id: str
) -> None:
    batch = [user("fine"), user("too much", metadata=metadata_of_size(METADATA_LIMIT + 1))]
    answer = await client.post(url, json={"messages": batch})
    assert_error(answer, 413, "messages[1].metadata")
    await assert_session_absent(client, session_id)


async def test_session_metadata_nested_too_deep_gets_422(
    api: httpx.AsyncClient, session_id: str
) -> None:
    answer = await api.post("/v1/sessions", json={"id": session_id, "metadata": nested(20)})
    assert_error(answer, 422, "metadata", "nested deeper")
    await assert_session_absent(api, session_id)


async def test_metadata_has_one_depth_limit_on_sessions_and_messages(
    api: httpx.AsyncClient, url: str, session_id: str
) -> None:
    deepest, too_deep = nested(MAX_JSON_DEPTH - 1), nested(MAX_JSON_DEPTH)
    session = await api.post("/v1/sessions", json={"id": session_id, "metadata": deepest})
    assert session.status_code == 201, session.text
    message = await api.post(url, json={"messages": [user("x", metadata=deepest)]})
    assert message.status_code == 201, message.text

    refused = await api.post("/v1/sessions", json={"id": f"{session_id}-b", "metadata": too_deep})
    assert_error(refused, 422, "nested deeper")
    refused = await api.post(url, json={"messages": [user("y", metadata=too_deep)]})
    assert_error(refused, 422, "nested deeper")


async def test_session_metadata_nested_within_the_limit_is_accepted(
    api: httpx.AsyncClient, session_id: str
) -> None:
    answer = await api.post("/v1/sessions", json={"id": session_id, "metadata": nested(12)})
    assert answer.status_code == 201, answer.text


# --- size limits ----------------------------------------------------------------------------

SMALL_MESSAGES = pytest.mark.parametrize(
    "settings_overrides", [{**QUIET, "max_message_bytes": 1000}]
)


@SMALL_MESSAGES
async def test_a_message_over_the_size_limit_gets_413(
    client: httpx.AsyncClient, url: str, session_id: str
) -> None:
    answer = await client.post(url, json={"messages": [user("x" * 2000)]})
    assert_error(answer, 413, "messages[0]")
    await assert_session_absent(client, session_id)


@pytest.mark.parametrize("settings_overrides", [{**QUIET, "max_message_bytes": 100_000}])
async def test_a_big_batch_over_the_size_limit_gets_413_from_the_counting_thread(
    client: httpx.AsyncClient, url: str, session_id: str
) -> None:
    """A batch this large is measured off the event loop; its 413 must still come back."""
    answer = await client.post(url, json={"messages": [user("y" * 60_000), user("x" * 200_000)]})
    assert_error(answer, 413, "messages[1]")
    await assert_session_absent(client, session_id)


@SMALL_MESSAGES
async def test_a_message_under_the_size_limit_is_accepted(
    client: httpx.AsyncClient, url: str
) -> None:
    answer = await client.post(url, json={"messages": [user("x" * 900)]})
    assert answer.status_code == 201, answer.text


@SMALL_MESSAGES
async def test_a_batch_whose_last_message_is_too_large_stores_nothing(
    client: httpx.AsyncClient, url: str, session_id: str
) -> None:
    answer = await client.post(
        url, json={"messages": [user("small"), user("small"), user("x" * 2000)]}
    )
    assert_error(answer, 413, "messages[2]")
    await assert_session_absent(client, session_id)


@SMALL_MESSAGES
async def test_the_size_limit_counts_bytes_not_characters(
    client: httpx.AsyncClient, url: str
) -> None:
    # 400 four-byte emoji: 400 characters, 1600 bytes of UTF-8.
    assert_error(await client.post(url, json={"messages": [user("😀" * 400)]}), 413)


@pytest.mark.parametrize("settings_overrides", [{**QUIET, "max_request_bytes": 10_000}])
async def test_a_request_body_over_the_limit_gets_413(
    client: httpx.AsyncClient, url: str, session_id: str
) -> None:
    answer = await client.post(url, json={"messages": [user("x" * 500)] * 40})
    assert_error(answer, 413)
    await assert_session_absent(client, session_id)


@pytest.mark.parametrize("settings_overrides", [{"max_request_bytes": 1_000, "summary_workers": 0}])
async def test_a_streamed_body_over_the_limit_gets_413(client: httpx.AsyncClient) -> None:
    """Without Content-Length the limit applies while the body streams in."""

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(20):
            yield b"x" * 100
        yield b'"}]}'

    answer = await client.post(
        "/v1/sessions/streamed/messages",
        content=chunks(),
        headers={"content-type": "application/json"},
    )
    assert_error(answer, 413, "1000 bytes")
    assert (await client.get("/v1/sessions/streamed")).status_code == 404
