"""Anthropic's prompt cache on the chat wires: where a request sent to an Anthropic model is
marked (`cache_control`), so that what the next turn sends again is read from the cache.

Precis sends the same context turn after turn, the new messages after it, until a summary or
context editing changes it, so a mark at the end of a request is read back by the next turn; the
client's own marks are not kept: they mark its history, not the context Precis sends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from api.compaction_items import SUMMARY_HEADING

ANTHROPIC_MODELS = ("anthropic/", "claude-")
"""Model names litellm sends to Anthropic: their requests carry prompt-cache breakpoints."""

EPHEMERAL = {"type": "ephemeral"}
"""Anthropic's prompt-cache mark (`cache_control`)."""

SYSTEM_ROLES = ("system", "developer")
"""The roles of a system prompt: litellm sends both as Anthropic's `system`."""


def marked(request: Mapping[str, Any], messages: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """`request` with `messages`, marked as prompt-cache breakpoints when its model is
    Anthropic's: the end of the pinned system prompt (the tools and the system prompt are
    cached), the newest summary (the pinned prefix and the summaries, until the next summary)
    and the last message (the whole request, which the next turn sends again, with its own
    messages after it, until the next summary); the client's marks on its tools left out. Three
    marks at most, within Anthropic's four."""
    if not str(request.get("model", "")).startswith(ANTHROPIC_MODELS) or not messages:
        return {**request, "messages": list(messages)}
    marks = list(messages)
    pinned = 0
    while (
        pinned < len(marks)
        and marks[pinned].get("role") in SYSTEM_ROLES
        and not _is_summary(marks[pinned])
    ):
        pinned += 1
    summaries = [index for index, message in enumerate(marks) if _is_summary(message)]
    for index in {pinned - 1, *summaries[-1:], len(marks) - 1} - {-1}:
        marks[index] = _cache_marked(marks[index])
    tools = request.get("tools")
    if isinstance(tools, list):
        tools = [
            {key: value for key, value in tool.items() if key != "cache_control"}
            if isinstance(tool, Mapping)
            else tool
            for tool in tools
        ]
        return {**request, "messages": marks, "tools": tools}
    return {**request, "messages": marks}


def _is_summary(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, str) and content.startswith(SUMMARY_HEADING)


def _cache_marked(message: dict[str, Any]) -> dict[str, Any]:
    """`message` with a prompt-cache mark on its last block, where litellm carries it to
    Anthropic: a tool result's message, an assistant's last tool call, or the last content
    part (text made a part)."""
    if message.get("role") == "tool":
        return {**message, "cache_control": EPHEMERAL}
    calls = message.get("tool_calls")
    if message.get("role") == "assistant" and isinstance(calls, list) and calls:
        return {**message, "tool_calls": [*calls[:-1], {**calls[-1], "cache_control": EPHEMERAL}]}
    content = message.get("content")
    if isinstance(content, str) and content:  # an empty text block is refused
        content = [{"type": "text", "text": content}]
    if isinstance(content, list) and content and isinstance(content[-1], Mapping):
        return {**message, "content": [*content[:-1], {**content[-1], "cache_control": EPHEMERAL}]}
    return message
