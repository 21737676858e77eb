"""A running job's lease is renewed while it runs, and a killed worker's job is taken over.

Store level: a renewal extends the lease, and only the claim that holds the job can renew,
release or finish it. Worker level (with a lease of a second or two): a job held longer
than its lease keeps it and no other claim gets it; the heartbeat ends with the job, also
when the worker stops, and a failed renewal is retried. Real processes: two replicas of
`python -m api` on one database, one SIGKILLed while it streams a `/v1/responses` turn and
runs a summarization job: the client's stream ends without
`response.completed`, nothing of the turn is stored, the turn retried on the survivor is
stored once, and once the lease has run out the survivor completes the job.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api import store, worker
from api.db.models import SummarizationLease, SummaryJob, utcnow
from api.main import create_app
from tests.conftest import make_settings
from tests.helpers import (
    WAIT_SECONDS,
    Gate,
    append,
    assert_nothing_lost,
    claim,
    count,
    gated,
    llm_overrides,
    new_job,
    user,
    wait_for_summary,
    wait_until,
)
from tests.support.fake_llm import FakeLLM
from tests.support.live_server import LiveServer

SHORT_LEASE = timedelta(seconds=2)
"""The lease of the worker-level tests: a job held for two of them would lose an unrenewed one.

Renewed every 2/3 s, it survives an event loop stalled for a second on a busy machine.
"""

HEARTBEAT_SECONDS = SHORT_LEASE.total_seconds() / worker.HEARTBEATS_PER_LEASE

HELD = "HOLD-BACKGROUND"
"""Messages carrying this marker get their summary only once the gate is released."""

SETTINGS: dict[str, Any] = {
    "summary_workers": 1,
    "summary_message_limit": 4,
    "summary_keep_last_n": 1,
    "summary_llm_timeout_seconds": 60,
}
"""Four messages schedule a background job summarizing seq 1..3; the held LLM never times out."""


@pytest.fixture
def gate(fake_llm: FakeLLM) -> Iterator[Gate]:
    """The fake LLM holds its answer to a prompt carrying `HELD` until `gate.release` is set."""
    held = Gate(HELD)
    with gated(fake_llm, held):
        yield held


@pytest.fixture
def short_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "JOB_LEASE", SHORT_LEASE)


@pytest.fixture
def settings_overrides(fake_llm: FakeLLM) -> dict[str, Any]:
    return {**llm_overrides(fake_llm), **SETTINGS}


def record_renewals(monkeypatch: pytest.MonkeyPatch, fail_first: int = 0) -> list[datetime]:
    """Record the time of every `store.renew_job_lease` call; the first `fail_first` raise.

    The worker looks the function up in `store` at each call, so the patch reaches it.
    """
    calls: list[datetime] = []
    original = store.renew_job_lease

    async def renew(*args: Any, **kwargs: Any) -> bool:
        calls.append(utcnow())
        if len(calls) <= fail_first:
            raise ConnectionError("the database went away")
        return await original(*args, **kwargs)

    monkeypatch.setattr(store, "renew_job_lease", renew)
    return calls


async def the_job(sessionmaker: async_sessionmaker[AsyncSession]) -> SummaryJob:
    async with sessionmaker() as db:
        [job] = list(await db.scalars(select(SummaryJob)))
        return job


async def expire_lease(sessionmaker: async_sessionmaker[AsyncSession], job_id: int) -> None:
    """Backdate the job's lease, as if its worker had stopped renewing it long ago."""
    async with sessionmaker() as db, db.begin():
        await db.execute(
            update(SummaryJob)
            .where(SummaryJob.session_id == job_id)
            .values(locked_until=utcnow() - timedelta(seconds=1))
        )


async def expire_session_leases(sessionmaker: async_sessionmaker[AsyncSession]) -> None:
    """Backdate every session's summarization lease (`api.locks`), as if its holder had stopped
    renewing it long ago."""
    async with sessionmaker() as db, db.begin():
        await db.execute(
            update(SummarizationLease).values(expires_at=utcnow() - timedelta(seconds=1))
        )


async def poll(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while not await condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {WAIT_SECONDS} s: {what}")
        await asyncio.sleep(0.05)


async def nonzero(calls: list[datetime], more_than: int = 0) -> bool:
    return len(calls) > more_than


async def no_jobs(sessionmaker: async_sessionmaker[AsyncSession]) -> bool:
    return await count(sessionmaker, SummaryJob) == 0


# --- store level ------------------------------------------------------------------------------


async def test_renewing_a_lease_moves_locked_until_forward(
    sessionmaker: async_sessionmaker[AsyncSession], db: AsyncSession
) -> None:
    await new_job(db, "renew")
    job = await claim(sessionmaker, timedelta(seconds=5))
    assert job is not None and job.locked_until is not None
    async with sessionmaker() as renew, renew.begin():
        assert await store.renew_job_lease(renew, job, timedelta(minutes=5))
    renewed = await the_job(sessionmaker)
    assert renewed.locked_until is not None
    assert renewed.locked_until >= job.locked_until + timedelta(minutes=4)
    assert (renewed.status, renewed.attempts) == ("running", 1)


async def test_a_claim_taken_over_can_no_longer_renew_release_or_finish_the_job(
    sessionmaker: async_sessionmaker[AsyncSession], db: AsyncSession
) -> None:
    await new_job(db, "taken-over")
    old = await claim(sessionmaker)
    assert old is not None
    await expire_lease(sessionmaker, old.session_id)
    new = await claim(sessionmaker)
    assert new is not None and (new.session_id, new.attempts) == (old.session_id, 2)

    async with sessionmaker() as stale, stale.begin():
        assert not await store.renew_job_lease(stale, old, worker.JOB_LEASE)
        await store.release_job(stale, old, utcnow(), "late failure")
        await store.finish_job(stale, old)
    job = await the_job(sessionmaker)
    assert (job.status, job.attempts, job.last_error) == ("running", 2, None)

    async with sessionmaker() as current, current.begin():
        assert await store.renew_job_lease(current, new, worker.JOB_LEASE)
        await store.finish_job(current, new)
    assert await count(sessionmaker, SummaryJob) == 0


async def test_a_claim_of_a_finished_job_does_not_hold_the_next_job_of_its_session(
    sessionmaker: async_sessionmaker[AsyncSession], db: AsyncSession
) -> None:
    """A job is keyed by its session: the session's next job starts at attempt 0 again, so a
    stale claim of the finished one (same session, same attempt) must not hold the new one."""
    await new_job(db, "next-job")
    old = await claim(sessionmaker)
    assert old is not None
    async with sessionmaker() as done, done.begin():
        await store.finish_job(done, old)
    await store.enqueue_job(db, old.session_id, "proactive", "message_limit")
    await db.commit()
    new = await claim(sessionmaker)
    assert new is not None and (new.session_id, new.attempts) == (old.session_id, old.attempts)

    async with sessionmaker() as stale, stale.begin():
        assert not await store.renew_job_lease(stale, old, worker.JOB_LEASE)
        await store.release_job(stale, old, utcnow(), "late failure")
        await store.finish_job(stale, old)
    job = await the_job(sessionmaker)
    assert (job.status, job.attempts, job.last_error) == ("running", 1, None)


# --- worker level -----------------------------------------------------------------------------


async def test_a_job_running_past_its_lease_keeps_it_and_no_other_claim_gets_it(
    short_lease: None,
    gate: Gate,
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
    sid: str,
) -> None:
    await append(client, sid, *(user(f"{HELD} {i}") for i in range(4)))
    await wait_until(gate.entered)
    leases: list[datetime] = []
    for _ in range(4):  # two lease lengths: an unrenewed lease would have run out
        await asyncio.sleep(SHORT_LEASE.total_seconds() / 2)
        job = await the_job(sessionmaker)
        assert (job.status, job.attempts) == ("running", 1)
        assert job.locked_until is not None and job.locked_until > utcnow()
        leases.append(job.locked_until)
        assert await claim(sessionmaker) is None
    assert leases == sorted(leases) and leases[-1] > leases[0]

    gate.release.set()
    history = await wait_for_summary(client, sid)
    assert (history["summaries"][0]["first_seq"], history["summaries"][0]["last_seq"]) == (1, 3)
    assert await count(sessionmaker, SummaryJob) == 0


async def test_the_heartbeat_stops_when_the_job_ends(
    short_lease: None,
    gate: Gate,
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
    sid: str,
) -> None:
    renewals = record_renewals(monkeypatch)
    await append(client, sid, *(user(f"{HELD} {i}") for i in range(4)))
    await wait_until(gate.entered)
    await poll(lambda: nonzero(renewals), "a first renewal")
    gate.release.set()
    await wait_for_summary(client, sid)
    await poll(lambda: no_jobs(sessionmaker), "the job is finished")
    ended = len(renewals)
    await asyncio.sleep(3 * HEARTBEAT_SECONDS)
    assert len(renewals) == ended


async def test_the_heartbeat_stops_when_the_worker_stops_and_the_job_goes_back_to_pending(
    short_lease: None,
    gate: Gate,
    database_url: str,
    settings_overrides: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
    sid: str,
) -> None:
    renewals = record_renewals(monkeypatch)
    app = create_app(make_settings(database_url, **settings_overrides))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://localhost"
        ) as http,
    ):
        await append(http, sid, *(user(f"{HELD} {i}") for i in range(4)))
        await wait_until(gate.entered)
        await poll(lambda: nonzero(renewals), "a first renewal")
    # The lifespan has ended: the worker stopped, its summarization was cancelled.
    ended = len(renewals)
    job = await the_job(sessionmaker)
    assert (job.status, job.locked_until, job.last_error) == ("pending", None, "worker stopped")
    await asyncio.sleep(3 * HEARTBEAT_SECONDS)
    assert len(renewals) == ended


async def test_a_failed_renewal_is_logged_and_retried_and_the_job_completes(
    short_lease: None,
    gate: Gate,
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    sid: str,
) -> None:
    renewals = record_renewals(monkeypatch, fail_first=1)
    caplog.set_level(logging.WARNING, logger="precis.worker")
    await append(client, sid, *(user(f"{HELD} {i}") for i in range(4)))
    await wait_until(gate.entered)
    claimed = (await the_job(sessionmaker)).locked_until
    assert claimed is not None

    async def renewed() -> bool:
        job = await the_job(sessionmaker)
        return job.locked_until is not None and job.locked_until > claimed

    await poll(renewed, "a renewal after the failed one")
    assert len(renewals) >= 2
    [failed] = [r for r in caplog.records if "could not renew the lease" in r.getMessage()]
    # a lost connection is a one-line warning, not an error with a traceback
    assert (failed.levelno, failed.exc_info) == (logging.WARNING, None)
    job = await the_job(sessionmaker)
    assert (job.status, job.attempts) == ("running", 1)
    gate.release.set()
    history = await wait_for_summary(client, sid)
    assert (history["summaries"][0]["first_seq"], history["summaries"][0]["last_seq"]) == (1, 3)
    await poll(lambda: no_jobs(sessionmaker), "the job is finished")
    await assert_nothing_lost(sessionmaker, sid, 4)


# --- a real process killed --------------------------------------------------------------------


STREAMED_MODEL = "openai/gpt-4o"
"""A model litellm streams event by event (for `openai/fake` it relays a whole answer)."""

TURN = "Where is my parcel? MARKER-turn-1"


def responses_settings(fake_llm: FakeLLM) -> dict[str, Any]:
    """`/v1/responses` calling the fake for `STREAMED_MODEL`."""
    return {
        "model_allowed": STREAMED_MODEL,
        "model_api_base": fake_llm.base_url,
        "model_api_key": "test",
        "model_context_tokens": f"{STREAMED_MODEL}=16000",
    }


async def stream_until_killed(
    client: AsyncOpenAI, conversation: str, server: LiveServer
) -> list[str]:
    """Stream a turn from `server` and SIGKILL it at the first text delta; the event types the
    client saw before its stream broke."""
    stream = await client.responses.create(
        model=STREAMED_MODEL, input=TURN, conversation=conversation, stream=True
    )
    kinds: list[str] = []
    with pytest.raises((openai.APIError, httpx.HTTPError)):
        async for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                server.kill()  # SIGKILL: no shutdown, no release
    return kinds


async def test_a_replica_sigkilled_mid_turn_and_mid_job_stores_no_half_turn_and_loses_no_job(
    gate: Gate,
    fake_llm: FakeLLM,
    database_url: str,
    sessionmaker: async_sessionmaker[AsyncSession],
    tmp_path: Path,
) -> None:
    settings = {**llm_overrides(fake_llm), **SETTINGS, **responses_settings(fake_llm)}
    fake_llm.stream_delay_seconds = 0.2  # the answer streams for about a second
    first = LiveServer(database_url, tmp_path / "first.log", settings).start()
    try:
        async with httpx.AsyncClient(base_url=first.base_url, timeout=WAIT_SECONDS) as http:
            await append(http, "killed", *(user(f"{HELD} {i}") for i in range(4)))
            await wait_until(gate.entered)
        running = await the_job(sessionmaker)
        assert (running.status, running.attempts) == ("running", 1), first.log_tail()
        with LiveServer(database_url, tmp_path / "second.log", settings) as second:
            on_first, on_second = (
                AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key="dev", max_retries=0)
                for server in (first, second)
            )
            conversation = (await on_first.conversations.create()).id
            kinds = await stream_until_killed(on_first, conversation, first)
            assert first.process is not None and first.process.returncode == -9
            assert "response.output_text.delta" in kinds and "response.completed" not in kinds
            # nothing of the cut turn is stored
            assert [item async for item in on_second.conversations.items.list(conversation)] == []

            retried = await on_second.responses.create(
                model=STREAMED_MODEL, input=TURN, conversation=conversation
            )
            assert retried.status == "completed"
            items = [
                item async for item in on_second.conversations.items.list(conversation, order="asc")
            ]
            assert [(item.type, getattr(item, "role", None)) for item in items] == [
                ("message", "user"),
                ("message", "assistant"),
            ]
            assert TURN in str(items[0])

            # the dead replica's job: the survivor leaves it while the lease holds (see
            # test_a_job_running_past_its_lease_keeps_it_and_no_other_claim_gets_it), and
            # completes it once the lease has run out
            job = await the_job(sessionmaker)
            assert (job.status, job.attempts) == ("running", 1), second.log_tail()
            gate.release.set()
            await expire_lease(sessionmaker, running.session_id)
            await expire_session_leases(sessionmaker)  # the dead job's lease on the session
            async with httpx.AsyncClient(base_url=second.base_url, timeout=WAIT_SECONDS) as http:
                history = await wait_for_summary(http, "killed")
            await poll(lambda: no_jobs(sessionmaker), "the job is finished")
    finally:
        first.kill()
    [summary] = history["summaries"]
    assert (summary["first_seq"], summary["last_seq"]) == (1, 3)
    assert summary["metadata"]["truncated"] is False
    assert [message["seq"] for message in history["messages"]] == [4]
    await assert_nothing_lost(sessionmaker, "killed", 4)
