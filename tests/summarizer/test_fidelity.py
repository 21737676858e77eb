"""Fidelity with the perfect-recall model: every fact the summarizer is given reaches its summary.

The fake's `marker_echo` mode repeats every marker of its prompt, previous summaries
included, and stops at `max_tokens` like any model: a fact is lost only when the summarizer
drops it (a rejected answer, a fallback, a cap too small for the window).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from summarizer import SummarizerSettings, merge_summaries, summarize
from tests.summarizer.builders import filler
from tests.support.fake_llm import MARKER_PATTERN, FakeLLM

Settings = Callable[..., SummarizerSettings]


def fact_messages(
    count: int, chars: int, first_seq: int = 1, tag: str = "n"
) -> list[dict[str, Any]]:
    """`count` alternating user/assistant messages of about `chars` characters, one fact each."""
    messages = []
    for index in range(count):
        marker = f"MARKER-{tag}{first_seq + index}"
        text = f"{marker} {filler(chars // 5)}"[:chars]
        role = "user" if index % 2 == 0 else "assistant"
        messages.append({"seq": first_seq + index, "role": role, "content": text})
    return messages


def markers(text: str) -> set[str]:
    return set(MARKER_PATTERN.findall(text))


async def test_a_continuation_repeating_the_previous_summary_keeps_every_new_fact(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.mode = "marker_echo"
    previous = "\n".join(f"MARKER-p{index}" for index in range(156))
    messages = fact_messages(60, 200, first_seq=157)
    result = await summarize(
        messages, llm_settings(model_context_tokens=3000, previous_summary=previous)
    )
    assert result is not None
    assert result.metadata["failed_llm_calls"] == 0
    assert not result.metadata["fallback"] and result.model != "fallback"
    assert markers(result.summary_text) >= markers(str(messages))
    # what the previous summary already says is not written again
    assert not markers(result.summary_text) & markers(previous)


@pytest.mark.parametrize("window", [1500, 3000, 8000, 128_000])
async def test_every_fact_of_60_messages_survives_at_any_window(
    fake_llm: FakeLLM, llm_settings: Settings, window: int
) -> None:
    fake_llm.mode = "marker_echo"
    fake_llm.context_window = window
    messages = fact_messages(60, 400)
    result = await summarize(messages, llm_settings(model_context_tokens=window))
    assert result is not None
    assert not result.metadata["fallback"]
    assert result.metadata["failed_llm_calls"] == 0
    assert markers(result.summary_text) == markers(str(messages))


async def test_a_small_window_scales_the_output_caps_instead_of_splitting_to_pairs(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.mode = "marker_echo"
    messages = fact_messages(60, 400)
    result = await summarize(messages, llm_settings(model_context_tokens=1500))
    assert result is not None
    assert result.metadata["chunk_count"] <= 12  # not 32 chunks of two messages
    assert all(
        call.max_tokens is not None and call.max_tokens <= 1500 // 3 for call in fake_llm.calls
    )


async def test_a_merge_repeating_its_inputs_is_accepted(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    first = "\n".join(f"MARKER-a{index} was decided" for index in range(40))
    second = "\n".join(f"MARKER-b{index} was decided" for index in range(40))
    fake_llm.responder = lambda messages: f"{first}\n{second}"
    merged = await merge_summaries([first, second], llm_settings(merge_target_tokens=1200))
    assert merged.metadata["failed_llm_calls"] == 0 and not merged.metadata["fallback"]
    assert markers(merged.summary_text) == markers(first + second)


async def test_a_fallback_says_why_and_who_wrote_it(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.mode = "empty"
    result = await summarize(fact_messages(6, 200), llm_settings(max_attempts=2))
    assert result is not None and result.model == "fallback"
    meta = result.metadata
    assert meta["fallback"] and meta["fallback_reason"] == "degenerate_answer"
    assert meta["fallback_detail"].startswith("DegenerateAnswerError: ")
    assert "unusable" in result.summary_text.splitlines()[0]
    assert meta["failed_llm_calls_by_reason"] == {"degenerate_answer": 2}


async def test_an_unreachable_model_is_named_without_the_key(
    llm_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    settings = llm_settings(
        api_base=FakeLLM.closed_port_url(), api_key="sk-secret-key-123456", max_attempts=2
    )
    result = await summarize(fact_messages(4, 100), settings)
    assert result is not None and result.model == "fallback"
    assert result.metadata["fallback_reason"] == "llm_unavailable"
    assert "\n" not in result.metadata["fallback_detail"]
    assert "sk-secret" not in result.metadata["fallback_detail"]
    warnings = [r for r in caplog.records if r.name == "precis.summarizer"]
    assert len(warnings) == 2 and all(r.levelname == "WARNING" for r in warnings)
    assert all("sk-secret" not in r.getMessage() for r in warnings)


async def test_no_room_for_any_prompt_is_a_context_window_fallback(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    result = await summarize(fact_messages(4, 100), llm_settings(model_context_tokens=200))
    assert result is not None and result.model == "fallback"
    assert result.metadata["fallback_reason"] == "context_window"
    assert not fake_llm.calls
