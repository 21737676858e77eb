"""Throughput under concurrency: 16 chat backends at once against Precis and the minimal app.

Each backend plays turns on its own session, as `make load` does: append the user's
message, load the history under `max_tokens`, append the assistant's answer (each message
with a `client_id`). The same turns are played against Precis and against the minimal app
of `scripts/bench/minimal_app.py` on the same database, in alternating rounds
(`scripts.bench.lib.interleaved`), and compared in requests per second and in the CPU each
server's process used per request.

`scripts/bench/http_rows.py` adds the rows to `make bench` (`--throughput-only` runs them alone);
`scripts/bench/profile.py --chat-backends` profiles Precis's server under the same load.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from scripts.bench.lib import RoundFn, Stats, cpu_seconds, interleaved
from scripts.bench.load import sentence
from tests.support.live_server import SERVER_PIDS

BACKENDS = 16
"""Chat backends playing at once, each on its own session."""

MAX_TOKENS = 600
"""The history's budget, as `make load` asks (a tail of about ten of these messages)."""

TARGET = 0.8
"""Precis's requests/s should be at least this share of the minimal app's."""

SEED = 7

NO_SUMMARIES = {"dynamic_summary_enabled": False}
"""The sessions' settings: a load over `max_tokens` truncates, never summarizes inline (the
minimal app never does), and no job is queued."""


def session_ids(label: str, backends: int = BACKENDS) -> list[str]:
    """One session per backend, named after the contestant."""
    return [f"chat-{label}-{index:02d}" for index in range(backends)]


async def expect(request: Awaitable[httpx.Response], status: int) -> None:
    """Any other status stops the benchmark: a failed request would be cheap and fast."""
    response = await request
    if response.status_code != status:
        raise RuntimeError(f"answered {response.status_code}: {response.text[:300]}")


def chat_turns(
    client: httpx.AsyncClient, sessions: Sequence[str], max_tokens: int = MAX_TOKENS
) -> RoundFn:
    """A round of `n` turns per backend, every backend at once; the latency of each request.

    Turn `i` of a backend says the same words against either server (one generator per
    backend, seeded alike), so both do the same work."""
    rngs = [random.Random(f"{SEED}:{index}") for index in range(len(sessions))]
    query = {"max_tokens": str(max_tokens)}

    async def run(n: int, offset: int) -> list[float]:
        latencies: list[float] = []

        async def timed(request: Awaitable[httpx.Response], status: int) -> None:
            started = time.perf_counter()
            await expect(request, status)
            latencies.append(time.perf_counter() - started)

        async def backend(index: int) -> None:
            rng, path = rngs[index], f"/v1/sessions/{sessions[index]}"
            for turn in range(offset, offset + n):
                question = {
                    "role": "user",
                    "content": sentence(rng, 8, 60),
                    "client_id": f"u{turn}",
                    "metadata": {"turn": turn},
                }
                await timed(client.post(f"{path}/messages", json={"messages": [question]}), 201)
                await timed(client.get(f"{path}/history", params=query), 200)
                answer = {
                    "role": "assistant",
                    "content": sentence(rng, 10, 80),
                    "client_id": f"a{turn}",
                }
                await timed(client.post(f"{path}/messages", json={"messages": [answer]}), 201)

        await asyncio.gather(*(backend(index) for index in range(len(sessions))))
        return latencies

    return run


@dataclass
class Meter:
    """What a contestant's timed rounds cost: requests/s of each (the spread the totals hide)
    and, when its server's process is known, the CPU that process used per request."""

    pid: int | None
    rates: list[float] = field(default_factory=list)
    requests: int = 0
    cpu_s: float = 0.0

    def wrap(self, play: RoundFn) -> RoundFn:
        async def run(n: int, offset: int) -> list[float]:
            cpu = self.cpu()
            started = time.perf_counter()
            latencies = await play(n, offset)
            if offset >= 0:  # not the warm-up
                self.rates.append(len(latencies) / (time.perf_counter() - started))
                self.requests += len(latencies)
                self.cpu_s += self.cpu() - cpu
            return latencies

        return run

    def cpu(self) -> float:
        return 0.0 if self.pid is None else cpu_seconds(self.pid)

    @property
    def cpu_ms_per_request(self) -> float | None:
        if self.pid is None or not self.requests:
            return None
        return self.cpu_s / self.requests * 1e3


@dataclass(frozen=True)
class Compared:
    """Both servers' totals over every round, and their meters."""

    precis: Stats
    minimal: Stats
    meters: dict[str, Meter]

    @property
    def ratio(self) -> float:
        return self.precis.rate / self.minimal.rate


async def compare(
    precis: httpx.AsyncClient,
    minimal: httpx.AsyncClient,
    create: Callable[[str, dict[str, Any]], Awaitable[object]],
    turns_per_round: int,
    rounds: int,
) -> Compared:
    """The chat turns against both servers in alternating rounds; `create` makes each
    backend's session first, with summaries off (`make load --compare-minimal` turns them off
    for the whole server). A server started by `tests.support.live_server.served_app` has its CPU
    measured too."""
    clients = {"precis": precis, "minimal": minimal}
    meters: dict[str, Meter] = {}
    contestants: dict[str, RoundFn] = {}
    for name, client in clients.items():
        sessions = session_ids(name)
        for session in sessions:
            await create(session, NO_SUMMARIES)
        meters[name] = Meter(SERVER_PIDS.get(str(client.base_url).rstrip("/")))
        contestants[name] = meters[name].wrap(chat_turns(client, sessions))
    stats = await interleaved(contestants, turns_per_round, rounds, warmup=1)
    for name, measured in stats.items():
        meter = meters[name]
        measured.extra.update(
            rates_per_round=meter.rates, server_cpu_ms_per_request=meter.cpu_ms_per_request
        )
    return Compared(stats["precis"], stats["minimal"], meters)
