"""The load test's own checks: job failures from /metrics, tracebacks and ERROR lines in the
server's log, the verdict; and one small run of `scripts.bench.load` end to end on each database."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, generate_latest

from api import metrics
from api.__main__ import LOG_FORMAT
from scripts.bench import load
from scripts.bench.load import LogFindings, Outcome, Stats

WORKER_FAILURE = """\
INFO:     127.0.0.1:40000 - "POST /v1/sessions/load-000/messages HTTP/1.1" 201 Created
ERROR:precis.worker: summarization job 3 of session 5 failed
Traceback (most recent call last):
  File "/work/main/api/worker.py", line 101, in _run
    summary = await self._summarization.run(job.session_id, job.trigger, job.reason)
  File "/work/main/api/summarization.py", line 140, in run
    raise ValueError("ERROR in the cut")
ValueError: ERROR in the cut
INFO:     127.0.0.1:40000 - "GET /v1/sessions/load-000/history HTTP/1.1" 200 OK
"""


def outcome(**changes: object) -> Outcome:
    fields: dict[str, object] = {
        "stats": Stats(),
        "elapsed": 1.0,
        "turns": 1,
        "sessions": 1,
        "drained": True,
        "metrics_status": 200,
        "summaries": 1.0,
        "llm_calls": 1.0,
        "job_failures": 0.0,
        "pending_jobs": 0.0,
    }
    fields.update(changes)
    return Outcome(**fields)  # type: ignore[arg-type]


CLEAN_LOG = LogFindings(tracebacks=0, error_lines=0, excerpts=())


def test_a_job_failure_counted_by_the_service_is_read_from_its_metrics() -> None:
    before = load.sample_total(generate_latest(REGISTRY).decode(), load.JOB_FAILURES_METRIC)
    metrics.JOB_FAILURES.inc()
    after = load.sample_total(generate_latest(REGISTRY).decode(), load.JOB_FAILURES_METRIC)
    assert after == before + 1


def test_a_worker_traceback_counts_once_and_is_quoted_by_its_exception() -> None:
    findings = load.scan_log(WORKER_FAILURE)
    assert findings.tracebacks == 1
    # The ERROR line above the traceback counts; the frames quoting "ERROR" do not.
    assert findings.error_lines == 1
    assert findings.excerpts == (
        "ERROR:precis.worker: summarization job 3 of session 5 failed",
        "ValueError: ERROR in the cut",
    )


def test_error_lines_of_the_service_uvicorn_and_litellm_are_counted() -> None:
    record = logging.LogRecord("precis.worker", logging.ERROR, __file__, 1, "failed", None, None)
    service_line = logging.Formatter(LOG_FORMAT).format(record)
    log = "\n".join(
        [
            service_line,
            "ERROR:    Exception in ASGI application",
            "\x1b[92m10:00:00 - LiteLLM:ERROR\x1b[0m: utils.py:10 - boom",
            "CRITICAL:precis: out of memory",
        ]
    )
    assert load.scan_log(log).error_lines == 4


def test_lines_that_only_mention_errors_are_not_counted() -> None:
    log = "\n".join(
        [
            'INFO:     127.0.0.1:1 - "GET /v1/sessions/ERROR-1/history HTTP/1.1" 200 OK',
            "WARNING:precis.summarization: roll-up of session 4 gave an empty text; not stored",
            "INFO:     job released with last_error=ValueError: an error",
            "INFO:     Shutting down",
        ]
    )
    assert load.scan_log(log) == CLEAN_LOG


def test_job_failures_fail_the_run_and_say_so() -> None:
    reasons = load.failures(outcome(job_failures=2.0), CLEAN_LOG, 0, 0)
    assert reasons == ["2 background summarization jobs failed (precis_summary_job_failures_total)"]
    assert load.verdict(reasons).startswith("load: FAILED: 2 background summarization jobs")


def test_tracebacks_and_error_lines_in_the_server_log_fail_the_run() -> None:
    reasons = load.failures(outcome(), load.scan_log(WORKER_FAILURE), 0, 0)
    assert reasons == [
        "1 tracebacks in the server's log",
        "1 ERROR lines in the server's log",
    ]


def test_unreadable_metrics_fail_the_run() -> None:
    reasons = load.failures(outcome(metrics_status=401), CLEAN_LOG, 0, 0)
    assert reasons == ["/metrics answered 401: job failures unknown"]


def test_acknowledged_messages_read_back_wrong_fail_the_run() -> None:
    contents = load.Contents(acknowledged=4, lost=1, duplicated=1)
    reasons = load.failures(outcome(contents=contents), CLEAN_LOG, 0, 0)
    assert reasons == [
        "sessions read back wrong: 1 acknowledged messages lost, 1 duplicated, 0 altered, "
        "0 unexpected, 0 sessions unreadable"
    ]


def test_a_clean_outcome_passes() -> None:
    assert load.failures(outcome(), CLEAN_LOG, -15, 0) == []


@pytest.mark.parametrize("database", ["sqlite"])
def test_a_small_run_passes_and_scans_only_its_own_server_log(
    database: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """On SQLite only: which lines of the log are scanned does not depend on the database, and
    the small chaos run below is this run on PostgreSQL, with connections terminated besides
    (its exit status 0 also means 0 HTTP errors, 0 job failures, a clean log, verify passed)."""
    server_log = tmp_path / "server.log"
    server_log.write_text("Traceback (most recent call last):\nValueError: an earlier run\n")
    status = load.main(
        [
            "--database",
            database,
            "--backends",
            "2",
            "--turns",
            "6",
            "--duration",
            "30",
            "--message-limit",
            "4",
            "--keep-last-n",
            "1",
            "--server-log",
            str(server_log),
        ]
    )
    printed = capfd.readouterr().out
    assert status == 0, printed
    assert "errors: 0 HTTP, 0 summarization job failures, " in printed
    assert "server log: 0 tracebacks, 0 ERROR lines" in printed
    assert printed.rstrip().endswith("verify passed")
    assert "Application startup complete." in server_log.read_text()


@pytest.mark.parametrize("database", ["postgresql"])
def test_a_small_comparison_with_the_minimal_app_reports_both_rates_and_their_ratio(
    database: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """On PostgreSQL only (the database the comparison is made for): the report does not
    depend on the database; the minimal app's answers are Precis's on both
    (`tests/scripts/test_bench_minimal_app.py`), and `load.py` makes a SQLite database the
    same way for every run (`test_a_small_run_passes_and_scans_only_its_own_server_log`)."""
    status = load.main(
        ["--compare-minimal", "--database", database, "--backends", "2", "--turns", "3"]
    )
    printed = capfd.readouterr().out
    assert status == 0, printed
    for label in ("Precis", "minimal app"):
        assert re.search(rf"^  {label}: 6 turns, 18 requests in .* requests/s$", printed, re.M)
    assert re.search(
        r"throughput: Precis [0-9.]+ requests/s, minimal app [0-9.]+ requests/s: "
        r"[0-9.]+x \(target >= 0.8x: (met|missed)\)",
        printed,
    ), printed
    assert "errors: 0 HTTP, server log: 0 tracebacks, 0 ERROR lines" in printed
    assert printed.rstrip().endswith("verify passed")


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        (["--chaos", "--compare-minimal"], "leave out --chaos"),
        (["--chaos"], "add --database postgresql"),
        (
            ["--chaos", "--database", "postgresql", "--postgres-url", "postgresql://db.example/x"],
            "only terminates connections of a database on loopback",
        ),
        (["--chaos", "--database", "postgresql", "--chaos-kills", "0"], "must be positive"),
        (["--restart"], "add --database postgresql"),
        (["--restart", "--database", "postgresql", "--compare-minimal"], "leave out --chaos"),
    ],
)
def test_chaos_and_restarts_are_refused_where_they_could_harm_or_do_nothing(
    arguments: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        load.parse_args(arguments)
    assert complaint in capsys.readouterr().err


@pytest.mark.parametrize("database", ["postgresql"])
def test_a_small_chaos_run_loses_nothing_and_answers_every_request(
    database: str, capfd: pytest.CaptureFixture[str]
) -> None:
    status = load.main(
        [
            "--database",
            database,
            "--chaos",
            "--chaos-kills",
            "6",
            "--chaos-max-interval",
            "0.8",
            "--backends",
            "4",
            "--turns",
            "25",  # runs past the longest pause, so at least one round of terminations
            "--duration",
            "60",
            "--message-limit",
            "4",
            "--keep-last-n",
            "1",
        ]
    )
    printed = capfd.readouterr().out
    assert status == 0, printed
    rounds = re.search(
        r"chaos: (\d+) rounds of terminations, (\d+) connections terminated", printed
    )
    assert rounds is not None and int(rounds[1]) >= 1 and int(rounds[2]) >= 1, printed
    assert "errors: 0 HTTP, 0 summarization job failures, " in printed
    assert printed.rstrip().endswith("verify passed")
