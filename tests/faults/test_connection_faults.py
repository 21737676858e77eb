"""Database connections that die: reads and appends answer normally, jobs drain, nothing is
lost or stored twice.

Connections are killed as an operator would (`pg_terminate_backend` from an admin
connection), cut around their COMMIT by a loopback proxy (`tests/support/pg_proxy.py`), and
cancelled while they wait on a lock. All of it is PostgreSQL's: SQLite has no connection to
lose.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from asyncpg.exceptions import AdminShutdownError, DataError, InternalClientError
from prometheus_client import REGISTRY
from sqlalchemy import func, literal, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import InvalidRequestError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api import store
from api.db import driver
from api.db.engine import ALIVE_BYPASS_SECONDS, create_engine
from api.db.faults import connection_lost, driver_error_means_connection_lost
from api.db.models import Message, Summary, SummaryJob, SummaryMessage
from api.main import create_app
from api.store import summaries as summary_store
from api.worker import CONNECTION_RETRY_SECONDS
from tests.conftest import QUIET, make_settings
from tests.helpers import (
    KILL_CONNECTIONS,
    WAIT_SECONDS,
    admin_query,
    append,
    assert_nothing_lost,
    count,
    kill_connections,
    llm_overrides,
    user,
    wait_for_summary,
)
from tests.support.fake_llm import FakeLLM
from tests.support.live_server import free_port
from tests.support.pg_proxy import CuttingProxy, cutting_proxy

pytestmark = pytest.mark.postgresql_only


@pytest.fixture
def settings_overrides(request: pytest.FixtureRequest, fake_llm: FakeLLM) -> dict[str, Any]:
    """The fake LLM summarizes (with quick retries); tests add their own settings."""
    return {**llm_overrides(fake_llm), **getattr(request, "param", {})}


def retries(kind: str) -> float:
    """`precis_database_retries_total{kind}` so far (the registry is the process's)."""
    return REGISTRY.get_sample_value("precis_database_retries_total", {"kind": kind}) or 0.0


def pause_after(
    original: Callable[..., Awaitable[Any]], reached: asyncio.Event, resume: asyncio.Event
) -> Callable[..., Awaitable[Any]]:
    """Wrap a store function: the first call signals `reached` and waits for `resume`."""
    first = True

    async def paused(*args: Any, **kwargs: Any) -> Any:
        nonlocal first
        result = await original(*args, **kwargs)
        if first:
            first = False
            reached.set()
            await resume.wait()
        return result

    return paused


def pause_before(
    original: Callable[..., Awaitable[Any]], reached: asyncio.Event, resume: asyncio.Event
) -> Callable[..., Awaitable[Any]]:
    first = True

    async def paused(*args: Any, **kwargs: Any) -> Any:
        nonlocal first
        if first:
            first = False
            reached.set()
            await resume.wait()
        return await original(*args, **kwargs)

    return paused


async def kill_when_reached(
    database_url: str, reached: asyncio.Event, resume: asyncio.Event
) -> int:
    await asyncio.wait_for(reached.wait(), WAIT_SECONDS)
    killed = await kill_connections(database_url)
    resume.set()
    return killed


async def message_seqs(sessionmaker: async_sessionmaker[AsyncSession], session: str) -> list[int]:
    async with sessionmaker() as db:
        session_key = (await store.get_session(db, "default", session)).id
        query = select(Message.seq).where(Message.session_id == session_key).order_by(Message.seq)
        return list(await db.scalars(query))


# --- what counts as a lost connection ---------------------------------------------------------


def test_connection_faults_are_told_from_statement_errors() -> None:
    busy = InternalClientError("cannot switch to state 12; another operation (2) is in progress")
    assert driver_error_means_connection_lost(busy)
    assert driver_error_means_connection_lost(AdminShutdownError("terminating connection"))
    assert driver_error_means_connection_lost(ConnectionResetError("reset by peer"))
    assert not driver_error_means_connection_lost(DataError("invalid input for query argument $1"))
    assert not driver_error_means_connection_lost(ValueError("no connection involved"))
    # the pool's checkout found a stale connection, then a fresh one lost at once
    assert connection_lost(InvalidRequestError("This connection is closed"))
    assert not connection_lost(InvalidRequestError("A transaction is already begun"))


# --- a database that does not come back ------------------------------------------------------

GIVE_UP_SECONDS = 0.3
"""A short DATABASE_RETRY_SECONDS, for a database that never answers."""


async def test_requests_answer_503_with_retry_after_once_the_retry_budget_is_spent(
    database_url: str,
) -> None:
    """No server listens: every try is refused; past the budget, reads and writes alike
    answer 503 in the project's error shape, after retrying."""
    nowhere = make_url(database_url).set(port=free_port()).render_as_string(hide_password=False)
    app = create_app(make_settings(nowhere, database_retry_seconds=GIVE_UP_SECONDS, **QUIET))
    before = {kind: retries(kind) for kind in ("read", "append", "write")}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://localhost"
        ) as http,
    ):
        answers = [
            await http.get("/v1/sessions/gone/history"),
            await http.post("/v1/sessions/gone/messages", json={"messages": [user("hi")]}),
            await http.post("/v1/sessions", json={"id": "gone"}),
        ]
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"] == "1"
        assert answer.json()["error"] == "ServiceUnavailable"
    assert all(retries(kind) > before[kind] for kind in before), "nothing was retried"


# --- reads ------------------------------------------------------------------------------------


async def test_killed_idle_connections_are_replaced_before_the_next_request(
    client: httpx.AsyncClient,
    database_url: str,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    await append(client, "idle", user("one"))
    assert await kill_connections(database_url) >= 1
    await asyncio.sleep(ALIVE_BYPASS_SECONDS)  # the pooled connections are idle from here on
    assert (await client.get("/readyz")).status_code == 200
    await append(client, "idle", user("two"))
    assert [m["seq"] for m in (await client.get("/v1/sessions/idle/messages")).json()["messages"]]
    await assert_nothing_lost(sessionmaker, "idle", 2)


async def test_an_idle_connection_is_checked_in_one_round_trip(database_url: str) -> None:
    """The liveness check of a connection idle past ALIVE_BYPASS_SECONDS sends one
    query and nothing else (no BEGIN and ROLLBACK around it)."""
    engine = create_engine(database_url, pool_size=1, max_overflow=0)
    try:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
            driver = (await connection.get_raw_connection()).driver_connection
        sent: list[str] = []
        assert driver is not None
        driver.add_query_logger(lambda record: sent.append(record.query))
        await asyncio.sleep(ALIVE_BYPASS_SECONDS)
        async with engine.connect() as connection:
            reused = (await connection.get_raw_connection()).driver_connection
            await asyncio.sleep(0)  # asyncpg calls its query loggers soon, not at once
            checked = list(sent)
            await connection.execute(text("SELECT 2"))
    finally:
        await engine.dispose()
    assert reused is driver
    assert checked == ["SELECT 1"]


SLOW_READ = select(func.pg_sleep(2), literal(7))
"""A read that is still running when a test cuts or cancels it (`until_sleeping`)."""

SLEEPING = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND wait_event = 'PgSleep'"
)


async def until_sleeping(database_url: str) -> None:
    """Wait until the slow read runs on the server: cut or cancelled earlier, it would not
    have started; much later, it would have ended."""
    await until_counted(database_url, SLEEPING, 1, "the slow read never reached the server")


ANSWER = select(literal(8))


@contextlib.asynccontextmanager
async def small_pool(database_url: str, overflow: int = 0) -> AsyncIterator[AsyncEngine]:
    """An engine whose pool holds one connection (and `overflow` more at most)."""
    engine = create_engine(database_url, pool_size=1, max_overflow=overflow)
    try:
        yield engine
    finally:
        await engine.dispose()


def assert_pool_sound(engine: AsyncEngine, caplog: pytest.LogCaptureFixture) -> None:
    """Every connection is back in the pool, and the pool logged no error handling them."""
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


async def test_a_driver_read_that_lost_its_connection_runs_again_and_leaves_the_pool_sound(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    before = retries("read")
    async with small_pool(database_url) as engine:
        running = asyncio.create_task(driver.fetch(engine, SLOW_READ, {}))
        await until_sleeping(database_url)
        assert await kill_connections(database_url) == 1
        rows = await running
        async with engine.connect() as connection:  # the pool's one connection is usable
            assert (await connection.execute(text("SELECT 1"))).scalar() == 1
        assert_pool_sound(engine, caplog)
    assert [row[1] for row in rows] == [7]
    assert retries("read") == before + 1


async def test_a_cancelled_driver_read_does_not_hand_its_busy_connection_out_again(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    before = retries("read")
    async with small_pool(database_url) as engine:
        running = asyncio.create_task(driver.fetch(engine, SLOW_READ, {}))
        await until_sleeping(database_url)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        rows = await driver.fetch(engine, ANSWER, {})
        assert_pool_sound(engine, caplog)
    assert [row[0] for row in rows] == [8]
    assert retries("read") == before  # the next read got a sound connection at once


async def test_driver_reads_beyond_the_pool_size_close_their_overflow_connections_cleanly(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The pool closes an overflow connection when it comes back: through SQLAlchemy's
    greenlet bridge, as for its own connections."""
    async with small_pool(database_url, overflow=2) as engine:
        answers = await asyncio.gather(*(driver.fetch(engine, SLOW_READ, {}) for _ in range(3)))
        assert_pool_sound(engine, caplog)
    assert [[row[1] for row in rows] for rows in answers] == [[7]] * 3


def kill_without_yielding(database_url: str) -> None:
    """Terminate the app's connections from another process, and give the server time to say
    goodbye to them, without letting the event loop run: the goodbye sits unread in the
    pooled connections' sockets, as it does when a checkout comes first."""
    url = make_url(database_url)
    host, user_name, database = url.host or "127.0.0.1", url.username or "postgres", url.database
    subprocess.run(
        ["psql", "-h", host, "-U", user_name, "-d", str(database), "-qAt", "-c", KILL_CONNECTIONS],
        check=True,
        capture_output=True,
    )
    time.sleep(0.1)


async def test_a_pooled_connection_the_server_said_goodbye_to_is_replaced_at_checkout(
    database_url: str,
) -> None:
    """The cause of "another operation is in progress": a connection killed while idle in the
    pool, checked out before asyncpg noticed. The checkout finds the goodbye unread in its
    socket and hands out a fresh connection instead."""
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))  # the pool now holds this connection
        kill_without_yielding(database_url)
        # engine.connect() checks out before the event loop runs again
        async with engine.connect() as connection:
            assert (await connection.execute(text("SELECT 1"))).scalar() == 1
    finally:
        await engine.dispose()


async def test_every_read_answers_normally_right_after_every_connection_is_killed(
    client: httpx.AsyncClient, database_url: str, sid: str
) -> None:
    await append(client, sid, *(user(f"question {i}") for i in range(4)))
    compacted = await client.post(f"/v1/sessions/{sid}/compact", json={"keep_last_n": 1})
    summary_id = compacted.json()["summary"]["id"]
    reads = [
        "/readyz",
        "/v1/sessions",
        f"/v1/sessions/{sid}",
        f"/v1/sessions/{sid}/messages",
        f"/v1/sessions/{sid}/history",
        f"/v1/sessions/{sid}/history?max_tokens=50",
        f"/v1/sessions/{sid}/summaries",
        f"/v1/summaries/{summary_id}",
    ] * 3
    await asyncio.gather(*(client.get(path) for path in reads))  # every pooled connection used
    assert await kill_connections(database_url) >= 2
    answers = await asyncio.gather(*(client.get(path) for path in reads))
    assert [answer.status_code for answer in answers] == [200] * len(reads), [
        answer.text for answer in answers if answer.status_code != 200
    ]


async def test_a_read_whose_connection_dies_between_its_statements_answers_normally(
    client: httpx.AsyncClient,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    sid: str,
) -> None:
    await append(client, sid, user("one"), user("two"))
    before = retries("read")
    reached, resume = asyncio.Event(), asyncio.Event()
    # the history load read its session row; the connection dies before its next statement
    monkeypatch.setattr(
        store, "session_for_history", pause_after(store.session_for_history, reached, resume)
    )
    request = asyncio.create_task(client.get(f"/v1/sessions/{sid}/history"))
    assert await kill_when_reached(database_url, reached, resume) >= 1
    answer = await request
    assert answer.status_code == 200, answer.text
    assert [m["content"] for m in answer.json()["messages"]] == ["one", "two"]
    # Each hot read checks out a connection of its own: the dead one is replaced at checkout
    # when the server's goodbye has arrived, else the read runs once more.
    assert retries("read") - before in (0, 1)


@contextlib.asynccontextmanager
async def session_row_locked(database_url: str, external_id: str) -> AsyncIterator[None]:
    """The session's row locked by a connection of its own until the block ends."""
    holder = create_engine(database_url)
    try:
        async with holder.connect() as locked:
            await locked.execute(
                text("SELECT 1 FROM sessions WHERE external_id = :id FOR UPDATE"),
                {"id": external_id},
            )
            yield
            await locked.rollback()
    finally:
        await holder.dispose()


# --- appends ----------------------------------------------------------------------------------


async def test_an_append_right_after_every_connection_is_killed_is_stored_once(
    client: httpx.AsyncClient,
    database_url: str,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    await asyncio.gather(*(append(client, f"hot-{i}", user("one")) for i in range(4)))
    assert await kill_connections(database_url) >= 1
    answers = await asyncio.gather(
        *(
            client.post(f"/v1/sessions/hot-{i}/messages", json={"messages": [user("two")]})
            for i in range(4)
        )
    )
    assert [answer.status_code for answer in answers] == [201] * 4, [a.text for a in answers]
    for i in range(4):
        await assert_nothing_lost(sessionmaker, f"hot-{i}", 2)


async def test_an_append_killed_while_its_statement_waits_on_the_session_is_stored_once(
    client: httpx.AsyncClient,
    database_url: str,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    """The append's statement is running (waiting on the session row) when its connection is
    killed: the server rolls it back, the service sees the process gone and nothing stored
    under its append id, and appends once more."""
    await append(client, "mid", user("kept"))
    before = retries("append")
    async with session_row_locked(database_url, "mid"):
        batch = {"messages": [user(f"batch {i}") for i in range(5)]}
        request = asyncio.create_task(client.post("/v1/sessions/mid/messages", json=batch))
        await until_waiting_on_a_lock(database_url)
        killed = await admin_query(
            database_url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        assert len(killed) == 1
    answer = await request
    assert answer.status_code == 201, answer.text
    assert [m["seq"] for m in answer.json()["messages"]] == [2, 3, 4, 5, 6]
    assert retries("append") == before + 1
    await assert_nothing_lost(sessionmaker, "mid", 6)


async def test_appends_of_one_client_id_that_waited_on_the_same_lock_store_it_once(
    client: httpx.AsyncClient,
    database_url: str,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    """Both statements looked for the client id before either held the session row; the
    second to get the row finds the first's message in the unique index, and runs again."""
    await append(client, "same-id", user("first"))
    async with session_row_locked(database_url, "same-id"):
        batch = {"messages": [user("retried", client_id="r-1")]}
        requests = [
            asyncio.create_task(client.post("/v1/sessions/same-id/messages", json=batch))
            for _ in range(2)
        ]
        await until_waiting_on_a_lock(database_url, statements=2)
    answers = await asyncio.gather(*requests)
    assert [answer.status_code for answer in answers] == [201, 201], [a.text for a in answers]
    assert {answer.json()["messages"][0]["id"] for answer in answers} == {
        answers[0].json()["messages"][0]["id"]
    }
    assert await message_seqs(sessionmaker, "same-id") == [1, 2]
    await assert_nothing_lost(sessionmaker, "same-id", 2)


@pytest.fixture
async def proxy(database_url: str) -> AsyncIterator[CuttingProxy]:
    async with cutting_proxy(database_url) as running:
        yield running


@pytest.fixture
async def proxied(
    engine: Any, database_url: str, proxy: CuttingProxy
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an app whose every connection goes through `proxy`."""
    app = create_app(make_settings(proxy.url(database_url), **QUIET))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://localhost"
        ) as http,
    ):
        yield http


@pytest.mark.parametrize("client_ids", [False, True], ids=["plain", "with-client-ids"])
async def test_an_append_whose_answer_is_lost_is_stored_once_and_answered(
    proxied: httpx.AsyncClient,
    proxy: CuttingProxy,
    sessionmaker: async_sessionmaker[AsyncSession],
    client_ids: bool,
) -> None:
    """The server runs the append's statement, which commits; the answer never reaches the
    service: it finds what its append id stored and answers with it, never appending twice."""
    await append(proxied, "lost-answer", user("kept"))
    before = retries("append")
    batch = [user(f"batch {i}", **({"client_id": f"c{i}"} if client_ids else {})) for i in range(3)]
    proxy.arm("cut_after", b"lost-answer")
    answer = await proxied.post("/v1/sessions/lost-answer/messages", json={"messages": batch})
    assert proxy.cuts == 1
    assert answer.status_code == 201, answer.text
    assert [m["seq"] for m in answer.json()["messages"]] == [2, 3, 4]
    assert [m["content"] for m in answer.json()["messages"]] == [m["content"] for m in batch]
    assert retries("append") == before  # resolved, not appended again
    assert await message_seqs(sessionmaker, "lost-answer") == [1, 2, 3, 4]
    await append(proxied, "lost-answer", user("next"))
    await assert_nothing_lost(sessionmaker, "lost-answer", 5)


async def test_an_append_with_a_repeated_client_id_whose_answer_is_lost_answers_the_stored_one(
    proxied: httpx.AsyncClient,
    proxy: CuttingProxy,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    await append(proxied, "lost-repeat", user("kept", client_id="k"))
    batch = [user("kept", client_id="k"), user("new", client_id="n")]
    proxy.arm("cut_after", b"lost-repeat")
    answer = await proxied.post("/v1/sessions/lost-repeat/messages", json={"messages": batch})
    assert proxy.cuts == 1
    assert answer.status_code == 201, answer.text
    assert [(m["seq"], m["content"]) for m in answer.json()["messages"]] == [
        (1, "kept"),
        (2, "new"),
    ]
    assert await message_seqs(sessionmaker, "lost-repeat") == [1, 2]


async def test_an_append_whose_statement_never_arrives_is_stored_once(
    proxied: httpx.AsyncClient,
    proxy: CuttingProxy,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    """The statement is lost on the way: nothing ran, the service appends once more."""
    await append(proxied, "lost-statement", user("kept"))
    before = retries("append")
    proxy.arm("cut_before", b"lost-statement")
    batch = {"messages": [user(f"batch {i}") for i in range(3)]}
    answer = await proxied.post("/v1/sessions/lost-statement/messages", json=batch)
    assert proxy.cuts == 1
    assert answer.status_code == 201, answer.text
    assert [m["seq"] for m in answer.json()["messages"]] == [2, 3, 4]
    assert retries("append") == before + 1
    await assert_nothing_lost(sessionmaker, "lost-statement", 4)


WAITING_ON_A_LOCK = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND wait_event_type = 'Lock'"
)


async def until_waiting_on_a_lock(database_url: str, statements: int = 1) -> None:
    await until_counted(
        database_url, WAITING_ON_A_LOCK, statements, "no statement waited on the lock"
    )


async def until_counted(database_url: str, count_query: str, at_least: int, failure: str) -> None:
    """Poll `count_query` (one count, as the admin sees the test database) until it reaches
    `at_least`; `failure` if it does not within WAIT_SECONDS."""
    deadline = time.monotonic() + WAIT_SECONDS
    while (await admin_query(database_url, count_query))[0][0] < at_least:
        assert time.monotonic() < deadline, failure
        await asyncio.sleep(0.01)


async def test_an_append_cancelled_while_it_waits_on_a_lock_leaves_no_connection_busy(
    client: httpx.AsyncClient,
    database_url: str,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    """A request cancelled mid-statement (its client went away) must not hand a connection
    still running that statement to the next request."""
    await append(client, "locked", user("one"))
    async with session_row_locked(database_url, "locked"):
        cancelled = asyncio.create_task(
            client.post("/v1/sessions/locked/messages", json={"messages": [user("never")]})
        )
        await until_waiting_on_a_lock(database_url)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
    more = {"messages": [user("more")]}
    answers = await asyncio.gather(
        *(client.post("/v1/sessions/locked/messages", json=more) for _ in range(8)),
        *(client.get("/v1/sessions/locked/history") for _ in range(8)),
    )
    assert {answer.status_code for answer in answers} <= {200, 201}, [a.text for a in answers]
    await assert_nothing_lost(sessionmaker, "locked", 9)


def kill_before_calls(
    original: Callable[..., Awaitable[Any]], database_url: str, calls: int
) -> Callable[..., Awaitable[Any]]:
    """Wrap a store function: its first `calls` calls find their connection killed."""
    seen = 0

    async def killed_first(*args: Any, **kwargs: Any) -> Any:
        nonlocal seen
        seen += 1
        if seen <= calls:
            assert await kill_connections(database_url) >= 1
        return await original(*args, **kwargs)

    return killed_first


HISTORY_BUDGET = 60
"""A `max_tokens` the test sessions below exceed, so a history load summarizes inline."""


async def test_an_inline_summarization_losing_its_connection_once_runs_once_more(
    client: httpx.AsyncClient,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    sid: str,
) -> None:
    await append(client, sid, *(user(f"question {i} " + "word " * 10) for i in range(6)))
    before = retries("summarization")
    monkeypatch.setattr(
        summary_store,
        "_link_messages",
        kill_before_calls(summary_store._link_messages, database_url, 1),
    )
    answer = await client.get(f"/v1/sessions/{sid}/history?max_tokens={HISTORY_BUDGET}")
    assert answer.status_code == 200, answer.text
    history = answer.json()
    assert [s["first_seq"] for s in history["summaries"]] == [1]
    assert history["messages"][-1]["seq"] == 6  # the pending question stays verbatim
    assert history["token_estimate"] <= HISTORY_BUDGET
    assert retries("summarization") == before + 1


INLINE_DEADLINE_SECONDS = 3.0
"""A short SUMMARY_INLINE_DEADLINE_SECONDS, well within the retry budget."""


@pytest.mark.parametrize(
    "settings_overrides",
    [{"summary_inline_deadline_seconds": INLINE_DEADLINE_SECONDS}],
    indirect=True,
)
async def test_an_inline_summarization_losing_its_connection_answers_truncated_at_its_deadline(
    client: httpx.AsyncClient,
    database_url: str,
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
    sid: str,
) -> None:
    """An inline summarization that lost its connection runs again within the retry budget, but
    never past the inline deadline: the chat turn gets the truncated context and a job is left
    behind."""
    await append(client, sid, *(user(f"question {i} " + "word " * 10) for i in range(6)))
    before = retries("summarization")
    monkeypatch.setattr(
        summary_store,
        "_link_messages",
        kill_before_calls(summary_store._link_messages, database_url, calls=1_000),
    )
    answer = await client.get(f"/v1/sessions/{sid}/history?max_tokens={HISTORY_BUDGET}")
    assert answer.status_code == 200, answer.text
    history = answer.json()
    assert history["summaries"] == []
    assert history["token_estimate"] <= HISTORY_BUDGET
    assert history["summarization_pending"] is True
    assert retries("summarization") - before >= 2  # run again more than once
    assert await count(sessionmaker, SummaryJob) == 1  # the summary is left to a job
    await assert_nothing_lost(sessionmaker, sid, 6)


# --- summaries and background jobs ------------------------------------------------------------


async def test_a_connection_killed_while_a_summary_is_written_leaves_none_of_it(
    client: httpx.AsyncClient,
    database_url: str,
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await append(client, "write", *(user(f"question {i}") for i in range(6)))
    reached, resume = asyncio.Event(), asyncio.Event()
    # The summary row is inserted; its links are not, when the connection dies.
    monkeypatch.setattr(
        summary_store, "_link_messages", pause_before(summary_store._link_messages, reached, resume)
    )
    request = asyncio.create_task(
        client.post("/v1/sessions/write/compact", json={"trigger": "manual", "keep_last_n": 0})
    )
    assert await kill_when_reached(database_url, reached, resume) >= 1
    answer = await request
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"] == "1"
    assert await count(sessionmaker, Summary) == 0
    assert await count(sessionmaker, SummaryMessage) == 0
    retried = await client.post(
        "/v1/sessions/write/compact", json={"trigger": "manual", "keep_last_n": 0}
    )
    assert retried.status_code == 200, retried.text
    assert retried.json()["summary"]["message_count"] == 6
    await assert_nothing_lost(sessionmaker, "write", 6)


@pytest.mark.parametrize(
    "settings_overrides",
    [{"summary_message_limit": 6, "summary_workers": 1}],
    indirect=True,
)
async def test_a_background_job_that_lost_its_connection_is_retried_promptly(
    client: httpx.AsyncClient,
    database_url: str,
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Retried after CONNECTION_RETRY_SECONDS, not after a failure's backoff; logged as one
    WARNING line, not counted as a failed job."""
    caplog.set_level(logging.WARNING, logger="precis")
    failures = REGISTRY.get_sample_value("precis_summary_job_failures_total") or 0.0
    reached, resume = asyncio.Event(), asyncio.Event()
    monkeypatch.setattr(
        summary_store, "_link_messages", pause_before(summary_store._link_messages, reached, resume)
    )
    await append(client, "job", *(user(f"question {i}") for i in range(6)))
    assert await kill_when_reached(database_url, reached, resume) >= 1
    cut_at = time.monotonic()
    history = await wait_for_summary(client, "job")
    assert time.monotonic() - cut_at < CONNECTION_RETRY_SECONDS + 5
    assert (history["summaries"][0]["first_seq"], history["summaries"][0]["last_seq"]) == (1, 4)
    await assert_nothing_lost(sessionmaker, "job", 6)
    assert await count(sessionmaker, SummaryJob) == 0
    assert REGISTRY.get_sample_value("precis_summary_job_failures_total") == failures
    worker_lines = [r for r in caplog.records if r.name == "precis.worker"]
    assert any("lost its database connection" in r.getMessage() for r in worker_lines)
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert all(r.exc_info is None for r in worker_lines)


@pytest.mark.parametrize(
    "settings_overrides",
    [{"summary_message_limit": 8, "summary_workers": 1}],
    indirect=True,
)
@pytest.mark.parametrize("window", [1500, 16000])
async def test_every_fact_stays_in_the_context_while_connections_keep_dying(
    client: httpx.AsyncClient,
    database_url: str,
    fake_llm: FakeLLM,
    sessionmaker: async_sessionmaker[AsyncSession],
    window: int,
) -> None:
    """The perfect-recall model; background jobs, inline summarizations and roll-ups, with every
    connection terminated before each request: once idle, the context holds every fact
    planted."""
    fake_llm.mode = "marker_echo"
    fake_llm.context_window = window
    session = f"chaos-recall-{window}"
    settings = {"model_context_tokens": window, "target_tokens": 800, "summary_limit": 2}
    created = await client.post("/v1/sessions", json={"id": session, "settings": settings})
    assert created.status_code == 201, created.text
    planted: set[str] = set()
    terminated = 0
    for batch in range(8):
        messages = []
        for index in range(6):
            marker = f"MARKER-c{batch}i{index}"
            planted.add(marker)
            messages.append(user(f"{marker} " + "some detail " * 25))
            messages.append({"role": "assistant", "content": "ok " * 20})
        # every request starts on connections just terminated, and so do the background jobs
        # that the previous requests left running
        terminated += await kill_connections(database_url)
        await append(client, session, *messages)
        terminated += await kill_connections(database_url)
        loaded = await client.get(f"/v1/sessions/{session}/history?max_tokens=1200")
        assert loaded.status_code == 200, loaded.text
    assert terminated >= 8, "the pool's connections were not terminated"
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while True:
        history = (await client.get(f"/v1/sessions/{session}/history")).json()
        if not history["summarization_pending"] or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.05)
    assert history["summaries"], "nothing was summarized"
    assert planted <= set(re.findall(r"MARKER-c\d+i\d+", str(history["context"])))
    await assert_nothing_lost(sessionmaker, session, 96)
