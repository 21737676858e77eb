"""PostgreSQL restarted under a chat load: no client sees an error, nothing is lost or stored
twice, the background work resumes by itself.

A real restart of a cluster of the test's own (`tests/support/pg_cluster.py`: `initdb` in a
temporary folder, a free loopback port), never of the shared test server: the load test
(`scripts.bench.load --restart`) plays chat backends against `python -m api`, with
summarization through the fake LLM, stops the cluster with `pg_ctl stop -m fast` and starts
it 3 s later. Without the server binaries the test is left out (with CI=true it fails).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scripts.bench import load
from tests.conftest import IN_CI
from tests.support.pg_cluster import MISSING, server_bindir

pytestmark = pytest.mark.postgresql_only

BINDIR = server_bindir()
if BINDIR is None and not IN_CI:
    pytest.skip(
        f"database restart test not run: {MISSING}; then run "
        "`.venv/bin/pytest tests/faults/test_database_restart.py`",
        allow_module_level=True,
    )

BACKENDS = 8
TURNS = 30
"""Enough turns that the backends are still playing when the database goes away."""

DOWNTIME_SECONDS = 3


@pytest.fixture
def server_binaries() -> Path:
    """The PostgreSQL server binaries; with CI=true their absence fails the test."""
    if BINDIR is None:
        pytest.fail(f"CI=true but {MISSING}")
    return BINDIR


def test_a_database_restart_under_load_reaches_no_client_and_loses_nothing(
    server_binaries: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    status = load.main(
        [
            "--database",
            "postgresql",
            "--restart",
            "--restart-after",
            "1",
            "--restart-downtime",
            str(DOWNTIME_SECONDS),
            "--backends",
            str(BACKENDS),
            "--turns",
            str(TURNS),
            "--duration",
            "40",
            "--message-limit",
            "4",
            "--keep-last-n",
            "1",
        ]
    )
    printed = capfd.readouterr().out
    # Passing means: 0 HTTP errors, every session read back as acknowledged, background work
    # drained with 0 failed jobs, no traceback or ERROR line in the server's log, verify clean.
    assert status == 0, printed
    restart = re.search(
        r"restart: PostgreSQL stopped .* again ([0-9.]+) s later; (\d+) database retries\n"
        r"    (\d+) requests spanned the downtime",
        printed,
    )
    assert restart is not None, printed
    assert float(restart[1]) >= DOWNTIME_SECONDS
    assert int(restart[2]) >= 1, "the service never waited for the database"
    assert int(restart[3]) >= 1
    acknowledged = BACKENDS * TURNS * 2  # a user and an assistant message per turn
    assert (
        f"read back: {acknowledged} acknowledged messages; 0 lost, 0 duplicated, 0 altered, "
        "0 unexpected"
    ) in printed
    assert "errors: 0 HTTP, 0 summarization job failures, " in printed
    assert "background work drained: yes" in printed
    assert re.search(r"^Checked \d+ sessions .*: no violations\.$", printed, re.M), printed
