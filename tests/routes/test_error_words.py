"""Errors in words: a wrong type in a union, and a path no route serves, answered as the
service says everything else (a field, then what it must be), never pydantic's branch labels."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers import assert_error, assert_session_absent

BRANCH_LABELS = (".str", "list[", "tagged-union", ".user.")
"""pydantic's labels of a union's branches and tags: none of them is a field of the request."""


@pytest.mark.parametrize("role", ["user", "assistant"])
async def test_content_of_the_wrong_type_is_one_sentence_naming_what_is_accepted(
    api: httpx.AsyncClient, url: str, session_id: str, role: str
) -> None:
    answer = await api.post(url, json={"messages": [{"role": role, "content": 5}]})
    assert_error(answer, 422)
    detail = answer.json()["detail"]
    assert detail == "body.messages.0.content: must be a string or a list of content parts"
    await assert_session_absent(api, session_id)


async def test_a_wrong_part_inside_content_names_the_part_not_the_union(
    api: httpx.AsyncClient, url: str
) -> None:
    message = {"role": "user", "content": [{"type": "text", "text": 5}]}
    answer = await api.post(url, json={"messages": [message]})
    assert_error(answer, 422, "body.messages.0.content.0.text:")
    assert ";" not in answer.json()["detail"]
    assert not any(label in answer.json()["detail"] for label in BRANCH_LABELS)


async def test_an_unknown_part_type_says_which_types_are_accepted(
    api: httpx.AsyncClient, url: str
) -> None:
    message = {"role": "user", "content": [{"type": "video"}]}
    answer = await api.post(url, json={"messages": [message]})
    assert_error(answer, 422, "body.messages.0.content.0: 'type' must be one of", "'video'")
    assert ";" not in answer.json()["detail"]


@pytest.mark.parametrize("path", ["/v1/nothing", "/v1/sessions/..%2F..%2Fetc%2Fpasswd"])
async def test_a_path_no_route_serves_says_so_in_the_error_shape(
    api: httpx.AsyncClient, path: str
) -> None:
    answer = await api.get(path)
    assert_error(answer, 404, "no route matches GET")
    assert answer.json()["detail"] != "Not Found"


async def test_a_path_under_a_route_family_names_the_family(api: httpx.AsyncClient) -> None:
    answer = await api.get("/v1/sessions/a/b/c/d")
    assert_error(answer, 404, "'/v1/sessions/a/b/c/d'", "the routes under /v1/sessions")


async def test_an_unknown_session_keeps_its_own_words(api: httpx.AsyncClient) -> None:
    answer = await api.get("/v1/sessions/no-such-session")
    assert_error(answer, 404, "session 'no-such-session' not found")


async def test_a_message_without_a_role_says_the_role_is_required(api: httpx.AsyncClient) -> None:
    answer = await api.post("/v1/sessions/no-role/messages", json={"messages": [{"content": "x"}]})
    assert_error(answer, 422)
    assert answer.json()["detail"] == "body.messages.0: role is required"
    await assert_session_absent(api, "no-role")


@pytest.mark.parametrize(
    ("method", "path", "body", "said"),
    [
        ("get", "/v1/sessions/words/messages?limit=0", None, "query.limit: must be at least 1"),
        ("patch", "/v1/sessions/words", {"id": "x"}, "body.id: is not a field this request takes"),
        (
            "get",
            "/v1/sessions/words/summaries?include_superseded=maybe",
            None,
            "query.include_superseded: must be true or false",
        ),
        (
            "post",
            "/v1/sessions/words/messages",
            {"messages": []},
            "body.messages: must hold at least 1 item",
        ),
    ],
)
async def test_bounds_and_fields_are_said_in_the_apis_words(
    api: httpx.AsyncClient, method: str, path: str, body: object, said: str
) -> None:
    await api.post("/v1/sessions", json={"id": "words"})
    answer = await api.request(method, path, json=body)
    assert_error(answer, 422)
    assert answer.json()["detail"] == said
