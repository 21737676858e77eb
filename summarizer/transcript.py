"""Chat messages as transcript entries: the structure a summarizer reads, and its rendered lines.

One message becomes one `TranscriptEntry`, rendered as a line starting with a header
`[#<seq> <role>]`: tool calls are shown by name with abbreviated arguments, tool results
are previewed to a configurable length, content parts are flattened to text. A chat model
reads the rendered lines; the offline model reads the entries themselves.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from summarizer.text import clip_chars, utf8_safe
from summarizer.tokens import count_text

TOOL_RESULT_PREVIEW_CHARS = 1500
"""Default length of a tool result preview: results are often bulk data a summary rarely needs."""

TOOL_ARGS_PREVIEW_CHARS = 200
"""Default length of a tool call's arguments: enough for paths and queries, not for payloads."""

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


@dataclass(frozen=True)
class ShownCall:
    """A tool call as an assistant entry shows it."""

    name: str
    arguments: str
    """The arguments, whitespace collapsed and clipped to the configured length."""


@dataclass(frozen=True)
class TranscriptEntry:
    """One message as the transcript shows it; `render()` gives its line."""

    seq: int
    role: str
    label: str = ""
    """The participant's name, or for a tool result the tool's; empty when there is none."""
    text: str = ""
    """The text shown, stripped; a previewed tool result's without its cut marker."""
    preview_cut: bool = False
    """Whether `text` is a tool result's preview, cut at the configured length."""
    calls: tuple[ShownCall, ...] = ()

    @property
    def header(self) -> str:
        label = f" {self.label}" if self.label else ""
        return f"[#{self.seq} {self.role}{label}]"

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(call.name for call in self.calls)

    def render(self) -> str:
        """The transcript line of this entry (several lines when it makes tool calls)."""
        marker = PREVIEW_CUT if self.preview_cut else ""
        lines = [f"{self.header} {self.text}{marker}".rstrip()]
        lines.extend(f"{CALL_PREFIX}{call.name}({call.arguments})" for call in self.calls)
        return "\n".join(lines)


def transcript_entry(
    message: Mapping[str, Any], options: TranscriptOptions, call_names: Mapping[str, str]
) -> TranscriptEntry:
    """The entry of `message` (which carries its `seq`)."""
    role = str(message.get("role") or "user")
    text = content_text(message.get("content")).strip()
    label = ""
    preview_cut = False
    if role == "tool":
        call_id = str(message.get("tool_call_id") or "")
        label = str(message.get("name") or call_names.get(call_id) or "tool")
        if len(text) > options.tool_result_chars:
            preview = clip_chars(text, options.tool_result_chars, PREVIEW_CUT)
            text, preview_cut = preview.removesuffix(PREVIEW_CUT), True
    elif message.get("name"):
        label = str(message["name"])
    calls = tuple(
        _shown_call(call, options.tool_args_chars) for call in message.get("tool_calls") or ()
    )
    return TranscriptEntry(message.get("seq", 0), role, label, text, preview_cut, calls)


def _shown_call(call: Mapping[str, Any], limit: int) -> ShownCall:
    function = call.get("function") or {}
    return ShownCall(str(function.get("name") or "tool"), _arguments(function, limit))


def transcript_entries(
    messages: Sequence[Mapping[str, Any]], options: TranscriptOptions
) -> list[TranscriptEntry]:
    """One entry per message, in order."""
    names = _call_names(messages)
    return [transcript_entry(message, options, names) for message in messages]


def render(messages: Sequence[Mapping[str, Any]], options: TranscriptOptions) -> list[str]:
    """The transcript line of every message, in order."""
    return [entry.render() for entry in transcript_entries(messages, options)]


def _read_body(body: str) -> tuple[str, tuple[ShownCall, ...]]:
    text_lines: list[str] = []
    calls: list[ShownCall] = []
    for line in body.split("\n"):
        if line.startswith(CALL_PREFIX):
            name, _, arguments = line[len(CALL_PREFIX) :].partition("(")
            calls.append(ShownCall(name.strip(), arguments.removesuffix(")")))
        else:
            text_lines.append(line)
    return "\n".join(text_lines).replace(PREVIEW_CUT, "").strip(), tuple(calls)


def shown_entries(shown: Sequence[tuple[TranscriptEntry | None, str]]) -> list[TranscriptEntry]:
    """The entries as the lines forced truncation cut from them still show them.

    `shown` pairs each transcript line with the entry it was cut from (None for a line that
    is no entry's, like the omitted-messages marker). The shown part of a cut line is read
    back against its entry: its text, and the tool calls whose lines still begin with the
    call prefix. A line without its entry's header reads as more of the entry before it.
    The offline model thus summarizes a cut transcript as it did when it read the text.
    """
    entries: list[TranscriptEntry] = []
    for entry, line in shown:
        if entry is not None and line == entry.render():
            entries.append(entry)
        elif entry is not None and line.startswith(entry.header):
            body = line[len(entry.header) :].removeprefix(" ")
            text, calls = _read_body(body)
            entries.append(replace(entry, text=text, preview_cut=PREVIEW_CUT in body, calls=calls))
        elif entries:
            text, calls = _read_body(line)
            before = entries[-1]
            joined = f"{before.text}\n{text}".strip()
            entries[-1] = replace(before, text=joined, calls=before.calls + calls)
    return entries


def head_lines(lines: Sequence[str], head: str) -> list[str]:
    """What `head`, a clip of the transcript of `lines` keeping its start, shows of each line.

    Lines past the cut are gone; the last one shown ends with whatever `head` ends with
    (the clip's marker).
    """
    shown: list[str] = []
    start = last_start = 0
    for line in lines:
        if start >= len(head):
            break
        last_start = start
        start += len(utf8_safe(line)) + 1
        shown.append(head[last_start : start - 1])
    if shown:
        shown[-1] = head[last_start:]
    return shown


def entry_tokens(entry: str) -> int:
    """Tokens an entry adds to a transcript (its text and the newline joining it)."""
    return count_text(entry + "\n")


def join(entries: Sequence[str]) -> str:
    """The transcript text of consecutive entries."""
    return "\n".join(entries)
