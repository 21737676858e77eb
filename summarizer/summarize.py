"""The entry points: `summarize()` and `merge_summaries()`, and the results they return.

`summarize()` takes chat messages (each with its `seq`) and plain settings and returns
one summary with its metadata. One call when the input fits the model's window; when
it does not (known up front, or learned from a context-window error) the input is
bisected at the legal cut nearest its token midpoint, both halves are summarized
concurrently and their summaries merged (`summarizer.bisection`). Depth, size and cut
limits end in forced truncation; an unreachable model ends in a deterministic summary.
LLM faults never escape: the result says what happened in `metadata`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from summarizer.bisection import BisectRun, merge_at_once, merge_pair
from summarizer.client import LLMClient
from summarizer.cuts import summarizable_count
from summarizer.prompts import CONTINUE_PROMPT, MERGE_PROMPT, PROMPT_VERSION, SUMMARY_PROMPT
from summarizer.run_state import RunState
from summarizer.settings import SummarizerSettings, build_client, resolve_window
from summarizer.text import OFFLOAD_CHARS, clip_tokens, text_chars
from summarizer.tokens import count_text
from summarizer.triggers import REASONS, TRIGGERS

ALGORITHM = "bisect_v1"
"""Name of this algorithm in every summary's metadata."""


FALLBACK_MODEL = "fallback"
"""The `model` of a summary any part of which was written without the model."""


METADATA_KEYS = (
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
)
"""The metadata keys of docs/design.md section 2, in its order; every result carries them all."""


@dataclass(frozen=True)
class SummaryResult:
    """One summary of `messages[first..last]` and how it was made."""

    summary_text: str
    first_seq: int
    last_seq: int
    message_count: int
    source_tokens: int
    summary_tokens: int
    prompt: str
    model: str
    metadata: dict[str, Any]
    leaf_ranges: tuple[tuple[int, int], ...] = ()
    """`(first_seq, last_seq)` of every leaf chunk summarized on its own, in order."""


@dataclass(frozen=True)
class MergeResult:
    """One summary merged from several consecutive summaries (a roll-up)."""

    summary_text: str
    source_tokens: int
    summary_tokens: int
    input_tokens: int
    output_tokens: int
    prompt: str
    model: str
    metadata: dict[str, Any]


def _metadata(
    run: RunState,
    *,
    trigger: str,
    trigger_reason: str,
    chunk_count: int,
    summary_tokens: int,
    source_tokens: int,
) -> dict[str, Any]:
    return {
        "algorithm": ALGORITHM,
        "trigger": trigger,
        "trigger_reason": trigger_reason,
        "chunk_count": chunk_count,
        "max_depth": run.max_depth,
        "truncated": run.truncated,
        "compression_ratio": round(summary_tokens / source_tokens, 4) if source_tokens else 0.0,
        "input_tokens": run.stats.input_tokens,
        "output_tokens": run.stats.output_tokens,
        "llm_calls": run.stats.calls,
        "failed_llm_calls": run.stats.failed,
        "duration_ms": round((time.perf_counter() - run.started) * 1000),
        "prompt_version": PROMPT_VERSION,
        "fallback": run.fallback,
        "fallback_reason": run.fallback_reason,
        "fallback_detail": run.fallback_detail,
        "failed_llm_calls_by_reason": dict(run.stats.failures),
        "context_window": run.window,
        "instructions": run.settings.instructions or None,
    }


def _check_trigger(trigger: str, trigger_reason: str) -> None:
    if trigger not in TRIGGERS:
        raise ValueError(f"trigger must be one of {sorted(TRIGGERS)}, got {trigger!r}")
    if trigger_reason not in REASONS:
        raise ValueError(f"trigger_reason must be one of {sorted(REASONS)}, got {trigger_reason!r}")


async def summarize(
    messages: Sequence[Mapping[str, Any]],
    settings: SummarizerSettings,
    *,
    trigger: str = "manual",
    trigger_reason: str = "manual",
    client: LLMClient | None = None,
) -> SummaryResult | None:
    """Summarize `messages` (ascending `seq`) minus the last `settings.keep_last_n`.

    Returns None when nothing may be summarized. Never raises for an LLM fault: a
    chunk that cannot be summarized gets a deterministic summary, marked truncated.
    """
    _check_trigger(trigger, trigger_reason)
    count = summarizable_count(messages, settings.keep_last_n)
    if count == 0:
        return None
    chosen = messages[:count]
    window = await resolve_window(settings)
    run = BisectRun(
        settings=settings,
        client=client or build_client(settings),
        window=window,
        window_exact=window is not None,
    )
    if text_chars(chosen) > OFFLOAD_CHARS:
        await asyncio.to_thread(run.prepare, chosen)
    else:
        run.prepare(chosen)
    previous = settings.previous_summary or None
    if previous is not None:
        previous = clip_tokens(previous, run.merge_target)
    text = await run.chunk(0, count, 0, previous)
    source_tokens = run.source_tokens(0, count)
    summary_tokens = count_text(text)
    leaves = sorted(run.leaves)
    return SummaryResult(
        summary_text=text,
        first_seq=run.seqs[0],
        last_seq=run.seqs[-1],
        message_count=count,
        source_tokens=source_tokens,
        summary_tokens=summary_tokens,
        prompt=CONTINUE_PROMPT if previous else SUMMARY_PROMPT,
        model=FALLBACK_MODEL if run.fallback else settings.model,
        metadata=_metadata(
            run,
            trigger=trigger,
            trigger_reason=trigger_reason,
            chunk_count=len(leaves),
            summary_tokens=summary_tokens,
            source_tokens=source_tokens,
        ),
        leaf_ranges=tuple((run.seqs[start], run.seqs[end - 1]) for start, end in leaves),
    )


async def merge_summaries(
    texts: Sequence[str],
    settings: SummarizerSettings,
    *,
    trigger: str = "proactive",
    trigger_reason: str = "rollup",
    client: LLMClient | None = None,
) -> MergeResult:
    """Consecutive summaries (oldest first) merged into one roll-up summary: in one call when
    they fit the window together, else pairwise (each round of pairs one pass deeper)."""
    _check_trigger(trigger, trigger_reason)
    if not texts:
        raise ValueError("merge_summaries needs at least one summary")
    window = await resolve_window(settings)
    run = RunState(
        settings=settings,
        client=client or build_client(settings),
        window=window,
        window_exact=window is not None,
    )
    level = [text.strip() for text in texts]
    if len(level) > 2 and (at_once := await merge_at_once(run, level)) is not None:
        run.max_depth, level = 1, [at_once]
    while len(level) > 1:
        run.max_depth += 1
        pairs = [level[i : i + 2] for i in range(0, len(level), 2)]
        merged = await asyncio.gather(
            *(merge_pair(run, pair[0], pair[1]) for pair in pairs if len(pair) == 2)
        )
        level = list(merged) + ([pairs[-1][0]] if len(pairs[-1]) == 1 else [])
    text = level[0]
    if run.max_depth == 0:
        text = run.finish(text, count_text(text), run.merge_cap)
    source_tokens = sum(count_text(text) for text in texts)
    summary_tokens = count_text(text)
    return MergeResult(
        summary_text=text,
        source_tokens=source_tokens,
        summary_tokens=summary_tokens,
        input_tokens=run.stats.input_tokens,
        output_tokens=run.stats.output_tokens,
        prompt=MERGE_PROMPT,
        model=FALLBACK_MODEL if run.fallback else settings.model,
        metadata=_metadata(
            run,
            trigger=trigger,
            trigger_reason=trigger_reason,
            chunk_count=len(texts),
            summary_tokens=summary_tokens,
            source_tokens=source_tokens,
        ),
    )
