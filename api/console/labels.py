"""How rows read on the console's pages: a message as one line of text, a conversation item's
id, a summary's state and marks, a fallback's reason."""

from __future__ import annotations

import json
from typing import Any

from api.console.html import when
from api.conversation_items import served_id
from api.conversations import CONVERSATION_ID_PREFIX, RESPONSES_FORMAT
from api.items import parse_item
from api.store.rows import MessageRow, SessionRow, SummaryRow
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


def is_conversation(session: SessionRow) -> bool:
    """A session the Conversations API serves, or that holds Responses items: its rows have
    item ids."""
    return session.format == RESPONSES_FORMAT or session.external_id.startswith(
        CONVERSATION_ID_PREFIX
    )


def item_id(message: MessageRow) -> str | None:
    """The id the Conversations API serves the row's item under (`msg_...`, `fc_...`: the id an
    OpenAI SDK user holds); None for a row with no item (a tombstone, a chat message)."""
    if message.item is None:
        return None
    return served_id(parse_item(message.item), message.client_id, message.id)


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


def fallback_reason(summary: SummaryRow) -> str:
    """Why a fallback summary was written without the model, in its metadata's words."""
    reason = (summary.metadata or {}).get("fallback_reason")
    if reason is None:
        return "no reason recorded"
    return reason if isinstance(reason, str) else json.dumps(reason, ensure_ascii=False)
