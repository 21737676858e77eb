"""Bad input gets its 4xx in the one error shape, naming the field, and nothing of it is stored.

Tests share the module's app (`api`), each on its own session id; tests that need other
settings use the per-test `client`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from api.json_values import MAX_JSON_DEPTH
from tests.conftest import QUIET
from tests.helpers import user

TOOL_CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return dict(QUIET)


@pytest.fixture
def session_id() -> str:
    return f"v-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def url(session_id: str) -> str:
    """The messages URL of this test's own session."""
    return f"/v1/sessions/{session_id}/messages"


def assert_error(answer: httpx.Response, status: int, *names: str) -> None:
    """The status, the `{"error", "detail"}` shape, and every name in the detail."""
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) == {"error", "detail"}, body
    assert isinstance(body["error"], str) and body["error"]
    if status == 422:  # body, query and path problems alike
        assert body["error"] == "ValidationFailed", body
    for name in names:
        assert name in body["detail"], body["detail"]


async def assert_session_absent(client: httpx.AsyncClient, session_id: str) -> None:
    assert (await client.get(f"/v1/sessions/{session_id}")).status_code == 404


async def post_raw(client: httpx.AsyncClient, url: str, body: str | bytes) -> httpx.Response:
    return await client.post(url, content=body, headers={"content-type": "application/json"})


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        value = {"a": value}
    return value


# --- one bad message ------------------------------------------------------------------------

BAD_MESSAGES: dict[str, tuple[dict[str, Any], str]] = {
    "bad role": ({"role": "robot", "content": "x"}, "role"),
    "missing role": ({"content": "x"}, "role"),
    "tool message without tool_call_id": ({"role": "tool", "content": "x"}, "tool_call_id"),
    "tool_call_id on a user message": (user("fine", tool_call_id="call_1"), "tool_call_id"),
    "tool_call_id on an assistant message": (
        {"role": "assistant", "content": "x", "tool_call_id": "call_1"},
        "tool_call_id",
    ),
    "tool_calls on a user message": (user("fine", tool_calls=[TOOL_CALL]), "tool_calls"),
    "tool_calls on a tool message": (
        {"role": "tool", "content": "x", "tool_call_id": "c", "tool_calls": [TOOL_CALL]},
        "tool_calls",
    ),
    "tool call without a function name": (
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"arguments": "{}"}}],
        },
        "function.name",
    ),
    "tool call arguments not a string": (
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
            ],
        },
        "arguments",
    ),
    "tool call without an id": (
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        "tool_calls",
    ),
    "duplicate tool call ids in one message": (
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL, TOOL_CALL]},
        "tool_calls",
    ),
    "null content on a user message": ({"role": "user", "content": None}, "content"),
    "absent content on a user message": ({"role": "user"}, "content"),
    "null content on an assistant message without tool calls": (
        {"role": "assistant", "content": None},
        "content",
    ),
    "content part of an unknown type": (
        {"role": "user", "content": [{"type": "audio", "data": "..."}]},
        "content",
    ),
    "empty list of content parts": ({"role": "user", "content": []}, "content"),
    "image part on an assistant message": (
        {
            "role": "assistant",
            "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}],
        },
        "content",
    ),
    "content a number": ({"role": "user", "content": 42}, "content"),
    "name with a space": (user("fine", name="bad name"), "name"),
    "unknown field on a message": (user("fine", colour="blue"), "colour"),
    "metadata not an object": (user("fine", metadata=["a"]), "metadata"),
    "metadata nested too deep": (user("fine", metadata=nested(20)), "metadata"),
    "NUL byte in content": (user("a\x00b"), "content"),
    "NUL byte in metadata": (user("fine", metadata={"k": "a\x00b"}), "metadata"),
    "NUL byte in a metadata key": (user("fine", metadata={"a\x00b": 1}), "metadata"),
    "NUL byte in tool call arguments": (
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "\x00"}}
            ],
        },
        "tool_calls",
    ),
    "NUL byte in a text part": (
        {"role": "user", "content": [{"type": "text", "text": "a\x00b"}]},
        "content",
    ),
    "NUL byte in client_id": (user("fine", client_id="a\x00b"), "client_id"),
    "metadata integer beyond 64 bits": (user("fine", metadata={"big": 2**64}), "metadata"),
}


@pytest.mark.parametrize(("message", "field"), BAD_MESSAGES.values(), ids=list(BAD_MESSAGES.keys()))
async def test_a_bad_message_gets_422_naming_the_field_and_stores_nothing(
    api: httpx.AsyncClient, url: str, session_id: str, message: dict[str, Any], field: str
) -> None:
    answer = await api.post(url, json={"messages": [user("good"), message]})
    assert_error(answer, 422, field)
    await assert_session_absent(api, session_id)


async def test_one_client_id_on_two_different_messages_of_a_batch_gets_422(
    api: httpx.AsyncClient, url: str, session_id: str
) -> None:
    batch = [user("first", client_id="z"), {"role": "assistant", "content": "x", "client_id": "z"}]
    answer = await api.post(url, json={"messages": batch})
    assert_error(answer, 422, "messages[1]", "'z'", "messages[0]")
    await assert_session_absent(api, session_id)


async def test_a_rejected_batch_does_not_create_the_session(
    api: httpx.AsyncClient, url: str, session_id: str
) -> None:
    answer = await api.post(url, json={"messages": [{"role": "robot", "content": ""}]})
    assert answer.status_code == 422
    await assert_session_absent(api, session_id)


async def test_a_batch_whose_last_message_is_bad_stores_nothing(
    api: httpx.AsyncClient, url: str
) -> None:
    assert (await api.post(url, json={"messages": [user("kept")]})).status_code == 201
    batch = [user("a"), user("b"), {"role": "tool", "content": "no call id"}]
    answer = await api.post(url, json={"messages": batch})
    assert_error(answer, 422, "messages.2")
    stored = (await api.get(url)).json()["messages"]
    assert [m["content"] for m in stored] == ["kept"]


async def test_a_new_session_batch_whose_last_message_is_bad_creates_nothing(
    api: httpx.AsyncClient, url: str, session_id: str
) -> None:
    batch = [user("a"), user("b"), {"role": "user", "content": None}]
    assert (await api.post(url, json={"messages": batch})).status_code == 422
    await assert_session_absent(api, session_id)


# --- batch shape ----------------------------------------------------------------------------


async def test_an_empty_batch_gets_422(api: httpx.AsyncClient, url: str, session_id: str) -> None:
    assert_error(await api.post(url, json={"messages": []}), 422, "messages")
    await assert_session_absent(api, session_id)


async def test_a_batch_of_501_messages_gets_422(
    api: httpx.AsyncClient, url: str, session_id: str
) -> None:
    answer = await api.post(url, json={"messages": [user("fine")] * 501})
    assert_error(answer, 422, "messages")
    await assert_session_absent(api, session_id)


async def test_a_batch_of_500_messages_is_accepted(api: httpx.AsyncClient, url: str) -> None:
    answer = await api.post(url, json={"messages": [user("fine")] * 500})
    assert answer.status_code == 201
    assert answer.json()["messages"][-1]["seq"] == 500


async def test_a_body_without_messages_gets_422(api: httpx.AsyncClient, url: str) -> None:
    assert_error(await api.post(url, json={}), 422, "messages")


async def test_an_unknown_top_level_field_gets_422(
    api: httpx.AsyncClient, url: str, session_id: str
) -> None:
    answer = await api.post(url, json={"messages": [user("fine")], "extra": 1})
    assert_error(answer, 422, "extra")
    await assert_session_absent(api, session_id)


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
async def test_a_body_declared_as_not_json_gets_415_and_stores_nothing(
    api: httpx.AsyncClient, url: str, session_id: str, content_type: str
) -> None:
    body = b'{"messages": [{"role": "user", "content": "hi"}]}'
    answer = await api.post(url, content=body, headers={"content-type": content_type})
    assert_error(answer, 415, content_type, "application/json")
    await assert_session_absent(api, session_id)


async def test_json_with_a_charset_or_a_json_suffix_is_accepted(
    api: httpx.AsyncClient, url: str
) -> None:
    body = b'{"messages": [{"role": "user", "content": "hi"}]}'
    for content_type in ("application/json; charset=utf-8", "application/merge-patch+json"):
        answer = await api.post(url, content=body, headers={"content-type": content_type})
        assert answer.status_code == 201, answer.text


async def test_a_body_without_content_type_is_read_as_json(
    api: httpx.AsyncClient, url: str
) -> None:
    body = b'{"messages": [{"role": "user", "content": "hi"}]}'
    answer = await api.post(url, content=body)  # httpx sends no Content-Type for raw bytes
    assert answer.status_code == 201, answer.text
    assert answer.json()["messages"][0]["content"] == "hi"


@pytest.mark.parametrize("bad_id", ["a b", "..", "x" * 129, "naïve"])
async def test_a_bad_session_id_is_explained_in_words(api: httpx.AsyncClient, bad_id: str) -> None:
    answer = await api.post("/v1/sessions", json={"id": bad_id})
    assert answer.status_code == 422
    detail = answer.json()["detail"]
    assert "body.id" in detail and "^" not in detail  # no regular expression
    assert "128 characters" in detail


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
async def test_a_non_finite_number_in_metadata_gets_422(
    api: httpx.AsyncClient, url: str, session_id: str, number: str
) -> None:
    body = f'{{"messages": [{{"role": "user", "content": "x", "metadata": {{"v": {number}}}}}]}}'
    assert_error(await post_raw(api, url, body), 422, "metadata")
    await assert_session_absent(api, session_id)


async def test_a_lone_surrogate_in_content_gets_422(
    api: httpx.AsyncClient, url: str, session_id: str
) -> None:
    body = '{"messages": [{"role": "user", "content": "a\\ud800b"}]}'
    assert_error(await post_raw(api, url, body), 422, "content")
    await assert_session_absent(api, session_id)


async def test_a_lone_surrogate_in_metadata_gets_422(
    api: httpx.AsyncClient, url: str, session_id: str
) -> None:
    body = '{"messages": [{"role": "user", "content": "x", "metadata": {"k": "\\udfff"}}]}'
    assert_error(await post_raw(api, url, body), 422, "metadata")
    await assert_session_absent(api, session_id)


async def test_a_utf8_encoded_surrogate_in_the_body_gets_422(
    api: httpx.AsyncClient, url: str, session_id: str
) -> None:
    body = b'{"messages": [{"role": "user", "content": "a\xed\xa0\x80b"}]}'
    assert_error(await post_raw(api, url, body), 422, "content")
    await assert_session_absent(api, session_id)


# --- bodies that do not parse --------------------------------------------------------------


async def test_malformed_json_names_where_it_breaks(
    api: httpx.AsyncClient, url: str, session_id: str
) -> None:
    answer = await post_raw(api, url, b'{"messages": [}')
    assert_error(answer, 422, "invalid JSON at character 14")
    await assert_session_absent(api, session_id)


async def test_a_body_that_is_not_utf8_gets_422_saying_so(
    api: httpx.AsyncClient, url: str, session_id: str
) -> None:
    answer = await post_raw(api, url, b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}')
    assert_error(answer, 422, "UTF-8")
    await assert_session_absent(api, session_id)


async def test_json_nested_beyond_the_parser_gets_422_saying_so(
    api: httpx.AsyncClient, session_id: str
) -> None:
    body = (
        f'{{"id": "{session_id}", "metadata": '.encode()
        + b'{"a": ' * 100_000
        + b"1"
        + b"}" * 100_001
    )
    assert_error(await post_raw(api, "/v1/sessions", body), 422, "nested too deeply")
    await assert_session_absent(api, session_id)


async def test_a_number_with_too_many_digits_gets_422_saying_so(
    api: httpx.AsyncClient, session_id: str
) -> None:
    body = f'{{"id": "{session_id}", "metadata": {{"n": '.encode() + b"9" * 5_000 + b"}}"
    assert_error(await post_raw(api, "/v1/sessions", body), 422, "digits")
    await assert_session_absent(api, session_id)


@pytest.mark.parametrize("body", [b"[]", b"null", b'"text"', b"42"])
async def test_a_body_that_is_not_an_object_gets_422(api: httpx.AsyncClient, body: bytes) -> None:
    assert_error(await post_raw(api, "/v1/sessions", body), 422, "body")


async def test_a_405_lists_every_method_of_the_path(api: httpx.AsyncClient) -> None:
    answer = await api.put("/v1/sessions")
    assert_error(answer, 405)
    assert answer.headers["allow"] == "GET, POST"


# --- wrong types anywhere -------------------------------------------------------------------

NEW = "{new}"
"""Stands for a session id no request may create."""

WRONG_TYPES: dict[str, tuple[str, str, Any, str]] = {
    "settings int as a string": (
        "POST",
        "/v1/sessions",
        {"id": NEW, "settings": {"message_limit": "12"}},
        "message_limit",
    ),
    "settings int as a bool": (
        "POST",
        "/v1/sessions",
        {"id": NEW, "settings": {"keep_last_n": True}},
        "keep_last_n",
    ),
    "settings bool as an int": (
        "POST",
        "/v1/sessions",
        {"id": NEW, "settings": {"bisect_enabled": 1}},
        "bisect_enabled",
    ),
    "settings int as a float": (
        "POST",
        "/v1/sessions",
        {"id": NEW, "settings": {"summary_limit": 2.5}},
        "summary_limit",
    ),
    "settings unknown key": (
        "POST",
        "/v1/sessions",
        {"id": NEW, "settings": {"api_base": "http://evil.example"}},
        "api_base",
    ),
    "settings model with a control character": (
        "POST",
        "/v1/sessions",
        {"id": NEW, "settings": {"model": "gpt\n4"}},
        "model",
    ),
    "settings number out of range": (
        "POST",
        "/v1/sessions",
        {"id": NEW, "settings": {"message_limit": 10**30}},
        "message_limit",
    ),
    "session id a number": ("POST", "/v1/sessions", {"id": 7}, "id"),
    "session metadata a list": ("POST", "/v1/sessions", {"id": NEW, "metadata": [1]}, "metadata"),
    "messages an object": (
        "POST",
        "/v1/sessions/{new}/messages",
        {"messages": {"role": "user"}},
        "messages",
    ),
    "client_id a number": (
        "POST",
        "/v1/sessions/{new}/messages",
        {"messages": [user("hi", client_id=5)]},
        "client_id",
    ),
    "compact trigger unknown": (
        "POST",
        "/v1/sessions/{sid}/compact",
        {"trigger": "auto"},
        "trigger",
    ),
    "compact keep_last_n a string": (
        "POST",
        "/v1/sessions/{sid}/compact",
        {"keep_last_n": "3"},
        "keep_last_n",
    ),
    "compact keep_last_n negative": (
        "POST",
        "/v1/sessions/{sid}/compact",
        {"keep_last_n": -1},
        "keep_last_n",
    ),
    "patch metadata a string": ("PATCH", "/v1/sessions/{sid}", {"metadata": "x"}, "metadata"),
    "patch settings a list": ("PATCH", "/v1/sessions/{sid}", {"settings": []}, "settings"),
}


@pytest.mark.parametrize(
    ("method", "path", "body", "field"), WRONG_TYPES.values(), ids=list(WRONG_TYPES)
)
async def test_a_wrong_type_anywhere_gets_422_naming_the_field_and_stores_nothing(
    api: httpx.AsyncClient, session_id: str, method: str, path: str, body: Any, field: str
) -> None:
    new = f"{session_id}-new"
    if isinstance(body, dict) and body.get("id") == NEW:
        body = {**body, "id": new}
    await api.post("/v1/sessions", json={"id": session_id, "metadata": {"kept": 1}})
    answer = await api.request(method, path.format(sid=session_id, new=new), json=body)
    assert_error(answer, 422, field)
    await assert_session_absent(api, new)
    session = (await api.get(f"/v1/sessions/{session_id}")).json()
    assert (session["metadata"], session["settings"], session["last_seq"]) == ({"kept": 1}, {}, 0)


# --- NUL outside messages -------------------------------------------------------------------


async def test_a_nul_byte_in_session_metadata_gets_422(
    api: httpx.AsyncClient, session_id: str
) -> None:
    answer = await api.post("/v1/sessions", json={"id": session_id, "metadata": {"k": "\x00"}})
    assert_error(answer, 422, "metadata")
    await assert_session_absent(api, session_id)


async def test_a_nul_byte_in_session_settings_gets_422(
    api: httpx.AsyncClient, session_id: str
) -> None:
    answer = await api.post("/v1/sessions", json={"id": session_id, "settings": {"model": "a\x00"}})
    assert_error(answer, 422, "model")
    await assert_session_absent(api, session_id)


async def test_a_nul_byte_in_patched_metadata_gets_422(
    api: httpx.AsyncClient, session_id: str
) -> None:
    assert (await api.post("/v1/sessions", json={"id": session_id})).status_code == 201
    answer = await api.patch(f"/v1/sessions/{session_id}", json={"metadata": {"k": "\x00"}})
    assert_error(answer, 422, "metadata")
    assert (await api.get(f"/v1/sessions/{session_id}")).json()["metadata"] == {}


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


# --- path and query parameters --------------------------------------------------------------


@pytest.mark.parametrize(
    "bad_id", ["x" * 129, "bad$id", "bad%20id", "caf%C3%A9"], ids=["too long", "$", "space", "é"]
)
async def test_a_bad_session_id_in_the_path_gets_422(api: httpx.AsyncClient, bad_id: str) -> None:
    answer = await api.post(f"/v1/sessions/{bad_id}/messages", json={"messages": [user("fine")]})
    assert_error(answer, 422, "session_id")
    listed = (await api.get("/v1/sessions", params={"limit": 1000})).json()["sessions"]
    assert not [s for s in listed if not s["id"].startswith("v-")]


async def test_a_session_id_of_128_characters_is_accepted(api: httpx.AsyncClient) -> None:
    long_id = f"v-{uuid.uuid4().hex}".ljust(128, "x")
    assert len(long_id) == 128
    answer = await api.post(f"/v1/sessions/{long_id}/messages", json={"messages": [user("fine")]})
    assert answer.status_code == 201, answer.text


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("messages", {"after_seq": -1}, "after_seq"),
        ("messages", {"after_seq": 2**70}, "after_seq"),
        ("messages", {"limit": 0}, "limit"),
        ("messages", {"limit": 100_000}, "limit"),
        ("messages", {"limit": "ten"}, "limit"),
        ("history", {"max_tokens": 0}, "max_tokens"),
        ("history", {"max_tokens": -5}, "max_tokens"),
        ("history", {"max_tokens": 10**12}, "max_tokens"),
        ("history", {"summary_limit": 0}, "summary_limit"),
    ],
    ids=[
        "after_seq=-1",
        "after_seq=2**70",
        "limit=0",
        "limit=100000",
        "limit=ten",
        "max_tokens=0",
        "max_tokens=-5",
        "max_tokens=10**12",
        "summary_limit=0",
    ],
)
async def test_an_out_of_range_query_parameter_gets_422(
    api: httpx.AsyncClient,
    url: str,
    session_id: str,
    path: str,
    params: dict[str, Any],
    field: str,
) -> None:
    assert (await api.post(url, json={"messages": [user("fine")]})).status_code == 201
    answer = await api.get(f"/v1/sessions/{session_id}/{path}", params=params)
    assert_error(answer, 422, field)


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 100_000}], ids=["0", "100000"])
async def test_an_out_of_range_session_list_limit_gets_422(
    api: httpx.AsyncClient, params: dict[str, Any]
) -> None:
    assert_error(await api.get("/v1/sessions", params=params), 422, "limit")


@pytest.mark.parametrize("cursor", ["abc", "-1", "1.5", "9" * 20])
async def test_a_bad_cursor_gets_400(api: httpx.AsyncClient, cursor: str) -> None:
    assert_error(await api.get("/v1/sessions", params={"cursor": cursor}), 400, "cursor")


async def session_count(api: httpx.AsyncClient) -> int:
    answer = await api.get("/v1/sessions", params={"limit": 1000})
    return len(answer.json()["sessions"])


@pytest.mark.parametrize("bad_id", ["abc", "-1", "0", "1.5", "1e3", str(2**64), "%00"])
async def test_an_odd_summary_id_gets_422_naming_it(api: httpx.AsyncClient, bad_id: str) -> None:
    assert_error(await api.get(f"/v1/summaries/{bad_id}"), 422, "summary_id")


@pytest.mark.parametrize("bad_id", ["%00", "a%2Fb", "%F0%9F%98%80", "x" * 129])
async def test_an_odd_session_id_on_compact_gets_a_4xx_and_stores_nothing(
    api: httpx.AsyncClient, bad_id: str
) -> None:
    before = await session_count(api)
    answer = await api.post(f"/v1/sessions/{bad_id}/compact", json={})
    assert answer.status_code in (404, 422), answer.text
    assert set(answer.json()) == {"error", "detail"}
    assert await session_count(api) == before


@pytest.mark.parametrize("dots", [".", ".."])
async def test_a_dot_segment_session_id_is_refused_at_create(
    api: httpx.AsyncClient, dots: str
) -> None:
    """Clients resolve `.` and `..` in a URL path: such a session could never be addressed."""
    before = await session_count(api)
    assert_error(await api.post("/v1/sessions", json={"id": dots}), 422, "id")
    assert await session_count(api) == before


async def test_ids_with_dots_that_are_not_dot_segments_are_accepted(
    api: httpx.AsyncClient,
) -> None:
    for session in ("...", ".a", "a.", "v1.2"):
        created = await api.post("/v1/sessions", json={"id": session})
        assert created.status_code == 201, created.text
        assert (await api.get(f"/v1/sessions/{session}")).status_code == 200
        assert (await api.delete(f"/v1/sessions/{session}")).status_code == 204


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/v1/sessions/{sid}/history", {"max_token": "100"}),
        ("/v1/sessions", {"": "x"}),
        ("/v1/sessions/{sid}/messages", {"after": "3"}),
    ],
    ids=["typo", "empty name", "after"],
)
async def test_an_unknown_query_parameter_gets_422_naming_it(
    api: httpx.AsyncClient, session_id: str, path: str, params: dict[str, str]
) -> None:
    await api.post("/v1/sessions", json={"id": session_id})
    name = next(iter(params))
    answer = await api.get(path.format(sid=session_id), params=params)
    assert_error(answer, 422, f"query.{name}")


@pytest.mark.parametrize("cursor", ["²", "١٢٣", "0x10", " 1", str(2**63)])
@pytest.mark.parametrize("path", ["/v1/sessions", "/v1/sessions/{sid}/summaries"])
async def test_a_cursor_of_other_digits_gets_400(
    api: httpx.AsyncClient, session_id: str, path: str, cursor: str
) -> None:
    await api.post("/v1/sessions", json={"id": session_id})
    answer = await api.get(path.format(sid=session_id), params={"cursor": cursor})
    assert_error(answer, 400, "cursor")


@pytest.mark.parametrize(
    "params",
    [
        {"include_superseded": "maybe"},
        {"limit": -1},
        {"limit": "9" * 50},
        {"limit": "1e3"},
    ],
    ids=["include_superseded=maybe", "limit=-1", "limit=9x50", "limit=1e3"],
)
async def test_an_odd_summaries_query_gets_422_naming_it(
    api: httpx.AsyncClient, session_id: str, params: dict[str, Any]
) -> None:
    await api.post("/v1/sessions", json={"id": session_id})
    answer = await api.get(f"/v1/sessions/{session_id}/summaries", params=params)
    assert_error(answer, 422, next(iter(params)))
