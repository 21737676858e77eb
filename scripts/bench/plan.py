"""What every measure of the benchmark shares: how much to run (`Plan`), the run's constants,
the servers and peers of a backend, and `Bench`, the state the measures read and record into."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from scripts.bench.baselines import (
    AgentsPeer,
    LangchainPeer,
    RawAiosqlite,
    RawPostgres,
    RawSqlite,
    Row,
)
from scripts.bench.lib import Payloads
from scripts.bench.precis import new_message
from scripts.bench.results import Results

TAIL_MESSAGES = 50
"""Messages a history load returns: the tail after the summaries, or what `max_tokens` admits."""

CONCURRENT_SESSIONS = 8
"""Sessions appended to at once in the concurrent cases (and the raw references' connections)."""

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
"""A backend's raw-driver reference: asyncpg on PostgreSQL, sqlite3 on SQLite."""

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


class Bench:
    """The plan, the payloads (also as raw rows and as the store's messages), the results, and
    on SQLite the raw async driver the store's statements are compared with."""

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
