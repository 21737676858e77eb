"""Background responses, as the client sees them: queue one, read it, cancel it, delete it.

`POST /v1/responses` with `background: true` is checked as a foreground request is (the
model, the input's shape and size, the model's window, the conversation or previous response
it names), queued (`api.store.background`) and answered at once, `queued`; the worker runs it
(`api.background_responses`), on this replica at once when it has a run free. Until its turn
is stored, `GET /v1/responses/{id}` answers it as queued, in progress, failed or cancelled;
once stored, it is a stored response like any
other (`api.compat.stored_responses`). Reading, cancelling and deleting a response by its id
look at both. A background response can be followed as a stream (`follow`: with `stream: true`,
or `GET /v1/responses/{id}?stream=true&starting_after=N`): the events of the response as it
stands (`api.compat.replayed_events`), read again until it has ended.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, Protocol

from api.compat import replayed_events
from api.compat.response_checks import checked_model
from api.compat.response_events import new_id
from api.compat.responses import Responder
from api.compat.stored_responses import not_found
from api.conversations import CONVERSATION_ID_PREFIX, ConversationNotFound
from api.db.transactions import (
    Database,
    connection_lost_or_commit_unknown,
    current_budget,
    retry_budget,
)
from api.errors import ServiceUnavailable, SessionNotFound
from api.openai_errors import OpenAIError
from api.schemas.responses import ResponseRequest
from api.store import delete_session, get_session
from api.store.background import (
    ENDED,
    WAITING,
    BackgroundRow,
    cancel_background,
    delete_background,
    get_background,
    queue_response,
)
from api.store.responses import delete_response, get_response

SHOWN_STATUS = {"storing": "in_progress"}
"""A response whose turn is being stored is still in progress to the client."""

FOLLOW_FIRST_WAIT_SECONDS = 0.05
"""The first wait between two reads of a followed response, doubled after each read: a short
run on another replica is followed closely."""

FOLLOW_LONGEST_WAIT_SECONDS = 1.0
"""The longest wait between two reads of a followed response: a long run costs a read a
second."""

KEEP_ALIVE_SECONDS = 15.0
"""A followed response that gains no event for this long gets a keep-alive (`KEEP_ALIVE`): a
proxy cuts a connection idle for a minute, and a model may think for longer."""

KEEP_ALIVE = None
"""What `follow` yields for a keep-alive, which the stream sends as an SSE comment."""

ECHOED = ("tool_choice", "parallel_tool_calls", "temperature", "top_p", "text", "reasoning")
"""Request fields a queued response shows as given (OpenAI's response object echoes them)."""


class Runs(Protocol):
    """The runs of this replica (`api.background_responses.BackgroundResponses`), as a queued
    response is handed to them."""

    lease: timedelta

    async def take_slot(self) -> bool: ...

    def give_back_slot(self) -> None: ...

    async def run_claimed(self, claim: BackgroundRow) -> bool: ...

    def wake(self) -> None: ...


async def queue(
    responder: Responder, runs: Runs, tenant: str, request: ResponseRequest
) -> dict[str, Any]:
    """Check the request as a foreground turn would be checked, queue it, answer `queued`.
    When this replica has a run free, the response is queued claimed and run here at once;
    otherwise a worker (here or on another replica) claims it."""
    request.model = checked_model(responder.settings, request)
    await responder.fitted(request)
    response_id = new_id("resp")
    database = responder.database
    async with database.reading() as db:
        conversation_id = await _checked_context(db, tenant, request)
    queued_body = _queued_body(request, response_id, conversation_id)
    body = json.dumps(queued_body, allow_nan=False)  # numbers checked by WireRequest
    given = request.model_dump_json(exclude_unset=True)
    claimed_for = runs.lease if await runs.take_slot() else None
    row: BackgroundRow | None = None
    try:
        row = await _queued(database, tenant, response_id, given, body, claimed_for)
    finally:
        still_ours = row is not None and row.status == "in_progress" and row.attempts == 1
        if claimed_for is not None and not still_ours:
            # not landed, or claimed by another replica since (read back after a lost
            # COMMIT, its lease run out): run wherever it is claimed, never twice
            claimed_for = None
            runs.give_back_slot()
    if row is not None and claimed_for is not None:
        await runs.run_claimed(row)
    else:
        runs.wake()
    queued: dict[str, Any] = json.loads(body)
    return queued


async def _queued(
    database: Database,
    tenant: str,
    response_id: str,
    given: str,
    body: str,
    claimed_for: timedelta | None,
) -> BackgroundRow | None:
    """The response's row as queued, or as read back after a lost connection (None: it
    landed, ran and was stored meanwhile, its row gone); queued again only when neither its
    row nor its stored response is there, within the retry budget."""
    budget = current_budget()
    while True:
        try:
            queued = await queue_response(database, tenant, response_id, given, body, claimed_for)
        except Exception as exc:
            if not connection_lost_or_commit_unknown(exc):
                raise
            lost: Exception | None = exc
        else:
            if queued is not None:
                return queued
            lost = None  # an earlier try landed after all
        # the client never got the id to read it back: ask whether the row landed
        async with database.reading() as db:
            row = await get_background(db, tenant, response_id)
            stored = await get_response(db, tenant, response_id)
        if row is not None or stored is not None:
            return row
        if lost is None or not await budget.wait_to_retry(lost, "queueing a response", "write"):
            raise lost or ServiceUnavailable("queueing the background response was lost; retry")


async def _checked_context(db: Any, tenant: str, request: ResponseRequest) -> str | None:
    """The conversation the turn goes on in (None: none), once the conversation or previous
    response the request names is found (404 otherwise): the one named, or the one a previous
    response's chain goes on in (as `api.compat.stored_responses.continuation` finds it)."""
    conversation_id = request.conversation_id()
    if conversation_id is not None:
        try:
            session = await get_session(db, tenant, conversation_id)
        except SessionNotFound:
            raise ConversationNotFound(conversation_id) from None
        if session.format not in (None, "responses"):
            raise ConversationNotFound(conversation_id)
        return conversation_id
    if request.previous_response_id is None:
        return None
    previous = await get_response(db, tenant, request.previous_response_id)
    if previous is None:
        raise not_found(request.previous_response_id, "previous_response_id")
    newest = previous.session_last_seq == previous.last_seq
    in_conversation = previous.session_id.startswith(CONVERSATION_ID_PREFIX)
    return previous.session_id if newest and in_conversation else None


def _queued_body(
    request: ResponseRequest, response_id: str, conversation_id: str | None
) -> dict[str, Any]:
    """The response object of a queued request: OpenAI's fields, as far as they are known."""
    given = request.model_dump(exclude_unset=True)
    body: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "queued",
        "background": True,
        "error": None,
        "incomplete_details": None,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "metadata": given.get("metadata") or {},
        "model": request.model,
        "output": [],
        "previous_response_id": request.previous_response_id,
        "store": True,
        "tools": request.tools or [],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "truncation": request.truncation or "auto",
        "usage": None,
    }
    body.update({name: given[name] for name in ECHOED if name in given})
    if conversation_id is not None:
        body["conversation"] = {"id": conversation_id}
    return body


def shown(row: BackgroundRow) -> dict[str, Any]:
    """A background response not stored yet, as `GET /v1/responses/{id}` answers it."""
    body: dict[str, Any] = json.loads(row.body)
    body["status"] = SHOWN_STATUS.get(row.status, row.status)
    return body


async def view(database: Database, tenant: str, response_id: str) -> dict[str, Any]:
    """`GET /v1/responses/{id}`: the stored response as answered, else the background
    response not stored yet; 404 for any other id."""
    async with database.reading() as db:
        # the background row first: a run stores its response, then deletes the row
        row = await get_background(db, tenant, response_id)
        stored = await get_response(db, tenant, response_id)
    if stored is not None:
        body: dict[str, Any] = json.loads(stored.body)
        return body
    if row is None:
        raise not_found(response_id)
    return shown(row)


class Changes(Protocol):
    """The runs of this replica (`api.background_responses.BackgroundResponses`), as a follower
    waits for them: a response one of them claimed, stored or ended is read again at once,
    one stored here shown as stored without reading it back."""

    @property
    def version(self) -> int: ...

    async def changed_since(self, version: int, seconds: float) -> None: ...

    def stored_body(self, response_id: str) -> dict[str, Any] | None: ...


async def follow(
    database: Database,
    changes: Changes,
    tenant: str,
    body: dict[str, Any],
    starting_after: int,
) -> AsyncIterator[dict[str, Any] | None]:
    """The events of the background response `body` (as `view` answered it) numbered after
    `starting_after`, then those it gains, read again until it has ended: at once when a run
    on this replica claims, stores or ends a response (one it stored shown as stored without
    reading it back), else after a wait that doubles up to a second
    (a run on another replica); `KEEP_ALIVE` after KEEP_ALIVE_SECONDS without an event. A
    response deleted meanwhile ends the stream with an `error` event (`stream_error`)."""
    sent = starting_after
    wait = FOLLOW_FIRST_WAIT_SECONDS
    response_id = body["id"]
    seen = changes.version
    quiet_since = time.monotonic()
    while True:
        events = replayed_events.followed(body)
        for event in events[sent + 1 :]:
            yield event
            quiet_since = time.monotonic()
        sent = max(sent, len(events) - 1)
        if body.get("status") in replayed_events.ENDED:
            return
        if time.monotonic() - quiet_since >= KEEP_ALIVE_SECONDS:
            yield KEEP_ALIVE
            quiet_since = time.monotonic()
        await changes.changed_since(seen, wait)
        wait = min(wait * 2, FOLLOW_LONGEST_WAIT_SECONDS)
        seen = changes.version
        stored = changes.stored_body(response_id)
        if stored is not None:  # stored by a run here a moment ago: no need to read it back
            body = stored
            continue
        try:
            # each read waits out a lost connection as a request of its own would
            with retry_budget(current_budget().policy):
                body = await view(database, tenant, response_id)
        except OpenAIError as exc:
            yield stream_error(sent, exc.code or "response_not_found", exc.message)
            return


def stream_error(sent: int, code: str, message: str) -> dict[str, Any]:
    """The `error` event that ends a followed stream, numbered after the last event `sent`: a
    client resumes after that one."""
    return {
        "type": "error",
        "code": code,
        "message": message,
        "param": None,
        "sequence_number": sent + 1,
    }


async def cancel(database: Database, tenant: str, response_id: str) -> dict[str, Any]:
    """Cancel a queued or running background response: it stores nothing. One that has ended
    (completed, failed, cancelled) answers as it is, and so does one whose turn is being
    stored (it completes). A response that was not background is 400."""
    async with database.reading() as db:
        row = await get_background(db, tenant, response_id)
    if row is None:
        ended = await view(database, tenant, response_id)
        if not ended.get("background"):
            raise OpenAIError(
                400, "Only background responses can be cancelled.", param="response_id"
            )
        return ended
    if row.status not in WAITING:
        return await view(database, tenant, response_id)
    body = shown(row)
    body.update(status="cancelled")

    async def cancelled(db: Any) -> bool:
        return await cancel_background(db, tenant, response_id, json.dumps(body))

    if await database.write(cancelled, repeatable=True):
        await discard_branch(database, tenant, response_id)  # a run may have made it before
        return body
    # it moved on meanwhile (storing, ended, or deleted): answer it as it is now
    return await view(database, tenant, response_id)


async def delete(database: Database, tenant: str, response_id: str) -> dict[str, Any]:
    """Delete a stored response (its items stay in its session), or a background one not
    stored yet (a run of it then stores nothing)."""

    async def remove(db: Any) -> bool:
        stored = await delete_response(db, tenant, response_id)
        pending = await delete_background(db, tenant, response_id, storing_too=stored)
        return stored or pending

    if not await database.write(remove):
        async with database.reading() as db:
            row = await get_background(db, tenant, response_id)
        if row is None:
            raise not_found(response_id)
        raise OpenAIError(
            409,
            f"response {response_id!r} is storing its turn: delete it once it has completed",
            param="response_id",
            code="response_being_stored",
            headers={"retry-after": "1"},
        )
    return {"id": response_id, "object": "response", "deleted": True}


async def discard_branch(database: Database, tenant: str, response_id: str) -> None:
    """Delete the fork a background `previous_response_id` turn made under its response's id,
    once that turn will never be stored: only while the fork holds nothing past its fork
    point, the response is stored nowhere, and no run of it waits or runs (its row gone,
    failed or cancelled), all read in the transaction that deletes it."""

    async def discard(db: Any) -> None:
        try:
            fork = await get_session(db, tenant, response_id, for_update=True)
        except SessionNotFound:
            return
        if fork.forked_from is None or fork.last_seq != fork.fork_seq:
            return
        if await get_response(db, tenant, response_id) is not None:
            return
        row = await get_background(db, tenant, response_id)
        if row is None or row.status in ENDED:
            await delete_session(db, tenant, response_id)

    await database.write(discard, repeatable=True)
