"""Where a chat wire's turn spends its time, step by step, timed inside the process.

    python -m scripts.bench.turn_stages [--backend postgresql] [--wire chat_completions]
                                        [--earlier 20,2000] [--calls 60]

Explains the rows of `scripts/bench/wire_overhead.py`. The service runs in this process (no
socket) on a fresh migrated database, the loopback fake model in a thread beside it; each
call is the wire bench's common turn: a session given the earlier messages by an untimed turn,
then the resend of them and the question, timed, then the session deleted. The turn's steps
are wrapped with a clock: the reconciliation of the resend (`reconcile`), the load and
assembly of the stored context (`load_context`), the model call through litellm (the fake's
own reading of the messages included) and the append of the new messages and the answer
(`store_batch`). Prints the p50 of each step and of the whole request, per length.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import functools
import json
import statistics
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from api import history_load
from api.compat import turn
from api.main import create_app
from api.settings import Settings
from scripts.bench.lib import POSTGRES_ADMIN_URL
from scripts.bench.responses_overhead import migrated_database
from scripts.bench.wire_overhead import (
    CHAT_MODEL,
    MESSAGES_MODEL,
    MODELS,
    OUTPUT_TOKENS,
    PATHS,
    SESSION_HEADER,
    WINDOW,
    answer_constantly,
    conversation,
)
from tests.support.fake_llm import running_fake_llm

WARMUP_CALLS = 5

Samples = dict[str, list[float]]
"""Milliseconds by step."""


class Stages:
    """Milliseconds per step of the calls being timed."""

    def __init__(self) -> None:
        self.samples: Samples = defaultdict(list)
        self.timing = False

    def clocked(self, step: Callable[..., Awaitable[Any]], label: str) -> Any:
        @functools.wraps(step)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await step(*args, **kwargs)
            finally:
                if self.timing:
                    self.samples[label].append((time.perf_counter() - started) * 1000)

        return timed


STEPS: tuple[tuple[Any, str, str], ...] = (
    (turn, "reconcile", "reconcile"),
    (history_load, "load_context", "load and assemble the context"),
    (turn.ChatTurns, "_call", "model call through litellm"),
    (turn, "store_batch", "append"),
)
"""The steps timed: where each is looked up (a module, or a class for a method), its name."""


def _clock_the_steps(stages: Stages) -> None:
    for owner, name, label in STEPS:
        setattr(owner, name, stages.clocked(getattr(owner, name), label))


async def run(backend: str, wire: str, lengths: list[int], calls: int) -> dict[int, Samples]:
    results: dict[int, Samples] = {}
    stages = Stages()
    _clock_the_steps(stages)
    with running_fake_llm(responder=answer_constantly) as fake:
        async with migrated_database(backend, POSTGRES_ADMIN_URL) as url:
            settings = Settings(
                _env_file=None,
                database_url=url,
                model_allowed=f"{CHAT_MODEL},{MESSAGES_MODEL}",
                model_api_base=fake.base_url,
                model_api_key="bench",
                model_context_tokens=f"{CHAT_MODEL}={WINDOW},{MESSAGES_MODEL}={WINDOW}",
                summary_workers=0,
            )
            app = create_app(settings)
            async with (
                app.router.lifespan_context(app),
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app),
                    base_url="http://localhost",
                    headers={"content-type": "application/json"},
                    timeout=120,
                ) as http,
            ):
                for earlier in lengths:
                    stages.samples = results[earlier] = defaultdict(list)
                    messages = conversation(earlier)
                    full = _body(wire, messages)
                    seed = _body(wire, messages[:-2])
                    for index in range(WARMUP_CALLS + calls):
                        stages.timing = index >= WARMUP_CALLS
                        await _one_turn(http, wire, seed, full, stages)
    return results


def _body(wire: str, messages: list[Any]) -> bytes:
    body = {"model": MODELS[wire], "messages": messages, "max_tokens": OUTPUT_TOKENS}
    return json.dumps(body).encode()


async def _one_turn(
    http: httpx.AsyncClient, wire: str, seed: bytes, full: bytes, stages: Stages
) -> None:
    session = {SESSION_HEADER: f"stages-{uuid.uuid4().hex}"}
    timing, stages.timing = stages.timing, False
    (await http.post(PATHS[wire], content=seed, headers=session)).raise_for_status()
    stages.timing = timing
    started = time.perf_counter()
    answer = await http.post(PATHS[wire], content=full, headers=session)
    if timing:
        stages.samples["whole request"].append((time.perf_counter() - started) * 1000)
    stages.timing = False
    answer.raise_for_status()
    (await http.delete(f"/v1/sessions/{session[SESSION_HEADER]}")).raise_for_status()


def render(backend: str, wire: str, results: dict[int, Samples]) -> str:
    lengths = list(results)
    lines = [
        f"| {backend}, {wire}, p50 | " + " | ".join(f"{n:,} earlier" for n in lengths) + " |",
        "|---|" + "---:|" * len(lengths),
    ]
    for label in results[lengths[0]]:
        cells = [f"{statistics.median(results[n][label]):.2f} ms" for n in lengths]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", default="postgresql", choices=("postgresql", "sqlite"))
    parser.add_argument("--wire", default="chat_completions", choices=tuple(PATHS))
    parser.add_argument("--earlier", default="20,2000", help="comma-separated lengths")
    parser.add_argument("--calls", type=int, default=60)
    args = parser.parse_args()
    lengths = [int(length) for length in args.earlier.split(",")]
    results = asyncio.run(run(args.backend, args.wire, lengths, args.calls))
    print(render(args.backend, args.wire, results))


if __name__ == "__main__":
    main()
