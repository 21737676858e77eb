"""Context editing: old tool results (and optionally their calls' arguments) and old image and
file parts shown as short placeholders in the loaded context. A view only: the stored messages
stay as appended, the summarizer reads them in full, and turning a setting off brings them back.

The rules follow Anthropic's `clear_tool_uses` (docs/context-editing.md): once the raw tokens of
the unsummarized tail pass a trigger, every tool result but the newest `keep` (and those of
excluded tools) is cleared, oldest first, in steps of at least `at_least` tokens. The steps are
counted from the oldest result of the tail, so a new message never moves a step already taken:
the cleared prefix changes only when a whole new step is due, and a provider's prompt cache of
the context keeps hitting in between.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, Protocol, Self, TypeVar

from api.session_settings import SummaryPolicy
from summarizer.tokens import count_message

ClearedKind = Literal["tool_result", "tool_input", "file_part"]

FILE_PART_TYPES = frozenset({"image_url", "input_image", "image", "file", "input_file"})
"""Content parts that carry an image or a file rather than text."""

_LABEL_CHARS = 80
"""Characters of an image URL or a file name a placeholder repeats."""


@dataclass(frozen=True)
class ClearedPart:
    """A part of a stored message the context shows as a placeholder (`History.cleared`)."""

    id: int
    """The message's id."""
    kind: ClearedKind
    tokens: int
    """What the placeholder saves: the part's tokens less the placeholder's."""


@dataclass(frozen=True)
class EditOverrides:
    """A history request's overrides of the session's context editing (None: the session's
    setting); fields as in `ContextEdits`."""

    tool_results_trigger_tokens: int | None = None
    tool_results_keep: int | None = None
    tool_results_at_least_tokens: int | None = None
    exclude_tools: frozenset[str] | None = None
    clear_tool_inputs: bool | None = None
    file_parts_keep: int | None = None


@dataclass(frozen=True)
class ContextEdits:
    """What a history load clears: the session's settings, overridden per request."""

    tool_results_trigger_tokens: int = 0
    """Raw tokens of the unsummarized tail past which tool results are cleared (0: never)."""
    tool_results_keep: int = 3
    tool_results_at_least_tokens: int = 0
    exclude_tools: frozenset[str] = frozenset()
    clear_tool_inputs: bool = False
    file_parts_keep: int | None = None
    """Newest image and file parts shown as sent (None: all of them)."""

    @classmethod
    def of(cls, policy: SummaryPolicy, overrides: EditOverrides | None = None) -> ContextEdits:
        """The edits `policy` asks for, with a request's `overrides` on top."""
        edits = cls(
            tool_results_trigger_tokens=policy.clear_tool_results_trigger_tokens,
            tool_results_keep=policy.clear_tool_results_keep,
            tool_results_at_least_tokens=policy.clear_tool_results_at_least_tokens,
            exclude_tools=frozenset(policy.clear_tool_results_exclude_tools),
            clear_tool_inputs=policy.clear_tool_inputs,
            file_parts_keep=policy.clear_file_parts_keep,
        )
        if overrides is None:
            return edits
        given = {key: value for key, value in asdict(overrides).items() if value is not None}
        return replace(edits, **given)

    @property
    def active(self) -> bool:
        """Whether anything may be cleared: then a load reads the whole unsummarized tail, as
        which results are cleared depends on all of it."""
        return self.tool_results_trigger_tokens > 0 or self.file_parts_keep is not None


class EditableEntry(Protocol):
    """A context entry (`api.context.Entry`) as the edits read and remake it: a named tuple
    (remade with `_replace`)."""

    def _replace(
        self,
        *,
        message: dict[str, Any] = ...,
        tokens: int = ...,
        shown: list[dict[str, Any]] | None = ...,
    ) -> Self: ...

    @property
    def message(self) -> dict[str, Any]: ...
    @property
    def tokens(self) -> int: ...
    @property
    def shown(self) -> list[dict[str, Any]] | None: ...
    @property
    def source_id(self) -> int | None: ...
    @property
    def seq(self) -> int | None: ...


E = TypeVar("E", bound=EditableEntry)


def edit_context(
    entries: Sequence[E], edits: ContextEdits, responses: bool
) -> tuple[list[E], list[ClearedPart]]:
    """`entries` (the unsummarized tail, oldest first) with the parts `edits` clears shown as
    placeholders, their token counts recounted; and what was cleared, in stored order.
    `responses`: the entries are shown as Responses items (else as chat messages)."""
    edited = list(entries)
    cleared: list[ClearedPart] = []
    names = _tool_names(entries)
    results = _results_to_clear(entries, edits, names)
    for index in results:
        edited[index], part = _clear_result(edited[index], names)
        cleared.append(part)
    if edits.clear_tool_inputs and results:
        call_ids = {entries[index].message.get("tool_call_id") for index in results}
        for index, entry in enumerate(edited):
            if entry.message.get("tool_calls") and entry.source_id is not None:
                edited[index], inputs = _clear_inputs(entry, call_ids, responses)
                cleared.extend(inputs)
    if edits.file_parts_keep is not None:
        cleared.extend(_clear_file_parts(edited, edits.file_parts_keep, responses))
    order = {entry.source_id: index for index, entry in enumerate(entries)}
    cleared.sort(key=lambda part: order.get(part.id, 0))
    return edited, cleared


def _results_to_clear(
    entries: Sequence[EditableEntry], edits: ContextEdits, names: dict[Any, str]
) -> list[int]:
    """Indexes of the tool results to clear: none under the trigger; else every result but
    the newest `keep` and those of excluded tools, oldest first, up to the last whole step of
    `at_least` tokens."""
    if edits.tool_results_trigger_tokens <= 0:
        return []
    if sum(entry.tokens for entry in entries) <= edits.tool_results_trigger_tokens:
        return []
    results = [
        index
        for index, entry in enumerate(entries)
        if entry.message.get("role") == "tool"
        and entry.source_id is not None
        and _text_output(entry)
    ]
    candidates = results[: max(len(results) - edits.tool_results_keep, 0)]
    chosen: list[int] = []
    step: list[int] = []
    step_tokens = 0
    for index in candidates:
        entry = entries[index]
        if names.get(entry.message.get("tool_call_id")) in edits.exclude_tools:
            continue
        saved = entry.tokens - _result_tokens(entry, names)
        if saved <= 0:
            continue
        step.append(index)
        step_tokens += saved
        if step_tokens >= edits.tool_results_at_least_tokens:
            chosen.extend(step)
            step, step_tokens = [], 0
    return chosen


TEXT_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
"""Responses outputs a text may stand for; others (a computer call's screenshot, ...) have a
shape of their own and are never cleared."""


def _text_output(entry: EditableEntry) -> bool:
    """Whether a tool result is shown as a chat tool message or as an output a text may
    replace."""
    return entry.shown is None or all(
        item.get("role") == "tool" or item.get("type") in TEXT_OUTPUTS for item in entry.shown
    )


def _tool_names(entries: Sequence[EditableEntry]) -> dict[Any, str]:
    """Call id -> the tool's name, from the calls that declare them (a chat tool result may
    name its tool itself)."""
    names: dict[Any, str] = {}
    for entry in entries:
        for call in entry.message.get("tool_calls") or ():
            names[call.get("id")] = str((call.get("function") or {}).get("name") or "a tool")
        if entry.message.get("role") == "tool" and entry.message.get("name"):
            names.setdefault(entry.message.get("tool_call_id"), str(entry.message["name"]))
    return names


def _where(entry: EditableEntry) -> str:
    return f"message {entry.source_id} (seq {entry.seq}) holds it in full"


def _result_placeholder(entry: EditableEntry, names: dict[Any, str]) -> str:
    name = names.get(entry.message.get("tool_call_id"), "a tool")
    return f"[Result of {name} cleared from the context ({entry.tokens} tokens); {_where(entry)}]"


def _result_tokens(entry: EditableEntry, names: dict[Any, str]) -> int:
    return count_message({**entry.message, "content": _result_placeholder(entry, names)})


def _clear_result(entry: E, names: dict[Any, str]) -> tuple[E, ClearedPart]:
    text = _result_placeholder(entry, names)
    message = {**entry.message, "content": text}
    shown = None
    if entry.shown is not None:
        shown = [
            {**item, "output": text} if "output" in item else {**item, "content": text}
            for item in entry.shown
        ]
    tokens = count_message(message)
    part = ClearedPart(_id(entry), "tool_result", entry.tokens - tokens)
    return entry._replace(message=message, tokens=tokens, shown=shown), part


def _clear_inputs(entry: E, call_ids: set[Any], responses: bool) -> tuple[E, list[ClearedPart]]:
    """`entry` (a message with tool calls) with the arguments of the calls in `call_ids`
    cleared."""
    calls = entry.message["tool_calls"]
    if not any(call.get("id") in call_ids for call in calls):
        return entry, []
    note = json.dumps({"cleared": f"arguments cleared from the context; {_where(entry)}"})
    message = {
        **entry.message,
        "tool_calls": [
            {**call, "function": {**call["function"], "arguments": note}}
            if call.get("id") in call_ids
            else call
            for call in calls
        ],
    }
    shown = entry.shown
    if shown is not None:
        shown = [_cleared_call_shown(item, call_ids, note, responses) for item in shown]
    tokens = count_message(message)
    part = ClearedPart(_id(entry), "tool_input", entry.tokens - tokens)
    return entry._replace(message=message, tokens=tokens, shown=shown), [part]


def _cleared_call_shown(
    item: dict[str, Any], call_ids: set[Any], note: str, responses: bool
) -> dict[str, Any]:
    if responses:
        if item.get("call_id") not in call_ids:
            return item
        if item.get("type") == "function_call":
            return {**item, "arguments": note}
        if item.get("type") == "custom_tool_call":
            return {**item, "input": note}
        return item
    return {
        **item,
        "tool_calls": [
            {**call, "function": {**call["function"], "arguments": note}}
            if call.get("id") in call_ids
            else call
            for call in item.get("tool_calls") or ()
        ]
        or None,
    }


def _clear_file_parts(entries: list[E], keep: int, responses: bool) -> list[ClearedPart]:
    """Replace, in place, every image and file part of `entries` but the newest `keep` by a
    text placeholder; what was cleared."""
    cleared: list[ClearedPart] = []
    kept = 0
    for index in range(len(entries) - 1, -1, -1):
        entry = entries[index]
        parts = _parts(entry)
        if entry.source_id is None or parts is None:
            continue
        files = [i for i, part in enumerate(parts) if _is_file(part)]
        newest_first = list(reversed(files))
        to_clear = newest_first[max(keep - kept, 0) :]
        kept += len(newest_first) - len(to_clear)
        if not to_clear:
            continue
        texts = {i: _file_placeholder(parts[i], entry) for i in to_clear}
        message = {**entry.message}
        content = message.get("content")
        if isinstance(content, list) and len(content) == len(parts):
            message["content"] = [
                {"type": "text", "text": texts[i]} if i in texts else part
                for i, part in enumerate(content)
            ]
        shown = entry.shown
        if shown is not None:
            text_type = "input_text" if responses else "text"
            shown = [
                {
                    **shown[0],
                    "content": [
                        {"type": text_type, "text": texts[i]} if i in texts else part
                        for i, part in enumerate(parts)
                    ],
                },
                *shown[1:],
            ]
        tokens = count_message(message)
        cleared.append(ClearedPart(_id(entry), "file_part", entry.tokens - tokens))
        entries[index] = entry._replace(message=message, tokens=tokens, shown=shown)
    return cleared


def _parts(entry: EditableEntry) -> list[Any] | None:
    """The content parts as shown (the first shown item's, or the chat message's)."""
    content = (entry.shown[0] if entry.shown else entry.message).get("content")
    return content if isinstance(content, list) else None


def _is_file(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") in FILE_PART_TYPES


def _file_placeholder(part: dict[str, Any], entry: EditableEntry) -> str:
    kind = "Image" if "image" in str(part.get("type")) else "File"
    return f"[{kind} cleared from the context: {_label(part)}; {_where(entry)}]"


def _label(part: dict[str, Any]) -> str:
    """What names the image or file: its file name, its URL, or its media type and size."""
    nested = part.get(part["type"])
    body: dict[str, Any] = nested if isinstance(nested, dict) else part
    name = body.get("filename") or body.get("file_id")
    if isinstance(name, str) and name:
        return name[:_LABEL_CHARS]
    url = body.get("url") or body.get("image_url") or body.get("file_url") or body.get("file_data")
    if isinstance(url, dict):
        url = url.get("url")
    if not isinstance(url, str) or not url:
        return "no name"
    if url.startswith("data:"):
        media_type = url[5:].split(";", 1)[0].split(",", 1)[0] or "data"
        return f"{media_type}, {len(url)} characters inline"
    return url[:_LABEL_CHARS]


def _id(entry: EditableEntry) -> int:
    return entry.source_id if entry.source_id is not None else 0
