"""What the test modules share, defined once: message and item builders, HTTP steps, store
steps, checks, the fake LLM's knobs and the operator tools run in process.

A helper that one module alone uses stays in that module; the pure summarizer's builders
(messages with their `seq`) are `tests/summarizer/builders.py`.
"""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api import store
from api.append import AppendOutcome, store_batch
from api.auth import DEVELOPMENT_TENANT
from api.db.engine import create_engine, create_sessionmaker
from api.db.models import Message
from api.db.transactions import Database
from api.main import create_app
from api.settings import Settings
from api.worker import JOB_LEASE
from scripts import trace_summary, verify
from summarizer.prompts import TRANSCRIPT_TAG
from tests.conftest import make_settings
from tests.invariants import invariant_violations
from tests.support.fake_llm import RESPONSES_PATH, Call, FakeLLM

WAIT_SECONDS = 30.0
"""Longest wait for background summarization before a test fails."""

# --- chat messages and Responses items ------------------------------------------------------


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def tool_call(*call_ids: str) -> dict[str, Any]:
    """An assistant message making one `lookup` call per id."""
    calls = [
        {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        for call_id in call_ids
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def tool_result(call_id: str, content: str | None = None) -> dict[str, Any]:
    """The tool's answer to `call_id` (by default `result of <call_id>`)."""
    answer = f"result of {call_id}" if content is None else content
    return {"role": "tool", "tool_call_id": call_id, "content": answer}


def nested(depth: int) -> dict[str, Any]:
    """A JSON object `depth` objects deep around a leaf."""
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        value = {"a": value}
    return value


def said(text: str, role: str = "user") -> Any:
    """A Responses message item, its content one `input_text` part (typed Any: the `openai`
    and `agents` packages' parameter types are TypedDicts a plain dict is not)."""
    return {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}


def easy_message(text: str, role: str = "user") -> Any:
    """An easy input message (`{"role", "content"}`), the plain form the Agents SDK takes."""
    return {"role": role, "content": text}


def text_of(item: Mapping[str, Any]) -> str:
    """The text of a message item, whether its content is a string or a list of parts."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content or [])


def contents(messages: Iterable[Mapping[str, Any]]) -> list[Any]:
    """Each message's `content`, as it is (a string, a list of parts or None)."""
    return [message.get("content") for message in messages]


# --- HTTP steps -----------------------------------------------------------------------------


async def append(client: httpx.AsyncClient, session: str, *messages: dict[str, Any]) -> Any:
    """The append's answer; it must be a 201."""
    answer = await client.post(f"/v1/sessions/{session}/messages", json={"messages": messages})
    assert answer.status_code == 201, answer.text
    return answer.json()


async def append_items(client: httpx.AsyncClient, sid: str, *items: dict[str, Any]) -> Any:
    """The append's answer for Responses `items`; it must be a 201."""
    answer = await client.post(
        f"/v1/sessions/{sid}/messages", json={"items": [{"item": item} for item in items]}
    )
    assert answer.status_code == 201, answer.text
    return answer.json()


async def history(client: httpx.AsyncClient, sid: str, **params: Any) -> dict[str, Any]:
    answer = await client.get(f"/v1/sessions/{sid}/history", params=params)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def compact(client: httpx.AsyncClient, sid: str, **body: Any) -> dict[str, Any]:
    """`POST .../compact` with `body`; it must be a 200."""
    answer = await client.post(f"/v1/sessions/{sid}/compact", json=body)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def wait_for_summary(client: httpx.AsyncClient, session: str) -> dict[str, Any]:
    """Poll the history until a summary is loaded and no work is pending."""
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while asyncio.get_running_loop().time() < deadline:
        loaded = (await client.get(f"/v1/sessions/{session}/history")).json()
        if loaded["summaries"] and not loaded["summarization_pending"]:
            return dict(loaded)
        await asyncio.sleep(0.05)
    raise AssertionError(f"no summary for {session} within {WAIT_SECONDS} s")


async def post_raw(client: httpx.AsyncClient, url: str, body: str | bytes) -> httpx.Response:
    """`body` posted as it is, declared as JSON."""
    return await client.post(url, content=body, headers={"content-type": "application/json"})


def metric(exposition: str, name: str) -> float:
    """The value of one unlabelled sample in Prometheus text (0 when absent)."""
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == name and not sample.labels:
                return float(sample.value)
    return 0.0


# --- checks ---------------------------------------------------------------------------------


def assert_error(answer: httpx.Response, status: int, *names: str) -> None:
    """The status, the `{"error", "detail"}` shape, and every name in the detail."""
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) == {"error", "detail"}, body
    assert isinstance(body["error"], str) and body["error"]
    if status == 422:  # body, query and path problems alike
        assert body["error"] == "ValidationFailed", body
    for name in names:
        assert name in body["detail"], body["detail"]


async def assert_session_absent(client: httpx.AsyncClient, session_id: str) -> None:
    assert (await client.get(f"/v1/sessions/{session_id}")).status_code == 404


def assert_tool_pairs_valid(messages: list[dict[str, Any]]) -> None:
    """Every tool result directly follows its call's block; every call has exactly one result."""
    pending: list[str] = []
    for message in messages:
        if message["role"] == "tool":
            assert pending and message["tool_call_id"] == pending.pop(0), message
            continue
        assert not pending, f"calls without results: {pending}"
        pending = [c["id"] for c in message.get("tool_calls") or ()]
    assert not pending, f"calls without results: {pending}"


async def assert_nothing_lost(
    sessionmaker: async_sessionmaker[AsyncSession], session: str, messages: int
) -> None:
    """The session has exactly `messages` messages, seq 1..n, and invariants 1 and 2 hold."""
    async with sessionmaker() as db:
        session_key = (await store.get_session(db, "default", session)).id
        seqs = list(
            await db.scalars(
                select(Message.seq).where(Message.session_id == session_key).order_by("seq")
            )
        )
        assert seqs == list(range(1, messages + 1))
        assert await invariant_violations(db, session_key) == []


# --- store steps ----------------------------------------------------------------------------


async def append_batch(
    db: AsyncSession, tenant: str, external_id: str, batch: Sequence[store.NewMessage]
) -> AppendOutcome:
    """`batch` stored by the service's append (what the route calls) on `db`'s database,
    summarization off; it commits on its own, so `db` must hold no write of its own."""
    engine = db.bind
    assert isinstance(engine, AsyncEngine)
    sessionmaker = create_sessionmaker(engine)
    url = engine.url.render_as_string(hide_password=False)
    settings = Settings(_env_file=None, database_url=url, dynamic_summary_enabled=False)
    outcome, _reason = await store_batch(
        Database(sessionmaker, sessionmaker, None), settings, tenant, external_id, batch
    )
    return outcome


def summary_draft(
    first_seq: int, last_seq: int, absorbs: tuple[int, ...] = ()
) -> store.SummaryDraft:
    """A summary of `first_seq..last_seq` to write through the store; a roll-up with `absorbs`."""
    return store.SummaryDraft(
        first_seq=first_seq,
        last_seq=last_seq,
        summary_text=f"summary of {first_seq}-{last_seq}",
        summary_prompt="summarize",
        model="test",
        temperature=0.0,
        target_summary_tokens=100,
        keep_last_n=0,
        approx_tokens=8,
        metadata={"algorithm": "test"},
        level=1 if absorbs else 0,
        absorbs=absorbs,
    )


async def save_summaries(db: AsyncSession, sid: str, *drafts: store.SummaryDraft) -> list[int]:
    """Save the drafts on the development tenant's session `sid` in one transaction; their ids."""
    session = await store.get_session(db, DEVELOPMENT_TENANT, sid)
    ids = [(await store.save_summary(db, session.id, draft)).id for draft in drafts]
    await db.commit()
    return ids


async def new_job(db: AsyncSession, external_id: str) -> int:
    """A session with one pending job, due now; returns the session id."""
    session = await store.create_session(db, "default", external_id, {}, {})
    await store.enqueue_job(db, session.id, "proactive", "message_limit")
    await db.commit()
    return session.id


async def claim(
    sessionmaker: async_sessionmaker[AsyncSession], lease: timedelta = JOB_LEASE
) -> store.JobRow | None:
    """The job a worker would claim now, under a lease of `lease`."""
    async with sessionmaker() as db, db.begin():
        return await store.claim_job(db, lease)


async def count(sessionmaker: async_sessionmaker[AsyncSession], model: type[Any]) -> int:
    """The number of rows of `model`'s table."""
    async with sessionmaker() as db:
        return int(await db.scalar(select(func.count()).select_from(model)) or 0)


# --- the database from outside --------------------------------------------------------------

KILL_CONNECTIONS = (
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
)
"""Terminates every other connection to the current database, as an operator would."""


async def admin_query(database_url: str, sql: str) -> list[Any]:
    """The rows of `sql`, run on an admin connection of its own (not the app's pool)."""
    admin = create_engine(database_url)
    try:
        async with admin.connect() as connection:
            return list((await connection.execute(text(sql))).all())
    finally:
        await admin.dispose()


async def kill_connections(database_url: str) -> int:
    """Terminate every other connection to the test database."""
    return len(await admin_query(database_url, KILL_CONNECTIONS))


# --- the fake LLM ---------------------------------------------------------------------------


def llm_overrides(llm: FakeLLM) -> dict[str, Any]:
    """The fake LLM as summarizer, with quick retries so a fault plays out in a second."""
    return {
        "summary_model": "openai/fake",
        "summary_api_base": llm.base_url,
        "summary_api_key": "test",
        "summary_llm_max_attempts": 2,
        "summary_llm_backoff_seconds": 0.01,
        "summary_llm_timeout_seconds": 1.0,
        "summary_keep_last_n": 2,
        "summary_message_limit": 10_000,
        "summary_workers": 0,
    }


@asynccontextmanager
async def fake_llm_app(
    fake_llm: FakeLLM, database_url: str, **overrides: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of an app summarizing with the fake LLM (no background worker)."""
    app = create_app(
        make_settings(
            database_url,
            summary_model="openai/fake",
            summary_api_base=fake_llm.base_url,
            summary_api_key="test",
            **{"summary_workers": 0, **overrides},
        )
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://localhost"
        ) as http,
    ):
        yield http


def _is_summary_call(call: Call) -> bool:
    return any(f"<{TRANSCRIPT_TAG}>" in str(message.get("content")) for message in call.messages)


def turn_calls(fake: FakeLLM, model: str = "openai/fake") -> list[Call]:
    """The model calls of conversation turns (not the summarizer's)."""
    if model.startswith("custom_openai"):
        return [call for call in fake.calls if not _is_summary_call(call)]
    return [call for call in fake.calls if call.path == RESPONSES_PATH]


class Gate:
    """Holds the fake LLM's answers to prompts carrying `marker` until released.

    With `first_only`, only the first such prompt is held: a later summarization of the same
    messages (say, a compact that failed to wait) answers at once.
    """

    def __init__(self, marker: str, first_only: bool = False) -> None:
        self.marker = marker
        self.first_only = first_only
        self.entered = threading.Event()
        self.release = threading.Event()
        self._taken = False
        self._lock = threading.Lock()

    def hold(self, prompt: str) -> None:
        with self._lock:
            if self.marker not in prompt or (self.first_only and self._taken):
                return
            self._taken = True
        self.entered.set()
        self.release.wait(WAIT_SECONDS)


@contextmanager
def gated(fake_llm: FakeLLM, *gates: Gate) -> Iterator[None]:
    """The fake LLM answers a short summary, once every gate holding the prompt lets it go;
    every gate is released on exit, so no server thread is left waiting."""

    def responder(messages: list[dict[str, Any]]) -> str:
        prompt = " ".join(str(message.get("content")) for message in messages)
        for gate in gates:
            gate.hold(prompt)
        return "A short summary of the conversation."

    fake_llm.responder = responder
    try:
        yield
    finally:
        for gate in gates:
            gate.release.set()


async def wait_until(event: threading.Event) -> None:
    """Wait (bounded) for a gate's event, set by the fake LLM's server thread."""
    assert await asyncio.to_thread(event.wait, WAIT_SECONDS), "the fake LLM was never called"


# --- the operator tools, run in process -----------------------------------------------------


async def trace(database_url: str, *args: str) -> tuple[int, str, str]:
    """`scripts.trace_summary` with `args`: its exit code, output and errors."""
    out, err = io.StringIO(), io.StringIO()
    options = trace_summary.parse_args([*args, "--database-url", database_url])
    code = await trace_summary.run(options, out, err)
    return code, out.getvalue(), err.getvalue()


async def run_verify(database_url: str, *args: str) -> tuple[int, str, str]:
    """`scripts.verify` with `args`: its exit code, output and errors."""
    out, err = io.StringIO(), io.StringIO()
    options = verify.parse_args([*args, "--database-url", database_url])
    code = await verify.run(options, out, err)
    return code, out.getvalue(), err.getvalue()
