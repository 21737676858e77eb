"""A failover as managed PostgreSQL does it, under a chat load: the primary is lost
(`pg_ctl stop -m immediate`), the streaming standby promoted 2 s later, the service reaching
both through a multi-host `DATABASE_URL`.

The pair is the test's own (`tests/support/pg_replication.py`: `initdb`, `pg_basebackup -R`,
`pg_ctl promote` on free loopback ports), never the shared test server; the load is
`scripts.bench.load --failover`, as an operator rehearses it. With synchronous replication
and `target_session_attrs=primary` (the documented form) no client sees an error and nothing
acknowledged is lost. With asynchronous replication and `target_session_attrs=any`,
reconnects land on the standby before its promotion and its writes are refused as read-only:
they are retried as lost connections, and what the loss took is counted exactly (what the
read-back found missing), with verify clean. Without the server binaries the module is left
out (with CI=true it fails).
"""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.exc import DBAPIError

from api.db.faults import connection_lost, refused_as_read_only
from scripts.bench import load
from tests.conftest import IN_CI
from tests.support.pg_cluster import MISSING, server_bindir

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


def assert_timeline(printed: str, replication: str) -> None:
    timeline = re.search(
        rf"failover \({replication} replication\): primary lost .* standby promoted "
        r"([0-9.]+) s after the loss; first append answered ([0-9.]+) s after the loss; "
        r"(\d+) database retries\n    (\d+) requests spanned the failover",
        printed,
    )
    assert timeline is not None, printed
    assert float(timeline[1]) >= PROMOTE_AFTER_SECONDS
    # no append could land before the standby took writes
    assert float(timeline[2]) >= PROMOTE_AFTER_SECONDS - 0.5, printed
    assert int(timeline[3]) >= 1, "the service never waited for the database"
    assert int(timeline[4]) >= 1


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
    assert_timeline(printed, "asynchronous")
    read_back = re.search(
        r"read back: (\d+) acknowledged messages; (\d+) lost, 0 duplicated, 0 altered, "
        r"0 unexpected \(asynchronous replication",
        printed,
    )
    assert read_back is not None, printed
    assert int(read_back[1]) == BACKENDS * TURNS * 2
    checked = re.search(
        r"^Checked \d+ sessions \((\d+) messages.*: no violations\.$", printed, re.M
    )
    assert checked is not None, printed
    # the read-back's count of lost messages is exact: every other one is stored (and the
    # warm-up's message besides)
    assert int(checked[1]) == int(read_back[1]) - int(read_back[2]) + 1
    assert "errors: 0 HTTP, 0 summarization job failures, " in printed


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
