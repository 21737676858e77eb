"""Responses API items: checks, the chat projection, the format conversions and verbatim storage.

Pure functions, no database. The payloads are shaped like the items the OpenAI Agents SDK
stores for a weather question answered with one tool call.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from api.items import (
    Unfaithful,
    chat_to_items,
    check_item,
    developer_item,
    item_text,
    item_to_chat,
    missing_output,
    parse_item,
    projection,
)
from summarizer.cuts import legal_cuts
from summarizer.transcript import TranscriptOptions, render

SECRET = "OPAQUE-MARKER-7f3a"
"""Placed in fields no summarizer may read; a projection containing it leaks them."""

USER: dict[str, Any] = {"role": "user", "content": "What's the weather in Paris today?"}
REASONING: dict[str, Any] = {
    "id": "rs_68a1c0f2e9d88190a1b2c3d4e5f60718",
    "type": "reasoning",
    "summary": [
        {"type": "summary_text", "text": "The user wants today's weather in Paris."},
        {"type": "summary_text", "text": "Call get_weather with city=Paris."},
    ],
    "content": [{"type": "reasoning_text", "text": f"raw chain of thought {SECRET}"}],
    "encrypted_content": f"gAAAAABo{SECRET}Zk3xQ==",
}
CALL: dict[str, Any] = {
    "arguments": '{"city":"Paris","unit":"celsius"}',
    "call_id": "call_Wx1dQ3bH7pL0",
    "name": "get_weather",
    "type": "function_call",
    "id": "fc_68a1c0f4b5e08190b2c3d4e5f6071829",
    "status": "completed",
}
OUTPUT: dict[str, Any] = {
    "call_id": "call_Wx1dQ3bH7pL0",
    "output": "18°C, light rain, wind 12 km/h",
    "type": "function_call_output",
}
ANSWER: dict[str, Any] = {
    "id": "msg_68a1c0f6d7f48190c3d4e5f60718293a",
    "content": [
        {
            "annotations": [],
            "text": "It is 18°C in Paris with light rain: take an umbrella.",
            "type": "output_text",
            "logprobs": [],
        }
    ],
    "role": "assistant",
    "status": "completed",
    "type": "message",
}
CONVERSATION: list[dict[str, Any]] = [USER, REASONING, CALL, OUTPUT, ANSWER]

COMPUTER_CALL: dict[str, Any] = {
    "type": "computer_call",
    "id": "cu_68a1c1",
    "call_id": "call_cu_1",
    "action": {"type": "click", "x": 120, "y": 48, "button": "left"},
    "pending_safety_checks": [],
    "status": "completed",
}
COMPUTER_OUTPUT: dict[str, Any] = {
    "type": "computer_call_output",
    "call_id": "call_cu_1",
    "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64," + "iVBO" * 400},
}
WEB_SEARCH: dict[str, Any] = {
    "type": "web_search_call",
    "id": "ws_68a1c2",
    "status": "completed",
    "action": {"type": "search", "query": "Paris weather today"},
}


def text_call(call_id: str, city: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": "get_weather",
        "arguments": json.dumps({"city": city}),
    }


def chat_call(call_id: str, city: str) -> dict[str, Any]:
    """The chat tool call of `text_call(call_id, city)`."""
    call: dict[str, Any] = projection(text_call(call_id, city))["tool_calls"][0]
    return call


def output(call_id: str, text: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def key_orders(value: Any) -> Any:
    """The keys of every object in `value`, in order, nested like `value`."""
    if isinstance(value, dict):
        return [(key, key_orders(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [key_orders(item) for item in value]
    return None


# check_item


@pytest.mark.parametrize("item", CONVERSATION, ids=lambda item: item.get("type", "short"))
def test_check_item_accepts_the_agents_sdk_conversation(item: dict[str, Any]) -> None:
    check_item(item, "items[0]")


@pytest.mark.parametrize(
    "item",
    [
        COMPUTER_CALL,
        COMPUTER_OUTPUT,
        WEB_SEARCH,
        {"type": "file_search_call", "id": "fs_1", "queries": ["q"], "status": "completed"},
        {"type": "custom_tool_call", "call_id": "c1", "name": "grep", "input": "TODO"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "3 matches"},
        {"type": "local_shell_call", "call_id": "ls1", "action": {"command": ["ls"]}},
        {"type": "local_shell_call_output", "call_id": "ls1", "output": "README.md"},
        {"type": "mcp_call", "id": "mcp_1", "server_label": "docs", "name": "f", "arguments": "{}"},
        {"type": "image_generation_call", "id": "ig_1", "result": "iVBO", "status": "completed"},
        {"type": "item_reference", "id": "msg_123"},
        {"type": "holographic_call_2031", "payload": {"dimensions": 4}},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "developer", "content": []},
    ],
    ids=lambda item: item["type"],
)
def test_check_item_accepts_every_typed_item(item: dict[str, Any]) -> None:
    check_item(item, "items[0]")


@pytest.mark.parametrize(
    ("item", "problem"),
    [
        ("hello", "must be a JSON object"),
        ([USER], "must be a JSON object"),
        ({"type": "", "role": "user", "content": "x"}, "type must be a non-empty string"),
        ({"type": 7}, "type must be a non-empty string"),
        ({"type": None, "role": "user", "content": "x"}, "type must be a non-empty string"),
        ({"content": "hi"}, "needs a type or a role"),
        ({"type": "message", "role": "tool", "content": "x"}, "role must be one of"),
        ({"role": "critic", "content": "x"}, "role must be one of"),
        ({"role": "user"}, "content must be a string or a list of parts"),
        ({"role": "user", "content": {"text": "hi"}}, "content must be a string or a list"),
        ({"role": "user", "content": ["hi"]}, "content[0]: a part must be an object with a type"),
        ({"role": "user", "content": [{"text": "hi"}]}, "content[0]: a part must be an object"),
        ({**CALL, "call_id": None}, "a function_call needs a non-empty string call_id"),
        ({"type": "function_call", "call_id": "c", "arguments": "{}"}, "non-empty string name"),
        ({**CALL, "arguments": {"city": "Paris"}}, "needs arguments as a JSON string"),
        ({"type": "function_call_output", "output": "x"}, "needs a non-empty string call_id"),
        ({**OUTPUT, "output": {"temp": 18}}, "needs output as a string or list"),
        ({**OUTPUT, "output": None}, "needs output as a string or list"),
        ({**REASONING, "summary": "thinking"}, "summary must be a list of objects"),
        ({**REASONING, "summary": ["thinking"]}, "summary must be a list of objects"),
        ({"role": "user", "content": "a\x00b"}, "NUL characters are not accepted"),
        ({"type": "future_call", "score": float("nan")}, "numbers must be finite"),
        ({"type": "future_call", "n": 2**70}, "integer out of the 64-bit range"),
    ],
)
def test_check_item_rejects_with_where_and_the_problem(item: Any, problem: str) -> None:
    with pytest.raises(ValueError) as raised:
        check_item(item, "items[3]")
    assert str(raised.value).startswith("items[3]")
    assert problem in str(raised.value)


# projection


def test_projection_of_a_short_form_message_is_the_chat_message() -> None:
    assert projection(USER) == USER


def test_projection_of_an_output_message_keeps_only_role_and_text_parts() -> None:
    assert projection(ANSWER) == {
        "role": "assistant",
        "content": [{"type": "text", "text": ANSWER["content"][0]["text"]}],
    }


def test_projection_of_non_text_parts_is_text_or_an_image_part() -> None:
    item = {
        "type": "message",
        "role": "user",
        "name": "ignored",
        "content": [
            {"type": "input_text", "text": "Compare these:"},
            {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"},
            {"type": "input_image", "file_id": "file-img1", "detail": "auto"},
            {
                "type": "input_file",
                "filename": "r.pdf",
                "file_data": "data:application/pdf;base64,JVB",
            },
            {"type": "refusal", "refusal": "I can't help with that."},
            {"type": "audio_clip", "seconds": 3},
        ],
    }
    assert projection(item) == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Compare these:"},
            {
                "type": "image_url",
                "image_url": {"url": "https://example.com/a.png", "detail": "low"},
            },
            {"type": "text", "text": '[input_image] {"file_id":"file-img1","detail":"auto"}'},
            {"type": "text", "text": '[input_file] {"filename":"r.pdf"}'},
            {"type": "text", "text": "[refusal] I can't help with that."},
            {"type": "text", "text": '[audio_clip] {"seconds":3}'},
        ],
    }


def test_projection_of_a_function_call_is_an_assistant_tool_call() -> None:
    assert projection(CALL) == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_Wx1dQ3bH7pL0",
                "type": "function",
                "function": {"name": "get_weather", "arguments": CALL["arguments"]},
            }
        ],
    }


def test_projection_of_a_function_call_output_is_a_tool_message() -> None:
    assert projection(OUTPUT) == {
        "role": "tool",
        "content": "18°C, light rain, wind 12 km/h",
        "tool_call_id": "call_Wx1dQ3bH7pL0",
    }


def test_projection_of_a_list_output_joins_its_texts_and_tags_other_parts() -> None:
    item = {
        **OUTPUT,
        "output": [
            {"type": "input_text", "text": "18°C"},
            {"type": "input_image", "file_id": "file-radar"},
            {"type": "input_text", "text": "light rain"},
        ],
    }
    assert projection(item)["content"] == '18°C\n[input_image] {"file_id":"file-radar"}\nlight rain'


def test_projection_of_reasoning_shows_its_summary_and_never_its_opaque_fields() -> None:
    shown = projection(REASONING)
    assert shown == {
        "role": "assistant",
        "content": "[reasoning] The user wants today's weather in Paris.\n"
        "Call get_weather with city=Paris.",
    }
    assert SECRET not in json.dumps(shown)


def test_projection_of_reasoning_without_a_summary_says_it_has_none() -> None:
    item = {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": SECRET}
    assert projection(item) == {"role": "assistant", "content": "[reasoning, no readable summary]"}


def test_the_summarizer_transcript_of_the_conversation_never_shows_opaque_fields() -> None:
    messages = [{**projection(item), "seq": seq} for seq, item in enumerate(CONVERSATION, 1)]
    lines = render(messages, TranscriptOptions())
    assert "[#2 assistant] [reasoning] The user wants today's weather in Paris." in lines[1]
    assert "get_weather" in lines[2] and "[#4 tool get_weather] 18°C" in lines[3]
    assert SECRET not in "\n".join(lines)


def test_projection_of_a_computer_call_and_its_output_pair_by_call_id() -> None:
    call, result = projection(COMPUTER_CALL), projection(COMPUTER_OUTPUT)
    assert call["tool_calls"] == [
        {
            "id": "call_cu_1",
            "type": "function",
            "function": {
                "name": "computer_call",
                "arguments": '{"action":{"type":"click","x":120,"y":48,"button":"left"},'
                '"pending_safety_checks":[]}',
            },
        }
    ]
    assert result == {
        "role": "tool",
        "content": '{"type":"computer_screenshot","image_url":"[base64 data, 1622 characters]"}',
        "tool_call_id": "call_cu_1",
    }


def test_projection_of_a_named_custom_tool_call_uses_its_name() -> None:
    item = {"type": "custom_tool_call", "call_id": "c1", "name": "grep", "input": "TODO", "id": "x"}
    function = projection(item)["tool_calls"][0]["function"]
    assert function == {"name": "grep", "arguments": '{"input":"TODO"}'}


def test_projection_of_a_string_call_output_is_the_string() -> None:
    item = {"type": "local_shell_call_output", "call_id": "ls1", "output": "README.md\napi"}
    assert projection(item) == {"role": "tool", "content": "README.md\napi", "tool_call_id": "ls1"}


def test_projection_of_other_items_is_a_tagged_note_without_bookkeeping() -> None:
    assert projection(WEB_SEARCH) == {
        "role": "assistant",
        "content": '[web_search_call] {"action":{"type":"search","query":"Paris weather today"}}',
    }


def test_projection_replaces_base64_payloads_and_drops_encrypted_fields() -> None:
    item = {
        "type": "image_generation_call",
        "id": "ig_1",
        "status": "completed",
        "result": "iVBORw0KGgo" * 40,
        "revised_prompt": "A rainy Paris street",
        "encrypted_content": SECRET,
    }
    assert projection(item)["content"] == (
        '[image_generation_call] {"result":"[base64 data, 440 characters]",'
        '"revised_prompt":"A rainy Paris street"}'
    )


def test_no_projection_carries_a_name() -> None:
    items = [*CONVERSATION, COMPUTER_CALL, COMPUTER_OUTPUT, WEB_SEARCH, {**USER, "name": "ann"}]
    assert all("name" not in projection(item) for item in items)


def test_no_cut_falls_between_parallel_function_calls_and_their_last_output() -> None:
    items = [
        USER,
        text_call("call_A", "Paris"),
        text_call("call_B", "Lyon"),
        output("call_B", "21°C"),
        output("call_A", "18°C"),
        ANSWER,
    ]
    assert legal_cuts([projection(item) for item in items]) == [0, 1, 5, 6]


def test_no_cut_falls_between_a_computer_call_and_its_output() -> None:
    items = [USER, COMPUTER_CALL, COMPUTER_OUTPUT, ANSWER]
    assert legal_cuts([projection(item) for item in items]) == [0, 1, 3, 4]


# item_to_chat


def test_item_to_chat_keeps_a_string_message() -> None:
    item = {"type": "message", "role": "developer", "content": "Answer in French."}
    assert item_to_chat(item, "seq 1") == {"role": "developer", "content": "Answer in French."}


def test_item_to_chat_drops_bookkeeping_empty_annotations_and_logprobs() -> None:
    assert item_to_chat(ANSWER, "seq 5") == {
        "role": "assistant",
        "content": [{"type": "text", "text": ANSWER["content"][0]["text"]}],
    }


def test_item_to_chat_turns_input_images_into_chat_image_parts() -> None:
    item = {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "high"},
            {"type": "input_image", "image_url": "https://example.com/b.png"},
        ],
    }
    assert item_to_chat(item, "seq 1")["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "high"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/b.png"}},
    ]


def test_item_to_chat_turns_a_function_call_into_a_tool_call() -> None:
    assert item_to_chat(CALL, "seq 3") == projection(CALL)


def test_item_to_chat_turns_a_string_output_into_a_tool_message() -> None:
    assert item_to_chat(OUTPUT, "seq 4") == {
        "role": "tool",
        "content": OUTPUT["output"],
        "tool_call_id": OUTPUT["call_id"],
    }


def test_item_to_chat_keeps_text_output_parts_as_chat_text_parts() -> None:
    parts = [{"type": "input_text", "text": "18°C"}, {"type": "input_text", "text": "rain"}]
    assert item_to_chat({**OUTPUT, "output": parts}, "seq 4")["content"] == [
        {"type": "text", "text": "18°C"},
        {"type": "text", "text": "rain"},
    ]


@pytest.mark.parametrize(
    ("item", "problem"),
    [
        (REASONING, "a reasoning item has no chat-completions shape"),
        (WEB_SEARCH, "a web_search_call item has no chat-completions shape"),
        (COMPUTER_CALL, "a computer_call item has no chat-completions shape"),
        (
            {
                **ANSWER,
                "content": [
                    {"type": "output_text", "text": "See [1].", "annotations": [{"type": "url"}]}
                ],
            },
            "has no field for annotations",
        ),
        (
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]},
            "a refusal part has no chat-completions shape",
        ),
        (
            {"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]},
            "a input_file part has no chat-completions shape",
        ),
        (
            {"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]},
            "the field 'file_id' has no place",
        ),
        (
            {"role": "assistant", "content": [{"type": "input_image", "image_url": "https://x/a"}]},
            "images in user messages only",
        ),
        (
            {"role": "user", "content": [{"type": "input_image", "image_url": "u", "detail": "x"}]},
            "an image needs an image_url and a detail chat-completions has",
        ),
        ({**USER, "phase": "final_answer"}, "the field 'phase' has no place"),
        ({"role": "user", "content": []}, "content must be a string or a non-empty list"),
        ({**CALL, "namespace": "weather"}, "the field 'namespace' has no place"),
        (
            {**OUTPUT, "output": [{"type": "input_image", "image_url": "https://x/a.png"}]},
            "a input_image part has no chat-completions shape here",
        ),
    ],
)
def test_item_to_chat_refuses_what_chat_cannot_hold(item: dict[str, Any], problem: str) -> None:
    with pytest.raises(Unfaithful) as raised:
        item_to_chat(item, "seq 12")
    assert str(raised.value).startswith("seq 12")
    assert problem in str(raised.value)


def test_unfaithful_is_a_value_error() -> None:
    assert issubclass(Unfaithful, ValueError)


# chat_to_items


@pytest.mark.parametrize("role", ["system", "developer", "user", "assistant"])
def test_chat_to_items_makes_a_string_message_item(role: str) -> None:
    message = {"role": role, "content": "Hello there."}
    assert chat_to_items(message, "seq 1") == [
        {"type": "message", "role": role, "content": "Hello there."}
    ]


def test_chat_to_items_makes_input_parts_for_a_user_message() -> None:
    message = {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            {
                "type": "image_url",
                "image_url": {"url": "https://example.com/b.png", "detail": "low"},
            },
        ],
        "name": None,
    }
    assert chat_to_items(message, "seq 1") == [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is this?"},
                {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"},
                {"type": "input_image", "image_url": "https://example.com/b.png", "detail": "low"},
            ],
        }
    ]


def test_chat_to_items_makes_output_text_parts_for_an_assistant_message() -> None:
    message = {"role": "assistant", "content": [{"type": "text", "text": "18°C."}]}
    assert chat_to_items(message, "seq 1")[0]["content"] == [
        {"type": "output_text", "text": "18°C.", "annotations": []}
    ]


def test_chat_to_items_makes_one_function_call_per_tool_call() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [chat_call("call_A", "Paris"), chat_call("call_B", "Lyon")],
    }
    assert chat_to_items(message, "seq 2") == [
        text_call("call_A", "Paris"),
        text_call("call_B", "Lyon"),
    ]


def test_chat_to_items_keeps_the_text_of_an_assistant_message_with_tool_calls() -> None:
    message = {**projection(CALL), "content": "Let me check."}
    assert chat_to_items(message, "seq 2") == [
        {"type": "message", "role": "assistant", "content": "Let me check."},
        {
            "type": "function_call",
            "call_id": CALL["call_id"],
            "name": "get_weather",
            "arguments": CALL["arguments"],
        },
    ]


def test_chat_to_items_makes_a_function_call_output_of_a_tool_message() -> None:
    message = {"role": "tool", "content": "18°C", "tool_call_id": "call_A"}
    assert chat_to_items(message, "seq 3") == [output("call_A", "18°C")]


def test_chat_to_items_makes_input_text_parts_of_a_tool_message_with_parts() -> None:
    message = {"role": "tool", "content": [{"type": "text", "text": "18°C"}], "tool_call_id": "A"}
    assert chat_to_items(message, "seq 3")[0]["output"] == [{"type": "input_text", "text": "18°C"}]


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ({"role": "user", "content": "hi", "name": "ann"}, "Responses input has no names"),
        ({"role": "user", "content": "hi", "seq": 3}, "the field 'seq' has no place"),
        ({"role": "assistant", "content": None}, "content must be a string or a list"),
        ({"role": "tool", "content": "18°C"}, "a tool message needs a tool_call_id"),
        (
            {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
            "a image_url part in a assistant message has no Responses shape",
        ),
        (
            {"role": "user", "content": "x", "tool_calls": [projection(CALL)["tool_calls"][0]]},
            "only an assistant message may carry tool_calls",
        ),
    ],
)
def test_chat_to_items_refuses_what_responses_input_cannot_hold(
    message: dict[str, Any], problem: str
) -> None:
    with pytest.raises(Unfaithful) as raised:
        chat_to_items(message, "seq 7")
    assert str(raised.value).startswith("seq 7")
    assert problem in str(raised.value)


def test_chat_messages_round_trip_through_items() -> None:
    chat: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a weather assistant."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [chat_call("call_A", "Paris")],
        },
        {"role": "tool", "content": "18°C, light rain", "tool_call_id": "call_A"},
        {"role": "tool", "content": [{"type": "text", "text": "rain"}], "tool_call_id": "c2"},
        {"role": "assistant", "content": [{"type": "text", "text": "Take an umbrella."}]},
        {"role": "assistant", "content": "It is 18°C."},
    ]
    back = [
        item_to_chat(item, f"seq {seq}")
        for seq, message in enumerate(chat, 1)
        for item in chat_to_items(message, f"seq {seq}")
    ]
    assert back == chat


def test_developer_item_is_a_developer_message() -> None:
    item = developer_item("Summary of earlier conversation: ...")
    assert item == {
        "type": "message",
        "role": "developer",
        "content": "Summary of earlier conversation: ...",
    }
    check_item(item, "summary")


def test_missing_output_answers_its_call() -> None:
    item = missing_output("call_A", "[No result was recorded for this tool call]")
    assert projection(item)["tool_call_id"] == "call_A"
    assert item == output("call_A", "[No result was recorded for this tool call]")


# verbatim storage


def test_item_text_round_trips_unknown_items_with_key_order_and_non_ascii() -> None:
    item = {
        "zeta": 1,
        "type": "holographic_call_2031",
        "alpha": {"z": [{"y": 1, "b": None, "a": True}], "m": "Zürich 東京 😀", "c": 1.5},
        "call_id": "h1",
    }
    text = item_text(item)
    back = parse_item(text)
    assert back == item
    assert key_orders(back) == key_orders(item)
    assert "Zürich 東京 😀" in text and "\\u" not in text
    assert text.startswith('{"zeta":1,"type":"holographic_call_2031","alpha":{"z"')


def test_item_text_round_trips_the_agents_sdk_conversation() -> None:
    for item in CONVERSATION:
        back = parse_item(item_text(item))
        assert back == item and key_orders(back) == key_orders(item)


def test_parse_item_refuses_what_is_not_an_object() -> None:
    with pytest.raises(ValueError, match="JSON object"):
        parse_item("[1, 2]")
