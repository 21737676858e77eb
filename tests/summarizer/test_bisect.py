"""The recursion against the fake server: one call, bisect, merge, forced truncation."""

from __future__ import annotations

from collections.abc import Callable

from summarizer import SummarizerSettings, merge_summaries, summarize
from summarizer.settings import resolve_window
from summarizer.text import MIDDLE_MARKER
from tests.summarizer.builders import chat, filler, user
from tests.support.fake_llm import MARKER_PATTERN, FakeLLM

Settings = Callable[..., SummarizerSettings]

WINDOW = 4096
"""With target 800 the prompt budget is about 2,950 tokens: two 1,000-token messages fit."""


def within_window(fake_llm: FakeLLM, window: int) -> bool:
    return all(
        call.prompt_tokens + (call.max_tokens or 0) <= window
        for call in fake_llm.calls
        if call.status == 200
    )


async def test_input_that_fits_takes_one_call(fake_llm: FakeLLM, llm_settings: Settings) -> None:
    fake_llm.context_window = WINDOW
    result = await summarize(chat([200] * 6), llm_settings(model_context_tokens=WINDOW))
    assert result is not None
    assert result.metadata["llm_calls"] == 1
    assert result.metadata["chunk_count"] == 1 and result.metadata["max_depth"] == 0
    assert (result.first_seq, result.last_seq, result.message_count) == (1, 6, 6)


async def test_known_window_bisects_to_depth_two_with_four_chunks_and_no_failed_call(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.context_window = WINDOW
    result = await summarize(chat([1000] * 8), llm_settings(model_context_tokens=WINDOW))
    assert result is not None
    meta = result.metadata
    assert (meta["chunk_count"], meta["max_depth"]) == (4, 2)
    assert meta["llm_calls"] == 4 + 3  # four leaves, three pairwise merges
    assert meta["failed_llm_calls"] == 0
    assert fake_llm.statuses() == [200] * 7
    assert result.leaf_ranges == ((1, 2), (3, 4), (5, 6), (7, 8))
    assert not meta["truncated"]


async def test_unknown_window_learns_from_the_first_overflow(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.context_window = WINDOW
    result = await summarize(chat([1000] * 8), llm_settings())
    assert result is not None
    meta = result.metadata
    assert meta["chunk_count"] == 4
    assert meta["failed_llm_calls"] == 1 <= meta["max_depth"]
    assert meta["context_window"] == WINDOW


async def test_unknown_window_without_details_fails_at_most_once_per_level(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.context_window = WINDOW
    fake_llm.window_in_error = False
    result = await summarize(chat([1000] * 8), llm_settings())
    assert result is not None
    meta = result.metadata
    assert meta["chunk_count"] == 4
    assert 1 <= meta["failed_llm_calls"] <= meta["max_depth"]
    assert not meta["truncated"]


async def test_uneven_input_gives_three_leaves_merged_without_losing_a_marker(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.context_window = WINDOW
    fake_llm.mode = "marker_echo"
    messages = chat([2500, 1000, 1000, 1000], marker=True)
    result = await summarize(messages, llm_settings(model_context_tokens=WINDOW))
    assert result is not None
    assert result.metadata["chunk_count"] == 3
    assert result.metadata["llm_calls"] == 3 + 2
    assert MARKER_PATTERN.findall(result.summary_text) == [
        "MARKER-m1",
        "MARKER-m2",
        "MARKER-m3",
        "MARKER-m4",
    ]


async def test_rollup_merges_five_summaries_that_fit_together_in_one_call(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    """One call: each fact passes through the model once, not once per round of pairs."""
    fake_llm.mode = "marker_echo"
    texts = [f"Summary {i} mentions MARKER-s{i}." for i in range(5)]
    merged = await merge_summaries(texts, llm_settings())
    assert merged.metadata["llm_calls"] == 1
    assert merged.metadata["max_depth"] == 1
    assert merged.metadata["chunk_count"] == 5
    assert MARKER_PATTERN.findall(merged.summary_text) == [f"MARKER-s{i}" for i in range(5)]


async def test_rollup_merges_five_summaries_pairwise_when_they_do_not_fit_together(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.mode = "marker_echo"
    texts = [f"Summary {i} mentions MARKER-s{i}. " + filler(500) for i in range(5)]
    merged = await merge_summaries(
        texts, llm_settings(model_context_tokens=1600, merge_target_tokens=200)
    )
    assert merged.metadata["llm_calls"] == 4
    assert merged.metadata["max_depth"] == 3
    assert merged.metadata["chunk_count"] == 5
    assert merged.metadata["trigger_reason"] == "rollup"
    assert MARKER_PATTERN.findall(merged.summary_text) == [f"MARKER-s{i}" for i in range(5)]


async def test_overflowing_merge_merges_its_inputs_clipped(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.context_window = 2048
    texts = [filler(1500, "First summary:"), filler(1500, "Second summary:")]
    merged = await merge_summaries(texts, llm_settings(merge_target_tokens=300))
    assert merged.metadata["truncated"]
    assert merged.metadata["failed_llm_calls"] == 1  # window unknown: learned from one overflow
    last = fake_llm.calls[-1]
    assert last.status == 200 and MIDDLE_MARKER in fake_llm.prompts()[-1]
    assert "First summary" in fake_llm.prompts()[-1] and "Second summary" in fake_llm.prompts()[-1]


async def test_single_message_larger_than_the_window_is_force_truncated(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.context_window = 2048
    messages = [user(1, "BEGIN " + filler(10_000) + " END")]
    result = await summarize(messages, llm_settings(model_context_tokens=2048, target_tokens=200))
    assert result is not None
    meta = result.metadata
    assert meta["truncated"] and meta["chunk_count"] == 1 and meta["failed_llm_calls"] == 0
    prompt = fake_llm.prompts()[0]
    assert "BEGIN" in prompt and "END" in prompt and MIDDLE_MARKER in prompt
    assert within_window(fake_llm, 2048)


async def test_max_depth_reached_truncates_each_leaf(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.context_window = WINDOW
    settings = llm_settings(model_context_tokens=WINDOW, bisect_max_depth=1)
    result = await summarize(chat([1000] * 8), settings)
    assert result is not None
    meta = result.metadata
    assert (meta["chunk_count"], meta["max_depth"]) == (2, 1)
    assert meta["truncated"] and meta["failed_llm_calls"] == 0
    assert within_window(fake_llm, WINDOW)


async def test_bisect_disabled_truncates_in_one_call(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.context_window = WINDOW
    settings = llm_settings(model_context_tokens=WINDOW, bisect_enabled=False)
    result = await summarize(chat([1000] * 8), settings)
    assert result is not None
    assert result.metadata["llm_calls"] == 1 and result.metadata["truncated"]


async def test_halves_run_concurrently_within_the_bound(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.context_window = WINDOW
    fake_llm.latency_seconds = 0.2
    settings = llm_settings(model_context_tokens=WINDOW, max_concurrency=2)
    await summarize(chat([1000] * 8), settings)
    assert fake_llm.max_in_flight == 2


async def test_window_comes_from_litellm_model_info_when_not_set() -> None:
    assert await resolve_window(SummarizerSettings(model="gpt-3.5-turbo")) == 16385
    assert await resolve_window(SummarizerSettings(model="openai/unknown-model")) is None
    assert await resolve_window(SummarizerSettings(model="gpt-4o", model_context_tokens=999)) == 999


LITELLM_KNOWN_MODEL = "openai/gpt-4"
"""A model litellm's bundled map knows with a small window (8,192 input tokens)."""


async def test_window_from_litellm_model_info_splits_before_calling(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    window = await resolve_window(SummarizerSettings(model=LITELLM_KNOWN_MODEL))
    assert window == 8192
    fake_llm.context_window = window  # a call that did not fit would fail with a 400
    settings = llm_settings(model=LITELLM_KNOWN_MODEL)
    assert settings.model_context_tokens is None
    result = await summarize(chat([1000] * 12), settings)
    assert result is not None
    meta = result.metadata
    assert result.source_tokens > window and meta["context_window"] == window
    assert meta["failed_llm_calls"] == 0 and meta["llm_calls"] > 1
    assert meta["chunk_count"] >= 2 and fake_llm.statuses() == [200] * meta["llm_calls"]
