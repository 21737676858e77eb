"""Faults lose nothing: the LLM down, slow or flaky; an unreachable database; SIGTERM.

LLM faults run on both databases through the loopback fake LLM (litellm's real HTTP path).
SIGTERM runs the real server (`python -m api`) as a subprocess. Database connections that
die are `tests/faults/test_connection_faults.py`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.db.models import Summary, SummaryJob
from api.main import create_app
from tests.conftest import make_settings
from tests.helpers import (
    WAIT_SECONDS,
    Gate,
    admin_query,
    append,
    assert_nothing_lost,
    count,
    gated,
    llm_overrides,
    user,
    wait_for_summary,
    wait_until,
)
from tests.support.fake_llm import FakeLLM
from tests.support.live_server import LiveServer


@pytest.fixture
def settings_overrides(request: pytest.FixtureRequest, fake_llm: FakeLLM) -> dict[str, Any]:
    return {**llm_overrides(fake_llm), **getattr(request, "param", {})}


# --- the LLM down, flaky or slow ------------------------------------------------------------


@pytest.mark.parametrize(
    "settings_overrides",
    # a factor of 1: the backlog is past the outage bound at once, so no defer
    [{"summary_message_limit": 6, "summary_workers": 1, "summary_outage_backlog_factor": 1}],
    indirect=True,
)
async def test_proactive_summary_with_the_llm_down_stores_a_truncated_fallback(
    client: httpx.AsyncClient,
    fake_llm: FakeLLM,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    fake_llm.fail_always(503)
    answer = await append(client, "down", *(user(f"question {i}") for i in range(6)))
    assert answer["summarization"]["scheduled"] is True
    history = await wait_for_summary(client, "down")
    [summary] = history["summaries"]
    assert (summary["first_seq"], summary["last_seq"]) == (1, 4)
    assert summary["metadata"]["truncated"] is True
    assert summary["metadata"]["failed_llm_calls"] >= 2
    assert summary["summary_text"].strip()
    assert set(fake_llm.statuses()) == {503}
    # the fallback says who wrote it and why, not that the configured model did
    assert summary["model"] == "fallback"
    assert summary["metadata"]["fallback"] is True
    assert summary["metadata"]["fallback_reason"] == "llm_unavailable"
    assert summary["metadata"]["fallback_detail"].startswith("TransientLLMError: ")
    await assert_nothing_lost(sessionmaker, "down", 6)
    assert await count(sessionmaker, SummaryJob) == 0


@pytest.mark.parametrize(
    "settings_overrides",
    [{"summary_message_limit": 6, "summary_workers": 1, "summary_llm_max_attempts": 3}],
    indirect=True,
)
async def test_proactive_summary_rides_out_a_flaky_llm(
    client: httpx.AsyncClient,
    fake_llm: FakeLLM,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    fake_llm.fail_next(503)
    fake_llm.fail_next(429, retry_after=0)
    await append(client, "flaky", *(user(f"question {i}") for i in range(6)))
    history = await wait_for_summary(client, "flaky")
    metadata = history["summaries"][0]["metadata"]
    assert metadata["truncated"] is False
    assert metadata["failed_llm_calls"] == 2
    assert fake_llm.statuses() == [503, 429, 200]
    await assert_nothing_lost(sessionmaker, "flaky", 6)


@pytest.mark.parametrize(
    "settings_overrides",
    [{"summary_message_limit": 6, "summary_workers": 1}],
    indirect=True,
)
async def test_proactive_summary_retries_past_a_slow_llm(
    client: httpx.AsyncClient,
    fake_llm: FakeLLM,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    fake_llm.slow_next(3.0)  # past the 1 s timeout
    await append(client, "slow", *(user(f"question {i}") for i in range(6)))
    history = await wait_for_summary(client, "slow")
    metadata = history["summaries"][0]["metadata"]
    assert metadata["truncated"] is False
    assert metadata["failed_llm_calls"] >= 1
    await assert_nothing_lost(sessionmaker, "slow", 6)


async def test_compact_with_the_llm_down_answers_with_a_truncated_fallback(
    client: httpx.AsyncClient,
    fake_llm: FakeLLM,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    fake_llm.fail_always(503)
    await append(client, "inline", *(user(f"question {i}") for i in range(8)))
    answer = await client.post(
        "/v1/sessions/inline/compact", json={"trigger": "manual", "keep_last_n": 0}
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["summary"]["first_seq"], body["summary"]["last_seq"]) == (1, 8)
    assert body["summary"]["metadata"]["truncated"] is True
    assert body["history"]["messages"] == []
    assert body["history"]["context"][0]["role"] == "system"
    await assert_nothing_lost(sessionmaker, "inline", 8)


@pytest.fixture
def unreachable_llm(settings_overrides: dict[str, Any]) -> None:
    settings_overrides["summary_api_base"] = FakeLLM.closed_port_url()


async def test_compact_with_the_llm_unreachable_answers_with_a_truncated_fallback(
    unreachable_llm: None,
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    await append(client, "refused", *(user(f"question {i}") for i in range(5)))
    answer = await client.post(
        "/v1/sessions/refused/compact", json={"trigger": "manual", "keep_last_n": 1}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["summary"]["metadata"]["truncated"] is True
    assert answer.json()["summary"]["last_seq"] == 4
    await assert_nothing_lost(sessionmaker, "refused", 5)


async def test_history_over_max_tokens_with_the_llm_down_still_fits_the_budget(
    client: httpx.AsyncClient,
    fake_llm: FakeLLM,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    fake_llm.fail_always(503)
    text_ = "The parcel for order 1234 left the Lyon depot on Monday morning. " * 3
    await append(client, "budget", *(user(f"{i}: {text_}") for i in range(12)))
    answer = await client.get("/v1/sessions/budget/history", params={"max_tokens": 300})
    assert answer.status_code == 200, answer.text
    history = answer.json()
    assert history["token_estimate"] <= 300
    assert history["summaries"] and history["summaries"][0]["metadata"]["truncated"] is True
    await assert_nothing_lost(sessionmaker, "budget", 12)


async def test_after_an_outage_the_llm_summarizes_the_rest_normally(
    client: httpx.AsyncClient,
    fake_llm: FakeLLM,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    fake_llm.fail_always(503)
    await append(client, "outage", *(user(f"before {i}") for i in range(4)))
    down = await client.post(
        "/v1/sessions/outage/compact", json={"trigger": "manual", "keep_last_n": 0}
    )
    assert down.json()["summary"]["metadata"]["truncated"] is True
    fake_llm.fail_always(None)
    await append(client, "outage", *(user(f"after {i}") for i in range(4)))
    up = await client.post(
        "/v1/sessions/outage/compact", json={"trigger": "manual", "keep_last_n": 0}
    )
    assert up.status_code == 200, up.text
    summary = up.json()["summary"]
    assert (summary["first_seq"], summary["last_seq"]) == (5, 8)
    assert summary["metadata"]["truncated"] is False
    await assert_nothing_lost(sessionmaker, "outage", 8)


# --- the database connection killed (PostgreSQL) --------------------------------------------


async def test_an_unreachable_database_gets_503_and_readyz_says_so() -> None:
    url = "postgresql+asyncpg://postgres@127.0.0.1:1/precis"  # nothing listens on port 1
    # a short DATABASE_RETRY_SECONDS: the append gives up quickly
    app = create_app(make_settings(url, summary_workers=0, database_retry_seconds=0.3))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://localhost"
        ) as http,
    ):
        ready = await http.get("/readyz")
        answer = await http.post("/v1/sessions/s/messages", json={"messages": [user("x")]})
        scraped = await http.get("/metrics")
    assert scraped.status_code == 200 and "precis_pending_summary_jobs" in scraped.text
    assert ready.status_code == 503 and ready.json()["error"] == "ServiceUnavailable"
    assert answer.status_code == 503 and answer.json()["error"] == "ServiceUnavailable"


# --- SIGTERM ---------------------------------------------------------------------------------


@pytest.fixture
async def gated_llm(fake_llm: FakeLLM) -> AsyncIterator[tuple[FakeLLM, Gate, Gate]]:
    background, inline = Gate("HOLD-BACKGROUND"), Gate("HOLD-INLINE")
    with gated(fake_llm, background, inline):
        yield fake_llm, background, inline


@pytest.mark.postgresql_only
async def test_sigterm_finishes_in_flight_requests_and_a_new_process_resumes_the_job(
    engine: Any,
    database_url: str,
    sessionmaker: async_sessionmaker[AsyncSession],
    gated_llm: tuple[FakeLLM, Gate, Gate],
    tmp_path: Path,
) -> None:
    llm, background, inline = gated_llm
    settings = {
        **llm_overrides(llm),
        "summary_workers": 1,
        "summary_message_limit": 4,
        "summary_keep_last_n": 1,
        "summary_llm_timeout_seconds": 60,
    }
    first = LiveServer(database_url, tmp_path / "first.log", settings)
    with first:
        async with httpx.AsyncClient(base_url=first.base_url, timeout=WAIT_SECONDS) as http:
            # A background job whose LLM call hangs, and an inline summarization in flight.
            await append(http, "bg", *(user(f"HOLD-BACKGROUND {i}") for i in range(4)))
            await wait_until(background.entered)
            await append(http, "fg", *(user(f"HOLD-INLINE {i}") for i in range(3)))
            compact = asyncio.create_task(
                http.post("/v1/sessions/fg/compact", json={"trigger": "manual", "keep_last_n": 0})
            )
            await wait_until(inline.entered)
            first.terminate()
            await asyncio.sleep(0.5)  # the server is shutting down, the request still runs
            inline.release.set()
            answer = await compact
        assert answer.status_code == 200, answer.text
        assert answer.json()["summary"]["last_seq"] == 3
        assert await asyncio.to_thread(first.wait) in (0, -15), first.log_tail()
    async with sessionmaker() as db:
        jobs = list(await db.scalars(select(SummaryJob)))
    assert [job.status for job in jobs] == ["pending"], first.log_tail()
    assert await count(sessionmaker, Summary) == 1  # fg's; bg's never landed

    background.release.set()
    with LiveServer(database_url, tmp_path / "second.log", settings) as second:
        async with httpx.AsyncClient(base_url=second.base_url, timeout=WAIT_SECONDS) as http:
            history = await wait_for_summary(http, "bg")
    assert (history["summaries"][0]["first_seq"], history["summaries"][0]["last_seq"]) == (1, 3)
    assert await count(sessionmaker, SummaryJob) == 0
    await assert_nothing_lost(sessionmaker, "bg", 4)
    await assert_nothing_lost(sessionmaker, "fg", 3)


IDLE_IN_TRANSACTION = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND state = 'idle in transaction' AND pid <> pg_backend_pid()"
)


@pytest.mark.postgresql_only
async def test_a_compact_waiting_on_the_llm_holds_no_open_transaction(
    client: httpx.AsyncClient,
    database_url: str,
    gated_llm: tuple[FakeLLM, Gate, Gate],
) -> None:
    """Reads run without a transaction, so a slow LLM leaves none open (and no locks held)."""
    _llm, _background, inline = gated_llm
    await append(client, "wait", *(user(f"HOLD-INLINE {i}") for i in range(3)))
    compact = asyncio.create_task(
        client.post("/v1/sessions/wait/compact", json={"trigger": "manual", "keep_last_n": 0})
    )
    await wait_until(inline.entered)
    [(idle,)] = await admin_query(database_url, IDLE_IN_TRANSACTION)
    inline.release.set()
    answer = await compact
    assert answer.status_code == 200, answer.text
    assert idle == 0
