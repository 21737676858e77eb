"""The transcript: role labels, tool calls by name, previews, content parts."""

from __future__ import annotations

from summarizer.transcript import PREVIEW_CUT, TranscriptOptions, content_text, render
from tests.summarizer.builders import call, result, user


def test_entries_carry_seq_and_role() -> None:
    [entry] = render([user(7, "hello")], TranscriptOptions())
    assert entry == "[#7 user] hello"


def test_tool_calls_are_shown_by_name_with_abbreviated_arguments() -> None:
    message = call(3, "c1", name="read_file")
    message["tool_calls"][0]["function"]["arguments"] = '{"path": "/etc/' + "x" * 500 + '"}'
    [entry] = render([message], TranscriptOptions(tool_args_chars=40))
    header, call_line = entry.split("\n")
    assert header == "[#3 assistant]"
    assert call_line.startswith('→ read_file({"path": "/etc/')
    assert len(call_line) < 60


def test_tool_results_are_previewed_to_the_configured_length() -> None:
    messages = [call(1, "c1", name="fetch"), result(2, "c1", "y" * 5000)]
    entries = render(messages, TranscriptOptions(tool_result_chars=100))
    assert entries[1].startswith("[#2 tool fetch] yyy")
    assert entries[1].endswith(PREVIEW_CUT)
    assert len(entries[1]) < 130


def test_content_parts_are_flattened_with_placeholders() -> None:
    parts = [
        {"type": "text", "text": "look at this"},
        {"type": "image_url", "image_url": {"url": "data:..."}},
    ]
    assert content_text(parts) == "look at this\n[image_url]"
