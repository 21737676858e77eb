"""Summarization wired into the service: triggers, the durable worker, compact, roll-ups."""

from __future__ import annotations

import asyncio
import math
import re
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api import store
from api.db.engine import create_database
from api.db.models import Summary, SummaryJob, SummaryMessage
from api.locks import SessionLocks
from api.main import create_app
from api.store import summaries as summary_store
from api.summarization import Summarization
from tests.conftest import make_settings
from tests.helpers import (
    WAIT_SECONDS,
    append,
    assistant,
    tool_call,
    tool_result,
    user,
    wait_for_summary,
)
from tests.invariants import invariant_violations
from tests.support.fake_llm import FakeLLM


async def session_key_of(db: AsyncSession, external_id: str) -> int:
    return (await store.get_session(db, "default", external_id)).id


@pytest.mark.parametrize(
    "settings_overrides",
    [{"summary_message_limit": 10, "summary_keep_last_n": 3}],
    indirect=True,
)
async def test_message_limit_schedules_background_summary_of_all_but_keep_last_n(
    client: httpx.AsyncClient,
) -> None:
    answers = [await append(client, "count", user(f"question {i}")) for i in range(1, 10)]
    assert not any(answer["summarization"]["scheduled"] for answer in answers)
    tenth = await append(client, "count", user("question 10"))
    assert tenth["summarization"] == {"scheduled": True, "reason": "message_limit"}
    history = await wait_for_summary(client, "count")
    [summary] = history["summaries"]
    assert (summary["first_seq"], summary["last_seq"]) == (1, 7)
    assert [m["seq"] for m in history["messages"]] == [8, 9, 10]
    assert summary["metadata"]["trigger"] == "proactive"
    assert summary["metadata"]["trigger_reason"] == "message_limit"


@pytest.mark.parametrize(
    "settings_overrides",
    [{"summary_message_limit": 10, "summary_keep_last_n": 3}],
    indirect=True,
)
async def test_keep_last_n_boundary_moves_back_before_a_tool_call(
    client: httpx.AsyncClient,
) -> None:
    for i in range(1, 6):
        await append(client, "tools", user(f"q{i}"))
    # seq 6 user, 7 call, 8 and 9 results, 10 user: keeping 3 would split 7 from 8.
    await append(client, "tools", user("q6"), tool_call("c1"), tool_result("c1"))
    await append(client, "tools", tool_result("c1"), user("q10"))
    history = await wait_for_summary(client, "tools")
    assert history["summaries"][0]["last_seq"] == 6


@pytest.mark.parametrize(
    "settings_overrides",
    [{"summary_message_limit": 1000, "summary_max_context_tokens": 200, "summary_keep_last_n": 1}],
    indirect=True,
)
async def test_token_limit_schedules_summary(client: httpx.AsyncClient) -> None:
    long_text = "The order 1234 shipped from Lyon on Monday. " * 12
    first = await append(client, "tokens", user(long_text))
    assert first["summarization"]["scheduled"] is False
    second = await append(client, "tokens", assistant(long_text))
    assert second["summarization"] == {"scheduled": True, "reason": "token_limit"}
    history = await wait_for_summary(client, "tokens")
    assert history["summaries"][0]["metadata"]["trigger_reason"] == "token_limit"
    assert history["summaries"][0]["last_seq"] == 1


@pytest.mark.parametrize(
    "settings_overrides",
    [{"dynamic_summary_enabled": False, "summary_message_limit": 2}],
    indirect=True,
)
async def test_disabled_summarization_schedules_nothing_but_compact_works(
    client: httpx.AsyncClient,
) -> None:
    answer = await append(client, "off", user("a"), assistant("b"), user("c"))
    assert answer["summarization"] == {"scheduled": False, "reason": None}
    compacted = await client.post(
        "/v1/sessions/off/compact", json={"trigger": "manual", "keep_last_n": 1}
    )
    assert compacted.status_code == 200, compacted.text
    assert compacted.json()["summary"]["last_seq"] == 2


async def test_pending_job_left_by_stopped_app_is_completed_by_next_app(
    engine: Any, database_url: str, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    overrides = {"summary_message_limit": 4, "summary_keep_last_n": 1}
    first = create_app(make_settings(database_url, summary_workers=0, **overrides))
    async with (
        first.router.lifespan_context(first),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=first), base_url="http://localhost"
        ) as http,
    ):
        answer = await append(http, "resume", *(user(f"m{i}") for i in range(4)))
        assert answer["summarization"]["scheduled"] is True
        history = (await http.get("/v1/sessions/resume/history")).json()
        assert history["summarization_pending"] is True
        assert history["summaries"] == []
    second = create_app(make_settings(database_url, summary_workers=1, **overrides))
    async with (
        second.router.lifespan_context(second),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=second), base_url="http://localhost"
        ) as http,
    ):
        history = await wait_for_summary(http, "resume")
    assert history["summaries"][0]["last_seq"] == 3
    async with sessionmaker() as db:
        assert await db.scalar(select(func.count()).select_from(SummaryJob)) == 0


@pytest.mark.parametrize(
    "settings_overrides",
    [{"summary_message_limit": 3, "summary_keep_last_n": 2}],
    indirect=True,
)
async def test_a_job_with_no_legal_cut_ends_instead_of_rescheduling_itself(
    client: httpx.AsyncClient,
) -> None:
    """Keeping 2 of [call, result, user] would split the call from its result: nothing can
    be summarized, and the job must end rather than enqueue itself again forever."""
    answer = await append(client, "uncuttable", tool_call("c1"), tool_result("c1"), user("q"))
    assert answer["summarization"]["scheduled"] is True
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while (await client.get("/v1/sessions/uncuttable/history")).json()["summarization_pending"]:
        assert asyncio.get_running_loop().time() < deadline, "the job never ended"
        await asyncio.sleep(0.05)
    history = (await client.get("/v1/sessions/uncuttable/history")).json()
    assert history["summaries"] == []
    assert [message["seq"] for message in history["messages"]] == [1, 2, 3]

    # Once a legal cut exists, the next append's job summarizes up to it.
    await append(client, "uncuttable", user("q2"), user("q3"))
    history = await wait_for_summary(client, "uncuttable")
    assert history["summaries"][0]["last_seq"] == 3


async def test_overflow_retry_compact_summarizes_all_but_the_pending_question(
    client: httpx.AsyncClient,
) -> None:
    await append(client, "overflow", *(user(f"m{i}") for i in range(6)))
    answer = await client.post("/v1/sessions/overflow/compact", json={"trigger": "overflow_retry"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["summary"]["first_seq"], body["summary"]["last_seq"]) == (1, 5)
    assert body["summary"]["metadata"]["trigger"] == "overflow_retry"
    assert [message["seq"] for message in body["history"]["messages"]] == [6]
    assert body["history"]["context"][0]["role"] == "system"


async def test_compact_with_nothing_to_summarize_returns_null_summary(
    client: httpx.AsyncClient,
) -> None:
    await append(client, "small", user("only one"))
    answer = await client.post(
        "/v1/sessions/small/compact", json={"trigger": "manual", "keep_last_n": 5}
    )
    assert answer.status_code == 200
    assert answer.json()["summary"] is None
    assert [m["seq"] for m in answer.json()["history"]["messages"]] == [1]


async def test_concurrent_compacts_keep_live_summaries_contiguous(
    client: httpx.AsyncClient, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    await append(client, "race", *(user(f"m{i}") for i in range(30)))

    async def compact_after_append(i: int) -> int:
        await append(client, "race", user(f"late {i}"))
        answer = await client.post(
            "/v1/sessions/race/compact", json={"trigger": "manual", "keep_last_n": 2}
        )
        return answer.status_code

    statuses = await asyncio.gather(*(compact_after_append(i) for i in range(10)))
    assert set(statuses) == {200}
    async with sessionmaker() as db:
        session_key = await session_key_of(db, "race")
        assert await invariant_violations(db, session_key) == []
        live = await store.live_summaries(db, session_key)
    assert live and live[0].first_seq == 1


async def test_failure_between_summary_insert_and_links_leaves_nothing(
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    database_url: str,
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await append(client, "crash", *(user(f"m{i}") for i in range(8)))
    database = create_database(engine)
    summarization = Summarization(make_settings(database_url), database, SessionLocks(database))
    async with sessionmaker() as db:
        session_key = await session_key_of(db, "crash")

    async def crash(*_args: Any) -> None:
        raise RuntimeError("injected crash after the summary insert")

    monkeypatch.setattr(summary_store, "_link_messages", crash)
    with pytest.raises(RuntimeError, match="injected crash"):
        await summarization.run(session_key, "overflow_retry", "overflow_retry", keep_last_n=0)
    async with sessionmaker() as db:
        assert await db.scalar(select(func.count()).select_from(Summary)) == 0
        assert await db.scalar(select(func.count()).select_from(SummaryMessage)) == 0
    monkeypatch.undo()
    retried = await client.post(
        "/v1/sessions/crash/compact", json={"trigger": "manual", "keep_last_n": 0}
    )
    assert retried.status_code == 200
    assert retried.json()["summary"]["message_count"] == 8


def echo_new_markers(messages: list[dict[str, Any]]) -> str:
    """A model that obeys the prompts: it repeats every marker it is asked to summarize.

    It leaves out the `<previous_summary>` section, which the prompt says not to repeat.
    """
    prompt = re.sub(
        r"<previous_summary>.*?</previous_summary>", "", messages[-1]["content"], flags=re.S
    )
    markers = dict.fromkeys(re.findall(r"MARKER-[A-Za-z0-9_-]+", prompt))
    return " ".join(markers) or "no markers"


@pytest.fixture
def marker_llm_overrides(fake_llm: FakeLLM) -> dict[str, Any]:
    fake_llm.responder = echo_new_markers
    return {
        "summary_model": "openai/fake",
        "summary_api_base": fake_llm.base_url,
        "summary_api_key": "test",
        "summary_limit": 2,
        "summary_target_tokens": 4000,
        "summary_merge_target_tokens": 8000,
        "summary_keep_last_n": 0,
        "summary_message_limit": 10_000,
        "summary_workers": 0,
    }


@pytest.fixture
def background_marker_overrides(marker_llm_overrides: dict[str, Any]) -> dict[str, Any]:
    """The perfect-recall model, with a worker and a message limit of 4."""
    return {**marker_llm_overrides, "summary_message_limit": 4, "summary_workers": 1}


@pytest.fixture
def settings_overrides(request: pytest.FixtureRequest) -> dict[str, Any]:
    if "background_marker_overrides" in request.fixturenames:
        return dict(request.getfixturevalue("background_marker_overrides"))
    if "marker_llm_overrides" in request.fixturenames:
        return dict(request.getfixturevalue("marker_llm_overrides"))
    return dict(getattr(request, "param", {}))


async def test_rollups_keep_every_marker_within_summary_limit(
    marker_llm_overrides: dict[str, Any],
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    for batch in range(11):
        messages = [user(f"note MARKER-{batch * 20 + i} about the plan") for i in range(20)]
        await append(client, "rollup", *messages)
        answer = await client.post("/v1/sessions/rollup/compact", json={"trigger": "manual"})
        assert answer.status_code == 200, answer.text
    history = (await client.get("/v1/sessions/rollup/history")).json()
    assert len(history["summaries"]) <= 2
    context_text = " ".join(str(m["content"]) for m in history["context"])
    found = {int(n) for n in re.findall(r"MARKER-(\d+)", context_text)}
    assert set(range(220)) - found == set()
    async with sessionmaker() as db:
        session_key = await session_key_of(db, "rollup")
        assert await invariant_violations(db, session_key) == []
        levels = {s.level for s in await store.live_summaries(db, session_key)}
    assert max(levels) >= 1


async def test_a_long_session_keeps_every_marker_at_a_depth_of_log2_leaves(
    marker_llm_overrides: dict[str, Any],
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    """Forty leaves: every summary a load shows records its depth, none deeper than
    ceil(log2(40)) + 2 passes, and every fact is loaded."""
    await client.post("/v1/sessions", json={"id": "deep", "settings": {"summary_limit": 3}})
    for batch in range(40):
        await append(client, "deep", *(user(f"note MARKER-{batch * 3 + i}") for i in range(3)))
        answer = await client.post("/v1/sessions/deep/compact", json={"trigger": "manual"})
        assert answer.status_code == 200, answer.text
    history = (await client.get("/v1/sessions/deep/history")).json()
    assert len(history["summaries"]) <= 3
    depths = [s["metadata"]["depth"] for s in history["summaries"]]
    assert max(depths) <= math.ceil(math.log2(40)) + 2, depths
    assert {s["metadata"]["kind"] for s in history["summaries"]} <= {"node", "cover", "leaf"}
    context_text = " ".join(str(m["content"]) for m in history["context"])
    assert {int(n) for n in re.findall(r"MARKER-(\d+)", context_text)} == set(range(120))
    async with sessionmaker() as db:
        session_key = await session_key_of(db, "deep")
        assert await invariant_violations(db, session_key) == []
        every = await store.list_summaries(db, session_key, True, 1000, None)
    assert sum(1 for s in every if s.level == 0) == 40
    merges = sum(1 for s in every if s.level > 0)
    assert merges <= 40, "no more merges than a chain's one roll-up per leaf"


@pytest.mark.parametrize("settings_overrides", [{"summary_limit": 1}], indirect=True)
async def test_compact_answers_its_summary_as_stored_after_a_rollup_absorbs_it(
    client: httpx.AsyncClient,
) -> None:
    for batch in range(2):
        await append(client, "absorbed", *(user(f"batch {batch} note {i}") for i in range(4)))
        answer = await client.post("/v1/sessions/absorbed/compact", json={"keep_last_n": 0})
        assert answer.status_code == 200, answer.text
    compacted = answer.json()
    [rollup] = compacted["history"]["summaries"]
    assert rollup["metadata"]["trigger_reason"] == "rollup"
    assert compacted["summary"]["superseded_by"] == rollup["id"]
    stored = (await client.get(f"/v1/summaries/{compacted['summary']['id']}")).json()
    assert stored["superseded_by"] == rollup["id"]


async def scheduled_after(client: httpx.AsyncClient, sid: str, *messages: dict[str, Any]) -> Any:
    """The summarization status of each append of `messages`, one message per append."""
    return [(await append(client, sid, message))["summarization"] for message in messages]


@pytest.mark.parametrize(
    "settings_overrides", [{"summary_workers": 0, "summary_message_limit": 1000}], indirect=True
)
async def test_a_sessions_own_settings_decide_its_proactive_trigger(
    client: httpx.AsyncClient,
) -> None:
    """The trigger reads the backlog with the session's overrides of the server's settings,
    for every setting it reads (on PostgreSQL the statement counts with the server's, and what
    the session's own policy reads beyond that is read again)."""

    async def session(sid: str, **settings: Any) -> str:
        created = await client.post("/v1/sessions", json={"id": sid, "settings": settings})
        assert created.status_code == 201, created.text
        return sid

    off = await session("own-off", dynamic_summary_enabled=False, message_limit=2)
    assert [s["scheduled"] for s in await scheduled_after(client, off, *map(user, "abc"))] == [
        False
    ] * 3
    limit = await session("own-limit", message_limit=3, keep_last_n=1)
    assert [s["reason"] for s in await scheduled_after(client, limit, *map(user, "abc"))] == [
        None,
        None,
        "message_limit",
    ]
    long_text = "The order 1234 shipped from Lyon on Monday. " * 12
    tokens = await session("own-tokens", max_context_tokens=200, keep_last_n=1)
    assert [
        s["reason"]
        for s in await scheduled_after(client, tokens, user(long_text), assistant(long_text))
    ] == [None, "token_limit"]
    system = {"role": "system", "content": "You are terse."}
    pinned = await session("own-pinned", message_limit=3, keep_last_n=0)
    assert [
        s["reason"] for s in await scheduled_after(client, pinned, system, *map(user, "ab"))
    ] == [None] * 3
    unpinned = await session("own-unpinned", message_limit=3, keep_last_n=0, pin_system=False)
    assert [
        s["reason"] for s in await scheduled_after(client, unpinned, system, *map(user, "ab"))
    ] == [None, None, "message_limit"]


SMALL_SERVER_LIMIT = 2
"""A server message limit that the sessions below raise: their appends count past it."""


@pytest.mark.parametrize(
    "settings_overrides",
    [{"summary_workers": 0, "summary_message_limit": SMALL_SERVER_LIMIT}],
    indirect=True,
)
async def test_a_session_raising_the_message_limit_is_summarized_at_its_own_limits(
    client: httpx.AsyncClient,
) -> None:
    """Past the server's message limit the append's statement no longer counts tokens (the
    server's policy reads none there); a session whose own limit is higher still gets both of
    its limits: its message limit, and its token limit below it."""

    async def session(sid: str, **settings: Any) -> str:
        created = await client.post("/v1/sessions", json={"id": sid, "settings": settings})
        assert created.status_code == 201, created.text
        return sid

    raised = await session("raised-limit", message_limit=5, keep_last_n=0)
    assert [s["reason"] for s in await scheduled_after(client, raised, *map(user, "abcde"))] == [
        None,
        None,
        None,
        None,
        "message_limit",
    ]
    long_text = "The order 1234 shipped from Lyon on Monday. " * 12
    tokens = await session(
        "raised-tokens", message_limit=100, max_context_tokens=200, keep_last_n=1
    )
    assert [
        s["reason"]
        for s in await scheduled_after(
            client, tokens, user("a"), user("b"), user(long_text), assistant(long_text)
        )
    ] == [None, None, None, "token_limit"]


@pytest.mark.parametrize(
    "settings_overrides",
    [{"summary_workers": 0, "dynamic_summary_enabled": False}],
    indirect=True,
)
async def test_a_session_may_summarize_where_the_server_does_not(
    client: httpx.AsyncClient,
) -> None:
    created = await client.post(
        "/v1/sessions",
        json={
            "id": "own-on",
            "settings": {"dynamic_summary_enabled": True, "message_limit": 2, "keep_last_n": 0},
        },
    )
    assert created.status_code == 201, created.text
    assert [s["reason"] for s in await scheduled_after(client, "own-on", *map(user, "ab"))] == [
        None,
        "message_limit",
    ]


async def test_a_background_job_summarizes_a_large_backlog_leaf_by_leaf(
    background_marker_overrides: dict[str, Any], client: httpx.AsyncClient
) -> None:
    """A backlog three times the message limit (after a removal, an outage, a bulk append)
    becomes three leaves, each holding no more than a leaf does, not one summary squeezing
    all of it into one target."""
    await append(client, "backlog", *(user(f"note MARKER-{n} of the plan") for n in range(12)))
    history = await wait_for_summary(client, "backlog")
    every = (await client.get("/v1/sessions/backlog/summaries?include_superseded=true")).json()
    leaves = [s for s in every["summaries"] if s["level"] == 0]
    assert sorted((s["first_seq"], s["last_seq"]) for s in leaves) == [(1, 4), (5, 8), (9, 12)]
    context_text = " ".join(str(m["content"]) for m in history["context"])
    assert {int(n) for n in re.findall(r"MARKER-(\d+)", context_text)} == set(range(12))
