"""LangChain's chat models against Precis's chat wires, on both databases:
`langchain_openai.ChatOpenAI` (`POST /v1/chat/completions`) and `langchain_anthropic.ChatAnthropic`
(`POST /v1/messages`), each pointed at a live server by its base URL, its session named by
`X-Precis-Session` in `default_headers`. LangChain resends the whole history every turn: a
tool bound and called, its result sent back, the answer, a streamed turn, and one more turn.
The model behind Precis is a fake on loopback (`mode="marker_echo"`: it repeats every
`MARKER-...` token of the prompt it gets). The tests assert the answers and that the session
stores every message once, in order.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from functools import reduce
from operator import add
from typing import Any

import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from tests.client.keyed_server import TENANT_KEY, KeyedService, stored
from tests.support.fake_llm import Call, FakeLLM

OPENAI_MODEL = "openai/fake"
"""ChatOpenAI's model: litellm's OpenAI path to the fake."""

ANTHROPIC_MODEL = "anthropic/claude-sonnet-4-5"
"""ChatAnthropic's model: litellm's Anthropic path to the fake."""

OUTPUT_TOKENS = 200
SESSION_HEADER = "X-Precis-Session"

SYSTEM = "MARKER-rules Answer in one line."
ASKED = "MARKER-paris What is the weather in Paris?"
TOOL_RESULT = "MARKER-sunny 21 °C"
NEXT = "MARKER-tokyo And in 東京?"
LAST = "MARKER-last Thanks!"
"""The conversation's turns; each marker comes back in every later answer (`marker_echo`)."""

TOOL_ARGUMENTS = {"city": "Paris"}

ANSWERED = "MARKER-rules\nMARKER-paris\nMARKER-sunny"
STREAMED = f"{ANSWERED}\nMARKER-tokyo"
LAST_ANSWER = f"{STREAMED}\nMARKER-last"
"""What the fake answers to the tool's result, the streamed turn and the last turn."""


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return TOOL_RESULT


@pytest.fixture(scope="module")
def fake(keyed_service: KeyedService) -> FakeLLM:
    return keyed_service.fake_for_module(mode="marker_echo")


@pytest.fixture(scope="module")
def precis_url(fake: FakeLLM, keyed_service: KeyedService) -> str:
    return keyed_service.url_allowing(*MODELS)


MODELS = [OPENAI_MODEL, ANTHROPIC_MODEL]


def chat_model(kind: str, precis_url: str, session: str) -> BaseChatModel:
    """The LangChain chat model of `kind`, pointed at Precis as an app would point it."""
    headers = {SESSION_HEADER: session}
    if kind == "openai":
        return ChatOpenAI(
            base_url=f"{precis_url}/v1",
            api_key=TENANT_KEY,
            model=OPENAI_MODEL,
            max_tokens=OUTPUT_TOKENS,
            max_retries=0,
            default_headers=headers,
        )
    return ChatAnthropic(
        base_url=precis_url,
        api_key=TENANT_KEY,
        model=ANTHROPIC_MODEL,
        max_tokens=OUTPUT_TOKENS,
        max_retries=0,
        default_headers=headers,
    )


@dataclass
class Conversation:
    """One chat model's turns: what it answered, the model calls, and what Precis stores."""

    session: str
    answers: list[AIMessage]
    chunks: list[AIMessageChunk]
    calls: list[Call]
    stored: list[dict[str, Any]]


def converse(kind: str, precis_url: str, fake: FakeLLM) -> Conversation:
    """The conversation, LangChain resending the whole history every turn."""
    session = f"langchain-{kind}-{uuid.uuid4().hex[:12]}"
    model = chat_model(kind, precis_url, session)
    with_tools = model.bind_tools([get_weather])
    fake.call_tool_next(get_weather.name, json.dumps(TOOL_ARGUMENTS))
    before = len(fake.calls)
    history: list[BaseMessage] = [SystemMessage(SYSTEM), HumanMessage(ASKED)]
    asked = with_tools.invoke(history)
    assert isinstance(asked, AIMessage)
    [call] = asked.tool_calls
    history += [asked, ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])]
    answered = with_tools.invoke(history)
    assert isinstance(answered, AIMessage)
    history += [answered, HumanMessage(NEXT)]
    chunks = list(model.stream(history))
    streamed = reduce(add, chunks)
    history += [streamed, HumanMessage(LAST)]
    last = model.invoke(history)
    assert isinstance(last, AIMessage)
    return Conversation(
        session,
        [asked, answered, streamed, last],
        chunks,
        fake.calls[before:],
        stored(precis_url, session),
    )


@pytest.fixture(scope="module", params=["openai", "anthropic"])
def conversation(request: pytest.FixtureRequest, precis_url: str, fake: FakeLLM) -> Conversation:
    return converse(request.param, precis_url, fake)


def test_the_bound_tool_is_called_and_its_result_answered(conversation: Conversation) -> None:
    asked, answered, _, _ = conversation.answers
    assert [(c["name"], c["args"]) for c in asked.tool_calls] == [("get_weather", TOOL_ARGUMENTS)]
    assert answered.text == ANSWERED
    assert answered.tool_calls == []


def test_a_streamed_turn_arrives_in_pieces(conversation: Conversation) -> None:
    texts = [chunk.text for chunk in conversation.chunks if chunk.text]
    assert len(texts) > 1, "the answer arrives in pieces"
    assert "".join(texts) == STREAMED
    assert conversation.answers[2].text == STREAMED


def test_the_last_turn_answers_from_the_whole_conversation(conversation: Conversation) -> None:
    assert conversation.answers[3].text == LAST_ANSWER


def test_the_session_stores_each_unique_message_once(conversation: Conversation) -> None:
    kept = conversation.stored
    assert [(m["role"], m.get("content")) for m in kept] == [
        ("system", SYSTEM),
        ("user", ASKED),
        ("assistant", None),
        ("tool", TOOL_RESULT),
        ("assistant", ANSWERED),
        ("user", NEXT),
        ("assistant", STREAMED),
        ("user", LAST),
        ("assistant", LAST_ANSWER),
    ], json.dumps(kept, ensure_ascii=False)
    [call] = kept[2]["tool_calls"]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == (
        "get_weather",
        TOOL_ARGUMENTS,
    )
    assert call["id"] == kept[3]["tool_call_id"] == conversation.answers[0].tool_calls[0]["id"]


def test_the_model_gets_the_stored_context_and_the_new_messages_once(
    conversation: Conversation,
) -> None:
    assert len(conversation.calls) == 4
    last = conversation.calls[-1].messages
    assert [m["role"] for m in last] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
