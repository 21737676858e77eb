"""Token counting: the bundled cl100k is the real one, and message counts track the tokenizer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from summarizer.llm import load_litellm
from summarizer.tokens import count_message, count_messages, count_text, encoding

FIXTURE = Path(__file__).parent.parent / "fixtures" / "sharegpt_multilang.jsonl"
TOLERANCE = 0.05


def conversations() -> list[dict[str, Any]]:
    return [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]


def test_bundled_encoding_is_cl100k() -> None:
    # the token ids OpenAI's cookbook shows for cl100k_base
    assert encoding().encode("tiktoken is great!") == [83, 1609, 5963, 374, 2294, 0]


def test_fixture_holds_a_largely_chinese_conversation() -> None:
    chinese = next(c for c in conversations() if c["language"] == "zh")
    text = "".join(m["content"] for m in chinese["messages"])
    han = sum(1 for char in text if "\u4e00" <= char <= "\u9fff")
    assert han / len(text) > 0.8


@pytest.mark.parametrize("conversation", conversations(), ids=lambda c: c["language"])
def test_message_count_within_5_percent_of_the_bare_tokenizer(
    conversation: dict[str, Any],
) -> None:
    messages = conversation["messages"]
    bare = sum(len(encoding().encode(m["content"])) for m in messages)
    assert abs(count_messages(messages) - bare) / bare <= TOLERANCE


@pytest.mark.parametrize("conversation", conversations(), ids=lambda c: c["language"])
async def test_message_count_within_5_percent_of_litellm_token_counter(
    conversation: dict[str, Any],
) -> None:
    litellm = await load_litellm()
    messages = conversation["messages"]
    reference = litellm.token_counter(model="gpt-4", messages=messages)
    assert abs(count_messages(messages) - reference) / reference <= TOLERANCE


def test_tool_calls_and_names_are_counted() -> None:
    plain = {"role": "assistant", "content": "done"}
    with_call = {
        **plain,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
        ],
    }
    named = {**plain, "name": "helper"}
    assert count_message(with_call) > count_message(plain)
    assert count_message(named) > count_message(plain)


def test_content_parts_count_like_the_same_text() -> None:
    text = "第一部龙珠剧场版于1986年上映 and an English tail"
    parts = {"role": "user", "content": [{"type": "text", "text": text}]}
    assert count_message(parts) == count_message({"role": "user", "content": text})
    assert count_text(text) == len(encoding().encode(text))
