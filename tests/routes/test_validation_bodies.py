"""A body that does not parse, a value of the wrong type anywhere, a NUL byte outside the
messages: each gets its 4xx in the one error shape, saying what is wrong, and nothing is stored.

Tests share the module's app (`api`), each on its own session id (the `session_id` and `url`
fixtures of `tests/routes/conftest.py`).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers import assert_error, assert_session_absent, post_raw, user

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
