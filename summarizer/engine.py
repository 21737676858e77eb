"""The summarization engine: recursive bisect over tool-safe cuts, pairwise merge, fallbacks.

`summarize()` takes chat messages (each with its `seq`) and plain settings and returns
one summary with its metadata. One call when the input fits the model's window; when
it does not (known up front, or learned from a context-window error) the input is
bisected at the legal cut nearest its token midpoint, both halves are summarized
concurrently and their summaries merged. Depth, size and cut limits end in forced
truncation; an unreachable model ends in a deterministic summary. LLM faults never
escape: the result says what happened in `metadata`.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from summarizer.client import CompletionRequest, LLMClient, MergeTask, SummaryTask
from summarizer.cuts import balanced_cut, legal_cuts, summarizable_count
from summarizer.echo import drop_repeated_lines
from summarizer.errors import ContextWindowError, DegenerateAnswerError, LLMError
from summarizer.fallback import fallback_merge, fallback_summary
from summarizer.local import LOCAL_MODEL, LocalSummarizer
from summarizer.prompts import (
    CONTINUE_PROMPT,
    MERGE_PROMPT,
    PROMPT_VERSION,
    SUMMARY_PROMPT,
    merge_request,
    summary_request,
)
from summarizer.retry import CallStats, RetryPolicy, complete_with_retry, describe
from summarizer.text import OFFLOAD_CHARS, clip_middle, clip_tokens, text_chars
from summarizer.tokens import count_message, count_messages, count_text
from summarizer.transcript import (
    TranscriptEntry,
    TranscriptOptions,
    entry_tokens,
    head_lines,
    join,
    shown_entries,
    transcript_entries,
)
from summarizer.triggers import REASONS, TRIGGERS

ALGORITHM = "bisect_v1"
"""Name of this algorithm in every summary's metadata."""


FALLBACK_MODEL = "fallback"
"""The `model` of a summary any part of which was written without the model."""

LEAF_WINDOW_SHARE = 0.25
"""Largest share of a known window one leaf summary's answer may take: the rest is room for
the transcript, so a small window still takes several messages per call."""

MERGE_WINDOW_SHARE = 1 / 3
"""Largest share of a known window a merged summary's answer may take: its two inputs and
the prompt share the rest."""

OUTPUT_HEADROOM = 1.25
"""`max_tokens` is the target times this: room to end a sentence; answers are clipped to it."""

WINDOW_SAFETY_RATIO = 0.03
"""Share of a window left unused: our cl100k count may differ a little from the provider's."""

WINDOW_SAFETY_TOKENS = 16
"""Fixed part of that margin: reply priming and framing the provider adds to every prompt."""

SHRINK = 0.75
"""After a prompt overflowed, the next try for the same material gets this share of its size."""

TRUNCATION_ATTEMPTS = 3
"""Clipped prompts tried for one chunk or merge before the deterministic fallback."""

MIN_LINE_TOKENS = 24
"""Smallest clipped message: its header and a few words either side of the cut marker."""

MIN_PROMPT_ROOM = 64
"""Below this much room for the material, a model call is pointless: fall back instead."""

OMITTED = "[… {count} messages omitted to fit the window …]"
"""Stands for the messages forced truncation had to drop when clipping was not enough."""


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
class EngineSettings:
    """Everything the engine needs to know, as plain values (no service settings object)."""

    target_tokens: int = 800
    merge_target_tokens: int = 1200
    model: str = LOCAL_MODEL
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    temperature: float = 0.3
    model_context_tokens: int | None = None
    bisect_enabled: bool = True
    bisect_max_depth: int = 6
    bisect_min_messages: int = 2
    keep_last_n: int = 0
    previous_summary: str | None = None
    timeout_seconds: float = 60.0
    max_attempts: int = 4
    max_retry_seconds: float = 120.0
    backoff_initial_seconds: float = 0.5
    backoff_max_seconds: float = 20.0
    max_concurrency: int = 4
    tool_result_preview_chars: int = TranscriptOptions.tool_result_chars
    tool_args_preview_chars: int = TranscriptOptions.tool_args_chars

    def __post_init__(self) -> None:
        positive = {
            "target_tokens": self.target_tokens,
            "merge_target_tokens": self.merge_target_tokens,
            "bisect_min_messages": self.bisect_min_messages,
            "timeout_seconds": self.timeout_seconds,
            "max_attempts": self.max_attempts,
            "max_concurrency": self.max_concurrency,
            "tool_result_preview_chars": self.tool_result_preview_chars,
            "tool_args_preview_chars": self.tool_args_preview_chars,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        for name, value in {
            "bisect_max_depth": self.bisect_max_depth,
            "keep_last_n": self.keep_last_n,
            "max_retry_seconds": self.max_retry_seconds,
            "backoff_initial_seconds": self.backoff_initial_seconds,
            "backoff_max_seconds": self.backoff_max_seconds,
        }.items():
            if value < 0:
                raise ValueError(f"{name} must not be negative, got {value}")
        if self.model_context_tokens is not None and self.model_context_tokens <= 0:
            raise ValueError("model_context_tokens must be positive or None")

    @property
    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=self.max_attempts,
            max_seconds=self.max_retry_seconds,
            initial_backoff=self.backoff_initial_seconds,
            max_backoff=self.backoff_max_seconds,
        )


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


def output_cap(target_tokens: int) -> int:
    """`max_tokens` for an answer whose stated target is `target_tokens`."""
    return math.ceil(target_tokens * OUTPUT_HEADROOM)


def build_client(settings: EngineSettings) -> LLMClient:
    """The client `settings.model` names: the local model, or litellm."""
    if settings.model == LOCAL_MODEL:
        return LocalSummarizer()
    from summarizer.llm import LiteLLMClient

    return LiteLLMClient(
        settings.model,
        api_base=settings.api_base,
        api_key=settings.api_key,
        temperature=settings.temperature,
        timeout_seconds=settings.timeout_seconds,
    )


async def resolve_window(settings: EngineSettings) -> int | None:
    """The model's context window: the setting, else litellm's model map, else None."""
    if settings.model_context_tokens is not None:
        return settings.model_context_tokens
    if settings.model == LOCAL_MODEL:
        return None
    from summarizer.llm import model_context_window

    return await model_context_window(settings.model)


class _Oversized(Exception):
    """A prompt turned out larger than a window learned while it waited its turn."""


@dataclass
class _Run:
    """State shared by every call of one engine run: window knowledge, counters, flags."""

    settings: EngineSettings
    client: LLMClient
    window: int | None
    window_exact: bool
    stats: CallStats = field(default_factory=CallStats)
    scale: float = 1.0
    fits_up_to: int = 0
    truncated: bool = False
    fallback: bool = False
    fallback_reason: str | None = None
    fallback_detail: str | None = None
    llm_down: bool = False
    max_depth: int = 0
    started: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        self.limiter = asyncio.Semaphore(self.settings.max_concurrency)
        # the local model is extractive by design, and deterministic: retrying cannot help
        self.echo_checked = not isinstance(self.client, LocalSummarizer)
        self.probe = asyncio.Lock()

    # output budgets -----------------------------------------------------------------------

    def scaled_target(self, target: int, share: float) -> int:
        """`target`, lowered so that its answer takes at most `share` of the known window."""
        if self.window is None:
            return target
        return max(1, min(target, math.floor(self.window * share / OUTPUT_HEADROOM)))

    @property
    def merge_target(self) -> int:
        return self.scaled_target(self.settings.merge_target_tokens, MERGE_WINDOW_SHARE)

    @property
    def merge_cap(self) -> int:
        return output_cap(self.merge_target)

    @property
    def merge_overhead(self) -> int:
        return count_messages(merge_request("", "", self.merge_target))

    def merge_call(self, first: str, second: str) -> CompletionRequest:
        return CompletionRequest(
            messages=merge_request(first, second, self.merge_target),
            max_tokens=self.merge_cap,
            target_tokens=self.merge_target,
            task=MergeTask((first, second)),
        )

    # window knowledge ---------------------------------------------------------------------

    def budget(self, cap: int) -> int | None:
        """The largest prompt (our count) that leaves `cap` answer tokens in the window."""
        if self.window is None:
            return None
        margin = math.ceil(self.window * WINDOW_SAFETY_RATIO) + WINDOW_SAFETY_TOKENS
        return self.window - cap - margin

    def estimate(self, tokens: int) -> int:
        """Our count of a prompt, corrected by what the provider reported so far."""
        return math.ceil(tokens * self.scale)

    def oversized(self, estimate: int, cap: int) -> bool:
        budget = self.budget(cap)
        return budget is not None and estimate > budget

    def learn(self, error: ContextWindowError, estimate: int, cap: int) -> None:
        """Tighten what we know of the window after an overflow."""
        # the provider counts the prompt at least as it reports, or as the overflow implies
        counted = error.prompt_tokens or 0
        if not counted and error.window_tokens:
            counted = error.window_tokens - cap + 1
        ours = estimate / self.scale
        if ours > 0 and counted > ours:
            self.scale = max(self.scale, counted / ours)
        if error.window_tokens:
            window, self.window_exact = error.window_tokens, True
        else:
            # the prompt that failed, with its answer, is an upper bound of the window
            window = estimate + cap - 1
        self.window = window if self.window is None else min(self.window, window)

    # calls --------------------------------------------------------------------------------

    async def ask(self, request: CompletionRequest, estimate: int, material: str | None) -> str:
        """One answer (retried); a prompt larger than any known to fit probes the window alone.

        An answer echoing `material` (what the model was asked to summarize, never the
        summaries it was given for reference) counts as a failed attempt.
        """
        if self.window_exact or estimate <= self.fits_up_to:
            return await self._complete(request, material)
        async with self.probe:
            if self.oversized(estimate, request.max_tokens):
                raise _Oversized
            if not self.window_exact and estimate > self.fits_up_to:
                text = await self._complete(request, material)
                self.fits_up_to = max(self.fits_up_to, estimate)
                return text
        return await self._complete(request, material)

    async def _complete(self, request: CompletionRequest, material: str | None) -> str:
        completion = await complete_with_retry(
            self.client,
            request,
            echo_source=material if self.echo_checked else None,
            policy=self.settings.retry_policy,
            stats=self.stats,
            limiter=self.limiter,
            secret=self.settings.api_key,
        )
        return completion.text

    def fell_back(self, reason: str, detail: str) -> None:
        """Some material is summarized without the model; the first reason is the one kept."""
        self.truncated = self.fallback = True
        if self.fallback_reason is None:
            self.fallback_reason, self.fallback_detail = reason, detail

    def went_down(self, error: LLMError) -> None:
        """No usable answer after retries: no more calls in this run, deterministic summaries."""
        self.llm_down = True
        cause = error.__cause__ if isinstance(error.__cause__, LLMError) else error
        reason = (
            "degenerate_answer" if isinstance(cause, DegenerateAnswerError) else "llm_unavailable"
        )
        self.fell_back(reason, describe(cause, self.settings.api_key))

    def no_room(self) -> None:
        """The material cannot be made to fit the window: the rest is a fallback."""
        window = self.window if self.window is not None else "unknown"
        self.fell_back("context_window", f"no prompt fits the {window}-token window")

    def finish(self, text: str, source_tokens: int, cap: int) -> str:
        """The no-progress guard: an answer never exceeds its cap nor its input."""
        text = text.strip()
        limit = min(cap, source_tokens) if source_tokens > 0 else cap
        if count_text(text) > limit:
            self.truncated = True
            text = clip_tokens(text, limit)
        return text

    # merge --------------------------------------------------------------------------------

    async def merge(self, first: str, second: str) -> str:
        """Two consecutive summaries as one; inputs are clipped when they overflow.

        The answer is never checked for echoes: a merge that repeats its inputs keeps every
        fact they hold, and the answer cap bounds its size.
        """
        source_tokens = count_text(f"{first}\n{second}")
        limit: int | None = None
        pair = (first, second)
        for _ in range(TRUNCATION_ATTEMPTS):
            if self.llm_down:
                break
            budget = self.budget(self.merge_cap)
            if limit is not None:
                budget = limit if budget is None else min(budget, limit)
            estimate = self.estimate(
                self.merge_overhead + count_text(pair[0]) + count_text(pair[1])
            )
            if budget is not None and estimate > budget:
                clipped = self._clip_pair(first, second, budget)
                if clipped is None:
                    self.no_room()
                    break
                self.truncated = True
                pair = clipped
                estimate = self.estimate(
                    self.merge_overhead + count_text(pair[0]) + count_text(pair[1])
                )
            try:
                text = await self.ask(self.merge_call(pair[0], pair[1]), estimate, None)
            except _Oversized:
                continue
            except ContextWindowError as error:
                self.learn(error, estimate, self.merge_cap)
                limit = math.floor(estimate * SHRINK)
                continue
            except LLMError as error:
                self.went_down(error)
                break
            return self.finish(text, source_tokens, self.merge_cap)
        if not self.llm_down:
            self.no_room()
        assert self.fallback_reason is not None
        limit_tokens = min(self.merge_target, source_tokens)
        return fallback_merge([first, second], limit_tokens, self.fallback_reason)

    def _clip_pair(self, first: str, second: str, budget: int) -> tuple[str, str] | None:
        room = math.floor(budget / self.scale) - self.merge_overhead
        if room < MIN_PROMPT_ROOM:
            return None
        sizes = [count_text(first), count_text(second)]
        half = room // 2
        if sizes[0] <= half:
            limits = (sizes[0], room - sizes[0])
        elif sizes[1] <= half:
            limits = (room - sizes[1], sizes[1])
        else:
            limits = (half, room - half)
        return clip_middle(first, limits[0]), clip_middle(second, limits[1])


@dataclass
class _Summarization(_Run):
    """One `summarize()` run over prepared messages."""

    seqs: list[int] = field(default_factory=list)
    entries: list[TranscriptEntry] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    """The transcript line of each entry."""
    leaves: list[tuple[int, int]] = field(default_factory=list)
    prefix: list[int] = field(default_factory=list)
    source_prefix: list[int] = field(default_factory=list)
    cuts: list[int] = field(default_factory=list)
    overheads: dict[str, int] = field(default_factory=dict)

    @property
    def leaf_target(self) -> int:
        return self.scaled_target(self.settings.target_tokens, LEAF_WINDOW_SHARE)

    @property
    def summary_cap(self) -> int:
        return output_cap(self.leaf_target)

    def prepare(self, messages: Sequence[Mapping[str, Any]]) -> None:
        options = TranscriptOptions(
            tool_result_chars=self.settings.tool_result_preview_chars,
            tool_args_chars=self.settings.tool_args_preview_chars,
        )
        self.seqs = [_seq(message) for message in messages]
        if any(later <= earlier for earlier, later in zip(self.seqs, self.seqs[1:], strict=False)):
            raise ValueError("messages must be in ascending seq order")
        self.entries = transcript_entries(messages, options)
        self.lines = [entry.render() for entry in self.entries]
        self.prefix = [0, *accumulate(entry_tokens(line) for line in self.lines)]
        self.source_prefix = [0, *accumulate(count_message(message) for message in messages)]
        self.cuts = legal_cuts(messages)

    def source_tokens(self, start: int, end: int) -> int:
        return self.source_prefix[end] - self.source_prefix[start]

    def overhead(self, previous: str | None) -> int:
        """Prompt tokens of a summary request around an empty transcript."""
        key = f"{self.leaf_target}:{previous or ''}"
        if key not in self.overheads:
            request = summary_request("", self.leaf_target, previous)
            self.overheads[key] = count_messages(request)
        return self.overheads[key]

    def room(self, previous: str | None) -> int | None:
        """Transcript tokens one summary call can take, when the window is known."""
        budget = self.budget(self.summary_cap)
        if budget is None:
            return None
        return math.floor(budget / self.scale) - self.overhead(previous)

    def summary_call(
        self, transcript: str, entries: Sequence[TranscriptEntry], previous: str | None
    ) -> CompletionRequest:
        """The request to summarize `transcript`, whose entries (as shown) are `entries`."""
        return CompletionRequest(
            messages=summary_request(transcript, self.leaf_target, previous),
            max_tokens=self.summary_cap,
            target_tokens=self.leaf_target,
            task=SummaryTask(tuple(entries), previous),
        )

    def leaf_estimate(self, start: int, end: int, previous: str | None) -> int:
        return self.estimate(self.overhead(previous) + self.prefix[end] - self.prefix[start])

    async def chunk(self, start: int, end: int, depth: int, previous: str | None) -> str:
        """The summary of `entries[start:end]`: one call, or a split when it cannot fit."""
        self.max_depth = max(self.max_depth, depth)
        if self.llm_down:
            return self.fallback_leaf(start, end, previous)
        room = self.room(None)
        if room is not None and room < MIN_PROMPT_ROOM:
            self.no_room()  # no call can fit: do not split
            return self.fallback_leaf(start, end, previous)
        estimate = self.leaf_estimate(start, end, previous)
        if self.oversized(estimate, self.summary_cap):
            return await self.split(start, end, depth, previous, None)
        transcript = join(self.lines[start:end])
        request = self.summary_call(transcript, self.entries[start:end], previous)
        try:
            text = await self.ask(request, estimate, transcript)
        except _Oversized:
            return await self.split(start, end, depth, previous, None)
        except ContextWindowError as error:
            self.learn(error, estimate, self.summary_cap)
            return await self.split(start, end, depth, previous, estimate)
        except LLMError as error:
            self.went_down(error)
            return self.fallback_leaf(start, end, previous)
        self.leaves.append((start, end))
        return self.leaf_answer(text, start, end, previous)

    def leaf_answer(self, text: str, start: int, end: int, previous: str | None) -> str:
        """A leaf's answer without what the previous summary already says, within its cap."""
        if previous is not None:
            text = drop_repeated_lines(text, previous)
        return self.finish(text, self.source_tokens(start, end), self.summary_cap)

    async def split(
        self, start: int, end: int, depth: int, previous: str | None, failed: int | None
    ) -> str:
        """Bisect at a legal cut near the token midpoint, or truncate when not allowed."""
        settings = self.settings
        cut = None
        if (
            settings.bisect_enabled
            and depth < settings.bisect_max_depth
            and end - start >= max(2, settings.bisect_min_messages)
        ):
            cut = balanced_cut(self.cuts, self.prefix, start, end, self.room(previous))
        if cut is None:
            return await self.truncated_leaf(start, end, previous, failed)
        first, second = await asyncio.gather(
            self.chunk(start, cut, depth + 1, previous),
            self.chunk(cut, end, depth + 1, None),
        )
        return await self.merge(first, second)

    async def truncated_leaf(
        self, start: int, end: int, previous: str | None, failed: int | None
    ) -> str:
        """Forced truncation: every message clipped head and tail until the chunk fits."""
        self.truncated = True
        limit = math.floor(failed * SHRINK) if failed is not None else None
        for _ in range(TRUNCATION_ATTEMPTS):
            if self.llm_down:
                break
            budget = self.budget(self.summary_cap)
            if limit is not None:
                budget = limit if budget is None else min(budget, limit)
            if budget is None:
                break  # an overflow with no window learned: nothing to fit to
            room = math.floor(budget / self.scale)
            kept_previous = previous
            if previous is not None:
                kept_previous = clip_middle(previous, max(1, room // 4))
            room -= self.overhead(kept_previous)
            if room < MIN_PROMPT_ROOM:
                break
            transcript, shown = self.fit(start, end, room)
            estimate = self.estimate(self.overhead(kept_previous) + count_text(transcript))
            request = self.summary_call(transcript, shown, kept_previous)
            try:
                text = await self.ask(request, estimate, transcript)
            except _Oversized:
                continue
            except ContextWindowError as error:
                self.learn(error, estimate, self.summary_cap)
                limit = math.floor(estimate * SHRINK)
                continue
            except LLMError as error:
                self.went_down(error)
                break
            self.leaves.append((start, end))
            return self.leaf_answer(text, start, end, kept_previous)
        if not self.llm_down:
            self.no_room()
        return self.fallback_leaf(start, end, previous)

    def fit(self, start: int, end: int, room: int) -> tuple[str, list[TranscriptEntry]]:
        """The transcript of `entries[start:end]` in at most `room` tokens, and its entries."""
        indices = list(range(start, end))
        sizes = [self.prefix[i + 1] - self.prefix[i] for i in indices]
        if sum(sizes) <= room:
            return join(self.lines[start:end]), self.entries[start:end]
        omitted = head = 0
        if len(indices) * MIN_LINE_TOKENS > room:
            # too many messages to clip them all: keep the first and the last ones
            keep = max(2, room // MIN_LINE_TOKENS - 1)
            omitted, head = len(indices) - keep, keep // 2
            indices = indices[:head] + indices[len(indices) - (keep - head) :]
            sizes = sizes[:head] + sizes[len(sizes) - (keep - head) :]
            room -= entry_tokens(OMITTED.format(count=omitted))
        for _ in range(TRUNCATION_ATTEMPTS):
            cap = _water_level(sizes, room)
            shown: list[tuple[TranscriptEntry | None, str]] = [
                (
                    self.entries[i],
                    self.lines[i] if size <= cap else clip_middle(self.lines[i], max(1, cap - 1)),
                )
                for i, size in zip(indices, sizes, strict=True)
            ]
            if omitted:
                shown.insert(head, (None, OMITTED.format(count=omitted)))
            lines = [line for _, line in shown]
            transcript = join(lines)
            excess = count_text(transcript) - room
            if excess <= 0:
                return transcript, shown_entries(shown)
            room -= excess
        clipped = clip_tokens(transcript, room)
        entries = [entry for entry, _ in shown]
        return clipped, shown_entries(list(zip(entries, head_lines(lines, clipped), strict=False)))

    def fallback_leaf(self, start: int, end: int, previous: str | None) -> str:
        """The deterministic summary of a chunk; `fallback_reason` was set by the caller."""
        assert self.fallback_reason is not None
        self.leaves.append((start, end))
        source_tokens = self.source_tokens(start, end)
        limit = min(self.leaf_target, source_tokens)
        text = fallback_summary(self.entries[start:end], limit, self.fallback_reason, previous)
        return self.finish(text, source_tokens, self.summary_cap)


def _seq(message: Mapping[str, Any]) -> int:
    seq = message.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise ValueError(f"every message needs an int 'seq', got {seq!r}")
    return seq


def _water_level(sizes: Sequence[int], room: int) -> int:
    """The largest per-item cap `c` with `sum(min(size, c)) <= room` (at least 1)."""
    low, high = 1, max(sizes, default=1)
    while low < high:
        middle = (low + high + 1) // 2
        if sum(min(size, middle) for size in sizes) <= room:
            low = middle
        else:
            high = middle - 1
    return low


def _metadata(
    run: _Run,
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
    }


def _check_trigger(trigger: str, trigger_reason: str) -> None:
    if trigger not in TRIGGERS:
        raise ValueError(f"trigger must be one of {sorted(TRIGGERS)}, got {trigger!r}")
    if trigger_reason not in REASONS:
        raise ValueError(f"trigger_reason must be one of {sorted(REASONS)}, got {trigger_reason!r}")


async def summarize(
    messages: Sequence[Mapping[str, Any]],
    settings: EngineSettings,
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
    run = _Summarization(
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
    settings: EngineSettings,
    *,
    trigger: str = "proactive",
    trigger_reason: str = "rollup",
    client: LLMClient | None = None,
) -> MergeResult:
    """Consecutive summaries (oldest first) merged pairwise into one roll-up summary."""
    _check_trigger(trigger, trigger_reason)
    if not texts:
        raise ValueError("merge_summaries needs at least one summary")
    window = await resolve_window(settings)
    run = _Run(
        settings=settings,
        client=client or build_client(settings),
        window=window,
        window_exact=window is not None,
    )
    level = [text.strip() for text in texts]
    while len(level) > 1:
        run.max_depth += 1
        pairs = [level[i : i + 2] for i in range(0, len(level), 2)]
        merged = await asyncio.gather(
            *(run.merge(pair[0], pair[1]) for pair in pairs if len(pair) == 2)
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
