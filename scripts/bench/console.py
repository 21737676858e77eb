"""The operator console's pages on a 100,000-message session: `make bench` runs it (`run`),
or `python -m scripts.bench.console` alone.

The session is the transfer bench's (the bench's chat messages, a live summary per thousand
messages: `scripts/bench/transfer.py`), imported into a scratch database of each backend; a
server (`uvicorn api.main:app`, development mode, loopback) then answers each page
`REQUESTS` times in a row over HTTP. A row per page and backend: its p50 (and p95), which
must stay within `TARGET_MS` (MISSED otherwise).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import httpx

from scripts.bench.lib import POSTGRES_ADMIN_URL, Payloads, Stats
from scripts.bench.results import Results, RowOut, ms, table
from scripts.bench.transfer import import_file, write_file
from tests.support.live_server import served
from tests.support.scratch_db import create_postgres_database, drop_postgres_database, migrate

MESSAGES = 100_000
"""The session's size: the issue's."""

TARGET_MS = 100.0
"""Most a page's p50 may take: the issue's bound."""

REQUESTS = 50
"""Timed requests per page, after `WARMUP` untimed ones."""

WARMUP = 5

SESSION = "console-100k"


def pages(summary_id: int) -> dict[str, str]:
    """Each page measured, by the name its row shows."""
    return {
        "sessions list": "/console",
        "session page, newest 200 seqs, context at 4,000 tokens": f"/console/sessions/{SESSION}",
        "session page, first 200 seqs": f"/console/sessions/{SESSION}?page=1",
        "summary page (1,000 sources, first 200 seqs)": f"/console/summaries/{summary_id}",
        "health": "/console/health",
    }


async def timed_page(http: httpx.AsyncClient, path: str) -> Stats:
    latencies: list[float] = []
    started = time.perf_counter()
    for index in range(WARMUP + REQUESTS):
        begun = time.perf_counter()
        answer = await http.get(path)
        elapsed = time.perf_counter() - begun
        if answer.status_code != 200:
            raise RuntimeError(f"GET {path} answered {answer.status_code}: {answer.text[:300]}")
        if index >= WARMUP:
            latencies.append(elapsed)
    return Stats.of(latencies, 1, time.perf_counter() - started)


async def measure(url: str, folder: Path, messages: int) -> dict[str, Stats]:
    """Import the session into `url` (migrated here), serve it, time every page."""
    await asyncio.to_thread(migrate, url)
    path = folder / "console.jsonl"
    await asyncio.to_thread(write_file, path, SESSION, messages, Payloads())
    await import_file(url, path)
    with served(url, summary_workers="0") as base_url:
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
            listed = await http.get(f"/v1/sessions/{SESSION}/summaries", params={"limit": 1})
            listed.raise_for_status()
            summary_id = listed.json()["summaries"][0]["id"]
            return {name: await timed_page(http, path) for name, path in pages(summary_id).items()}


async def run(results: Results, backends: tuple[str, ...], admin_url: str, messages: int) -> None:
    """Measure each backend, record a row per page into `results`, print MISSED past target."""
    measured: dict[str, dict[str, Stats]] = {}
    with tempfile.TemporaryDirectory(prefix="precis-console-") as folder:
        if "sqlite" in backends:
            url = f"sqlite+aiosqlite:///{Path(folder) / 'console.db'}"
            measured["SQLite"] = await measure(url, Path(folder), messages)
        if "postgresql" in backends:
            url = await create_postgres_database(admin_url, "precis_bench")
            try:
                measured["PostgreSQL"] = await measure(url, Path(folder), messages)
            finally:
                await drop_postgres_database(admin_url, url)
    for backend, by_page in measured.items():
        for name, stats in by_page.items():
            results.record(f"console {backend} {name}", stats)
            met = stats.p50_ms <= TARGET_MS
            results.row(
                RowOut(
                    backend=backend,
                    section="console",
                    measure=f"console: {name}, {messages:,}-message session",
                    value=ms(stats, p95=True),
                    reference="",
                    ratio=None,
                    target=f"p50 <= {TARGET_MS:.0f} ms",
                    met=met,
                )
            )
            if not met:
                print(f"MISSED: console {name} on {backend}: p50 {stats.p50_ms:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="postgresql,sqlite")
    parser.add_argument("--messages", type=int, default=MESSAGES)
    parser.add_argument(
        "--postgres-admin-url",
        default=POSTGRES_ADMIN_URL,
    )
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    results = Results()
    backends = tuple(args.backends.split(","))
    asyncio.run(run(results, backends, args.postgres_admin_url, args.messages))
    print(table(results.rows))


if __name__ == "__main__":
    main()
