"""The retention sweep (`api.retention`, its statements in `api.store.retention`): it deletes
exactly the expired sessions, with their messages, summaries, links, jobs and leases, in short
transactions that never stop appends to other sessions; it counts what it deleted, and sweeps
of several replicas at once delete each session once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import REGISTRY
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api import retention, store
from api.db.models import (
    BackgroundResponse,
    Message,
    Session,
    SummarizationLease,
    Summary,
    SummaryJob,
    SummaryMessage,
)
from api.main import create_app
from api.retention import Swept
from api.store import background
from api.store.retention import Expiry
from tests.conftest import QUIET, make_settings
from tests.helpers import (
    append,
    assert_nothing_lost,
    assistant,
    run_verify,
    save_summaries,
    summary_draft,
    user,
)

IDLE_DAYS = 3.0
OWNED = (Message, Summary, SummaryMessage, SummaryJob, SummarizationLease)
"""What a session holds besides its row: all of it goes with it."""


@asynccontextmanager
async def running_app(database_url: str, **overrides: Any) -> AsyncIterator[FastAPI]:
    """An app on the test database (its sweeper not started: the tests run its sweeps)."""
    app = create_app(make_settings(database_url, **{**QUIET, **overrides}))
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def app(engine: AsyncEngine, database_url: str) -> AsyncIterator[FastAPI]:
    """The app, with idle expiry after IDLE_DAYS; `engine` empties the tables afterwards."""
    async with running_app(database_url, session_idle_ttl_days=IDLE_DAYS) as app:
        yield app


@pytest.fixture
async def http(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client


def sweep_of(app: FastAPI) -> Callable[[], Any]:
    sweeper: retention.Sweeper = app.state.sweeper
    return sweeper.sweep


def deleted_total(kind: str) -> float:
    return REGISTRY.get_sample_value("precis_expired_deleted_total", {"kind": kind}) or 0.0


async def set_session(
    sessionmaker: async_sessionmaker[AsyncSession], sid: str, **values: Any
) -> None:
    async with sessionmaker() as db:
        await db.execute(update(Session).where(Session.external_id == sid).values(**values))
        await db.commit()


async def expired_by_date(sessionmaker: async_sessionmaker[AsyncSession], sid: str) -> None:
    await set_session(sessionmaker, sid, expires_at=datetime.now(UTC) - timedelta(seconds=1))


async def idle(sessionmaker: async_sessionmaker[AsyncSession], sid: str) -> None:
    since = datetime.now(UTC) - timedelta(days=IDLE_DAYS, hours=1)
    await set_session(sessionmaker, sid, updated_at=since)


async def session_ids(sessionmaker: async_sessionmaker[AsyncSession]) -> set[str]:
    async with sessionmaker() as db:
        return set(await db.scalars(select(Session.external_id)))


async def rows_of(sessionmaker: async_sessionmaker[AsyncSession], model: type[Any]) -> int:
    async with sessionmaker() as db:
        return int(await db.scalar(select(func.count()).select_from(model)) or 0)


async def full_session(
    http: httpx.AsyncClient, sessionmaker: async_sessionmaker[AsyncSession], sid: str, n: int
) -> None:
    """A session of `n` messages (n >= 4) with a roll-up over two summaries, a pending job and
    a summarization lease: a row in every table a session owns."""
    for i in range(0, n, 2):
        await append(http, sid, user(f"{sid} question {i}"), assistant(f"{sid} answer {i}"))
    async with sessionmaker() as db:
        [first, second] = await save_summaries(db, sid, summary_draft(1, 2), summary_draft(3, 4))
        await save_summaries(db, sid, summary_draft(1, 4, absorbs=(first, second)))
        session = await store.get_session(db, "default", sid)
        await store.enqueue_job(db, session.id, "proactive", "message_limit")
        db.add(
            SummarizationLease(
                session_id=session.id, token=1, expires_at=datetime.now(UTC) + timedelta(hours=1)
            )
        )
        await db.commit()


async def test_the_sweep_deletes_exactly_the_expired_sessions_and_all_of_theirs(
    app: FastAPI, http: httpx.AsyncClient, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    for sid in ("dated", "idle", "later", "kept"):
        await full_session(http, sessionmaker, sid, 6)
    await expired_by_date(sessionmaker, "dated")
    await idle(sessionmaker, "idle")
    await set_session(sessionmaker, "later", expires_at=datetime.now(UTC) + timedelta(hours=1))
    owned_before = {model: await rows_of(sessionmaker, model) for model in OWNED}

    swept = await sweep_of(app)()

    assert swept == Swept(sessions=2, messages=12, summaries=6)
    assert await session_ids(sessionmaker) == {"later", "kept"}
    owned_after = {model: await rows_of(sessionmaker, model) for model in OWNED}
    assert owned_after == {model: count // 2 for model, count in owned_before.items()}
    for sid in ("later", "kept"):
        await assert_nothing_lost(sessionmaker, sid, 6)
    assert await sweep_of(app)() == Swept()  # nothing left to do
    engine = sessionmaker.kw["bind"]
    code, out, err = await run_verify(engine.url.render_as_string(hide_password=False))
    assert code == 0, out + err


async def test_without_an_idle_ttl_the_sweep_leaves_idle_sessions(
    engine: AsyncEngine, database_url: str, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    async with running_app(database_url) as app:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            await append(http, "old", user("one"))
            await append(http, "dated", user("one"))
        await set_session(sessionmaker, "old", updated_at=datetime(2000, 1, 1, tzinfo=UTC))
        await expired_by_date(sessionmaker, "dated")
        assert await sweep_of(app)() == Swept(sessions=1, messages=1)
    assert await session_ids(sessionmaker) == {"old"}


async def test_a_large_session_goes_in_several_short_transactions(
    app: FastAPI,
    http: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(retention, "MESSAGES_PER_TRANSACTION", 7)
    await full_session(http, sessionmaker, "large", 30)
    await idle(sessionmaker, "large")
    windows: list[tuple[int, int]] = []
    delete_messages = store.retention.delete_messages

    async def recorded(db: AsyncSession, key: int, after_seq: int, upto_seq: int) -> int:
        windows.append((after_seq, upto_seq))
        return await delete_messages(db, key, after_seq, upto_seq)

    monkeypatch.setattr(store.retention, "delete_messages", recorded)
    swept = await sweep_of(app)()
    assert swept == Swept(sessions=1, messages=30, summaries=3)
    assert windows == [(0, 7), (7, 14), (14, 21), (21, 28), (28, 30)]
    assert await session_ids(sessionmaker) == set()
    assert await rows_of(sessionmaker, Message) == 0


async def test_a_session_half_deleted_stays_expired_when_the_idle_ttl_is_raised(
    app: FastAPI, http: httpx.AsyncClient, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    await full_session(http, sessionmaker, "large", 8)
    await idle(sessionmaker, "large")
    async with sessionmaker() as db:
        key = (await db.scalar(select(Session.id).where(Session.external_id == "large"))) or 0
    expiry = Expiry.at(datetime.now(UTC), IDLE_DAYS)
    database = app.state.database
    async with database.transaction() as db:  # the first of several transactions
        assert await store.retention.lock_expired(db, key, expiry) == 8
        await store.retention.keep_expired(db, key, expiry.now)
        assert await store.retention.delete_messages(db, key, 0, 4) == 4
    raised = Expiry.at(datetime.now(UTC), None)  # idle expiry switched off meanwhile
    async with database.transaction() as db:
        assert await store.retention.lock_expired(db, key, raised) == 8
    assert (await http.get("/v1/sessions/large")).status_code == 404


async def test_appends_to_other_sessions_go_on_while_the_sweep_deletes(
    app: FastAPI, http: httpx.AsyncClient, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    expired = [f"gone-{i}" for i in range(12)]
    for sid in expired:
        await append(http, sid, *(user(f"{sid} {i}") for i in range(40)))
        await expired_by_date(sessionmaker, sid)
    live = [f"live-{i}" for i in range(4)]
    appends_each = 25

    async def appending(sid: str) -> list[int]:
        statuses = []
        for i in range(appends_each):
            answer = await http.post(
                f"/v1/sessions/{sid}/messages", json={"messages": [user(f"{sid} {i}")]}
            )
            statuses.append(answer.status_code)
        return statuses

    sweeping = asyncio.create_task(sweep_of(app)())
    statuses = await asyncio.gather(*(appending(sid) for sid in live))
    swept = await sweeping

    assert all(status == 201 for lane in statuses for status in lane), statuses
    assert swept == Swept(sessions=len(expired), messages=40 * len(expired))
    assert await session_ids(sessionmaker) == set(live)
    for sid in live:
        await assert_nothing_lost(sessionmaker, sid, appends_each)


async def test_the_metrics_count_what_the_sweep_deleted(
    app: FastAPI, http: httpx.AsyncClient, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    await full_session(http, sessionmaker, "counted", 4)
    await idle(sessionmaker, "counted")
    before = {kind: deleted_total(kind) for kind in ("sessions", "messages", "summaries")}
    await sweep_of(app)()
    after = {kind: deleted_total(kind) for kind in before}
    assert {kind: after[kind] - before[kind] for kind in before} == {
        "sessions": 1,
        "messages": 4,
        "summaries": 3,
    }
    exposition = (await http.get("/metrics")).text
    assert 'precis_expired_deleted_total{kind="sessions"}' in exposition


async def test_two_sweeps_at_once_delete_each_session_once(
    app: FastAPI,
    http: httpx.AsyncClient,
    database_url: str,
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(retention, "MESSAGES_PER_TRANSACTION", 5)
    sessions = [f"gone-{i}" for i in range(10)]
    for sid in sessions:
        await full_session(http, sessionmaker, sid, 12)
        await idle(sessionmaker, sid)
    before = deleted_total("sessions"), deleted_total("messages")
    async with running_app(database_url, session_idle_ttl_days=IDLE_DAYS) as replica:
        first, second = await asyncio.gather(sweep_of(app)(), sweep_of(replica)())
    assert first.sessions + second.sessions == len(sessions)
    assert first.messages + second.messages == 12 * len(sessions)
    assert first.summaries + second.summaries == 3 * len(sessions)
    after = deleted_total("sessions"), deleted_total("messages")
    assert (after[0] - before[0], after[1] - before[1]) == (len(sessions), 12 * len(sessions))
    assert await session_ids(sessionmaker) == set()


@pytest.mark.postgresql_only
async def test_a_session_another_sweep_holds_is_skipped_without_waiting(
    app: FastAPI, http: httpx.AsyncClient, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    for sid in ("held", "free"):
        await append(http, sid, user("one"), assistant("two"))
        await expired_by_date(sessionmaker, sid)
    async with sessionmaker() as other_sweep:
        await other_sweep.execute(
            select(Session.id).where(Session.external_id == "held").with_for_update()
        )
        swept = await asyncio.wait_for(sweep_of(app)(), timeout=10)
        assert swept == Swept(sessions=1, messages=2)
        assert await session_ids(sessionmaker) == {"held"}
        await other_sweep.rollback()
    assert await sweep_of(app)() == Swept(sessions=1, messages=2)
    assert await session_ids(sessionmaker) == set()


async def test_background_responses_that_ended_long_ago_are_swept_and_no_other(
    app: FastAPI, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    database = app.state.database
    long_ago = datetime.now(UTC) - timedelta(days=IDLE_DAYS, hours=1)
    rows = {
        "resp_old_failed": ("failed", long_ago),
        "resp_old_cancelled": ("cancelled", long_ago),
        "resp_new_failed": ("failed", datetime.now(UTC)),
        "resp_old_queued": ("queued", long_ago),
    }
    for response_id, (status, updated_at) in rows.items():
        await background.queue_response(database, "default", response_id, "{}", "{}")
        async with database.transaction() as db:
            await db.execute(
                update(BackgroundResponse)
                .where(BackgroundResponse.id == response_id)
                .values(status=status, updated_at=updated_at)
            )
    before = deleted_total("background_responses")
    swept = await sweep_of(app)()
    assert swept.background_responses == 2
    assert deleted_total("background_responses") - before == 2
    async with sessionmaker() as db:
        left = set(await db.scalars(select(BackgroundResponse.id)))
    assert left == {"resp_new_failed", "resp_old_queued"}
