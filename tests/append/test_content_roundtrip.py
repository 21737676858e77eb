"""What goes in comes back exactly: through the append answer, GET messages and the history.

Tests share the module's app (`api`), each on its own session id.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

CHUNK = "The quick brown fox jumps over the lazy dog. Ünïcödé 😀\n"
LONG_TEXT = CHUNK * (900_000 // len(CHUNK.encode()))
"""About 900 KB of UTF-8: under the default 1 MB per-message limit."""


async def round_trip(
    api: httpx.AsyncClient, sid: str, message: dict[str, Any]
) -> list[dict[str, Any]]:
    """Append one message; return it as the append answer, GET messages and history show it."""
    answer = await api.post(f"/v1/sessions/{sid}/messages", json={"messages": [message]})
    assert answer.status_code == 201, answer.text
    listed = await api.get(f"/v1/sessions/{sid}/messages")
    history = await api.get(f"/v1/sessions/{sid}/history")
    assert listed.status_code == history.status_code == 200
    return [
        answer.json()["messages"][0],
        listed.json()["messages"][0],
        history.json()["messages"][0],
    ]


async def context_of(api: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    context: list[dict[str, Any]] = (await api.get(f"/v1/sessions/{sid}/history")).json()["context"]
    return context


TEXTS = {
    "emoji": "👋🏽 family 👨‍👩‍👧‍👦, flags 🇨🇭🇯🇵, keycap 1️⃣, 🏳️‍🌈",
    "CJK": "你好，世界。日本語のテキスト、ｶﾀｶﾅ。한국어 텍스트. 𠀋𡈽𡌛 (plane 2)",
    "RTL": "\u200fمرحبا بالعالم\u200e — שלום עולם (mixed: abc אבג 123)",
    "combining characters": "e\u0301 vs \u00e9; Z\u0324\u0354\u0367\u0311a\u0308\u0356; 🇦\u0301",
    "controls and separators": "tab\there\r\nline\u2028sep\u2029par\x01\x1f\x7f \ufeffbom \u200bzw",
    "JSON-looking text": '{"role": "system", "content": "\\u0000"} \\n not a newline',
    "empty string": "",
    "only spaces": "   ",
    "astral and private use": "\U0001f9ec \U000e0041 \ue000 \U0010fffd",
}


@pytest.mark.parametrize("text", TEXTS.values(), ids=list(TEXTS.keys()))
async def test_text_content_round_trips_exactly(
    api: httpx.AsyncClient, sid: str, text: str
) -> None:
    for seen in await round_trip(api, sid, {"role": "user", "content": text}):
        assert seen["content"] == text


async def test_decomposed_characters_are_not_normalized(api: httpx.AsyncClient, sid: str) -> None:
    decomposed = "cafe\u0301"
    seen = await round_trip(api, sid, {"role": "user", "content": decomposed})
    assert [len(s["content"]) for s in seen] == [5, 5, 5]


async def test_text_content_round_trips_into_the_context(api: httpx.AsyncClient, sid: str) -> None:
    text = TEXTS["emoji"] + TEXTS["CJK"] + TEXTS["RTL"]
    await round_trip(api, sid, {"role": "user", "content": text})
    assert await context_of(api, sid) == [{"role": "user", "content": text}]


async def test_a_900_kb_string_round_trips_exactly(api: httpx.AsyncClient, sid: str) -> None:
    assert 800_000 < len(LONG_TEXT.encode()) <= 900_000
    for seen in await round_trip(api, sid, {"role": "user", "content": LONG_TEXT}):
        assert seen["content"] == LONG_TEXT


CONTENT_PARTS = [
    {"type": "text", "text": "What is in this picture? 图片里是什么？"},
    {"type": "image_url", "image_url": {"url": "https://example.com/ä.png", "detail": "high"}},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    {"type": "text", "text": "🙂"},
]


async def test_content_parts_round_trip_exactly(api: httpx.AsyncClient, sid: str) -> None:
    for seen in await round_trip(api, sid, {"role": "user", "content": CONTENT_PARTS}):
        assert seen["content"] == CONTENT_PARTS


async def test_content_parts_round_trip_into_the_context(api: httpx.AsyncClient, sid: str) -> None:
    await round_trip(api, sid, {"role": "user", "content": CONTENT_PARTS})
    assert await context_of(api, sid) == [{"role": "user", "content": CONTENT_PARTS}]


async def test_text_parts_on_an_assistant_message_round_trip(
    api: httpx.AsyncClient, sid: str
) -> None:
    parts = [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two ✓"}]
    for seen in await round_trip(api, sid, {"role": "assistant", "content": parts}):
        assert seen["content"] == parts


TOOL_CALLS = [
    {
        "id": "call_ü_1",
        "type": "function",
        "function": {
            "name": "lookup_weather",
            "arguments": '{"city": "Zürich", "sky": "🌧", "alt": "東京", "raw": "\\u00e9 stays"}',
        },
    },
    {"id": "call_2", "type": "function", "function": {"name": "noop", "arguments": ""}},
]


async def test_tool_calls_with_unicode_arguments_round_trip_exactly(
    api: httpx.AsyncClient, sid: str
) -> None:
    message = {"role": "assistant", "content": None, "tool_calls": TOOL_CALLS}
    for seen in await round_trip(api, sid, message):
        assert seen["tool_calls"] == TOOL_CALLS
        assert seen["content"] is None


async def test_a_tool_result_keeps_its_call_id_and_content(
    api: httpx.AsyncClient, sid: str
) -> None:
    call = {"role": "assistant", "content": None, "tool_calls": TOOL_CALLS[:1]}
    result = {"role": "tool", "tool_call_id": "call_ü_1", "content": '{"temp": "21 °C"}'}
    answer = await api.post(f"/v1/sessions/{sid}/messages", json={"messages": [call, result]})
    assert answer.status_code == 201, answer.text
    assert (await context_of(api, sid)) == [call, result]


async def test_name_and_client_id_round_trip(api: httpx.AsyncClient, sid: str) -> None:
    message = {"role": "user", "content": "hi", "name": "alice_01", "client_id": "cli-ü-😀"}
    for seen in await round_trip(api, sid, message):
        assert (seen["name"], seen["client_id"]) == ("alice_01", "cli-ü-😀")


METADATA = {
    "ключ": {"🔑": [1, 2.5, True, None, "値"], "nested": {"deeper": {"deepest": [[], {}]}}},
    "ints": [0, -1, 2**53 + 1, 2**63 - 1, -(2**63) + 1],
    "floats": [0.1, -0.5, 1.0, 3.141592653589793, 1.5e-10, -2.5e-7],
    "bools": [True, False],
    "null": None,
    "empty": {"list": [], "dict": {}, "string": ""},
    "rtl": "\u200fמטא",
}


async def test_metadata_round_trips_exactly(api: httpx.AsyncClient, sid: str) -> None:
    for seen in await round_trip(api, sid, {"role": "user", "content": "x", "metadata": METADATA}):
        assert seen["metadata"] == METADATA


async def test_metadata_numbers_keep_their_json_types(api: httpx.AsyncClient, sid: str) -> None:
    message = {"role": "user", "content": "x", "metadata": {"f": 1.0, "i": 1, "b": True}}
    for seen in await round_trip(api, sid, message):
        types = {key: type(value) for key, value in seen["metadata"].items()}
        assert types == {"f": float, "i": int, "b": bool}


async def test_metadata_float_with_a_large_exponent_keeps_its_value(
    api: httpx.AsyncClient, sid: str
) -> None:
    """JSONB keeps numbers as `numeric`: 1e300 may come back written out as an integer."""
    message = {"role": "user", "content": "x", "metadata": {"big": 1e300, "small": 5e-324}}
    for seen in await round_trip(api, sid, message):
        assert float(seen["metadata"]["big"]) == 1e300
        assert seen["metadata"]["small"] == 5e-324


async def test_empty_metadata_round_trips_as_an_empty_object(
    api: httpx.AsyncClient, sid: str
) -> None:
    for seen in await round_trip(api, sid, {"role": "user", "content": "x", "metadata": {}}):
        assert seen["metadata"] == {}


async def test_session_metadata_round_trips_exactly(api: httpx.AsyncClient, sid: str) -> None:
    created = await api.post("/v1/sessions", json={"id": sid, "metadata": METADATA})
    assert created.status_code == 201, created.text
    assert (await api.get(f"/v1/sessions/{sid}")).json()["metadata"] == METADATA
