"""The performance benchmark of issue 6: `make bench`, or `python -m scripts.bench.run`.

Measures Precis on PostgreSQL and SQLite against the raw drivers (asyncpg, sqlite3 in WAL
mode), against the libraries users would pick instead (OpenAI Agents SDK SQLAlchemySession,
langchain-postgres) and, through HTTP, against a minimal ASGI app doing the same SQL and
answering the same bytes (`scripts/bench/minimal_app.py`), in one run, on loopback only; and
what `POST /v1/responses` with a conversation adds to a model call
(`scripts/bench/responses_overhead.py`).
Every comparison is a ratio between two numbers of the same run; fixed times mean nothing
across machines.

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
from api.append import store_batch
from api.db import driver
from api.db.engine import (
    create_engine,
    create_read_sessionmaker,
    create_sessionmaker,
    read_engine,
)
from api.db.transactions import Database
from api.locks import SessionLocks
from api.main import create_app
from api.settings import Settings
from api.store.loader import load_parameters, load_statement
from api.summarization import Summarization
from scripts.bench import responses_overhead
from scripts.bench.baselines import (
    AgentsPeer,
    LangchainPeer,
    PeerMissing,
    RawAiosqlite,
    RawPostgres,
    RawSqlite,
    Row,
)
from scripts.bench.lib import (
    REPO_ROOT,
    TENANT,
    Payloads,
    RoundFn,
    Stats,
    asyncpg_dsn,
    concurrent,
    interleaved,
    machine,
    sequential,
    sqlite_path,
    timed,
)
from scripts.bench.minimal_app import served as served_minimal
from scripts.bench.throughput import BACKENDS, MAX_TOKENS, TARGET, compare
from summarizer.tokens import count_message, encoding
from tests.support.live_server import served
from tests.support.scratch_db import create_postgres_database, drop_postgres_database, migrate

DEFAULT_POSTGRES_ADMIN_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"

BUILD_BATCH = 1000
"""Messages per transaction when building the large sessions (setup, not measured)."""

TAIL_MESSAGES = 50
"""Messages a history load returns: the tail after the summaries, or what `max_tokens` admits."""

CONCURRENT_SESSIONS = 8
APPEND_BATCH = 50

NO_SUMMARIES = {"dynamic_summary_enabled": False}
"""Settings of the load-test sessions: a load over `max_tokens` truncates, never summarizes."""


SAME_STATEMENTS = {
    "PostgreSQL": "raw asyncpg running the store's statement",
    "SQLite": "raw aiosqlite running the store's statements",
}
"""The references that run exactly the store's SQL on a bare connection."""

ROUNDS = 5
"""Contestants alternate in this many rounds (see `interleaved`)."""

VARIANTS = {"tail": "no summaries, max_tokens", "summaries": "with summaries"}
"""The two history loads: a budgeted tail of an unsummarized session, and summaries + tail."""

Raw = RawPostgres | RawSqlite

SMALL_SESSIONS = 2_000
"""Sessions of 20 messages the statistics know before the largest session is appended."""

UNANALYZED_BUDGET = 8_000
"""The token budget of the unanalyzed-session load row (a chat model's usual window share)."""

MINIMAL_APP = "minimal ASGI app (same SQL, same bytes)"
"""The HTTP rows' reference: `scripts/bench/minimal_app.py` under uvicorn, as Precis runs."""


@dataclass(frozen=True)
class Http:
    """Clients of the two servers of a backend: Precis and the minimal app, same database."""

    precis: httpx.AsyncClient
    minimal: httpx.AsyncClient


@dataclass
class Plan:
    """How much to run; `--quick` shrinks everything for a smoke run."""

    sizes: list[int]
    loads: int
    appends: int
    per_session: int
    batches: int
    peer_load_budget_s: float
    turns: int
    """Turns per chat backend per round of the throughput row."""
    turn_rounds: int
    """Rounds of the throughput row: more than the others', its rounds vary more."""

    @classmethod
    def full(cls) -> Plan:
        return cls([1_000, 10_000, 100_000], 200, 300, 40, 40, 8.0, 8, 8)

    @classmethod
    def quick(cls) -> Plan:
        return cls([1_000, 5_000], 30, 40, 10, 10, 2.0, 2, 3)


@dataclass(frozen=True)
class Built:
    """A load-test session: its size, ids, and the `max_tokens` that admits its last 50."""

    size: int
    external_id: str
    session_key: int
    budget: int


@dataclass
class Peers:
    agents: AgentsPeer | None = None
    langchain: LangchainPeer | None = None

    async def close(self) -> None:
        if self.agents is not None:
            await self.agents.close()
        if self.langchain is not None:
            await self.langchain.close()


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
        self.read_engine = read_engine(self.engine)
        self.read_sessionmaker = create_read_sessionmaker(self.engine)
        sqlite = self.engine.dialect.name == "sqlite"
        self.database = Database(
            self.sessionmaker, self.read_sessionmaker, asyncio.Lock() if sqlite else None
        )
        self.settings = Settings(_env_file=None, database_url=url, summary_workers=0)
        self.starts: dict[int, store.HistoryStart] = {}
        """What a load of each session starts from: the session row and its flags, as the
        history route reads them first (`refresh`)."""

    async def append(self, external_id: str, batch: Sequence[store.NewMessage]) -> None:
        """The service's append (`store_batch`): PostgreSQL's one statement, SQLite's
        transaction, and the proactive trigger's check."""
        await store_batch(self.database, self.settings, TENANT, external_id, batch)

    async def create(self, external_id: str, settings: dict[str, Any]) -> int:
        async with self.sessionmaker() as db:
            session = await store.create_session(db, TENANT, external_id, {}, settings)
            await db.commit()
            return session.id

    async def refresh(self, external_id: str) -> store.HistoryStart:
        """Read what a load of the session starts from (the route's first round trip)."""
        async with self.read_sessionmaker() as db:
            start = await store.session_for_history(db, TENANT, external_id)
        self.starts[start.session.id] = start
        return start

    async def load(self, session_key: int, max_tokens: int | None) -> int:
        """What the loader asks of the store once it has the session row: the live summaries
        and the messages after them (one statement while a page covers the budget)."""
        start = self.starts[session_key]
        async with self.read_sessionmaker() as db:
            rows = await store.load_rows(
                db, start.session, 3, max_tokens, summarized=start.summarized
            )
            return len(rows.messages)

    async def pooled_statement(self, session_key: int, max_tokens: int | None) -> None:
        """The least the store's load can cost on the service's pool: a connection checked
        out, the loader's statement run on its driver connection (and, on SQLite, its values
        decoded), the connection checked back in (`api.db.driver.fetch`); no row types, no
        token budget, no read session."""
        start = self.starts[session_key]
        statement = load_statement(start.session, start.summarized)
        params = load_parameters(start.session, 3, max_tokens)
        await driver.fetch(self.read_engine, statement, params, paged=max_tokens is not None)

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
            (payloads.message(i)["role"], payloads.message(i)["content"], payloads.tokens(i))
            for i in range(len(payloads))
        ]
        self.news = [new_message(payloads, i) for i in range(len(payloads))]
        self.driver: RawAiosqlite | None = None

    # -- append ------------------------------------------------------------------------------

    def contestants(
        self, precis: PrecisStore, raw: Raw, servers: Http, peers: Peers
    ) -> dict[str, dict[str, RoundFn]]:
        """Per append case, every contestant's round function."""
        p, news, b, w = self.payloads, self.news, APPEND_BATCH, CONCURRENT_SESSIONS
        http, minimal = servers.precis, servers.minimal

        def batch_of(i: int) -> list[store.NewMessage]:
            return [news[(i * b + j) % len(news)] for j in range(b)]

        def messages_of(i: int) -> list[dict[str, str]]:
            return [p.message((i * b + j) % len(p)) for j in range(b)]

        cases: dict[str, dict[str, RoundFn]] = {
            "single": {
                "raw": raw.single(self.raw_rows),
                "store": sequential(lambda i: precis.append("a-single", [news[i % len(news)]])),
                "http": sequential(lambda i: post(http, "h-single", [p.message(i % len(p))])),
                "minimal": sequential(lambda i: post(minimal, "m-single", [p.message(i % len(p))])),
            },
            "concurrent": {
                "raw": raw.concurrent(self.raw_rows, w),
                "store": concurrent(
                    lambda s, i: precis.append(f"a-conc-{s}", [news[(s * 31 + i) % len(news)]]), w
                ),
                "http": concurrent(
                    lambda s, i: post(http, f"h-conc-{s}", [p.message((s * 31 + i) % len(p))]), w
                ),
            },
            "batch": {
                "raw": raw.batches(self.raw_rows, b),
                "store": sequential(lambda i: precis.append("a-batch", batch_of(i))),
                "http": sequential(lambda i: post(http, "h-batch", messages_of(i))),
            },
        }
        if self.driver is not None:
            cases["single"]["aiosqlite"] = self.driver.single(self.raw_rows)
            cases["single"]["statement"] = self.driver.store_statements(news, "a-single")
        if isinstance(raw, RawPostgres):
            cases["single"]["statement"] = raw.store_statement(news)
            cases["concurrent"]["statement"] = raw.store_statement_concurrent(news, w)
            # what the Python client's integrations send: every message with a client_id
            keys = itertools.count()

            def keyed(i: int) -> list[store.NewMessage]:
                return [news[i % len(news)]._replace(client_id=f"bench-{next(keys)}")]

            cases["single"]["keyed"] = sequential(lambda i: precis.append("a-keyed", keyed(i)))
            cases["single"]["keyed statement"] = raw.store_statement(news, keyed=True)
        if peers.agents is not None:
            agents = peers.agents
            one = agents.session("agents-single")
            many = [agents.session(f"agents-conc-{s}") for s in range(w)]
            batched = agents.session("agents-batch")
            item = agents.item
            cases["single"]["agents"] = sequential(
                lambda i: one.add_items([item(p.message(i % len(p)))])
            )
            cases["concurrent"]["agents"] = concurrent(
                lambda s, i: many[s].add_items([item(p.message((s * 31 + i) % len(p)))]), w
            )
            cases["batch"]["agents"] = sequential(
                lambda i: batched.add_items([item(m) for m in messages_of(i)])
            )
        if peers.langchain is not None:
            chain = peers.langchain
            histories = [chain.history(s, chain.new_session()) for s in range(w)]
            single, batch = (chain.history(s, chain.new_session()) for s in (0, 1))
            msg = chain.message
            cases["single"]["langchain"] = sequential(
                lambda i: single.aadd_messages([msg(p.message(i % len(p)))])
            )
            cases["concurrent"]["langchain"] = concurrent(
                lambda s, i: histories[s].aadd_messages([msg(p.message((s * 31 + i) % len(p)))]),
                w,
            )
            cases["batch"]["langchain"] = sequential(
                lambda i: batch.aadd_messages([msg(m) for m in messages_of(i)])
            )
        return cases

    async def appends(
        self, backend: str, precis: PrecisStore, raw: Raw, servers: Http, peers: Peers
    ) -> None:
        plan, res = self.plan, self.results
        print(f"[{backend}] append", flush=True)
        await precis.append("a-single", self.news[:1])  # the raw statements need the session
        cases = self.contestants(precis, raw, servers, peers)
        rounds = ROUNDS
        stats = {
            "single": await interleaved(cases["single"], plan.appends // rounds, rounds),
            "concurrent": await interleaved(
                cases["concurrent"], plan.per_session // rounds, rounds
            ),
            "batch": await interleaved(
                cases["batch"], plan.batches // rounds, rounds, APPEND_BATCH
            ),
        }
        for case, by_name in stats.items():
            for name, measured in by_name.items():
                res.record(f"{backend}/append/{case}/{name}", measured)

        single, conc, batch = stats["single"], stats["concurrent"], stats["batch"]
        ref = f"{raw.label} insert+commit"
        held = backend == "PostgreSQL"  # SQLite's targets are against the same statements
        for case, what in (("single", "1 session"), ("concurrent", "8 sessions")):
            ours, floor = stats[case]["store"], stats[case]["raw"]
            ratio = ours.p50_ms / floor.p50_ms
            res.row(
                RowOut(
                    backend,
                    "append",
                    f"append 1 msg/commit, {what}, store p50",
                    ms(ours),
                    f"{ref} {ms(floor)}",
                    ratio,
                    "<= 1.5x" if held else "",
                    ratio <= 1.5 if held else None,
                )
            )
        if "keyed" in single:
            ours, same, floor = single["keyed"], single["keyed statement"], single["raw"]
            ratio = ours.p50_ms / floor.p50_ms
            what = "append 1 msg/commit with a client_id, 1 session"
            res.row(
                RowOut(
                    backend,
                    "append",
                    f"{what}, store p50",
                    ms(ours),
                    f"{ref} {ms(floor)}",
                    ratio,
                    "<= 1.5x",
                    ratio <= 1.5,
                )
            )
            res.row(
                RowOut(
                    backend,
                    "append",
                    f"{what}, the store's statement alone p50",
                    ms(same),
                    f"{ref} {ms(floor)}",
                    same.p50_ms / floor.p50_ms,
                    "",
                    None,
                )
            )
        for case, what in (("single", "1 session"), ("concurrent", "8 sessions")):
            ours, floor = stats[case]["http"], stats[case]["raw"]
            res.row(
                RowOut(
                    backend,
                    "append",
                    f"append 1 msg/commit, {what}, HTTP p50",
                    ms(ours),
                    f"{ref} {ms(floor)}",
                    ours.p50_ms / floor.p50_ms,
                    "",
                    None,
                )
            )
        ours, floor = single["http"], single["minimal"]
        ratio = ours.p50_ms / floor.p50_ms
        res.row(
            RowOut(
                backend,
                "append",
                "append 1 msg/commit, 1 session, HTTP p50 (vs the minimal app)",
                ms(ours),
                f"{MINIMAL_APP} {ms(floor)}",
                ratio,
                "<= 1.5x",
                ratio <= 1.5,
            )
        )
        for case, what in (("single", "1 session"), ("concurrent", "8 sessions")):
            if "statement" not in stats[case]:
                continue
            ours, same = stats[case]["store"], stats[case]["statement"]
            ratio = ours.p50_ms / same.p50_ms
            res.row(
                RowOut(
                    backend,
                    "append",
                    f"append 1 msg/commit, {what}, store p50 (vs the same statements)",
                    ms(ours),
                    f"{SAME_STATEMENTS[backend]} {ms(same)}",
                    ratio,
                    "" if held else "<= 1.5x",
                    None if held else ratio <= 1.5,
                )
            )
            if held:
                # what no code around the statement can go below: the statement itself
                raw_stats = stats[case]["raw"]
                res.row(
                    RowOut(
                        backend,
                        "append",
                        f"append 1 msg/commit, {what}, the store's statement alone p50",
                        ms(same),
                        f"{ref} {ms(raw_stats)}",
                        same.p50_ms / raw_stats.p50_ms,
                        "",
                        None,
                    )
                )
        if "aiosqlite" in single:
            ours, driver = single["store"], single["aiosqlite"]
            res.row(
                RowOut(
                    backend,
                    "append",
                    "append 1 msg/commit, 1 session, store p50 (vs the async driver)",
                    ms(ours),
                    f"raw aiosqlite insert+commit {ms(driver)}",
                    ours.p50_ms / driver.p50_ms,
                    "",
                    None,
                )
            )
        res.row(
            RowOut(
                backend,
                "append",
                "append 1 msg/commit, 8 sessions, store rate",
                per_s(conc["store"]),
                f"{raw.label} {per_s(conc['raw'])}",
                conc["store"].rate / conc["raw"].rate,
                "",
                None,
            )
        )
        ratio = batch["store"].rate / batch["raw"].rate
        res.row(
            RowOut(
                backend,
                "append",
                "append batches of 50, store rate",
                per_s(batch["store"]),
                f"{raw.label} executemany {per_s(batch['raw'])}",
                ratio,
                ">= 0.5x" if held else "",
                ratio >= 0.5 if held else None,
            )
        )
        res.row(
            RowOut(
                backend,
                "append",
                "append batches of 50, HTTP rate",
                per_s(batch["http"]),
                f"{raw.label} executemany {per_s(batch['raw'])}",
                batch["http"].rate / batch["raw"].rate,
                "",
                None,
            )
        )
        for tag, name in (("agents", AgentsPeer.name), ("langchain", LangchainPeer.name)):
            if tag not in single:
                continue
            for case, what in (("single", "1 session"), ("concurrent", "8 sessions")):
                ours, theirs = stats[case]["store"], stats[case][tag]
                ratio = ours.p50_ms / theirs.p50_ms
                res.row(
                    RowOut(
                        backend,
                        "peers",
                        f"append 1 msg/commit, {what}, store p50 vs {tag}",
                        ms(ours),
                        f"{name} {ms(theirs)}",
                        ratio,
                        "< 1x (faster)",
                        ratio < 1,
                    )
                )
            ratio = batch["store"].rate / batch[tag].rate
            res.row(
                RowOut(
                    backend,
                    "peers",
                    f"append batches of 50, store rate vs {tag}",
                    per_s(batch["store"]),
                    f"{name} {per_s(batch[tag])}",
                    ratio,
                    "> 1x (faster)",
                    ratio > 1,
                )
            )

    # -- throughput --------------------------------------------------------------------------

    async def throughput(self, backend: str, precis: PrecisStore, servers: Http) -> None:
        """16 chat backends at once (`scripts/bench/throughput.py`), Precis against the
        minimal app in alternating rounds: requests/s, and each server's CPU per request."""
        print(f"[{backend}] throughput: {BACKENDS} chat backends", flush=True)
        compared = await compare(
            servers.precis, servers.minimal, precis.create, self.plan.turns, self.plan.turn_rounds
        )
        for name, stats in (("precis", compared.precis), ("minimal", compared.minimal)):
            self.results.record(f"{backend}/throughput/{name}", stats)
        ours, theirs = compared.meters["precis"], compared.meters["minimal"]
        rounds = zip(ours.rates, theirs.rates, strict=True)
        print("  ratio per round: " + ", ".join(f"{p / m:.2f}x" for p, m in rounds), flush=True)
        what = f"{BACKENDS} chat backends (append, history max_tokens={MAX_TOKENS}, append)"
        self.results.row(
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
            self.results.row(
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

    # -- history load ------------------------------------------------------------------------

    @staticmethod
    async def analyze(precis: PrecisStore) -> None:
        async with precis.engine.connect() as conn:
            await conn.execute(text("ANALYZE"))
            await conn.commit()

    @staticmethod
    async def add_small_sessions(precis: PrecisStore) -> None:
        """Many small sessions, as a production table holds: the statistics then take a
        session they have not seen for a small one (a row or so), not an average one."""
        async with precis.engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO sessions (tenant, external_id, metadata, settings, last_seq, "
                    "pinned_seq, removed_count, format, created_at, updated_at) "
                    f"SELECT '{TENANT}', 'small-' || n, '{{}}', '{{}}', 20, 0, 0, 'openai', "
                    f"now(), now() FROM generate_series(1, {SMALL_SESSIONS}) AS n"
                )
            )
            await conn.execute(
                text(
                    "INSERT INTO messages (session_id, seq, role, content, token_count, "
                    "created_at) SELECT s.id, n, 'user', 'small ' || n, 5, now() "
                    "FROM sessions AS s, generate_series(1, 20) AS n "
                    "WHERE s.external_id LIKE 'small-%'"
                )
            )

    @staticmethod
    async def set_autoanalyze(precis: PrecisStore, *, enabled: bool) -> None:
        async with precis.engine.begin() as conn:
            await conn.execute(
                text(f"ALTER TABLE messages SET (autovacuum_enabled = {str(enabled).lower()})")
            )

    async def unanalyzed_load_row(
        self, backend: str, precis: PrecisStore, built: dict[int, Built]
    ) -> None:
        """The largest session's load right after its bulk append, which the planner's
        statistics have not seen (they believe it holds about one row), against the smallest
        session's load, which they know: every statement is bounded by seqs, so the two cost
        the same (`tests/test_unanalyzed_plans.py` checks the plans).

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
        measured = await interleaved(contestants, self.plan.loads // ROUNDS, ROUNDS)
        await precis.close()
        ours, reference = measured[str(large.size)], measured[str(small.size)]
        ratio = ours.p50_ms / reference.p50_ms
        self.results.row(
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

    async def build(self, precis: PrecisStore, size: int) -> Built:
        """A session of `size` messages (no summaries yet), built in batched transactions."""
        external_id = f"load-{size}"
        session_key = await precis.create(external_id, NO_SUMMARIES)
        p = self.payloads
        for start in range(0, size, BUILD_BATCH):
            batch = [new_message(p, i) for i in range(start, min(size, start + BUILD_BATCH))]
            await precis.append(external_id, batch)
        budget = sum(p.tokens(i) for i in range(size - TAIL_MESSAGES, size))
        return Built(size, external_id, session_key, budget)

    async def build_peers(self, peers: Peers, size: int) -> dict[str, Any]:
        """The same messages in each peer's own session."""
        p, built = self.payloads, {}
        chunks = [
            range(start, min(size, start + BUILD_BATCH)) for start in range(0, size, BUILD_BATCH)
        ]
        if peers.agents is not None:
            session = peers.agents.session(f"agents-load-{size}")
            for chunk in chunks:
                await session.add_items([peers.agents.item(p.message(i)) for i in chunk])
            built["agents"] = session
        if peers.langchain is not None:
            history = peers.langchain.history(0, peers.langchain.new_session())
            for chunk in chunks:
                await history.aadd_messages([peers.langchain.message(p.message(i)) for i in chunk])
            built["langchain"] = history
        return built

    async def loads(
        self,
        backend: str,
        url: str,
        precis: PrecisStore,
        raw: Raw,
        servers: Http,
        peers: Peers,
    ) -> None:
        plan = self.plan
        print(f"[{backend}] build sessions of {plan.sizes} messages", flush=True)
        built: dict[int, Built] = {}
        peer_sessions: dict[int, dict[str, Any]] = {}
        postgres = backend == "PostgreSQL"
        if postgres:  # the largest session is appended after the statistics were taken
            await self.set_autoanalyze(precis, enabled=False)
        for size in sorted(plan.sizes):
            if postgres and size == max(plan.sizes):
                await self.add_small_sessions(precis)
                await self.analyze(precis)
            t0 = time.perf_counter()
            built[size] = await self.build(precis, size)
            peer_sessions[size] = await self.build_peers(peers, size)
            print(f"  {size:,} messages in {time.perf_counter() - t0:.1f} s", flush=True)
        if postgres:
            await self.unanalyzed_load_row(backend, precis, built)
            await self.set_autoanalyze(precis, enabled=True)
            await self.analyze(precis)
        settings = Settings(_env_file=None, database_url=url, summary_workers=0)
        summarization = Summarization(settings, precis.database, SessionLocks(precis.database))
        for variant in VARIANTS:
            print(f"[{backend}] load: {VARIANTS[variant]}", flush=True)
            if variant == "summaries":
                for size in plan.sizes:
                    await self.summarize(precis, built[size])
            # Every size's contestants run in the same rounds, so the 100k-vs-1k ratio is
            # not skewed by load that came and went between two sizes' turns.
            contestants: dict[str, RoundFn] = {}
            for size in plan.sizes:
                peers_of_size = peer_sessions[size] if variant == "summaries" else {}
                for name, fn in (
                    await self.load_contestants(
                        variant, built[size], precis, summarization, raw, servers, peers_of_size
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
                    self.results.record(f"{backend}/load/{variant}/{size}/{name}", stats)
            self.load_rows(backend, variant, raw.label, by_size)
            await self.memory(backend, url, built, variant)

    async def load_contestants(
        self,
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
                await service.history(
                    db, summarization, TENANT, built.external_id, None, max_tokens
                )

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
        same = raw if isinstance(raw, RawPostgres) else self.driver
        if same is not None:
            contestants["statement"] = same.load_statement(start, max_tokens)
        if "agents" in peer_sessions:
            session = peer_sessions["agents"]
            contestants["agents"] = sequential(lambda _i: session.get_items(limit=TAIL_MESSAGES))
        return contestants

    async def summarize(self, precis: PrecisStore, built: Built) -> None:
        """Three live summaries over all but the last 50 messages (what the worker leaves)."""
        last = built.size - TAIL_MESSAGES
        cuts = [0, last // 3, 2 * last // 3, last]
        text_ = " ".join(self.payloads.base[i]["content"] for i in range(4))[:3000]
        for first, end in itertools.pairwise(cuts):
            async with precis.sessionmaker() as db, db.begin():
                draft = summary_draft(first + 1, end, text_)
                await store.save_summary(db, built.session_key, draft)

    def load_rows(
        self, backend: str, variant: str, label: str, by_size: dict[int, dict[str, Stats]]
    ) -> None:
        res, name = self.results, VARIANTS[variant]
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

    # -- memory ------------------------------------------------------------------------------

    async def memory(self, backend: str, url: str, built: dict[int, Built], variant: str) -> None:
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
        self.results.measures[f"{backend}/memory/{variant}"] = {
            str(size): peak for size, peak in peaks.items()
        }
        delta_mib = (peaks[large]["peak_rss_kib"] - peaks[small]["peak_rss_kib"]) / 1024
        self.results.row(
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
                    await bench.appends(backend, precis, raw, servers, peers)
                    await bench.loads(backend, url, precis, raw, servers, peers)
                await bench.throughput(backend, precis, servers)
        if not throughput_only:
            await bench.proactive(backend, url)
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
    if not args.throughput_only:
        bench.tokens()
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
    overhead: list[responses_overhead.OverheadRow] = []
    if not args.throughput_only:
        overhead = await responses_overhead.run(
            tuple(backends), responses_overhead.CALLS, args.postgres_admin_url
        )
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
    }
    output = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
    await asyncio.to_thread(Path(args.json).write_text, output)
    print()
    print(table(results.rows))
    if overhead:
        print()
        print(responses_overhead.render(overhead))
    print()
    print(f"machine: {info}")
    for note in results.notes:
        print(f"note: {note}")
    print(f"wrote {args.json}")
    missed = sum(row.met is False for row in results.rows)
    missed += sum(row.backend in backends and row.missed() for row in overhead)
    print(f"{missed} target(s) missed" if missed else "every target met")
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
    parser.add_argument(
        "--throughput-only",
        action="store_true",
        help="only the 16-chat-backend throughput row (Precis against the minimal app)",
    )
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    sys.exit(asyncio.run(main_async(parser.parse_args())))


if __name__ == "__main__":
    main()
