"""`POST /v1/responses`: OpenAI's Responses API, with Precis keeping the conversation."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Response
from fastapi.responses import StreamingResponse

from api.auth import Tenant
from api.compat.responses import Responder
from api.deps import (
    AppDatabase,
    AppSettings,
    AppSummarization,
    AppTokenRatios,
    database_faults_as_503,
)
from api.openai_errors import openai_responses
from api.routes.checks import v1_router
from api.schemas.responses import ResponseRequest

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
) -> Response:
    """Call the model. With `conversation`, the conversation's context (pinned prefix,
    summaries, the messages after them) is put before `input`, fitted to the model's window,
    and the turn (input and output) is stored once the response completes; with `stream`,
    the model's events are relayed as server-sent events. Without `conversation`, the request
    is passed through and nothing is stored."""
    responder = Responder(database, summarization, settings, ratios)
    with database_faults_as_503():
        if not body.stream:
            answer, turn = await responder.respond(tenant, body)
            headers = turn.headers if turn is not None else None
            return Response(json.dumps(answer), media_type="application/json", headers=headers)
        events, turn = await responder.open(tenant, body)
    headers = {"Cache-Control": "no-cache", **(turn.headers if turn is not None else {})}
    return StreamingResponse(_server_sent(events), media_type="text/event-stream", headers=headers)


async def _server_sent(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Each event as the Responses API sends it: `event: <type>` and its JSON."""
    async for event in events:
        yield f"event: {event.get('type')}\ndata: {json.dumps(event)}\n\n".encode()
