"""The translations between Anthropic's Messages API and OpenAI chat shapes
(`api/compat/anthropic_shapes.py`, `api/compat/anthropic_stream.py`), checked against the
official `openai` and `anthropic` packages' own types and stream accumulator."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from typing import Any, get_type_hints

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from anthropic.types.shared import ErrorResponse
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionAssistantMessageParam,
    ChatCompletionChunk,
    ChatCompletionFunctionToolParam,
    ChatCompletionSystemMessageParam,
    ChatCompletionToolChoiceOptionParam,
    ChatCompletionToolMessageParam,
    ChatCompletionUserMessageParam,
)
from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming
from pydantic import TypeAdapter

from api.compat.anthropic_shapes import (
    anthropic_message,
    assistant_chat_message,
    completion_params,
    error_body,
    request_messages,
    request_tool_choice,
    request_tools,
)
from api.compat.anthropic_stream import AnthropicStream, sse_event
from api.schemas.messages import MessageIn

OPENAI_MESSAGE_TYPES: dict[str, Any] = {
    "system": ChatCompletionSystemMessageParam,
    "user": ChatCompletionUserMessageParam,
    "assistant": ChatCompletionAssistantMessageParam,
    "tool": ChatCompletionToolMessageParam,
}
STORED_MESSAGE = TypeAdapter(MessageIn)
STREAM_EVENT: TypeAdapter[RawMessageStreamEvent] = TypeAdapter(RawMessageStreamEvent)

COMPLETION_ID = "chatcmpl-9Fx2-aB"
PNG = "iVBORw0KGgo="


def _materialized(value: Any) -> Any:
    """A validated TypedDict with its lazily validated iterables run (pydantic checks an
    `Iterable` field's items only when it is iterated)."""
    if isinstance(value, dict):
        return {key: _materialized(item) for key, item in value.items()}
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return [_materialized(item) for item in value]


def assert_openai_messages(messages: list[dict[str, Any]]) -> None:
    """Each message is exactly an OpenAI chat message param (no key dropped by validation)
    and a message Precis stores."""
    for message in messages:
        adapter: TypeAdapter[Any] = TypeAdapter(OPENAI_MESSAGE_TYPES[message["role"]])
        assert _materialized(adapter.validate_python(message)) == message
        STORED_MESSAGE.validate_python(message)


def completion(
    content: str | None = None,
    calls: Iterable[tuple[str, str, str]] = (),
    finish_reason: str = "stop",
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An OpenAI chat.completion as the openai package dumps it."""
    tool_calls = [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        for call_id, name, arguments in calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    value = {
        "id": COMPLETION_ID,
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage or {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
    }
    return ChatCompletion.model_validate(value).model_dump()


def chunk(
    delta: dict[str, Any] | None = None,
    finish_reason: str | None = None,
    usage: dict[str, Any] | None = None,
    choices: bool = True,
) -> dict[str, Any]:
    """An OpenAI chat.completion.chunk as the openai package dumps it."""
    value: dict[str, Any] = {
        "id": COMPLETION_ID,
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason}]
        if choices
        else [],
    }
    if usage is not None:
        value["usage"] = usage
    return ChatCompletionChunk.model_validate(value).model_dump()


def test_a_string_system_leads_and_a_list_one_is_joined_by_a_blank_line() -> None:
    turn = [{"role": "user", "content": "hi"}]
    assert request_messages({"system": "Be brief.", "messages": turn})[0] == {
        "role": "system",
        "content": "Be brief.",
    }
    blocks = [
        {"type": "text", "text": "Rules.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "A document."},
    ]
    messages = request_messages({"system": blocks, "messages": turn})
    assert messages == [
        {"role": "system", "content": "Rules.\n\nA document."},
        {"role": "user", "content": "hi"},
    ]
    assert_openai_messages(messages)
    empty: object
    for empty in (None, "", []):
        assert request_messages({"system": empty, "messages": turn}) == turn


def test_user_content_a_single_text_block_is_a_string_images_are_parts() -> None:
    body = {
        "messages": [
            {"role": "user", "content": "plain"},
            {"role": "user", "content": [{"type": "text", "text": "one block"}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Compare:", "cache_control": {"type": "ephemeral"}},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://x.test/a.jpg"}},
                ],
            },
        ]
    }
    messages = request_messages(body)
    assert messages == [
        {"role": "user", "content": "plain"},
        {"role": "user", "content": "one block"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Compare:"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "image_url", "image_url": {"url": "https://x.test/a.jpg"}},
            ],
        },
    ]
    assert_openai_messages(messages)


def test_tool_results_come_before_the_rest_of_their_user_turn() -> None:
    body = {
        "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Two calls.", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "Checking "},
                    {"type": "text", "text": "both."},
                    {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "t2", "name": "weather", "input": {"z": 1, "a": 2}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Here:"},
                    {"type": "tool_result", "tool_use_id": "t1", "content": "sunny"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "t2",
                        "is_error": True,
                        "content": [
                            {"type": "text", "text": "no station"},
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": PNG,
                                },
                            },
                        ],
                    },
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t3"}]},
        ]
    }
    messages = request_messages(body)
    assert messages[1:] == [
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "t2",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"a":2,"z":1}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "t2", "content": "Error: no station\n\n[image]"},
        {"role": "user", "content": "Here:"},
        {"role": "tool", "tool_call_id": "t3", "content": ""},
    ]
    assert_openai_messages(messages)


def test_an_assistant_turn_of_tool_calls_only_has_null_content() -> None:
    turn = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t1", "name": "now", "input": {}}],
    }
    [message] = request_messages({"messages": [turn]})
    assert message["content"] is None
    assert message["tool_calls"][0]["function"]["arguments"] == "{}"
    assert_openai_messages([message])


@pytest.mark.parametrize(
    ("body", "where", "kind"),
    [
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "read"},
                            {"type": "document", "source": {}},
                        ],
                    }
                ]
            },
            "messages[0].content[1]",
            "'document'",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "assistant", "content": [{"type": "server_tool_use"}]},
                ]
            },
            "messages[1].content[0]",
            "'server_tool_use'",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "tool_use"}]}]},
            "messages[0].content[0]",
            "'tool_use'",
        ),
        (
            {"system": [{"type": "image"}], "messages": []},
            "system[0]",
            "'image'",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t",
                                "content": [{"type": "search_result"}],
                            }
                        ],
                    }
                ]
            },
            "messages[0].content[0].content[0]",
            "'search_result'",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}],
                    }
                ]
            },
            "messages[0].content[0].source",
            "'file'",
        ),
        (
            {"messages": [{"role": "tool", "content": "x"}]},
            "messages[0].role",
            "'tool'",
        ),
        (
            {"messages": [{"role": "user", "content": []}]},
            "messages[0].content",
            "at least one",
        ),
    ],
)
def test_what_has_no_openai_shape_raises_naming_where_and_what(
    body: dict[str, Any], where: str, kind: str
) -> None:
    with pytest.raises(ValueError, match="^" + where.replace("[", r"\[").replace("]", r"\]")) as e:
        request_messages(body)
    assert kind in str(e.value)


def test_tools_and_tool_choice_are_openai_functions() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tools = request_tools(
        [
            {"name": "weather", "description": "Weather now.", "input_schema": schema},
            {"type": "custom", "name": "now", "input_schema": {"type": "object"}},
        ]
    )
    assert tools == [
        {
            "type": "function",
            "function": {"name": "weather", "description": "Weather now.", "parameters": schema},
        },
        {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}},
    ]
    tool_adapter = TypeAdapter(ChatCompletionFunctionToolParam)
    assert [tool_adapter.validate_python(tool) for tool in tools] == tools
    assert request_tools(None) is None
    assert request_tools([]) is None

    choices = {
        "auto": request_tool_choice({"type": "auto"}),
        "any": request_tool_choice({"type": "any", "disable_parallel_tool_use": True}),
        "none": request_tool_choice({"type": "none"}),
        "tool": request_tool_choice({"type": "tool", "name": "weather"}),
    }
    assert choices == {
        "auto": "auto",
        "any": "required",
        "none": "none",
        "tool": {"type": "function", "function": {"name": "weather"}},
    }
    choice_adapter: TypeAdapter[Any] = TypeAdapter(ChatCompletionToolChoiceOptionParam)
    for choice in choices.values():
        assert choice_adapter.validate_python(choice) == choice
    assert request_tool_choice(None) is None
    with pytest.raises(ValueError, match="tool_choice"):
        request_tool_choice({"type": "sometimes"})


def test_a_server_tool_raises_naming_it() -> None:
    tools = [
        {"name": "weather", "input_schema": {"type": "object"}},
        {"type": "web_search_20250305", "name": "web_search"},
    ]
    with pytest.raises(ValueError, match=r"^tools\[1\]") as e:
        request_tools(tools)
    assert "'web_search'" in str(e.value)
    assert "'web_search_20250305'" in str(e.value)


def test_completion_params_translate_the_request() -> None:
    body = {
        "model": "claude-x",
        "max_tokens": 256,
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 40,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "u-1"},
        "tools": [{"name": "now", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "stream": True,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": "hi"}],
    }
    params = completion_params(body)
    assert params == {
        "max_tokens": 256,
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 40,
        "stop": ["END"],
        "user": "u-1",
        "tools": [
            {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}
        ],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    known = set(get_type_hints(CompletionCreateParamsStreaming))
    # top_k is not OpenAI's: litellm passes it to the providers that take it
    assert set(params) - {"top_k"} <= known
    request = {"model": "m", "messages": request_messages(body), **params}
    assert TypeAdapter(CompletionCreateParamsStreaming).validate_python(request)["stream"] is True

    plain = completion_params({"max_tokens": 10, "messages": [], "temperature": None})
    assert plain == {"max_tokens": 10, "stream": False}


def test_a_completion_is_an_anthropic_message() -> None:
    reply = completion(
        "Let me look.",
        [("call_1", "weather", '{"city":"Paris"}'), ("call_2", "now", "")],
        "tool_calls",
        {
            "prompt_tokens": 120,
            "completion_tokens": 30,
            "total_tokens": 150,
            "prompt_tokens_details": {"cached_tokens": 80},
        },
    )
    message = anthropic_message(reply, "claude-x")
    assert message == {
        "id": "msg_9Fx2aB",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "call_2", "name": "now", "input": {}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 40,
            "output_tokens": 30,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 80,
        },
    }
    assert Message.model_validate(message).to_dict() == message


def test_litellm_cache_usage_and_odd_arguments() -> None:
    reply = completion("", [("call_1", "f", "{not json"), ("call_2", "g", "[1]")], "stop")
    reply["usage"] = {
        "prompt_tokens": 1000,
        "completion_tokens": 5,
        "total_tokens": 1005,
        "cache_creation_input_tokens": 600,
        "cache_read_input_tokens": 300,
        "prompt_tokens_details": {"cached_tokens": 300, "cache_write_tokens": 600},
    }
    reply["id"] = "msg_01AbC"
    message = anthropic_message(reply, "claude-x")
    assert message["id"] == "msg_01AbC"
    assert [block["input"] for block in message["content"]] == [
        {"_raw": "{not json"},
        {"_raw": "[1]"},
    ]
    assert message["stop_reason"] == "tool_use"  # calls, though the provider said `stop`
    assert message["usage"] == {
        "input_tokens": 100,
        "output_tokens": 5,
        "cache_creation_input_tokens": 600,
        "cache_read_input_tokens": 300,
    }
    Message.model_validate(message)


@pytest.mark.parametrize(
    ("finish_reason", "with_calls", "stop_reason"),
    [
        ("stop", False, "end_turn"),
        ("length", False, "max_tokens"),
        ("length", True, "max_tokens"),
        ("tool_calls", True, "tool_use"),
        ("function_call", False, "tool_use"),
        ("content_filter", False, "refusal"),
        ("something_new", False, "end_turn"),
    ],
)
def test_stop_reasons(finish_reason: str, with_calls: bool, stop_reason: str) -> None:
    calls = [("c", "f", "{}")] if with_calls else []
    reply = completion("ok", calls)
    reply["choices"][0]["finish_reason"] = finish_reason
    assert anthropic_message(reply, "m")["stop_reason"] == stop_reason


def test_a_completion_without_an_id_gets_a_new_one() -> None:
    reply = completion("ok")
    reply["id"] = ""
    first, second = anthropic_message(reply, "m")["id"], anthropic_message(reply, "m")["id"]
    assert first.startswith("msg_") and len(first) > len("msg_")
    assert first != second


ROUND_TRIPS = {
    "text only": completion("Hello there."),
    "tools only": completion(None, [("call_a", "lookup", '{"q":"x"}')], "tool_calls"),
    "text and several tools": completion(
        "Two lookups.",
        [("call_a", "lookup", '{"q":"x"}'), ("call_b", "lookup", '{"q":"y"}'), ("c", "now", "")],
        "tool_calls",
    ),
    "unordered input keys": completion(
        None, [("call_a", "put", '{"zeta":1,"alpha":{"y":2,"b":3},"mid":[3,1]}')], "tool_calls"
    ),
}


@pytest.mark.parametrize("reply", ROUND_TRIPS.values(), ids=ROUND_TRIPS.keys())
def test_a_stored_reply_equals_the_same_reply_resent(reply: dict[str, Any]) -> None:
    message = anthropic_message(reply, "claude-x")
    stored = assistant_chat_message(message)
    resent_content = json.loads(json.dumps(message["content"]))  # as a client sends it back
    sdk_content = Message.model_validate(message).model_dump(exclude_none=True)["content"]
    for content in (resent_content, sdk_content):
        [resent] = request_messages({"messages": [{"role": "assistant", "content": content}]})
        assert stored == resent
    openai_message = reply["choices"][0]["message"]
    assert stored["content"] == openai_message["content"]
    calls = openai_message.get("tool_calls") or []
    assert [call["id"] for call in stored.get("tool_calls", [])] == [call["id"] for call in calls]
    for call in stored.get("tool_calls", []):
        arguments = call["function"]["arguments"]
        assert arguments == json.dumps(json.loads(arguments), separators=(",", ":"), sort_keys=True)
    assert_openai_messages([stored])


def _accumulated(events: list[dict[str, Any]]) -> Message:
    """The Message the anthropic SDK's own stream accumulator builds from the events."""
    snapshot = None
    buffers: dict[int, bytes] = {}
    for event in events:
        STREAM_EVENT.validate_python(event)
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=buffers)  # type: ignore[arg-type]
    assert snapshot is not None
    return Message.model_validate(snapshot.to_dict())


TOOL_STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Let me "}),
    chunk({"content": "check."}),
    chunk(
        {
            "tool_calls": [
                {"index": 0, "id": "call_1", "type": "function", "function": {"name": "weather"}}
            ]
        }
    ),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 1,
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "now", "arguments": ""},
                }
            ]
        }
    ),
    chunk(finish_reason="tool_calls"),
    chunk(
        usage={
            "prompt_tokens": 50,
            "completion_tokens": 9,
            "total_tokens": 59,
            "prompt_tokens_details": {"cached_tokens": 20},
        },
        choices=False,
    ),
]


def test_a_streamed_reply_gives_the_message_of_the_same_completion() -> None:
    stream = AnthropicStream("claude-x", input_tokens=33)
    events = [event for piece in TOOL_STREAM for event in stream.feed(piece)] + stream.finish()
    assert [(event["type"], event.get("index")) for event in events] == [
        ("message_start", None),
        ("content_block_start", 0),
        ("content_block_delta", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("content_block_start", 1),
        ("content_block_delta", 1),
        ("content_block_delta", 1),
        ("content_block_stop", 1),
        ("content_block_start", 2),
        ("content_block_stop", 2),
        ("message_delta", None),
        ("message_stop", None),
    ]
    assert events[0]["message"]["usage"]["input_tokens"] == 33
    assert events[5]["content_block"] == {
        "type": "tool_use",
        "id": "call_1",
        "name": "weather",
        "input": {},
    }
    assert [events[6]["delta"], events[7]["delta"]] == [
        {"type": "input_json_delta", "partial_json": '{"city":'},
        {"type": "input_json_delta", "partial_json": '"Paris"}'},
    ]
    assert events[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert events[-2]["usage"]["output_tokens"] == 9

    same = completion(
        "Let me check.",
        [("call_1", "weather", '{"city":"Paris"}'), ("call_2", "now", "")],
        "tool_calls",
        {
            "prompt_tokens": 50,
            "completion_tokens": 9,
            "total_tokens": 59,
            "prompt_tokens_details": {"cached_tokens": 20},
        },
    )
    expected = anthropic_message(same, "claude-x")
    assert stream.message() == expected
    assert expected["usage"]["input_tokens"] == 30
    assert _accumulated(events).model_dump() == Message.model_validate(expected).model_dump()


async def test_events_of_a_text_stream_without_usage() -> None:
    async def chunks() -> AsyncIterator[dict[str, Any]]:
        yield chunk({"role": "assistant", "content": "Hi"})
        yield chunk({"content": " there"}, finish_reason="length")

    stream = AnthropicStream("claude-x", input_tokens=7)
    events = [event async for event in stream.events(chunks())]
    assert [event["type"] for event in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    message = stream.message()
    assert message["content"] == [{"type": "text", "text": "Hi there"}]
    assert message["stop_reason"] == "max_tokens"
    assert message["usage"]["input_tokens"] == 7
    assert message["id"] == events[0]["message"]["id"] == "msg_9Fx2aB"
    assert _accumulated(events).model_dump() == Message.model_validate(message).model_dump()
    assert stream.finish() == []
    with pytest.raises(RuntimeError):
        stream.feed(chunk({"content": "late"}))


def test_an_empty_stream_still_starts_and_stops() -> None:
    stream = AnthropicStream("claude-x")
    events = stream.finish()
    assert [event["type"] for event in events] == ["message_start", "message_delta", "message_stop"]
    message = stream.message()
    assert message["content"] == []
    assert message["stop_reason"] == "end_turn"
    assert message["id"] == events[0]["message"]["id"]
    assert _accumulated(events).model_dump() == Message.model_validate(message).model_dump()


def test_text_after_a_tool_call_opens_a_new_block_and_is_stored_joined() -> None:
    stream = AnthropicStream("claude-x")
    pieces = [
        chunk({"content": "a"}),
        chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f"}}]}),
        chunk({"content": "b"}, finish_reason="tool_calls"),
    ]
    events = [event for piece in pieces for event in stream.feed(piece)] + stream.finish()
    starts = [event["content_block"]["type"] for event in events if "content_block" in event]
    assert starts == ["text", "tool_use", "text"]
    stored = assistant_chat_message(stream.message())
    assert stored["content"] == "ab"
    assert stored["tool_calls"][0]["id"] == "c1"
    accumulated = _accumulated(events).model_dump(exclude_none=True)
    assert assistant_chat_message(accumulated) == stored


def test_sse_frames_an_event_by_its_type() -> None:
    frame = sse_event({"type": "message_stop"})
    assert frame == 'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    text = sse_event({"type": "content_block_delta", "delta": {"text": "é"}})
    assert "é" in text and text.endswith("\n\n")


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (402, "billing_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (409, "invalid_request_error"),
        (422, "invalid_request_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (503, "api_error"),
        (504, "timeout_error"),
        (529, "overloaded_error"),
    ],
)
def test_error_body_has_anthropics_type_for_the_status(status: int, kind: str) -> None:
    body = error_body(status, "what went wrong")
    assert body == {"type": "error", "error": {"type": kind, "message": "what went wrong"}}
    assert ErrorResponse.model_validate({**body, "request_id": None}).error.type == kind


def test_a_too_large_request_has_anthropics_own_type() -> None:
    assert error_body(413, "too big")["error"] == {
        "type": "request_too_large",
        "message": "too big",
    }


def test_a_fragment_for_an_earlier_call_still_reaches_its_block() -> None:
    stream = AnthropicStream("claude-x")
    pieces = [
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "c1", "function": {"name": "f", "arguments": '{"a"'}}
                ]
            }
        ),
        chunk(
            {"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "g", "arguments": "{}"}}]}
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}, "tool_calls"),
    ]
    events = [event for piece in pieces for event in stream.feed(piece)] + stream.finish()
    late = [event for event in events if event["type"] == "content_block_delta"][-1]
    assert late["index"] == 0
    message = stream.message()
    assert [block["input"] for block in message["content"]] == [{"a": 1}, {}]
    assert _accumulated(events).model_dump() == Message.model_validate(message).model_dump()


def test_a_system_turn_between_the_others_is_a_system_message() -> None:
    messages = request_messages(
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
                {"role": "user", "content": "again"},
            ]
        }
    )
    assert messages[1] == {"role": "system", "content": "be brief"}
    with pytest.raises(ValueError, match=r"messages\[0\]\.role"):
        request_messages({"messages": [{"role": "tool", "content": "x"}]})
