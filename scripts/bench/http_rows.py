"""The rows only a running server gives: 16 chat backends' throughput against the minimal app
(`scripts/bench/throughput.py`), and the latency of a proactive summary, from the append that
schedules it to the history that shows it."""

from __future__ import annotations

import asyncio
import statistics
import time

import httpx

from api.main import create_app
from api.settings import Settings
from scripts.bench.plan import MINIMAL_APP, Bench, Http
from scripts.bench.precis import PrecisStore, get, post
from scripts.bench.results import RowOut
from scripts.bench.throughput import BACKENDS, MAX_TOKENS, TARGET, compare


async def throughput(bench: Bench, backend: str, precis: PrecisStore, servers: Http) -> None:
    """16 chat backends at once (`scripts/bench/throughput.py`), Precis against the
    minimal app in alternating rounds: requests/s, and each server's CPU per request."""
    print(f"[{backend}] throughput: {BACKENDS} chat backends", flush=True)
    compared = await compare(
        servers.precis, servers.minimal, precis.create, bench.plan.turns, bench.plan.turn_rounds
    )
    for name, stats in (("precis", compared.precis), ("minimal", compared.minimal)):
        bench.results.record(f"{backend}/throughput/{name}", stats)
    ours, theirs = compared.meters["precis"], compared.meters["minimal"]
    rounds = zip(ours.rates, theirs.rates, strict=True)
    print("  ratio per round: " + ", ".join(f"{p / m:.2f}x" for p, m in rounds), flush=True)
    what = f"{BACKENDS} chat backends (append, history max_tokens={MAX_TOKENS}, append)"
    bench.results.row(
        RowOut(
            backend,
            "throughput",
            f"{what}, HTTP rate (vs the minimal app)",
            f"{compared.precis.rate:,.0f} req/s",
            f"{MINIMAL_APP} {compared.minimal.rate:,.0f} req/s",
            compared.ratio,
            f">= {TARGET}x",
            compared.ratio >= TARGET,
        )
    )
    cpu, floor = ours.cpu_ms_per_request, theirs.cpu_ms_per_request
    if cpu is not None and floor is not None:
        # The rate's ratio is diluted by what both pay on the same two cores (the
        # benchmark's own client, PostgreSQL); the servers' own CPU is not.
        bench.results.row(
            RowOut(
                backend,
                "throughput",
                f"{what}, the server process's CPU per request",
                f"{cpu:.2f} ms",
                f"{MINIMAL_APP} {floor:.2f} ms",
                cpu / floor,
                "",
                None,
            )
        )


async def proactive(bench: Bench, backend: str, url: str, trials: int = 5) -> None:
    """Append that schedules a summary -> the summary visible in GET history (median)."""
    print(f"[{backend}] proactive summary latency", flush=True)
    settings = Settings(
        _env_file=None, database_url=url, summary_message_limit=40, summary_keep_last_n=8
    )
    app = create_app(settings)
    p = bench.payloads
    latencies: list[float] = []
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://localhost"
        ) as client,
    ):
        for trial in range(trials):
            session = f"proactive-{trial}"
            await post(client, session, [p.message(i) for i in range(39)])
            started = time.perf_counter()
            answer = await post(client, session, [p.message(39)])
            assert answer["summarization"]["scheduled"], answer
            while True:
                history = await get(client, f"/v1/sessions/{session}/history", {})
                if history["summaries"]:
                    break
                if time.perf_counter() - started > 120:
                    raise RuntimeError("the proactive summary did not appear within 120 s")
                await asyncio.sleep(0.002)
            latencies.append(time.perf_counter() - started)
    median = statistics.median(latencies) * 1e3
    bench.results.measures[f"{backend}/proactive_summary_ms"] = {
        "median_ms": median,
        "all_ms": [round(x * 1e3, 1) for x in latencies],
    }
    bench.results.row(
        RowOut(
            backend,
            "summary",
            "proactive summary latency (append -> visible in history), median of 5",
            f"{median:.0f} ms",
            "message_limit 40, keep_last_n 8, `local` summarizer",
            None,
            "",
            None,
        )
    )
    print(f"  {[round(x * 1e3) for x in latencies]} ms", flush=True)
