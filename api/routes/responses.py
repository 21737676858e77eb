"""`POST /v1/responses`: OpenAI's Responses API, with Precis keeping the conversation."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Path, Query, Response
from fastapi.responses import JSONResponse, StreamingResponse

from api.auth import Tenant
from api.compat import background, compaction, input_tokens, stored_responses
from api.compat.responses import Responder
from api.conversations import ItemOrder
from api.deps import (
    AppBackgroundResponses,
    AppDatabase,
    AppSettings,
    AppSummarization,
    AppTokenRatios,
    database_faults_as_503,
)
from api.errors import ServiceUnavailable
from api.openai_errors import OpenAIError, openai_responses
from api.routes.checks import v1_router
from api.routes.conversations import DEFAULT_PAGE_ITEMS, MAX_PAGE_ITEMS
from api.schemas.responses import CompactionRequest, InputTokensRequest, ResponseRequest

router = v1_router()


@router.post(
    "/responses",
    responses=openai_responses(400, 401, 403, 404, 409, 413, 429, 502, 503),
)
async def create_response(
    body: ResponseRequest,
    database: AppDatabase,
    summarization: AppSummarization,
    settings: AppSettings,
    tenant: Tenant,
    ratios: AppTokenRatios,
    runs: AppBackgroundResponses,
) -> Response:
    """Call the model. With `conversation`, the conversation's context (pinned prefix,
    summaries, the messages after them) is put before `input`, fitted to the model's window,
    and the turn (input and output) is stored once the response completes; with `stream`,
    the model's events are relayed as server-sent events; with `background`, the turn is
    queued for the worker and answered `queued` at once (poll `GET /v1/responses/{id}`), or
    with `stream` too, followed as server-sent events until it has ended.
    Without `conversation` or `previous_response_id`, the response starts a chain of its own
    (`store: false`: the request is passed through and nothing is stored)."""
    responder = Responder(database, summarization, settings, ratios)
    with database_faults_as_503():
        if body.background:
            queued = await background.queue(responder, runs, tenant, body)
            if body.stream:
                return _followed(database, runs, tenant, queued, -1)
            return JSONResponse(queued)
        if not body.stream:
            answer, turn = await responder.respond(tenant, body)
            headers = turn.headers if turn is not None else None
            return Response(json.dumps(answer), media_type="application/json", headers=headers)
        events, turn = await responder.open(tenant, body)
    headers = {"Cache-Control": "no-cache", **(turn.headers if turn is not None else {})}
    return StreamingResponse(_server_sent(events), media_type="text/event-stream", headers=headers)


KEEP_ALIVE_COMMENT = b": keep-alive\n\n"
"""An SSE comment: clients skip it, proxies see the connection in use."""


async def _server_sent(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Each event as the Responses API sends it."""
    async for event in events:
        yield _event_bytes(event)


def _event_bytes(event: dict[str, Any]) -> bytes:
    """`event: <type>` and its JSON."""
    return f"event: {event.get('type')}\ndata: {json.dumps(event)}\n\n".encode()


def _followed(
    database: AppDatabase,
    runs: AppBackgroundResponses,
    tenant: str,
    body: dict[str, Any],
    starting_after: int,
) -> StreamingResponse:
    """A background response's events as server-sent events (`background.follow`), keep-alives
    as comments; a database that fails meanwhile ends the stream with an `error` event (resume
    with `starting_after` the last event before it)."""

    async def sent() -> AsyncIterator[bytes]:
        last = starting_after
        try:
            with database_faults_as_503():
                following = background.follow(database, runs, tenant, body, starting_after)
                async for event in following:
                    if event is background.KEEP_ALIVE:
                        yield KEEP_ALIVE_COMMENT
                        continue
                    last = event["sequence_number"]
                    yield _event_bytes(event)
        except ServiceUnavailable as exc:
            message = f"{exc.detail}: resume with starting_after {last}"
            yield _event_bytes(background.stream_error(last, "server_error", message))

    return StreamingResponse(
        sent(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache"},
    )


ResponsePath = Annotated[
    str, Path(description="A response id Precis answered (`resp_...`).", max_length=128)
]
Include = Annotated[
    list[str] | None,
    Query(description="Accepted and ignored: a response is served as it was answered."),
]
IncludeBrackets = Annotated[
    list[str] | None,
    Query(alias="include[]", description="`include` as the `openai` packages write it."),
]
RESPONSE_ERRORS = openai_responses(400, 401, 403, 404, 503)
FOLLOWED: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}}
}
"""`GET /v1/responses/{id}?stream=true` answers server-sent events."""


@router.post("/responses/input_tokens", responses=RESPONSE_ERRORS)
async def count_input_tokens(
    body: InputTokensRequest,
    database: AppDatabase,
    summarization: AppSummarization,
    tenant: Tenant,
    ratios: AppTokenRatios,
) -> Response:
    """The input tokens the request would send: the conversation's or chain's stored context
    as it loads now, then the input, instructions and tools, as the model counts them."""
    with database_faults_as_503():
        counted = await input_tokens.count(database, summarization, ratios, tenant, body)
    return JSONResponse(counted)


@router.post("/responses/compact", responses=RESPONSE_ERRORS)
async def compact_response(
    body: CompactionRequest,
    database: AppDatabase,
    summarization: AppSummarization,
    settings: AppSettings,
    tenant: Tenant,
) -> Response:
    """OpenAI's compaction: with `conversation` or `previous_response_id` (the newest of its
    chain), its history is compacted into a stored summary linked to its sources, and the
    context answered as it now loads (one `compaction` item carrying the summaries, then the
    items after them): continue with the same `conversation` or `previous_response_id`. Else
    the `input` is summarized inline, nothing stored: send the output back as the next turn's
    input, where a Precis compaction item reaches the model as the summary it carries."""
    with database_faults_as_503():
        compacted = await compaction.compact(database, summarization, settings, tenant, body)
    return JSONResponse(compacted)


@router.get("/responses/{response_id}", responses={**RESPONSE_ERRORS, **FOLLOWED})
async def get_response(
    response_id: ResponsePath,
    database: AppDatabase,
    tenant: Tenant,
    runs: AppBackgroundResponses,
    include: Include = None,
    include_brackets: IncludeBrackets = None,
    stream: Annotated[
        bool, Query(description="A background response's events as server-sent events.")
    ] = False,
    starting_after: Annotated[
        int | None,
        Query(ge=-1, description="With `stream`: the events numbered after this one."),
    ] = None,
) -> Response:
    """A stored response, as it was answered, or a background one as it stands (404 for an
    id Precis did not issue, another tenant's, one stored with `store: false`, or one
    deleted). With `stream`, a background response's events numbered after `starting_after`
    (all without it), then those it gains until it has ended; another response is 400."""
    with database_faults_as_503():
        body = await background.view(database, tenant, response_id)
    if not stream:
        return JSONResponse(body)
    if not body.get("background"):
        raise OpenAIError(400, "only a background response can be streamed again", param="stream")
    after = -1 if starting_after is None else starting_after
    return _followed(database, runs, tenant, body, after)


@router.delete("/responses/{response_id}", responses=RESPONSE_ERRORS)
async def delete_response(
    response_id: ResponsePath, database: AppDatabase, tenant: Tenant, runs: AppBackgroundResponses
) -> Response:
    """Delete a stored response (its items stay in its conversation or chain's history), or
    a background one not stored yet (its run stores nothing)."""
    with database_faults_as_503():
        deleted = await background.delete(database, tenant, response_id)
    runs.stop_run(response_id)
    return JSONResponse(deleted)


@router.get("/responses/{response_id}/input_items", responses=RESPONSE_ERRORS)
async def list_input_items(
    response_id: ResponsePath,
    database: AppDatabase,
    tenant: Tenant,
    after: Annotated[str | None, Query(description="List the items after this item id.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_ITEMS)] = DEFAULT_PAGE_ITEMS,
    order: ItemOrder = "desc",
    include: Include = None,
    include_brackets: IncludeBrackets = None,
) -> Response:
    """A page of the response's input items (`order=desc` by default, as OpenAI lists them)."""
    with database_faults_as_503():
        page = await stored_responses.input_items(
            database, tenant, response_id, after, limit, order
        )
    return JSONResponse(page)


@router.post("/responses/{response_id}/cancel", responses=RESPONSE_ERRORS)
async def cancel_response(
    response_id: ResponsePath, database: AppDatabase, tenant: Tenant, runs: AppBackgroundResponses
) -> Response:
    """Cancel a queued or running background response: it stores nothing of its turn. One
    that has ended answers as it is; a response that was not background is 400."""
    with database_faults_as_503():
        cancelled = await background.cancel(database, tenant, response_id)
    if cancelled.get("status") == "cancelled":
        runs.stop_run(response_id)
    return JSONResponse(cancelled)
