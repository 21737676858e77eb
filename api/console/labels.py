"""How rows read on the console's pages: a message as one line of text, a summary's state and
marks, a metadata value."""

from __future__ import annotations

import json
from typing import Any

from api.console.html import when
from api.store.rows import MessageRow, SummaryRow
from summarizer.summarize import FALLBACK_MODEL


def message_text(message: MessageRow) -> str:
    """A message as one line of text: its text parts, its parts' types, its tool calls named."""
    if message.removed_at is not None:
        return f"[removed at {when(message.removed_at)}]"
    pieces: list[str] = []
    if message.tool_call_id is not None:
        pieces.append(f"[result of {message.tool_call_id}]")
    body = message.body
    if isinstance(body, str):
        pieces.append(body)
    elif body:
        pieces.extend(part_text(part) for part in body)
    for call in message.tool_calls or ():
        function = call.get("function", {}) if isinstance(call, dict) else {}
        pieces.append(f"-> {function.get('name', '?')}({function.get('arguments', '')})")
    return " ".join(piece for piece in pieces if piece)


def part_text(part: Any) -> str:
    """A content part as text: its text, else its type in brackets."""
    if isinstance(part, dict):
        if isinstance(part.get("text"), str):
            return str(part["text"])
        return f"[{part.get('type', 'part')}]"
    return "[part]"


def state(summary: SummaryRow) -> str:
    """`live`, `superseded` or `erased`."""
    if summary.erased_at is not None:
        return "erased"
    return "live" if summary.superseded_by is None else "superseded"


def is_fallback(summary: SummaryRow) -> bool:
    """Made without the model (it waits for its repair while live)."""
    return summary.model == FALLBACK_MODEL


def is_repair(summary: SummaryRow) -> bool:
    """Made to replace a fallback (`metadata.repair_of` names it)."""
    return (summary.metadata or {}).get("repair_of") is not None


def message_class(message: MessageRow) -> str:
    """The row's class in a timeline: `removed`, `orphaned` (no view shows it) or `shown`."""
    if message.removed_at is not None:
        return "removed"
    return "orphaned" if message.orphaned_at is not None else "shown"


def value_text(value: Any) -> str:
    """A metadata value as the summary page shows it."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)
