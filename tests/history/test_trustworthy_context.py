"""The context a backend loads keeps what it must: the pending question, the developer role."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api import store
from api.context import TRUNCATION_MARKER
from api.db.models import Summary, SummaryJob, SummaryMessage
from summarizer.llm import load_litellm
from tests.helpers import Gate, append, assistant, gated, run_verify, user
from tests.invariants import invariant_violations
from tests.support.fake_llm import FakeLLM

SUMMARIZING: dict[str, Any] = {"summary_workers": 0, "summary_message_limit": 10_000}
"""The local model, no background jobs: only the summaries a test asks for (`compact`)."""


@pytest.mark.parametrize("settings_overrides", [SUMMARIZING], indirect=True)
async def test_overflow_retry_keeps_the_pending_question_verbatim(
    client: httpx.AsyncClient,
) -> None:
    turns = [message for i in range(6) for message in (user(f"ask {i}"), assistant(f"answer {i}"))]
    question = "What did we decide about the MARKER-pending deployment window?"
    await append(client, "pending", *turns, user(question))
    answer = await client.post("/v1/sessions/pending/compact", json={"trigger": "overflow_retry"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["summary"]["last_seq"] == 12  # everything but the question
    context = body["history"]["context"]
    assert context[-1] == {"role": "user", "content": question}


@pytest.mark.parametrize("settings_overrides", [SUMMARIZING], indirect=True)
async def test_overflow_retry_summarizes_everything_after_an_assistant_turn(
    client: httpx.AsyncClient,
) -> None:
    await append(client, "answered", user("ask"), assistant("the answer"))
    answer = await client.post("/v1/sessions/answered/compact", json={"trigger": "overflow_retry"})
    assert answer.json()["summary"]["last_seq"] == 2


@pytest.mark.parametrize("settings_overrides", [SUMMARIZING], indirect=True)
async def test_an_inline_summarization_keeps_the_pending_question(
    client: httpx.AsyncClient,
) -> None:
    await client.post("/v1/sessions", json={"id": "inline", "settings": {"keep_last_n": 0}})
    turns = [m for i in range(20) for m in (user(f"ask {i} " * 20), assistant(f"answer {i} " * 20))]
    question = "And the MARKER-question itself?"
    await append(client, "inline", *turns, user(question))
    history = (await client.get("/v1/sessions/inline/history", params={"max_tokens": 600})).json()
    assert history["summaries"] and history["summaries"][-1]["last_seq"] == 40
    assert history["context"][-1] == {"role": "user", "content": question}


async def test_developer_messages_are_accepted_and_loaded_as_given(
    client: httpx.AsyncClient,
) -> None:
    developer = {"role": "developer", "content": "Answer in French."}
    await append(client, "dev", developer, user("hello"))
    history = (await client.get("/v1/sessions/dev/history")).json()
    assert history["context"][0] == developer
    assert history["pinned"][0]["role"] == "developer"


def hung_llm(fake_llm: FakeLLM, **extra: Any) -> dict[str, Any]:
    """The fake LLM as summarizer, with deadlines of a second; no background worker."""
    return {
        "summary_model": "openai/fake",
        "summary_api_base": fake_llm.base_url,
        "summary_api_key": "test",
        "summary_llm_timeout_seconds": 30.0,
        "summary_workers": 0,
        "summary_message_limit": 10_000,
        "summary_keep_last_n": 0,
        "summary_inline_deadline_seconds": 1.0,
        "summary_compact_deadline_seconds": 1.0,
        **extra,
    }


@pytest.fixture
async def settings_overrides(request: pytest.FixtureRequest, fake_llm: FakeLLM) -> dict[str, Any]:
    param = dict(getattr(request, "param", {}))
    if not param.pop("hung", False):
        return param
    # imported before the second the deadlines give: its import alone may take longer than
    # that on a busy machine, and the model would not even have been called
    await load_litellm()
    return hung_llm(fake_llm)


@pytest.mark.parametrize("settings_overrides", [{"hung": True}], indirect=True)
async def test_a_hung_model_does_not_stall_the_history_load(
    client: httpx.AsyncClient,
    fake_llm: FakeLLM,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    turns = [m for i in range(20) for m in (user(f"ask {i} " * 20), assistant(f"answer {i} " * 20))]
    await append(client, "hung", *turns)
    gate = Gate("ask")
    with gated(fake_llm, gate):
        answer = await client.get("/v1/sessions/hung/history", params={"max_tokens": 500})
        assert gate.entered.is_set() and not gate.release.is_set()  # the model still hangs
    assert answer.status_code == 200
    history = answer.json()
    assert history["token_estimate"] <= 500
    assert {"role": "system", "content": TRUNCATION_MARKER} in history["context"]
    assert history["summarization_pending"] is True
    async with sessionmaker() as db:
        jobs = list(await db.scalars(select(SummaryJob.reason)))
        assert jobs == ["token_limit"]  # the summarization goes on as a background job
        assert await db.scalar(select(func.count()).select_from(Summary)) == 0


@pytest.mark.parametrize("settings_overrides", [{"hung": True}], indirect=True)
async def test_a_hung_model_times_compact_out_with_nothing_stored(
    client: httpx.AsyncClient,
    fake_llm: FakeLLM,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    await append(client, "slow", user("ask one"), assistant("answer one"))
    gate = Gate("ask")
    with gated(fake_llm, gate):
        answer = await client.post("/v1/sessions/slow/compact", json={"trigger": "manual"})
    assert answer.status_code == 504
    assert answer.json()["error"] == "SummarizationTimeout"
    async with sessionmaker() as db:
        assert await db.scalar(select(func.count()).select_from(Summary)) == 0
        assert await db.scalar(select(func.count()).select_from(SummaryMessage)) == 0


async def compact_all(client: httpx.AsyncClient, session: str) -> dict[str, Any]:
    answer = await client.post(
        f"/v1/sessions/{session}/compact", json={"trigger": "manual", "keep_last_n": 0}
    )
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


@pytest.mark.parametrize("settings_overrides", [SUMMARIZING], indirect=True)
async def test_the_system_prompt_is_pinned_ahead_of_the_summaries(
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
    database_url: str,
) -> None:
    system = {"role": "system", "content": "You are a terse MARKER-system assistant."}
    developer = {"role": "developer", "content": "Never use MARKER-developer emoji."}
    late = {"role": "system", "content": "A MARKER-late system note."}
    await append(client, "pinned", system, developer, user("ask 1"), assistant("answer 1"))
    await append(client, "pinned", late, user("ask 2"), assistant("answer 2"))
    body = await compact_all(client, "pinned")
    assert (body["summary"]["first_seq"], body["summary"]["last_seq"]) == (3, 7)
    history = (await client.get("/v1/sessions/pinned/history")).json()
    assert history["context"][:2] == [system, developer]
    assert history["context"][2]["content"].startswith("Summary of earlier conversation")
    assert [m["seq"] for m in history["pinned"]] == [1, 2]
    await append(client, "pinned", user("ask 3"))
    tight = (await client.get("/v1/sessions/pinned/history", params={"max_tokens": 60})).json()
    assert tight["context"][:2] == [system, developer]  # never truncated away
    assert tight["context"][-1] == user("ask 3")
    async with sessionmaker() as db:
        session_key = (await store.get_session(db, "default", "pinned")).id
        assert await invariant_violations(db, session_key) == []
    code, out, err = await run_verify(database_url, "--session", "pinned")
    assert code == 0, out + err


@pytest.mark.parametrize(
    "settings_overrides", [{**SUMMARIZING, "summary_pin_system": False}], indirect=True
)
async def test_with_pinning_off_the_system_prompt_is_summarized(
    client: httpx.AsyncClient,
) -> None:
    system = {"role": "system", "content": "You are terse."}
    await append(client, "unpinned", system, user("ask"), assistant("answer"))
    body = await compact_all(client, "unpinned")
    assert body["summary"]["first_seq"] == 1
    history = (await client.get("/v1/sessions/unpinned/history")).json()
    assert history["pinned"] == []
    assert history["context"][0]["content"].startswith("Summary of earlier conversation")
