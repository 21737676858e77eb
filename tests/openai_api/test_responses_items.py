"""Responses API items: stored verbatim, one format per session, summarized by their chat reading,
and shown in either format only where that is exact (docs/design.md, section 2 amendments)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.db.models import Message
from api.main import create_app
from tests.conftest import make_settings
from tests.helpers import append_items, assistant, user
from tests.support.fake_llm import FakeLLM

LOCAL_ONLY: dict[str, Any] = {"summary_workers": 0, "summary_message_limit": 10_000}

WEATHER_TURN: list[dict[str, Any]] = [
    {"content": "What is the weather in Łódź? ☔", "role": "user"},
    {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "MARKER-readable look the weather up"}],
        "encrypted_content": "MARKER-opaque gAAAAABo",
    },
    {
        "arguments": '{"city":"Łódź"}',
        "call_id": "call_1",
        "name": "get_weather",
        "type": "function_call",
        "id": "fc_1",
        "status": "completed",
    },
    {"call_id": "call_1", "output": "rain, 12 °C", "type": "function_call_output"},
    {
        "id": "msg_1",
        "content": [{"annotations": [], "text": "It rains in Łódź, 12 °C.", "type": "output_text"}],
        "role": "assistant",
        "status": "completed",
        "type": "message",
    },
]
"""An Agents SDK turn as its session stores it: keys in the SDK's own order."""

FUTURE_ITEM: dict[str, Any] = {
    "type": "hologram_call",
    "zeta": {"b": 1, "a": [2.5, None, True]},
    "alpha": "ünïcode",
}
"""An item type no one has seen yet."""


def as_text(value: Any) -> str:
    """JSON text with the keys in the order given: equal texts mean equal order."""
    return json.dumps(value, ensure_ascii=False)


async def test_every_item_type_comes_back_exactly_as_appended(
    client: httpx.AsyncClient, sid: str
) -> None:
    given = [*WEATHER_TURN, FUTURE_ITEM]
    stored = (await append_items(client, sid, *given))["messages"]
    assert [as_text(message["item"]) for message in stored] == [as_text(i) for i in given]
    listed = (await client.get(f"/v1/sessions/{sid}/messages")).json()["messages"]
    assert [as_text(message["item"]) for message in listed] == [as_text(i) for i in given]
    history = (await client.get(f"/v1/sessions/{sid}/history?format=responses")).json()
    assert [as_text(item) for item in history["context"]] == [as_text(i) for i in given]
    by_default = (await client.get(f"/v1/sessions/{sid}/history")).json()  # its own format
    assert by_default["context"] == history["context"]
    session = (await client.get(f"/v1/sessions/{sid}")).json()
    assert session["format"] == "responses"
    assert all(message["token_count"] > 0 for message in stored)
    popped = (await client.post(f"/v1/sessions/{sid}/messages/pop")).json()["message"]
    assert as_text(popped["item"]) == as_text(FUTURE_ITEM)


async def test_a_session_holds_one_format(client: httpx.AsyncClient, sid: str) -> None:
    await append_items(client, sid, WEATHER_TURN[0])
    chat = await client.post(f"/v1/sessions/{sid}/messages", json={"messages": [user("hi")]})
    assert chat.status_code == 409, chat.text
    assert chat.json()["error"] == "FormatConflict"
    created = await client.post("/v1/sessions", json={"id": f"{sid}-r", "format": "responses"})
    assert created.status_code == 201 and created.json()["format"] == "responses"
    refused = await client.post(f"/v1/sessions/{sid}-r/messages", json={"messages": [user("hi")]})
    assert refused.status_code == 409
    chat_session = await client.post(
        f"/v1/sessions/{sid}-c/messages", json={"messages": [user("hi")]}
    )
    assert chat_session.status_code == 201
    items = await client.post(
        f"/v1/sessions/{sid}-c/messages", json={"items": [{"item": WEATHER_TURN[0]}]}
    )
    assert items.status_code == 409
    for name, count in ((sid, 1), (f"{sid}-r", 0), (f"{sid}-c", 1)):  # nothing refused stored
        assert (await client.get(f"/v1/sessions/{name}")).json()["message_count"] == count


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"items": [{"item": {"type": "function_call", "name": "f"}}]}, "call_id"),
        ({"items": [{"item": {"role": "robot", "content": "x"}}]}, "role"),
        ({"items": [{"item": "not an object"}]}, "item"),
        ({"messages": [user("a")], "items": [{"item": WEATHER_TURN[0]}]}, "either"),
        ({}, "either"),
    ],
)
async def test_a_bad_item_is_refused_naming_the_problem(
    client: httpx.AsyncClient, sid: str, body: dict[str, Any], named: str
) -> None:
    answer = await client.post(f"/v1/sessions/{sid}/messages", json=body)
    assert answer.status_code == 422, answer.text
    assert named in answer.json()["detail"]
    assert (await client.get(f"/v1/sessions/{sid}")).status_code == 404  # nothing stored


async def test_the_openai_format_of_items_is_exact_or_refused(
    client: httpx.AsyncClient, sid: str
) -> None:
    without_reasoning = [item for item in WEATHER_TURN if item.get("type") != "reasoning"]
    await append_items(client, sid, *without_reasoning)
    context = (await client.get(f"/v1/sessions/{sid}/history?format=openai")).json()["context"]
    assert context == [
        {"role": "user", "content": "What is the weather in Łódź? ☔"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Łódź"}'},
                }
            ],
        },
        {"role": "tool", "content": "rain, 12 °C", "tool_call_id": "call_1"},
        {"role": "assistant", "content": [{"type": "text", "text": "It rains in Łódź, 12 °C."}]},
    ]
    await append_items(client, sid, WEATHER_TURN[1])
    refused = await client.get(f"/v1/sessions/{sid}/history?format=openai")
    assert refused.status_code == 422
    assert refused.json()["error"] == "UnfaithfulView"
    assert "reasoning" in refused.json()["detail"]


async def test_the_responses_format_of_chat_messages_is_exact_or_refused(
    client: httpx.AsyncClient, sid: str
) -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    result = {"role": "tool", "tool_call_id": "c1", "content": "42"}
    chat = [user("q"), call, result, assistant("a")]
    await client.post(f"/v1/sessions/{sid}/messages", json={"messages": chat})
    context = (await client.get(f"/v1/sessions/{sid}/history?format=responses")).json()["context"]
    assert context == [
        {"type": "message", "role": "user", "content": "q"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
        {"type": "message", "role": "assistant", "content": "a"},
    ]
    await client.post(f"/v1/sessions/{sid}/messages", json={"messages": [user("b", name="bo")]})
    refused = await client.get(f"/v1/sessions/{sid}/history?format=responses")
    assert refused.status_code == 422 and refused.json()["error"] == "UnfaithfulView"


@pytest.mark.parametrize("settings_overrides", [LOCAL_ONLY], indirect=True)
async def test_summaries_head_the_responses_format_and_never_split_a_call_from_its_output(
    client: httpx.AsyncClient, sid: str, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    question = {"role": "user", "content": "MARKER-q compare two cities"}
    calls = [
        {"type": "function_call", "call_id": "a", "name": "w", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "w", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "b", "output": "sun"},
        {"type": "function_call_output", "call_id": "a", "output": "rain"},
    ]
    answer = {"type": "message", "role": "assistant", "content": "Rain and sun."}
    await append_items(client, sid, question, *calls, answer)
    # keeping the last 3 would cut between the calls and their outputs: the cut moves back
    compacted = await client.post(
        f"/v1/sessions/{sid}/compact", json={"trigger": "manual", "keep_last_n": 3}
    )
    assert compacted.status_code == 200, compacted.text
    summary = compacted.json()["summary"]
    assert (summary["first_seq"], summary["last_seq"]) == (1, 1)
    context = (await client.get(f"/v1/sessions/{sid}/history?format=responses")).json()["context"]
    assert context[0]["type"] == "message" and context[0]["role"] == "developer"
    assert context[0]["content"].startswith("Summary of earlier conversation (messages 1-1)")
    assert [as_text(item) for item in context[1:]] == [as_text(i) for i in [*calls, answer]]


@pytest.mark.usefixtures("engine")  # its own app: the shared database emptied afterwards
async def test_a_reasoning_item_is_summarized_by_its_readable_summary_only(
    sid: str, fake_llm: FakeLLM, database_url: str
) -> None:
    fake_llm.mode = "marker_echo"  # the summary repeats every marker the model was shown
    settings = {
        **LOCAL_ONLY,
        "summary_model": "openai/fake",
        "summary_api_base": fake_llm.base_url,
        "summary_api_key": "test",
    }
    app = create_app(make_settings(database_url, **settings))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://localhost") as client,
    ):
        await append_items(client, sid, *WEATHER_TURN)
        compacted = await client.post(
            f"/v1/sessions/{sid}/compact", json={"trigger": "manual", "keep_last_n": 0}
        )
    assert compacted.status_code == 200, compacted.text
    summary_text = compacted.json()["summary"]["summary_text"]
    assert "MARKER-readable" in summary_text
    prompts = " ".join(str(call.messages) for call in fake_llm.calls)
    assert "MARKER-readable" in prompts and "get_weather" in prompts
    assert "MARKER-opaque" not in prompts


async def test_removing_a_function_call_output_hides_its_call_and_keeps_no_item(
    client: httpx.AsyncClient, sid: str, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    stored = (await append_items(client, sid, *WEATHER_TURN))["messages"]
    answer = await client.delete(f"/v1/sessions/{sid}/messages/{stored[3]['id']}")
    assert answer.status_code == 204
    context = (await client.get(f"/v1/sessions/{sid}/history?format=responses")).json()["context"]
    assert [item.get("type") for item in context] == [None, "message"]  # reasoning led to it
    async with sessionmaker() as db:
        rows = select(Message.item, Message.removed_at, Message.orphaned_at).where(
            Message.id.in_([stored[2]["id"], stored[3]["id"]])
        )
        (call, output) = sorted((await db.execute(rows)).all(), key=lambda row: row[0] is None)
    assert call[0] == as_text_compact(WEATHER_TURN[2]) and call[2] is not None  # hidden, kept
    assert output[0] is None and output[1] is not None  # removed: no item text left
    popped = (await client.post(f"/v1/sessions/{sid}/messages/pop")).json()["message"]
    assert as_text(popped["item"]) == as_text(WEATHER_TURN[4])


def as_text_compact(item: dict[str, Any]) -> str:
    return json.dumps(item, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize("settings_overrides", [LOCAL_ONLY], indirect=True)
async def test_a_reasoning_item_is_never_parted_from_the_call_it_led_to(
    client: httpx.AsyncClient, sid: str
) -> None:
    await append_items(client, sid, *WEATHER_TURN)  # user, reasoning, call, output, answer
    # keeping 3 would leave the call without its reasoning: the cut moves before both
    compacted = await client.post(
        f"/v1/sessions/{sid}/compact", json={"trigger": "manual", "keep_last_n": 3}
    )
    assert compacted.status_code == 200, compacted.text
    assert compacted.json()["summary"]["last_seq"] == 1
    context = (await client.get(f"/v1/sessions/{sid}/history?format=responses")).json()["context"]
    assert [item.get("type") for item in context[1:]] == [
        "reasoning",
        "function_call",
        "function_call_output",
        "message",
    ]


async def test_a_tight_budget_keeps_reasoning_and_call_together_or_drops_both(
    client: httpx.AsyncClient, sid: str
) -> None:
    await append_items(client, sid, *WEATHER_TURN)
    for budget in range(20, 200, 10):
        answer = await client.get(
            f"/v1/sessions/{sid}/history", params={"format": "responses", "max_tokens": budget}
        )
        kinds = [item.get("type") for item in answer.json()["context"]]
        assert ("function_call" in kinds) == ("reasoning" in kinds), (budget, kinds)


async def test_removing_a_call_s_output_hides_the_reasoning_that_led_to_it(
    client: httpx.AsyncClient, sid: str
) -> None:
    stored = (await append_items(client, sid, *WEATHER_TURN))["messages"]
    answer = await client.delete(f"/v1/sessions/{sid}/messages/{stored[3]['id']}")
    assert answer.status_code == 204
    listed = (await client.get(f"/v1/sessions/{sid}/messages")).json()["messages"]
    assert [m["seq"] for m in listed] == [1, 5]


async def test_a_call_alone_over_the_budget_still_comes_with_its_reasoning(
    client: httpx.AsyncClient, sid: str
) -> None:
    """The newest unit always stays, even over the budget: the loader reads back far enough
    to bring the reasoning item that led to it."""
    await append_items(client, sid, *WEATHER_TURN[:4])  # ends with the call's output
    answer = await client.get(
        f"/v1/sessions/{sid}/history", params={"format": "responses", "max_tokens": 5}
    )
    kinds = [item.get("type") for item in answer.json()["context"]]
    assert kinds[-3:] == ["reasoning", "function_call", "function_call_output"], kinds


async def test_a_call_without_its_output_gets_a_placeholder_of_its_own_kind(
    client: httpx.AsyncClient, sid: str
) -> None:
    custom = {"type": "custom_tool_call", "call_id": "k1", "name": "grep", "input": "TODO"}
    function = {"type": "function_call", "call_id": "f1", "name": "w", "arguments": "{}"}
    await append_items(client, sid, {"role": "user", "content": "go"}, custom)
    await append_items(client, sid, {"role": "user", "content": "and"}, function)
    await append_items(client, sid, {"role": "user", "content": "done?"})
    context = (await client.get(f"/v1/sessions/{sid}/history")).json()["context"]
    outputs = [(item["type"], item["call_id"]) for item in context if "output" in item]
    assert outputs == [("custom_tool_call_output", "k1"), ("function_call_output", "f1")]
