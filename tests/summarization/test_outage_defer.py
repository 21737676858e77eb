"""An outage defers instead of degrading: a background summary the model is down for stores
nothing and its job waits with backoff, until the backlog reaches SUMMARY_OUTAGE_BACKLOG_FACTOR
times the proactive trigger; inline summarization a caller needs now still stores a fallback."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.db.models import SummaryJob, utcnow
from api.settings import Settings
from api.store import Backlog
from api.summary_plans import outage_defers
from tests.helpers import (
    WAIT_SECONDS,
    append,
    assistant,
    compact,
    history,
    llm_overrides,
    metric,
    user,
    wait_for_summary,
)
from tests.support.fake_llm import FakeLLM

MESSAGE_LIMIT = 4
"""The proactive trigger of these tests: the outage bound is twice this (the default factor)."""


@pytest.fixture
def settings_overrides(fake_llm: FakeLLM) -> dict[str, Any]:
    return {
        **llm_overrides(fake_llm),
        "summary_workers": 1,
        "summary_message_limit": MESSAGE_LIMIT,
        "summary_keep_last_n": 0,
        "summary_llm_max_attempts": 1,
    }


def turns(count: int, tag: str) -> list[dict[str, Any]]:
    """`count` messages, alternating user and assistant."""
    return [
        (user if i % 2 == 0 else assistant)(f"{tag} {i}: port {8000 + i}") for i in range(count)
    ]


async def deferred_job(
    sessionmaker: async_sessionmaker[AsyncSession], after: int = 0
) -> SummaryJob:
    """The job once the worker has deferred it (its `last_error` says so) more than `after`
    attempts in all."""
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while asyncio.get_running_loop().time() < deadline:
        async with sessionmaker() as db:
            job: SummaryJob | None = await db.scalar(select(SummaryJob))
        if (
            job is not None
            and job.status == "pending"
            and (job.last_error or "").startswith("deferred")
            and job.attempts > after
        ):
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(f"no deferred job within {WAIT_SECONDS} s")


async def summaries(client: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    return list((await client.get(f"/v1/sessions/{sid}/summaries")).json()["summaries"])


async def test_during_an_outage_a_background_summary_stores_nothing_and_its_job_waits(
    client: httpx.AsyncClient,
    fake_llm: FakeLLM,
    sessionmaker: async_sessionmaker[AsyncSession],
    sid: str,
) -> None:
    fake_llm.fail_always(503)
    before = metric((await client.get("/metrics")).text, "precis_summaries_deferred_total")
    appended = await append(client, sid, *turns(MESSAGE_LIMIT, "a"))
    assert appended["summarization"]["scheduled"] is True
    job = await deferred_job(sessionmaker)
    assert "the summarizer model is unavailable" in (job.last_error or "")
    assert job.run_after > utcnow()
    assert await summaries(client, sid) == []
    assert fake_llm.statuses() and set(fake_llm.statuses()) == {503}
    after = metric((await client.get("/metrics")).text, "precis_summaries_deferred_total")
    assert after - before >= 1
    assert (await history(client, sid))["summarization_pending"] is True


async def test_once_the_model_is_back_the_deferred_job_makes_a_real_summary(
    client: httpx.AsyncClient,
    fake_llm: FakeLLM,
    sessionmaker: async_sessionmaker[AsyncSession],
    sid: str,
) -> None:
    fake_llm.fail_always(503)
    await append(client, sid, *turns(MESSAGE_LIMIT, "a"))
    await deferred_job(sessionmaker)
    fake_llm.fail_always(None)
    [summary] = (await wait_for_summary(client, sid))["summaries"]
    assert summary["model"] == "openai/fake"
    assert summary["metadata"]["fallback"] is False
    assert (summary["first_seq"], summary["last_seq"]) == (1, MESSAGE_LIMIT)
    async with sessionmaker() as db:
        assert await db.scalar(select(SummaryJob)) is None


async def test_many_small_messages_past_twice_the_message_limit_still_wait(
    client: httpx.AsyncClient,
    fake_llm: FakeLLM,
    sessionmaker: async_sessionmaker[AsyncSession],
    sid: str,
) -> None:
    fake_llm.fail_always(503)
    await append(client, sid, *turns(MESSAGE_LIMIT, "a"))
    first = await deferred_job(sessionmaker)
    await append(client, sid, *turns(3 * MESSAGE_LIMIT, "b"))  # a few hundred tokens in all
    await deferred_job(sessionmaker, after=first.attempts)
    assert await summaries(client, sid) == []
    loaded = await history(client, sid)
    assert len(loaded["context"]) == 4 * MESSAGE_LIMIT  # every message, every fact


async def test_past_the_outage_bound_a_background_summary_stores_its_fallback(
    client: httpx.AsyncClient,
    fake_llm: FakeLLM,
    sessionmaker: async_sessionmaker[AsyncSession],
    sid: str,
) -> None:
    fake_llm.fail_always(503)
    # a token trigger of 50: four messages (44 tokens) wait, twelve (132) pass twice it
    settings = {"max_context_tokens": 50}
    created = await client.post("/v1/sessions", json={"id": sid, "settings": settings})
    assert created.status_code == 201, created.text
    await append(client, sid, *turns(MESSAGE_LIMIT, "a"))
    await deferred_job(sessionmaker)
    # the backlog now holds twice the token trigger: the job's next run stores the fallback,
    # of one leaf's worth of messages (a background job reads no more); the rest (88 tokens)
    # is under the bound again, and waits raw for the model
    await append(client, sid, *turns(2 * MESSAGE_LIMIT, "b"))
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while not (stored := await summaries(client, sid)):
        assert asyncio.get_running_loop().time() < deadline, "no fallback was stored"
        await asyncio.sleep(0.05)
    [summary] = stored
    assert summary["model"] == "fallback"
    assert summary["metadata"]["fallback_reason"] == "llm_unavailable"
    assert summary["metadata"]["trigger"] == "proactive"
    assert (summary["first_seq"], summary["last_seq"]) == (1, MESSAGE_LIMIT)
    await deferred_job(sessionmaker, after=(await deferred_job(sessionmaker)).attempts)
    assert len(await summaries(client, sid)) == 1, "under the bound again: nothing more stored"


async def quiet_session(client: httpx.AsyncClient, sid: str) -> None:
    """A session no append schedules a background job for: only inline paths summarize it."""
    answer = await client.post(
        "/v1/sessions", json={"id": sid, "settings": {"message_limit": 1000}}
    )
    assert answer.status_code == 201, answer.text
    await append(client, sid, *turns(8, "a"), user("and the question now?"))


@pytest.mark.parametrize("trigger", ["manual", "overflow_retry"])
async def test_during_an_outage_compact_still_stores_a_fallback(
    client: httpx.AsyncClient, fake_llm: FakeLLM, sid: str, trigger: str
) -> None:
    await quiet_session(client, sid)
    fake_llm.fail_always(503)
    answer = await compact(client, sid, trigger=trigger, keep_last_n=0)
    assert answer["summary"]["model"] == "fallback"
    assert answer["summary"]["metadata"]["trigger"] == trigger
    assert [s["id"] for s in await summaries(client, sid)] == [answer["summary"]["id"]]


async def test_during_an_outage_a_budgeted_history_load_still_stores_a_fallback(
    client: httpx.AsyncClient, fake_llm: FakeLLM, sid: str
) -> None:
    await quiet_session(client, sid)
    fake_llm.fail_always(503)
    loaded = await history(client, sid, max_tokens=60)
    [summary] = loaded["summaries"]
    assert summary["model"] == "fallback"
    assert summary["metadata"]["trigger_reason"] == "token_limit"


def test_the_outage_bound_is_the_factor_times_the_tokens_the_trigger_keeps() -> None:
    policy = Settings(
        _env_file=None, summary_message_limit=10, summary_max_context_tokens=1000
    ).policy()
    assert outage_defers(policy, Backlog(0, 19, 1999), 2.0)
    assert outage_defers(policy, Backlog(0, 500, 1999), 2.0)  # many small messages wait
    assert not outage_defers(policy, Backlog(0, 3, 2000), 2.0)
    assert not outage_defers(policy, Backlog(0, 3, 10), 1.0)  # a factor of 1: at once
    # tokens not counted: the messages decide
    assert outage_defers(policy, Backlog(0, 19, None), 2.0)
    assert not outage_defers(policy, Backlog(0, 20, None), 2.0)


def test_with_the_token_trigger_off_the_outage_bound_is_in_messages() -> None:
    policy = Settings(
        _env_file=None,
        summary_message_limit=10,
        summary_max_context_tokens=1000,
        dynamic_summary_enabled=False,
    ).policy()
    assert outage_defers(policy, Backlog(0, 19, 50_000), 2.0)
    assert not outage_defers(policy, Backlog(0, 20, 0), 2.0)
