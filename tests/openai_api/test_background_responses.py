"""Background responses through the official `openai` package: queued at once, run by the
worker, polled to completion, or followed as a stream and resumed after any event; a cancel
stops the run and stores nothing of the turn (docs/design.md, "OpenAI Responses")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI
from openai import AsyncOpenAI
from openai.types.conversations import Conversation
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseErrorEvent,
    ResponseFailedEvent,
    ResponseTextDeltaEvent,
)

from api.compat import background
from api.compat.background import discard_branch
from api.store.background import delete_background, queue_response
from tests.support.fake_llm import FakeLLM

MODEL = "openai/fake"
WINDOW = 4_000
UNFINISHED = ("queued", "in_progress")


pytestmark = pytest.mark.usefixtures("echoing_upstream")


@pytest.fixture(scope="module")
def module_settings(upstream: FakeLLM) -> dict[str, Any]:
    return {
        "summary_workers": 1,  # the worker's replica runs background responses
        "dynamic_summary_enabled": False,
        "model_allowed": MODEL,
        "model_api_base": upstream.base_url,
        "model_api_key": "sk-upstream",
        "model_context_tokens": f"{MODEL}={WINDOW}",
    }


@pytest.fixture
def client(openai_client: AsyncOpenAI) -> AsyncOpenAI:
    return openai_client


async def ended(client: AsyncOpenAI, response_id: str) -> Response:
    """The response once it is no longer queued or in progress."""
    deadline = time.monotonic() + 10.0
    while True:
        response = await client.responses.retrieve(response_id)
        if response.status not in UNFINISHED:
            return response
        assert time.monotonic() < deadline, f"{response_id} still {response.status}"
        await asyncio.sleep(0.05)


async def reaches(client: AsyncOpenAI, response_id: str, status: str) -> None:
    deadline = time.monotonic() + 10.0
    while (await client.responses.retrieve(response_id)).status != status:
        assert time.monotonic() < deadline, f"{response_id} never {status}"
        await asyncio.sleep(0.02)


async def running_slowly(
    client: AsyncOpenAI, upstream: FakeLLM, marker: str, seconds: float
) -> tuple[Conversation, Response]:
    """A background turn of a new conversation, in progress, its model answering after
    `seconds`."""
    conversation = await client.conversations.create()
    upstream.slow_next(seconds)
    queued = await client.responses.create(
        model=MODEL, input=marker, conversation=conversation.id, background=True
    )
    await reaches(client, queued.id, "in_progress")
    return conversation, queued


async def stored_items(api: httpx.AsyncClient, session: str) -> list[dict[str, Any]]:
    answer = await api.get(f"/v1/sessions/{session}/messages", params={"limit": 1000})
    if answer.status_code == 404:
        return []
    assert answer.status_code == 200, answer.text
    return [message["item"] for message in answer.json()["messages"]]


async def test_a_background_turn_is_queued_then_completed_and_stored_once(
    client: AsyncOpenAI, api: httpx.AsyncClient
) -> None:
    conversation = await client.conversations.create()
    queued = await client.responses.create(
        model=MODEL, input="MARKER-bg-one hello", conversation=conversation.id, background=True
    )
    assert queued.status == "queued" and queued.id.startswith("resp_")
    assert queued.background is True
    assert queued.output == [] and queued.model == MODEL

    done = await ended(client, queued.id)
    assert done.status == "completed" and done.output_text == "MARKER-bg-one"
    assert done.background is True and done.conversation is not None
    assert done.conversation.id == conversation.id
    items = await stored_items(api, conversation.id)
    assert [item["role"] for item in items] == ["user", "assistant"]
    inputs = await client.responses.input_items.list(done.id)
    assert "MARKER-bg-one hello" in str(inputs.data[0])
    # a cancel after the end answers the response as it is
    after = await client.responses.cancel(done.id)
    assert after.status == "completed" and await stored_items(api, conversation.id) == items


async def test_a_replica_with_a_run_free_starts_a_response_at_once_the_rest_wait(
    client: AsyncOpenAI, app: FastAPI, upstream: FakeLLM
) -> None:
    runs = app.state.settings.background_response_workers
    upstream.slow_next(0.5, times=runs + 1)
    started = []
    for number in range(runs + 1):
        queued = await client.responses.create(
            model=MODEL, input=f"MARKER-at-once-{number}", background=True
        )
        assert queued.status == "queued", "the answer to a create is the queued response"
        started.append((queued.id, (await client.responses.retrieve(queued.id)).status))
    # the first `runs` were queued claimed and run by the replica that queued them, without
    # waiting for the worker's claim; the one past them waits in the queue for a free run
    assert [status for _, status in started] == ["in_progress"] * runs + ["queued"]
    finished = [await ended(client, response_id) for response_id, _ in started]
    assert [response.output_text for response in finished] == [
        f"MARKER-at-once-{number}" for number in range(runs + 1)
    ]


async def test_a_background_chain_continues_with_previous_response_id(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM
) -> None:
    first = await ended(
        client,
        (await client.responses.create(model=MODEL, input="MARKER-c1", background=True)).id,
    )
    assert first.status == "completed"
    second = await client.responses.create(
        model=MODEL, input="MARKER-c2", previous_response_id=first.id, background=True
    )
    assert second.previous_response_id == first.id
    done = await ended(client, second.id)
    assert done.output_text.split() == [
        "MARKER-c1",
        "MARKER-c2",
    ]  # the chain's context reached the model
    assert len(await stored_items(api, first.id)) == 4


async def test_a_background_chain_that_goes_on_in_a_conversation_names_it_from_the_start(
    client: AsyncOpenAI,
) -> None:
    conversation = await client.conversations.create()
    first = await client.responses.create(
        model=MODEL, input="MARKER-in", conversation=conversation.id
    )
    queued = await client.responses.create(
        model=MODEL, input="MARKER-on", previous_response_id=first.id, background=True
    )
    assert queued.conversation is not None and queued.conversation.id == conversation.id
    done = await ended(client, queued.id)
    assert done.conversation is not None and done.conversation.id == conversation.id


async def test_a_cancelled_run_stores_nothing_and_answers_cancelled_again(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM
) -> None:
    conversation, queued = await running_slowly(client, upstream, "MARKER-cancelled", 1.0)
    with pytest.raises(openai.ConflictError) as running:
        await client.responses.input_items.list(queued.id)
    assert running.value.response.headers["retry-after"] == "1"  # stored once it completes
    cancelled = await client.responses.cancel(queued.id)
    assert cancelled.status == "cancelled" and cancelled.id == queued.id
    await asyncio.sleep(1.3)  # past the moment the model would have answered
    assert (await client.responses.retrieve(queued.id)).status == "cancelled"
    assert (await client.responses.cancel(queued.id)).status == "cancelled"
    assert await stored_items(api, conversation.id) == []
    with pytest.raises(openai.ConflictError) as never:
        await client.responses.input_items.list(queued.id)
    assert never.value.response.headers["x-should-retry"] == "false"  # never will be
    # the conversation goes on as if the cancelled turn never was
    after = await client.responses.create(
        model=MODEL, input="MARKER-next", conversation=conversation.id
    )
    assert after.output_text == "MARKER-next"


async def test_a_deleted_background_response_stores_nothing(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM
) -> None:
    conversation, queued = await running_slowly(client, upstream, "MARKER-deleted", 0.8)
    deleted = await client.responses.with_raw_response.delete(queued.id)
    assert deleted.http_response.json()["deleted"] is True
    await asyncio.sleep(1.0)
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(queued.id)
    assert await stored_items(api, conversation.id) == []


async def test_a_model_failure_fails_the_response_and_stores_nothing(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM
) -> None:
    conversation = await client.conversations.create()
    upstream.fail_next(400, message="the prompt is refused", param="input")
    queued = await client.responses.create(
        model=MODEL, input="MARKER-refused", conversation=conversation.id, background=True
    )
    failed = await ended(client, queued.id)
    assert failed.status == "failed" and failed.error is not None
    # the foreground answer's error, as the client would have got it
    assert failed.error.code == "invalid_prompt" and "400" in failed.error.message
    assert await stored_items(api, conversation.id) == []
    assert (await client.responses.cancel(queued.id)).status == "failed"


async def test_a_request_refused_at_once_queues_nothing(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM
) -> None:
    conversation = await client.conversations.create()
    refusals: list[tuple[dict[str, Any], int, str | None]] = [
        ({"store": False}, 400, "store"),
        ({"store": False, "stream": True}, 400, "store"),
        ({"model": "openai/other"}, 400, "model"),
        ({"conversation": "conv_missing"}, 404, None),
        ({"previous_response_id": "resp_missing"}, 404, "previous_response_id"),
        ({"input": [{"type": "message", "role": "user"}]}, 400, None),
    ]
    for change, status, param in refusals:
        request: dict[str, Any] = {
            "model": MODEL,
            "input": "MARKER-never",
            "background": True,
            "conversation": conversation.id,
        }
        request.update(change)
        if "previous_response_id" in change:
            del request["conversation"]
        answer = await api.post("/v1/responses", json=request)
        assert answer.status_code == status, (change, answer.text)
        body = answer.json()["error"]
        if param is not None:
            assert body["param"] == param, body
    await asyncio.sleep(0.3)
    assert upstream.calls == []
    assert await stored_items(api, conversation.id) == []


async def test_a_response_refused_after_taking_a_run_gives_it_back(
    client: AsyncOpenAI, app: FastAPI, upstream: FakeLLM
) -> None:
    """A conversation or previous response found missing when the response is queued (the run
    it would take already taken): refused 404, and the run free again for the next one."""
    runs = app.state.settings.background_response_workers
    for number in range(runs + 1):
        with pytest.raises(openai.NotFoundError):
            await client.responses.create(
                model=MODEL,
                input="MARKER-never",
                conversation=f"conv_gone{number}",
                background=True,
            )
        with pytest.raises(openai.NotFoundError):
            await client.responses.create(
                model=MODEL, input="MARKER-never", previous_response_id="resp_gone", background=True
            )
    upstream.slow_next(0.5)
    queued = await client.responses.create(model=MODEL, input="MARKER-after", background=True)
    assert (await client.responses.retrieve(queued.id)).status == "in_progress"
    assert (await ended(client, queued.id)).output_text == "MARKER-after"


async def test_cancel_is_for_background_responses_only(client: AsyncOpenAI) -> None:
    foreground = await client.responses.create(model=MODEL, input="MARKER-fg")
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.cancel(foreground.id)
    assert refused.value.body["param"] == "response_id"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError) as missing:
        await client.responses.cancel("resp_never_issued")
    assert "resp_never_issued" in missing.value.message


async def test_a_background_response_keeps_the_moment_it_was_queued(client: AsyncOpenAI) -> None:
    queued = await client.responses.create(model=MODEL, input="MARKER-when", background=True)
    done = await ended(client, queued.id)
    assert done.status == "completed" and done.created_at == queued.created_at


async def test_a_cancelled_branch_leaves_no_session_behind(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM
) -> None:
    first = await client.responses.create(model=MODEL, input="MARKER-root")
    await client.responses.create(model=MODEL, input="MARKER-on", previous_response_id=first.id)
    # a second turn after `first` branches the chain: a fork named by the new response's id
    upstream.slow_next(1.0)
    branch = await client.responses.create(
        model=MODEL, input="MARKER-branch", previous_response_id=first.id, background=True
    )
    await reaches(client, branch.id, "in_progress")
    # the run forks the chain after it has claimed the response, before the (slow) model call
    deadline = time.monotonic() + 5.0
    while (await api.get(f"/v1/sessions/{branch.id}")).status_code != 200:
        assert time.monotonic() < deadline, "the running turn made no branch"
        await asyncio.sleep(0.02)
    assert (await client.responses.cancel(branch.id)).status == "cancelled"
    deadline = time.monotonic() + 5.0
    while (await api.get(f"/v1/sessions/{branch.id}")).status_code != 404:
        assert time.monotonic() < deadline, "the cancelled turn's branch is still there"
        await asyncio.sleep(0.05)
    with pytest.raises(openai.ConflictError) as never:
        await client.responses.input_items.list(branch.id)
    assert "never were" in never.value.message
    assert len(await stored_items(api, first.id)) == 4  # the chain itself is untouched


async def test_what_a_foreground_turn_refuses_at_once_a_background_one_refuses_too(
    api: httpx.AsyncClient, upstream: FakeLLM
) -> None:
    large = {"model": MODEL, "input": "x" * 1_100_000, "background": True}
    assert (await api.post("/v1/responses", json=large)).status_code == 413
    no_room = {"model": MODEL, "input": "hi", "background": True, "max_output_tokens": 10_000}
    refused = await api.post("/v1/responses", json=no_room)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "context_length_exceeded"
    not_finite = b'{"model": "openai/fake", "input": "hi", "background": true, "top_p": NaN}'
    answer = await api.post(
        "/v1/responses", content=not_finite, headers={"content-type": "application/json"}
    )
    assert answer.status_code == 400, answer.text
    await asyncio.sleep(0.3)
    assert upstream.calls == []


async def test_a_branch_is_discarded_only_when_no_run_can_store_in_it(
    app: FastAPI, client: AsyncOpenAI, api: httpx.AsyncClient
) -> None:
    first = await client.responses.create(model=MODEL, input="MARKER-trunk")
    await client.responses.create(model=MODEL, input="MARKER-then", previous_response_id=first.id)
    stored = await ended(
        client,
        (
            await client.responses.create(
                model=MODEL, input="MARKER-kept", previous_response_id=first.id, background=True
            )
        ).id,
    )
    assert stored.status == "completed"
    database = app.state.database
    # a stale run's discard finds the branch holding a stored turn: it stays
    await discard_branch(database, "default", stored.id)
    assert len(await stored_items(api, stored.id)) == 4
    # a fork named by a response that another run still waits to run in: it stays
    waiting, left_over = "resp_waiting_branch", "resp_left_over_branch"
    for name in (waiting, left_over):
        forked = await api.post(f"/v1/sessions/{first.id}/fork", json={"seq": 2, "id": name})
        assert forked.status_code == 201, forked.text
    await queue_response(database, "default", waiting, "{}", "{}")
    await discard_branch(database, "default", waiting)
    assert (await api.get(f"/v1/sessions/{waiting}")).status_code == 200
    async with database.transaction() as db:
        await delete_background(db, "default", waiting)
    # one whose response is stored nowhere and waits nowhere: deleted
    await discard_branch(database, "default", left_over)
    assert (await api.get(f"/v1/sessions/{left_over}")).status_code == 404


# --- followed as a stream -------------------------------------------------------------------


async def followed_while(
    client: AsyncOpenAI, response_id: str, meanwhile: Awaitable[object]
) -> list[Any]:
    """The events of the response followed as a stream, `meanwhile` done while it is followed
    (the test's client reads a stream only once it has ended: the follow runs as a task)."""

    async def follow() -> list[Any]:
        return [event async for event in await client.responses.retrieve(response_id, stream=True)]

    following = asyncio.create_task(follow())
    await asyncio.sleep(0.2)
    await meanwhile
    return await following


async def test_a_background_stream_follows_the_run_and_resumes_where_it_was_left(
    client: AsyncOpenAI, api: httpx.AsyncClient, upstream: FakeLLM
) -> None:
    conversation = await client.conversations.create()
    upstream.slow_next(0.3)  # the follower reads the response queued and running first
    stream = await client.responses.create(
        model=MODEL,
        input="MARKER-streamed in the background",
        conversation=conversation.id,
        background=True,
        stream=True,
    )
    events = [event async for event in stream]

    types = [event.type for event in events]
    assert types[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert isinstance(events[0], ResponseCreatedEvent)
    assert events[0].response.status == "queued" and events[0].response.background
    assert isinstance(events[-1], ResponseCompletedEvent)
    final = events[-1].response
    deltas = [event.delta for event in events if isinstance(event, ResponseTextDeltaEvent)]
    assert "".join(deltas) == final.output_text == "MARKER-streamed"
    assert final.id == events[0].response.id and final.background is True
    # the run on the follower's replica handed it the response it stored: exactly what a read
    # of the response answers
    assert (await client.responses.retrieve(final.id)).model_dump() == final.model_dump()
    items = await stored_items(api, conversation.id)
    assert [item["role"] for item in items] == ["user", "assistant"]

    resumed = await client.responses.retrieve(final.id, stream=True, starting_after=2)
    again = [event async for event in resumed]
    assert [(e.type, e.sequence_number) for e in again] == [
        (e.type, e.sequence_number) for e in events[3:]
    ]
    assert await stored_items(api, conversation.id) == items  # followed twice, stored once


class StoredHere:
    """Runs of a replica that has just stored `body` (`background.Changes`)."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.version = 0

    async def changed_since(self, version: int, seconds: float) -> None:
        self.version += 1

    def stored_body(self, response_id: str) -> dict[str, Any] | None:
        return self.body if response_id == self.body["id"] else None


async def test_a_response_stored_on_the_followers_replica_is_not_read_back(app: FastAPI) -> None:
    """The database holds no response of this id: the follower shows the one the run handed it
    (a read would have ended the stream with `response_not_found`)."""
    response_id = "resp_" + "7" * 48
    queued = {"id": response_id, "object": "response", "status": "queued", "output": []}
    completed = {**queued, "status": "completed", "created_at": 0, "model": MODEL}
    runs = StoredHere(completed)
    followed = background.follow(app.state.database, runs, "default", queued, -1)
    events = [event async for event in followed if event is not None]
    assert [event["type"] for event in events] == [
        "response.created",
        "response.queued",
        "response.in_progress",
        "response.completed",
    ]
    assert events[-1]["response"]["status"] == "completed"


async def test_a_followed_response_ends_with_its_failure_or_cancellation(
    client: AsyncOpenAI, upstream: FakeLLM
) -> None:
    conversation, queued = await running_slowly(client, upstream, "MARKER-stopped", 1.0)
    events = await followed_while(client, queued.id, client.responses.cancel(queued.id))
    assert [event.type for event in events] == [
        "response.created",
        "response.queued",
        "response.in_progress",
        "error",
    ]
    assert isinstance(events[-1], ResponseErrorEvent)
    assert events[-1].code == "response_cancelled"

    upstream.fail_next(400, message="the prompt is refused", param="input")
    stream = await client.responses.create(
        model=MODEL,
        input="MARKER-refused",
        conversation=conversation.id,
        background=True,
        stream=True,
    )
    [*_, last] = [event async for event in stream]
    assert isinstance(last, ResponseFailedEvent)
    assert last.response.error is not None and last.response.error.code == "invalid_prompt"


async def test_only_a_background_response_streams_again(client: AsyncOpenAI) -> None:
    foreground = await client.responses.create(model=MODEL, input="MARKER-fg")
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.retrieve(foreground.id, stream=True)
    assert refused.value.param == "stream"
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve("resp_" + "0" * 48, stream=True)


async def test_a_response_deleted_while_followed_ends_its_stream_numbered(
    client: AsyncOpenAI, upstream: FakeLLM
) -> None:
    _, queued = await running_slowly(client, upstream, "MARKER-gone", 1.0)
    events = await followed_while(client, queued.id, client.responses.delete(queued.id))
    assert [event.type for event in events] == [
        "response.created",
        "response.queued",
        "response.in_progress",
        "error",
    ]
    assert [event.sequence_number for event in events] == [0, 1, 2, 3]
    assert events[-1].code == "response_not_found"


async def test_a_quiet_followed_response_gets_keep_alives(
    api: httpx.AsyncClient, client: AsyncOpenAI, upstream: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model that thinks for long sends nothing: the stream sends SSE comments meanwhile,
    which the SDK skips."""
    monkeypatch.setattr(background, "KEEP_ALIVE_SECONDS", 0.1)
    _, queued = await running_slowly(client, upstream, "MARKER-quiet", 1.0)
    followed = await api.get(f"/v1/responses/{queued.id}", params={"stream": "true"})
    assert followed.status_code == 200
    assert ": keep-alive\n\n" in followed.text
    *_, last = followed.text.rstrip().split("\n\n")
    assert last.startswith("event: response.completed")
