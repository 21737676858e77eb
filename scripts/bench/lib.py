"""Shared pieces of the benchmark: payloads, timing statistics, database URLs, the machine.

Used by `scripts/bench/run.py`; nothing here runs at import.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy.engine import make_url

from api.main import create_app
from api.settings import Settings
from summarizer.tokens import count_message, count_text

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_FILE = Path(__file__).resolve().parent / "data" / "chat_messages.jsonl"

TENANT = "default"
"""The development-mode tenant, so sessions built at the store layer are visible over HTTP."""

POSTGRES_ADMIN_URL = os.environ.get(
    "PRECIS_BENCH_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
)
"""Where the benchmarks create their scratch PostgreSQL databases (PRECIS_BENCH_POSTGRES_URL)."""


# --- payloads -------------------------------------------------------------------------------


class Payloads:
    """Real chat messages, cycled and perturbed so a session of any length reads like chat.

    Message `i` is message `i mod N` of the sample; from the second cycle on its text gets a
    short, cycle-specific prefix, so no two stored messages are byte-identical.
    """

    def __init__(self, path: Path = DATA_FILE) -> None:
        lines = path.read_text(encoding="utf-8").splitlines()
        self.base: list[dict[str, str]] = [json.loads(line) for line in lines if line.strip()]
        self._prefix_tokens: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.base)

    @cached_property
    def base_tokens(self) -> list[int]:
        return [count_message(message) for message in self.base]

    @staticmethod
    def _prefix(cycle: int) -> str:
        return f"(take {cycle}) " if cycle else ""

    def message(self, index: int) -> dict[str, str]:
        """The `index`-th message of a generated session, in OpenAI chat shape."""
        cycle, position = divmod(index, len(self.base))
        base = self.base[position]
        return {"role": base["role"], "content": self._prefix(cycle) + base["content"]}

    def tokens(self, index: int) -> int:
        """Token count of `message(index)`: the sample's count plus its prefix (cheap, +-1)."""
        cycle, position = divmod(index, len(self.base))
        if cycle not in self._prefix_tokens:
            self._prefix_tokens[cycle] = count_text(self._prefix(cycle))
        return self.base_tokens[position] + self._prefix_tokens[cycle]

    def describe(self) -> dict[str, Any]:
        lengths = sorted(len(message["content"]) for message in self.base)
        cjk = sum(
            1 for m in self.base if any("\u4e00" <= char <= "\u9fff" for char in m["content"])
        )
        return {
            "messages": len(self.base),
            "median_chars": lengths[len(lengths) // 2],
            "over_10k_chars": sum(1 for length in lengths if length > 10_000),
            "cjk_messages": cjk,
        }


# --- statistics -----------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of `values` (q in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Stats:
    """Latencies of one measured operation and the item rate over the wall time."""

    ops: int
    items: int
    wall_s: float
    p50_ms: float
    p95_ms: float
    rate: float
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, latencies: list[float], items_per_op: int, wall_s: float) -> Stats:
        items = len(latencies) * items_per_op
        return cls(
            ops=len(latencies),
            items=items,
            wall_s=wall_s,
            p50_ms=percentile(latencies, 50) * 1e3,
            p95_ms=percentile(latencies, 95) * 1e3,
            rate=items / wall_s if wall_s > 0 else math.nan,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


RoundFn = Callable[[int, int], Awaitable[list[float]]]
"""Runs `n` operations starting at operation index `offset`; returns their latencies."""


def sequential(operation: Callable[[int], Awaitable[Any]]) -> RoundFn:
    """A round of `operation(i)` calls, one after the other."""

    async def run(n: int, offset: int) -> list[float]:
        latencies: list[float] = []
        for i in range(offset, offset + n):
            t0 = time.perf_counter()
            await operation(i)
            latencies.append(time.perf_counter() - t0)
        return latencies

    return run


def concurrent(operation: Callable[[int, int], Awaitable[Any]], workers: int) -> RoundFn:
    """A round of `n` calls per worker, `operation(worker, i)`, the workers running at once."""

    async def run(n: int, offset: int) -> list[float]:
        latencies: list[float] = []

        async def worker(w: int) -> None:
            for i in range(offset, offset + n):
                t0 = time.perf_counter()
                await operation(w, i)
                latencies.append(time.perf_counter() - t0)

        await asyncio.gather(*(worker(w) for w in range(workers)))
        return latencies

    return run


async def interleaved(
    contestants: dict[str, RoundFn],
    per_round: int,
    rounds: int,
    items_per_op: int = 1,
    warmup: int = 2,
) -> dict[str, Stats]:
    """Run the contestants in alternating rounds, so background load hits them alike.

    The machine is shared: a burst of someone else's work during one contestant's turn
    would skew a ratio. Each round runs `per_round` operations of every contestant, in an
    order that rotates from round to round; the wall time of a contestant is the sum of
    its turns.
    """
    names = list(contestants)
    for name in names:
        await contestants[name](warmup, -warmup - 1)
    latencies: dict[str, list[float]] = {name: [] for name in names}
    walls = dict.fromkeys(names, 0.0)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            t0 = time.perf_counter()
            latencies[name] += await contestants[name](per_round, r * per_round)
            walls[name] += time.perf_counter() - t0
    return {name: Stats.of(latencies[name], items_per_op, walls[name]) for name in names}


async def timed(
    operation: Callable[[int], Awaitable[Any]],
    count: int,
    budget_s: float = 60.0,
    warmup: int = 1,
) -> Stats:
    """Run `operation(i)` sequentially `count` times (fewer once `budget_s` runs out)."""
    for i in range(warmup):
        await operation(-1 - i)
    latencies: list[float] = []
    started = time.perf_counter()
    for i in range(count):
        t0 = time.perf_counter()
        await operation(i)
        t1 = time.perf_counter()
        latencies.append(t1 - t0)
        if t1 - started > budget_s and len(latencies) >= 3:
            break
    return Stats.of(latencies, 1, time.perf_counter() - started)


# --- databases ------------------------------------------------------------------------------


def asyncpg_dsn(url: str) -> str:
    """The libpq-style DSN of an SQLAlchemy `postgresql+asyncpg://` URL."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def sqlite_path(url: str) -> str:
    database = make_url(url).database
    assert database, "an SQLite file database"
    return database


# --- processes ------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """The user and system CPU time process `pid` has used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- the machine ----------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    model = "unknown"
    memory_kib = 0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory_kib = int(line.split()[1])
                break
    except OSError:
        pass
    load = os.getloadavg()
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(memory_kib / 1024 / 1024, 1),
        "python": sys.version.split()[0],
        "load_average": [round(value, 2) for value in load],
    }


@asynccontextmanager
async def in_process_app(
    template: Path, folder: Path, **settings: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """The service in this process, on a fresh copy in `folder` of the migrated SQLite database
    `template`, configured by `settings` alone (no environment), and a client of it."""
    database = folder / f"run-{time.monotonic_ns()}.db"
    shutil.copyfile(template, database)
    app = create_app(
        Settings(_env_file=None, database_url=f"sqlite+aiosqlite:///{database}", **settings)
    )
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=120) as http,
    ):
        yield http


async def every_summary(http: httpx.AsyncClient, session: str) -> list[dict[str, Any]]:
    """Every summary of the session, superseded ones included."""
    found: list[dict[str, Any]] = []
    params: dict[str, Any] = {"include_superseded": True, "limit": 1000}
    while True:
        answer = await http.get(f"/v1/sessions/{session}/summaries", params=params)
        answer.raise_for_status()
        body = answer.json()
        found += body["summaries"]
        if body["next_cursor"] is None:
            return found
        params["cursor"] = body["next_cursor"]
