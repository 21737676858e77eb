"""`POST /v1/messages` and `/v1/messages/count_tokens`: Anthropic's Messages wire, with Precis
keeping the session."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Query, Response
from fastapi.responses import StreamingResponse

from api.auth import Tenant
from api.compat import anthropic_messages
from api.compat.anthropic_messages import CountTokensRequest, MessagesRequest
from api.compat.turn import ChatTurns
from api.deps import (
    AppDatabase,
    AppSettings,
    AppSummarization,
    AppTokenRatios,
    database_faults_as_503,
)
from api.openai_errors import anthropic_responses
from api.routes.chat_completions import SessionHeader
from api.routes.checks import v1_router

router = v1_router()

BetaQuery = Annotated[
    bool | None,
    Query(description="Accepted and ignored: Anthropic's clients mark their beta calls with it."),
]


@router.post(
    "/messages",
    responses=anthropic_responses(400, 401, 403, 409, 413, 429, 502, 503),
)
async def create_message(
    body: MessagesRequest,
    database: AppDatabase,
    summarization: AppSummarization,
    settings: AppSettings,
    tenant: Tenant,
    ratios: AppTokenRatios,
    session: SessionHeader = None,
    beta: BetaQuery = None,
) -> Response:
    """Call the model. When the request names a session (`X-Precis-Session`,
    `metadata.user_id`, or the prefix fingerprint with MEMORY_IDENTIFY=prefix), the resent
    turns are reconciled with the stored session, its context is fitted to the model's window
    before the new turns, and the turn is stored once the answer completes; otherwise the
    request is passed through. The key may come as `x-api-key`, as Anthropic's clients send it."""
    turns = ChatTurns(database, summarization, settings, ratios)
    with database_faults_as_503():
        turn = await anthropic_messages.prepare(turns, tenant, session, body)
        if not body.stream:
            answer = await anthropic_messages.complete(turns, turn, body.model)
            return Response(json.dumps(answer), media_type="application/json", headers=turn.headers)
        events = await anthropic_messages.open_stream(turns, turn, body.model)
    headers = {"Cache-Control": "no-cache", **turn.headers}
    return StreamingResponse(_server_sent(events), media_type="text/event-stream", headers=headers)


@router.post("/messages/count_tokens", responses=anthropic_responses(400, 401, 403, 413))
async def count_message_tokens(
    body: CountTokensRequest, tenant: Tenant, ratios: AppTokenRatios, beta: BetaQuery = None
) -> dict[str, int]:
    """The request's input tokens as the model counts them: its own encoding where one ships
    offline, else Precis's count times the ratio learned from the model's answers."""
    return await anthropic_messages.count_tokens(body, ratios)


async def _server_sent(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Each event as the Messages API streams it: `event: <type>` and its JSON."""
    async for event in events:
        yield f"event: {event.get('type')}\ndata: {json.dumps(event)}\n\n".encode()
