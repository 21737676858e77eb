"""`PrecisClient` and `AsyncPrecisClient` against a real server on both databases: every
method once in each flavour, and the service's errors as their exceptions."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import pytest
from precis_client import (
    AsyncPrecisClient,
    FormatConflict,
    MessageNotFound,
    PrecisClient,
    PrecisError,
    SessionExists,
    SessionNotFound,
    SummaryNotFound,
    UnfaithfulView,
    ValidationFailed,
)
from precis_client.types import ItemEntry

T = TypeVar("T")
Client = PrecisClient | AsyncPrecisClient


async def done(answer: T | Awaitable[T]) -> T:
    """A sync client's answer as it is, an async client's awaited: one test body for both."""
    if inspect.isawaitable(answer):
        return await answer
    return answer


@pytest.fixture(params=["sync", "async"])
async def client(request: pytest.FixtureRequest, service_url: str) -> AsyncIterator[Client]:
    """A `PrecisClient` or an `AsyncPrecisClient` of the module's server."""
    if request.param == "sync":
        with PrecisClient(service_url) as sync_client:
            yield sync_client
    else:
        async with AsyncPrecisClient(service_url) as async_client:
            yield async_client


def chat(content: str, role: str = "user", **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content, **extra}


def call(call_id: str, name: str = "lookup", arguments: str = "{}") -> dict[str, Any]:
    function = {"name": name, "arguments": arguments}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def result(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "content": content, "tool_call_id": call_id}


# --- sessions -------------------------------------------------------------------------------


async def test_create_session_stores_its_metadata_settings_and_format(
    client: Client, sid: str
) -> None:
    created = await done(
        client.create_session(
            sid, metadata={"user": "ü-42"}, settings={"keep_last_n": 3}, format="responses"
        )
    )
    fetched = await done(client.get_session(sid))
    assert created["id"] == fetched["id"] == sid
    assert fetched["metadata"] == {"user": "ü-42"}
    assert fetched["settings"]["keep_last_n"] == 3
    assert fetched["format"] == "responses"
    assert fetched["message_count"] == 0


async def test_create_session_without_an_id_gets_a_generated_one(client: Client) -> None:
    created = await done(client.create_session())
    assert created["id"].startswith("ses_")
    assert (await done(client.get_session(created["id"])))["id"] == created["id"]


async def test_list_sessions_pages_with_the_cursor(client: Client, sid: str) -> None:
    for suffix in ("a", "b", "c"):
        await done(client.create_session(f"{sid}-{suffix}"))
    first = await done(client.list_sessions(limit=2))
    assert [s["id"] for s in first["sessions"]] == [f"{sid}-c", f"{sid}-b"]  # newest first
    assert first["next_cursor"] is not None
    second = await done(client.list_sessions(limit=1, cursor=first["next_cursor"]))
    assert [s["id"] for s in second["sessions"]] == [f"{sid}-a"]


async def test_update_session_changes_metadata_and_settings(client: Client, sid: str) -> None:
    await done(client.create_session(sid))
    updated = await done(
        client.update_session(sid, metadata={"plan": "pro"}, settings={"summary_limit": 2})
    )
    assert updated["metadata"] == {"plan": "pro"}
    assert updated["settings"]["summary_limit"] == 2
    assert (await done(client.get_session(sid)))["metadata"] == {"plan": "pro"}


async def test_delete_session_removes_it(client: Client, sid: str) -> None:
    await done(client.append_messages(sid, [chat("hello")]))
    await done(client.delete_session(sid))
    with pytest.raises(SessionNotFound):
        await done(client.get_session(sid))


# --- messages -------------------------------------------------------------------------------


async def test_append_messages_creates_the_session_and_lists_them_in_pages(
    client: Client, sid: str
) -> None:
    appended = await done(
        client.append_messages(
            sid, [chat("one", client_id="m-1"), chat("two", "assistant"), chat("three")]
        )
    )
    assert [m["seq"] for m in appended["messages"]] == [1, 2, 3]
    assert appended["messages"][0]["client_id"] == "m-1"
    page = await done(client.list_messages(sid, after_seq=1, limit=1))
    assert [m["content"] for m in page["messages"]] == ["two"]
    assert page["next_cursor"] == "2"
    rest = await done(client.list_messages(sid, after_seq=int(page["next_cursor"])))
    assert [m["content"] for m in rest["messages"]] == ["three"]


async def test_append_messages_with_a_stored_client_id_answers_the_stored_message(
    client: Client, sid: str
) -> None:
    (first,) = (await done(client.append_messages(sid, [chat("once", client_id="c")])))["messages"]
    (again,) = (await done(client.append_messages(sid, [chat("once", client_id="c")])))["messages"]
    assert again["id"] == first["id"]
    assert (await done(client.get_session(sid)))["message_count"] == 1


async def test_append_items_stores_them_verbatim(client: Client, sid: str) -> None:
    item = {
        "type": "message",
        "role": "user",
        "content": "Grüße aus Łódź 👋",
        "zeta": 1,
        "alpha": [2],
    }
    entries: list[ItemEntry] = [{"item": item, "client_id": "i-1", "metadata": {"k": "v"}}]
    (stored,) = (await done(client.append_items(sid, entries)))["messages"]
    (listed,) = (await done(client.list_messages(sid)))["messages"]
    assert stored["item"] == listed["item"] == item
    assert list(listed["item"] or {}) == ["type", "role", "content", "zeta", "alpha"]
    assert listed["metadata"] == {"k": "v"}
    assert (await done(client.get_session(sid)))["format"] == "responses"


async def test_remove_message_removes_the_tool_call_with_its_result(
    client: Client, sid: str
) -> None:
    appended = await done(
        client.append_messages(sid, [chat("look it up"), call("c1"), result("c1", "found")])
    )
    user_message, tool_call, _tool_result = appended["messages"]
    await done(client.remove_message(sid, tool_call["id"]))
    left = (await done(client.list_messages(sid)))["messages"]
    assert [m["id"] for m in left] == [user_message["id"]]


async def test_pop_message_answers_the_newest_and_hides_the_rest_of_its_exchange(
    client: Client, sid: str
) -> None:
    await done(client.append_messages(sid, [chat("look it up"), call("c1"), result("c1", "x")]))
    popped = await done(client.pop_message(sid))
    assert popped["message"]["role"] == "tool"
    assert [m["content"] for m in (await done(client.list_messages(sid)))["messages"]] == [
        "look it up"
    ]
    hidden_call = await done(client.pop_message(sid))  # popped in turn, as appended
    assert hidden_call["message"]["tool_calls"] == call("c1")["tool_calls"]


# --- history, compact, summaries -------------------------------------------------------------


async def test_history_answers_the_context_in_either_format(client: Client, sid: str) -> None:
    await done(client.append_messages(sid, [chat("hi"), chat("hello", "assistant")]))
    openai_history = await done(client.history(sid))
    assert openai_history["context"] == [chat("hi"), chat("hello", "assistant")]
    responses_history = await done(client.history(sid, format="responses"))
    assert [item["role"] for item in responses_history["context"]] == ["user", "assistant"]
    assert all(item.get("type") == "message" for item in responses_history["context"])


async def test_history_fits_max_tokens_by_truncating_the_oldest(client: Client, sid: str) -> None:
    words = " ".join(f"word{i}" for i in range(200))
    await done(client.append_messages(sid, [chat(words), chat(words, "assistant"), chat("last")]))
    loaded = await done(client.history(sid, max_tokens=120, summary_limit=1))
    assert loaded["truncated_messages"] >= 1
    assert loaded["context"][-1] == chat("last")
    assert loaded["token_estimate"] <= 120


async def test_compact_makes_a_summary_listed_and_fetched_with_its_sources(
    client: Client, sid: str
) -> None:
    await done(
        client.append_messages(
            sid, [chat(f"Order {n} is blue.", "user" if n % 2 else "assistant") for n in range(6)]
        )
    )
    compacted = await done(client.compact(sid, trigger="manual", keep_last_n=2))
    summary = compacted["summary"]
    assert summary is not None
    assert (summary["first_seq"], summary["last_seq"]) == (1, 4)
    assert compacted["history"]["context"][0]["role"] == "system"
    listed = await done(client.list_summaries(sid))
    assert [s["id"] for s in listed["summaries"]] == [summary["id"]]
    also_superseded = await done(client.list_summaries(sid, include_superseded=True, limit=5))
    assert [s["id"] for s in also_superseded["summaries"]] == [summary["id"]]
    detail = await done(client.get_summary(summary["id"]))
    assert len(detail["message_ids"]) == summary["message_count"] == 4


# --- errors ---------------------------------------------------------------------------------


async def test_an_unknown_session_raises_session_not_found(client: Client, sid: str) -> None:
    with pytest.raises(SessionNotFound) as raised:
        await done(client.history(sid))
    assert (raised.value.status, raised.value.error) == (404, "SessionNotFound")
    assert sid in raised.value.detail


async def test_a_taken_session_id_raises_session_exists(client: Client, sid: str) -> None:
    await done(client.create_session(sid))
    with pytest.raises(SessionExists) as raised:
        await done(client.create_session(sid))
    assert raised.value.status == 409


async def test_items_appended_to_a_chat_session_raise_format_conflict(
    client: Client, sid: str
) -> None:
    await done(client.append_messages(sid, [chat("hi")]))
    with pytest.raises(FormatConflict) as raised:
        await done(client.append_items(sid, [{"item": {"role": "user", "content": "hi"}}]))
    assert raised.value.status == 409
    assert (await done(client.get_session(sid)))["message_count"] == 1


async def test_a_bad_message_raises_validation_failed_naming_the_field(
    client: Client, sid: str
) -> None:
    with pytest.raises(ValidationFailed) as raised:
        await done(client.append_messages(sid, [chat("fine"), chat("who?", "robot")]))
    assert raised.value.status == 422
    assert "messages.1" in raised.value.detail
    assert "role" in raised.value.detail
    with pytest.raises(SessionNotFound):  # nothing of the batch was stored
        await done(client.get_session(sid))


async def test_a_format_that_would_not_be_exact_raises_unfaithful_view(
    client: Client, sid: str
) -> None:
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "hm"}],
    }
    await done(
        client.append_items(sid, [{"item": {"role": "user", "content": "hi"}}, {"item": reasoning}])
    )
    with pytest.raises(UnfaithfulView) as raised:
        await done(client.history(sid, format="openai"))
    assert "reasoning" in raised.value.detail


async def test_popping_an_empty_session_raises_message_not_found(client: Client, sid: str) -> None:
    await done(client.create_session(sid))
    with pytest.raises(MessageNotFound):
        await done(client.pop_message(sid))


async def test_an_unknown_summary_raises_summary_not_found(client: Client) -> None:
    with pytest.raises(SummaryNotFound) as raised:
        await done(client.get_summary(2**62))
    assert isinstance(raised.value, PrecisError)
    assert raised.value.status == 404
