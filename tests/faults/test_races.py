"""Requests racing a DELETE of their session answer a 4xx, never a 5xx, and leave no debris.

Each race is run many times with the requests started together; on PostgreSQL the
transactions truly interleave (on SQLite the writers take turns, so these also pin down that
the single-writer path gives the same answers).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest

from api import metrics, store
from api.main import create_app
from api.worker import Worker
from tests.conftest import make_settings
from tests.helpers import Gate, gated, user, wait_until
from tests.support.fake_llm import FakeLLM

ROUNDS = 30


async def test_patch_racing_delete_answers_200_or_404(api: httpx.AsyncClient) -> None:
    for round_ in range(ROUNDS):
        session = f"patch-delete-{round_}"
        assert (await api.post("/v1/sessions", json={"id": session})).status_code == 201
        patched, deleted = await asyncio.gather(
            api.patch(f"/v1/sessions/{session}", json={"metadata": {"round": round_}}),
            api.delete(f"/v1/sessions/{session}"),
        )
        assert deleted.status_code == 204, deleted.text
        assert patched.status_code in (200, 404), patched.text
        if patched.status_code == 404:
            assert patched.json()["error"] == "SessionNotFound"
        assert (await api.get(f"/v1/sessions/{session}")).status_code == 404


async def test_appends_racing_create_and_delete_answer_201_or_409(api: httpx.AsyncClient) -> None:
    statuses: set[int] = set()
    for round_ in range(ROUNDS):
        session = f"append-delete-{round_}"
        url = f"/v1/sessions/{session}"
        answers = await asyncio.gather(
            api.post("/v1/sessions", json={"id": session}),
            api.delete(url),
            api.post(f"{url}/messages", json={"messages": [user("first")]}),
            api.delete(url),
            api.post(f"{url}/messages", json={"messages": [user("second")]}),
        )
        assert all(answer.status_code < 500 for answer in answers), [a.text for a in answers]
        statuses |= {answers[2].status_code, answers[4].status_code}
        kept = await api.get(f"{url}/messages")
        if kept.status_code == 200:
            seqs = [message["seq"] for message in kept.json()["messages"]]
            assert seqs == list(range(1, len(seqs) + 1)), seqs
    assert statuses <= {201, 409}


@pytest.fixture
async def gated_client(fake_llm: FakeLLM, database_url: str, engine: Any) -> Any:
    """An app summarizing with a fake LLM whose answers to "HOLD" prompts wait for a gate."""
    gate = Gate("HOLD")
    app = create_app(
        make_settings(
            database_url,
            summary_model="openai/fake",
            summary_api_base=fake_llm.base_url,
            summary_api_key="test",
            summary_workers=0,
            dynamic_summary_enabled=False,
        )
    )
    with gated(fake_llm, gate):
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://localhost"
            ) as http,
        ):
            yield http, gate, app


async def test_compact_of_a_session_deleted_meanwhile_answers_404(gated_client: Any) -> None:
    http, gate, _app = gated_client
    messages = {"messages": [user("HOLD this thought"), user("and this one")]}
    assert (await http.post("/v1/sessions/doomed/messages", json=messages)).status_code == 201
    compacting = asyncio.create_task(
        http.post("/v1/sessions/doomed/compact", json={"trigger": "overflow_retry"})
    )
    await wait_until(gate.entered)
    assert (await http.delete("/v1/sessions/doomed")).status_code == 204
    gate.release.set()
    answer = await compacting
    assert answer.status_code == 404, answer.text
    assert answer.json() == {"error": "SessionNotFound", "detail": "session 'doomed' not found"}


async def test_a_background_job_whose_session_is_deleted_meanwhile_is_no_failure(
    gated_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A client DELETE is normal use: it must not count as a failed job nor log an ERROR."""
    http, gate, app = gated_client
    created = await http.post(
        "/v1/sessions", json={"id": "doomed-job", "settings": {"keep_last_n": 0}}
    )
    assert created.status_code == 201, created.text
    messages = {"messages": [user("HOLD this thought"), user("and this one")]}
    assert (await http.post("/v1/sessions/doomed-job/messages", json=messages)).status_code == 201
    sessionmaker = app.state.sessionmaker
    async with sessionmaker() as db, db.begin():
        session = await store.get_session(db, "default", "doomed-job")
        await store.enqueue_job(db, session.id, "proactive", "message_limit")
    worker = Worker(app.state.summarization.database, app.state.summarization, concurrency=1)
    job = await worker._claim()  # one job, run by hand: no loop to race with
    assert job is not None
    failures = metrics.JOB_FAILURES._value.get()
    running = asyncio.create_task(worker._run(job))
    await wait_until(gate.entered)
    assert (await http.delete("/v1/sessions/doomed-job")).status_code == 204
    gate.release.set()
    await running
    assert metrics.JOB_FAILURES._value.get() == failures
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
