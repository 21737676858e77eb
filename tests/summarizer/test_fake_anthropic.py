"""The fake model server speaking Anthropic's Messages API: litellm's real `anthropic/` path and
the official `anthropic` client run against it, and every knob answers as on the chat path."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import anthropic
import litellm
from litellm.exceptions import (
    ContextWindowExceededError,
    InternalServerError,
    MidStreamFallbackError,
    RateLimitError,
    ServiceUnavailableError,
)

from tests.support.fake_llm import FakeLLM

litellm.suppress_debug_info = True

MODEL = "anthropic/claude-sonnet-4-5"
CLIENT_MODEL = "claude-sonnet-4-5"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}

PNG_DATA = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAE"
    "hQGAhKmMIQAAAABJRU5ErkJggg=="
)
"""A 1x1 PNG, base64."""


async def _complete(fake: FakeLLM, messages: list[dict[str, Any]], **options: Any) -> Any:
    options.setdefault("max_tokens", 200)
    return await litellm.acompletion(
        model=MODEL,
        messages=messages,
        api_base=fake.anthropic_base_url,
        api_key="test",
        num_retries=0,
        **options,
    )


def _client(fake: FakeLLM) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=fake.anthropic_base_url, api_key="test", max_retries=0)


# through litellm ----------------------------------------------------------------------------


async def test_litellm_posts_anthropics_shape_and_reads_the_answer(fake_llm: FakeLLM) -> None:
    fake_llm.mode = "echo"
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "tell me about the harbour"},
    ]
    answer = await _complete(fake_llm, messages)
    assert answer.choices[0].message.content == "tell me about the harbour"
    assert answer.choices[0].finish_reason == "stop"
    call = fake_llm.calls[-1]
    assert call.path == "/messages"
    assert call.request["system"] == [{"type": "text", "text": "Be brief."}]
    assert call.request["max_tokens"] == 200
    assert call.messages == messages
    assert call.headers["x-api-key"] == "test"
    assert call.headers["anthropic-version"]
    assert answer.usage.prompt_tokens == call.prompt_tokens
    assert answer.usage.completion_tokens == 5

    await litellm.acompletion(
        model="openai/fake", messages=messages, api_base=fake_llm.base_url, api_key="test"
    )
    assert fake_llm.calls[-1].prompt_tokens == call.prompt_tokens


async def test_the_openai_base_url_reaches_the_messages_endpoint_too(fake_llm: FakeLLM) -> None:
    fake_llm.mode = "echo"
    answer = await litellm.acompletion(
        model=MODEL,
        messages=[{"role": "user", "content": "hello"}],
        api_base=fake_llm.base_url,
        api_key="test",
        max_tokens=20,
    )
    assert answer.choices[0].message.content == "hello"
    assert fake_llm.calls[-1].path == "/messages"


async def test_litellm_streams_the_answer_in_several_deltas(fake_llm: FakeLLM) -> None:
    fake_llm.mode = "long"
    fake_llm.long_words = 6
    stream = await _complete(fake_llm, [{"role": "user", "content": "go on"}], stream=True)
    texts: list[str] = []
    finishes: list[str] = []
    async for chunk in stream:
        choice = chunk.choices[0]
        if choice.delta.content:
            texts.append(choice.delta.content)
        if choice.finish_reason:
            finishes.append(choice.finish_reason)
    assert len(texts) == 6
    assert "".join(texts) == fake_llm.calls[-1].answer
    assert finishes == ["stop"]


async def test_an_answer_cut_at_max_tokens_stops_with_max_tokens(fake_llm: FakeLLM) -> None:
    fake_llm.mode = "long"
    answer = await _complete(fake_llm, [{"role": "user", "content": "go on"}], max_tokens=5)
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage.completion_tokens == 5
    message = await _client(fake_llm).messages.create(
        model=CLIENT_MODEL, max_tokens=5, messages=[{"role": "user", "content": "go on"}]
    )
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 5


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_call_answer_becomes_tool_calls(fake_llm: FakeLLM, stream: bool) -> None:
    fake_llm.call_tool_next("get_weather", '{"city": "Łódź", "days": 3}')
    answer = await _complete(
        fake_llm,
        [{"role": "user", "content": "weather?"}],
        tools=[WEATHER_TOOL],
        tool_choice="auto",
        stream=stream,
    )
    if stream:
        name, arguments, finish = "", "", None
        async for chunk in answer:
            choice = chunk.choices[0]
            for call in choice.delta.tool_calls or []:
                name += call.function.name or ""
                arguments += call.function.arguments or ""
            finish = choice.finish_reason or finish
    else:
        (call,) = answer.choices[0].message.tool_calls
        name, arguments = call.function.name, call.function.arguments
        finish = answer.choices[0].finish_reason
    assert name == "get_weather"
    assert json.loads(arguments) == {"city": "Łódź", "days": 3}
    assert finish == "tool_calls"
    sent = fake_llm.calls[-1].request["tools"]
    assert sent[0]["name"] == "get_weather"
    assert sent[0]["input_schema"]["properties"] == {"city": {"type": "string"}}


async def test_a_tool_round_trip_reads_as_chat_tool_messages(fake_llm: FakeLLM) -> None:
    fake_llm.mode = "marker_echo"
    call = {
        "id": "toolu_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "MARKER-city"}'},
    }
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "weather? MARKER-question"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "rain, MARKER-rain"},
    ]
    answer = await _complete(fake_llm, messages, tools=[WEATHER_TOOL])
    received = fake_llm.calls[-1].messages
    # marker_echo reads contents, not a call's arguments, on either path
    assert answer.choices[0].message.content.splitlines() == ["MARKER-question", "MARKER-rain"]
    chat = await litellm.acompletion(
        model="openai/fake",
        messages=messages,
        tools=[WEATHER_TOOL],
        api_base=fake_llm.base_url,
        api_key="test",
    )
    assert chat.choices[0].message.content == answer.choices[0].message.content
    assert [message["role"] for message in received] == ["user", "assistant", "tool"]
    assert received[1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert json.loads(received[1]["tool_calls"][0]["function"]["arguments"]) == {
        "city": "MARKER-city"
    }
    assert received[2]["tool_call_id"] == "toolu_1"
    assert received[2]["content"] == "rain, MARKER-rain"


@pytest.mark.parametrize(
    ("max_tokens", "said"),
    [(5, "prompt is too long: "), (100, "input length and `max_tokens` exceed context limit")],
)
async def test_over_the_window_litellm_raises_context_window_exceeded(
    fake_llm: FakeLLM, max_tokens: int, said: str
) -> None:
    messages = [{"role": "user", "content": "word " * 40}]
    await _complete(fake_llm, messages, max_tokens=max_tokens)
    prompt_tokens = fake_llm.calls[-1].prompt_tokens
    fake_llm.context_window = prompt_tokens - 1 if max_tokens == 5 else prompt_tokens + 50
    with pytest.raises(ContextWindowExceededError) as raised:
        await _complete(fake_llm, messages, max_tokens=max_tokens)
    assert said in str(raised.value)
    if max_tokens == 5:
        expected = f"prompt is too long: {prompt_tokens} tokens > {prompt_tokens - 1} maximum"
        assert expected in str(raised.value)
    assert fake_llm.statuses()[-1] == 400


@pytest.mark.parametrize(
    ("status", "error", "kind"),
    [
        (529, InternalServerError, "overloaded_error"),
        (503, ServiceUnavailableError, "api_error"),
        (429, RateLimitError, "rate_limit_error"),
    ],
)
async def test_an_injected_failure_raises_litellms_error_for_it(
    fake_llm: FakeLLM, status: int, error: type[Exception], kind: str
) -> None:
    fake_llm.fail_next(status)
    with pytest.raises(error) as raised:
        await _complete(fake_llm, [{"role": "user", "content": "hi"}])
    assert kind in str(raised.value)
    assert fake_llm.statuses() == [status]
    if status == 529:
        assert getattr(raised.value, "provider_status_code", None) == 529
    fake_llm.mode = "echo"
    answer = await _complete(fake_llm, [{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "hi"


async def test_a_cut_stream_fails_in_litellm_and_ends_unfinished_in_the_client(
    fake_llm: FakeLLM,
) -> None:
    fake_llm.mode = "long"
    fake_llm.long_words = 20
    fake_llm.cut_next_stream(5)
    stream = await _complete(fake_llm, [{"role": "user", "content": "go on"}], stream=True)
    texts: list[str] = []
    with pytest.raises(MidStreamFallbackError, match="finish_reason"):
        async for chunk in stream:
            texts.append(chunk.choices[0].delta.content or "")
    assert "".join(texts) == "filler0 filler1 "

    fake_llm.cut_next_stream(5)
    async with _client(fake_llm).messages.stream(
        model=CLIENT_MODEL, max_tokens=100, messages=[{"role": "user", "content": "go on"}]
    ) as streamed:
        message = await streamed.get_final_message()
    assert message.stop_reason is None
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "filler0 filler1 "  # type: ignore[union-attr]


# through the anthropic client ---------------------------------------------------------------


async def test_the_client_create_reads_every_block_kind(fake_llm: FakeLLM) -> None:
    fake_llm.mode = "marker_echo"
    ephemeral: dict[str, Any] = {"type": "ephemeral"}
    image = {"type": "base64", "media_type": "image/png", "data": PNG_DATA}
    request: dict[str, Any] = dict(
        model=CLIENT_MODEL,
        max_tokens=100,
        system=[
            {"type": "text", "text": "rules MARKER-system", "cache_control": ephemeral},
            {"type": "text", "text": "more rules"},
        ],
        messages=[
            {"role": "user", "content": "look MARKER-question"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "MARKER-thought", "signature": "sig"},
                    {"type": "text", "text": "calling"},
                    {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {"at": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "seen MARKER-result"}],
                    },
                    {"type": "image", "source": image, "cache_control": ephemeral},
                    {"type": "text", "text": "and now?"},
                ],
            },
        ],
        tools=[
            {
                "name": "look",
                "input_schema": {"type": "object", "properties": {"at": {"type": "integer"}}},
                "cache_control": ephemeral,
            }
        ],
        tool_choice={"type": "auto"},
        metadata={"user_id": "someone"},
    )
    message = await _client(fake_llm).messages.create(**request)
    assert message.type == "message" and message.role == "assistant"
    assert message.model == CLIENT_MODEL
    assert message.id.startswith("msg_")
    assert message.stop_reason == "end_turn"
    assert message.content[0].type == "text"
    assert message.content[0].text.splitlines() == [
        "MARKER-system",
        "MARKER-question",
        "MARKER-result",
    ]
    call = fake_llm.calls[-1]
    assert call.messages == [
        {"role": "system", "content": "rules MARKER-system"},
        {"role": "system", "content": "more rules"},
        {"role": "user", "content": "look MARKER-question"},
        {
            "role": "assistant",
            "content": "calling",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "look", "arguments": '{"at": 1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "seen MARKER-result"},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_DATA}"}},
                {"type": "text", "text": "and now?"},
            ],
        },
    ]
    assert message.usage.input_tokens == call.prompt_tokens
    assert message.usage.cache_read_input_tokens == 0
    assert message.usage.cache_creation_input_tokens == 0


async def test_the_client_stream_sends_anthropics_events_in_order(fake_llm: FakeLLM) -> None:
    fake_llm.mode = "echo"
    stream = await _client(fake_llm).messages.create(
        model=CLIENT_MODEL,
        max_tokens=100,
        messages=[{"role": "user", "content": "one two three"}],
        stream=True,
    )
    kinds = [event.type async for event in stream]
    assert kinds == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]

    async with _client(fake_llm).messages.stream(
        model=CLIENT_MODEL, max_tokens=100, messages=[{"role": "user", "content": "one two three"}]
    ) as streamed:
        deltas = [text async for text in streamed.text_stream]
        message = await streamed.get_final_message()
    assert deltas == ["one ", "two ", "three"]
    assert message.content[0].type == "text"
    assert message.content[0].text == "one two three"
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == fake_llm.calls[-1].prompt_tokens
    assert message.usage.output_tokens == 3


async def test_the_client_stream_builds_a_tool_use_block(fake_llm: FakeLLM) -> None:
    fake_llm.call_tool_next("look", '{"at": [1, 2], "why": "to see"}')
    async with _client(fake_llm).messages.stream(
        model=CLIENT_MODEL,
        max_tokens=100,
        messages=[{"role": "user", "content": "look"}],
        tools=[{"name": "look", "input_schema": {"type": "object"}}],
    ) as streamed:
        message = await streamed.get_final_message()
    assert message.stop_reason == "tool_use"
    (block,) = message.content
    assert block.type == "tool_use"
    assert block.name == "look"
    assert block.input == {"at": [1, 2], "why": "to see"}
    assert block.id.startswith("toolu_")


async def test_the_stream_delay_spaces_the_events(fake_llm: FakeLLM) -> None:
    fake_llm.mode = "echo"
    fake_llm.stream_delay_seconds = 0.02
    started = time.monotonic()
    async with _client(fake_llm).messages.stream(
        model=CLIENT_MODEL, max_tokens=100, messages=[{"role": "user", "content": "a b"}]
    ) as streamed:
        message = await streamed.get_final_message()
    # 8 events (ping included), 7 gaps
    assert time.monotonic() - started >= 7 * 0.02
    assert message.content[0].type == "text" and message.content[0].text == "a b"


async def test_count_tokens_counts_as_the_window_check_and_takes_no_fault(
    fake_llm: FakeLLM,
) -> None:
    request: dict[str, Any] = {
        "model": CLIENT_MODEL,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "how many tokens is this?"}],
    }
    client = _client(fake_llm)
    fake_llm.fail_next(529)
    counted = await client.messages.count_tokens(**request)
    assert fake_llm.calls[-1].path == "/messages/count_tokens"
    assert counted.input_tokens == fake_llm.calls[-1].prompt_tokens
    with pytest.raises(anthropic.OverloadedError) as raised:
        await client.messages.create(max_tokens=50, **request)
    assert raised.value.status_code == 529
    assert raised.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }
    message = await client.messages.create(max_tokens=50, **request)
    assert message.usage.input_tokens == counted.input_tokens
    assert fake_llm.statuses() == [200, 529, 200]


async def test_the_client_reads_the_window_and_rate_limit_errors(fake_llm: FakeLLM) -> None:
    client = _client(fake_llm)
    fake_llm.context_window = 10
    with pytest.raises(anthropic.BadRequestError) as too_long:
        await client.messages.create(
            model=CLIENT_MODEL, max_tokens=1, messages=[{"role": "user", "content": "x " * 50}]
        )
    prompt_tokens = fake_llm.calls[-1].prompt_tokens
    assert too_long.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": f"prompt is too long: {prompt_tokens} tokens > 10 maximum",
        },
    }
    fake_llm.context_window = None
    fake_llm.fail_next(429, retry_after=7)
    with pytest.raises(anthropic.RateLimitError) as limited:
        await client.messages.create(
            model=CLIENT_MODEL, max_tokens=1, messages=[{"role": "user", "content": "x"}]
        )
    assert limited.value.response.headers["retry-after"] == "7"
    assert isinstance(limited.value.body, dict)
    assert limited.value.body["error"]["type"] == "rate_limit_error"
