"""Bisect, merge and forced truncation: how a run fits any input into the model's window.

A chunk that fits is summarized in one call. One that does not is bisected at a legal cut
near its token midpoint, both halves summarized concurrently and their summaries merged
pairwise. Where bisecting is not allowed (depth, size, no legal cut) every message is clipped
head and tail until the chunk fits; where even that fails, the chunk gets a fallback summary.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from summarizer.client import CompletionRequest, MergeTask, SummaryTask
from summarizer.cuts import balanced_cut, legal_cuts
from summarizer.echo import drop_repeated_lines
from summarizer.errors import ContextWindowError, LLMError
from summarizer.fallback import fallback_merge, fallback_summary
from summarizer.prompts import merge_request, summary_request
from summarizer.run_state import Oversized, RunState
from summarizer.text import clip_middle, clip_tokens
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


# merge --------------------------------------------------------------------------------------


async def merge_pair(run: RunState, first: str, second: str) -> str:
    """Two consecutive summaries as one; inputs are clipped when they overflow.

    The answer is never checked for echoes: a merge that repeats its inputs keeps every
    fact they hold, and the answer cap bounds its size.
    """
    source_tokens = count_text(f"{first}\n{second}")
    limit: int | None = None
    pair = (first, second)
    for _ in range(TRUNCATION_ATTEMPTS):
        if run.llm_down:
            break
        budget = run.budget(run.merge_cap)
        if limit is not None:
            budget = limit if budget is None else min(budget, limit)
        estimate = run.estimate(_merge_overhead(run) + count_text(pair[0]) + count_text(pair[1]))
        if budget is not None and estimate > budget:
            clipped = _clip_pair(run, first, second, budget)
            if clipped is None:
                run.no_room()
                break
            run.truncated = True
            pair = clipped
            estimate = run.estimate(
                _merge_overhead(run) + count_text(pair[0]) + count_text(pair[1])
            )
        try:
            text = await run.ask(_merge_call(run, pair[0], pair[1]), estimate, None)
        except Oversized:
            continue
        except ContextWindowError as error:
            run.learn(error, estimate, run.merge_cap)
            limit = math.floor(estimate * SHRINK)
            continue
        except LLMError as error:
            run.went_down(error)
            break
        return run.finish(text, source_tokens, run.merge_cap)
    if not run.llm_down:
        run.no_room()
    assert run.fallback_reason is not None
    limit_tokens = min(run.merge_target, source_tokens)
    return fallback_merge(
        [first, second], limit_tokens, run.fallback_reason, run.settings.instructions
    )


def _merge_overhead(run: RunState, count: int = 2) -> int:
    """Prompt tokens of a merge request around `count` empty summaries."""
    empty = [""] * count
    return count_messages(merge_request(empty, run.merge_target, run.settings.instructions))


def _merge_call(run: RunState, *texts: str) -> CompletionRequest:
    return CompletionRequest(
        messages=merge_request(texts, run.merge_target, run.settings.instructions),
        max_tokens=run.merge_cap,
        target_tokens=run.merge_target,
        task=MergeTask(texts, run.settings.instructions),
    )


async def merge_at_once(run: RunState, texts: Sequence[str]) -> str | None:
    """More than two consecutive summaries merged in one call, so each fact passes through one
    model call, not one per round of pairs; None (nothing spent but a refused call) when they
    do not fit the window together: merge them pairwise then."""
    if run.llm_down:
        return None
    estimate = run.estimate(_merge_overhead(run, len(texts)) + sum(map(count_text, texts)))
    budget = run.budget(run.merge_cap)
    if budget is not None and estimate > budget:
        return None
    try:
        text = await run.ask(_merge_call(run, *texts), estimate, None)
    except Oversized:
        return None
    except ContextWindowError as error:
        run.learn(error, estimate, run.merge_cap)
        return None
    except LLMError as error:
        run.went_down(error)
        return None
    return run.finish(text, count_text("\n".join(texts)), run.merge_cap)


def _clip_pair(run: RunState, first: str, second: str, budget: int) -> tuple[str, str] | None:
    room = math.floor(budget / run.scale) - _merge_overhead(run)
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


# bisect and forced truncation ---------------------------------------------------------------


@dataclass
class BisectRun(RunState):
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
            request = summary_request("", self.leaf_target, previous, self.settings.instructions)
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
        instructions = self.settings.instructions
        return CompletionRequest(
            messages=summary_request(transcript, self.leaf_target, previous, instructions),
            max_tokens=self.summary_cap,
            target_tokens=self.leaf_target,
            task=SummaryTask(tuple(entries), previous, instructions),
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
        except Oversized:
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
        return await merge_pair(self, first, second)

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
            except Oversized:
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
        text = fallback_summary(
            self.entries[start:end],
            limit,
            self.fallback_reason,
            previous,
            self.settings.instructions,
        )
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
