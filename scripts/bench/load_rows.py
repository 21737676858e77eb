"""The history load rows: a budgeted tail and summaries + tail, at the store, service and HTTP
layers, against the raw query, the same statement, the minimal app and the peers, for every
session size in the same rounds; the unanalyzed session's load; the loads' peak RSS."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

from sqlalchemy.engine import make_url

from api import history_load
from api.locks import SessionLocks
from api.settings import Settings
from api.summarization import Summarization
from scripts.bench.baselines import AgentsPeer, LangchainPeer, RawPostgres
from scripts.bench.lib import REPO_ROOT, TENANT, RoundFn, Stats, interleaved, sequential, timed
from scripts.bench.load_sessions import (
    add_small_sessions,
    analyze,
    build,
    build_peers,
    set_autoanalyze,
    summarize,
)
from scripts.bench.plan import (
    MINIMAL_APP,
    ROUNDS,
    SAME_STATEMENTS,
    TAIL_MESSAGES,
    VARIANTS,
    Bench,
    Built,
    Http,
    Peers,
    Raw,
)
from scripts.bench.precis import PrecisStore, get
from scripts.bench.results import RowOut, ms

UNANALYZED_BUDGET = 8_000
"""The token budget of the unanalyzed-session load row (a chat model's usual window share)."""


async def loads(
    bench: Bench,
    backend: str,
    url: str,
    precis: PrecisStore,
    raw: Raw,
    servers: Http,
    peers: Peers,
) -> None:
    plan = bench.plan
    print(f"[{backend}] build sessions of {plan.sizes} messages", flush=True)
    built: dict[int, Built] = {}
    peer_sessions: dict[int, dict[str, Any]] = {}
    postgres = backend == "PostgreSQL"
    if postgres:  # the largest session is appended after the statistics were taken
        await set_autoanalyze(precis, enabled=False)
    for size in sorted(plan.sizes):
        if postgres and size == max(plan.sizes):
            await add_small_sessions(precis)
            await analyze(precis)
        t0 = time.perf_counter()
        built[size] = await build(bench, precis, size)
        peer_sessions[size] = await build_peers(bench, peers, size)
        print(f"  {size:,} messages in {time.perf_counter() - t0:.1f} s", flush=True)
    if postgres:
        await unanalyzed_load_row(bench, backend, precis, built)
        await set_autoanalyze(precis, enabled=True)
        await analyze(precis)
    settings = Settings(_env_file=None, database_url=url, summary_workers=0)
    summarization = Summarization(settings, precis.database, SessionLocks(precis.database))
    for variant in VARIANTS:
        print(f"[{backend}] load: {VARIANTS[variant]}", flush=True)
        if variant == "summaries":
            for size in plan.sizes:
                await summarize(bench, precis, built[size])
        # Every size's contestants run in the same rounds, so the 100k-vs-1k ratio is
        # not skewed by load that came and went between two sizes' turns.
        contestants: dict[str, RoundFn] = {}
        for size in plan.sizes:
            peers_of_size = peer_sessions[size] if variant == "summaries" else {}
            for name, fn in (
                await load_contestants(
                    bench, variant, built[size], precis, summarization, raw, servers, peers_of_size
                )
            ).items():
                contestants[f"{size}/{name}"] = fn
        measured = await interleaved(contestants, plan.loads // ROUNDS, ROUNDS)
        by_size: dict[int, dict[str, Stats]] = {size: {} for size in plan.sizes}
        for key, stats in measured.items():
            size_text, name = key.split("/")
            by_size[int(size_text)][name] = stats
        for size in plan.sizes:
            if variant == "summaries" and "langchain" in peer_sessions[size]:
                # Reads the whole session on every call: too slow to interleave at 100k.
                history = peer_sessions[size]["langchain"]

                async def whole(_i: int, history: Any = history) -> None:
                    await history.aget_messages()

                by_size[size]["langchain"] = await timed(
                    whole, plan.loads, budget_s=plan.peer_load_budget_s
                )
            for name, stats in by_size[size].items():
                bench.results.record(f"{backend}/load/{variant}/{size}/{name}", stats)
        load_rows(bench, backend, variant, raw.label, by_size)
        await memory(bench, backend, url, built, variant)


async def load_contestants(
    bench: Bench,
    variant: str,
    built: Built,
    precis: PrecisStore,
    summarization: Summarization,
    raw: Raw,
    servers: Http,
    peer_sessions: dict[str, Any],
) -> dict[str, RoundFn]:
    """One session's loads at the store, service and HTTP layers (Precis and the minimal
    app), the raw query, Agents."""
    max_tokens = built.budget if variant == "tail" else None
    start = await precis.refresh(built.external_id)
    returned = await precis.load(built.session_key, max_tokens)

    async def service_load(_i: int) -> None:
        async with precis.read_sessionmaker() as db:
            loaded = await history_load.fitted_context(
                db, summarization, TENANT, built.external_id, None, max_tokens
            )
            loaded.history()

    query = {} if max_tokens is None else {"max_tokens": str(max_tokens)}
    path = f"/v1/sessions/{built.external_id}/history"
    after_seq = 0 if variant == "tail" else built.size - TAIL_MESSAGES
    limit = returned if variant == "tail" else None
    contestants: dict[str, RoundFn] = {
        "raw": raw.loader(built.session_key, after_seq, limit),
        "pooled": sequential(lambda _i: precis.pooled_statement(built.session_key, max_tokens)),
        "store": sequential(lambda _i: precis.load(built.session_key, max_tokens)),
        "service": sequential(service_load),
        "http": sequential(lambda _i: get(servers.precis, path, query)),
        "minimal": sequential(lambda _i: get(servers.minimal, path, query)),
    }
    same = raw if isinstance(raw, RawPostgres) else bench.driver
    if same is not None:
        contestants["statement"] = same.load_statement(start, max_tokens)
    if "agents" in peer_sessions:
        session = peer_sessions["agents"]
        contestants["agents"] = sequential(lambda _i: session.get_items(limit=TAIL_MESSAGES))
    return contestants


async def unanalyzed_load_row(
    bench: Bench, backend: str, precis: PrecisStore, built: dict[int, Built]
) -> None:
    """The largest session's load right after its bulk append, which the planner's
    statistics have not seen (they believe it holds about one row), against the smallest
    session's load, which they know: every statement is bounded by seqs, so the two cost
    the same (`tests/store/test_unanalyzed_plans.py` checks the plans).

    Planned anew on every run, as behind a transaction pooler (no statement cache) or in a
    connection's first runs of a statement: a cached statement's generic plan, which
    PostgreSQL switches to after five runs, estimates an average session instead."""
    small, large = built[min(built)], built[max(built)]
    max_tokens = UNANALYZED_BUDGET
    uncached = make_url(precis.url).update_query_dict({"pooler": "transaction"})
    precis = PrecisStore(uncached.render_as_string(hide_password=False))
    for session in (small, large):
        await precis.refresh(session.external_id)

    def loading(session_key: int) -> RoundFn:
        return sequential(lambda _i: precis.load(session_key, max_tokens))

    contestants = {str(one.size): loading(one.session_key) for one in (small, large)}
    measured = await interleaved(contestants, bench.plan.loads // ROUNDS, ROUNDS)
    await precis.close()
    ours, reference = measured[str(large.size)], measured[str(small.size)]
    ratio = ours.p50_ms / reference.p50_ms
    bench.results.row(
        RowOut(
            backend,
            "load",
            f"history {large.size:,} msgs unanalyzed, max_tokens={max_tokens:,}, "
            "planned per run, store p50",
            ms(ours, p95=True),
            f"{small.size:,} msgs (analyzed) {ms(reference, p95=True)}",
            ratio,
            "<= 1.2x",
            ratio <= 1.2,
        )
    )


def load_rows(
    bench: Bench, backend: str, variant: str, label: str, by_size: dict[int, dict[str, Stats]]
) -> None:
    res, name = bench.results, VARIANTS[variant]
    sizes = sorted(by_size)
    small, large = sizes[0], sizes[-1]
    held = backend == "PostgreSQL"  # SQLite's target is against the same statement

    def against_raw(size: int, what: str, ours: Stats) -> RowOut:
        """A row without a target: `what` against the raw query, for the record."""
        raw = by_size[size]["raw"]
        return RowOut(
            backend,
            "load",
            f"history {size:,} msgs ({name}), {what} p50",
            ms(ours, p95=True),
            f"{label} query {ms(raw)}",
            ours.p50_ms / raw.p50_ms,
            "",
            None,
        )

    for size in sizes:
        stats = by_size[size]
        ratio = stats["store"].p50_ms / stats["raw"].p50_ms
        res.row(
            RowOut(
                backend,
                "load",
                f"history {size:,} msgs ({name}), store p50",
                ms(stats["store"], p95=True),
                f"{label} query {ms(stats['raw'], p95=True)}",
                ratio,
                "<= 1.5x" if held else "",
                ratio <= 1.5 if held else None,
            )
        )
        ratio = stats["store"].p50_ms / stats["statement"].p50_ms
        res.row(
            RowOut(
                backend,
                "load",
                f"history {size:,} msgs ({name}), store p50 (vs the same statement)",
                ms(stats["store"], p95=True),
                f"{SAME_STATEMENTS[backend]} {ms(stats['statement'], p95=True)}",
                ratio,
                "" if held else "<= 1.5x",
                None if held else ratio <= 1.5,
            )
        )
        if held:
            # what no code around the statement can go below: the statement itself
            res.row(against_raw(size, "the store's statement alone", stats["statement"]))
        res.row(against_raw(size, "the store's statement on the pool", stats["pooled"]))
        res.row(against_raw(size, "HTTP", stats["http"]))
        ratio = stats["http"].p50_ms / stats["minimal"].p50_ms
        res.row(
            RowOut(
                backend,
                "load",
                f"history {size:,} msgs ({name}), HTTP p50 (vs the minimal app)",
                ms(stats["http"], p95=True),
                f"{MINIMAL_APP} {ms(stats['minimal'], p95=True)}",
                ratio,
                "<= 1.5x",
                ratio <= 1.5,
            )
        )
    for layer in ("store", "service", "http"):
        ratio = by_size[large][layer].p50_ms / by_size[small][layer].p50_ms
        res.row(
            RowOut(
                backend,
                "load",
                f"history {large:,} vs {small:,} msgs ({name}), {layer} p50",
                ms(by_size[large][layer]),
                f"{small:,} msgs {ms(by_size[small][layer])}",
                ratio,
                "<= 1.2x",
                ratio <= 1.2,
            )
        )
    peers = (
        ("agents", AgentsPeer.name, "get_items(limit=50)"),
        ("langchain", LangchainPeer.name, "aget_messages() (whole session)"),
    )
    for tag, peer, what in peers:
        for size in sizes:
            if tag not in by_size[size]:
                continue
            ours, theirs = by_size[size]["store"], by_size[size][tag]
            ratio = ours.p50_ms / theirs.p50_ms
            res.row(
                RowOut(
                    backend,
                    "peers",
                    f"history {size:,} msgs, store p50 vs {tag}",
                    ms(ours),
                    f"{peer} {what} {ms(theirs)}",
                    ratio,
                    "< 1x (faster)",
                    ratio < 1,
                )
            )


async def memory(
    bench: Bench, backend: str, url: str, built: dict[int, Built], variant: str
) -> None:
    """Peak RSS of the loads on the largest session against the smallest, each in a clean
    process (`scripts/bench/rss.py`), so imports and earlier work do not hide the loads."""
    small, large = min(built), max(built)
    peaks: dict[int, dict[str, Any]] = {}
    for size in (small, large):
        command = [sys.executable, "-m", "scripts.bench.rss", url, built[size].external_id]
        command += ["--warmup", built[small].external_id]
        if variant == "tail":
            command += ["--max-tokens", str(built[size].budget)]
        out = await asyncio.to_thread(
            subprocess.run, command, cwd=REPO_ROOT, capture_output=True, text=True, check=True
        )
        peaks[size] = json.loads(out.stdout.strip().splitlines()[-1])
    bench.results.measures[f"{backend}/memory/{variant}"] = {
        str(size): peak for size, peak in peaks.items()
    }
    delta_mib = (peaks[large]["peak_rss_kib"] - peaks[small]["peak_rss_kib"]) / 1024
    bench.results.row(
        RowOut(
            backend,
            "memory",
            f"peak RSS of loads, history {large:,} msgs ({VARIANTS[variant]})",
            f"{peaks[large]['peak_rss_kib'] / 1024:.1f} MiB",
            f"{small:,} msgs {peaks[small]['peak_rss_kib'] / 1024:.1f} MiB",
            None,
            f"{delta_mib:+.1f} MiB (<= +10 MiB)",
            delta_mib <= 10,
        )
    )
    print(f"  peak RSS: {peaks}", flush=True)
