"""History assembly: stored rows in the format asked, then summaries and messages into an
OpenAI-valid context under a token budget; each message of the context is an `Entry` (a
context entry: its chat reading, token count and the shape shown)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from itertools import pairwise
from typing import Any, NamedTuple

from api.compaction_items import summary_heading
from api.context_edits import ClearedPart, ContextEdits, edit_context
from api.errors import UnfaithfulView
from api.items import (
    Unfaithful,
    chat_to_items,
    developer_item,
    item_to_chat,
    missing_output,
    parse_item,
)
from api.schemas import MessageFormat, UnsendableReason
from api.store import LoadedRows, MessageRow, SessionRow
from summarizer.cuts import JOINS_NEXT, legal_cuts
from summarizer.tokens import count_message

TRUNCATION_MARKER = "[Earlier messages truncated to manage context length]"
MISSING_TOOL_RESULT = "[No result was recorded for this tool call]"


class Entry(NamedTuple):
    """A context entry: one chat message in OpenAI shape with its token count; `shown`, when
    set, is what the context holds for it instead (the message in the format asked: Responses
    items). A named tuple: a history load makes one per message, and a frozen dataclass costs
    three times as much to make."""

    message: dict[str, Any]
    tokens: int
    shown: list[dict[str, Any]] | None = None
    source_id: int | None = None
    """The id of the stored message or summary it shows, for the answer's `omitted` lists."""
    added: bool = False
    """Made by the assembly (a placeholder result, the truncation marker): never counted as
    a message left out."""
    seq: int | None = None
    """The stored message's seq (placeholders of context editing name it)."""


@dataclass(frozen=True)
class UnreadSpan:
    """Messages a history load left unread: `count` of them (removed ones not counted) with
    seqs from `first_seq` to `last_seq`."""

    first_seq: int
    last_seq: int
    count: int


@dataclass(frozen=True)
class Omitted:
    """What the assembly left out of `context`, by kind (`History.omitted`)."""

    messages: list[int] = field(default_factory=list)
    """Ids of the messages dropped to fit the budget, oldest first."""
    summaries: list[int] = field(default_factory=list)
    """Ids of the summaries dropped to fit the budget, oldest first."""
    unsendable: list[tuple[int, UnsendableReason]] = field(default_factory=list)
    """Ids of the messages no context may hold, with the reason, in stored order."""
    unread: UnreadSpan | None = None
    """The older messages the loader left unread, the budget being spent."""

    def as_json(self) -> dict[str, Any]:
        """As the history answer's `omitted` says it (`api.schemas.Omitted`)."""
        return {
            "messages": self.messages,
            "unread": None if self.unread is None else asdict(self.unread),
            "summaries": self.summaries,
            "unsendable": [{"id": id_, "reason": why} for id_, why in self.unsendable],
        }


@dataclass(frozen=True)
class AssembledContext:
    messages: list[dict[str, Any]]
    token_estimate: int
    truncated_messages: int
    """Messages left out to fit the budget: those `omitted.messages` names, plus the unread."""
    omitted: Omitted = field(default_factory=Omitted)
    cleared: list[ClearedPart] = field(default_factory=list)
    """Parts shown as placeholders (context editing), in stored order."""
    over_budget: bool = False
    """Whether anything was left out to fit the budget (messages, summaries or the unread)."""


SUMMARY_TOKEN_CACHE_SIZE = 1024
"""Summary messages whose token counts a process remembers: a summary is immutable and every
history load sends it again, so counting it each time was a quarter of a load's CPU; 1024 of
them (a few MB of text) cover the sessions in active use."""


def summary_message(
    first_seq: int, last_seq: int, text: str, responses: bool = False, source_id: int | None = None
) -> Entry:
    """A summary as the system message heading the context (a `developer` item in the
    `responses` format)."""
    content = summary_heading(first_seq, last_seq, text)
    shown = [developer_item(content)] if responses else None
    message = {"role": "system", "content": content}
    return Entry(message, _system_message_tokens(content), shown, source_id)


@lru_cache(maxsize=SUMMARY_TOKEN_CACHE_SIZE)
def _system_message_tokens(content: str) -> int:
    return count_message({"role": "system", "content": content})


def assemble(
    summaries: Sequence[Entry | Sequence[Entry]],
    messages: Sequence[Entry],
    max_tokens: int | None,
    not_loaded: int = 0,
    pinned: Sequence[Entry] = (),
    responses: bool = False,
) -> AssembledContext:
    """The pinned prefix, summaries, then the messages with tool pairs repaired; fit to
    `max_tokens`.

    `summaries` are summary entries, oldest first, with the units of the messages of a hole
    between them (a list of entries each, shown in place until the hole's leaf is made again).
    The pinned prefix always stays, verbatim. Over budget, units are left out as `_fitted`
    says (a tool call with its results is one unit), and one marker message stands right after
    the newest unit left out. `not_loaded` counts older messages the loader left unread because
    the budget was already spent: they are dropped as well. With `responses`, the marker and
    the placeholder results the context adds are Responses items.

    Nothing is left out without a word: `omitted` names the messages and summaries dropped to
    fit, and the messages no unit could hold (`_unsendable`), by their `source_id`.
    """
    pinned_tokens = sum(entry.tokens for entry in pinned)
    if max_tokens is not None:
        max_tokens -= pinned_tokens
    units = _responses_units(messages) if responses else tool_safe_units(messages)
    unsendable = _unsendable(messages, units)
    head = [[item] if isinstance(item, Entry) else list(item) for item in summaries]
    summary_units = [head[i] for i, item in enumerate(summaries) if isinstance(item, Entry)]
    order = [*head, *units]  # every summary and message unit, oldest first, holes in place
    shown_ids = {id(unit) for unit in order}
    marker: list[Entry] = []
    if max_tokens is not None and (not_loaded or _tokens(order) > max_tokens):
        marker = [_marker(responses)]
        shown_ids = _fitted(order, summary_units, max_tokens - marker[0].tokens)
    summary_ids = {id(unit) for unit in summary_units}
    left_out = [entry for unit in summary_units if id(unit) not in shown_ids for entry in unit]
    missing = [i for i, unit in enumerate(order) if id(unit) not in shown_ids]
    dropped = [
        entry
        for index in missing
        if id(order[index]) not in summary_ids
        for entry in order[index]
        if not entry.added
    ]
    kept = [unit if id(unit) in shown_ids else [] for unit in order]
    if missing or not_loaded:
        # right after the newest unit left out; the unread alone lie before the tail
        kept.insert(missing[-1] + 1 if missing else len(head), marker)
    entries = [*pinned, *(entry for unit in kept for entry in unit)]
    return AssembledContext(
        messages=[shown for entry in entries for shown in entry.shown or (entry.message,)],
        token_estimate=sum(entry.tokens for entry in entries),
        truncated_messages=not_loaded + len(dropped),
        omitted=Omitted(
            messages=_ids(dropped),
            summaries=_ids(left_out),
            unsendable=unsendable,
        ),
        over_budget=bool(not_loaded or missing),
    )


def _fitted(
    order: Sequence[list[Entry]], summary_units: Sequence[list[Entry]], budget: int
) -> set[int]:
    """The ids of the units of `order` shown within `budget`: the message units (a hole's
    before the tail's) from the newest back while they fit (the newest always), then the
    oldest summaries dropped while still over, then the newest of the dropped message units
    that fit again, back to the first that does not or to the newest summary dropped (what
    shows around a gap is marked once)."""
    summary_ids = {id(unit) for unit in summary_units}
    message_units = [unit for unit in order if id(unit) not in summary_ids]
    budget -= _tokens(summary_units)
    kept: list[list[Entry]] = []
    for unit in reversed(message_units):
        if kept and _tokens([unit]) > budget:
            break
        kept.append(unit)
        budget -= _tokens([unit])
    dropped = message_units[: len(message_units) - len(kept)]
    kept_summaries = list(summary_units)
    while kept_summaries and budget < 0:
        budget += _tokens([kept_summaries.pop(0)])
    gone = len(summary_units) - len(kept_summaries)
    newest_gone = (
        next(i for i, unit in enumerate(order) if unit is summary_units[gone - 1]) if gone else -1
    )
    before_gap = {id(unit) for unit in order[: newest_gone + 1]}
    while dropped and id(dropped[-1]) not in before_gap and _tokens([dropped[-1]]) <= budget:
        budget -= _tokens([dropped[-1]])
        kept.append(dropped.pop())
    return {id(unit) for unit in [*kept, *kept_summaries]}


def _ids(entries: Sequence[Entry]) -> list[int]:
    return [entry.source_id for entry in entries if entry.source_id is not None]


def _unsendable(
    messages: Sequence[Entry], units: Sequence[Sequence[Entry]]
) -> list[tuple[int, UnsendableReason]]:
    """The messages the units left out, whatever the budget, each with the reason."""
    placed = {id(entry) for unit in units for entry in unit}
    answered = {
        entry.message.get("tool_call_id") for unit in units for entry in unit if not entry.added
    }
    left_out: list[tuple[int, UnsendableReason]] = []
    for entry in messages:
        if id(entry) in placed or entry.source_id is None:
            continue
        reason: UnsendableReason
        if entry.message.get(JOINS_NEXT):
            reason = "dangling_reasoning"
        elif entry.message.get("tool_call_id") in answered:
            reason = "duplicate_tool_result"
        else:
            reason = "orphan_tool_result"
        left_out.append((entry.source_id, reason))
    return left_out


def tool_safe_units(messages: Sequence[Entry]) -> list[list[Entry]]:
    """Group messages into units valid for an OpenAI-compatible API.

    An assistant message with `tool_calls` is followed by one result per call: the stored
    result, or a placeholder when none is in the window. A tool result whose call is not
    in the window is dropped.
    """
    results: dict[str, Entry] = {}
    for entry in messages:
        call_id = entry.message.get("tool_call_id")
        if entry.message["role"] == "tool" and call_id and call_id not in results:
            results[call_id] = entry
    used: set[str] = set()
    units: list[list[Entry]] = []
    for entry in messages:
        role = entry.message["role"]
        if role == "tool":
            continue
        unit = [entry]
        if role == "assistant":
            for call in entry.message.get("tool_calls") or ():
                call_id = call["id"]
                result = results.get(call_id)
                if result is None or call_id in used:
                    result = _placeholder(call_id)
                used.add(call_id)
                unit.append(result)
        units.append(unit)
    return units


def _responses_units(messages: Sequence[Entry]) -> list[list[Entry]]:
    """`tool_safe_units` of the `responses` format, where an output need not follow its call at
    once: entries in stored order, grouped between legal cuts, so no call is parted from
    its outputs; an output whose call is not in the window is dropped, and a call without an
    output gets a placeholder at the end of its unit. A `reasoning` item at the end is dropped:
    the Responses API refuses one without the item it led to."""
    declared: set[str] = set()
    kept: list[Entry] = []
    for entry in messages:
        if entry.message["role"] == "tool" and entry.message.get("tool_call_id") not in declared:
            continue
        declared.update(call["id"] for call in entry.message.get("tool_calls") or ())
        kept.append(entry)
    while kept and kept[-1].message.get(JOINS_NEXT):
        kept.pop()
    answered = {entry.message.get("tool_call_id") for entry in kept}
    cuts = legal_cuts([entry.message for entry in kept])
    if cuts[-1] != len(kept):
        # calls still waiting for their outputs close the list: their placeholders end it
        cuts.append(len(kept))
    units = [kept[start:end] for start, end in pairwise(cuts) if end > start]
    for unit in units:
        unanswered = [
            (call["id"], str((entry.shown or [{}])[0].get("type") or "function_call"))
            for entry in unit
            for call in entry.message.get("tool_calls") or ()
            if call["id"] not in answered
        ]
        unit.extend(_placeholder(call_id, True, kind) for call_id, kind in unanswered)
    return units


def _tokens(*parts: Sequence[Sequence[Entry]]) -> int:
    return sum(entry.tokens for units in parts for unit in units for entry in unit)


def _placeholder(call_id: str, responses: bool = False, call_type: str = "function_call") -> Entry:
    message = {"role": "tool", "tool_call_id": call_id, "content": MISSING_TOOL_RESULT}
    shown = [missing_output(call_id, MISSING_TOOL_RESULT, call_type)] if responses else None
    return Entry(message, count_message(message), shown, added=True)


def _marker(responses: bool) -> Entry:
    message = {"role": "system", "content": TRUNCATION_MARKER}
    shown = [developer_item(TRUNCATION_MARKER)] if responses else None
    return Entry(message, count_message(message), shown, added=True)


def shown_summaries(
    rows: LoadedRows, summary_limit: int | None
) -> tuple[LoadedRows, list[int], list[int]]:
    """`rows` with the newest `summary_limit` of their live summaries (None: every one, more
    than the session's limit only while a roll-up is owed), and the ids of those left out,
    oldest first, for `omitted.summaries`, and of the hole messages before them, for
    `omitted.messages`."""
    if summary_limit is None or len(rows.summaries) <= summary_limit:
        return rows, [], []
    kept = rows.summaries[-summary_limit:] if summary_limit else []
    start = kept[0].first_seq if kept else rows.after_seq + 1
    left_out = [summary.id for summary in rows.summaries[: len(rows.summaries) - len(kept)]]
    holes = [message for message in rows.holes if message.seq > start]
    gone = [message.id for message in rows.holes if message.seq < start]
    return replace(rows, summaries=kept, holes=holes), left_out, gone


def loaded_context(
    rows: LoadedRows,
    max_tokens: int | None,
    message_format: MessageFormat = "openai",
    edits: ContextEdits | None = None,
    left_out: Sequence[int] = (),
    left_out_messages: Sequence[int] = (),
) -> AssembledContext:
    """The context a history load answers in `message_format`: the pinned prefix, the
    summaries as messages and the loaded messages (as `edits` clears them, when given: `rows`
    then hold the whole unsummarized tail), under `max_tokens`; `left_out`, the live summaries
    a smaller `summary_limit` left out (`shown_summaries`), lead `omitted.summaries`.

    Raises `UnfaithfulView` when a message has no faithful shape in `message_format` (a
    Responses `reasoning` item in the `openai` format, a named chat message in the `responses`
    format)."""
    responses = message_format == "responses"
    messages = [_context_entry(message, message_format) for message in rows.messages]
    cleared: list[ClearedPart] = []
    if edits is not None and edits.active:
        messages, cleared = edit_context(messages, edits, responses)
    head, hole_unsendable = _head(rows, message_format)
    assembled = assemble(
        head,
        messages,
        max_tokens,
        not_loaded=rows.not_loaded,
        pinned=[_context_entry(message, message_format) for message in rows.pinned],
        responses=responses,
    )
    if cleared:
        assembled = replace(assembled, cleared=cleared)
    if hole_unsendable:
        unsendable = [*hole_unsendable, *assembled.omitted.unsendable]
        assembled = replace(assembled, omitted=replace(assembled.omitted, unsendable=unsendable))
    if left_out or left_out_messages:
        omitted = replace(
            assembled.omitted,
            summaries=[*left_out, *assembled.omitted.summaries],
            messages=[*left_out_messages, *assembled.omitted.messages],
        )
        truncated = assembled.truncated_messages + len(left_out_messages)
        assembled = replace(assembled, omitted=omitted, truncated_messages=truncated)
    if not rows.not_loaded:
        return assembled
    # the unread lie between the newest loaded summary (or the prefix) and the oldest read
    before_seq = rows.messages[0].seq if rows.messages else rows.after_seq + rows.not_loaded + 1
    unread = UnreadSpan(rows.after_seq + 1, before_seq - 1, rows.not_loaded)
    return replace(assembled, omitted=replace(assembled.omitted, unread=unread))


def _head(
    rows: LoadedRows, message_format: MessageFormat
) -> tuple[list[Entry | list[Entry]], list[tuple[int, UnsendableReason]]]:
    """The summaries as context entries, oldest first, with the units of the messages of each
    hole before the summary that follows it; and the hole messages no unit could hold."""
    responses = message_format == "responses"
    head: list[Entry | list[Entry]] = []
    unsendable: list[tuple[int, UnsendableReason]] = []
    waiting = list(rows.holes)
    for summary in rows.summaries:
        hole = [
            _context_entry(message, message_format)
            for message in waiting
            if message.seq < summary.first_seq
        ]
        waiting = waiting[len(hole) :]
        if hole:
            units = _responses_units(hole) if responses else tool_safe_units(hole)
            unsendable += _unsendable(hole, units)
            head += units
        first, last, text = summary.first_seq, summary.last_seq, summary.summary_text
        head.append(summary_message(first, last, text, responses, summary.id))
    return head, unsendable


def edited_tokens(messages: Sequence[MessageRow], edits: ContextEdits) -> int:
    """The tokens of `messages` (an unsummarized tail, oldest first) as a history load shows
    them under `edits`: what the proactive trigger reads when the session clears parts."""
    entries = [Entry(m.openai(), m.token_count, source_id=m.id, seq=m.seq) for m in messages]
    edited, _ = edit_context(entries, edits, responses=False)
    return sum(entry.tokens for entry in edited)


def _context_entry(message: MessageRow, message_format: MessageFormat) -> Entry:
    """A stored message in the context: its chat reading for the rules (pairs, budget), shown
    in `message_format`: a Responses item as appended, or converted where that is exact."""
    if message.item is None and message_format == "openai":
        return Entry(message.openai(), message.token_count, source_id=message.id, seq=message.seq)
    where = f"message seq {message.seq}"
    chat = message.openai()
    try:
        if message.item is None:
            shown = chat_to_items(chat, where)
        elif message_format == "responses":
            shown = [parse_item(message.item)]
            if shown[0].get("type") == "reasoning":
                chat[JOINS_NEXT] = True  # never parted from the item it led to
        else:
            shown = [item_to_chat(parse_item(message.item), where)]
    except Unfaithful as exc:
        raise UnfaithfulView(
            f"{exc}; load this session with format={_other(message_format)}"
        ) from exc
    return Entry(chat, message.token_count, shown, message.id, seq=message.seq)


def session_format(session: SessionRow) -> MessageFormat:
    """The format a session's messages are written in (chat messages until fixed)."""
    return "responses" if session.format == "responses" else "openai"


def _other(message_format: MessageFormat) -> MessageFormat:
    return "openai" if message_format == "responses" else "responses"
