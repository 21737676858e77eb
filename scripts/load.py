"""Load test: concurrent simulated chat backends against a real server on loopback.

    python -m scripts.load [--backends 16] [--turns 20] [--duration 60]
                           [--database sqlite|postgresql] [--message-limit 12]

Starts `python -m api` on a free loopback port with a fresh database (an SQLite file in a
temporary folder, or a new PostgreSQL database on PRECIS_TEST_POSTGRES_URL's server, dropped
at the end), an API key, and proactive summarization on with a small message limit, against
the loopback fake OpenAI-compatible LLM of `scripts/fake_llm.py` (litellm's real HTTP path).
Each backend plays turns: append the user's message, load the history under `max_tokens`,
append the assistant's answer. It stops after `--turns` turns per backend or `--duration`
seconds, whichever comes first, waits (bounded) for background summarization to drain,
stops the server with SIGTERM, then runs `python -m scripts.verify` on every session.

Prints throughput, p50/p95/p99 per operation and the error count. Exit status 0 only when
no request failed and verify found nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as `python scripts/load.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import os
import random
import secrets
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent

START_TIMEOUT_SECONDS = 60.0
"""How long a server subprocess may take to answer /healthz (imports, then the lifespan)."""

STOP_TIMEOUT_SECONDS = 60.0
"""How long SIGTERM may take (in-flight requests finish first) before the process is killed."""

DRAIN_TIMEOUT_SECONDS = 120.0
"""How long the load test waits for background summarization to finish after the last turn."""

DEFAULT_POSTGRES_ADMIN_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
"""Where `--database postgresql` creates its database (PRECIS_TEST_POSTGRES_URL overrides)."""

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


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def settings_env(settings: Mapping[str, Any]) -> dict[str, str]:
    """Settings names (as in api.settings) as environment variables for a server process."""
    return {name.upper(): _env_value(value) for name, value in settings.items()}


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class LiveServer:
    """`python -m api` in a subprocess on a free loopback port; SIGTERM stops it gracefully.

    The database must be migrated already. `settings` are api.settings names (lower case).
    """

    def __init__(
        self, database_url: str, log_path: Path, settings: Mapping[str, Any] | None = None
    ) -> None:
        self.database_url = database_url
        self.log_path = log_path
        self.settings = dict(settings or {})
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = START_TIMEOUT_SECONDS) -> LiveServer:
        """Spawn the server and wait until /healthz answers; raise with its log if it cannot."""
        env = {
            **os.environ,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no network fetch at import
            "DATABASE_URL": self.database_url,
            **settings_env(self.settings),
        }
        command = [sys.executable, "-m", "api", "--host", "127.0.0.1", "--port", str(self.port)]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited at start:\n{self.log_tail()}")
            with suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/healthz", timeout=1.0).status_code == 200:
                    return self
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"the server did not answer within {timeout} s:\n{self.log_tail()}")

    def terminate(self) -> None:
        """Send SIGTERM: uvicorn stops listening, finishes in-flight requests, then exits."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float = STOP_TIMEOUT_SECONDS) -> int:
        """Wait for the process to exit; kill it past `timeout`. Returns its exit status."""
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> int:
        self.terminate()
        return self.wait(timeout)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if self.process is not None and self.process.poll() is None:
                self.stop()
        finally:
            self.kill()


# --- the simulated chat backends ------------------------------------------------------------


@dataclass
class Stats:
    """Latencies (seconds) per operation and the errors seen."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def record(self, operation: str, seconds: float) -> None:
        self.latencies.setdefault(operation, []).append(seconds)

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
class Plan:
    backends: int
    turns: int
    duration: float
    max_tokens: int
    seed: int


async def timed(stats: Stats, operation: str, request: Any, expected: int) -> httpx.Response | None:
    started = time.perf_counter()
    try:
        answer: httpx.Response = await request
    except httpx.HTTPError as exc:
        stats.errors.append(f"{operation}: {type(exc).__name__}: {exc}")
        return None
    stats.record(operation, time.perf_counter() - started)
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
        if not await timed(
            stats,
            "append user",
            http.post(f"{url}/messages", json={"messages": [question]}),
            201,
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
        await timed(
            stats,
            "append assistant",
            http.post(f"{url}/messages", json={"messages": [answer]}),
            201,
        )
        done += 1
    return done


async def drain(http: httpx.AsyncClient, session_ids: Sequence[str], seconds: float) -> bool:
    """Wait until no session has summarization pending; False if `seconds` ran out."""
    deadline = time.monotonic() + seconds
    pending = list(session_ids)
    while pending and time.monotonic() < deadline:
        still = []
        for session_id in pending:
            # Without max_tokens: a budget could make the loader compact inline.
            answer = await http.get(f"/v1/sessions/{session_id}/history")
            if answer.status_code != 200 or answer.json()["summarization_pending"]:
                still.append(session_id)
        pending = still
        if pending:
            await asyncio.sleep(0.2)
    return not pending


def metric_total(metrics_text: str, name: str) -> float:
    """Sum of a Prometheus counter's samples (all label sets)."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            head, _, value = line.rpartition(" ")
            if head == name or head.startswith(name + "{"):
                total += float(value)
    return total


@dataclass
class Outcome:
    stats: Stats
    elapsed: float
    turns: int
    sessions: int
    drained: bool
    summaries: float
    llm_calls: float


async def run_load(base_url: str, api_key: str, plan: Plan) -> Outcome:
    headers = {"Authorization": f"Bearer {api_key}"}
    limits = httpx.Limits(max_connections=plan.backends + 4)
    stats = Stats()
    session_ids = [f"load-{index:03d}-{uuid.uuid4().hex[:8]}" for index in range(plan.backends)]
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, limits=limits, timeout=120.0
    ) as http:
        # One warm-up turn, untimed: the first request loads the tokenizer (about a second).
        warm_up = {"role": "user", "content": "warm-up"}
        await http.post("/v1/sessions/load-warm-up/messages", json={"messages": [warm_up]})
        started = time.monotonic()
        deadline = started + plan.duration
        turns = await asyncio.gather(
            *(chat_backend(http, sid, plan, deadline, stats) for sid in session_ids)
        )
        elapsed = time.monotonic() - started
        drained = await drain(http, session_ids, DRAIN_TIMEOUT_SECONDS)
        metrics_text = (await http.get("/metrics")).text
    return Outcome(
        stats=stats,
        elapsed=elapsed,
        turns=sum(turns),
        sessions=len(session_ids),
        drained=drained,
        summaries=metric_total(metrics_text, "precis_summaries_total"),
        llm_calls=metric_total(metrics_text, "precis_llm_calls_total"),
    )


def report(outcome: Outcome, plan: Plan, database: str) -> str:
    stats = outcome.stats
    lines = [
        f"load: {plan.backends} backends x up to {plan.turns} turns on {database}, "
        f"history max_tokens={plan.max_tokens}",
        f"  {outcome.turns} turns, {stats.requests} requests in {outcome.elapsed:.1f} s: "
        f"{stats.requests / outcome.elapsed:.1f} requests/s, "
        f"{outcome.turns / outcome.elapsed:.1f} turns/s",
        f"  {'operation':<17} {'count':>6} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8}",
    ]
    for operation, values in stats.latencies.items():
        cells = [percentile(values, q) * 1000 for q in (0.50, 0.95, 0.99)] + [max(values) * 1000]
        lines.append(
            f"  {operation:<17} {len(values):>6} " + " ".join(f"{cell:>8.1f}" for cell in cells)
        )
    lines.append(
        f"  summaries stored: {outcome.summaries:.0f} ({outcome.llm_calls:.0f} LLM calls); "
        f"background work drained: {'yes' if outcome.drained else 'NO'}"
    )
    lines.append(f"  errors: {len(stats.errors)}")
    lines.extend(f"    {error}" for error in stats.errors[:20])
    return "\n".join(lines)


# --- databases ------------------------------------------------------------------------------


def create_postgres_database(admin_url: str) -> str:
    from scripts import scratch_db

    return asyncio.run(scratch_db.create_postgres_database(admin_url, "precis_load"))


def drop_postgres_database(admin_url: str, url: str) -> None:
    from scripts import scratch_db

    asyncio.run(scratch_db.drop_postgres_database(admin_url, url))


def migrate(database_url: str) -> None:
    from scripts import scratch_db

    scratch_db.migrate(database_url)


# --- command line ---------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.load",
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
    args = parser.parse_args(argv)
    if args.backends < 1 or args.turns < 1 or args.duration <= 0:
        parser.error("--backends, --turns and --duration must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from scripts.fake_llm import running_fake_llm  # the loopback OpenAI-compatible test LLM

    plan = Plan(args.backends, args.turns, args.duration, args.max_tokens, args.seed)
    api_key = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="precis-load-") as folder:
        if args.database == "sqlite":
            database_url = f"sqlite+aiosqlite:///{Path(folder) / 'load.db'}"
        else:
            database_url = create_postgres_database(args.postgres_url)
        try:
            migrate(database_url)
            settings = {
                "api_keys": f"load:{api_key}",
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
                server = LiveServer(database_url, log_path, settings)
                with server:
                    outcome = asyncio.run(run_load(server.base_url, api_key, plan))
                    exit_status = server.stop()
            print(report(outcome, plan, args.database), flush=True)
            if exit_status not in (0, -signal.SIGTERM):
                print(f"  the server exited with {exit_status}:\n{server.log_tail()}")
            verify = subprocess.run(
                [sys.executable, "-m", "scripts.verify", "--database-url", database_url],
                cwd=REPO_ROOT,
                env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
                check=False,
            )
        finally:
            if args.database == "postgresql":
                drop_postgres_database(args.postgres_url, database_url)
    # uvicorn re-raises the SIGTERM it handled once it has shut down gracefully.
    clean = not outcome.stats.errors and outcome.drained and exit_status in (0, -signal.SIGTERM)
    return 0 if clean and verify.returncode == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
