"""`POST /v1/responses` through the official `openai` package: a conversation's context fitted
to the model's window, turns stored whole or not at all, streams relayed, overflow summarized
and retried, errors in OpenAI's shape (docs/design.md, "OpenAI Responses")."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import httpx2
import openai
import pytest
from fastapi import FastAPI
from openai import AsyncOpenAI
from prometheus_client import REGISTRY

from tests.helpers import text_of, turn_calls
from tests.support.fake_llm import (
    FakeLLM,
    recall_in_summaries_only,
    running_fake_llm,
)

UPSTREAM_KEY = "sk-upstream-secret-7f3a9c"
"""The server's key of the model: it must never reach a client, a log or the database."""

WINDOW = 3_000
"""The model's window as the server is told (MODEL_CONTEXT_TOKENS)."""

OUTPUT_TOKENS = 200
MODELS = ("openai/fake", "custom_openai/fake", "openai/gpt-4o")
"""`openai/fake`: Responses wire format; `custom_openai/fake`: sent as chat completions;
`openai/gpt-4o`: a model litellm streams for real (for `fake` it streams a whole answer)."""

WEATHER_TOOL: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeLLM]:
    with running_fake_llm() as fake:
        yield fake


@pytest.fixture(autouse=True)
def fresh_upstream(upstream: FakeLLM) -> None:
    upstream.reset()


@pytest.fixture(scope="module")
def module_settings(upstream: FakeLLM) -> dict[str, Any]:
    return {
        "summary_workers": 0,
        "model_allowed": ",".join(MODELS),
        "model_api_base": upstream.base_url,
        "model_api_key": UPSTREAM_KEY,
        "model_context_tokens": ",".join(f"{model}={WINDOW}" for model in MODELS),
        "summary_model": "openai/fake",
        "summary_api_base": upstream.base_url,
        "summary_api_key": "summarizer-key",
        "summary_model_context_tokens": WINDOW,
        "summary_keep_last_n": 2,
        "summary_message_limit": 10_000,
        "summary_max_context_tokens": 1_000_000,
    }


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[AsyncOpenAI]:
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield AsyncOpenAI(
            base_url="http://localhost/v1", api_key="dev", http_client=http, max_retries=0
        )


@pytest.fixture
async def api_client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield http


async def stored_items(api_client: httpx.AsyncClient, conversation: str) -> list[dict[str, Any]]:
    answer = await api_client.get(f"/v1/sessions/{conversation}/messages", params={"limit": 1000})
    assert answer.status_code == 200, answer.text
    return [message["item"] for message in answer.json()["messages"]]


async def test_a_turn_sends_the_context_then_the_input_and_stores_both(
    client: AsyncOpenAI, api_client: httpx.AsyncClient, upstream: FakeLLM
) -> None:
    upstream.mode = "marker_echo"
    conversation = await client.conversations.create(
        items=[{"type": "message", "role": "developer", "content": "MARKER-rules be brief"}]
    )
    first = await client.responses.create(
        model="openai/fake",
        input="MARKER-one hello",
        conversation=conversation.id,
        max_output_tokens=OUTPUT_TOKENS,
    )
    assert first.object == "response" and first.status == "completed"
    assert first.conversation is not None and first.conversation.id == conversation.id
    assert first.output_text == "MARKER-rules\nMARKER-one"
    second = await client.responses.create(
        model="openai/fake",
        input="MARKER-two again",
        conversation=conversation.id,
        instructions="MARKER-instructions",
        max_output_tokens=OUTPUT_TOKENS,
    )
    sent = turn_calls(upstream)[-1].request
    assert sent["instructions"] == "MARKER-instructions"
    assert [text_of(item) for item in sent["input"]] == [
        "MARKER-rules be brief",
        "MARKER-one hello",
        "MARKER-rules\nMARKER-one",
        "MARKER-two again",
    ]
    assert second.output_text == "MARKER-instructions\nMARKER-rules\nMARKER-one\nMARKER-two"
    stored = [text_of(item) for item in await stored_items(api_client, conversation.id)]
    assert stored == [
        "MARKER-rules be brief",
        "MARKER-one hello",
        "MARKER-rules\nMARKER-one",
        "MARKER-two again",
        second.output_text,
    ]
    listed = await client.conversations.items.list(conversation.id, order="asc")
    assert [item.id for item in listed.data][-1] == second.output[0].id


@pytest.mark.parametrize("model", ["openai/gpt-4o", "custom_openai/fake"])
async def test_a_streamed_turn_relays_the_events_and_stores_the_turn_once_complete(
    client: AsyncOpenAI, api_client: httpx.AsyncClient, upstream: FakeLLM, model: str
) -> None:
    upstream.mode = "long"
    upstream.long_words = 12
    conversation = await client.conversations.create()
    stream = await client.responses.create(
        model=model,
        input="tell me",
        conversation=conversation.id,
        stream=True,
        max_output_tokens=OUTPUT_TOKENS,
    )
    kinds: list[str] = []
    deltas: list[str] = []
    completed = None
    async for event in stream:
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        if event.type == "response.completed":
            completed = event.response
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert len(deltas) > 1, "the text arrives in pieces"
    assert completed is not None and completed.conversation is not None
    assert completed.conversation.id == conversation.id
    assert "".join(deltas) == completed.output_text
    stored = await stored_items(api_client, conversation.id)
    assert [text_of(item) for item in stored] == ["tell me", completed.output_text]


async def test_a_tool_call_round_trip_keeps_the_call_and_its_output_together(
    client: AsyncOpenAI, api_client: httpx.AsyncClient, upstream: FakeLLM
) -> None:
    conversation = await client.conversations.create()
    upstream.call_tool_next("get_weather", '{"city": "Łódź"}')
    asked = await client.responses.create(
        model="openai/fake",
        input="weather in Łódź?",
        conversation=conversation.id,
        tools=[WEATHER_TOOL],
        max_output_tokens=OUTPUT_TOKENS,
    )
    call = asked.output[0]
    assert call.type == "function_call" and call.name == "get_weather"
    answered = await client.responses.create(
        model="openai/fake",
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "rain, 12 °C"}],
        conversation=conversation.id,
        tools=[WEATHER_TOOL],
        max_output_tokens=OUTPUT_TOKENS,
    )
    assert answered.status == "completed"
    sent = turn_calls(upstream)[-1].request["input"]
    kinds = [item.get("type", "message") for item in sent]
    assert kinds == ["message", "function_call", "function_call_output"]
    assert sent[1]["call_id"] == sent[2]["call_id"] == call.call_id
    stored = await stored_items(api_client, conversation.id)
    assert [item.get("type", "message") for item in stored] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]


async def test_a_model_not_allowed_is_refused_before_anything_is_stored(
    client: AsyncOpenAI, api_client: httpx.AsyncClient, upstream: FakeLLM
) -> None:
    conversation = await client.conversations.create()
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(
            model="openai/other", input="hi", conversation=conversation.id
        )
    assert refused.value.status_code == 400
    assert refused.value.body["param"] == "model"  # type: ignore[index]
    assert upstream.calls == []
    assert await stored_items(api_client, conversation.id) == []


async def test_an_input_item_that_does_not_validate_is_named_with_its_code(
    client: AsyncOpenAI, upstream: FakeLLM
) -> None:
    wrong: Any = [{"role": "user", "content": 5}]
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(model="openai/fake", input=wrong)
    assert refused.value.param == "input[0]" and refused.value.code == "validation_failed"
    assert upstream.calls == []


@pytest.mark.parametrize("flag", ["stream", "background", "store"])
async def test_a_flag_that_is_not_a_boolean_is_refused_naming_it(
    client: AsyncOpenAI, api_client: httpx.AsyncClient, upstream: FakeLLM, flag: str
) -> None:
    conversation = await client.conversations.create()
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(
            model="openai/fake", input="hi", conversation=conversation.id, extra_body={flag: "yes"}
        )
    assert refused.value.body["param"] == flag  # type: ignore[index]
    assert "boolean" in str(refused.value)
    assert upstream.calls == []
    assert await stored_items(api_client, conversation.id) == []


@pytest.mark.parametrize(
    ("parameter", "value"),
    [("previous_response_id", "resp_123"), ("store", False)],
)
async def test_state_features_of_openai_are_refused_naming_the_parameter(
    client: AsyncOpenAI, upstream: FakeLLM, parameter: str, value: Any
) -> None:
    conversation = await client.conversations.create()
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(
            model="openai/fake",
            input="hi",
            conversation=conversation.id,
            extra_body={parameter: value},
        )
    assert refused.value.body["param"] == parameter  # type: ignore[index]
    assert upstream.calls == []


@pytest.mark.parametrize(
    ("status", "error", "client_status"),
    [
        (429, openai.RateLimitError, 429),
        (500, openai.InternalServerError, 502),
        (503, openai.InternalServerError, 502),
    ],
)
async def test_a_failed_model_call_answers_an_openai_error_and_stores_nothing(
    client: AsyncOpenAI,
    api_client: httpx.AsyncClient,
    upstream: FakeLLM,
    status: int,
    error: type[openai.APIStatusError],
    client_status: int,
) -> None:
    conversation = await client.conversations.create()
    upstream.fail_next(status)
    with pytest.raises(error) as failed:
        await client.responses.create(model="openai/fake", input="hi", conversation=conversation.id)
    assert failed.value.status_code == client_status
    assert UPSTREAM_KEY not in str(failed.value.body) and UPSTREAM_KEY not in failed.value.message
    assert await stored_items(api_client, conversation.id) == []


async def test_a_stream_cut_by_the_model_ends_in_an_error_event_and_stores_nothing(
    client: AsyncOpenAI, api_client: httpx.AsyncClient, upstream: FakeLLM
) -> None:
    upstream.mode = "long"
    conversation = await client.conversations.create()
    upstream.cut_next_stream(5)
    stream = await client.responses.create(
        model="openai/gpt-4o", input="tell me", conversation=conversation.id, stream=True
    )
    kinds: list[str] = []
    with pytest.raises(openai.APIError):
        async for event in stream:
            kinds.append(event.type)
    assert "response.completed" not in kinds
    assert await stored_items(api_client, conversation.id) == []


async def test_with_store_false_the_request_passes_through_and_nothing_is_stored(
    client: AsyncOpenAI, api_client: httpx.AsyncClient, upstream: FakeLLM
) -> None:
    upstream.mode = "echo"
    before = (await api_client.get("/v1/sessions", params={"limit": 1000})).json()
    answer = await client.responses.create(
        model="openai/fake", input="just this", instructions="plain", temperature=0.1, store=False
    )
    assert answer.output_text == "just this"
    assert answer.id.startswith("resp_") and len(answer.id) == len("resp_") + 48
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(answer.id)
    sent = turn_calls(upstream)[-1].request
    assert sent["input"] == "just this" and sent["temperature"] == 0.1
    after = (await api_client.get("/v1/sessions", params={"limit": 1000})).json()
    assert after == before


async def test_context_management_compaction_sets_the_conversations_proactive_threshold(
    client: AsyncOpenAI, api_client: httpx.AsyncClient
) -> None:
    conversation = await client.conversations.create()
    await client.responses.create(
        model="openai/fake",
        input="hi",
        conversation=conversation.id,
        extra_body={"context_management": [{"type": "compaction", "compact_threshold": 1234}]},
    )
    session = (await api_client.get(f"/v1/sessions/{conversation.id}")).json()
    assert session["effective_settings"]["max_context_tokens"] == 1234


def filler(turn: int, words: int = 120) -> str:
    return " ".join(f"word{(turn * 13 + index) % 89}" for index in range(words))


async def test_a_conversation_past_the_window_sends_prefix_summaries_and_tail_within_it(
    client: AsyncOpenAI, api_client: httpx.AsyncClient, upstream: FakeLLM
) -> None:
    upstream.responder = recall_in_summaries_only
    upstream.context_window = WINDOW
    conversation = await client.conversations.create(
        items=[{"type": "message", "role": "developer", "content": "MARKER-pinned rules"}]
    )
    facts = ["MARKER-pinned"]
    for turn in range(30):
        facts.append(f"MARKER-fact{turn}")
        await client.responses.create(
            model="openai/fake",
            conversation=conversation.id,
            input=f"{facts[-1]} {filler(turn)}",
            max_output_tokens=OUTPUT_TOKENS,
        )
        sent = turn_calls(upstream)[-1]
        assert sent.status == 200
        assert sent.prompt_tokens + OUTPUT_TOKENS <= WINDOW
        text = json.dumps(sent.request["input"])
        assert [fact for fact in facts if fact not in text] == []
    stored = await stored_items(api_client, conversation.id)
    assert len(stored) == 1 + 2 * 30, "every turn stored whole"
    last = turn_calls(upstream)[-1].request["input"]
    assert text_of(last[0]) == "MARKER-pinned rules"
    assert last[1]["role"] == "developer" and "MARKER-fact0" in text_of(last[1])
    assert len(last) < len(stored), "older turns reach the model as summaries"
    assert all(call.status == 200 for call in upstream.calls)
    summaries = (await api_client.get(f"/v1/sessions/{conversation.id}/summaries")).json()
    assert summaries["summaries"], "the conversation was summarized"
    assert UPSTREAM_KEY not in json.dumps(summaries)


async def test_a_model_refusing_the_context_gets_it_summarized_and_the_turn_retried_once(
    client: AsyncOpenAI, api_client: httpx.AsyncClient, upstream: FakeLLM
) -> None:
    upstream.responder = recall_in_summaries_only
    conversation = await client.conversations.create()
    for turn in range(8):
        await client.responses.create(
            model="openai/fake",
            conversation=conversation.id,
            input=f"MARKER-early{turn} {filler(turn)}",
            max_output_tokens=OUTPUT_TOKENS,
        )
    upstream.context_window = 1_200  # smaller than the server was told (MODEL_CONTEXT_TOKENS)
    raw = await client.responses.with_raw_response.create(
        model="openai/fake",
        conversation=conversation.id,
        input="MARKER-now what next?",
        max_output_tokens=OUTPUT_TOKENS,
    )
    answer = raw.parse()
    assert answer.status == "completed"
    refused, retried = turn_calls(upstream)[-2:]
    assert (refused.status, retried.status) == (400, 200)
    assert retried.request["input"][-1] == {
        "type": "message",
        "role": "user",
        "content": "MARKER-now what next?",
    }, "the new input stays verbatim"
    summary_id = raw.headers["x-precis-overflow-retry"]
    summary = (await api_client.get(f"/v1/summaries/{summary_id}")).json()
    assert summary["metadata"]["trigger"] == "overflow_retry"
    assert all(f"MARKER-early{turn}" in json.dumps(retried.request["input"]) for turn in range(8))
    stored = await stored_items(api_client, conversation.id)
    assert text_of(stored[-2]) == "MARKER-now what next?" and len(stored) == 18


def responses_counted(outcome: str, overflow_retry: str = "no") -> float:
    value = REGISTRY.get_sample_value(
        "precis_responses_total", {"outcome": outcome, "overflow_retry": overflow_retry}
    )
    return value or 0.0


async def test_turns_are_counted_by_outcome(client: AsyncOpenAI, upstream: FakeLLM) -> None:
    conversation = await client.conversations.create()
    stored, failed = responses_counted("stored"), responses_counted("model_failed")
    await client.responses.create(model="openai/fake", input="hi", conversation=conversation.id)
    upstream.fail_next(500)
    with pytest.raises(openai.InternalServerError):
        await client.responses.create(model="openai/fake", input="hi", conversation=conversation.id)
    assert responses_counted("stored") == stored + 1
    assert responses_counted("model_failed") == failed + 1


async def test_an_unknown_conversation_is_404_and_a_malformed_id_400(
    client: AsyncOpenAI, upstream: FakeLLM
) -> None:
    with pytest.raises(openai.NotFoundError) as unknown:
        await client.responses.create(model="openai/fake", input="hi", conversation="conv_nothere")
    assert unknown.value.body["code"] == "conversation_not_found"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as malformed:
        await client.responses.create(model="openai/fake", input="hi", conversation="chat-42")
    assert malformed.value.body["param"] == "conversation"  # type: ignore[index]
    assert upstream.calls == []


async def test_the_models_key_never_reaches_a_log(
    client: AsyncOpenAI, upstream: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    conversation = await client.conversations.create()
    await client.responses.create(model="openai/fake", input="hi", conversation=conversation.id)
    upstream.fail_next(401)
    with pytest.raises(openai.APIStatusError):
        await client.responses.create(model="openai/fake", input="hi", conversation=conversation.id)
    assert upstream.calls[-1].status == 401, "the failing call reached the model"
    assert caplog.records, "something was logged"
    assert UPSTREAM_KEY not in caplog.text


async def test_a_conversation_that_clears_old_tool_outputs_sends_them_as_placeholders(
    client: AsyncOpenAI, api_client: httpx.AsyncClient, upstream: FakeLLM
) -> None:
    """Context editing reaches the model through the Responses API: old outputs go as
    placeholders in their places, the newest as stored, every call with its output."""
    outputs = [" ".join(f"out{turn}-fact-{n}" for n in range(150)) for turn in range(4)]
    items: list[Any] = []
    for turn, output in enumerate(outputs):
        items += [
            {"type": "function_call", "call_id": f"c{turn}", "name": "grep", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{turn}", "output": output},
        ]
    conversation = await client.conversations.create(items=items)
    settings = {"clear_tool_results_trigger_tokens": 500, "clear_tool_results_keep": 1}
    patched = await api_client.patch(f"/v1/sessions/{conversation.id}", json={"settings": settings})
    assert patched.status_code == 200, patched.text
    await client.responses.create(
        model="openai/fake", input="what did grep find?", conversation=conversation.id
    )
    sent = turn_calls(upstream)[-1].request["input"]
    sent_outputs = [item["output"] for item in sent if item.get("type") == "function_call_output"]
    assert len(sent_outputs) == 4
    assert all(text.startswith("[Result of grep cleared") for text in sent_outputs[:3])
    assert sent_outputs[3] == outputs[3]
    assert [item.get("call_id") for item in sent if item.get("call_id")] == [
        "c0",
        "c0",
        "c1",
        "c1",
        "c2",
        "c2",
        "c3",
        "c3",
    ]
    assert [
        item["output"] for item in (await stored_items(api_client, conversation.id))[1:8:2]
    ] == outputs
