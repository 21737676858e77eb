"""The state one run shares across its calls: window knowledge, budgets, counters, fallbacks.

A run learns the model's window as it goes (from the settings, or from overflows), sizes every
prompt and answer against what it knows, counts the calls for the metadata, and records why
any material was summarized without the model.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

from summarizer.client import CompletionRequest, LLMClient
from summarizer.errors import ContextWindowError, DegenerateAnswerError, LLMError
from summarizer.local import LocalSummarizer
from summarizer.retry import CallStats, complete_with_retry, describe
from summarizer.settings import SummarizerSettings
from summarizer.text import clip_tokens
from summarizer.tokens import count_text

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


def output_cap(target_tokens: int) -> int:
    """`max_tokens` for an answer whose stated target is `target_tokens`."""
    return math.ceil(target_tokens * OUTPUT_HEADROOM)


class Oversized(Exception):
    """A prompt turned out larger than a window learned while it waited its turn."""


@dataclass
class RunState:
    """State shared by every call of one run: window knowledge, counters, flags."""

    settings: SummarizerSettings
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
    def leaf_target(self) -> int:
        return self.scaled_target(self.settings.target_tokens, LEAF_WINDOW_SHARE)

    @property
    def summary_cap(self) -> int:
        return output_cap(self.leaf_target)

    @property
    def merge_target(self) -> int:
        return self.scaled_target(self.settings.merge_target_tokens, MERGE_WINDOW_SHARE)

    @property
    def merge_cap(self) -> int:
        return output_cap(self.merge_target)

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
                raise Oversized
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

    # fallbacks and the no-progress guard --------------------------------------------------

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
