"""Benchmark the summarizer against the fake OpenAI-compatible server on loopback.

    python -m scripts.bench.summarizer [--latency 0.02] [--sizes 10000 100000 1000000]

For inputs of 10k, 100k and 1M tokens (real ShareGPT text from `tests/fixtures`, with a
tool exchange every few turns) and windows of 4k, 16k and 128k, known up front or not,
it runs `summarize()` through litellm's real HTTP path and prints a markdown table: LLM
calls, failed calls, bisect depth, leaves, the lower bound `ceil(input / usable window)`
leaves plus the merges they imply, and wall time with concurrent halves against
sequential ones. The server adds `--latency` seconds to every answer, so the concurrency
comparison means something. It uses the loopback fake LLM of `tests/support/fake_llm.py`.

Then it measures the facts the offline `local` model keeps through leaves and roll-up merges
(`scripts/bench/offline_merge.py`; alone: `python -m scripts.bench.offline_merge`).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scripts.bench import offline_merge
from summarizer import SummarizerSettings, SummaryResult, summarize
from summarizer.prompts import summary_request
from summarizer.run_state import output_cap
from summarizer.tokens import count_message, count_messages

if TYPE_CHECKING:
    from tests.support.fake_llm import FakeLLM

FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "sharegpt_multilang.jsonl"
SIZES = (10_000, 100_000, 1_000_000)
WINDOWS = (4_096, 16_384, 131_072)
BISECT_MAX_DEPTH = 12
"""Deep enough for 1M tokens in a 4k window (about 2^9 leaves), so no leaf is truncated."""

TOOL_EVERY = 6
"""A tool call and its result are inserted after every this many fixture messages."""

SEQUENTIAL_MAX_CALLS = 150
"""Sequential runs are skipped above this many calls (unless --all-sequential): they add minutes."""

ANSWER_WORDS = 150
"""Length of the fake model's summaries, in words: enough to make merges carry weight."""


@dataclass(frozen=True)
class Row:
    size: int
    window: int
    known: bool
    calls: int
    failed: int
    depth: int
    leaves: int
    bound_leaves: int
    truncated: bool
    concurrent_s: float
    sequential_s: float | None

    @property
    def bound_calls(self) -> int:
        return 2 * self.bound_leaves - 1

    def render(self) -> str:
        sequential = f"{self.sequential_s:.2f}" if self.sequential_s is not None else "—"
        return (
            f"| {self.size:,} | {self.window // 1024}k | {'known' if self.known else 'unknown'} "
            f"| {self.calls} | {self.failed} | {self.depth} | {self.leaves} "
            f"| {self.bound_leaves} + {self.bound_leaves - 1} = {self.bound_calls} "
            f"| {self.calls / self.bound_calls:.2f} | {'yes' if self.truncated else 'no'} "
            f"| {self.concurrent_s:.2f} | {sequential} |"
        )


HEADER = (
    "| input tokens | window | window | LLM calls | failed | depth | leaves "
    "| lower bound (leaves + merges) | calls / bound | truncated | concurrent s | sequential s |\n"
    "|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"
)


def build_input(tokens: int) -> list[dict[str, Any]]:
    """Real chat messages (cycled fixture conversations) of about `tokens` tokens."""
    source = [
        {"role": m["role"], "content": m["content"]}
        for line in FIXTURE.read_text(encoding="utf-8").splitlines()
        for m in json.loads(line)["messages"]
    ]
    messages: list[dict[str, Any]] = []
    total = 0
    for index, message in enumerate(itertools.cycle(source)):
        if total >= tokens:
            break
        batch = [message]
        if index % TOOL_EVERY == TOOL_EVERY - 1:
            call_id = f"call_{index}"
            batch += [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": "search", "arguments": '{"q": "x"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": call_id, "content": "3 results found."},
            ]
        for item in batch:
            item = {**item, "seq": len(messages) + 1}
            messages.append(item)
            total += count_message(item)
    return messages


def lower_bound_leaves(input_tokens: int, window: int, settings: SummarizerSettings) -> int:
    """ceil(input / usable window): the usable window is what the prompt and answer leave."""
    overhead = count_messages(summary_request("", settings.target_tokens))
    usable = window - output_cap(settings.target_tokens) - overhead
    return max(1, math.ceil(input_tokens / usable))


async def run_once(
    messages: Sequence[dict[str, Any]], settings: SummarizerSettings
) -> tuple[SummaryResult, float]:
    started = time.perf_counter()
    result = await summarize(messages, settings, trigger="manual", trigger_reason="manual")
    assert result is not None
    return result, time.perf_counter() - started


def _reset(server: FakeLLM, window: int, latency: float) -> None:
    server.reset()
    server.context_window = window
    server.latency_seconds = latency
    server.summary_words = ANSWER_WORDS


async def bench(sizes: Sequence[int], latency: float, all_sequential: bool) -> list[Row]:
    from tests.support.fake_llm import FakeLLM

    server = FakeLLM().start()
    rows: list[Row] = []
    try:
        # warm up litellm (import, lazy model classes) so the first row is not charged for it
        warmup = SummarizerSettings(model="openai/warmup", api_base=server.base_url, api_key="x")
        await run_once(build_input(50), warmup)
        for size in sizes:
            messages = build_input(size)
            input_tokens = count_messages(messages)
            for window, known in itertools.product(WINDOWS, (True, False)):
                base = SummarizerSettings(
                    model="openai/bench-model",
                    api_base=server.base_url,
                    api_key="bench",
                    model_context_tokens=window if known else None,
                    bisect_max_depth=BISECT_MAX_DEPTH,
                    max_concurrency=4,
                )

                _reset(server, window, latency)
                result, concurrent = await run_once(messages, base)
                meta = result.metadata
                sequential: float | None = None
                if all_sequential or meta["llm_calls"] <= SEQUENTIAL_MAX_CALLS:
                    _reset(server, window, latency)
                    _, sequential = await run_once(
                        messages, SummarizerSettings(**{**base.__dict__, "max_concurrency": 1})
                    )
                row = Row(
                    size=input_tokens,
                    window=window,
                    known=known,
                    calls=meta["llm_calls"],
                    failed=meta["failed_llm_calls"],
                    depth=meta["max_depth"],
                    leaves=meta["chunk_count"],
                    bound_leaves=lower_bound_leaves(input_tokens, window, base),
                    truncated=meta["truncated"],
                    concurrent_s=concurrent,
                    sequential_s=sequential,
                )
                print(row.render(), flush=True)
                rows.append(row)
    finally:
        server.stop()
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per fake answer")
    parser.add_argument("--all-sequential", action="store_true", help="never skip sequential")
    parser.add_argument(
        "--no-offline-merge", action="store_true", help="skip the offline model's fact retention"
    )
    args = parser.parse_args(argv)
    print(f"fake LLM latency {args.latency * 1000:.0f} ms per call; concurrency 4 vs 1\n")
    print(HEADER, flush=True)
    started = time.perf_counter()
    rows = asyncio.run(bench(args.sizes, args.latency, args.all_sequential))
    known = [row for row in rows if row.known]
    unknown = [row for row in rows if not row.known]
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    print(
        "known window: zero failed calls:",
        all(row.failed == 0 for row in known),
        "| calls <= 2x bound:",
        all(row.calls <= 2 * row.bound_calls for row in known),
    )
    print(
        "unknown window: failed calls <= depth reached:",
        all(row.failed <= max(row.depth, 1) for row in unknown),
    )
    if not args.no_offline_merge:
        print()
        offline_merge.main([])


if __name__ == "__main__":
    main()
