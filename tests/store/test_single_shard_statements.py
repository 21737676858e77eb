"""Every statement the service runs for one session names that session's key (PostgreSQL).

Citus distributes every session table by the session key (`sessions.id`, `session_id`
elsewhere, docs/design.md section 6) and sends a statement to one shard only when each
distributed table it reads is filtered to one value of that key; any other statement fans out
to every shard, and a multi-shard `FOR UPDATE` is refused outright. Citus is not installed
here, so this test proves the rule on plain PostgreSQL, from the plans: it drives the service
through its HTTP API (appends with and without `client_id`s, history loads, the worker's job
claim, heartbeat and finish under the summarization lease, compact, a removal, a fork, an
export and its import, stored responses), records every statement the service runs on
asyncpg (SQLAlchemy's and the append's on the driver), with the Python function that ran it,
then runs each under `EXPLAIN` with its recorded parameters and requires of each plan:

- every node reading a session table equates the table's key with a constant in its own
  conditions (the statement's parameters are bound, so PostgreSQL prints them as constants,
  and carries `s.id = $1` through `m.session_id = s.id` into the messages scan); a key read
  from a subquery (`$0`, an InitPlan's) routes nothing;
- the constants name one session: a statement about two sessions is two shards' work;
- no `LockRows` (`FOR UPDATE`/`SHARE`) above a scan of a session table without that equality.

The reads that cross sessions by design (listings, the console, the retention sweep, the
worker's job candidates, readiness, stored responses found by id) are exempt from the first
two rules by `CROSS_SESSION_READS`, keyed by the function under `api/` or `scripts/` that ran
them: their reads only, since a write across sessions is never routed; a fork's statements
(`TWO_SESSIONS`) read the parent and write the fork, so they may name two keys. None is exempt
from the third. What only a real Citus shows (its router planner's own verdict, co-location,
reference tables) is beyond this test.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any, NamedTuple

import asyncpg
import httpx
import pytest
from asyncpg.prepared_stmt import PreparedStatement

import api
from api import locks, worker
from api.db.models import SESSION_KEYS
from api.locks import SessionLocks
from api.main import create_app
from api.offline_model import OFFLINE_MODEL
from tests.conftest import make_settings, migrated_database
from tests.helpers import append, assistant, compact, history, user, wait_for_summary

pytestmark = pytest.mark.postgresql_only

ROOT = Path(api.__file__).resolve().parents[1]

SERVICE_CODE = (f"{ROOT / 'api'}/", f"{ROOT / 'scripts'}/")
"""Where a statement's function is looked for, innermost first."""

UNIT_OF_WORK = f"{ROOT / 'api' / 'db'}/"
"""The unit of work and the driver run the statements of others: never the function named."""

OUTSIDE = "<no function under api/ or scripts/>"

CROSS_SESSION_READS = {
    "api/store/sessions.py:list_sessions": "GET /v1/sessions: a tenant's sessions, newest first",
    "api/store/summaries.py:live_summary_counts": "the live summaries of a listing's page",
    "api/store/console.py:*": "the operator console's listings of a tenant's sessions and jobs",
    "api/store/retention.py:*": "the retention sweep: which sessions have expired",
    "api/store/jobs.py:claim_job": (
        "the worker's candidates for a claim (each then claimed by a single-session UPDATE)"
    ),
    "api/store/jobs.py:pending_job_count": "/metrics: the jobs waiting, every session's",
    "api/store/background.py:claim_background": (
        "the candidates for a background response's claim (each then claimed by its key)"
    ),
    "api/store/background.py:ended_before": (
        "the retention sweep: which background responses ended long ago (each deleted by key)"
    ),
    "api/store/readiness.py:*": "/readyz: the schema's revision",
    "api/store/responses.py:*": "a stored response, found by its id alone",
    "api/store/summaries.py:live_fallback_summaries": "the repair round's fallbacks to repair",
    "api/store/summaries.py:get_summary": "GET /v1/summaries/{id}: a summary by its id alone",
}
"""Functions whose reads cross sessions by design (multi-shard on Citus), with why: a read of
theirs (a plan writing nothing) needs no key; their writes do, and they lock no rows across
sessions either."""

TWO_SESSIONS = {"api/store/forks.py:*": "a fork reads its parent's rows and writes its own"}
"""Functions whose statements name two sessions' keys, each scan one of them."""

CONDITIONS = ("Index Cond", "Recheck Cond", "Filter", "TID Cond")
"""A plan node's own conditions, where its key equality must be."""

CONSTANT = r"'?(?P<value>-?\d+)'?(?:::[a-z ]+)?"
COLUMN_EQUALS_CONSTANT = re.compile(rf"(?:\w+\.)?(?P<column>\w+) = {CONSTANT}")
"""`m.session_id = '5'::bigint`, a term of a condition as EXPLAIN prints it."""
CONSTANT_EQUALS_COLUMN = re.compile(rf"{CONSTANT} = (?:\w+\.)?(?P<column>\w+)")
"""`'5'::bigint = session_id`."""

RUNS_A_PLAN = re.compile(r"\s*(?:WITH|SELECT|INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
"""A statement EXPLAIN takes (not BEGIN, SET, SHOW ...)."""
NAMES_A_SESSION_TABLE = re.compile(rf"\b(?:{'|'.join(SESSION_KEYS)})\b", re.IGNORECASE)

SHORT_LEASE = timedelta(seconds=0.6)
"""The job's and the summarization's lease in the scenario: renewed every 0.2 s, so the
renewals run within it."""

HOLD_SECONDS = 0.5
"""How long each summarization holds its session before it summarizes: two renewals of each
lease."""

SCENARIO_SETTINGS: dict[str, Any] = {
    "summary_workers": 1,
    "summary_message_limit": 6,
    "summary_keep_last_n": 2,
}
"""Summarization on, with the offline `local` model (the default), past 6 waiting messages."""

SCENARIO_STEPS = {
    "the append": ("api/append/postgresql.py", "append"),
    "a history load": ("api/store/loader.py", ""),
    "a summary saved": ("api/store/summaries.py", "save_summary"),
    "a job claimed": ("api/store/jobs.py", "claim"),
    "a job's lease renewed": ("api/store/jobs.py", "renew"),
    "a job finished": ("api/store/jobs.py", "finish"),
    "the summarization lease taken": ("api/store/leases.py", "take"),
    "the summarization lease renewed": ("api/store/leases.py", "renew"),
    "the summarization lease checked": ("api/store/leases.py", "holds"),
    "the summarization lease given back": ("api/store/leases.py", "give_back"),
    "a removal": ("api/store/removal.py", ""),
    "a fork": ("api/store/forks.py", ""),
    "an export and an import": ("api/store/transfer.py", ""),
    "a stored response": ("api/store/responses.py", ""),
    "a background response queued": ("api/store/background.py", "queue"),
    "a background response claimed": ("api/store/background.py", "claim"),
    "a background response storing its turn": ("api/store/background.py", "start_storing"),
    "a background response finished": ("api/store/background.py", "finish"),
    "the session listing": ("api/store/sessions.py", "list_sessions"),
}
"""What the scenario must have run: a step and the module (and function name part) of it."""


class Statement(NamedTuple):
    function: str
    """`path:qualified name` of the innermost function under api/ or scripts/ that ran it."""
    query: str
    args: tuple[Any, ...]

    def first_line(self) -> str:
        return next((line.strip() for line in self.query.splitlines() if line.strip()), "")[:100]


Plan = dict[str, Any]


# --- recording --------------------------------------------------------------------------------


def service_function() -> str:
    """The innermost function of the service on the running stack (awaits link the frames of
    one task, and SQLAlchemy's greenlet awaits the driver from its caller's)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if path.startswith(SERVICE_CODE) and not path.startswith(UNIT_OF_WORK):
            return f"{Path(path).relative_to(ROOT).as_posix()}:{frame.f_code.co_qualname}"
        frame = frame.f_back
    return OUTSIDE


def _on_connection(original: Any, statements: list[Statement]) -> Any:
    async def run(self: asyncpg.Connection, query: str, *args: Any, **kwargs: Any) -> Any:
        statements.append(Statement(service_function(), query, args))
        return await original(self, query, *args, **kwargs)

    return run


def _many_on_connection(original: Any, statements: list[Statement]) -> Any:
    async def run(self: asyncpg.Connection, query: str, args: Any, **kwargs: Any) -> Any:
        rows = [tuple(row) for row in args]
        statements.append(Statement(service_function(), query, rows[0] if rows else ()))
        return await original(self, query, rows, **kwargs)

    return run


def _on_prepared(original: Any, statements: list[Statement]) -> Any:
    async def run(self: PreparedStatement, *args: Any, **kwargs: Any) -> Any:
        statements.append(Statement(service_function(), self.get_query(), args))
        return await original(self, *args, **kwargs)

    return run


@contextmanager
def recorded_statements() -> Iterator[list[Statement]]:
    """Every statement run on asyncpg meanwhile: SQLAlchemy's (prepared) and the driver's."""
    statements: list[Statement] = []
    with pytest.MonkeyPatch.context() as patch:
        for name in ("fetch", "fetchrow", "fetchval", "execute"):
            original = getattr(asyncpg.Connection, name)
            patch.setattr(asyncpg.Connection, name, _on_connection(original, statements))
        many = _many_on_connection(asyncpg.Connection.executemany, statements)
        patch.setattr(asyncpg.Connection, "executemany", many)
        for name in ("fetch", "fetchrow", "fetchval"):
            original = getattr(PreparedStatement, name)
            patch.setattr(PreparedStatement, name, _on_prepared(original, statements))
        yield statements


def held_a_while(
    hold: Callable[..., AbstractAsyncContextManager[None]],
) -> Callable[..., AbstractAsyncContextManager[None]]:
    """`SessionLocks.hold` holding its lease HOLD_SECONDS before the summarization runs."""

    @asynccontextmanager
    async def held(
        self: SessionLocks, session_key: int, wait_seconds: float
    ) -> AsyncIterator[None]:
        async with hold(self, session_key, wait_seconds):
            await asyncio.sleep(HOLD_SECONDS)
            yield

    return held


# --- the scenario -----------------------------------------------------------------------------


async def chat(http: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    """A session created, appended to past the message limit (a proactive job, which the worker
    claims, renews and finishes), its history loaded; the stored messages."""
    created = await http.post("/v1/sessions", json={"id": sid, "metadata": {"case": "shard"}})
    assert created.status_code == 201, created.text
    opening = [
        {"role": "system", "content": "Be terse.", "client_id": "c0"},
        user("My order 1234 is late.", client_id="c1"),
        assistant("Sorry to hear that."),
    ]
    stored = (await append(http, sid, *opening))["messages"]
    assert (await append(http, sid, opening[1]))["messages"][0]["seq"] == 2  # a repeat
    turns = [user(f"question {n}") if n % 2 else assistant(f"answer {n}") for n in range(8)]
    appended = await append(http, sid, *turns)
    assert appended["summarization"]["scheduled"], appended
    await wait_for_summary(http, sid)
    assert (await history(http, sid))["summaries"]
    assert (await history(http, sid, max_tokens=200))["context"]
    return [*stored, *appended["messages"]]


async def compact_and_remove(
    http: httpx.AsyncClient, sid: str, messages: list[dict[str, Any]]
) -> None:
    """An inline summarization, then a summarized message removed (its summaries erased, a
    job to make them again)."""
    await append(http, sid, user("one more question"), assistant("one more answer"))
    assert (await compact(http, sid, trigger="manual", keep_last_n=0))["summary"] is not None
    listed = await http.get(f"/v1/sessions/{sid}/messages", params={"limit": 5})
    assert listed.status_code == 200, listed.text
    removed = messages[1]["id"]
    preview = await http.get(f"/v1/sessions/{sid}/messages/{removed}/removal")
    assert preview.status_code == 200, preview.text
    assert (await http.delete(f"/v1/sessions/{sid}/messages/{removed}")).status_code == 204
    await wait_for_summary(http, sid)


async def fork_and_move(http: httpx.AsyncClient, sid: str) -> None:
    """A fork, and the session exported and imported under another id."""
    forked = await http.post(f"/v1/sessions/{sid}/fork", json={"seq": 6, "id": f"{sid}-fork"})
    assert forked.status_code == 201, forked.text
    exported = await http.get(f"/v1/sessions/{sid}/export")
    assert exported.status_code == 200, exported.text
    imported = await http.post(
        "/v1/sessions/import",
        content=exported.content,
        params={"id": f"{sid}-copy"},
        headers={"content-type": "application/x-ndjson"},
    )
    assert imported.status_code == 201, imported.text


async def respond(http: httpx.AsyncClient) -> None:
    """Two stored Responses turns of the offline model, the second continuing the first."""
    first = await http.post("/v1/responses", json={"model": OFFLINE_MODEL, "input": "Hello"})
    assert first.status_code == 200, first.text
    second = await http.post(
        "/v1/responses",
        json={"model": OFFLINE_MODEL, "input": "Again", "previous_response_id": first.json()["id"]},
    )
    assert second.status_code == 200, second.text
    assert (await http.get(f"/v1/responses/{second.json()['id']}")).status_code == 200
    queued = await http.post(
        "/v1/responses", json={"model": OFFLINE_MODEL, "input": "Later", "background": True}
    )
    assert queued.status_code == 200, queued.text
    for _ in range(500):
        polled = await http.get(f"/v1/responses/{queued.json()['id']}")
        if polled.json()["status"] == "completed":
            break
        await asyncio.sleep(0.02)
    assert polled.json()["status"] == "completed", polled.text


async def look_across(http: httpx.AsyncClient) -> None:
    """The cross-session reads of the allowlist: the listing, readiness, the metrics."""
    for path in ("/v1/sessions", "/readyz", "/metrics"):
        answer = await http.get(path)
        assert answer.status_code == 200, f"{path}: {answer.text}"


async def run_scenario(http: httpx.AsyncClient) -> None:
    sid = "shard-a"
    messages = await chat(http, sid)
    await compact_and_remove(http, sid, messages)
    await fork_and_move(http, sid)
    await respond(http)
    await look_across(http)


@pytest.fixture(scope="module")
async def distributed_url(
    tmp_path_factory: pytest.TempPathFactory, postgres_available: bool
) -> AsyncIterator[str]:
    """A PostgreSQL database of this module's own, migrated to head."""
    async with migrated_database(
        "postgresql", tmp_path_factory.mktemp("shards"), postgres_available
    ) as url:
        yield url


@pytest.fixture(scope="module")
async def recorded(distributed_url: str) -> list[Statement]:
    """The statements of the scenario, with short leases held a while so that they renew."""
    app = create_app(make_settings(distributed_url, **SCENARIO_SETTINGS))
    with pytest.MonkeyPatch.context() as patch, recorded_statements() as statements:
        patch.setattr(worker, "JOB_LEASE", SHORT_LEASE)
        patch.setattr(locks, "LEASE_DURATION", SHORT_LEASE)
        patch.setattr(SessionLocks, "hold", held_a_while(SessionLocks.hold))
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://localhost"
            ) as http,
        ):
            await run_scenario(http)
    return list(statements)


# --- plans ------------------------------------------------------------------------------------


def explained_statements(statements: list[Statement]) -> list[Statement]:
    """The statements with a plan that may read a session table, each once."""
    kept = {
        (statement.function, statement.query, repr(statement.args)): statement
        for statement in statements
        if RUNS_A_PLAN.match(statement.query) and NAMES_A_SESSION_TABLE.search(statement.query)
    }
    return list(kept.values())


async def explain(connection: asyncpg.Connection, query: str, args: tuple[Any, ...]) -> Plan:
    """`query`'s plan with `args` bound, in a transaction rolled back."""
    transaction = connection.transaction()
    await transaction.start()
    try:
        explained = await connection.fetchval(f"EXPLAIN (FORMAT JSON) {query}", *args)
    finally:
        await transaction.rollback()
    plan: Plan = json.loads(explained)[0]["Plan"]
    return plan


@asynccontextmanager
async def plain_connection(url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture(scope="module")
async def plans(recorded: list[Statement], distributed_url: str) -> list[tuple[Statement, Plan]]:
    planned = []
    async with plain_connection(distributed_url) as connection:
        for statement in explained_statements(recorded):
            try:
                plan = await explain(connection, statement.query, statement.args)
            except asyncpg.PostgresError as exc:
                raise AssertionError(
                    f"{statement.function}: `{statement.first_line()}` has no plan: {exc}"
                ) from exc
            planned.append((statement, plan))
    return planned


def nodes(plan: Plan) -> Iterator[Plan]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


def session_scans(plan: Plan) -> Iterator[Plan]:
    """The nodes under `plan` that read a session table (a ModifyTable writes what its scans
    read, or the VALUES it is given)."""
    for node in nodes(plan):
        if node.get("Relation Name") in SESSION_KEYS and node["Node Type"] != "ModifyTable":
            yield node


def _closing(text: str) -> int:
    """The index of the parenthesis closing `text`'s first character, -1 if none."""
    depth, quoted = 0, False
    for i, char in enumerate(text):
        if char == "'":
            quoted = not quoted
        elif not quoted and char in "()":
            depth += 1 if char == "(" else -1
            if depth == 0:
                return i
    return -1


def unwrapped(text: str) -> str:
    text = text.strip()
    while text.startswith("(") and _closing(text) == len(text) - 1:
        text = text[1:-1].strip()
    return text


def conjuncts(condition: str) -> list[str]:
    """The terms a condition, as EXPLAIN prints it, ANDs together at its top level."""
    condition = unwrapped(condition)
    terms, depth, quoted, start = [], 0, False, 0
    for i, char in enumerate(condition):
        if char == "'":
            quoted = not quoted
        elif not quoted and char in "()":
            depth += 1 if char == "(" else -1
        elif not quoted and depth == 0 and condition.startswith(" AND ", i):
            terms.append(condition[start:i])
            start = i + len(" AND ")
    terms.append(condition[start:])
    return [unwrapped(term) for term in terms if term.strip()]


def key_values(scan: Plan) -> set[str]:
    """The constants the scan's own conditions equate its table's session key with."""
    key = SESSION_KEYS[scan["Relation Name"]]
    values = set()
    for name in CONDITIONS:
        for term in conjuncts(scan.get(name, "")):
            match = COLUMN_EQUALS_CONSTANT.fullmatch(term) or CONSTANT_EQUALS_COLUMN.fullmatch(term)
            if match is not None and match["column"] == key:
                values.add(match["value"])
    return values


def _scan(node: Plan) -> str:
    table = node["Relation Name"]
    return f"{node['Node Type']} on {table} without {table}.{SESSION_KEYS[table]} = a constant"


def scan_violations(plan: Plan, keys_allowed: int = 1) -> list[str]:
    """Scans of session tables not routed by the key, and more keys named than allowed."""
    problems, values = [], set()
    for scan in session_scans(plan):
        found = key_values(scan)
        if not found:
            problems.append(_scan(scan))
        values |= found
    if len(values) > keys_allowed:
        problems.append(f"names {len(values)} session keys: {', '.join(sorted(values))}")
    return problems


def lock_violations(plan: Plan) -> list[str]:
    """Rows locked (FOR UPDATE/SHARE) by a scan of a session table not routed by the key."""
    return [
        f"LockRows over {_scan(scan)}"
        for node in nodes(plan)
        if node["Node Type"] == "LockRows"
        for scan in session_scans(node)
        if not key_values(scan)
    ]


def listed(function: str, allowlist: dict[str, str]) -> bool:
    return function in allowlist or f"{function.split(':')[0]}:*" in allowlist


def writes(plan: Plan) -> bool:
    return any(node["Node Type"] == "ModifyTable" for node in nodes(plan))


def routing_violations(statement: Statement, plan: Plan) -> list[str]:
    """What keeps the statement from one shard, unless it is a read that crosses sessions by
    design."""
    if listed(statement.function, CROSS_SESSION_READS) and not writes(plan):
        return []
    return scan_violations(plan, 2 if listed(statement.function, TWO_SESSIONS) else 1)


def report(found: list[tuple[Statement, str]]) -> str:
    lines = sorted({f"{s.function}: `{s.first_line()}`: {problem}" for s, problem in found})
    return f"{len(lines)} violations:\n" + "\n".join(lines)


# --- the checker can fail ---------------------------------------------------------------------


async def test_the_plan_walker_flags_a_scan_without_the_session_key(distributed_url: str) -> None:
    async with plain_connection(distributed_url) as connection:
        unrouted = await explain(connection, "SELECT * FROM messages WHERE seq = 1", ())
        routed = await explain(
            connection, "SELECT * FROM messages WHERE session_id = $1 AND seq = 1", (5,)
        )
        two = await explain(
            connection, "SELECT * FROM messages WHERE session_id = 5 OR session_id = 6", ()
        )
    assert len(scan_violations(unrouted)) == 1
    assert "on messages without messages.session_id" in scan_violations(unrouted)[0]
    assert scan_violations(routed) == []
    assert scan_violations(two), "an OR of two keys is no key equality"


async def test_the_plan_walker_flags_a_statement_naming_two_sessions(
    distributed_url: str,
) -> None:
    query = (
        "SELECT * FROM messages AS m JOIN session_summaries AS s ON s.first_message_id = m.id "
        "WHERE m.session_id = $1 AND s.session_id = $2"
    )
    async with plain_connection(distributed_url) as connection:
        two = await explain(connection, query, (5, 6))
        one = await explain(connection, query, (5, 5))
    assert scan_violations(two) == ["names 2 session keys: 5, 6"]
    assert scan_violations(two, keys_allowed=2) == []
    assert scan_violations(one) == []


async def test_the_plan_walker_flags_a_lock_across_sessions(distributed_url: str) -> None:
    async with plain_connection(distributed_url) as connection:
        locking = await explain(
            connection,
            "SELECT session_id FROM summary_jobs WHERE status = 'pending' FOR UPDATE SKIP LOCKED",
            (),
        )
        keyed = await explain(
            connection, "SELECT * FROM summary_jobs WHERE session_id = $1 FOR UPDATE", (5,)
        )
    assert lock_violations(locking) == [f"LockRows over {_scan(next(session_scans(locking)))}"]
    assert lock_violations(keyed) == []


async def test_an_allowlisted_function_crosses_sessions_in_its_reads_only(
    distributed_url: str,
) -> None:
    async with plain_connection(distributed_url) as connection:
        read = await explain(connection, "SELECT * FROM responses WHERE id = $1", ("resp_1",))
        write = await explain(connection, "DELETE FROM responses WHERE id = $1", ("resp_1",))
    function = "api/store/responses.py:delete_response"
    assert routing_violations(Statement(function, "SELECT", ()), read) == []
    assert routing_violations(Statement(function, "DELETE", ()), write) == [
        _scan(next(session_scans(write)))
    ]


# --- the service's statements -----------------------------------------------------------------


def test_the_scenario_runs_every_kind_of_statement(recorded: list[Statement]) -> None:
    functions = {statement.function for statement in recorded}
    missing = [
        step
        for step, (module, name) in SCENARIO_STEPS.items()
        if not any(f.startswith(f"{module}:") and name in f.split(":")[1] for f in functions)
    ]
    assert not missing, f"the scenario ran no statement of: {', '.join(missing)}"


def test_every_statement_for_one_session_names_its_key_by_equality(
    plans: list[tuple[Statement, Plan]],
) -> None:
    found = [
        (statement, problem)
        for statement, plan in plans
        for problem in routing_violations(statement, plan)
    ]
    if found:
        pytest.fail(report(found), pytrace=False)


def test_no_statement_locks_rows_across_sessions(plans: list[tuple[Statement, Plan]]) -> None:
    found = [(statement, problem) for statement, plan in plans for problem in lock_violations(plan)]
    if found:
        pytest.fail(report(found), pytrace=False)
