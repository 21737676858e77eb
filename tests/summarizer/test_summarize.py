"""The public entry point: boundaries, metadata, previous summary, the no-progress guard."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from summarizer import SummarizerSettings, merge_summaries, summarize
from summarizer.prompts import CONTINUE_PROMPT, PREVIOUS_TAG, PROMPT_VERSION, SUMMARY_PROMPT
from summarizer.transcript import PREVIEW_CUT
from tests.summarizer.builders import assistant, call, chat, filler, result, user
from tests.support.fake_llm import FakeLLM

Settings = Callable[..., SummarizerSettings]

DESIGN_KEYS = {
    "algorithm",
    "trigger",
    "trigger_reason",
    "chunk_count",
    "max_depth",
    "truncated",
    "compression_ratio",
    "input_tokens",
    "output_tokens",
    "llm_calls",
    "failed_llm_calls",
    "duration_ms",
}


async def test_metadata_has_every_design_key_with_real_counts(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    result_ = await summarize(
        chat([300] * 4),
        llm_settings(),
        trigger="proactive",
        trigger_reason="message_limit",
    )
    assert result_ is not None
    meta = result_.metadata
    assert DESIGN_KEYS.issubset(meta)
    assert meta["algorithm"] == "bisect_v1" and meta["prompt_version"] == PROMPT_VERSION
    assert (meta["trigger"], meta["trigger_reason"]) == ("proactive", "message_limit")
    assert meta["input_tokens"] == fake_llm.calls[0].prompt_tokens
    assert meta["output_tokens"] == result_.summary_tokens
    assert meta["compression_ratio"] == round(result_.summary_tokens / result_.source_tokens, 4)
    assert result_.prompt == SUMMARY_PROMPT and result_.model == "openai/fake-summarizer"


async def test_nothing_to_summarize_returns_none() -> None:
    settings = SummarizerSettings(keep_last_n=5)
    assert await summarize(chat([10] * 5), settings) is None
    assert await summarize([], SummarizerSettings()) is None


async def test_keep_last_n_boundary_moves_back_before_a_tool_pair() -> None:
    messages = [
        user(1, filler(100, "Find the quarterly report.")),
        assistant(2, filler(100, "Looking.")),
        call(3, "c1", name="search"),
        result(4, "c1", "report-q3.pdf"),
        assistant(5, "Here it is."),
    ]
    summary = await summarize(messages, SummarizerSettings(keep_last_n=2))
    assert summary is not None
    assert (summary.first_seq, summary.last_seq, summary.message_count) == (1, 2, 2)


async def test_keep_last_n_boundary_moves_back_before_parallel_calls() -> None:
    messages = [
        user(1, filler(100, "Weather in three cities?")),
        call(2, "a", "b", "c", name="weather"),
        result(3, "a", "sunny"),
        result(4, "b", "rain"),
        result(5, "c", "snow"),
        assistant(6, "Sunny, rain and snow."),
        user(7, "thanks"),
    ]
    summary = await summarize(messages, SummarizerSettings(keep_last_n=3))
    assert summary is not None
    assert (summary.last_seq, summary.message_count) == (1, 1)


async def test_previous_summary_is_continued_not_resummarized(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    previous = "Earlier: the user set up PROJECT-ALPHA on PostgreSQL."
    result_ = await summarize(chat([300] * 4), llm_settings(previous_summary=previous))
    assert result_ is not None
    [request] = [call_.messages for call_ in fake_llm.calls]
    assert request[0]["content"].startswith(SUMMARY_PROMPT.split("{")[0])
    assert "Continue it: summarize only the new" in request[0]["content"]
    assert f"<{PREVIOUS_TAG}>\n{previous}\n</{PREVIOUS_TAG}>" in request[1]["content"]
    assert result_.prompt == CONTINUE_PROMPT
    assert result_.summary_text == fake_llm.calls[0].answer  # the model's text, nothing prepended
    assert (result_.first_seq, result_.last_seq) == (1, 4)


async def test_previous_summary_goes_to_the_first_leaf_only(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.context_window = 4096
    settings = llm_settings(model_context_tokens=4096, previous_summary="PREVIOUS-TEXT here.")
    await summarize(chat([1000] * 4), settings)
    leaves = [p for p in fake_llm.prompts() if not p.startswith("<summary>")]
    first = [p for p in leaves if "[#1 user]" in p]
    second = [p for p in leaves if "[#1 user]" not in p]
    assert len(first) == len(second) == 1  # the halves arrive in either order
    assert "PREVIOUS-TEXT" in first[0] and "PREVIOUS-TEXT" not in second[0]


async def test_previous_summary_is_not_repeated_by_the_local_model() -> None:
    first = await summarize(chat([300] * 4), SummarizerSettings(target_tokens=120))
    assert first is not None
    later = chat([300] * 8)[4:]
    continued = await summarize(later, SummarizerSettings(previous_summary=first.summary_text))
    assert continued is not None
    assert (continued.first_seq, continued.last_seq) == (5, 8)
    bullets = {line for line in first.summary_text.splitlines() if line.startswith("- ")}
    assert not bullets & set(continued.summary_text.splitlines())


async def test_answer_longer_than_its_input_is_clipped_and_marked(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.mode = "long"
    messages = [user(1, "Short question about MARKER-x?"), assistant(2, "Short answer.")]
    result_ = await summarize(messages, llm_settings())
    assert result_ is not None
    assert result_.summary_tokens <= result_.source_tokens
    assert result_.metadata["truncated"]
    assert result_.metadata["compression_ratio"] <= 1


async def test_window_smaller_than_the_prompt_ends_with_bounded_calls(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.context_window = 200  # smaller than the system prompt and the answer
    result_ = await summarize(chat([500] * 8), llm_settings(target_tokens=50))
    assert result_ is not None
    meta = result_.metadata
    assert meta["truncated"] and meta["fallback"]
    assert meta["llm_calls"] <= 1 + meta["max_depth"]
    assert result_.summary_tokens <= result_.source_tokens


async def test_unknown_trigger_is_rejected() -> None:
    with pytest.raises(ValueError, match="trigger"):
        await summarize(chat([10] * 2), SummarizerSettings(), trigger="sometimes")


async def test_messages_without_seq_are_rejected() -> None:
    with pytest.raises(ValueError, match="seq"):
        await summarize([{"role": "user", "content": "hi"}], SummarizerSettings())


def test_service_tunable_limits_are_settings_with_their_defaults() -> None:
    settings = SummarizerSettings()
    assert settings.max_retry_seconds == 120.0  # total time one call may spend retrying
    assert settings.max_concurrency == 4  # LLM calls in flight at once in one run
    assert settings.tool_result_preview_chars == 1500
    assert settings.tool_args_preview_chars == 200


async def test_preview_lengths_from_the_settings_shape_the_prompt(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    message = call(2, "c1", name="read_file")
    message["tool_calls"][0]["function"]["arguments"] = '{"path": "/srv/' + "a" * 500 + '"}'
    messages = [user(1, "Read it."), message, result(3, "c1", "y" * 5000)]
    settings = llm_settings(tool_result_preview_chars=100, tool_args_preview_chars=40)
    await summarize(messages, settings)
    lines = fake_llm.prompts()[0].splitlines()
    [call_line] = [line for line in lines if line.startswith("→ read_file(")]
    [result_line] = [line for line in lines if line.startswith("[#3 tool read_file] ")]
    assert len(call_line) == len("→ read_file()") + 40
    assert result_line.endswith(PREVIEW_CUT)
    assert len(result_line) == len("[#3 tool read_file] ") + 100


def test_invalid_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="target_tokens"):
        SummarizerSettings(target_tokens=0)


async def test_rollup_with_the_local_model_keeps_both_summaries_requests() -> None:
    first = "Messages #1–#4: 4 (2 user, 2 assistant, 0 tool).\nRequests:\n- #1 Deploy v2.3.1."
    second = "Messages #5–#8: 4 (2 user, 2 assistant, 0 tool).\nRequests:\n- #5 Rotate KEY-42."
    merged = await merge_summaries([first, second], SummarizerSettings())
    assert "Messages #1–#8: 8 (4 user, 4 assistant, 0 tool)." in merged.summary_text
    assert "Deploy v2.3.1." in merged.summary_text and "Rotate KEY-42." in merged.summary_text
    assert merged.metadata["llm_calls"] == 1 and not merged.metadata["truncated"]


async def test_rollup_with_the_model_down_gives_a_deterministic_merge(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.stop()
    merged = await merge_summaries(["First: KEY-1.", "Second: KEY-2."], llm_settings())
    assert merged.metadata["fallback"] and merged.metadata["truncated"]
    assert "KEY-1" in merged.summary_text and "KEY-2" in merged.summary_text


async def test_many_messages_in_an_unsplittable_chunk_keep_head_and_tail(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.context_window = 1024
    messages = chat([60] * 200, marker=True)
    settings = llm_settings(model_context_tokens=1024, target_tokens=100, bisect_enabled=False)
    result_ = await summarize(messages, settings)
    assert result_ is not None and result_.metadata["truncated"]
    prompt = fake_llm.prompts()[0]
    assert "MARKER-m1 " in prompt and "MARKER-m200 " in prompt
    assert "messages omitted to fit the window" in prompt
    assert fake_llm.statuses() == [200]
