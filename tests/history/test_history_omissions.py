"""The history answer names everything it leaves out of `context`, by kind: messages and summaries
dropped to fit `max_tokens`, older messages left unread, and messages no context may hold
(a reasoning item with nothing after it, a tool result without its call, a second result)."""

from __future__ import annotations

from typing import Any

import httpx

from api.context import MISSING_TOOL_RESULT, TRUNCATION_MARKER
from api.store.tail import TAIL_PAGE_SIZE
from tests.helpers import append, append_items, assistant, history, tool_call, tool_result, user

QUESTION = {"role": "user", "content": "What is the weather in Lyon?"}
REASONING = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": "look the weather up"}],
}
CALL = {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "rain"}

NOTHING_LEFT_OUT: dict[str, Any] = {
    "messages": [],
    "unread": None,
    "summaries": [],
    "unsendable": [],
}


async def test_a_reasoning_item_with_nothing_after_it_is_named_as_left_out(
    api: httpx.AsyncClient, sid: str
) -> None:
    stored = (await append_items(api, sid, QUESTION, REASONING))["messages"]
    _question, reasoning = [message["id"] for message in stored]
    loaded = await history(api, sid)
    assert [item.get("type") for item in loaded["context"]] == [None]  # the question only
    assert loaded["truncated_messages"] == 0  # not the budget: the Responses API refuses it
    assert loaded["omitted"]["unsendable"] == [{"id": reasoning, "reason": "dangling_reasoning"}]
    assert [message["id"] for message in loaded["messages"]][-1] == reasoning


async def test_a_reasoning_item_is_sent_once_the_item_it_led_to_is_appended(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append_items(api, sid, QUESTION, REASONING)
    await append_items(api, sid, CALL, OUTPUT)
    loaded = await history(api, sid)
    kinds = [item.get("type") for item in loaded["context"]]
    assert kinds == [None, "reasoning", "function_call", "function_call_output"]
    assert loaded["omitted"] == NOTHING_LEFT_OUT


async def test_a_call_still_waiting_for_its_output_is_sent_with_a_placeholder(
    api: httpx.AsyncClient, sid: str
) -> None:
    """The newest items a reasoning item and the call it led to: both are sent, the call with
    a placeholder output, as the `openai` format sends a trailing call."""
    await append_items(api, sid, QUESTION, REASONING, CALL)
    loaded = await history(api, sid)
    context = loaded["context"]
    assert [item.get("type") for item in context] == [
        None,
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert context[-1] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": MISSING_TOOL_RESULT,
    }
    assert loaded["omitted"] == NOTHING_LEFT_OUT


async def test_a_tool_result_without_its_call_is_named_as_left_out(
    api: httpx.AsyncClient, sid: str
) -> None:
    stored = (await append(api, sid, user("hi"), tool_result("nowhere"), assistant("hello")))[
        "messages"
    ]
    loaded = await history(api, sid)
    assert [message["role"] for message in loaded["context"]] == ["user", "assistant"]
    assert loaded["omitted"]["unsendable"] == [
        {"id": stored[1]["id"], "reason": "orphan_tool_result"}
    ]


async def test_a_second_result_of_a_call_is_named_as_left_out(
    api: httpx.AsyncClient, sid: str
) -> None:
    stored = (
        await append(api, sid, user("go"), tool_call("c1"), tool_result("c1"), tool_result("c1"))
    )["messages"]
    loaded = await history(api, sid)
    assert [message["role"] for message in loaded["context"]] == ["user", "assistant", "tool"]
    assert loaded["omitted"]["unsendable"] == [
        {"id": stored[3]["id"], "reason": "duplicate_tool_result"}
    ]


async def test_messages_left_out_for_the_budget_are_named_read_or_unread(
    api: httpx.AsyncClient, sid: str
) -> None:
    """The loader reads back only as far as the budget needs: what it read and dropped is
    named by id, what it left unread by its seqs."""
    stored = (await append(api, sid, *(user(f"message {n} " * 20) for n in range(6))))["messages"]
    loaded = await history(api, sid, max_tokens=120)
    read = {message["id"] for message in loaded["messages"]}
    shown = {message["content"] for message in loaded["context"]}
    dropped = [m["id"] for m in stored if m["id"] in read and m["content"] not in shown]
    unread = [m for m in stored if m["id"] not in read]
    assert dropped and unread
    assert loaded["omitted"]["messages"] == dropped
    assert loaded["omitted"]["unread"] == {
        "first_seq": unread[0]["seq"],
        "last_seq": unread[-1]["seq"],
        "count": len(unread),
    }
    assert loaded["truncated_messages"] == len(dropped) + len(unread)
    assert loaded["context"][0]["content"] == TRUNCATION_MARKER


async def test_messages_the_loader_left_unread_are_named_by_seq(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append(api, sid, *(user(f"message {n}") for n in range(TAIL_PAGE_SIZE + 20)))
    loaded = await history(api, sid, max_tokens=30)
    oldest_read = loaded["messages"][0]["seq"]
    unread = loaded["omitted"]["unread"]
    assert unread == {"first_seq": 1, "last_seq": oldest_read - 1, "count": oldest_read - 1}
    assert loaded["truncated_messages"] == unread["count"] + len(loaded["omitted"]["messages"])


async def test_a_summary_dropped_for_the_budget_is_named_by_id(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append(api, sid, *(user(f"early message {n} about trains") for n in range(6)))
    compacted = await api.post(f"/v1/sessions/{sid}/compact", json={"keep_last_n": 0})
    summary = compacted.json()["summary"]
    assert summary is not None, compacted.text
    await append(api, sid, user("a long question " * 60))
    loaded = await history(api, sid, max_tokens=50)
    assert [s["id"] for s in loaded["summaries"]] == [summary["id"]]
    assert loaded["omitted"]["summaries"] == [summary["id"]]
    assert not any("Summary of earlier" in str(m["content"]) for m in loaded["context"])
    assert loaded["truncated_messages"] == 0  # no message was left out: only the summary


async def test_a_history_that_fits_leaves_nothing_out(api: httpx.AsyncClient, sid: str) -> None:
    await append(api, sid, user("hi"), tool_call("c1"), tool_result("c1"), assistant("done"))
    loaded = await history(api, sid, max_tokens=10_000)
    assert loaded["omitted"] == NOTHING_LEFT_OUT
    assert loaded["truncated_messages"] == 0
