"""The compaction items Precis makes (`POST /v1/responses/compact`) and how a context shows
them: pure functions over JSON values.

OpenAI's compaction item carries the compacted conversation in `encrypted_content`, opaque to
the client, which sends the item back as input on its next turn. Precis's carries a summary:
its text, the seqs it covers and, when it was stored, the ids of the summaries it is made of,
as base64url JSON after `COMPACTION_PREFIX`. Wherever such an item reaches a model (a turn's
input, a stored context) it is shown as the summary heading a context is shown with
(`summary_message` in `api.context`); a compaction item Precis did not make (a provider's
own) passes through untouched.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from api.json_values import check_json_value

SUMMARY_HEADING = "Summary of earlier conversation"
"""How a summary heads the context the model is sent."""

COMPACTION_PREFIX = "precis.summary.v1."
"""How the `encrypted_content` of a compaction item Precis made starts."""


@dataclass(frozen=True)
class CompactedSummary:
    """What a Precis compaction item carries."""

    text: str
    first_seq: int
    last_seq: int
    summary_ids: tuple[int, ...]
    """The stored summaries it is made of (linked to their sources); empty when the input
    was compacted without a conversation or chain, and nothing was stored."""

    @property
    def heading(self) -> str:
        return summary_heading(self.first_seq, self.last_seq, self.text)


def summary_heading(first_seq: int, last_seq: int, text: str) -> str:
    """A summary's text as a context shows it to the model."""
    return f"{SUMMARY_HEADING} (messages {first_seq}-{last_seq}):\n{text}"


def compaction_item(summary: CompactedSummary, item_id: str) -> dict[str, Any]:
    """The compaction item carrying `summary`, as `POST /v1/responses/compact` answers it."""
    carried = {
        "text": summary.text,
        "first_seq": summary.first_seq,
        "last_seq": summary.last_seq,
        "summary_ids": list(summary.summary_ids),
    }
    token = base64.urlsafe_b64encode(json.dumps(carried, ensure_ascii=False).encode())
    return {
        "id": item_id,
        "type": "compaction",
        "encrypted_content": COMPACTION_PREFIX + token.decode(),
    }


def compacted_summary(item: dict[str, Any]) -> CompactedSummary | None:
    """The summary a compaction item Precis made carries; None for any other item (one that
    only looks like Precis's, holding what no stored text may hold, is another item too)."""
    content = item.get("encrypted_content")
    if item.get("type") != "compaction" or not isinstance(content, str):
        return None
    if not content.startswith(COMPACTION_PREFIX):
        return None
    try:
        carried = json.loads(base64.urlsafe_b64decode(content[len(COMPACTION_PREFIX) :]))
        check_json_value(carried, "encrypted_content")  # storable text, bounded depth
    except (ValueError, binascii.Error, RecursionError):
        return None
    if not isinstance(carried, dict):
        return None
    text, first, last, ids = (
        carried.get(key) for key in ("text", "first_seq", "last_seq", "summary_ids")
    )
    if not (isinstance(text, str) and type(first) is int and type(last) is int):
        return None
    if not (isinstance(ids, list) and all(type(one) is int for one in ids)):
        return None
    return CompactedSummary(text, first, last, tuple(ids))


def shown_to_the_model(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`items` as a model is sent them: each Precis compaction item as a `developer` message
    holding its summary (the model never saw Precis's encoding)."""
    shown = []
    for item in items:
        summary = compacted_summary(item) if item.get("type") == "compaction" else None
        if summary is None:
            shown.append(item)
        else:
            shown.append({"type": "message", "role": "developer", "content": summary.heading})
    return shown
