"""Conversation items: their ids, and how a stored item is served. Pure functions over JSON
values: no database, no HTTP.

An item's id is the `client_id` of its row: the item's own `id` when it carries one, else one
generated when it is added (OpenAI's prefix for its type and 48 hex digits). A row appended
without a `client_id` (through `/v1/sessions`) is served with an id derived from its row id:
the same prefix and the row id in 48 hex digits, which `derived_row_id` reads back.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from api.schemas import ItemIn

JSON = dict[str, Any]

ID_PREFIXES: dict[str, str] = {
    "message": "msg_",
    "function_call": "fc_",
    "function_call_output": "fco_",
    "reasoning": "rs_",
    "custom_tool_call": "ctc_",
    "custom_tool_call_output": "ctco_",
    "compaction": "cmp_",
}
"""The prefix of a generated item id, by item type, as OpenAI's API writes them."""

OTHER_PREFIX = "item_"
"""The prefix of a generated id of any other item type."""

ID_HEX_DIGITS = 48
"""Hex digits after the prefix: 192 random bits in a generated id (never two alike)."""

MAX_ROW_ID = 2**63 - 1
"""Largest row id (64-bit): a derived id names no larger one."""

STATUS_TYPES = frozenset({"message", "function_call", "function_call_output"})
"""Item types whose served form needs a `status` (OpenAI's types require one)."""

COMPLETED = "completed"


def item_type(item: JSON) -> str:
    """The item's type: a message may leave it out (an easy input message)."""
    kind = item.get("type")
    return kind if isinstance(kind, str) else "message"


def id_prefix(item: JSON) -> str:
    return ID_PREFIXES.get(item_type(item), OTHER_PREFIX)


def new_item_id(item: JSON) -> str:
    """A fresh id for an item that carries none."""
    return id_prefix(item) + secrets.token_hex(ID_HEX_DIGITS // 2)


def own_id(item: JSON) -> str | None:
    found = item.get("id")
    return found if isinstance(found, str) and found else None


def new_conversation_items(items: Sequence[JSON]) -> list[ItemIn]:
    """The items to append to a conversation, in order, each with its id as `client_id`: its
    own `id` (stored once per conversation, so a retry stores nothing twice) or a generated
    one (a retry of an item without an id stores it again)."""
    return [ItemIn(item=dict(item), client_id=own_id(item) or new_item_id(item)) for item in items]


def derived_item_id(item: JSON, row_id: int) -> str:
    """The id of a stored item that has no `client_id`."""
    return f"{id_prefix(item)}{row_id:0{ID_HEX_DIGITS}x}"


def derived_row_id(item_id: str) -> int | None:
    """The row id `derived_item_id` wrote into `item_id`; None if it is not of that form."""
    prefix, underscore, digits = item_id.rpartition("_")
    if not underscore or not prefix or len(digits) != ID_HEX_DIGITS:
        return None
    try:
        row_id = int(digits, 16)
    except ValueError:
        return None
    return row_id if 0 < row_id <= MAX_ROW_ID and digits == digits.lower() else None


def served_id(item: JSON, client_id: str | None, row_id: int) -> str:
    return client_id if client_id is not None else derived_item_id(item, row_id)


def served_item(item: JSON, client_id: str | None, row_id: int) -> JSON:
    """The stored item as the Conversations API answers it: as stored, with its `id`, and for
    the types the `openai` package reads strictly, what they require and the item may leave
    out (a message's `type`, `status` and content parts; a call's `status`; a reasoning
    item's `summary`)."""
    kind = item_type(item)
    served: JSON = {"id": served_id(item, client_id, row_id), **_without_id(item)}
    if kind == "message":
        served["type"] = "message"
        served["content"] = _content_parts(item.get("content"), item.get("role"))
    if kind in STATUS_TYPES and not isinstance(served.get("status"), str):
        served["status"] = COMPLETED
    if kind == "reasoning" and not isinstance(served.get("summary"), list):
        served["summary"] = []
    return served


def _without_id(item: JSON) -> JSON:
    return {key: value for key, value in item.items() if key != "id"}


def _content_parts(content: Any, role: Any) -> list[Any]:
    """Message content as a list of parts: text becomes one `input_text` part (`output_text`
    from the assistant); an `output_text` part gets its `annotations`, an image its
    `detail`, when they are absent."""
    if isinstance(content, str):
        if role == "assistant":
            return [{"type": "output_text", "text": content, "annotations": []}]
        return [{"type": "input_text", "text": content}]
    if not isinstance(content, list):
        return []
    parts: list[Any] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "output_text" and "annotations" not in part:
            part = {**part, "annotations": []}
        elif kind == "input_image" and "detail" not in part:
            part = {**part, "detail": "auto"}
        parts.append(part)
    return parts
