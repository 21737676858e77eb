"""The Agents SDK's `Runner` with `conversation_id` against Precis's `POST /v1/responses`, on
every database: `OpenAIResponsesModel(openai_client=AsyncOpenAI(base_url=<precis>/v1))` is the
switch, and Precis keeps the conversation the SDK names.

With `conversation_id` the SDK sends only what is new in each request (the user's input, then
a tool's output); Precis puts the conversation's earlier turns before it, calls the model (a
fake on loopback, through litellm), and stores each turn once it completes. A stream the
client abandons stores nothing. The SDK's other way, a chain of `previous_response_id`s
(`auto_previous_response_id`), reaches the model with the same context.

The SDK refuses `session=` together with `conversation_id` ("Session persistence cannot be
combined with conversation_id"), so `OpenAIConversationsSession` is not run with a
server-managed conversation here; `test_openai_conversations_session.py` tests it alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.models.openai_responses import OpenAIResponsesModel
from openai import AsyncOpenAI

from tests.client.keyed_server import TENANT_KEY, KeyedService
from tests.helpers import text_of, turn_calls
from tests.support.fake_llm import FakeLLM

REQUEST_TIMEOUT_SECONDS = 30.0
"""Per request of the SDK's client: generous for a loaded CI machine."""

AGENT_MODEL = "openai/fake"
"""What the agent names: litellm speaks the Responses wire format to the fake."""

STREAMED_MODEL = "openai/gpt-4o"
"""A model litellm streams event by event (with its window given), so a stream can be left
half-read; for `openai/fake` litellm fakes the stream from a whole answer."""

INSTRUCTIONS = "Answer in one sentence."
"""The agent's instructions: sent with every request, never stored."""

ORDER_STATUS = "Order 1234: shipped on Monday"
"""What the agent's tool answers."""

STREAM_DELAY_SECONDS = 0.2
"""The fake's pause between two events of the abandoned stream."""

STREAM_WORDS = 20
"""Words of the abandoned stream's answer: one delta each."""

STREAM_FRAME_EVENTS = 8
"""Events of a streamed answer besides its deltas (created, in progress, item and part added
and done, text done, completed)."""

FULL_STREAM_SECONDS = (STREAM_WORDS + STREAM_FRAME_EVENTS) * STREAM_DELAY_SECONDS
"""How long the fake takes to send the whole abandoned stream: the longest the test waits for
it to end."""

SETTLE_SECONDS = 2.0
"""Waited past the end of the fake's stream (cut when the server lets go of it, else sent
whole to a server that wrongly kept reading): time for such a server to store."""

EVENTS_READ_BEFORE_LEAVING = 2
"""Events the client reads of the abandoned stream before closing it."""


def answer_for(messages: list[dict[str, Any]]) -> str:
    """The fake's answer: what the tool said, after a tool result; else the last user text."""
    last = messages[-1]
    if last.get("role") == "tool":
        return f"The tool said: {last.get('content')}"
    said = [message for message in messages if message.get("role") == "user"][-1]
    content = said.get("content")
    text = content if isinstance(content, str) else "".join(p["text"] for p in content or [])
    return f"You said: {text}"


@function_tool
def order_status(order: str) -> str:
    """The shipping status of an order."""
    return ORDER_STATUS.replace("1234", order)


def shape(item: dict[str, Any]) -> tuple[str, ...]:
    """What a person reads in an item: a message's role and text, a call's name and
    arguments, an output's text."""
    kind = str(item.get("type", "message"))
    if kind == "message":
        return (kind, str(item.get("role")), text_of(item))
    if kind == "function_call":
        return (kind, str(item["name"]), str(item["arguments"]))
    if kind == "function_call_output":
        return (kind, str(item["output"]))
    return (kind,)


HELLO = ("message", "user", "Hello, I ordered a lamp.")
HELLO_ANSWER = ("message", "assistant", "You said: Hello, I ordered a lamp.")
WHERE = ("message", "user", "Where is order 1234?")
CALL = ("function_call", "order_status", '{"order": "1234"}')
OUTPUT = ("function_call_output", ORDER_STATUS)
STATUS_ANSWER = ("message", "assistant", f"The tool said: {ORDER_STATUS}")
THANKS = ("message", "user", "Thanks!")
THANKS_ANSWER = ("message", "assistant", "You said: Thanks!")
"""The agent's turns as `shape` reads them."""


def orders_agent(client: AsyncOpenAI) -> Agent[Any]:
    """The agent of these tests: its instructions, the fake's model through Precis, its tool."""
    return Agent(
        name="orders",
        instructions=INSTRUCTIONS,
        model=OpenAIResponsesModel(model=AGENT_MODEL, openai_client=client),
        tools=[order_status],
    )


async def logged(server_log: Path) -> str:
    """The server's log, for the message of a failed assertion."""
    return await asyncio.to_thread(server_log.read_text, errors="replace")


@pytest.fixture(scope="module")
def fake(keyed_service: KeyedService) -> FakeLLM:
    return keyed_service.fake


@pytest.fixture(autouse=True)
def fresh_fake(keyed_service: KeyedService) -> None:
    keyed_service.fake_for_module(responder=answer_for)


@pytest.fixture(scope="module")
def server_log(keyed_service: KeyedService) -> Path:
    return keyed_service.log


@pytest.fixture(scope="module")
def precis_url(keyed_service: KeyedService) -> str:
    """A Precis server on this backend's database whose `/v1/responses` calls the fake."""
    return keyed_service.url_allowing(AGENT_MODEL, STREAMED_MODEL)


@pytest.fixture
async def openai_client(precis_url: str) -> AsyncIterator[AsyncOpenAI]:
    client = AsyncOpenAI(
        base_url=f"{precis_url}/v1",
        api_key=TENANT_KEY,
        timeout=REQUEST_TIMEOUT_SECONDS,
        max_retries=0,
    )
    yield client
    await client.close()


async def conversation_items(client: AsyncOpenAI, conversation_id: str) -> list[dict[str, Any]]:
    """Every item of the conversation, oldest first, read through every page."""
    listed = client.conversations.items.list(conversation_id, order="asc")
    return [item.model_dump(mode="json", exclude_none=True) async for item in listed]


async def test_agent_turns_with_a_tool_are_kept_by_precis_in_order_each_once(
    openai_client: AsyncOpenAI, fake: FakeLLM, server_log: Path
) -> None:
    agent = orders_agent(openai_client)
    config = RunConfig(tracing_disabled=True)
    conversation = await openai_client.conversations.create()

    async def turn(text: str) -> str:
        result = await Runner.run(agent, text, conversation_id=conversation.id, run_config=config)
        return str(result.final_output)

    assert await turn("Hello, I ordered a lamp.") == "You said: Hello, I ordered a lamp.", (
        await logged(server_log)
    )
    fake.call_tool_next("order_status", '{"order": "1234"}')
    assert await turn("Where is order 1234?") == f"The tool said: {ORDER_STATUS}"
    assert await turn("Thanks!") == "You said: Thanks!"

    calls = turn_calls(fake)
    assert [[shape(item) for item in call.request["input"]] for call in calls] == [
        [HELLO],
        [HELLO, HELLO_ANSWER, WHERE],
        [HELLO, HELLO_ANSWER, WHERE, CALL, OUTPUT],
        [HELLO, HELLO_ANSWER, WHERE, CALL, OUTPUT, STATUS_ANSWER, THANKS],
    ]
    assert all(call.request["instructions"] == INSTRUCTIONS for call in calls)
    assert all(
        [tool["name"] for tool in call.request["tools"]] == ["order_status"] for call in calls
    )
    tool_turn = calls[2].request["input"]
    assert tool_turn[3]["call_id"] == tool_turn[4]["call_id"]

    items = await conversation_items(openai_client, conversation.id)
    assert [shape(item) for item in items] == [
        HELLO,
        HELLO_ANSWER,
        WHERE,
        CALL,
        OUTPUT,
        STATUS_ANSWER,
        THANKS,
        THANKS_ANSWER,
    ]
    assert items[3]["call_id"] == items[4]["call_id"] == tool_turn[3]["call_id"]
    assert len({item["id"] for item in items}) == len(items)


async def test_agent_turns_chained_by_previous_response_id_reach_the_model_whole(
    openai_client: AsyncOpenAI, fake: FakeLLM
) -> None:
    """The SDK's other way: each run names the last response and sends only what is new
    (`auto_previous_response_id` within a run, a tool's output after its call;
    `previous_response_id` across runs, one run streamed); Precis puts the chain's earlier
    turns before it."""
    agent = orders_agent(openai_client)
    config = RunConfig(tracing_disabled=True)
    fake.call_tool_next("order_status", '{"order": "1234"}')
    first = await Runner.run(
        agent, "Where is order 1234?", run_config=config, auto_previous_response_id=True
    )
    second = await Runner.run(
        agent, "Thanks!", run_config=config, previous_response_id=first.last_response_id
    )
    third = Runner.run_streamed(
        agent, "Bye.", run_config=config, previous_response_id=second.last_response_id
    )
    async for _ in third.stream_events():
        pass

    assert first.final_output == f"The tool said: {ORDER_STATUS}"
    assert second.final_output == "You said: Thanks!"
    assert third.final_output == "You said: Bye."
    bye = ("message", "user", "Bye.")
    calls = turn_calls(fake)
    assert [[shape(item) for item in call.request["input"]] for call in calls] == [
        [WHERE],
        [WHERE, CALL, OUTPUT],
        [WHERE, CALL, OUTPUT, STATUS_ANSWER, THANKS],
        [WHERE, CALL, OUTPUT, STATUS_ANSWER, THANKS, THANKS_ANSWER, bye],
    ]
    assert all(call.request["instructions"] == INSTRUCTIONS for call in calls)
    assert third.last_response_id is not None
    stored = await openai_client.responses.retrieve(third.last_response_id)
    assert stored.previous_response_id == second.last_response_id
    assert stored.output_text == "You said: Bye."
    # the SDK sent the last run's input alone: the rest came from Precis
    given = await openai_client.responses.input_items.list(third.last_response_id)
    assert [shape(item.model_dump(mode="json")) for item in given.data] == [bye]


async def stream_ended(fake: FakeLLM, seconds: float) -> bool:
    """Whether the fake's streamed answer ends within `seconds` (waited for)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        if fake.streams_ended:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_an_abandoned_stream_stores_nothing_and_the_next_turn_works(
    openai_client: AsyncOpenAI, fake: FakeLLM, server_log: Path
) -> None:
    fake.responder = None
    fake.mode = "long"
    fake.long_words = STREAM_WORDS
    fake.stream_delay_seconds = STREAM_DELAY_SECONDS
    conversation = await openai_client.conversations.create()

    stream = await openai_client.responses.create(
        model=STREAMED_MODEL,
        input="tell me a long story",
        conversation=conversation.id,
        stream=True,
    )
    read = []
    async for event in stream:
        read.append(event.type)
        if len(read) == EVENTS_READ_BEFORE_LEAVING:
            break
    await stream.close()
    assert read == ["response.created", "response.in_progress"]
    await stream_ended(fake, FULL_STREAM_SECONDS)
    await asyncio.sleep(SETTLE_SECONDS)
    assert await conversation_items(openai_client, conversation.id) == [], await logged(server_log)

    fake.stream_delay_seconds = 0.0
    fake.mode = "echo"
    answer = await openai_client.responses.create(
        model=STREAMED_MODEL, input="short, please", conversation=conversation.id
    )
    assert answer.output_text == "short, please"
    assert [shape(item) for item in await conversation_items(openai_client, conversation.id)] == [
        ("message", "user", "short, please"),
        ("message", "assistant", "short, please"),
    ]
