"""`PrecisChatMessageHistory` against a real server on both databases: LangChain messages
round trip (tool calls included), the async methods, summaries as `SystemMessage`s, clear."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from precis_client import PrecisClient, SessionNotFound
from precis_client.langchain import PrecisChatMessageHistory

CONVERSATION: list[BaseMessage] = [
    SystemMessage("You are a shop assistant."),
    HumanMessage("Where is order 1234? Grüße 👋"),
    AIMessage(
        "",
        tool_calls=[
            {"name": "order_status", "args": {"order": "1234", "urgent": True}, "id": "call_1"},
            {"name": "carrier", "args": {"city": "Łódź"}, "id": "call_2"},
        ],
    ),
    ToolMessage("shipped on Monday", tool_call_id="call_1"),
    ToolMessage("DHL", tool_call_id="call_2"),
    AIMessage("It shipped on Monday with DHL."),
]


def shape(message: BaseMessage) -> tuple[object, ...]:
    """What the history must keep of a message."""
    calls = [(c["name"], c["args"], c["id"]) for c in getattr(message, "tool_calls", [])]
    return (type(message), message.content, calls, getattr(message, "tool_call_id", None))


@pytest.fixture
def history(service_url: str, sid: str) -> PrecisChatMessageHistory:
    return PrecisChatMessageHistory(sid, base_url=service_url)


def test_it_is_a_langchain_chat_history(history: PrecisChatMessageHistory) -> None:
    assert isinstance(history, BaseChatMessageHistory)


def test_messages_round_trip_with_their_tool_calls(history: PrecisChatMessageHistory) -> None:
    history.add_messages(CONVERSATION)
    assert [shape(m) for m in history.messages] == [shape(m) for m in CONVERSATION]


def test_they_are_stored_as_openai_chat_messages(
    history: PrecisChatMessageHistory, precis: PrecisClient, sid: str
) -> None:
    history.add_messages(CONVERSATION[1:4])
    stored = precis.list_messages(sid)["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant", "tool"]
    assert stored[1]["content"] is None
    assert stored[1]["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "order_status", "arguments": '{"order": "1234", "urgent": true}'},
        },
        {
            "id": "call_2",
            "type": "function",
            "function": {"name": "carrier", "arguments": '{"city": "Łódź"}'},
        },
    ]
    assert stored[2]["tool_call_id"] == "call_1"
    assert precis.get_session(sid)["format"] == "openai"


def test_add_user_and_ai_message_append_one_each(history: PrecisChatMessageHistory) -> None:
    history.add_user_message("hi")
    history.add_ai_message("hello")
    assert [shape(m) for m in history.messages] == [
        shape(HumanMessage("hi")),
        shape(AIMessage("hello")),
    ]


def test_tool_arguments_that_are_not_a_json_object_become_invalid_tool_calls(
    history: PrecisChatMessageHistory, precis: PrecisClient, sid: str
) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{oops"}}
    precis.append_messages(sid, [{"role": "assistant", "content": None, "tool_calls": [call]}])
    (message, _placeholder_result) = history.messages
    assert isinstance(message, AIMessage)
    assert message.tool_calls == []
    assert [(c["name"], c["args"], c["id"]) for c in message.invalid_tool_calls] == [
        ("f", "{oops", "call_1")
    ]


def test_a_tool_call_without_an_id_is_refused_before_sending(
    history: PrecisChatMessageHistory, precis: PrecisClient, sid: str
) -> None:
    message = AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": None}])
    with pytest.raises(ValueError, match="needs an id"):
        history.add_messages([HumanMessage("hi"), message])
    with pytest.raises(SessionNotFound):  # nothing of the batch was sent
        precis.get_session(sid)


def test_a_missing_session_has_no_messages(history: PrecisChatMessageHistory) -> None:
    assert history.messages == []


def test_a_summary_comes_back_as_a_system_message(
    history: PrecisChatMessageHistory, precis: PrecisClient, sid: str
) -> None:
    history.add_messages(
        [HumanMessage("My code word is periwinkle."), AIMessage("Noted.")]
        + [
            HumanMessage(f"Question {n}?") if n % 2 else AIMessage(f"Answer {n}.")
            for n in range(1, 5)
        ]
    )
    precis.compact(sid, keep_last_n=2)
    summary, *rest = history.messages
    assert isinstance(summary, SystemMessage)
    assert isinstance(summary.content, str)
    assert summary.content.startswith("Summary of earlier conversation (messages 1-4)")
    assert "periwinkle" in summary.content
    assert [shape(m) for m in rest] == [
        shape(HumanMessage("Question 3?")),
        shape(AIMessage("Answer 4.")),
    ]


def test_clear_deletes_the_session(
    history: PrecisChatMessageHistory, precis: PrecisClient, sid: str
) -> None:
    history.add_messages([HumanMessage("hi")])
    history.clear()
    assert history.messages == []
    with pytest.raises(SessionNotFound):
        precis.get_session(sid)
    history.clear()  # clearing a missing session is fine


async def test_the_async_methods_round_trip_and_clear(history: PrecisChatMessageHistory) -> None:
    await history.aadd_messages(CONVERSATION)
    assert [shape(m) for m in await history.aget_messages()] == [shape(m) for m in CONVERSATION]
    await history.aclear()
    assert await history.aget_messages() == []
    await history.aclear()


def test_the_async_methods_serve_successive_event_loops(
    history: PrecisChatMessageHistory,
) -> None:
    asyncio.run(history.aadd_messages([HumanMessage("first loop")]))
    asyncio.run(history.aadd_messages([HumanMessage("second loop")]))
    messages = asyncio.run(history.aget_messages())
    assert [m.content for m in messages] == ["first loop", "second loop"]
