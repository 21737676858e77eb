"""The checks of an import's lines, each on the line and on what the lines before it left
(the hidden messages' seqs): `Refused` says what is wrong, the importer names the line."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from itertools import pairwise
from typing import Any

from pydantic import TypeAdapter, ValidationError

from api import items
from api.db.models import utcnow
from api.json_values import check_json_value, check_text
from api.schemas.messages import ChatMessageIn, ItemIn, MessageIn
from api.schemas.transfer import MessageLine, SessionLine, SummaryLine
from api.session_settings import SummaryOverrides, model_not_allowed


class Refused(Exception):
    """A line is wrong: the reason, without the line number the caller adds."""


def _checked(check: Any, value: Any, where: str) -> None:
    try:
        check(value, where)
    except ValueError as exc:
        raise Refused(str(exc)) from None


def check_session(line: SessionLine, allowed_models: frozenset[str] | None) -> None:
    """A session line whose counters agree, whose settings are valid overrides naming a model
    in `allowed_models` (None: any), and which has not expired already."""
    if line.format is None and line.last_seq:
        raise Refused("format: null, but the session holds messages")
    if line.expires_at is not None and line.expires_at <= utcnow():
        raise Refused("expires_at has passed: the session would be gone as it landed")
    for name in ("pinned_seq", "removed_count"):
        if getattr(line, name) > line.last_seq:
            raise Refused(f"{name} {getattr(line, name)} is past last_seq {line.last_seq}")
    try:
        model = SummaryOverrides.model_validate(line.settings).model
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        raise Refused(f"settings.{where}: {error['msg']}") from None
    if allowed_models is not None and model is not None and model not in allowed_models:
        raise Refused(model_not_allowed(model, allowed_models))
    _checked(check_json_value, line.metadata, "metadata")


def check_tombstone(line: MessageLine) -> None:
    """A removed message keeps nothing but its seq, role and times."""
    kept = [
        name
        for name in (
            "content",
            "name",
            "tool_calls",
            "tool_call_id",
            "metadata",
            "client_id",
            "item",
        )
        if getattr(line, name) is not None
    ]
    if line.token_count:
        kept.append("token_count")
    if kept:
        raise Refused(f"a removed message (a tombstone) keeps no {', '.join(kept)}")


_CHAT_MESSAGE: TypeAdapter[Any] = TypeAdapter(MessageIn)
"""The append's check of a chat message (its role's schema)."""


def check_message(line: MessageLine, message_format: str | None) -> ChatMessageIn | ItemIn:
    """A message the append would have stored: a chat message in an `openai` session, an item
    whose chat reading the line holds in a `responses` one; answered as the append takes it."""
    _checked(check_json_value, line.metadata, "metadata")
    if line.client_id is not None:
        _checked(check_text, line.client_id, "client_id")
    if message_format == "responses":
        if line.item is None:
            raise Refused("item: null in a `responses` session")
        _checked(items.check_item, line.item, "item")
        reading = items.projection(line.item)
        held = {
            "role": line.role,
            "content": line.content,
            "tool_calls": line.tool_calls,
            "tool_call_id": line.tool_call_id,
        }
        if {key: reading.get(key) for key in held} != held or line.name is not None:
            raise Refused("role, content, tool_calls and tool_call_id are not the item's reading")
        return ItemIn.model_construct(
            item=line.item, metadata=line.metadata, client_id=line.client_id
        )
    if line.item is not None:
        raise Refused("item: an item in an `openai` session")
    message = {
        "role": line.role,
        "content": line.content,
        "name": line.name,
        "tool_calls": line.tool_calls,
        "tool_call_id": line.tool_call_id,
    }
    try:
        chat: ChatMessageIn = _CHAT_MESSAGE.validate_python(
            {k: v for k, v in message.items() if v is not None}
        )
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"][1:])
        raise Refused(f"{where}: {error['msg']}" if where else error["msg"]) from None
    return chat.model_copy(update={"metadata": line.metadata, "client_id": line.client_id})


def check_summary(
    line: SummaryLine, last_seq: int, removed: array[int], hidden: array[int]
) -> None:
    """A summary line on its own and against the session's messages: `last_seq` the
    session's, `removed` the seqs of tombstones, `hidden` those of messages no view shows
    (both ascending)."""
    if not line.first_seq <= line.last_seq <= last_seq:
        raise Refused(
            f"seqs {line.first_seq}..{line.last_seq} are not a range of the session's "
            f"seqs 1..{last_seq}"
        )
    _check_covers(line, removed, hidden)
    erased = line.erased_at is not None
    if erased and (line.summary_text or line.summary_prompt):
        raise Refused("an erased summary keeps no summary_text and no summary_prompt")
    for name in ("summary_text", "summary_prompt", "model"):
        _checked(check_text, getattr(line, name), name)
    _checked(check_json_value, line.metadata, "metadata")


def _check_covers(line: SummaryLine, removed: array[int], hidden: array[int]) -> None:
    """The covered seqs lie in the range, as ascending disjoint runs whose ends are the
    summary's end messages; they hold every message of the range a view shows, and no
    tombstone unless the summary is erased."""
    covers = line.covers
    if not covers:
        raise Refused("covers: a summary covers at least one message")
    previous = line.first_seq - 1
    for first, last in covers:
        if first <= previous or last < first or last > line.last_seq:
            raise Refused(
                f"covers: [{first}, {last}] is not an ascending run of seqs inside "
                f"{line.first_seq}..{line.last_seq} after the runs before it"
            )
        previous = last
    count = sum(last - first + 1 for first, last in covers)
    if count != line.message_count:
        raise Refused(f"message_count {line.message_count}, but covers holds {count} seqs")
    ends = (covers[0][0], covers[-1][1])
    if (line.first_message_seq, line.last_message_seq) != ends:
        raise Refused(
            f"first_message_seq and last_message_seq are {line.first_message_seq} and "
            f"{line.last_message_seq}, not the ends of covers ({ends[0]} and {ends[1]})"
        )
    if line.erased_at is None:
        for first, last in covers:
            tombstone = _first_in(removed, first, last)
            if tombstone is not None:
                raise Refused(
                    f"covers seq {tombstone}, a removed message, and is not erased (a live or "
                    "superseded summary covers no tombstone)"
                )
    gaps = [(line.first_seq, covers[0][0] - 1), *_between(covers)]
    gaps.append((covers[-1][1] + 1, line.last_seq))
    for first, last in gaps:
        shown = _first_not_in(hidden, first, last)
        if shown is not None:
            raise Refused(f"does not cover seq {shown} of its range, a message views show")


def _between(covers: list[tuple[int, int]]) -> Iterable[tuple[int, int]]:
    return ((a[1] + 1, b[0] - 1) for a, b in pairwise(covers))


def _first_in(seqs: array[int], first: int, last: int) -> int | None:
    """The first of the ascending `seqs` in `first..last`."""
    at = bisect_left(seqs, first)
    return seqs[at] if at < len(seqs) and seqs[at] <= last else None


def _first_not_in(seqs: array[int], first: int, last: int) -> int | None:
    """The first seq of `first..last` that the ascending `seqs` lack."""
    if last < first:
        return None
    at = bisect_left(seqs, first)
    if bisect_right(seqs, last) - at == last - first + 1:
        return None
    seq = first
    while at < len(seqs) and seqs[at] == seq:
        at += 1
        seq += 1
    return seq
