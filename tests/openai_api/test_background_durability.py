"""Background responses outlive the process that queued them and the worker that ran them:
a queued response waits in the database for a replica that runs the worker, a run whose
worker died is run again once its lease runs out, one that died while storing is failed
rather than stored twice, and a cancel on another replica wins over the run (docs/design.md,
"OpenAI Responses"). The module's app runs no worker: each test starts the replica that does.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import delete, update

from api import background_responses
from api.append.use_case import store_batch
from api.auth import DEVELOPMENT_TENANT
from api.background_responses import LEASE, BackgroundResponses
from api.compat import background
from api.compat.responses import Responder
from api.db.models import BACKGROUND_RESPONSES, utcnow
from api.db.transactions import CommitConnectionLost, Database
from api.errors import ConcurrentChange
from api.main import create_app
from api.schemas.responses import ResponseRequest
from api.store.background import (
    BackgroundRow,
    claim_background,
    get_background,
    queue_response,
    start_storing,
)
from api.store.responses import NewResponse, get_response, insert_response
from tests.conftest import make_settings
from tests.helpers import WAIT_SECONDS
from tests.support.fake_llm import FakeLLM

MODEL = "openai/fake"
DEAD_LEASE = timedelta(seconds=0.3)
"""The lease a worker that dies at once took: run again this soon after."""


pytestmark = pytest.mark.usefixtures("echoing_upstream")


@pytest.fixture(scope="module")
def module_settings(upstream: FakeLLM) -> dict[str, Any]:
    return {
        "summary_workers": 0,  # this replica queues and answers, and runs nothing
        "dynamic_summary_enabled": False,
        "model_allowed": MODEL,
        "model_api_base": upstream.base_url,
        "model_api_key": "sk-upstream",
        "model_context_tokens": f"{MODEL}=4000",
    }


@asynccontextmanager
async def worker_replica(
    database_url: str, settings: dict[str, Any]
) -> AsyncIterator[httpx.AsyncClient]:
    """Another replica on the same database, running the worker."""
    replica = create_app(make_settings(database_url, **{**settings, "summary_workers": 1}))
    async with replica.router.lifespan_context(replica):
        transport = httpx.ASGITransport(app=replica)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            yield http


async def queue(api: httpx.AsyncClient, marker: str) -> tuple[str, str]:
    """A conversation and a background response queued in it."""
    conversation = (await api.post("/v1/conversations", json={})).json()["id"]
    answer = await api.post(
        "/v1/responses",
        json={"model": MODEL, "input": marker, "conversation": conversation, "background": True},
    )
    assert answer.status_code == 200 and answer.json()["status"] == "queued", answer.text
    return conversation, answer.json()["id"]


async def ended(api: httpx.AsyncClient, response_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 15.0
    while True:
        body: dict[str, Any] = (await api.get(f"/v1/responses/{response_id}")).json()
        if body["status"] not in ("queued", "in_progress"):
            return body
        assert time.monotonic() < deadline, f"{response_id} still {body['status']}"
        await asyncio.sleep(0.05)


async def items(api: httpx.AsyncClient, conversation: str) -> list[dict[str, Any]]:
    answer = await api.get(f"/v1/conversations/{conversation}/items", params={"order": "asc"})
    assert answer.status_code == 200, answer.text
    data: list[dict[str, Any]] = answer.json()["data"]
    return data


async def dead_claim(app: FastAPI, response_id: str, storing: bool = False) -> None:
    """Claim the (oldest queued) response as a worker that then dies: its lease runs out
    after DEAD_LEASE; `storing`: it died having taken the right to store."""
    async with app.state.database.transaction() as db:
        claim = await claim_background(db, DEAD_LEASE)
    assert claim is not None and claim.id == response_id
    if storing:
        assert await start_storing(app.state.database, claim)


async def test_a_queued_response_waits_for_a_worker_and_a_dead_workers_run_runs_again(
    app: FastAPI, api: httpx.AsyncClient, database_url: str, module_settings: dict[str, Any]
) -> None:
    abandoned_conversation, abandoned = await queue(api, "MARKER-abandoned")
    waiting_conversation, waiting = await queue(api, "MARKER-waiting")
    await dead_claim(app, abandoned)
    await asyncio.sleep(0.2)
    # nothing runs them on this replica
    assert (await api.get(f"/v1/responses/{waiting}")).json()["status"] == "queued"
    async with worker_replica(database_url, module_settings) as replica:
        for conversation, response_id, marker in (
            (waiting_conversation, waiting, "MARKER-waiting"),
            (abandoned_conversation, abandoned, "MARKER-abandoned"),
        ):
            done = await ended(replica, response_id)
            assert done["status"] == "completed", done
            assert done["output"][0]["content"][0]["text"] == marker
            stored = await items(api, conversation)
            assert [item["role"] for item in stored] == ["user", "assistant"]  # once each
    async with app.state.database.reading() as db:
        assert await get_background(db, "default", abandoned) is None


async def test_a_run_that_died_while_storing_fails_rather_than_storing_twice(
    app: FastAPI, api: httpx.AsyncClient, database_url: str, module_settings: dict[str, Any]
) -> None:
    conversation, response_id = await queue(api, "MARKER-storing")
    await dead_claim(app, response_id, storing=True)
    assert (await api.get(f"/v1/responses/{response_id}")).json()["status"] == "in_progress"
    async with worker_replica(database_url, module_settings) as replica:
        failed = await ended(replica, response_id)
    assert failed["status"] == "failed", failed
    assert failed["error"]["code"] == "server_error"
    assert "may hold it" in failed["error"]["message"]
    assert await items(api, conversation) == []


async def test_a_cancel_on_another_replica_wins_over_the_model_answering(
    api: httpx.AsyncClient, upstream: FakeLLM, database_url: str, module_settings: dict[str, Any]
) -> None:
    upstream.slow_next(0.6)  # the model answers before the run's next heartbeat
    async with worker_replica(database_url, module_settings) as replica:
        conversation, response_id = await queue(api, "MARKER-raced")
        deadline = time.monotonic() + 5.0
        while (await api.get(f"/v1/responses/{response_id}")).json()["status"] != "in_progress":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        # this replica runs nothing: only the database tells the run it was cancelled
        cancelled = await api.post(f"/v1/responses/{response_id}/cancel")
        assert cancelled.json()["status"] == "cancelled", cancelled.text
        while not upstream.calls:  # the model answers
            assert time.monotonic() < deadline + WAIT_SECONDS
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # the run takes the answer and finds itself cancelled
        assert (await replica.get(f"/v1/responses/{response_id}")).json()["status"] == "cancelled"
    assert len(upstream.calls) == 1  # the model answered, and nothing of it was kept
    assert await items(api, conversation) == []


async def test_a_run_cut_short_by_a_stop_goes_back_to_the_queue_and_runs_again(
    api: httpx.AsyncClient, upstream: FakeLLM, database_url: str, module_settings: dict[str, Any]
) -> None:
    upstream.slow_next(3.0)
    async with worker_replica(database_url, module_settings):
        conversation, response_id = await queue(api, "MARKER-stopped")
        deadline = time.monotonic() + 5.0
        while (await api.get(f"/v1/responses/{response_id}")).json()["status"] != "in_progress":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
    # the stop did not wait for the model's answer (it comes 3 s after the call), and stored
    # nothing of the run
    assert upstream.calls == []
    assert (await api.get(f"/v1/responses/{response_id}")).json()["status"] == "queued"
    assert await items(api, conversation) == []
    async with worker_replica(database_url, module_settings) as replica:
        done = await ended(replica, response_id)
    assert done["status"] == "completed", done
    assert [item["role"] for item in await items(api, conversation)] == ["user", "assistant"]


class RunsHere:
    """A replica's runs with a slot free, as `background.queue` hands a response to them;
    records what it was handed."""

    lease = LEASE

    def __init__(self) -> None:
        self.run: list[BackgroundRow] = []
        self.slots_given_back = 0
        self.woken = False

    async def take_slot(self) -> bool:
        return True

    def give_back_slot(self) -> None:
        self.slots_given_back += 1

    async def run_claimed(self, claim: BackgroundRow) -> bool:
        self.run.append(claim)
        return True

    def wake(self) -> None:
        self.woken = True


async def test_a_run_whose_append_stored_nothing_for_a_concurrent_change_runs_again(
    api: httpx.AsyncClient,
    database_url: str,
    module_settings: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The append refuses the turn for a concurrent change (`ConcurrentChange`: nothing of it
    stored) after the run took the right to store: the response goes back to the queue and
    completes, its turn stored once, where it failed as "the conversation may hold it"."""
    monkeypatch.setattr(background_responses, "TRANSIENT_DELAY", timedelta(seconds=0.1))
    appended = store_batch
    refusals: list[int] = []

    async def changed_once(*args: Any, **options: Any) -> Any:
        if not refusals:
            refusals.append(1)
            raise ConcurrentChange("the session was deleted while this append ran; retry")
        return await appended(*args, **options)

    monkeypatch.setattr("api.compat.responses.store_batch", changed_once)
    conversation, response_id = await queue(api, "MARKER-again")
    async with worker_replica(database_url, module_settings):
        done = await ended(api, response_id)
    assert refusals == [1]
    assert done["status"] == "completed", done
    assert [item["role"] for item in await items(api, conversation)] == ["user", "assistant"]


async def queued_here(app: FastAPI, marker: str) -> tuple[dict[str, Any], RunsHere]:
    """`marker` queued as a background response by this replica's queue (the answer), and the
    runs it handed it to (`RunsHere`)."""
    state = app.state
    responder = Responder(state.database, state.summarization, state.settings, state.token_ratios)
    runs = RunsHere()
    request = ResponseRequest.model_validate({"model": MODEL, "input": marker})
    return await background.queue(responder, runs, DEVELOPMENT_TENANT, request), runs


async def test_a_queued_response_whose_commit_answer_was_lost_runs_only_as_still_claimed(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    database: Database = app.state.database
    committed = queue_response
    claimed_elsewhere: list[BackgroundRow] = []

    async def write_then_lose_the_answer(*args: Any, **options: Any) -> Any:
        await committed(*args, **options)
        # the answer is read back after the lease ran out and another replica claimed the row
        async with database.transaction() as db:
            await db.execute(
                update(BACKGROUND_RESPONSES)
                .where(BACKGROUND_RESPONSES.c.status == "in_progress")
                .values(claimed_until=utcnow() - timedelta(seconds=1))
            )
            claimed_elsewhere.append(await claim_background(db, LEASE))  # type: ignore[arg-type]
        raise CommitConnectionLost("the connection was lost during COMMIT")

    monkeypatch.setattr("api.compat.background.queue_response", write_then_lose_the_answer)
    queued, runs = await queued_here(app, "MARKER-lost-answer")
    monkeypatch.undo()
    [other] = claimed_elsewhere
    assert other.id == queued["id"] and other.attempts == 2
    assert runs.run == [], "the replica that claimed it meanwhile runs it, not this one too"
    assert runs.slots_given_back == 1 and runs.woken


async def test_a_queued_response_that_ran_before_its_lost_answer_was_read_is_not_queued_again(
    app: FastAPI, api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The insert landed and its answer was lost; meanwhile a worker ran the response, stored
    it and deleted its row. Read back, the stored response says it landed: not queued again
    (a second run would store the turn twice)."""
    database: Database = app.state.database
    conversation = (await api.post("/v1/conversations", json={})).json()["id"]
    done = await api.post(
        "/v1/responses", json={"model": MODEL, "input": "MARKER-done", "conversation": conversation}
    )
    assert done.status_code == 200, done.text
    async with database.reading() as db:
        earlier = await get_response(db, DEVELOPMENT_TENANT, done.json()["id"])
    assert earlier is not None
    inserted = queue_response

    async def ran_meanwhile(*args: Any, **options: Any) -> Any:
        row = await inserted(*args, **options)
        assert row is not None
        async with database.transaction() as db:  # its run stored it and ended
            await db.execute(
                delete(BACKGROUND_RESPONSES).where(BACKGROUND_RESPONSES.c.id == row.id)
            )
        await insert_response(
            database,
            NewResponse(
                id=row.id,
                tenant=DEVELOPMENT_TENANT,
                session_key=earlier.session_key,
                first_seq=earlier.first_seq,
                last_seq=earlier.last_seq,
                input_count=1,
                previous_response_id=None,
                body=json.dumps({"id": row.id}),
            ),
        )
        raise ConnectionResetError("the connection was lost before the answer")

    monkeypatch.setattr("api.compat.background.queue_response", ran_meanwhile)
    queued, runs = await queued_here(app, "MARKER-ran")
    monkeypatch.undo()
    async with database.reading() as db:
        assert await get_background(db, DEVELOPMENT_TENANT, queued["id"]) is None, "not again"
    assert runs.run == [] and runs.slots_given_back == 1


async def test_a_queued_response_whose_insert_was_lost_before_it_landed_is_queued_again(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    inserted = queue_response
    tries: list[int] = []

    async def lost_once(*args: Any, **options: Any) -> Any:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionResetError("the connection was lost before the insert")
        return await inserted(*args, **options)

    monkeypatch.setattr("api.compat.background.queue_response", lost_once)
    queued, runs = await queued_here(app, "MARKER-again")
    monkeypatch.undo()
    assert len(tries) == 2
    [claim] = runs.run
    assert claim.id == queued["id"] and claim.attempts == 1 and runs.slots_given_back == 0


async def test_a_response_queued_claimed_while_its_replica_stops_goes_back_to_the_queue(
    app: FastAPI,
) -> None:
    database: Database = app.state.database
    responder = Responder(
        database, app.state.summarization, app.state.settings, app.state.token_ratios
    )
    runs = BackgroundResponses(responder, concurrency=1)
    runs.start()
    assert await runs.take_slot()
    claim = await queue_response(
        database, DEVELOPMENT_TENANT, "resp_stopping", '{"model": "m"}', "{}", LEASE
    )
    assert claim is not None
    stopping = asyncio.create_task(runs.stop())  # waits for the slot the queue holds
    await asyncio.sleep(0.05)
    assert not await runs.run_claimed(claim), "a stopping replica runs nothing new"
    await asyncio.wait_for(stopping, WAIT_SECONDS)
    async with database.reading() as db:
        row = await get_background(db, DEVELOPMENT_TENANT, "resp_stopping")
    assert row is not None and row.status == "queued", "another replica runs it at once"
