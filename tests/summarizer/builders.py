"""Message builders for the summarizer tests (messages carry their `seq`), and the oracle of a
cut that separates a tool call from its results."""

from __future__ import annotations

import itertools
import json
from functools import cache
from pathlib import Path
from typing import Any

from summarizer.tokens import count_text

SHAREGPT = Path(__file__).parent.parent / "fixtures" / "sharegpt_multilang.jsonl"
"""Real conversations (English, Chinese, mixed): see tests/fixtures/README.md."""

WORDS = ("apple", "river", "stone", "cloud", "green", "light", "table", "music")
"""Words that are one cl100k token each with their leading space."""


def filler(tokens: int, tag: str = "") -> str:
    """Text of about `tokens` tokens, starting with `tag` when given."""
    words = itertools.islice(itertools.cycle(WORDS), max(0, tokens - count_text(tag)))
    return " ".join([tag, *words]).strip()


def user(seq: int, content: str) -> dict[str, Any]:
    return {"seq": seq, "role": "user", "content": content}


def assistant(seq: int, content: str) -> dict[str, Any]:
    return {"seq": seq, "role": "assistant", "content": content}


def call(seq: int, *call_ids: str, name: str = "search") -> dict[str, Any]:
    """An assistant message making one tool call per id."""
    return {
        "seq": seq,
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": f'{{"query": "{call_id}"}}'},
            }
            for call_id in call_ids
        ],
    }


def result(seq: int, call_id: str, content: str = "ok") -> dict[str, Any]:
    return {"seq": seq, "role": "tool", "tool_call_id": call_id, "content": content}


def chat(sizes: list[int], marker: bool = False) -> list[dict[str, Any]]:
    """Alternating user/assistant messages of the given token sizes, seq from 1."""
    messages = []
    for index, size in enumerate(sizes):
        seq = index + 1
        tag = f"MARKER-m{seq}" if marker else f"Message {seq}:"
        builder = user if index % 2 == 0 else assistant
        messages.append(builder(seq, filler(size, tag)))
    return messages


@cache
def _sharegpt() -> dict[int, list[dict[str, Any]]]:
    lines = SHAREGPT.read_text(encoding="utf-8").splitlines()
    return {c["conversation"]: c["messages"] for c in map(json.loads, lines)}


def sharegpt(conversation: int) -> list[dict[str, Any]]:
    """The messages of one fixture conversation, seq from 1."""
    return [dict(message, seq=seq) for seq, message in enumerate(_sharegpt()[conversation], 1)]


def separates_a_call(messages: list[dict[str, Any]], cut: int) -> bool:
    """Independent oracle: a cut separates a call from one of its results."""
    for index, message in enumerate(messages):
        for tool_call in message.get("tool_calls") or ():
            for later, answer in enumerate(messages):
                if answer.get("tool_call_id") == tool_call["id"] and index < cut <= later:
                    return True
    return False
