"""Context assembly on hand-made context entries: tool-pair repair and the token budget (no
database)."""

from __future__ import annotations

from typing import Any

from api.context import (
    MISSING_TOOL_RESULT,
    TRUNCATION_MARKER,
    Entry,
    assemble,
    tool_safe_units,
)
from tests.helpers import assert_tool_pairs_valid, contents


def entry(role: str, content: str | None = "", tokens: int = 10, **fields: Any) -> Entry:
    return Entry({"role": role, "content": content, **fields}, tokens)


def call(*call_ids: str, tokens: int = 10) -> Entry:
    calls = [
        {"id": cid, "type": "function", "function": {"name": "f", "arguments": "{}"}}
        for cid in call_ids
    ]
    return entry("assistant", None, tokens, tool_calls=calls)


def result(call_id: str, tokens: int = 10, content: str = "ok") -> Entry:
    return entry("tool", content, tokens, tool_call_id=call_id)


# --- tool_safe_units ------------------------------------------------------------------------


def test_plain_messages_form_one_unit_each() -> None:
    entries = [entry("user", "a"), entry("assistant", "b"), entry("user", "c")]
    assert tool_safe_units(entries) == [[entries[0]], [entries[1]], [entries[2]]]


def test_a_tool_call_and_its_result_form_one_unit() -> None:
    entries = [entry("user", "q"), call("c1"), result("c1")]
    assert tool_safe_units(entries) == [[entries[0]], [entries[1], entries[2]]]


def test_a_tool_result_without_its_call_is_dropped() -> None:
    entries = [result("gone"), entry("user", "q")]
    assert tool_safe_units(entries) == [[entries[1]]]


def test_a_call_without_a_result_gets_a_placeholder_result() -> None:
    units = tool_safe_units([call("c1"), entry("user", "next")])
    placeholder = units[0][1].message
    assert placeholder == {"role": "tool", "tool_call_id": "c1", "content": MISSING_TOOL_RESULT}


def test_the_placeholder_carries_a_positive_token_count() -> None:
    units = tool_safe_units([call("c1")])
    assert units[0][1].tokens > 0


def test_parallel_call_results_follow_in_call_order() -> None:
    entries = [call("a", "b", "c"), result("c"), result("a"), result("b")]
    (unit,) = tool_safe_units(entries)
    assert [i.message.get("tool_call_id") for i in unit] == [None, "a", "b", "c"]


def test_parallel_calls_with_one_missing_result_get_one_placeholder() -> None:
    units = tool_safe_units([call("a", "b"), result("b")])
    messages = [i.message for i in units[0]]
    assert messages[1] == {"role": "tool", "tool_call_id": "a", "content": MISSING_TOOL_RESULT}
    assert messages[2] is units[0][2].message and messages[2]["content"] == "ok"


def test_a_second_result_for_the_same_call_is_dropped() -> None:
    entries = [call("a"), result("a", content="first"), result("a", content="second")]
    (unit,) = tool_safe_units(entries)
    assert contents([i.message for i in unit]) == [None, "first"]


def test_a_result_separated_from_its_call_is_moved_next_to_it() -> None:
    entries = [call("a"), entry("user", "interjection"), result("a")]
    messages = [i.message for unit in tool_safe_units(entries) for i in unit]
    assert_tool_pairs_valid(messages)
    assert contents(messages) == [None, "ok", "interjection"]


# --- assemble without a budget --------------------------------------------------------------


def test_summaries_lead_the_context_then_messages_in_order() -> None:
    summaries = [entry("system", "s1"), entry("system", "s2")]
    messages = [entry("user", "u"), entry("assistant", "a")]
    assembled = assemble(summaries, messages, None)
    assert contents(assembled.messages) == ["s1", "s2", "u", "a"]


def test_token_estimate_is_the_sum_of_the_entries() -> None:
    assembled = assemble([entry("system", "s", 7)], [entry("user", "u", 5)], None)
    assert assembled.token_estimate == 12


def test_no_budget_truncates_nothing() -> None:
    messages = [entry("user", str(n), 1000) for n in range(20)]
    assembled = assemble([], messages, None)
    assert len(assembled.messages) == 20
    assert assembled.truncated_messages == 0


def test_the_assembled_context_repairs_tool_pairs() -> None:
    messages = [result("orphan"), entry("user", "q"), call("a", "b"), result("b")]
    assembled = assemble([], messages, None)
    assert_tool_pairs_valid(assembled.messages)
    assert len(assembled.messages) == 4


# --- assemble with a budget -----------------------------------------------------------------


def test_a_context_within_budget_gets_no_marker() -> None:
    messages = [entry("user", str(n), 10) for n in range(5)]
    assembled = assemble([], messages, 50)
    assert TRUNCATION_MARKER not in contents(assembled.messages)
    assert len(assembled.messages) == 5


def test_over_budget_the_oldest_messages_are_dropped() -> None:
    messages = [entry("user", str(n), 10) for n in range(10)]
    assembled = assemble([], messages, 45)
    kept = [c for c in contents(assembled.messages) if c != TRUNCATION_MARKER]
    assert kept == [str(n) for n in range(10 - len(kept), 10)]
    assert len(kept) < 10


def test_over_budget_the_token_estimate_stays_within_it() -> None:
    messages = [entry("user", str(n), 10) for n in range(10)]
    assembled = assemble([entry("system", "s", 10)], messages, 45)
    assert assembled.token_estimate <= 45


def test_over_budget_exactly_one_marker_follows_the_summaries() -> None:
    messages = [entry("user", str(n), 10) for n in range(10)]
    assembled = assemble([entry("system", "s", 5)], messages, 60)
    texts = contents(assembled.messages)
    assert texts.count(TRUNCATION_MARKER) == 1
    assert texts.index(TRUNCATION_MARKER) == 1


def test_truncated_messages_counts_the_dropped_messages() -> None:
    messages = [entry("user", str(n), 10) for n in range(10)]
    assembled = assemble([], messages, 45)
    kept = len(assembled.messages) - 1
    assert assembled.truncated_messages == 10 - kept


def test_the_newest_message_stays_even_when_it_alone_exceeds_the_budget() -> None:
    messages = [entry("user", "old", 10), entry("user", "huge", 500)]
    assembled = assemble([], messages, 50)
    assert contents(assembled.messages)[-1] == "huge"
    assert "old" not in contents(assembled.messages)


def test_a_tool_unit_that_does_not_fit_is_dropped_whole() -> None:
    messages = [
        entry("user", "q", 10),
        call("a", "b", tokens=10),
        result("a", 10, "ra"),
        result("b", 40, "rb"),
        entry("user", "last", 10),
    ]
    # 60 tokens would fit "last" + "rb" + marker, but never "rb" without its call.
    assembled = assemble([], messages, 60)
    assert_tool_pairs_valid(assembled.messages)
    assert contents(assembled.messages)[-1] == "last"
    assert "rb" not in contents(assembled.messages)


def test_a_tool_unit_that_fits_is_kept_whole() -> None:
    messages = [
        entry("user", "q", 100),
        call("a", tokens=10),
        result("a", 10, "ra"),
        entry("user", "last", 10),
    ]
    assembled = assemble([], messages, 50)
    assert_tool_pairs_valid(assembled.messages)
    assert contents(assembled.messages)[-3:] == [None, "ra", "last"]


def test_a_newest_tool_unit_over_budget_stays_whole() -> None:
    messages = [entry("user", "q", 10), call("a", tokens=10), result("a", 500, "big")]
    assembled = assemble([], messages, 50)
    assert_tool_pairs_valid(assembled.messages)
    assert contents(assembled.messages)[-2:] == [None, "big"]


def test_summaries_are_dropped_oldest_first_when_the_newest_message_needs_room() -> None:
    summaries = [entry("system", "s1", 30), entry("system", "s2", 30)]
    messages = [entry("user", "old", 10), entry("user", "new", 30)]
    assembled = assemble(summaries, messages, 80)
    texts = contents(assembled.messages)
    assert "s1" not in texts
    assert "s2" in texts
    assert texts[-1] == "new"
    assert assembled.token_estimate <= 80


def test_messages_the_dropped_summaries_made_room_for_stay() -> None:
    summaries = [entry("system", "s1", 100), entry("system", "s2", 40)]
    messages = [entry("user", str(n), 7) for n in range(10)]
    assembled = assemble(summaries, messages, 130)
    texts = contents(assembled.messages)
    assert texts == [TRUNCATION_MARKER, "s2", *(str(n) for n in range(10))], (
        "only the oldest summary goes, and the marker stands where it was"
    )
    assert assembled.token_estimate <= 130
    assert assembled.omitted.messages == [] and assembled.truncated_messages == 0


def test_the_newest_messages_that_fit_stay_once_the_summaries_went() -> None:
    summaries = [entry("system", "s1", 100), entry("system", "s2", 40)]
    messages = [Entry({"role": "user", "content": str(n)}, 10, source_id=n) for n in range(10)]
    assembled = assemble(summaries, messages, 100)
    texts = contents(assembled.messages)
    kept = [text for text in texts if text not in ("s1", "s2", TRUNCATION_MARKER)]
    assert "s1" not in texts and texts[-1] == "9"
    assert kept == [str(n) for n in range(10 - len(kept), 10)], "the newest, without a gap"
    assert assembled.token_estimate <= 100
    assert assembled.token_estimate + 10 > 100, "no room left for the next older message"
    assert assembled.omitted.messages == list(range(10 - len(kept)))


def test_a_hole_older_than_a_dropped_summary_stays_out_and_the_marker_stands_at_the_gap() -> None:
    summaries: list[Entry | list[Entry]] = [
        [entry("user", "hole 51", 13)],
        entry("system", "s 56-100", 80),
    ]
    assembled = assemble(summaries, [entry("user", "tail 101", 8)], 53)
    assert contents(assembled.messages) == [TRUNCATION_MARKER, "tail 101"], (
        "the hole would show before a summary that is not there, with no marker between"
    )


def test_a_hole_newer_than_every_dropped_summary_comes_back_in_place() -> None:
    summaries: list[Entry | list[Entry]] = [
        entry("system", "s 1-40", 100),
        [entry("user", "hole 41", 5)],
        entry("system", "s 46-90", 30),
    ]
    messages = [entry("user", "tail 91", 10), entry("user", "tail 92", 10)]
    assembled = assemble(summaries, messages, 80)
    assert contents(assembled.messages) == [
        TRUNCATION_MARKER,
        "hole 41",
        "s 46-90",
        "tail 91",
        "tail 92",
    ]
    assert assembled.token_estimate <= 80 and assembled.omitted.messages == []


def test_summaries_are_kept_when_dropping_messages_is_enough() -> None:
    summaries = [entry("system", "s1", 10), entry("system", "s2", 10)]
    messages = [entry("user", str(n), 10) for n in range(10)]
    assembled = assemble(summaries, messages, 60)
    assert contents(assembled.messages)[:2] == ["s1", "s2"]
