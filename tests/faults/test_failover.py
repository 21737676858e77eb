"""A failover as managed PostgreSQL does it, under a chat load: the primary is lost
(`pg_ctl stop -m immediate`), the streaming standby promoted 2 s later, the service reaching
both through a multi-host `DATABASE_URL`.

The pair is the test's own (`tests/support/pg_replication.py`: `initdb`, `pg_basebackup -R`,
`pg_ctl promote` on free loopback ports), never the shared test server; the load is
`scripts.bench.load --failover`, as an operator rehearses it. With synchronous replication
and `target_session_attrs=primary` (the documented form) no client sees an error and nothing
acknowledged is lost. With asynchronous replication (the standby cut off
from the primary's WAL a second before the loss, as a lagging standby is) and
`target_session_attrs=any`, reconnects land on the standby before its promotion and its writes
are refused as read-only: they are retried as lost connections, and what the loss took is
counted exactly (what the read-back found missing), with verify clean. Without the server
binaries the module is left out (with CI=true it fails).
"""

from __future__ import annotations

import asyncio
import re
import secrets
from pathlib import Path

import asyncpg
import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from api.append import postgresql, use_case
from api.db.engine import create_engine
from api.db.faults import connection_lost, refused_as_read_only
from api.db.transactions import RetryBudget, RetryPolicy
from api.main import create_app
from api.store.rows import NewMessage
from api.summary_plans import BacklogCounting
from scripts.bench import load
from tests.conftest import IN_CI, make_settings
from tests.support.pg_cluster import MISSING, server_bindir
from tests.support.pg_replication import query, replicated_pair

BINDIR = server_bindir()
if BINDIR is None and not IN_CI:
    pytest.skip(
        f"failover tests not run: {MISSING}; then run "
        "`.venv/bin/pytest tests/faults/test_failover.py`",
        allow_module_level=True,
    )

BACKENDS = 8
TURNS = 30
"""Enough turns that the backends are still playing when the primary is lost."""

PROMOTE_AFTER_SECONDS = 2


@pytest.fixture
def server_binaries() -> Path:
    """The PostgreSQL server binaries; with CI=true their absence fails the test."""
    if BINDIR is None:
        pytest.fail(f"CI=true but {MISSING}")
    return BINDIR


def run_failover(replication: str, target: str, capfd: pytest.CaptureFixture[str]) -> str:
    status = load.main(
        [
            *("--database", "postgresql", "--failover", "--replication", replication),
            *("--target-session-attrs", target, "--failover-after", "1.5"),
            *("--promote-after", str(PROMOTE_AFTER_SECONDS)),
            *("--backends", str(BACKENDS), "--turns", str(TURNS), "--duration", "40"),
            *("--message-limit", "4", "--keep-last-n", "1"),
        ]
    )
    printed = capfd.readouterr().out
    # Passing means: 0 HTTP errors, background work drained with 0 failed jobs, no traceback
    # or ERROR line in the server's log, verify clean, and every session read back as
    # acknowledged (under asynchronous replication, but for what the count says was lost).
    assert status == 0, printed
    return printed


def assert_timeline(printed: str, replication: str) -> int:
    """Check the failover's timeline; the requests or jobs that found a write refused as
    read-only."""
    timeline = re.search(
        rf"failover \({replication} replication[^)]*\): primary lost .* standby promoted "
        r"([0-9.]+) s after the loss; first append answered ([0-9.]+) s after the loss; "
        r"(\d+) database retries; (\d+) requests or jobs first retried after a write refused "
        r"as read-only\n    (\d+) requests spanned the failover",
        printed,
    )
    assert timeline is not None, printed
    assert float(timeline[1]) >= PROMOTE_AFTER_SECONDS
    # no append could land before the standby took writes
    assert float(timeline[2]) >= PROMOTE_AFTER_SECONDS - 0.5, printed
    assert int(timeline[3]) >= 1, "the service never waited for the database"
    assert int(timeline[5]) >= 1
    return int(timeline[4])


@pytest.mark.postgresql_only
def test_synchronous_failover_loses_nothing_acknowledged_and_reaches_no_client(
    server_binaries: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    printed = run_failover("sync", "primary", capfd)
    assert_timeline(printed, "synchronous")
    acknowledged = BACKENDS * TURNS * 2  # a user and an assistant message per turn
    assert (
        f"read back: {acknowledged} acknowledged messages; 0 lost, 0 duplicated, 0 altered, "
        "0 unexpected\n"
    ) in printed
    assert "errors: 0 HTTP, 0 summarization job failures, " in printed
    assert re.search(r"^Checked \d+ sessions .*: no violations\.$", printed, re.M), printed


@pytest.mark.postgresql_only
def test_asynchronous_failover_through_the_standby_counts_what_it_lost_and_verifies_clean(
    server_binaries: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    printed = run_failover("async", "any", capfd)
    # the reconnects reached the standby before its promotion, which refused their writes
    assert assert_timeline(printed, "asynchronous") >= 1, printed
    read_back = re.search(
        r"read back: (\d+) acknowledged messages; (\d+) lost, 0 duplicated, 0 altered, "
        r"0 unexpected \(asynchronous replication",
        printed,
    )
    assert read_back is not None, printed
    assert int(read_back[1]) == BACKENDS * TURNS * 2
    # the standby was cut off a second before the loss: what was acknowledged since is lost
    assert int(read_back[2]) >= 1, printed
    checked = re.search(
        r"^Checked \d+ sessions \((\d+) messages.*: no violations\.$", printed, re.M
    )
    assert checked is not None, printed
    # the read-back's count of lost messages is exact: every other one is stored (and the
    # warm-up's message besides)
    assert int(checked[1]) == int(read_back[1]) - int(read_back[2]) + 1
    # a client saw an error only for a session created in the lost moments, gone whole
    errors = re.search(
        r"errors: (\d+) HTTP \((\d+) of them 404, the session lost whole\), "
        r"0 summarization job failures, ",
        printed,
    )
    assert errors is not None and errors[1] == errors[2], printed


def wrapped(driver_error: Exception) -> DBAPIError:
    """`driver_error` as SQLAlchemy raises it: wrapped, raised from it."""
    try:
        raise DBAPIError("INSERT ...", None, driver_error) from driver_error
    except DBAPIError as exc:
        return exc


def read_only_refusal() -> DBAPIError:
    return wrapped(
        asyncpg.exceptions.ReadOnlySQLTransactionError(
            "cannot execute INSERT in a read-only transaction"
        )
    )


def test_a_write_refused_as_read_only_counts_as_a_lost_connection() -> None:
    refused = read_only_refusal()
    assert connection_lost(refused)
    assert refused_as_read_only(refused)
    assert refused.orig is not None and connection_lost(refused.orig)  # the fast path raises it


def test_other_statement_errors_are_not_lost_connections() -> None:
    unique = wrapped(asyncpg.exceptions.UniqueViolationError("duplicate key value"))
    assert not connection_lost(unique)
    assert not refused_as_read_only(unique)


async def stored_count(url: str) -> int:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            return int(await connection.scalar(text("SELECT count(*) FROM messages")) or 0)
    finally:
        await engine.dispose()


@pytest.mark.postgresql_only
def test_whether_an_append_landed_is_never_asked_of_a_standby_in_recovery(
    server_binaries: Path,
) -> None:
    """An acknowledged append whose answer was lost, asked about through a URL that reaches
    the standby first: the standby has the commit flushed but not replayed (its replay paused
    here, to hold that moment), so its answer would be "not landed" and the batch stored
    twice. The question waits for the promoted primary instead, which says it landed."""
    batch = [NewMessage("user", "no client id", None, None, None, None, None, None, 3)]
    append_id = secrets.randbits(63)
    with replicated_pair(synchronous=True) as pair:
        url = load.create_postgres_database(pair.primary.admin_url)
        load.migrate(url)
        pair.wait_until_replayed()
        query(pair.standby, "SELECT pg_wal_replay_pause()")

        async def acknowledged() -> None:
            engine = create_engine(url)
            try:
                await postgresql.append(
                    engine, "t", "s", batch, append_id, BacklogCounting(False, 0)
                )
            finally:
                await engine.dispose()

        asyncio.run(acknowledged())
        pair.lose_primary()
        through_the_standby = pair.failover_url(make_url(url).database or "", "any")

        async def ask_then_fail_over() -> object:
            engine = create_engine(through_the_standby)
            budget = RetryBudget(RetryPolicy(budget_seconds=30))
            try:
                asking = asyncio.create_task(
                    use_case._landed(engine, "t", "s", batch, append_id, 2**31 - 1, budget)
                )
                await asyncio.sleep(1.0)
                assert not asking.done(), "answered by the standby in recovery"
                await asyncio.to_thread(query, pair.standby, "SELECT pg_wal_replay_resume()")
                await asyncio.to_thread(pair.promote)
                return await asking
            finally:
                await engine.dispose()

        outcome = asyncio.run(ask_then_fail_over())
        assert outcome is not None, "the acknowledged append was taken for one that never landed"
        assert asyncio.run(stored_count(through_the_standby)) == 1


@pytest.mark.postgresql_only
def test_readiness_fails_on_a_standby_in_recovery_and_passes_once_it_is_promoted(
    server_binaries: Path,
) -> None:
    """A replica of the service pointed at the standby (one host, as a stale DNS name would):
    not ready while the standby takes no writes, ready once it is promoted."""
    with replicated_pair(synchronous=False) as pair:
        url = load.create_postgres_database(pair.primary.admin_url)
        load.migrate(url)
        pair.wait_until_replayed()
        on_the_standby = make_url(url).set(port=pair.standby.port)
        standby_url = on_the_standby.render_as_string(hide_password=False)
        app = create_app(make_settings(standby_url, summary_workers=0))

        async def ready() -> httpx.Response:
            async with (
                app.router.lifespan_context(app),
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app), base_url="http://localhost"
                ) as client,
            ):
                return await client.get("/readyz")

        refused = asyncio.run(ready())
        assert refused.status_code == 503
        assert "standby in recovery" in refused.json()["detail"]
        pair.lose_primary()
        pair.promote()
        assert asyncio.run(ready()).status_code == 200
