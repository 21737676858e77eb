"""The hot path against the limit: Precis's append and history beside the least a chat
backend needs, on PostgreSQL and SQLite, in one run.

    python -m scripts.bench.hot_path [--backends postgresql,sqlite] [--quick]

(`make bench` runs it too.) Three servers on one fresh database, each under uvicorn in a
process of its own, as Precis is served:

- Precis (`api.main:app`);
- the same-work app (`scripts/bench/minimal_app.py`): Precis's store functions, token counting
  and context assembly without the framework;
- the least-work app (`scripts/bench/least_app.py`): one indexed insert per message, one
  indexed select for the history, JSON out, on the raw driver: the limit.

Measured in alternating rounds (`scripts.bench.lib.interleaved`), so a burst of other work on
the machine hits all three alike: a single append (one message, sequential), a history load
(`max_tokens=600` of a 200-message session, sequential), and 16 chat backends at once (append,
history, append: `scripts/bench/throughput.py`), in requests/s and in the server's CPU per
request. Targets against the least-work app: a single request at most 1.25x its p50, the 16
backends at least 0.85x its throughput.

The gap between Precis and the limit is split by stage, per request, from the same run:
the framework (HTTP parsing, validation, middleware, serialization: Precis minus the same-work
app over HTTP), then, measured in this process, each piece the same-work app does beyond the
least: authentication and metrics, token counting, context assembly, and the store's
statements and pool (Precis's store call minus the least-work app's statement on the same
database); what is left of the same-work app's gap is the rest (its answer's size, pydantic's
encoding of the rows).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from api import metrics, store
from api.auth import authenticate
from api.context import loaded_context
from scripts.bench import least_app
from scripts.bench.lib import (
    POSTGRES_ADMIN_URL,
    TENANT,
    RoundFn,
    Stats,
    interleaved,
    sequential,
)
from scripts.bench.load import sentence
from scripts.bench.minimal_app import served as served_minimal
from scripts.bench.precis import PrecisStore, get, post
from scripts.bench.results import Results, RowOut
from scripts.bench.throughput import BACKENDS, MAX_TOKENS, NO_SUMMARIES, Meter, chat_turns
from summarizer.tokens import count_message
from tests.support.live_server import SERVER_PIDS, served
from tests.support.scratch_db import create_postgres_database, drop_postgres_database, migrate

SINGLE_TARGET = 1.25
"""A single append or history load: at most this many times the least-work app's p50."""

THROUGHPUT_TARGET = 0.85
"""16 chat backends: at least this share of the least-work app's requests/s."""

HISTORY_MESSAGES = 200
"""Messages in the session a history load reads (each server its own, stored through it)."""

SERVERS = ("precis", "same-work", "least-work")

LABELS = {
    "precis": "Precis",
    "same-work": "same-work app",
    "least-work": "least-work app (raw driver)",
}


@dataclass(frozen=True)
class Plan:
    requests_per_round: int
    rounds: int
    turns_per_round: int
    turn_rounds: int
    stage_samples: int

    @classmethod
    def full(cls) -> Plan:
        return cls(60, 7, 4, 5, 300)

    @classmethod
    def quick(cls) -> Plan:
        return cls(15, 3, 2, 2, 50)


@dataclass
class Measured:
    """One backend's figures: per request kind, each server's stats; the stages, in ms."""

    backend: str
    single: dict[str, Stats] = field(default_factory=dict)
    history: dict[str, Stats] = field(default_factory=dict)
    throughput: dict[str, Stats] = field(default_factory=dict)
    cpu_ms: dict[str, float | None] = field(default_factory=dict)
    stages: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per request kind (append, history), per stage: milliseconds per request."""


def chat_message(rng: random.Random, index: int) -> dict[str, Any]:
    return {"role": "user" if index % 2 == 0 else "assistant", "content": sentence(rng, 8, 60)}


def fresh_sessions(
    create: Callable[[str, dict[str, Any]], Awaitable[object]], name: str, sessions: list[str]
) -> Callable[[], Awaitable[None]]:
    """Create `sessions` without summaries, for the two servers that keep session rows."""

    async def make() -> None:
        if name != "least-work":
            for session in sessions:
                await create(session, NO_SUMMARIES)

    return make


def appending(
    client: httpx.AsyncClient, session: str, messages: list[dict[str, Any]]
) -> Callable[[int], Awaitable[Any]]:
    return lambda i: post(client, session, [messages[i % len(messages)]])


def loading(client: httpx.AsyncClient, path: str) -> Callable[[int], Awaitable[Any]]:
    return lambda _i: get(client, path, {"max_tokens": str(MAX_TOKENS)})


async def measure_http(
    measured: Measured, clients: dict[str, httpx.AsyncClient], precis: PrecisStore, plan: Plan
) -> None:
    rng = random.Random(7)
    messages = [chat_message(rng, index) for index in range(HISTORY_MESSAGES)]

    single: dict[str, RoundFn] = {}
    history: dict[str, RoundFn] = {}
    for name, client in clients.items():
        await fresh_sessions(precis.create, name, [f"{name}-single", f"{name}-history"])()
        for start in range(0, HISTORY_MESSAGES, 50):
            await post(client, f"{name}-history", messages[start : start + 50])
        single[name] = sequential(appending(client, f"{name}-single", messages))
        history[name] = sequential(loading(client, f"/v1/sessions/{name}-history/history"))
    print(f"[{measured.backend}] single append, history max_tokens={MAX_TOKENS}", flush=True)
    measured.single = await interleaved(single, plan.requests_per_round, plan.rounds)
    measured.history = await interleaved(history, plan.requests_per_round, plan.rounds)

    print(f"[{measured.backend}] {BACKENDS} chat backends", flush=True)
    meters: dict[str, Meter] = {}
    turns: dict[str, RoundFn] = {}
    for name, client in clients.items():
        sessions = [f"chat-{name}-{index:02d}" for index in range(BACKENDS)]
        await fresh_sessions(precis.create, name, sessions)()
        meters[name] = Meter(SERVER_PIDS.get(str(client.base_url).rstrip("/")))
        turns[name] = meters[name].wrap(chat_turns(client, sessions))
    measured.throughput = await interleaved(turns, plan.turns_per_round, plan.turn_rounds, warmup=1)
    measured.cpu_ms = {name: meter.cpu_ms_per_request for name, meter in meters.items()}


async def median_ms(operation: Callable[[int], Awaitable[Any]], samples: int) -> float:
    """The median of `samples` sequential runs, after two to warm up, in milliseconds (as
    the HTTP rows compare p50s)."""
    for index in range(2):
        await operation(-1 - index)
    times = []
    for index in range(samples):
        started = time.perf_counter()
        await operation(index)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


async def measure_stages(measured: Measured, url: str, precis: PrecisStore, plan: Plan) -> None:
    """The pieces of the same-work app's work beyond the least, each timed in this process."""
    rng = random.Random(11)
    messages = [chat_message(rng, index) for index in range(HISTORY_MESSAGES)]
    news = [
        store.NewMessage(
            m["role"], m["content"], None, None, None, None, None, None, count_message(m)
        )
        for m in messages
    ]
    samples = plan.stage_samples
    least = await least_app.open_store(url, 2)
    try:

        async def auth_and_metrics(_i: int) -> None:
            with metrics.APPEND_SECONDS.time():
                authenticate({}, "127.0.0.1", "")

        async def tokens(i: int) -> None:
            message = messages[i % len(messages)]
            count_message({"role": message["role"], "content": message["content"]})

        await precis.create("stage-append", NO_SUMMARIES)
        await precis.create("stage-history", NO_SUMMARIES)
        for start in range(0, HISTORY_MESSAGES, 50):
            await precis.append("stage-history", news[start : start + 50])
            await least.append("stage-history", messages[start : start + 50])
        begun = await precis.refresh("stage-history")
        async with precis.read_sessionmaker() as db:
            rows = await store.load_rows(
                db, begun.session, store.EVERY_LIVE_SUMMARY, MAX_TOKENS, summarized=False
            )

        async def context(_i: int) -> None:
            loaded_context(rows, MAX_TOKENS)

        async def store_append(i: int) -> None:
            await precis.append("stage-append", [news[i % len(news)]])

        async def least_append(i: int) -> None:
            await least.append("stage-append", [messages[i % len(messages)]])

        async def store_history(_i: int) -> None:
            async with precis.read_sessionmaker() as db:
                begin = await store.session_for_history(db, TENANT, "stage-history")
                await store.load_rows(
                    db, begin.session, store.EVERY_LIVE_SUMMARY, MAX_TOKENS, summarized=False
                )

        async def least_history(_i: int) -> None:
            least_app.within(await least.newest("stage-history"), MAX_TOKENS)

        common = await median_ms(auth_and_metrics, samples)
        measured.stages = {
            "append": {
                "auth and metrics": common,
                "token counting": await median_ms(tokens, samples),
                "store statements and pool": await median_ms(store_append, samples)
                - await median_ms(least_append, samples),
            },
            "history": {
                "auth and metrics": common,
                "context assembly": await median_ms(context, samples),
                "store statements and pool": await median_ms(store_history, samples)
                - await median_ms(least_history, samples),
            },
        }
    finally:
        await least.close()


async def measure_backend(backend: str, url: str, plan: Plan) -> Measured:
    await asyncio.to_thread(migrate, url)
    measured = Measured(backend)
    precis = PrecisStore(url)
    try:
        with (
            served(url, summary_workers="0") as precis_url,
            served_minimal(url, summary_workers="0") as minimal_url,
            least_app.served(url) as least_url,
        ):
            urls = dict(zip(SERVERS, (precis_url, minimal_url, least_url), strict=True))
            clients = {name: httpx.AsyncClient(base_url=u, timeout=120) for name, u in urls.items()}
            try:
                await measure_http(measured, clients, precis, plan)
            finally:
                for client in clients.values():
                    await client.aclose()
        print(f"[{backend}] stages", flush=True)
        await measure_stages(measured, url, precis, plan)
    finally:
        await precis.close()
    framework = {
        "append": measured.single["precis"].p50_ms - measured.single["same-work"].p50_ms,
        "history": measured.history["precis"].p50_ms - measured.history["same-work"].p50_ms,
    }
    for kind, stats in (("append", measured.single), ("history", measured.history)):
        pieces = measured.stages[kind]
        gap = stats["same-work"].p50_ms - stats["least-work"].p50_ms
        pieces["rest of the same-work app"] = gap - sum(pieces.values())
        measured.stages[kind] = {
            "framework (HTTP, validation, middleware, serialization)": framework[kind],
            **pieces,
        }
    return measured


def record(results: Results, measured: Measured) -> None:
    """The rows of `make bench`'s table and the measures of its JSON."""
    backend = measured.backend
    for kind, stats in (("single append", measured.single), ("history", measured.history)):
        ours, limit, same = stats["precis"], stats["least-work"], stats["same-work"]
        ratio = ours.p50_ms / limit.p50_ms
        results.row(
            RowOut(
                backend,
                "hot path",
                f"{kind} p50 over HTTP (vs the least-work app; same-work app "
                f"{same.p50_ms:.2f} ms, {same.p50_ms / limit.p50_ms:.2f}x)",
                f"{ours.p50_ms:.2f} ms",
                f"least-work {limit.p50_ms:.2f} ms",
                ratio,
                f"<= {SINGLE_TARGET}x",
                ratio <= SINGLE_TARGET,
            )
        )
    ours, limit = measured.throughput["precis"], measured.throughput["least-work"]
    same = measured.throughput["same-work"]
    ratio = ours.rate / limit.rate
    cpu = measured.cpu_ms
    results.row(
        RowOut(
            backend,
            "hot path",
            f"{BACKENDS} chat backends, req/s (vs the least-work app; same-work app "
            f"{same.rate:,.0f} req/s, {same.rate / limit.rate:.2f}x; server CPU per request "
            + ", ".join(f"{name} {cpu[name] or 0:.2f} ms" for name in SERVERS)
            + ")",
            f"{ours.rate:,.0f} req/s",
            f"least-work {limit.rate:,.0f} req/s",
            ratio,
            f">= {THROUGHPUT_TARGET}x",
            ratio >= THROUGHPUT_TARGET,
        )
    )
    for name in SERVERS:
        results.record(f"{backend}/hot path/single append/{name}", measured.single[name])
        results.record(f"{backend}/hot path/history/{name}", measured.history[name])
        results.record(f"{backend}/hot path/throughput/{name}", measured.throughput[name])


def render_stages(measured: Measured) -> str:
    """The gap between Precis and the least-work app, stage by stage, per request (ms)."""
    lines = [
        f"{measured.backend}: where Precis's p50 goes beyond the least-work app (ms per request)",
        "| stage | append | history |",
        "|---|---:|---:|",
    ]
    append, history = measured.stages["append"], measured.stages["history"]
    for stage in dict.fromkeys([*append, *history]):
        cells = [f"{kind[stage]:.3f}" if stage in kind else "" for kind in (append, history)]
        lines.append(f"| {stage} | {cells[0]} | {cells[1]} |")
    totals = [
        stats["precis"].p50_ms - stats["least-work"].p50_ms
        for stats in (measured.single, measured.history)
    ]
    lines.append(f"| **Precis minus least-work, p50** | {totals[0]:.3f} | {totals[1]:.3f} |")
    return "\n".join(lines)


async def run(
    results: Results, backends: tuple[str, ...], postgres_admin_url: str, plan: Plan
) -> list[Measured]:
    """Every backend's figures, recorded into `results`; the stage tables printed."""
    done: list[Measured] = []
    if "postgresql" in backends:
        url = await create_postgres_database(postgres_admin_url, "precis_hot")
        try:
            done.append(await measure_backend("PostgreSQL", url, plan))
        finally:
            await drop_postgres_database(postgres_admin_url, url)
    if "sqlite" in backends:
        with tempfile.TemporaryDirectory(prefix="precis-hot-") as folder:
            url = f"sqlite+aiosqlite:///{Path(folder) / 'hot.db'}"
            done.append(await measure_backend("SQLite", url, plan))
    for measured in done:
        record(results, measured)
    return done


def main() -> None:
    from scripts.bench.results import table

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="postgresql,sqlite")
    parser.add_argument("--postgres-admin-url", default=POSTGRES_ADMIN_URL)
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    plan = Plan.quick() if args.quick else Plan.full()
    results = Results()
    done = asyncio.run(run(results, tuple(args.backends.split(",")), args.postgres_admin_url, plan))
    print()
    print(table(results.rows))
    for measured in done:
        print()
        print(render_stages(measured))
    missed = sum(row.met is False for row in results.rows)
    print(f"{missed} target(s) missed" if missed else "every target met")
    sys.exit(0)


if __name__ == "__main__":
    main()
