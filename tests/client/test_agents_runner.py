"""An Agents SDK conversation over several turns kept by `PrecisSession`, on a server that
summarizes early (both databases): tool calls stay paired, and after summarization the
summary heads the history and still holds an early fact.

The model is scripted (the SDK's `Model` interface answering canned responses): no network.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import pytest
from agents import Agent, Model, ModelResponse, RunConfig, Runner, function_tool
from agents.items import TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from precis_client import PrecisClient
from precis_client.agents import PrecisSession

MARKER = "periwinkle"
"""Said once, in the first turn; no reply repeats it."""


@pytest.fixture(scope="module")
def service_settings() -> dict[str, str]:
    """Summarize once more than 6 messages wait, keeping the newest 2, with the offline model."""
    return {
        "SUMMARY_WORKERS": "1",
        "SUMMARY_MODEL": "local",
        "SUMMARY_MESSAGE_LIMIT": "6",
        "SUMMARY_KEEP_LAST_N": "2",
    }


def reply(text: str) -> list[TResponseOutputItem]:
    part = ResponseOutputText(type="output_text", text=text, annotations=[])
    return [
        ResponseOutputMessage(
            id=f"msg_{abs(hash(text))}",
            type="message",
            role="assistant",
            status="completed",
            content=[part],
        )
    ]


def tool_call(call_id: str, name: str, arguments: str) -> list[TResponseOutputItem]:
    call = ResponseFunctionToolCall(
        id=f"fc_{call_id}",
        type="function_call",
        call_id=call_id,
        name=name,
        arguments=arguments,
        status="completed",
    )
    return [call]


class ScriptedModel(Model):
    """Answers its replies in order and records every input it was given."""

    def __init__(self, replies: Sequence[list[TResponseOutputItem]]) -> None:
        self.replies = list(replies)
        self.inputs: list[list[TResponseInputItem]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: Any,
        tools: Any,
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        given = [cast(TResponseInputItem, {"role": "user", "content": input})]
        self.inputs.append(given if isinstance(input, str) else list(input))
        return ModelResponse(output=self.replies.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the conversation is not streamed")


@function_tool
def order_status(order: str) -> str:
    """The shipping status of an order."""
    return f"Order {order}: shipped on Monday"


TURNS: list[tuple[str, list[list[TResponseOutputItem]]]] = [
    (
        f"Hello, I am Ada. My code word is {MARKER}. Where is my order 1234?",
        [
            tool_call("call_1", "order_status", '{"order": "1234"}'),
            reply("Your order 1234 shipped on Monday."),
        ],
    ),
    *(
        (f"How long does shipping take to city number {n}?", [reply(f"About {n} days.")])
        for n in range(2, 7)
    ),
]


def paired(items: list[TResponseInputItem]) -> bool:
    """Every function_call_output follows the function_call of its call_id."""
    calls_seen: set[Any] = set()
    for item in items:
        kind, call_id = item.get("type"), cast(dict[str, Any], item).get("call_id")
        if kind == "function_call":
            calls_seen.add(call_id)
        elif kind == "function_call_output" and call_id not in calls_seen:
            return False
    return True


def wait_for_summaries(precis: PrecisClient, sid: str, timeout_s: float = 30.0) -> None:
    """Until the background summarizer has made a summary and has nothing more pending."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        loaded = precis.history(sid)
        if loaded["summaries"] and not loaded["summarization_pending"]:
            return
        time.sleep(0.1)
    raise AssertionError("no summary was made in time")


async def test_a_conversation_keeps_tool_calls_paired_and_its_facts_after_summarization(
    service_url: str, precis: PrecisClient, sid: str
) -> None:
    model = ScriptedModel([answer for _, answers in TURNS for answer in answers])
    agent = Agent(name="support", instructions="Help.", model=model, tools=[order_status])
    session = PrecisSession(sid, base_url=service_url)
    config = RunConfig(tracing_disabled=True)

    first_input, _ = TURNS[0]
    result = await Runner.run(agent, first_input, session=session, run_config=config)
    assert result.final_output == "Your order 1234 shipped on Monday."
    first_turn = await session.get_items()
    assert [(i.get("type"), i.get("role")) for i in first_turn] == [
        (None, "user"),
        ("function_call", None),
        ("function_call_output", None),
        ("message", "assistant"),
    ]
    assert cast(dict[str, Any], first_turn[2])["output"] == "Order 1234: shipped on Monday"

    for text, _ in TURNS[1:]:
        await Runner.run(agent, text, session=session, run_config=config)
    wait_for_summaries(precis, sid)

    items = await session.get_items()
    assert paired(items)
    assert all(paired(given) for given in model.inputs)
    outputs_sent = [
        i for given in model.inputs for i in given if i.get("type") == "function_call_output"
    ]
    assert outputs_sent  # the pairing above was checked on inputs that held a tool exchange
    head = cast(dict[str, Any], items[0])
    assert (head["type"], head["role"]) == ("message", "developer")
    assert head["content"].startswith("Summary of earlier conversation")
    summaries = [
        cast(dict[str, Any], item)["content"] for item in items if item.get("role") == "developer"
    ]
    assert any(MARKER in summary for summary in summaries), summaries
    assert not any(MARKER in str(item) for item in items if item.get("role") != "developer")
    assert cast(dict[str, Any], items[-1])["content"][0]["text"] == "About 6 days."

    # The next turn reaches the model as the summarized history plus its input.
    model.replies.append(reply("You are welcome."))
    await Runner.run(agent, "Thanks!", session=session, run_config=config)
    last_input = model.inputs[-1]
    assert last_input[: len(items)] == items
    assert last_input[-1] == {"role": "user", "content": "Thanks!"}
