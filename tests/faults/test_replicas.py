"""One summarization per session, within a process and across replicas.

`compact` waits (bounded) for a running summarization of its session and then summarizes
what is left; `summarization_pending` stays true while a background job runs; two app
instances on one PostgreSQL database, appending and compacting the same sessions at once,
keep every invariant of docs/design.md section 2. The database is real; the LLM is the loopback
fake server, whose answer to one marked prompt can be held until the test releases it.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api import compact as compact_use_case  # the tests name their compact requests `compact`
from api import store
from api.db.models import Message, Summary, SummaryJob, SummaryMessage
from api.locks import SessionLocks
from api.main import create_app
from tests.conftest import make_settings
from tests.helpers import (
    WAIT_SECONDS,
    Gate,
    append,
    gated,
    user,
    wait_for_summary,
    wait_until,
)
from tests.invariants import invariant_violations
from tests.support.fake_llm import FakeLLM

HOLD = "HOLD-FIRST"
"""Planted in messages: the first summarizer prompt carrying it is held at the fake LLM."""


def fake_llm_settings(llm: FakeLLM) -> dict[str, Any]:
    """The fake LLM as summarizer; its timeout outlasts the longest hold of a gated answer."""
    return {
        "summary_model": "openai/fake",
        "summary_api_base": llm.base_url,
        "summary_api_key": "test",
        "summary_llm_timeout_seconds": 2 * WAIT_SECONDS,
        "summary_llm_max_attempts": 2,
        "summary_llm_backoff_seconds": 0.01,
    }


@pytest.fixture
def gate(fake_llm: FakeLLM) -> Iterator[Gate]:
    """Holds only the first prompt carrying `HOLD`: a compact that wrongly ran alongside would
    answer at once, and so finish before the release."""
    gate = Gate(HOLD, first_only=True)
    with gated(fake_llm, gate):
        yield gate


@pytest.fixture
def settings_overrides(fake_llm: FakeLLM) -> dict[str, Any]:
    """One background worker; four messages schedule a summary of the first three."""
    return {
        **fake_llm_settings(fake_llm),
        "summary_workers": 1,
        "summary_message_limit": 4,
        "summary_keep_last_n": 1,
    }


@pytest.fixture
async def other_replica(
    client: httpx.AsyncClient, database_url: str, fake_llm: FakeLLM
) -> AsyncIterator[httpx.AsyncClient]:
    """A second app instance on the same database, with its own engines and no worker."""
    app = create_app(make_settings(database_url, **fake_llm_settings(fake_llm), summary_workers=0))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://localhost"
        ) as http,
    ):
        yield http


def watch_lock_requests(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """An event set whenever anyone asks for a summarization lock (a pass-through spy).

    Clear it once the only worker is busy: the next request for a lock is the compact's.
    """
    reached = asyncio.Event()
    original = SessionLocks.hold

    def hold(self: SessionLocks, session_key: int, wait_seconds: float) -> Any:
        reached.set()
        return original(self, session_key, wait_seconds)

    monkeypatch.setattr(SessionLocks, "hold", hold)
    return reached


async def leaves(client: httpx.AsyncClient, session: str) -> list[dict[str, Any]]:
    """The session's summaries made from messages (the forest merges them into a node)."""
    return [
        summary for summary in await session_summaries(client, session) if summary["level"] == 0
    ]


async def session_summaries(client: httpx.AsyncClient, session: str) -> list[dict[str, Any]]:
    """Every summary of the session, superseded ones included, oldest first."""
    answer = await client.get(
        f"/v1/sessions/{session}/summaries", params={"include_superseded": "true", "limit": 200}
    )
    assert answer.status_code == 200, answer.text
    return sorted(answer.json()["summaries"], key=lambda summary: summary["id"])


async def wait_for_summaries(
    client: httpx.AsyncClient, session: str, count: int
) -> list[dict[str, Any]]:
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while asyncio.get_running_loop().time() < deadline:
        summaries = await session_summaries(client, session)
        if len(summaries) >= count:
            return summaries
        await asyncio.sleep(0.05)
    raise AssertionError(f"{session} has no {count} summaries within {WAIT_SECONDS} s")


async def link_mismatches(db: AsyncSession, session_key: int) -> list[str]:
    """Summaries (live or superseded) whose links are not exactly the messages of their range."""
    seq_of = dict(
        (await db.execute(select(Message.id, Message.seq).where(Message.session_id == session_key)))
        .tuples()
        .all()
    )
    linked: dict[int, list[int]] = defaultdict(list)
    rows = await db.execute(
        select(SummaryMessage.summary_id, SummaryMessage.message_id)
        .join(Summary, Summary.id == SummaryMessage.summary_id)
        .where(Summary.session_id == session_key)
    )
    for summary_id, message_id in rows.tuples():
        linked[summary_id].append(seq_of[message_id])
    problems = []
    for summary in await db.scalars(select(Summary).where(Summary.session_id == session_key)):
        expected = list(range(summary.first_seq, summary.last_seq + 1))
        if sorted(linked[summary.id]) != expected or summary.message_count != len(expected):
            problems.append(
                f"summary {summary.id} ({summary.first_seq}..{summary.last_seq}, "
                f"message_count {summary.message_count}) links seqs {sorted(linked[summary.id])}"
            )
    return problems


async def assert_session_sound(
    sessionmaker: async_sessionmaker[AsyncSession], external_id: str, messages: int
) -> None:
    """Seqs are exactly 1..messages; invariants 1 and 2 hold; links match every range."""
    async with sessionmaker() as db:
        session = await store.get_session(db, "default", external_id)
        seqs = list(
            await db.scalars(
                select(Message.seq).where(Message.session_id == session.id).order_by(Message.seq)
            )
        )
        assert seqs == list(range(1, messages + 1)), external_id
        assert await invariant_violations(db, session.id) == [], external_id
        assert await link_mismatches(db, session.id) == [], external_id


# --- compact waits for a running summarization ------------------------------------------------


async def test_compact_waits_for_a_running_summarization_then_summarizes_what_is_left(
    client: httpx.AsyncClient,
    gate: Gate,
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches a compact that does not wait for the session's running summarization.

    Without the wait, the compact would read the backlog 1..6 while the background summary
    of 1..3 is still at the LLM: it would answer before the release, and then either two
    summaries would cover 1..3 or one writer would fail with a range conflict. A compact
    that read the backlog before waiting would also start at seq 1, not 4.
    """
    reached = watch_lock_requests(monkeypatch)
    scheduled = await append(client, "wait", *(user(f"{HOLD} question {i}") for i in range(4)))
    assert scheduled["summarization"]["scheduled"] is True
    await wait_until(gate.entered)  # the background job summarizes 1..3 and is held
    reached.clear()
    # Seqs 5..6: few enough that the backlog left after 1..3 (4..6) schedules no new job.
    await append(client, "wait", *(user(f"late question {i}") for i in range(2)))

    compact = asyncio.create_task(
        client.post("/v1/sessions/wait/compact", json={"trigger": "manual", "keep_last_n": 0})
    )
    await asyncio.wait_for(reached.wait(), WAIT_SECONDS)
    done, _ = await asyncio.wait({compact}, timeout=0.5)
    assert not done, f"the compact answered while the session was summarized: {compact.result()}"
    gate.release.set()  # the compact is still waiting, so it can only finish after this
    answer = await asyncio.wait_for(compact, WAIT_SECONDS)
    assert answer.status_code == 200, answer.text

    background, compacted = await leaves(client, "wait")
    assert (background["first_seq"], background["last_seq"]) == (1, 3)
    assert background["metadata"]["trigger"] == "proactive"
    assert answer.json()["summary"]["id"] == compacted["id"]
    assert compacted["first_seq"] == background["last_seq"] + 1
    assert (compacted["last_seq"], compacted["metadata"]["trigger"]) == (6, "manual")
    assert answer.json()["history"]["messages"] == []
    await assert_session_sound(sessionmaker, "wait", 6)


async def test_compact_whose_wait_runs_out_answers_409_and_stores_nothing(
    client: httpx.AsyncClient,
    gate: Gate,
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches an unbounded wait (the request would hang until the release), a busy compact
    answering anything but 409 SummarizationInProgress, and one that stores a summary anyway
    (message 4, which it was asked to summarize, must stay unsummarized)."""
    monkeypatch.setattr(compact_use_case, "COMPACT_WAIT_SECONDS", 0.3)
    await append(client, "busy", *(user(f"{HOLD} question {i}") for i in range(4)))
    await wait_until(gate.entered)

    answer = await asyncio.wait_for(
        client.post("/v1/sessions/busy/compact", json={"trigger": "manual", "keep_last_n": 0}),
        WAIT_SECONDS / 2,
    )
    assert answer.status_code == 409, answer.text
    assert answer.json()["error"] == "SummarizationInProgress"
    assert answer.headers["retry-after"] == "5"  # the client may try again then
    assert await session_summaries(client, "busy") == []
    assert not gate.release.is_set()  # the 409 came while the summarization still ran

    gate.release.set()
    [background] = await wait_for_summaries(client, "busy", 1)
    assert (background["first_seq"], background["last_seq"]) == (1, 3)
    assert background["metadata"]["trigger"] == "proactive"
    history = await wait_for_summary(client, "busy")  # its job ended: the session is free
    assert [message["seq"] for message in history["messages"]] == [4]
    await assert_session_sound(sessionmaker, "busy", 4)

    # Busy, not broken: once the session is free the same compact goes through.
    retried = await client.post(
        "/v1/sessions/busy/compact", json={"trigger": "manual", "keep_last_n": 0}
    )
    assert retried.status_code == 200, retried.text
    assert (retried.json()["summary"]["first_seq"], retried.json()["summary"]["last_seq"]) == (4, 4)


@pytest.mark.postgresql_only
async def test_compact_on_one_replica_waits_for_a_summarization_running_on_another(
    client: httpx.AsyncClient,
    other_replica: httpx.AsyncClient,
    gate: Gate,
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches a summarization lock that holds within one process only: the compacting replica
    does not share the in-process lock of the replica whose worker runs the job, so only
    the lease makes it wait; without it the compact answers before the release."""
    reached = watch_lock_requests(monkeypatch)
    await append(client, "across", *(user(f"{HOLD} question {i}") for i in range(4)))
    await wait_until(gate.entered)  # the worker of `client`'s app summarizes 1..3, held
    reached.clear()
    # Seqs 5..6 only: a backlog of 4 would schedule a new job when this one ends, and that
    # job may take the lease between two polls of the waiting compact.
    await append(other_replica, "across", *(user(f"late question {i}") for i in range(2)))

    compact = asyncio.create_task(
        other_replica.post(
            "/v1/sessions/across/compact", json={"trigger": "manual", "keep_last_n": 0}
        )
    )
    await asyncio.wait_for(reached.wait(), WAIT_SECONDS)
    done, _ = await asyncio.wait({compact}, timeout=0.5)
    assert not done, f"the compact answered while another replica summarized: {compact.result()}"
    gate.release.set()
    answer = await asyncio.wait_for(compact, WAIT_SECONDS)
    assert answer.status_code == 200, answer.text

    background, compacted = await leaves(client, "across")
    assert (background["first_seq"], background["last_seq"]) == (1, 3)
    assert (compacted["first_seq"], compacted["last_seq"]) == (4, 6)
    assert answer.json()["summary"]["id"] == compacted["id"]
    await assert_session_sound(sessionmaker, "across", 6)


@pytest.mark.postgresql_only
async def test_compact_waiting_on_another_replica_gives_up_with_409_and_stores_nothing(
    client: httpx.AsyncClient,
    other_replica: httpx.AsyncClient,
    gate: Gate,
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches a lease wait without a deadline (the request would hang until the
    release) or one that, timed out, goes on to summarize anyway."""
    monkeypatch.setattr(compact_use_case, "COMPACT_WAIT_SECONDS", 0.3)
    await append(client, "across-busy", *(user(f"{HOLD} question {i}") for i in range(4)))
    await wait_until(gate.entered)

    answer = await asyncio.wait_for(
        other_replica.post(
            "/v1/sessions/across-busy/compact", json={"trigger": "manual", "keep_last_n": 0}
        ),
        WAIT_SECONDS / 2,
    )
    assert answer.status_code == 409, answer.text
    assert answer.json()["error"] == "SummarizationInProgress"
    assert await session_summaries(client, "across-busy") == []

    gate.release.set()
    [background] = await wait_for_summaries(client, "across-busy", 1)
    assert (background["first_seq"], background["last_seq"]) == (1, 3)
    await assert_session_sound(sessionmaker, "across-busy", 4)


# --- summarization_pending while a job runs ---------------------------------------------------


async def history_pending(client: httpx.AsyncClient, session: str) -> bool:
    answer = await client.get(f"/v1/sessions/{session}/history")
    assert answer.status_code == 200, answer.text
    return bool(answer.json()["summarization_pending"])


async def test_summarization_pending_while_a_background_job_runs_and_not_after(
    client: httpx.AsyncClient,
    other_replica: httpx.AsyncClient,
    gate: Gate,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    """Catches `summarization_pending` computed from queued jobs only (false while the job
    runs), from the in-process lock only (another replica, which runs nothing, would say
    false), or left true after the job finished (a job row never removed)."""
    await append(client, "pending", *(user(f"{HOLD} question {i}") for i in range(4)))
    await wait_until(gate.entered)
    async with sessionmaker() as db:
        statuses = list(await db.scalars(select(SummaryJob.status)))
    assert statuses == ["running"]
    assert await history_pending(client, "pending") is True
    assert await history_pending(other_replica, "pending") is True

    gate.release.set()
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while await history_pending(other_replica, "pending"):
        assert asyncio.get_running_loop().time() < deadline, "still pending after the job"
        await asyncio.sleep(0.05)
    assert await history_pending(client, "pending") is False
    history = (await other_replica.get("/v1/sessions/pending/history")).json()
    assert [(s["first_seq"], s["last_seq"]) for s in history["summaries"]] == [(1, 3)]
    async with sessionmaker() as db:
        assert await db.scalar(select(func.count()).select_from(SummaryJob)) == 0


# --- two replicas on one PostgreSQL ---------------------------------------------------------

REPLICA_SESSIONS = 4
LANES = 8
"""Concurrent clients: lane n uses session n % 4 on replica n // 4, so each session gets
traffic from both replicas at once."""
PAIRS_PER_LANE = 5
"""Append+compact pairs a lane runs one after another (40 pairs in all): appends keep
landing between compactions instead of all before them."""
MESSAGES_PER_APPEND = 3


async def running_replica(
    stack: AsyncExitStack, database_url: str, settings: dict[str, Any], name: str
) -> httpx.AsyncClient:
    """An app instance with its lifespan running until `stack` closes, and a client of it."""
    app = create_app(make_settings(database_url, **settings))
    await stack.enter_async_context(app.router.lifespan_context(app))
    transport = httpx.ASGITransport(app=app)
    http = await stack.enter_async_context(
        httpx.AsyncClient(
            transport=transport, base_url=f"http://{name}.localhost", timeout=WAIT_SECONDS
        )
    )
    return http


async def wait_until_settled(
    sessionmaker: async_sessionmaker[AsyncSession],
    replicas: list[httpx.AsyncClient],
    sessions: list[str],
) -> None:
    """No job queued or running, and no replica reports pending work for any session."""
    deadline = asyncio.get_running_loop().time() + 3 * WAIT_SECONDS
    while asyncio.get_running_loop().time() < deadline:
        async with sessionmaker() as db:
            jobs = await db.scalar(select(func.count()).select_from(SummaryJob))
        if jobs == 0:
            pending = [
                await history_pending(http, session) for http in replicas for session in sessions
            ]
            if not any(pending):
                return
        await asyncio.sleep(0.1)
    raise AssertionError("summarization work still pending after the deadline")


@pytest.fixture
async def two_replicas(
    engine: AsyncEngine, database_url: str, fake_llm: FakeLLM
) -> AsyncIterator[list[httpx.AsyncClient]]:
    """Two app instances, each with its own engines, lifespan and two workers, on one database."""
    fake_llm.latency_seconds = 0.02  # summaries take a moment, so replicas overlap on them
    settings = {
        **fake_llm_settings(fake_llm),
        "summary_workers": 2,
        "summary_message_limit": 6,
        "summary_keep_last_n": 2,
        "summary_limit": 3,
    }
    async with AsyncExitStack() as stack:
        replicas = [
            await running_replica(stack, database_url, settings, f"replica-{n}") for n in range(2)
        ]
        yield replicas


@pytest.mark.postgresql_only
async def test_two_replicas_appending_and_compacting_the_same_sessions_keep_the_invariants(
    two_replicas: list[httpx.AsyncClient], sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    """Catches a summarization lock that holds within one process only: two replicas (each with
    two workers) summarizing one session at once would store overlapping or duplicate live
    summaries, link a message to two of them, or fail a request with a range conflict. Also
    catches appends racing across replicas (seq gaps or duplicates, a failed append), and
    a roll-up racing a new summary (the last assertion makes sure roll-ups did run)."""
    sessions = [f"shared-{n}" for n in range(REPLICA_SESSIONS)]

    async def lane(n: int) -> list[tuple[str, list[int], httpx.Response]]:
        http, session = two_replicas[n // REPLICA_SESSIONS], sessions[n % REPLICA_SESSIONS]
        outcomes = []
        for i in range(PAIRS_PER_LANE):
            body = await append(
                http,
                session,
                *(user(f"lane {n} pair {i} part {k}") for k in range(MESSAGES_PER_APPEND)),
            )
            request = (
                {"trigger": "manual", "keep_last_n": 1}
                if (n + i) % 2
                else {"trigger": "overflow_retry"}
            )
            compacted = await http.post(f"/v1/sessions/{session}/compact", json=request)
            outcomes.append((session, [message["seq"] for message in body["messages"]], compacted))
        return outcomes

    lanes = await asyncio.wait_for(
        asyncio.gather(*(lane(n) for n in range(LANES))), 3 * WAIT_SECONDS
    )
    outcomes = [outcome for lane_outcomes in lanes for outcome in lane_outcomes]
    assert len(outcomes) == LANES * PAIRS_PER_LANE
    for _session, _seqs, compacted in outcomes:
        busy = compacted.status_code == 409 and compacted.json()["error"] == (
            "SummarizationInProgress"
        )
        assert compacted.status_code == 200 or busy, compacted.text
    seqs_by_session: dict[str, list[int]] = defaultdict(list)
    for session, seqs, _compacted in outcomes:
        seqs_by_session[session].extend(seqs)
    per_session = MESSAGES_PER_APPEND * len(outcomes) // REPLICA_SESSIONS
    for session in sessions:
        assert sorted(seqs_by_session[session]) == list(range(1, per_session + 1)), session

    await wait_until_settled(sessionmaker, two_replicas, sessions)
    for session in sessions:
        await assert_session_sound(sessionmaker, session, per_session)
    async with sessionmaker() as db:
        summaries = list(await db.scalars(select(Summary)))
    assert len(summaries) >= REPLICA_SESSIONS
    assert any(summary.superseded_by is not None for summary in summaries), "no roll-up ran"
