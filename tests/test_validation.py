"""Bad input gets its 4xx in the one error shape, naming the field, and nothing of it is stored.

Tests share the module's app (`api`), each on its own session id; tests that need other
settings use the per-test `client`.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.conftest import QUIET

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


def user(content: Any = "fine", **fields: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, **fields}


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
    "tool_call_id on a user message": (user(tool_call_id="call_1"), "tool_call_id"),
    "tool_call_id on an assistant message": (
        {"role": "assistant", "content": "x", "tool_call_id": "call_1"},
        "tool_call_id",
    ),
    "tool_calls on a user message": (user(tool_calls=[TOOL_CALL]), "tool_calls"),
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
    "null content on a user message": (user(None), "content"),
    "absent content on a user message": ({"role": "user"}, "content"),
    "null content on an assistant message without tool calls": (
        {"role": "assistant", "content": None},
        "content",
    ),
    "content part of an unknown type": (user([{"type": "audio", "data": "..."}]), "content"),
    "empty list of content parts": (user([]), "content"),
    "image part on an assistant message": (
        {
            "role": "assistant",
            "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}],
        },
        "content",
    ),
    "content a number": (user(42), "content"),
    "name with a space": (user(name="bad name"), "name"),
    "unknown field on a message": (user(colour="blue"), "colour"),
    "metadata not an object": (user(metadata=["a"]), "metadata"),
    "metadata nested too deep": (user(metadata=nested(20)), "metadata"),
    "NUL byte in content": (user("a\x00b"), "content"),
    "NUL byte in metadata": (user(metadata={"k": "a\x00b"}), "metadata"),
    "NUL byte in a metadata key": (user(metadata={"a\x00b": 1}), "metadata"),
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
    "NUL byte in a text part": (user([{"type": "text", "text": "a\x00b"}]), "content"),
    "NUL byte in client_id": (user(client_id="a\x00b"), "client_id"),
    "metadata integer beyond 64 bits": (user(metadata={"big": 2**64}), "metadata"),
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
    batch = [user("a"), user("b"), user(None)]
    assert (await api.post(url, json={"messages": batch})).status_code == 422
    await assert_session_absent(api, session_id)


# --- batch shape ----------------------------------------------------------------------------


async def test_an_empty_batch_gets_422(api: httpx.AsyncClient, url: str, session_id: str) -> None:
    assert_error(await api.post(url, json={"messages": []}), 422, "messages")
    await assert_session_absent(api, session_id)


async def test_a_batch_of_501_messages_gets_422(
    api: httpx.AsyncClient, url: str, session_id: str
) -> None:
    answer = await api.post(url, json={"messages": [user()] * 501})
    assert_error(answer, 422, "messages")
    await assert_session_absent(api, session_id)


async def test_a_batch_of_500_messages_is_accepted(api: httpx.AsyncClient, url: str) -> None:
    answer = await api.post(url, json={"messages": [user()] * 500})
    assert answer.status_code == 201
    assert answer.json()["messages"][-1]["seq"] == 500


async def test_a_body_without_messages_gets_422(api: httpx.AsyncClient, url: str) -> None:
    assert_error(await api.post(url, json={}), 422, "messages")


async def test_an_unknown_top_level_field_gets_422(
    api: httpx.AsyncClient, url: str, session_id: str
) -> None:
    answer = await api.post(url, json={"messages": [user()], "extra": 1})
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


async def test_malformed_json_gets_422(api: httpx.AsyncClient, url: str, session_id: str) -> None:
    answer = await post_raw(api, url, '{"messages": [{"role": "user", "content": ')
    assert_error(answer, 422)
    await assert_session_absent(api, session_id)


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


async def test_invalid_utf8_in_the_body_gets_a_client_error(
    api: httpx.AsyncClient, url: str, session_id: str
) -> None:
    answer = await post_raw(api, url, b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}')
    assert 400 <= answer.status_code < 500, answer.text
    assert_error(answer, answer.status_code)
    await assert_session_absent(api, session_id)


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


# --- path and query parameters --------------------------------------------------------------


@pytest.mark.parametrize(
    "bad_id", ["x" * 129, "bad$id", "bad%20id", "caf%C3%A9"], ids=["too long", "$", "space", "é"]
)
async def test_a_bad_session_id_in_the_path_gets_422(api: httpx.AsyncClient, bad_id: str) -> None:
    answer = await api.post(f"/v1/sessions/{bad_id}/messages", json={"messages": [user()]})
    assert_error(answer, 422, "session_id")
    listed = (await api.get("/v1/sessions", params={"limit": 1000})).json()["sessions"]
    assert not [s for s in listed if not s["id"].startswith("v-")]


async def test_a_session_id_of_128_characters_is_accepted(api: httpx.AsyncClient) -> None:
    long_id = f"v-{uuid.uuid4().hex}".ljust(128, "x")
    assert len(long_id) == 128
    answer = await api.post(f"/v1/sessions/{long_id}/messages", json={"messages": [user()]})
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
    assert (await api.post(url, json={"messages": [user()]})).status_code == 201
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
