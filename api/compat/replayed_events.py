"""A whole response as the Responses API streams one: the events a client reads, numbered as it
numbers them (`sequence_number` from 0).

The offline model streams its answers so (`api.offline_model`), and a background response is
followed so (`api.compat.background`): its worker calls the model whole, and a follower, live or
resumed with `starting_after`, reads the events of the response as it stands, each with the same
number whenever it is read. A message's text comes word by word, a function call's arguments in
one delta; any other output item is added and done.
"""

from __future__ import annotations

import re
from typing import Any

JSON = dict[str, Any]

WORDS = re.compile(r"\S+\s*|\s+")
"""A text's deltas: each word with the blanks after it (linear: no nested quantifier)."""

ENDED = frozenset({"completed", "incomplete", "failed", "cancelled"})
"""The statuses of a response that will not change."""

SNAPSHOT_LEFT_OUT = ("usage", "incomplete_details", "error")
"""What a response does not have yet while it runs."""


def streamed(response: JSON) -> list[JSON]:
    """Every event of the whole foreground `response`: created and in progress, its output's,
    and its end."""
    return _numbered(
        [*_opening(response, queued=False, running=True), *_output(response), _ending(response)]
    )


def followed(response: JSON) -> list[JSON]:
    """The events of the background `response` as it stands: created and queued; in progress
    once a worker runs it; its output's and its end once it has ended. Each list is the start of
    the next, so a follower sends what it has not sent yet."""
    status = response.get("status")
    ended = status in ENDED
    opening = _opening(response, queued=True, running=ended or status == "in_progress")
    if not ended:
        return _numbered(opening)
    return _numbered([*opening, *_output(response), _ending(response)])


def _numbered(events: list[JSON]) -> list[JSON]:
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


def _opening(response: JSON, queued: bool, running: bool) -> list[JSON]:
    snapshot = {key: value for key, value in response.items() if key not in SNAPSHOT_LEFT_OUT}
    snapshot["output"] = []
    first = "queued" if queued else "in_progress"
    events = [{"type": "response.created", "response": {**snapshot, "status": first}}]
    if queued:
        events.append({"type": "response.queued", "response": {**snapshot, "status": "queued"}})
    if running:
        events.append(
            {"type": "response.in_progress", "response": {**snapshot, "status": "in_progress"}}
        )
    return events


def _ending(response: JSON) -> JSON:
    status = response.get("status")
    if status == "cancelled":  # the Responses API has no event of its own for it
        return {
            "type": "error",
            "code": "response_cancelled",
            "message": f"response {response.get('id')!r} was cancelled",
            "param": None,
        }
    return {"type": f"response.{status}", "response": response}


def _output(response: JSON) -> list[JSON]:
    events: list[JSON] = []
    for index, item in enumerate(response.get("output") or []):
        events.extend(_item_events(index, item))
    return events


def _item_events(index: int, item: JSON) -> list[JSON]:
    kind = item.get("type")
    if kind == "message":
        started = {**item, "status": "in_progress", "content": []}
        parts = [
            event
            for content_index, part in enumerate(item.get("content") or [])
            for event in _part_events(item.get("id"), index, content_index, part)
        ]
    elif kind == "function_call":
        started = {**item, "status": "in_progress", "arguments": ""}
        at = {"item_id": item.get("id"), "output_index": index}
        arguments = item.get("arguments") or ""
        parts = [
            {"type": "response.function_call_arguments.delta", **at, "delta": arguments},
            {"type": "response.function_call_arguments.done", **at, "arguments": arguments},
        ]
    else:
        started, parts = item, []
    return [
        {"type": "response.output_item.added", "output_index": index, "item": started},
        *parts,
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def _part_events(item_id: Any, index: int, content_index: int, part: JSON) -> list[JSON]:
    at = {"item_id": item_id, "output_index": index, "content_index": content_index}
    if part.get("type") != "output_text":
        return [
            {"type": "response.content_part.added", **at, "part": part},
            {"type": "response.content_part.done", **at, "part": part},
        ]
    text = part.get("text") or ""
    return [
        {"type": "response.content_part.added", **at, "part": {**part, "text": ""}},
        *(
            {"type": "response.output_text.delta", **at, "delta": word, "logprobs": []}
            for word in WORDS.findall(text)
        ),
        {"type": "response.output_text.done", **at, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **at, "part": part},
    ]
