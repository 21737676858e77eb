"""Load test: concurrent simulated chat backends against a real server on loopback.

    python -m scripts.bench.load [--backends 16] [--turns 20] [--duration 60]
                           [--database sqlite|postgresql] [--message-limit 12]
                           [--chaos [--chaos-kills 12] [--chaos-max-interval 3]]
                           [--restart [--restart-after 2] [--restart-downtime 3]]
                           [--failover [--replication sync|async] [--failover-after 2]
                                       [--promote-after 2] [--async-lag 1]
                                       [--target-session-attrs primary]]
                           [--compare-minimal]

Starts `python -m api` on a free loopback port with a fresh database (an SQLite file in a
temporary folder, or a new PostgreSQL database on PRECIS_TEST_POSTGRES_URL's server, dropped
at the end), an API key, and proactive summarization on with a small message limit, against
the loopback fake OpenAI-compatible LLM of `tests/support/fake_llm.py` (litellm's real HTTP path).
Each backend plays turns: append the user's message, load the history under `max_tokens`,
append the assistant's answer. It stops after `--turns` turns per backend or `--duration`
seconds, whichever comes first, waits (bounded) until no summarization job is left, not even
one waiting to be retried, stops the server with SIGTERM, then runs `python -m scripts.verify`
on every session.

With `--chaos` (PostgreSQL on loopback only), every backend connection of the run's database
is terminated (`pg_terminate_backend`, as an operator or a failover would) at random
intervals while the backends play, `--chaos-kills` times at most: the run must pass all the
same, the service answering every request and draining every job.

With `--restart` (PostgreSQL), the run's database lives on a PostgreSQL cluster of its own,
made in a temporary folder with the installed server binaries (`tests/support/pg_cluster.py`;
as root they run as the `postgres` user) on a free loopback port. `--restart-after` seconds
into the turns it is stopped (`pg_ctl stop -m fast`: transactions under way are rolled back,
every connection is cut, new ones are refused), and started again `--restart-downtime`
seconds later, as a failover or a minor-version upgrade would. The run must pass all the
same: requests wait for the database within DATABASE_RETRY_SECONDS instead of failing. The
report gives the downtime and the latencies of the requests that spanned it.

With `--failover` (PostgreSQL), the run's database lives on a primary and a streaming standby
of the run's own, replicated synchronously or not (`--replication`), which the service reaches
through a multi-host `DATABASE_URL`; the primary is lost mid-run and the standby promoted
(`scripts/bench/load_failover.py`). With synchronous replication the run must pass as with
`--restart`; with asynchronous replication acknowledged messages may be lost (counted, not a
failure). The report prints the failover's timeline.

With `--compare-minimal`, summarization is off and the same turns are played twice on one
database: against Precis, then against the minimal ASGI app of `scripts/bench/minimal_app.py`
(the same SQL through the same store functions, the same answers), each served the same way
(`python -m api`, `python -m scripts.bench.minimal_app`) with the same settings and API key.
It prints the requests/s of each and their ratio (target: Precis at least 0.8x), then runs
verify; the exit status says whether both runs were clean (the ratio is reported, not
enforced: one short run on a shared machine is noisy).

After the drain, every backend's session is read back (`GET .../messages`): each message
whose append was acknowledged must be stored exactly once, as sent.

Prints throughput, p50/p95/p99 per operation and the errors: HTTP errors, background
summarization job failures (`precis_summary_job_failures_total` on /metrics at the end), and
tracebacks and ERROR lines in the server's log (its stdout and stderr, captured from start to
exit). Exit status 0 only when all of them are zero, the background work drained, every acknowledged
message was read back as sent, the server stopped cleanly and verify found nothing; the last
line says which of these failed.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as `python scripts/bench/load.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse
import asyncio
import os
import random
import re
import secrets
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from scripts.bench.load_failover import (
    ASYNC_LAG_SECONDS,
    FAILOVER_AFTER_SECONDS,
    PROMOTE_AFTER_SECONDS,
    FailedOver,
    Failover,
    fail_over,
    timeline,
)
from scripts.bench.load_failover import report_lines as failover_lines
from tests.support.live_server import LiveServer

if TYPE_CHECKING:
    from tests.support.pg_cluster import PgCluster

REPO_ROOT = Path(__file__).resolve().parents[2]

DRAIN_TIMEOUT_SECONDS = 120.0
"""How long the load test waits for background summarization to finish after the last turn."""

MAX_EXCERPTS = 20
"""How many HTTP errors and server log lines the report quotes (the counts are complete)."""

DEFAULT_POSTGRES_ADMIN_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
"""Where `--database postgresql` creates its database (PRECIS_TEST_POSTGRES_URL overrides)."""

MINIMAL_APP_MODULE = "scripts.bench.minimal_app"
"""What `--compare-minimal` serves after Precis (`python -m` it, as `python -m api`)."""

THROUGHPUT_TARGET = 0.8
"""`--compare-minimal`: Precis's requests/s should be at least this share of the minimal app's."""

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
"""Where `--chaos` may terminate connections: a database of this machine's, never a shared one."""

CHAOS_MIN_INTERVAL_SECONDS = 0.5
"""Shortest pause between two rounds of `--chaos` terminations."""

RESTART_AFTER_SECONDS = 2.0
"""`--restart`: seconds into the turns when PostgreSQL is stopped (the backends are busy)."""

RESTART_DOWNTIME_SECONDS = 3.0
"""`--restart`: seconds between the server's stop and its start, as in a quick failover."""

MESSAGES_PAGE = 500
"""Messages per page when a session is read back after the run."""

TERMINATE_OTHERS = (
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
)

WORDS = tuple(
    [
        "order",
        "shipping",
        "refund",
        "invoice",
        "account",
        "password",
        "delivery",
        "parcel",
        "address",
        "warranty",
        "battery",
        "screen",
        "laptop",
        "phone",
        "subscription",
        "plan",
        "upgrade",
        "discount",
        "coupon",
        "receipt",
        "tracking",
        "courier",
        "Lyon",
        "Berlin",
        "Monday",
        "Friday",
        "urgent",
        "broken",
        "replaced",
        "missing",
        "late",
        "weekend",
        "support",
    ]
)
"""Vocabulary of the simulated conversations."""


# --- the simulated chat backends ------------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    """A message a backend appended, as it sent it."""

    client_id: str
    role: str
    content: str


@dataclass
class Stats:
    """Latencies (seconds) per operation and the errors seen."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    spans: list[tuple[str, float, float]] = field(default_factory=list)
    """(operation, start, end) on the monotonic clock of every answered request."""
    acknowledged: dict[str, list[Sent]] = field(default_factory=dict)
    """Per session, the messages whose append answered 201, in the order sent."""
    unacknowledged: set[str] = field(default_factory=set)
    """Client ids of appends that failed: stored or not, either is right."""

    def record(self, operation: str, seconds: float, started: float) -> None:
        self.latencies.setdefault(operation, []).append(seconds)
        self.spans.append((operation, started, started + seconds))

    @property
    def requests(self) -> int:
        return sum(len(values) for values in self.latencies.values())


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of `values` (not empty)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(fraction * len(ordered) + 0.5)))
    return ordered[rank - 1]


def sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high))).capitalize() + "."


@dataclass(frozen=True)
class Chaos:
    """`--chaos`: terminate the database's connections `kills` times at random intervals."""

    database_url: str
    kills: int
    max_interval: float


@dataclass(frozen=True)
class Restart:
    """`--restart`: stop the cluster `after` seconds into the turns, start it `downtime` later."""

    cluster: PgCluster
    after: float
    downtime: float


@dataclass(frozen=True)
class Plan:
    backends: int
    turns: int
    duration: float
    max_tokens: int
    seed: int
    chaos: Chaos | None = None
    restart: Restart | None = None
    failover: Failover | None = None


@dataclass(frozen=True)
class Restarted:
    """When the database went away and came back (monotonic clock), and the requests that
    were under way or sent meanwhile."""

    stopping: float
    """`pg_ctl stop -m fast` was run."""
    up: float
    """`pg_ctl start` returned: the server accepts connections again."""
    started_at: float
    """Seconds into the turns when it was stopped."""
    spanning: tuple[float, ...] = ()
    """Latencies (seconds) of the answered requests whose time overlapped the downtime."""

    @property
    def downtime(self) -> float:
        return self.up - self.stopping


async def restart_database(restart: Restart, turns_started: float) -> Restarted:
    """Stop the cluster `restart.after` seconds after `turns_started`, start it
    `restart.downtime` seconds later."""
    await asyncio.sleep(max(0.0, turns_started + restart.after - time.monotonic()))
    stopping = time.monotonic()
    await asyncio.to_thread(restart.cluster.stop, "fast")
    await asyncio.sleep(restart.downtime)
    await asyncio.to_thread(restart.cluster.start)
    return Restarted(stopping, time.monotonic(), stopping - turns_started)


@dataclass
class ChaosTally:
    rounds: int = 0
    terminated: int = 0


async def terminate_connections(
    chaos: Chaos, rng: random.Random, done: asyncio.Event
) -> ChaosTally:
    """Every CHAOS_MIN_INTERVAL_SECONDS..max_interval seconds, terminate every connection to
    the run's database, until `kills` rounds are done or the backends are."""
    from sqlalchemy import text

    from api.db.engine import create_engine

    tally = ChaosTally()
    admin = create_engine(chaos.database_url, poolclass=NullPool)
    try:
        while tally.rounds < chaos.kills:
            pause = rng.uniform(CHAOS_MIN_INTERVAL_SECONDS, chaos.max_interval)
            with suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), timeout=pause)
            if done.is_set():
                break
            async with admin.connect() as connection:
                killed = (await connection.execute(text(TERMINATE_OTHERS))).all()
            tally.rounds += 1
            tally.terminated += len(killed)
    finally:
        await admin.dispose()
    return tally


async def timed(stats: Stats, operation: str, request: Any, expected: int) -> httpx.Response | None:
    started = time.perf_counter()
    since = time.monotonic()
    try:
        answer: httpx.Response = await request
    except httpx.HTTPError as exc:
        stats.errors.append(f"{operation}: {type(exc).__name__}: {exc}")
        return None
    stats.record(operation, time.perf_counter() - started, since)
    if answer.status_code != expected:
        stats.errors.append(f"{operation}: {answer.status_code} {answer.text[:200]}")
        return None
    return answer


async def chat_backend(
    http: httpx.AsyncClient, session_id: str, plan: Plan, deadline: float, stats: Stats
) -> int:
    """One chat backend: turns of append user, load history, append assistant. Returns turns."""
    rng = random.Random(f"{plan.seed}:{session_id}")
    url = f"/v1/sessions/{session_id}"
    done = 0
    for turn in range(plan.turns):
        if time.monotonic() >= deadline:
            break
        question = {
            "role": "user",
            "content": sentence(rng, 8, 60),
            "client_id": f"u{turn}",
            "metadata": {"turn": turn},
        }
        if not await appended(
            stats,
            session_id,
            "append user",
            http.post(f"{url}/messages", json={"messages": [question]}),
            question,
        ):
            continue
        history = await timed(
            stats,
            "load history",
            http.get(f"{url}/history", params={"max_tokens": plan.max_tokens}),
            200,
        )
        # Every message here is far under the budget, so the context must always fit it.
        if history is not None and history.json()["token_estimate"] > plan.max_tokens:
            stats.errors.append(f"load history: {session_id} over max_tokens")
        answer = {"role": "assistant", "content": sentence(rng, 10, 80), "client_id": f"a{turn}"}
        await appended(
            stats,
            session_id,
            "append assistant",
            http.post(f"{url}/messages", json={"messages": [answer]}),
            answer,
        )
        done += 1
    return done


async def appended(
    stats: Stats, session_id: str, operation: str, request: Any, message: dict[str, Any]
) -> bool:
    """Time an append of `message`; remember it as acknowledged (201) or not."""
    sent = Sent(message["client_id"], message["role"], message["content"])
    if await timed(stats, operation, request, 201) is None:
        stats.unacknowledged.add(f"{session_id}/{sent.client_id}")
        return False
    stats.acknowledged.setdefault(session_id, []).append(sent)
    return True


@dataclass(frozen=True)
class Contents:
    """The backends' sessions read back against what their appends acknowledged."""

    acknowledged: int = 0
    lost: int = 0
    """Acknowledged, not stored."""
    duplicated: int = 0
    """Stored more than once."""
    altered: int = 0
    """Stored with another role or content than sent."""
    unexpected: int = 0
    """Stored, though no append of it was acknowledged or failed."""
    unreadable: int = 0
    """Sessions whose messages could not be read back."""

    @property
    def wrong(self) -> int:
        return self.lost + self.duplicated + self.altered + self.unexpected + self.unreadable


async def read_back(http: httpx.AsyncClient, stats: Stats) -> Contents:
    """Compare every backend session's stored messages with the acknowledged ones."""
    counts = dict.fromkeys(("acknowledged", "lost", "duplicated", "altered", "unexpected"), 0)
    unreadable = 0
    for session_id, sent in stats.acknowledged.items():
        stored = await stored_messages(http, session_id)
        if stored is None:
            unreadable += 1
            continue
        seen: dict[str, Sent] = {}
        for message in stored:
            if message.client_id in seen:
                counts["duplicated"] += 1
            seen[message.client_id] = message
        for message in sent:
            counts["acknowledged"] += 1
            found = seen.pop(message.client_id, None)
            if found is None:
                counts["lost"] += 1
            elif found != message:
                counts["altered"] += 1
        counts["unexpected"] += sum(
            f"{session_id}/{client_id}" not in stats.unacknowledged for client_id in seen
        )
    return Contents(**counts, unreadable=unreadable)


async def stored_messages(http: httpx.AsyncClient, session_id: str) -> list[Sent] | None:
    """A session's stored messages, in seq order (none when the session is not there: every
    acknowledged one is lost); None if they could not be read."""
    messages: list[Sent] = []
    after_seq = 0
    while True:
        answer = await http.get(
            f"/v1/sessions/{session_id}/messages",
            params={"after_seq": after_seq, "limit": MESSAGES_PAGE},
        )
        if answer.status_code == 404:
            return messages
        if answer.status_code != 200:
            return None
        page = answer.json()
        for message in page["messages"]:
            messages.append(Sent(message["client_id"], message["role"], message["content"]))
            after_seq = message["seq"]
        if page["next_cursor"] is None:
            return messages


JOB_FAILURES_METRIC = "precis_summary_job_failures_total"
PENDING_JOBS_METRIC = "precis_pending_summary_jobs"
DATABASE_RETRIES_METRIC = "precis_database_retries_total"


def sample_total(metrics_text: str, sample_name: str) -> float:
    """Sum of one sample's values over all its label sets, in Prometheus text exposition."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(metrics_text)
        for sample in family.samples
        if sample.name == sample_name
    )


async def read_metrics(http: httpx.AsyncClient, operator_key: str) -> httpx.Response:
    """GET /metrics (it answers the operator's key only: its counters are every tenant's)."""
    return await http.get("/metrics", headers={"Authorization": f"Bearer {operator_key}"})


async def drain(
    http: httpx.AsyncClient, session_ids: Sequence[str], seconds: float, operator_key: str
) -> bool:
    """Wait until no summarization is pending anywhere; False if `seconds` ran out.

    Pending means: a session's history says `summarization_pending` (a job queued or running,
    or an inline summarization holding its lock), or the job queue (`precis_pending_summary_jobs`,
    read from the database at scrape time) is not empty. A job that failed is put back to
    pending with a backoff, so it is waited for too.
    """
    deadline = time.monotonic() + seconds
    pending = list(session_ids)
    while True:
        still = []
        for session_id in pending:
            # Without max_tokens: a budget could make the loader summarize inline.
            answer = await http.get(f"/v1/sessions/{session_id}/history")
            if answer.status_code != 200 or answer.json()["summarization_pending"]:
                still.append(session_id)
        pending = still
        if not pending:
            metrics = await read_metrics(http, operator_key)
            if metrics.status_code == 200 and sample_total(metrics.text, PENDING_JOBS_METRIC) == 0:
                return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.2)


@dataclass
class Outcome:
    stats: Stats
    elapsed: float
    turns: int
    sessions: int
    drained: bool
    metrics_status: int
    """Status of the final GET /metrics: the counts below are zeros unless it is 200."""
    summaries: float
    llm_calls: float
    job_failures: float
    pending_jobs: float
    database_retries: float = 0.0
    chaos: ChaosTally | None = None
    restarted: Restarted | None = None
    failed_over: FailedOver | None = None
    contents: Contents = field(default_factory=Contents)


def load_client(base_url: str, api_key: str, plan: Plan) -> httpx.AsyncClient:
    """One client for every backend: a connection each, keep-alive, the API key."""
    headers = {"Authorization": f"Bearer {api_key}"}
    limits = httpx.Limits(max_connections=plan.backends + 4)
    return httpx.AsyncClient(base_url=base_url, headers=headers, limits=limits, timeout=120.0)


def new_session_ids(plan: Plan) -> list[str]:
    return [f"load-{index:03d}-{uuid.uuid4().hex[:8]}" for index in range(plan.backends)]


async def warm_up(http: httpx.AsyncClient) -> None:
    """One untimed append: the first request pays for what is loaded on first use."""
    message = {"role": "user", "content": "warm-up"}
    await http.post("/v1/sessions/load-warm-up/messages", json={"messages": [message]})


async def play(
    http: httpx.AsyncClient, plan: Plan, session_ids: Sequence[str], stats: Stats
) -> tuple[int, float]:
    """Every backend's turns at once; returns the turns played and their seconds."""
    started = time.monotonic()
    deadline = started + plan.duration
    turns = await asyncio.gather(
        *(chat_backend(http, sid, plan, deadline, stats) for sid in session_ids)
    )
    return sum(turns), time.monotonic() - started


async def run_load(base_url: str, api_key: str, plan: Plan, operator_key: str) -> Outcome:
    stats = Stats()
    session_ids = new_session_ids(plan)
    async with load_client(base_url, api_key, plan) as http:
        await warm_up(http)
        backends_done = asyncio.Event()
        chaos = (
            asyncio.create_task(
                terminate_connections(plan.chaos, random.Random(plan.seed), backends_done)
            )
            if plan.chaos is not None
            else None
        )
        restart = (
            asyncio.create_task(restart_database(plan.restart, time.monotonic()))
            if plan.restart is not None
            else None
        )
        failover = (
            asyncio.create_task(fail_over(plan.failover, time.monotonic()))
            if plan.failover is not None
            else None
        )
        turns, elapsed = await play(http, plan, session_ids, stats)
        backends_done.set()
        chaos_tally = await chaos if chaos is not None else None
        restarted = spanning(await restart, stats) if restart is not None else None
        failed_over = timeline(await failover, stats.spans) if failover is not None else None
        drained = await drain(
            http, [*session_ids, "load-warm-up"], DRAIN_TIMEOUT_SECONDS, operator_key
        )
        contents = await read_back(http, stats)
        metrics = await read_metrics(http, operator_key)
    metrics_text = metrics.text if metrics.status_code == 200 else ""
    return Outcome(
        stats=stats,
        elapsed=elapsed,
        turns=turns,
        sessions=len(session_ids),
        drained=drained,
        metrics_status=metrics.status_code,
        summaries=sample_total(metrics_text, "precis_summaries_total"),
        llm_calls=sample_total(metrics_text, "precis_llm_calls_total"),
        job_failures=sample_total(metrics_text, JOB_FAILURES_METRIC),
        pending_jobs=sample_total(metrics_text, PENDING_JOBS_METRIC),
        database_retries=sample_total(metrics_text, DATABASE_RETRIES_METRIC),
        chaos=chaos_tally,
        restarted=restarted,
        failed_over=failed_over,
        contents=contents,
    )


def spanning(restarted: Restarted, stats: Stats) -> Restarted:
    """`restarted` with the latencies of the answered requests that overlapped its downtime."""
    latencies = tuple(
        end - start
        for _, start, end in stats.spans
        if start < restarted.up and end > restarted.stopping
    )
    return replace(restarted, spanning=latencies)


# --- the server's log -----------------------------------------------------------------------

TRACEBACK = "Traceback (most recent call last):"

READ_ONLY_REFUSAL = "in a read-only transaction"
"""What PostgreSQL says when it refuses a write as read-only (SQLSTATE 25006)."""

ERROR_LEVEL = re.compile(r"(?:^|[\s:\[\"'=|])(?:ERROR|CRITICAL)(?=$|[\s:\]\"'|,\x1b])")
"""An ERROR or CRITICAL level name as log formats print it: uvicorn's `ERROR:    ...`, the
`ERROR:name:...` of logging's basic format, litellm's `LiteLLM:ERROR`, `[ERROR]`,
`level=ERROR`, JSON `"ERROR"`. Upper case and delimited, so a message merely mentioning an
error does not count."""


@dataclass(frozen=True)
class LogFindings:
    """What in the server's log says something went wrong."""

    tracebacks: int
    error_lines: int
    excerpts: tuple[str, ...]
    """The ERROR lines, and each traceback's exception line, in log order."""
    read_only_refusals: int = 0
    """Lines saying a write was refused as read-only (a retry's first warning, in a failover)."""


def scan_log(text: str) -> LogFindings:
    """Count tracebacks and ERROR-level lines in a server log.

    A traceback's indented frames (and the tracebacks nested in them) are not scanned: the
    source lines they quote are not log lines.
    """
    lines = text.splitlines()
    tracebacks = error_lines = 0
    excerpts: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if TRACEBACK in line:
            tracebacks += 1
            while index < len(lines) and lines[index][:1].isspace():
                index += 1
            # The first line after the frames names the exception.
            if index < len(lines):
                excerpts.append(lines[index])
                index += 1
            else:
                excerpts.append(line)
        elif ERROR_LEVEL.search(line):
            error_lines += 1
            excerpts.append(line)
    refusals = sum(READ_ONLY_REFUSAL in line for line in lines)
    return LogFindings(tracebacks, error_lines, tuple(excerpts), refusals)


def read_log(path: Path, offset: int) -> str:
    """The log written from byte `offset` on (a kept --server-log file is appended to)."""
    try:
        with path.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")
    except OSError:
        return ""


# --- the verdict ----------------------------------------------------------------------------


def failures(outcome: Outcome, log: LogFindings, server_exit: int, verify_exit: int) -> list[str]:
    """Why the run fails, one reason per check; empty when it passes."""
    reasons = []
    errors = [e for e in outcome.stats.errors if not (lost_allowed(outcome) and session_lost(e))]
    if errors:
        reasons.append(f"{len(errors)} HTTP errors")
    if outcome.metrics_status != 200:
        reasons.append(f"/metrics answered {outcome.metrics_status}: job failures unknown")
    if outcome.job_failures:
        reasons.append(
            f"{outcome.job_failures:.0f} background summarization jobs failed "
            f"({JOB_FAILURES_METRIC})"
        )
    if not outcome.drained:
        reasons.append(
            f"background summarization did not drain within {DRAIN_TIMEOUT_SECONDS:.0f} s "
            f"({outcome.pending_jobs:.0f} jobs pending)"
        )
    contents = outcome.contents
    if lost_allowed(outcome):
        contents = replace(contents, lost=0)
    if contents.wrong:
        reasons.append(
            f"sessions read back wrong: {contents.lost} acknowledged messages lost, "
            f"{contents.duplicated} duplicated, {contents.altered} altered, "
            f"{contents.unexpected} unexpected, {contents.unreadable} sessions unreadable"
        )
    if outcome.restarted is not None and not outcome.restarted.spanning:
        reasons.append("no request spanned the database restart: lower --restart-after")
    if outcome.failed_over is not None and not outcome.failed_over.spanning:
        reasons.append("no request spanned the failover: lower --failover-after")
    reasons += server_failures(log, server_exit)
    if verify_exit != 0:
        reasons.append(f"scripts.verify failed (exit {verify_exit})")
    return reasons


LOST_SESSION = '404 {"error":"SessionNotFound"'
"""A request's error when its session is not there: under asynchronous replication, a session
created in the moments the standby never received is lost whole."""


def session_lost(error: str) -> bool:
    return LOST_SESSION in error


def lost_allowed(outcome: Outcome) -> bool:
    """Acknowledged messages may be lost: the primary was lost under asynchronous replication."""
    failed = outcome.failed_over
    return failed is not None and failed.replication == "asynchronous"


def server_failures(log: LogFindings, server_exit: int) -> list[str]:
    """What the server's log and exit status say went wrong."""
    reasons = []
    if log.tracebacks:
        reasons.append(f"{log.tracebacks} tracebacks in the server's log")
    if log.error_lines:
        reasons.append(f"{log.error_lines} ERROR lines in the server's log")
    # uvicorn re-raises the SIGTERM it handled once it has shut down gracefully.
    if server_exit not in (0, -signal.SIGTERM):
        reasons.append(f"the server exited with {server_exit}")
    return reasons


def verdict(reasons: Sequence[str]) -> str:
    """The report's last line: passed, or every reason the run failed."""
    if reasons:
        return "load: FAILED: " + "; ".join(reasons)
    return (
        "load: passed: 0 HTTP errors, 0 summarization job failures, "
        "no traceback or ERROR line in the server's log, verify passed"
    )


def operation_lines(stats: Stats, indent: str = "  ") -> list[str]:
    """A table of the latencies of each operation."""
    lines = [
        f"{indent}{'operation':<17} {'count':>6} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
        f"{'max ms':>8}"
    ]
    for operation, values in stats.latencies.items():
        cells = [percentile(values, q) * 1000 for q in (0.50, 0.95, 0.99)] + [max(values) * 1000]
        lines.append(
            f"{indent}{operation:<17} {len(values):>6} "
            + " ".join(f"{cell:>8.1f}" for cell in cells)
        )
    return lines


def report(outcome: Outcome, log: LogFindings, plan: Plan, database: str) -> str:
    stats = outcome.stats
    lines = [
        f"load: {plan.backends} backends x up to {plan.turns} turns on {database}, "
        f"history max_tokens={plan.max_tokens}",
        f"  {outcome.turns} turns, {stats.requests} requests in {outcome.elapsed:.1f} s: "
        f"{stats.requests / outcome.elapsed:.1f} requests/s, "
        f"{outcome.turns / outcome.elapsed:.1f} turns/s",
        *operation_lines(stats),
    ]
    lines.append(
        f"  summaries stored: {outcome.summaries:.0f} ({outcome.llm_calls:.0f} LLM calls); "
        f"background work drained: {'yes' if outcome.drained else 'NO'} "
        f"({outcome.pending_jobs:.0f} jobs pending at the end)"
    )
    job_failures = (
        f"{outcome.job_failures:.0f}"
        if outcome.metrics_status == 200
        else f"unknown (/metrics answered {outcome.metrics_status})"
    )
    if outcome.chaos is not None:
        lines.append(
            f"  chaos: {outcome.chaos.rounds} rounds of terminations, "
            f"{outcome.chaos.terminated} connections terminated; "
            f"{outcome.database_retries:.0f} database retries on a fresh connection"
        )
    restarted = outcome.restarted
    if restarted is not None:
        lines.append(
            f"  restart: PostgreSQL stopped (pg_ctl stop -m fast) {restarted.started_at:.1f} s "
            f"into the turns, accepting connections again {restarted.downtime:.1f} s later; "
            f"{outcome.database_retries:.0f} database retries"
        )
        if restarted.spanning:
            cells = [percentile(restarted.spanning, q) * 1000 for q in (0.50, 0.99)]
            lines.append(
                f"    {len(restarted.spanning)} requests spanned the downtime: "
                f"p50 {cells[0]:.1f} ms, p99 {cells[1]:.1f} ms, "
                f"max {max(restarted.spanning) * 1000:.1f} ms"
            )
    if outcome.failed_over is not None:
        lines += failover_lines(
            outcome.failed_over, outcome.database_retries, log.read_only_refusals
        )
    contents = outcome.contents
    lines.append(
        f"  read back: {contents.acknowledged} acknowledged messages; {contents.lost} lost, "
        f"{contents.duplicated} duplicated, {contents.altered} altered, "
        f"{contents.unexpected} unexpected"
        + (
            " (asynchronous replication: the loss may take the last moments)"
            if lost_allowed(outcome)
            else ""
        )
    )
    lines.append(
        f"  errors: {len(stats.errors)} HTTP"
        + (
            f" ({sum(map(session_lost, stats.errors))} of them 404, the session lost whole)"
            if lost_allowed(outcome)
            else ""
        )
        + f", {job_failures} summarization job failures, "
        f"server log: {log.tracebacks} tracebacks, {log.error_lines} ERROR lines"
    )
    lines.extend(f"    {error}" for error in stats.errors[:MAX_EXCERPTS])
    lines.extend(f"    server log: {line}" for line in log.excerpts[:MAX_EXCERPTS])
    return "\n".join(lines)


# --- Precis against the minimal app --------------------------------------------------------


@dataclass(frozen=True)
class Compared:
    """One server's run of `--compare-minimal`."""

    label: str
    stats: Stats
    turns: int
    elapsed: float
    log: LogFindings
    server_exit: int

    @property
    def rate(self) -> float:
        return self.stats.requests / self.elapsed if self.elapsed > 0 else 0.0


async def run_turns(base_url: str, api_key: str, plan: Plan) -> tuple[Stats, int, float]:
    """The backends' turns against one server: nothing to drain, summarization is off."""
    stats = Stats()
    async with load_client(base_url, api_key, plan) as http:
        await warm_up(http)
        turns, elapsed = await play(http, plan, new_session_ids(plan), stats)
    return stats, turns, elapsed


def compare_report(runs: Sequence[Compared], plan: Plan, database: str) -> str:
    lines = [
        f"compare: {plan.backends} backends x up to {plan.turns} turns on {database}, "
        f"summarization off, history max_tokens={plan.max_tokens}"
    ]
    for run in runs:
        lines.append(
            f"  {run.label}: {run.turns} turns, {run.stats.requests} requests in "
            f"{run.elapsed:.1f} s: {run.rate:.1f} requests/s"
        )
        lines.extend(operation_lines(run.stats, "    "))
        lines.append(
            f"    errors: {len(run.stats.errors)} HTTP, server log: {run.log.tracebacks} "
            f"tracebacks, {run.log.error_lines} ERROR lines"
        )
        lines.extend(f"      {error}" for error in run.stats.errors[:MAX_EXCERPTS])
        lines.extend(f"      server log: {line}" for line in run.log.excerpts[:MAX_EXCERPTS])
    precis, minimal = runs
    ratio = precis.rate / minimal.rate if minimal.rate > 0 else 0.0
    met = "met" if ratio >= THROUGHPUT_TARGET else "missed"
    lines.append(
        f"  throughput: {precis.label} {precis.rate:.1f} requests/s, {minimal.label} "
        f"{minimal.rate:.1f} requests/s: {ratio:.2f}x (target >= {THROUGHPUT_TARGET}x: {met})"
    )
    return "\n".join(lines)


def compare_minimal(args: argparse.Namespace) -> int:
    """`--compare-minimal`: the same turns against Precis, then the minimal app, one database."""
    api_key = secrets.token_urlsafe(24)
    plan = Plan(args.backends, args.turns, args.duration, args.max_tokens, args.seed)
    settings = {
        "api_keys": f"load:{api_key}",
        "dynamic_summary_enabled": False,
        "summary_workers": 0,
    }
    servers = (("Precis", "api"), ("minimal app", MINIMAL_APP_MODULE))
    runs: list[Compared] = []
    with tempfile.TemporaryDirectory(prefix="precis-load-") as folder:
        if args.database == "sqlite":
            database_url = f"sqlite+aiosqlite:///{Path(folder) / 'load.db'}"
        else:
            database_url = create_postgres_database(args.postgres_url)
        try:
            migrate(database_url)
            for label, module in servers:
                log_path = args.server_log or Path(folder) / f"{module}.log"
                log_start = log_path.stat().st_size if log_path.exists() else 0
                server = LiveServer(database_url, log_path, settings, module)
                with server:
                    stats, turns, elapsed = asyncio.run(run_turns(server.base_url, api_key, plan))
                    exit_status = server.stop()
                log = scan_log(read_log(log_path, log_start))
                runs.append(Compared(label, stats, turns, elapsed, log, exit_status))
            print(compare_report(runs, plan, args.database), flush=True)
            verified = run_verify(database_url)
        finally:
            if args.database == "postgresql":
                drop_postgres_database(args.postgres_url, database_url)
    reasons = [
        f"{run.label}: {reason}"
        for run in runs
        for reason in (
            ([f"{len(run.stats.errors)} HTTP errors"] if run.stats.errors else [])
            + server_failures(run.log, run.server_exit)
        )
    ]
    if verified != 0:
        reasons.append(f"scripts.verify failed (exit {verified})")
    print(
        "load: FAILED: " + "; ".join(reasons)
        if reasons
        else "load: compared: 0 HTTP errors, no traceback or ERROR line in either server's "
        "log, verify passed",
        flush=True,
    )
    return 1 if reasons else 0


# --- databases ------------------------------------------------------------------------------


def create_postgres_database(admin_url: str) -> str:
    from tests.support import scratch_db

    return asyncio.run(scratch_db.create_postgres_database(admin_url, "precis_load"))


def drop_postgres_database(admin_url: str, url: str) -> None:
    from tests.support import scratch_db

    asyncio.run(scratch_db.drop_postgres_database(admin_url, url))


def migrate(database_url: str) -> None:
    from tests.support import scratch_db

    scratch_db.migrate(database_url)


# --- command line ---------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.bench.load",
        description="Concurrent chat backends against a real server on loopback.",
    )
    parser.add_argument("--backends", type=int, default=16, help="concurrent chat backends")
    parser.add_argument("--turns", type=int, default=20, help="turns per backend (at most)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds (at most)")
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("PRECIS_TEST_POSTGRES_URL", DEFAULT_POSTGRES_ADMIN_URL),
        help="admin URL where --database postgresql creates (and drops) its database",
    )
    parser.add_argument("--message-limit", type=int, default=12, help="SUMMARY_MESSAGE_LIMIT")
    parser.add_argument("--keep-last-n", type=int, default=4, help="SUMMARY_KEEP_LAST_N")
    parser.add_argument("--max-tokens", type=int, default=600, help="history max_tokens")
    parser.add_argument("--llm-latency", type=float, default=0.05, help="fake LLM seconds/call")
    parser.add_argument("--workers", type=int, default=2, help="SUMMARY_WORKERS")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--server-log", type=Path, help="keep the server's log in this file")
    parser.add_argument(
        "--chaos",
        action="store_true",
        help="terminate the run database's connections at random intervals (PostgreSQL on "
        "loopback only)",
    )
    parser.add_argument("--chaos-kills", type=int, default=12, help="rounds of terminations")
    parser.add_argument(
        "--restart",
        action="store_true",
        help="run on a PostgreSQL cluster of the run's own and restart it during the turns "
        "(pg_ctl stop -m fast, then start)",
    )
    parser.add_argument(
        "--restart-after",
        type=float,
        default=RESTART_AFTER_SECONDS,
        help="seconds into the turns when PostgreSQL is stopped",
    )
    parser.add_argument(
        "--restart-downtime",
        type=float,
        default=RESTART_DOWNTIME_SECONDS,
        help="seconds between the stop and the start",
    )
    parser.add_argument(
        "--failover",
        action="store_true",
        help="run on a primary and a streaming standby of the run's own, lose the primary "
        "during the turns (pg_ctl stop -m immediate) and promote the standby",
    )
    parser.add_argument(
        "--replication",
        choices=["sync", "async"],
        default="sync",
        help="--failover: how the standby streams (synchronous_standby_names '*', or not)",
    )
    parser.add_argument(
        "--async-lag",
        type=float,
        default=ASYNC_LAG_SECONDS,
        help="--replication async: seconds before the loss when the standby stops receiving "
        "WAL (what is acknowledged after that is lost)",
    )
    parser.add_argument(
        "--target-session-attrs",
        choices=["primary", "read-write", "any"],
        default="primary",
        help="--failover: the multi-host URL's target_session_attrs (with any, a reconnect "
        "may land on the standby before its promotion, and its writes are refused)",
    )
    parser.add_argument(
        "--failover-after",
        type=float,
        default=FAILOVER_AFTER_SECONDS,
        help="seconds into the turns when the primary is lost",
    )
    parser.add_argument(
        "--promote-after",
        type=float,
        default=PROMOTE_AFTER_SECONDS,
        help="seconds between the primary's loss and the standby's promotion",
    )
    parser.add_argument(
        "--compare-minimal",
        action="store_true",
        help="summarization off: the same turns against Precis, then against the minimal ASGI "
        "app on the same database; report both requests/s and their ratio",
    )
    parser.add_argument(
        "--chaos-max-interval",
        type=float,
        default=3.0,
        help=f"longest pause between rounds, seconds (shortest: {CHAOS_MIN_INTERVAL_SECONDS})",
    )
    args = parser.parse_args(argv)
    if args.backends < 1 or args.turns < 1 or args.duration <= 0:
        parser.error("--backends, --turns and --duration must be positive")
    if (args.chaos or args.restart or args.failover) and args.compare_minimal:
        parser.error(
            "--compare-minimal measures throughput: leave out --chaos, --restart and --failover"
        )
    if args.failover:
        if args.database != "postgresql":
            parser.error("--failover fails PostgreSQL over: add --database postgresql")
        if args.restart or args.chaos:
            parser.error("--failover is one fault: leave out --restart and --chaos")
        if args.failover_after < 0 or args.promote_after < 0 or args.async_lag < 0:
            parser.error("--failover-after, --promote-after and --async-lag must not be negative")
        if args.async_lag > args.failover_after:
            parser.error("--async-lag must not exceed --failover-after")
    if args.restart:
        if args.database != "postgresql":
            parser.error("--restart restarts PostgreSQL: add --database postgresql")
        if args.restart_after < 0 or args.restart_downtime < 0:
            parser.error("--restart-after and --restart-downtime must not be negative")
    if args.chaos:
        if args.database != "postgresql":
            parser.error("--chaos terminates PostgreSQL connections: add --database postgresql")
        if make_url(args.postgres_url).host not in LOOPBACK_HOSTS:
            parser.error("--chaos only terminates connections of a database on loopback")
        if args.chaos_kills < 1 or args.chaos_max_interval < CHAOS_MIN_INTERVAL_SECONDS:
            parser.error(
                f"--chaos-kills must be positive, --chaos-max-interval at least "
                f"{CHAOS_MIN_INTERVAL_SECONDS}"
            )
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.compare_minimal:
        return compare_minimal(args)
    if args.restart:
        from tests.support.pg_cluster import temporary_cluster

        with temporary_cluster() as cluster:
            restart = Restart(cluster, args.restart_after, args.restart_downtime)
            return run_and_judge(args, cluster.admin_url, restart)
    if args.failover:
        from tests.support.pg_replication import replicated_pair

        with replicated_pair(synchronous=args.replication == "sync") as pair:
            lag = args.async_lag if args.replication == "async" else 0.0
            failover = Failover(pair, args.failover_after, args.promote_after, lag)
            return run_and_judge(args, pair.primary.admin_url, failover=failover)
    return run_and_judge(args, args.postgres_url)


def run_and_judge(
    args: argparse.Namespace,
    postgres_url: str,
    restart: Restart | None = None,
    failover: Failover | None = None,
) -> int:
    """The load run (on a new database of `postgres_url`'s server for PostgreSQL; with
    `failover`, reached through the pair's multi-host URL), its report and its verdict; the
    exit status."""
    from tests.support.fake_llm import running_fake_llm  # the loopback OpenAI-compatible test LLM

    api_key, operator_key = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="precis-load-") as folder:
        if args.database == "sqlite":
            database_url = f"sqlite+aiosqlite:///{Path(folder) / 'load.db'}"
        else:
            database_url = create_postgres_database(postgres_url)
            if failover is not None:
                database_url = failover.pair.failover_url(
                    make_url(database_url).database or "", args.target_session_attrs
                )
        chaos = (
            Chaos(database_url, args.chaos_kills, args.chaos_max_interval) if args.chaos else None
        )
        plan = Plan(
            args.backends,
            args.turns,
            args.duration,
            args.max_tokens,
            args.seed,
            chaos,
            restart,
            failover,
        )
        try:
            migrate(database_url)
            settings = {
                "api_keys": f"load:{api_key}",
                "operator_key": operator_key,
                "dynamic_summary_enabled": True,
                "summary_message_limit": args.message_limit,
                "summary_keep_last_n": args.keep_last_n,
                "summary_workers": args.workers,
                "summary_model": "openai/fake",
                "summary_api_key": "test",
                "summary_llm_timeout_seconds": 30,
            }
            with running_fake_llm(latency_seconds=args.llm_latency) as llm:
                settings["summary_api_base"] = llm.base_url
                log_path = args.server_log or Path(folder) / "server.log"
                log_start = log_path.stat().st_size if log_path.exists() else 0
                server = LiveServer(database_url, log_path, settings)
                with server:
                    outcome = asyncio.run(run_load(server.base_url, api_key, plan, operator_key))
                    exit_status = server.stop()
            log = scan_log(read_log(log_path, log_start))
            print(report(outcome, log, plan, args.database), flush=True)
            if exit_status not in (0, -signal.SIGTERM):
                print(f"  the server exited with {exit_status}:\n{server.log_tail()}")
            verified = run_verify(database_url)
        finally:
            # a failed-over pair is thrown away whole; its old primary is gone
            if args.database == "postgresql" and failover is None:
                drop_postgres_database(postgres_url, database_url)
    reasons = failures(outcome, log, exit_status, verified)
    print(verdict(reasons), flush=True)
    return 1 if reasons else 0


def run_verify(database_url: str) -> int:
    """`scripts.verify` on the run's database, its output shown; its exit status."""
    return subprocess.run(
        [sys.executable, "-m", "scripts.verify", "--database-url", database_url],
        cwd=REPO_ROOT,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        check=False,
    ).returncode


if __name__ == "__main__":
    raise SystemExit(main())
