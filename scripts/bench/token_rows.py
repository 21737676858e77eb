"""The token counting row: `count_message`, as an append counts, against the bare tokenizer."""

from __future__ import annotations

import time

from scripts.bench.plan import Bench
from scripts.bench.results import RowOut
from summarizer.tokens import count_message, encoding


def tokens(bench: Bench, passes: int = 4, repeats: int = 3) -> None:
    """count_message (what insert uses) against the bare tokenizer on the same texts."""
    print("[tokens] counting throughput", flush=True)
    messages = [bench.payloads.message(i) for i in range(len(bench.payloads))] * passes
    enc = encoding()
    chars = sum(len(m["content"]) for m in messages)
    tokens = sum(len(enc.encode_ordinary(m["content"])) for m in messages)

    def bare() -> None:
        for m in messages:
            len(enc.encode_ordinary(m["content"]))

    def ours() -> None:
        for m in messages:
            count_message(m)

    best = {"bare": float("inf"), "precis": float("inf")}
    for _ in range(repeats):
        for name, fn in (("bare", bare), ("precis", ours)):
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    rates = {name: tokens / seconds for name, seconds in best.items()}
    bench.results.measures["tokens"] = {
        "chars": chars,
        "tokens": tokens,
        "seconds": best,
        "tokens_per_s": rates,
    }
    ratio = rates["precis"] / rates["bare"]
    bench.results.row(
        RowOut(
            "-",
            "tokens",
            "token counting (count_message, as at insert)",
            f"{rates['precis'] / 1e6:.2f} M tokens/s",
            f"bare tiktoken encode_ordinary {rates['bare'] / 1e6:.2f} M tokens/s",
            ratio,
            ">= 0.7x",
            ratio >= 0.7,
        )
    )
