"""The transcript: role labels, tool calls by name, previews, content parts, cut lines read back."""

from __future__ import annotations

from dataclasses import replace

from summarizer.text import MIDDLE_MARKER, clip_middle
from summarizer.transcript import (
    PREVIEW_CUT,
    TranscriptOptions,
    content_text,
    head_lines,
    join,
    render,
    shown_entries,
    transcript_entries,
)
from tests.summarizer.builders import call, filler, result, user


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


def test_entries_render_to_the_transcript_lines() -> None:
    messages = [user(1, "hi"), call(2, "c1", name="fetch"), result(3, "c1", "y" * 200)]
    entries = transcript_entries(messages, TranscriptOptions(tool_result_chars=50))
    assert [entry.render() for entry in entries] == render(
        messages, TranscriptOptions(tool_result_chars=50)
    )
    assert entries[1].tool_names == ("fetch",)
    assert entries[2].label == "fetch" and entries[2].preview_cut
    assert PREVIEW_CUT not in entries[2].text


def test_a_cut_line_is_read_back_against_its_entry() -> None:
    message = call(4, "c1", name="read_file")
    message["content"] = "First part. " + filler(300) + " Last part."
    [entry] = transcript_entries([message], TranscriptOptions())
    line = clip_middle(entry.render(), 40)
    [shown] = shown_entries([(entry, line)])
    assert (shown.seq, shown.role, shown.tool_names) == (4, "assistant", ("read_file",))
    assert shown.text.startswith("First part.") and shown.text.endswith("Last part.")
    assert MIDDLE_MARKER.strip() in shown.text


def test_a_line_without_its_header_reads_as_more_of_the_entry_before() -> None:
    first, second = transcript_entries(
        [user(1, "Keep it."), user(2, "Second.")], TranscriptOptions()
    )
    omitted = "[… 5 messages omitted to fit the window …]"
    shown = shown_entries([(first, first.render()), (None, omitted), (second, "2 user] Second.")])
    assert shown == [replace(first, text=f"Keep it.\n{omitted}\n2 user] Second.")]


def test_a_transcript_cut_after_its_head_shows_the_lines_before_the_cut() -> None:
    lines = ["[#1 user] one", "[#2 assistant] two\n→ search(x)", "[#3 user] three"]
    assert head_lines(lines, join(lines)) == lines
    assert head_lines(lines, "[#1 user] one\n[#2 assistant] tw…") == [
        "[#1 user] one",
        "[#2 assistant] tw…",
    ]
    assert head_lines(lines, "[#1 user] one…") == ["[#1 user] one…"]
