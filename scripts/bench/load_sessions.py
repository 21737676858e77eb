"""The sessions the history loads read: built in batched transactions (Precis and each peer
holding the same messages), summarized, and on PostgreSQL kept out of the planner's statistics
until measured (`set_autoanalyze`, `add_small_sessions`)."""

from __future__ import annotations

import itertools
from typing import Any

from sqlalchemy import text

from api import store
from api.store.keys import session_key
from scripts.bench.lib import TENANT
from scripts.bench.plan import TAIL_MESSAGES, Bench, Built, Peers
from scripts.bench.precis import PrecisStore, new_message

BUILD_BATCH = 1000
"""Messages per transaction when building the large sessions (setup, not measured)."""

NO_SUMMARIES = {"dynamic_summary_enabled": False}
"""Settings of the load-test sessions: a load over `max_tokens` truncates, never summarizes."""

SMALL_SESSIONS = 2_000
"""Sessions of 20 messages the statistics know before the largest session is appended."""


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


async def analyze(precis: PrecisStore) -> None:
    async with precis.engine.connect() as conn:
        await conn.execute(text("ANALYZE"))
        await conn.commit()


async def add_small_sessions(precis: PrecisStore) -> None:
    """Many small sessions, as a production table holds: the statistics then take a
    session they have not seen for a small one (a row or so), not an average one."""
    async with precis.engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO sessions (id, tenant, external_id, metadata, settings, last_seq, "
                "pinned_seq, removed_count, format, created_at, updated_at) "
                "VALUES (:id, :tenant, :name, '{}', '{}', 20, 0, 0, 'openai', now(), now())"
            ),
            [
                {"id": session_key(TENANT, f"small-{n}"), "tenant": TENANT, "name": f"small-{n}"}
                for n in range(1, SMALL_SESSIONS + 1)
            ],
        )
        await conn.execute(
            text(
                "INSERT INTO messages (session_id, seq, role, content, token_count, "
                "created_at) SELECT s.id, n, 'user', 'small ' || n, 5, now() "
                "FROM sessions AS s, generate_series(1, 20) AS n "
                "WHERE s.external_id LIKE 'small-%'"
            )
        )


async def set_autoanalyze(precis: PrecisStore, *, enabled: bool) -> None:
    async with precis.engine.begin() as conn:
        await conn.execute(
            text(f"ALTER TABLE messages SET (autovacuum_enabled = {str(enabled).lower()})")
        )


async def build(bench: Bench, precis: PrecisStore, size: int) -> Built:
    """A session of `size` messages (no summaries yet), built in batched transactions."""
    external_id = f"load-{size}"
    session_key = await precis.create(external_id, NO_SUMMARIES)
    p = bench.payloads
    for start in range(0, size, BUILD_BATCH):
        batch = [new_message(p, i) for i in range(start, min(size, start + BUILD_BATCH))]
        await precis.append(external_id, batch)
    budget = sum(p.tokens(i) for i in range(size - TAIL_MESSAGES, size))
    return Built(size, external_id, session_key, budget)


async def build_peers(bench: Bench, peers: Peers, size: int) -> dict[str, Any]:
    """The same messages in each peer's own session."""
    p, built = bench.payloads, {}
    chunks = [range(start, min(size, start + BUILD_BATCH)) for start in range(0, size, BUILD_BATCH)]
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


async def summarize(bench: Bench, precis: PrecisStore, built: Built) -> None:
    """Three live summaries over all but the last 50 messages (what the worker leaves)."""
    last = built.size - TAIL_MESSAGES
    cuts = [0, last // 3, 2 * last // 3, last]
    text_ = " ".join(bench.payloads.base[i]["content"] for i in range(4))[:3000]
    for first, end in itertools.pairwise(cuts):
        async with precis.sessionmaker() as db, db.begin():
            draft = summary_draft(first + 1, end, text_)
            await store.save_summary(db, built.session_key, draft)
