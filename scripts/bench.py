"""The performance benchmark of issue 6: `make bench`, or `python -m scripts.bench`.

Measures Precis on PostgreSQL and SQLite against the raw drivers (asyncpg, sqlite3 in WAL
mode) and against the libraries users would pick instead (OpenAI Agents SDK SQLAlchemySession,
langchain-postgres), in one run, on loopback only. Every comparison is a ratio between two
numbers of the same run; fixed times mean nothing across machines.

Prints a markdown table (the README's "Performance" section) and writes every number to a
JSON file (`bench-results.json` unless `--json` says otherwise). PostgreSQL gets a scratch
database `precis_bench_<random>` that is dropped at the end; SQLite a file in a temp folder.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api import service, store
from api.db.engine import create_engine, create_sessionmaker
from api.locks import SessionLocks
from api.main import create_app
from api.settings import Settings
from api.summarization import Summarizer
from scripts.bench_baselines import (
    AgentsPeer,
    LangchainPeer,
    PeerMissing,
    RawPostgres,
    RawSqlite,
    Row,
)
from scripts.bench_lib import (
    REPO_ROOT,
    TENANT,
    Payloads,
    Stats,
    asyncpg_dsn,
    create_postgres_database,
    drop_postgres_database,
    machine,
    migrate,
    served,
    sqlite_path,
    timed,
    timed_concurrently,
)
from summarizer.tokens import count_message, encoding

DEFAULT_POSTGRES_ADMIN_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"

BUILD_BATCH = 1000
"""Messages per transaction when building the large sessions (setup, not measured)."""

TAIL_MESSAGES = 50
"""Messages a history load returns: the tail after the summaries, or what `max_tokens` admits."""

CONCURRENT_SESSIONS = 8
APPEND_BATCH = 50

NO_SUMMARIES = {"dynamic_summary_enabled": False}
"""Settings of the load-test sessions: a load over `max_tokens` truncates, never compacts."""


@dataclass
class Plan:
    """How much to run; `--quick` shrinks everything for a smoke run."""

    sizes: list[int]
    loads: int
    appends: int
    per_session: int
    batches: int
    peer_load_budget_s: float

    @classmethod
    def full(cls) -> Plan:
        return cls([1_000, 10_000, 100_000], 200, 300, 40, 40, 8.0)

    @classmethod
    def quick(cls) -> Plan:
        return cls([1_000, 5_000], 30, 40, 5, 5, 2.0)


@dataclass
class RowOut:
    """One line of the table: a Precis number, what it is compared with, and the target."""

    backend: str
    section: str
    measure: str
    value: str
    reference: str
    ratio: float | None
    target: str
    met: bool | None

    def cells(self) -> list[str]:
        ratio = "" if self.ratio is None else f"{self.ratio:.2f}x"
        verdict = "" if self.met is None else ("met" if self.met else "**missed**")
        return [
            self.backend,
            self.measure,
            self.value,
            self.reference,
            ratio,
            self.target,
            verdict,
        ]


@dataclass
class Results:
    measures: dict[str, dict[str, Any]] = field(default_factory=dict)
    rows: list[RowOut] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def record(self, key: str, stats: Stats, **extra: Any) -> Stats:
        stats.extra.update(extra)
        self.measures[key] = stats.as_dict()
        print(
            f"  {key}: p50 {stats.p50_ms:.3f} ms, p95 {stats.p95_ms:.3f} ms, "
            f"{stats.rate:,.0f}/s over {stats.ops} ops",
            flush=True,
        )
        return stats

    def row(self, row: RowOut) -> None:
        self.rows.append(row)


def ms(stats: Stats, p95: bool = False) -> str:
    value = f"{stats.p50_ms:.2f} ms"
    return value + (f" (p95 {stats.p95_ms:.2f})" if p95 else "")


def per_s(stats: Stats) -> str:
    return f"{stats.rate:,.0f} msg/s"


# --- Precis at the store layer --------------------------------------------------------------


class PrecisStore:
    """The product's own engine, sessionmaker and store functions: no HTTP, no pydantic."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: AsyncEngine = create_engine(url)
        self.sessionmaker: async_sessionmaker[AsyncSession] = create_sessionmaker(self.engine)

    async def append(self, external_id: str, batch: Sequence[store.NewMessage]) -> None:
        async with self.sessionmaker() as db:
            await store.append_messages(db, TENANT, external_id, batch)
            await db.commit()

    async def create(self, external_id: str, settings: dict[str, Any]) -> int:
        async with self.sessionmaker() as db:
            session = await store.create_session(db, TENANT, external_id, {}, settings)
            await db.commit()
            return session.id

    async def load(self, session_id: int, max_tokens: int | None) -> int:
        """What the loader asks of the store: the live summaries, then the messages after them."""
        async with self.sessionmaker() as db:
            summaries = await store.live_summaries(db, session_id, 3)
            after_seq = summaries[-1].last_seq if summaries else 0
            if max_tokens is None:
                messages = await store.messages_after(db, session_id, after_seq)
            else:
                messages = await store.tail_within_budget(db, session_id, after_seq, max_tokens)
            return len(messages)

    async def close(self) -> None:
        await self.engine.dispose()


def new_message(payloads: Payloads, index: int) -> store.NewMessage:
    message = payloads.message(index)
    return store.NewMessage(
        role=message["role"],
        content=message["content"],
        content_parts=None,
        name=None,
        tool_calls=None,
        tool_call_id=None,
        metadata=None,
        client_id=None,
        token_count=payloads.tokens(index),
    )


def summary_draft(first: int, last: int, text_: str) -> store.SummaryDraft:
    metadata = {
        "algorithm": "bisect_v1",
        "trigger": "proactive",
        "trigger_reason": "message_limit",
        "chunk_count": 1,
        "max_depth": 0,
        "truncated": False,
        "compression_ratio": 0.01,
        "input_tokens": 0,
        "output_tokens": 0,
        "llm_calls": 0,
        "failed_llm_calls": 0,
        "duration_ms": 0,
    }
    return store.SummaryDraft(
        first_seq=first,
        last_seq=last,
        summary_text=text_,
        summary_prompt="(benchmark)",
        model="local",
        temperature=0.3,
        target_summary_tokens=800,
        keep_last_n=TAIL_MESSAGES,
        approx_tokens=len(text_) // 4,
        metadata=metadata,
    )


# --- the run --------------------------------------------------------------------------------


class Bench:
    def __init__(self, plan: Plan, payloads: Payloads, results: Results) -> None:
        self.plan = plan
        self.payloads = payloads
        self.results = results
        self.raw_rows: list[Row] = [
            (m["role"], m["content"], t)
            for m, t in ((payloads.message(i), payloads.tokens(i)) for i in range(len(payloads)))
        ]

    # -- append ------------------------------------------------------------------------------

    async def appends(
        self,
        backend: str,
        precis: PrecisStore,
        raw: RawPostgres | RawSqlite,
        http: httpx.AsyncClient,
        agents: AgentsPeer | None,
        langchain: LangchainPeer | None,
    ) -> None:
        plan, p, res = self.plan, self.payloads, self.results
        key = f"{backend}/append"
        print(f"[{backend}] append", flush=True)
        news = [new_message(p, i) for i in range(len(p))]

        # one message per call, one session
        raw_single = res.record(
            f"{key}/single/raw", await raw.append_single(self.raw_rows, plan.appends)
        )
        store_single = res.record(
            f"{key}/single/store",
            await timed(lambda i: precis.append("a-single", [news[i % len(news)]]), plan.appends),
        )
        http_single = res.record(
            f"{key}/single/http",
            await timed(lambda i: post(http, "h-single", [p.message(i % len(p))]), plan.appends),
        )

        # one message per call, 8 sessions at once
        w, k = CONCURRENT_SESSIONS, plan.per_session
        raw_conc = res.record(
            f"{key}/concurrent/raw", await raw.append_concurrent(self.raw_rows, w, k)
        )
        store_conc = res.record(
            f"{key}/concurrent/store",
            await timed_concurrently(
                lambda s, i: precis.append(f"a-conc-{s}", [news[(s * 31 + i) % len(news)]]), w, k
            ),
        )
        http_conc = res.record(
            f"{key}/concurrent/http",
            await timed_concurrently(
                lambda s, i: post(http, f"h-conc-{s}", [p.message((s * 31 + i) % len(p))]), w, k
            ),
        )

        # batches of 50
        b, n = APPEND_BATCH, plan.batches
        raw_batch = res.record(f"{key}/batch/raw", await raw.append_batches(self.raw_rows, b, n))
        store_batch = res.record(
            f"{key}/batch/store",
            await timed(
                lambda i: precis.append(
                    "a-batch", [news[(i * b + j) % len(news)] for j in range(b)]
                ),
                n,
                items_per_op=b,
            ),
        )
        http_batch = res.record(
            f"{key}/batch/http",
            await timed(
                lambda i: post(
                    http, "h-batch", [p.message((i * b + j) % len(p)) for j in range(b)]
                ),
                n,
                items_per_op=b,
            ),
        )

        label = "raw asyncpg" if backend == "PostgreSQL" else "raw sqlite3"
        ref = f"{label} insert+commit"
        for name, subject, reference in (
            ("append 1 msg/commit, 1 session, store p50", store_single, raw_single),
            ("append 1 msg/commit, 8 sessions, store p50", store_conc, raw_conc),
        ):
            ratio = subject.p50_ms / reference.p50_ms
            res.row(
                RowOut(
                    backend,
                    "append",
                    name,
                    ms(subject),
                    f"{ref} {ms(reference)}",
                    ratio,
                    "<= 1.5x",
                    ratio <= 1.5,
                )
            )
        for name, subject, reference in (
            ("append 1 msg/commit, 1 session, HTTP p50", http_single, raw_single),
            ("append 1 msg/commit, 8 sessions, HTTP p50", http_conc, raw_conc),
        ):
            ratio = subject.p50_ms / reference.p50_ms
            res.row(
                RowOut(
                    backend, "append", name, ms(subject), f"{ref} {ms(reference)}", ratio, "", None
                )
            )
        res.row(
            RowOut(
                backend,
                "append",
                "append 1 msg/commit, 8 sessions, store rate",
                per_s(store_conc),
                f"{label} {per_s(raw_conc)}",
                store_conc.rate / raw_conc.rate,
                "",
                None,
            )
        )
        ratio = store_batch.rate / raw_batch.rate
        res.row(
            RowOut(
                backend,
                "append",
                "append batches of 50, store rate",
                per_s(store_batch),
                f"{label} executemany {per_s(raw_batch)}",
                ratio,
                ">= 0.5x",
                ratio >= 0.5,
            )
        )
        res.row(
            RowOut(
                backend,
                "append",
                "append batches of 50, HTTP rate",
                per_s(http_batch),
                f"{label} executemany {per_s(raw_batch)}",
                http_batch.rate / raw_batch.rate,
                "",
                None,
            )
        )

        peers: list[tuple[str, Any]] = []
        if agents is not None:
            peers.append(("agents", agents))
        if langchain is not None:
            peers.append(("langchain", langchain))
        for tag, peer in peers:
            single, conc, batch = await self.peer_appends(backend, tag, peer)
            for name, subject, theirs in (
                ("append 1 msg/commit, 1 session, store p50", store_single, single),
                ("append 1 msg/commit, 8 sessions, store p50", store_conc, conc),
            ):
                ratio = subject.p50_ms / theirs.p50_ms
                res.row(
                    RowOut(
                        backend,
                        "peers",
                        f"{name} vs {tag}",
                        ms(subject),
                        f"{peer.name} {ms(theirs)}",
                        ratio,
                        "< 1x (faster)",
                        ratio < 1,
                    )
                )
            ratio = store_batch.rate / batch.rate
            res.row(
                RowOut(
                    backend,
                    "peers",
                    f"append batches of 50, store rate vs {tag}",
                    per_s(store_batch),
                    f"{peer.name} {per_s(batch)}",
                    ratio,
                    "> 1x (faster)",
                    ratio > 1,
                )
            )

    async def peer_appends(self, backend: str, tag: str, peer: Any) -> tuple[Stats, Stats, Stats]:
        plan, p, res = self.plan, self.payloads, self.results
        key = f"{backend}/append"
        w, k, b = CONCURRENT_SESSIONS, plan.per_session, APPEND_BATCH
        if isinstance(peer, AgentsPeer):
            single_session = peer.session("agents-single")
            sessions = [peer.session(f"agents-conc-{s}") for s in range(w)]
            batch_session = peer.session("agents-batch")
            item = peer.item
            single = await timed(
                lambda i: single_session.add_items([item(p.message(i % len(p)))]), plan.appends
            )
            conc = await timed_concurrently(
                lambda s, i: sessions[s].add_items([item(p.message((s * 31 + i) % len(p)))]), w, k
            )
            batch = await timed(
                lambda i: batch_session.add_items(
                    [item(p.message((i * b + j) % len(p))) for j in range(b)]
                ),
                plan.batches,
                items_per_op=b,
            )
        else:
            assert isinstance(peer, LangchainPeer)
            conns = [await peer.connect() for _ in range(w)]
            histories = [peer.history(conns[s], peer.new_session()) for s in range(w)]
            one = peer.history(conns[0], peer.new_session())
            many = peer.history(conns[1], peer.new_session())
            msg = peer.message
            single = await timed(
                lambda i: one.aadd_messages([msg(p.message(i % len(p)))]), plan.appends
            )
            conc = await timed_concurrently(
                lambda s, i: histories[s].aadd_messages([msg(p.message((s * 31 + i) % len(p)))]),
                w,
                k,
            )
            batch = await timed(
                lambda i: many.aadd_messages(
                    [msg(p.message((i * b + j) % len(p))) for j in range(b)]
                ),
                plan.batches,
                items_per_op=b,
            )
        res.record(f"{key}/single/{tag}", single)
        res.record(f"{key}/concurrent/{tag}", conc)
        res.record(f"{key}/batch/{tag}", batch)
        return single, conc, batch

    # -- history load ------------------------------------------------------------------------

    async def build(self, precis: PrecisStore, size: int) -> tuple[str, int, int]:
        """A session of `size` messages; returns its id, internal id and a 50-message budget."""
        external_id = f"load-{size}"
        session_id = await precis.create(external_id, NO_SUMMARIES)
        p = self.payloads
        for start in range(0, size, BUILD_BATCH):
            batch = [new_message(p, i) for i in range(start, min(size, start + BUILD_BATCH))]
            await precis.append(external_id, batch)
        budget = sum(p.tokens(i) for i in range(size - TAIL_MESSAGES, size))
        return external_id, session_id, budget

    async def loads(
        self,
        backend: str,
        precis: PrecisStore,
        raw: RawPostgres | RawSqlite,
        http: httpx.AsyncClient,
        agents: AgentsPeer | None,
        langchain: LangchainPeer | None,
        url: str,
    ) -> None:
        plan = self.plan
        print(f"[{backend}] build sessions {plan.sizes}", flush=True)
        built: dict[int, tuple[str, int, int]] = {}
        for size in plan.sizes:
            t0 = time.perf_counter()
            built[size] = await self.build(precis, size)
            print(f"  {size:,} messages in {time.perf_counter() - t0:.1f} s", flush=True)
        if backend == "PostgreSQL":
            async with precis.engine.connect() as conn:
                await conn.execute(text("ANALYZE"))
                await conn.commit()
        settings = Settings(_env_file=None, database_url=url, summary_workers=0)
        summarizer = Summarizer(settings, precis.sessionmaker, SessionLocks(precis.engine))
        by_variant: dict[str, dict[int, dict[str, Stats]]] = {}
        for variant in ("no summaries, max_tokens", "with summaries"):
            tag = "tail" if variant.startswith("no") else "summaries"
            print(f"[{backend}] load: {variant}", flush=True)
            if tag == "summaries":
                for size in plan.sizes:
                    await self.summarize(precis, built[size][0], built[size][1], size)
            by_size = {
                size: await self.measure_load(
                    backend, tag, size, built[size], precis, summarizer, raw, http
                )
                for size in plan.sizes
            }
            by_variant[tag] = by_size
            await self.load_rows(backend, variant, by_size)
            await self.memory(backend, url, built, with_budget=tag == "tail")
        for tag, peer in (("agents", agents), ("langchain", langchain)):
            if peer is not None:
                await self.peer_loads(backend, tag, peer, by_variant["summaries"])

    async def measure_load(
        self,
        backend: str,
        tag: str,
        size: int,
        built: tuple[str, int, int],
        precis: PrecisStore,
        summarizer: Summarizer,
        raw: RawPostgres | RawSqlite,
        http: httpx.AsyncClient,
    ) -> dict[str, Stats]:
        """One session's loads at the store, service and HTTP layers, and the raw query."""
        res, loads = self.results, self.plan.loads
        external_id, session_id, budget = built
        max_tokens = budget if tag == "tail" else None
        key = f"{backend}/load/{tag}/{size}"
        returned = await precis.load(session_id, max_tokens)

        async def service_load(_i: int) -> None:
            async with precis.sessionmaker() as db:
                await service.history(db, summarizer, TENANT, external_id, None, max_tokens)
                await db.commit()

        query = {} if max_tokens is None else {"max_tokens": str(max_tokens)}
        path = f"/v1/sessions/{external_id}/history"
        stats = {
            "store": res.record(
                f"{key}/store",
                await timed(lambda _i: precis.load(session_id, max_tokens), loads),
                messages=returned,
            ),
            "service": res.record(f"{key}/service", await timed(service_load, loads)),
            "http": res.record(
                f"{key}/http", await timed(lambda _i: get(http, path, query), loads)
            ),
        }
        after_seq = 0 if tag == "tail" else size - TAIL_MESSAGES
        raw_stats, raw_returned = await raw.load(
            session_id, after_seq, returned if tag == "tail" else None, loads
        )
        stats["raw"] = res.record(f"{key}/raw", raw_stats, messages=raw_returned)
        return stats

    async def summarize(
        self, precis: PrecisStore, external_id: str, session_id: int, size: int
    ) -> None:
        """Three live summaries over all but the last 50 messages (what the worker leaves)."""
        last = size - TAIL_MESSAGES
        cuts = [0, last // 3, 2 * last // 3, last]
        text_ = " ".join(self.payloads.base[i]["content"] for i in range(4))[:3000]
        for first, end in itertools.pairwise(cuts):
            async with precis.sessionmaker() as db, db.begin():
                await store.save_summary(db, session_id, summary_draft(first + 1, end, text_))

    async def load_rows(
        self, backend: str, variant: str, by_size: dict[int, dict[str, Stats]]
    ) -> None:
        res = self.results
        sizes = sorted(by_size)
        small, large = sizes[0], sizes[-1]
        label = "raw asyncpg" if backend == "PostgreSQL" else "raw sqlite3"
        for size in sizes:
            stats = by_size[size]
            ratio = stats["store"].p50_ms / stats["raw"].p50_ms
            res.row(
                RowOut(
                    backend,
                    "load",
                    f"history {size:,} msgs ({variant}), store p50",
                    ms(stats["store"], p95=True),
                    f"{label} query {ms(stats['raw'], p95=True)}",
                    ratio,
                    "<= 1.5x",
                    ratio <= 1.5,
                )
            )
            res.row(
                RowOut(
                    backend,
                    "load",
                    f"history {size:,} msgs ({variant}), HTTP p50",
                    ms(stats["http"], p95=True),
                    f"{label} query {ms(stats['raw'])}",
                    stats["http"].p50_ms / stats["raw"].p50_ms,
                    "",
                    None,
                )
            )
        for layer in ("store", "service", "http"):
            ratio = by_size[large][layer].p50_ms / by_size[small][layer].p50_ms
            res.row(
                RowOut(
                    backend,
                    "load",
                    f"history {large:,} vs {small:,} msgs ({variant}), {layer} p50",
                    ms(by_size[large][layer]),
                    f"{small:,} msgs {ms(by_size[small][layer])}",
                    ratio,
                    "<= 1.2x",
                    ratio <= 1.2,
                )
            )

    async def peer_loads(
        self, backend: str, tag: str, peer: Any, precis_by_size: dict[int, dict[str, Stats]]
    ) -> None:
        plan, p, res = self.plan, self.payloads, self.results
        print(f"[{backend}] load: {tag}", flush=True)
        conn: Any = None
        if isinstance(peer, LangchainPeer):
            conn = await peer.connect()
        for size in plan.sizes:
            if isinstance(peer, AgentsPeer):
                session = peer.session(f"agents-load-{size}")
                for start in range(0, size, BUILD_BATCH):
                    await session.add_items(
                        [
                            peer.item(p.message(i))
                            for i in range(start, min(size, start + BUILD_BATCH))
                        ]
                    )

                async def load_agents(_i: int, session: Any = session) -> None:
                    items = await session.get_items(limit=TAIL_MESSAGES)
                    assert len(items) == TAIL_MESSAGES

                stats = await timed(load_agents, plan.loads)
                what = "get_items(limit=50)"
            else:
                history = peer.history(conn, peer.new_session())
                for start in range(0, size, BUILD_BATCH):
                    await history.aadd_messages(
                        [
                            peer.message(p.message(i))
                            for i in range(start, min(size, start + BUILD_BATCH))
                        ]
                    )

                async def load_langchain(_i: int, history: Any = history, size: int = size) -> None:
                    assert len(await history.aget_messages()) == size

                stats = await timed(
                    load_langchain, plan.loads, budget_s=plan.peer_load_budget_s, warmup=1
                )
                what = "aget_messages() (whole session)"
            res.record(f"{backend}/load/{tag}/{size}", stats)
            ours = precis_by_size[size]["store"]
            ratio = ours.p50_ms / stats.p50_ms
            res.row(
                RowOut(
                    backend,
                    "peers",
                    f"history {size:,} msgs, store p50 vs {tag}",
                    ms(ours),
                    f"{peer.name} {what} {ms(stats)}",
                    ratio,
                    "< 1x (faster)",
                    ratio < 1,
                )
            )

    # -- memory ------------------------------------------------------------------------------

    async def memory(
        self, backend: str, url: str, built: dict[int, tuple[str, int, int]], with_budget: bool
    ) -> None:
        sizes = sorted(built)
        small, large = sizes[0], sizes[-1]
        peaks: dict[int, dict[str, Any]] = {}
        for size in (small, large):
            external_id, _session_id, budget = built[size]
            command = [sys.executable, "-m", "scripts.bench_rss", url, external_id]
            if with_budget:
                command += ["--max-tokens", str(budget)]
            out = await asyncio.to_thread(
                subprocess.run, command, cwd=REPO_ROOT, capture_output=True, text=True, check=True
            )
            peaks[size] = json.loads(out.stdout.strip().splitlines()[-1])
        variant = "no summaries, max_tokens" if with_budget else "with summaries"
        key = f"{backend}/memory/{'tail' if with_budget else 'summaries'}"
        self.results.measures[key] = {str(size): peak for size, peak in peaks.items()}
        delta_mib = (peaks[large]["peak_rss_kib"] - peaks[small]["peak_rss_kib"]) / 1024
        self.results.row(
            RowOut(
                backend,
                "memory",
                f"peak RSS, history {large:,} msgs ({variant})",
                f"{peaks[large]['peak_rss_kib'] / 1024:.1f} MiB",
                f"{small:,} msgs {peaks[small]['peak_rss_kib'] / 1024:.1f} MiB",
                None,
                f"+{delta_mib:.1f} MiB (<= +10 MiB)",
                delta_mib <= 10,
            )
        )
        print(f"  peak RSS {variant}: {peaks}", flush=True)

    # -- proactive summary latency -----------------------------------------------------------

    async def proactive(self, backend: str, url: str, trials: int = 5) -> None:
        """Append that schedules a summary -> the summary visible in GET history (median)."""
        print(f"[{backend}] proactive summary latency", flush=True)
        settings = Settings(
            _env_file=None, database_url=url, summary_message_limit=40, summary_keep_last_n=8
        )
        app = create_app(settings)
        p = self.payloads
        latencies: list[float] = []
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://bench"
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
        self.results.measures[f"{backend}/proactive_summary_ms"] = {
            "median_ms": median,
            "all_ms": [round(x * 1e3, 1) for x in latencies],
        }
        self.results.row(
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

    # -- token counting ----------------------------------------------------------------------

    def tokens(self, passes: int = 4, repeats: int = 3) -> None:
        """count_message (what insert uses) against the bare tokenizer on the same texts."""
        print("[tokens] counting throughput", flush=True)
        messages = [self.payloads.message(i) for i in range(len(self.payloads))] * passes
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
        self.results.measures["tokens"] = {
            "chars": chars,
            "tokens": tokens,
            "seconds": best,
            "tokens_per_s": rates,
        }
        ratio = rates["precis"] / rates["bare"]
        self.results.row(
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


async def post(client: httpx.AsyncClient, session: str, messages: list[dict[str, str]]) -> Any:
    response = await client.post(f"/v1/sessions/{session}/messages", json={"messages": messages})
    if response.status_code != 201:
        raise RuntimeError(f"append answered {response.status_code}: {response.text[:300]}")
    return response.json()


async def get(client: httpx.AsyncClient, path: str, params: dict[str, str]) -> Any:
    response = await client.get(path, params=params)
    if response.status_code != 200:
        raise RuntimeError(f"GET {path} answered {response.status_code}: {response.text[:300]}")
    return response.json()


# --- one database ---------------------------------------------------------------------------


async def run_backend(backend: str, url: str, bench: Bench, peers: bool) -> None:
    await asyncio.to_thread(migrate, url)
    precis = PrecisStore(url)
    raw: RawPostgres | RawSqlite = (
        RawPostgres(asyncpg_dsn(url)) if backend == "PostgreSQL" else RawSqlite(sqlite_path(url))
    )
    await raw.setup()
    agents: AgentsPeer | None = None
    langchain: LangchainPeer | None = None
    if peers:
        try:
            agents = AgentsPeer(url)
        except PeerMissing as exc:
            bench.results.notes.append(f"skipped {exc}")
        if backend == "PostgreSQL":
            try:
                langchain = LangchainPeer(
                    make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
                )
            except PeerMissing as exc:
                bench.results.notes.append(f"skipped {exc}")
    try:
        with served(url, summary_workers="0") as base_url:
            async with httpx.AsyncClient(base_url=base_url, timeout=120) as http:
                await bench.appends(backend, precis, raw, http, agents, langchain)
                await bench.loads(backend, precis, raw, http, agents, langchain, url)
        await bench.proactive(backend, url)
    finally:
        await precis.close()
        if agents is not None:
            await agents.close()
        if langchain is not None:
            await langchain.close()


async def postgres_version(admin_url: str) -> str:
    engine = create_engine(admin_url)
    try:
        async with engine.connect() as conn:
            version = await conn.scalar(text("SHOW server_version"))
            return f"PostgreSQL {version}"
    finally:
        await engine.dispose()


def table(rows: Sequence[RowOut]) -> str:
    header = ["DB", "measure", "Precis", "reference (same run)", "ratio", "target", "result"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    return "\n".join(lines)


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
    bench.tokens()
    if "postgresql" in backends:
        url = await create_postgres_database(args.postgres_admin_url)
        try:
            await run_backend("PostgreSQL", url, bench, not args.no_peers)
        finally:
            await drop_postgres_database(args.postgres_admin_url, url)
    if "sqlite" in backends:
        with tempfile.TemporaryDirectory(prefix="precis-bench-") as folder:
            url = f"sqlite+aiosqlite:///{Path(folder) / 'bench.db'}"
            await run_backend("SQLite", url, bench, not args.no_peers)
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
    }
    output = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
    await asyncio.to_thread(Path(args.json).write_text, output)
    print()
    print(table(results.rows))
    print()
    print(f"machine: {info}")
    for note in results.notes:
        print(f"note: {note}")
    print(f"wrote {args.json}")
    missed = [row for row in results.rows if row.met is False]
    print(f"{len(missed)} target(s) missed" if missed else "every target met")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=str(REPO_ROOT / "bench-results.json"))
    parser.add_argument("--backends", default="postgresql,sqlite")
    parser.add_argument(
        "--postgres-admin-url",
        default=os.environ.get("PRECIS_BENCH_POSTGRES_URL", DEFAULT_POSTGRES_ADMIN_URL),
    )
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--sizes", help="comma-separated session sizes (default 1000,10000,100000)")
    parser.add_argument("--no-peers", action="store_true")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    sys.exit(asyncio.run(main_async(parser.parse_args())))


if __name__ == "__main__":
    main()
