"""Transient errors are retried, hard ones are not, and a dead model still yields a summary."""

from __future__ import annotations

import time
from collections.abc import Callable

from summarizer import SummarizerSettings, summarize
from summarizer.fallback import FALLBACK_PREFIX
from tests.summarizer.builders import chat
from tests.support.fake_llm import FakeLLM

Settings = Callable[..., SummarizerSettings]


async def test_503_twice_then_success(fake_llm: FakeLLM, llm_settings: Settings) -> None:
    fake_llm.fail_next(503, times=2)
    result = await summarize(chat([200] * 4), llm_settings())
    assert result is not None
    assert fake_llm.statuses() == [503, 503, 200]
    assert (result.metadata["llm_calls"], result.metadata["failed_llm_calls"]) == (3, 2)
    assert not result.metadata["truncated"] and result.summary_text.startswith("Summary of")


async def test_429_waits_for_retry_after(fake_llm: FakeLLM, llm_settings: Settings) -> None:
    fake_llm.fail_next(429, retry_after=1)
    started = time.monotonic()
    result = await summarize(chat([200] * 4), llm_settings())
    assert result is not None
    assert time.monotonic() - started >= 1.0
    assert fake_llm.statuses() == [429, 200]


async def test_slow_answer_past_the_timeout_is_retried(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.slow_next(2.0)
    result = await summarize(chat([200] * 4), llm_settings(timeout_seconds=0.5))
    assert result is not None
    assert (result.metadata["llm_calls"], result.metadata["failed_llm_calls"]) == (2, 1)
    assert not result.metadata["truncated"]


async def test_connection_refused_gives_the_truncated_fallback(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.stop()
    result = await summarize(chat([200] * 6), llm_settings(max_attempts=3))
    assert result is not None
    meta = result.metadata
    assert meta["truncated"] and meta["fallback"]
    assert meta["llm_calls"] == meta["failed_llm_calls"] == 3
    assert result.summary_text.startswith(FALLBACK_PREFIX)
    assert "Messages #1–#6: 6 (3 user, 3 assistant, 0 tool)." in result.summary_text


async def test_model_down_mid_run_stops_calling_and_falls_back(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.context_window = 4096
    fake_llm.fail_always(503)
    settings = llm_settings(model_context_tokens=4096, max_attempts=2)
    result = await summarize(chat([1000] * 8), settings)
    assert result is not None
    meta = result.metadata
    # the first leaf spends its attempts; the leaves and merges after it call no more
    assert meta["failed_llm_calls"] <= 2 * settings.max_concurrency
    assert meta["truncated"] and meta["fallback"] and meta["chunk_count"] >= 1
    assert result.summary_tokens <= settings.merge_target_tokens


async def test_retries_stop_at_the_total_time_cap(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.fail_always(503)
    settings = llm_settings(max_attempts=50, max_retry_seconds=0.5, backoff_initial_seconds=0.2)
    result = await summarize(chat([200] * 4), settings)
    assert result is not None and result.metadata["fallback"]
    # The summarizer asks 3 times (the chunk, then its halves); 0.5 s of retrying at backoffs of at
    # least 0.1, 0.2, 0.4 s leaves each ask 4 attempts at most, not the 50 allowed.
    assert result.metadata["failed_llm_calls"] == len(fake_llm.calls) <= 3 * 4


async def test_client_errors_are_not_retried(fake_llm: FakeLLM, llm_settings: Settings) -> None:
    fake_llm.fail_next(401)
    result = await summarize(chat([200] * 4), llm_settings())
    assert result is not None
    assert fake_llm.statuses() == [401]
    assert result.metadata["fallback"]


async def test_empty_answer_counts_as_a_failure_and_is_retried(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    calls = 0

    def empty_once(messages: object) -> str:
        nonlocal calls
        calls += 1
        return "" if calls == 1 else "A real summary of the exchange."

    fake_llm.responder = empty_once
    result = await summarize(chat([200] * 4), llm_settings())
    assert result is not None
    assert (result.metadata["llm_calls"], result.metadata["failed_llm_calls"]) == (2, 1)
    assert result.summary_text == "A real summary of the exchange."


async def test_echoing_model_is_degenerate_and_falls_back(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.mode = "echo"
    result = await summarize(chat([200] * 4), llm_settings(max_attempts=2))
    assert result is not None
    assert result.metadata["failed_llm_calls"] == 2
    assert result.metadata["fallback"] and result.summary_text.startswith(FALLBACK_PREFIX)


async def test_none_answer_is_degenerate(fake_llm: FakeLLM, llm_settings: Settings) -> None:
    fake_llm.responder = lambda messages: "NONE"
    result = await summarize(chat([200] * 4), llm_settings(max_attempts=1))
    assert result is not None
    assert result.metadata["failed_llm_calls"] == 1 and result.metadata["fallback"]
