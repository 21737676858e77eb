"""Render chat messages as transcript lines the summarizer model reads.

One message becomes one entry, starting with a header `[#<seq> <role>]` (the local
model parses it back): tool calls are shown by name with abbreviated arguments, tool
results are previewed to a configurable length, content parts are flattened to text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from summarizer.text import clip_chars
from summarizer.tokens import count_text

TOOL_RESULT_PREVIEW_CHARS = 1500
"""Default length of a tool result preview: results are often bulk data a summary rarely needs."""

TOOL_ARGS_PREVIEW_CHARS = 200
"""Default length of a tool call's arguments: enough for paths and queries, not for payloads."""

HEADER = re.compile(r"^\[#(-?\d+) (system|user|assistant|tool|developer)(?: ([^\]]*))?\] ?", re.M)
"""The header of a transcript entry: seq, role and an optional label (name, tool call)."""

PREVIEW_CUT = "… [preview cut]"
"""Marker ending a tool result preview."""

CALL_PREFIX = "→ "
"""Marks the line of an assistant entry that lists a tool call."""


@dataclass(frozen=True)
class TranscriptOptions:
    """How much of tool traffic goes into the transcript."""

    tool_result_chars: int = TOOL_RESULT_PREVIEW_CHARS
    tool_args_chars: int = TOOL_ARGS_PREVIEW_CHARS


def content_text(content: Any) -> str:
    """The text of an OpenAI `content` value; non-text parts become a short placeholder."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    pieces: list[str] = []
    for part in content:
        if not isinstance(part, Mapping):
            pieces.append(str(part))
        elif part.get("type") == "text":
            pieces.append(str(part.get("text") or ""))
        else:
            pieces.append(f"[{part.get('type') or 'part'}]")
    return "\n".join(pieces)


def _arguments(function: Mapping[str, Any], limit: int) -> str:
    raw = function.get("arguments")
    if raw is None:
        return ""
    text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
    return clip_chars(" ".join(text.split()), limit)


def _call_names(messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            if call.get("id"):
                names[str(call["id"])] = str(function.get("name") or "tool")
    return names


def render_message(
    message: Mapping[str, Any], options: TranscriptOptions, call_names: Mapping[str, str]
) -> str:
    """One transcript entry for `message` (which carries its `seq`)."""
    role = str(message.get("role") or "user")
    text = content_text(message.get("content")).strip()
    label = ""
    if role == "tool":
        call_id = str(message.get("tool_call_id") or "")
        name = str(message.get("name") or call_names.get(call_id) or "tool")
        label = f" {name}"
        text = clip_chars(text, options.tool_result_chars, PREVIEW_CUT)
    elif message.get("name"):
        label = f" {message['name']}"
    lines = [f"[#{message.get('seq', 0)} {role}{label}] {text}".rstrip()]
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        arguments = _arguments(function, options.tool_args_chars)
        lines.append(f"{CALL_PREFIX}{function.get('name') or 'tool'}({arguments})")
    return "\n".join(lines)


def render(messages: Sequence[Mapping[str, Any]], options: TranscriptOptions) -> list[str]:
    """One transcript entry per message, in order."""
    names = _call_names(messages)
    return [render_message(message, options, names) for message in messages]


def entry_tokens(entry: str) -> int:
    """Tokens an entry adds to a transcript (its text and the newline joining it)."""
    return count_text(entry + "\n")


def join(entries: Sequence[str]) -> str:
    """The transcript text of consecutive entries."""
    return "\n".join(entries)
