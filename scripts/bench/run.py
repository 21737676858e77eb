"""The performance benchmark of issue 6: `make bench`, or `python -m scripts.bench.run`.

Measures Precis on PostgreSQL and SQLite against the raw drivers (asyncpg, sqlite3 in WAL
mode), against the libraries users would pick instead (OpenAI Agents SDK SQLAlchemySession,
langchain-postgres) and, through HTTP, against a minimal ASGI app doing the same SQL and
answering the same bytes (`scripts/bench/minimal_app.py`), in one run, on loopback only; and
what `POST /v1/responses` with a conversation adds to a model call
(`scripts/bench/responses_overhead.py`), and what the chat wires add to a resent conversation's
call (`scripts/bench/wire_overhead.py`); and the hot path against the least a chat backend
needs, stage by stage (`scripts/bench/hot_path.py`); and the export and import of a
100,000-message session in constant memory (`scripts/bench/transfer.py`); and the operator
console's pages on a 100,000-message session (`scripts/bench/console.py`).
Every comparison is a ratio between two numbers of the same run; fixed times mean nothing
across machines.

Prints a markdown table (the README's "Performance" section) and writes every number to a
JSON file (`bench-results.json` unless `--json` says otherwise). PostgreSQL gets a scratch
database `precis_bench_<random>` that is dropped at the end; SQLite a file in a temp folder.

This module is the command line and the order of the run; the measures are their own modules:
`append_rows`, `load_rows` (on the sessions of `load_sessions`), `http_rows`, `token_rows`,
recording into `results`; `plan` holds what they share, `precis` how Precis is driven.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
from sqlalchemy import text

from api.db.engine import create_engine
from scripts.bench import console, hot_path, responses_overhead, transfer, wire_overhead
from scripts.bench.append_rows import appends
from scripts.bench.baselines import (
    AgentsPeer,
    LangchainPeer,
    PeerMissing,
    RawAiosqlite,
    RawPostgres,
    RawSqlite,
)
from scripts.bench.http_rows import proactive, throughput
from scripts.bench.lib import (
    POSTGRES_ADMIN_URL,
    REPO_ROOT,
    Payloads,
    asyncpg_dsn,
    machine,
    sqlite_path,
)
from scripts.bench.load_rows import loads
from scripts.bench.minimal_app import served as served_minimal
from scripts.bench.plan import CONCURRENT_SESSIONS, Bench, Http, Peers, Plan, Raw
from scripts.bench.precis import PrecisStore
from scripts.bench.results import Results, table
from scripts.bench.token_rows import tokens
from tests.support.live_server import served
from tests.support.scratch_db import create_postgres_database, drop_postgres_database, migrate


async def run_backend(
    backend: str, url: str, bench: Bench, with_peers: bool, throughput_only: bool = False
) -> None:
    await asyncio.to_thread(migrate, url)
    precis = PrecisStore(url)
    raw: Raw = (
        RawPostgres(asyncpg_dsn(url)) if backend == "PostgreSQL" else RawSqlite(sqlite_path(url))
    )
    await raw.setup(CONCURRENT_SESSIONS)
    if backend == "SQLite":
        bench.driver = RawAiosqlite(sqlite_path(url))
        await bench.driver.setup()
    peers = Peers()
    if with_peers:
        try:
            peers.agents = AgentsPeer(url)
        except PeerMissing as exc:
            bench.results.notes.append(f"skipped {exc}")
        if backend == "PostgreSQL":
            try:
                peers.langchain = LangchainPeer(asyncpg_dsn(url))
                await peers.langchain.connect(CONCURRENT_SESSIONS)
            except PeerMissing as exc:
                bench.results.notes.append(f"skipped {exc}")
    try:
        # Both servers run throughout, so their rounds alternate (see `interleaved`).
        with (
            served(url, summary_workers="0") as base_url,
            served_minimal(url, summary_workers="0") as minimal_url,
        ):
            async with (
                httpx.AsyncClient(base_url=base_url, timeout=120) as http,
                httpx.AsyncClient(base_url=minimal_url, timeout=120) as minimal,
            ):
                servers = Http(http, minimal)
                if not throughput_only:
                    await appends(bench, backend, precis, raw, servers, peers)
                    await loads(bench, backend, url, precis, raw, servers, peers)
                await throughput(bench, backend, precis, servers)
        if not throughput_only:
            await proactive(bench, backend, url)
    finally:
        await precis.close()
        await raw.close()
        await peers.close()
        if bench.driver is not None:
            await bench.driver.close()
            bench.driver = None


async def postgres_version(admin_url: str) -> str:
    engine = create_engine(admin_url)
    try:
        async with engine.connect() as conn:
            version = await conn.scalar(text("SHOW server_version"))
            return f"PostgreSQL {version}"
    finally:
        await engine.dispose()


async def main_async(args: argparse.Namespace) -> int:
    plan = Plan.quick() if args.quick else Plan.full()
    if args.sizes:
        plan.sizes = [int(size) for size in args.sizes.split(",")]
    payloads = Payloads()
    results = Results()
    bench = Bench(plan, payloads, results)
    backends = args.backends.split(",")
    started = time.perf_counter()
    info = machine()
    info["load_average_at_start"] = info.pop("load_average")
    if "postgresql" in backends:
        info["postgresql"] = await postgres_version(args.postgres_admin_url)
    import sqlite3

    info["sqlite"] = sqlite3.sqlite_version
    if not args.throughput_only:
        tokens(bench)
    with_peers = not (args.no_peers or args.throughput_only)
    if "postgresql" in backends:
        url = await create_postgres_database(args.postgres_admin_url, "precis_bench")
        try:
            await run_backend("PostgreSQL", url, bench, with_peers, args.throughput_only)
        finally:
            await drop_postgres_database(args.postgres_admin_url, url)
    if "sqlite" in backends:
        with tempfile.TemporaryDirectory(prefix="precis-bench-") as folder:
            url = f"sqlite+aiosqlite:///{Path(folder) / 'bench.db'}"
            await run_backend("SQLite", url, bench, with_peers, args.throughput_only)
    if not args.throughput_only:
        # the largest session size of the plan: the 100,000 in a full run
        await transfer.run(results, tuple(backends), args.postgres_admin_url, max(plan.sizes))
        await console.run(results, tuple(backends), args.postgres_admin_url, max(plan.sizes))
    overhead: list[responses_overhead.OverheadRow] = []
    wires: list[wire_overhead.WireOverheadRow] = []
    hot: list[hot_path.Measured] = []
    if not args.throughput_only:
        hot_plan = hot_path.Plan.quick() if args.quick else hot_path.Plan.full()
        hot = await hot_path.run(results, tuple(backends), args.postgres_admin_url, hot_plan)
        overhead = await responses_overhead.run(
            tuple(backends), responses_overhead.CALLS, args.postgres_admin_url
        )
        wires = await wire_overhead.run(tuple(backends), postgres_admin_url=args.postgres_admin_url)
    info["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    info["duration_s"] = round(time.perf_counter() - started, 1)
    report = {
        "machine": info,
        "plan": plan.__dict__,
        "payloads": payloads.describe(),
        "command": "make bench",
        "rows": [row.__dict__ for row in results.rows],
        "measures": results.measures,
        "notes": results.notes,
        "responses_overhead": [
            {**row.__dict__, "added_p50_ms": row.added_p50_ms, "missed": row.missed()}
            for row in overhead
        ],
        "wire_overhead": wire_overhead.report(wires),
    }
    output = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
    await asyncio.to_thread(Path(args.json).write_text, output)
    print()
    print(table(results.rows))
    if overhead:
        print()
        print(responses_overhead.render(overhead))
    if wires:
        print()
        print(wire_overhead.render(wires))
    for measured in hot:
        print()
        print(hot_path.render_stages(measured))
    print()
    print(f"machine: {info}")
    for note in results.notes:
        print(f"note: {note}")
    print(f"wrote {args.json}")
    missed = sum(row.met is False for row in results.rows)
    missed += sum(row.backend in backends and row.missed() for row in overhead)
    missed += sum(row.missed() for row in wires)
    print(f"{missed} target(s) missed" if missed else "every target met")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=str(REPO_ROOT / "bench-results.json"))
    parser.add_argument("--backends", default="postgresql,sqlite")
    parser.add_argument(
        "--postgres-admin-url",
        default=POSTGRES_ADMIN_URL,
    )
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--sizes", help="comma-separated session sizes (default 1000,10000,100000)")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument(
        "--throughput-only",
        action="store_true",
        help="only the 16-chat-backend throughput row (Precis against the minimal app)",
    )
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    sys.exit(asyncio.run(main_async(parser.parse_args())))


if __name__ == "__main__":
    main()
