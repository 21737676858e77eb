"""A bad message or a bad batch gets its 422 in the one error shape, naming the field, and
nothing of the batch is stored, nor is its session created.

Tests share the module's app (`api`), each on its own session id (the `session_id` and `url`
fixtures of `tests/routes/conftest.py`).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers import assert_error, assert_session_absent, nested, post_raw, user

TOOL_CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


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
