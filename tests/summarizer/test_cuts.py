"""Cut points never separate a tool call from its results."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from summarizer.cuts import balanced_cut, legal_cuts, midpoint_cut, summarizable_count
from tests.summarizer.builders import assistant, call, result, separates_a_call, user


def tool_pair_chat() -> list[dict[str, Any]]:
    return [
        user(1, "find the report"),
        call(2, "c1"),
        result(3, "c1", "report.pdf"),
        assistant(4, "found it"),
        user(5, "thanks"),
    ]


def parallel_chat() -> list[dict[str, Any]]:
    return [
        user(1, "weather in three cities"),
        call(2, "a", "b", "c", name="weather"),
        result(3, "a", "sunny"),
        result(4, "b", "rain"),
        result(5, "c", "snow"),
        assistant(6, "sunny, rain, snow"),
    ]


def test_cuts_inside_a_tool_exchange_are_illegal() -> None:
    assert legal_cuts(tool_pair_chat()) == [0, 1, 3, 4, 5]
    assert legal_cuts(parallel_chat()) == [0, 1, 5, 6]


def test_keep_last_n_boundary_moves_back_before_the_tool_call() -> None:
    # keeping 3 would cut between the call (seq 2) and its result (seq 3)
    assert summarizable_count(tool_pair_chat(), keep_last_n=3) == 1


def test_keep_last_n_boundary_between_parallel_results_moves_before_the_call() -> None:
    for keep in (2, 3, 4):
        assert summarizable_count(parallel_chat(), keep_last_n=keep) == 1


def test_keep_last_n_on_a_legal_cut_is_kept() -> None:
    assert summarizable_count(parallel_chat(), keep_last_n=1) == 5
    assert summarizable_count(tool_pair_chat(), keep_last_n=2) == 3


def test_pending_call_at_the_end_is_not_summarized() -> None:
    messages = [user(1, "look it up"), call(2, "x", "y"), result(3, "x")]
    assert summarizable_count(messages, keep_last_n=0) == 1


def test_parallel_calls_one_per_message_pending_at_the_end_stay_together() -> None:
    """Responses `function_call` items are one call per message: none of them is cut off
    from the rest while their outputs have not arrived."""
    messages = [user(1, "three cities"), call(2, "a"), call(3, "b"), call(4, "c")]
    assert legal_cuts(messages) == [0, 1]
    assert summarizable_count(messages, keep_last_n=2) == 1
    answered = [*messages, result(5, "c"), result(6, "a"), result(7, "b"), user(8, "and?")]
    assert legal_cuts(answered) == [0, 1, 7, 8]


def test_sequential_tool_turns_can_still_be_cut_between_them() -> None:
    messages = [call(1, "a"), result(2, "a"), call(3, "b"), result(4, "b"), call(5, "c")]
    assert legal_cuts(messages) == [0, 2, 4]


def test_abandoned_call_does_not_block_later_cuts() -> None:
    messages = [user(1, "look it up"), call(2, "x"), user(3, "never mind"), assistant(4, "ok")]
    assert summarizable_count(messages, keep_last_n=1) == 3


def test_result_arriving_after_other_messages_stays_with_its_call() -> None:
    messages = [call(1, "late"), user(2, "still there?"), result(3, "late"), user(4, "ok")]
    assert legal_cuts(messages) == [0, 3, 4]


def test_keep_more_than_everything_leaves_nothing() -> None:
    assert summarizable_count(tool_pair_chat(), keep_last_n=99) == 0


def test_midpoint_cut_is_the_legal_cut_nearest_the_token_midpoint() -> None:
    prefix = [0, 10, 20, 30, 40, 50, 60]
    assert midpoint_cut([0, 1, 2, 3, 4, 5, 6], prefix, 0, 6) == 3
    assert midpoint_cut([0, 1, 4, 6], prefix, 0, 6) == 4  # 40 is nearer 30 than 10
    assert midpoint_cut([0, 1, 5, 6], prefix, 0, 6) == 1  # a tie goes to the earlier cut
    assert midpoint_cut([0, 6], prefix, 0, 6) is None


@st.composite
def tool_chats(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Random chats of user/assistant messages and tool calls with 1-3 parallel results."""
    messages: list[dict[str, Any]] = []
    for step in range(draw(st.integers(1, 25))):
        seq = len(messages) + 1
        kind = draw(st.sampled_from(["user", "assistant", "tools"]))
        if kind == "user":
            messages.append(user(seq, "question"))
        elif kind == "assistant":
            messages.append(assistant(seq, "answer"))
        else:
            ids = [f"s{step}c{i}" for i in range(draw(st.integers(1, 3)))]
            messages.append(call(seq, *ids))
            for call_id in ids:
                messages.append(result(len(messages) + 1, call_id))
    return messages


@given(tool_chats(), st.integers(0, 30))
def test_summarizable_count_is_the_largest_legal_boundary(
    messages: list[dict[str, Any]], keep: int
) -> None:
    count = summarizable_count(messages, keep)
    assert count <= max(0, len(messages) - keep)
    assert not separates_a_call(messages, count)
    for larger in range(count + 1, max(0, len(messages) - keep) + 1):
        assert separates_a_call(messages, larger)


def test_balanced_cut_saves_a_leaf_the_midpoint_would_waste() -> None:
    prefix = list(range(806))  # 805 one-token messages: 8.05 rooms of 100 tokens
    cuts = list(range(806))
    assert midpoint_cut(cuts, prefix, 0, 805) == 402  # 4.02 rooms a side: 5 + 5 leaves
    cut = balanced_cut(cuts, prefix, 0, 805, room=100)
    assert cut is not None
    assert -(-cut // 100) + -(-(805 - cut) // 100) == 9


def test_balanced_cut_without_a_room_is_the_midpoint() -> None:
    prefix = [0, 10, 20, 30, 40]
    assert balanced_cut([0, 1, 2, 3, 4], prefix, 0, 4, room=None) == 2
