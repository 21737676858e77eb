"""`POST /v1/chat/completions`: OpenAI's Chat Completions wire, with Precis keeping the session."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Header, Response
from fastapi.responses import StreamingResponse

from api.auth import Tenant
from api.compat import chat_completions
from api.compat.chat_completions import ChatCompletionRequest
from api.compat.turn import ChatTurns
from api.deps import (
    AppDatabase,
    AppSettings,
    AppSummarization,
    AppTokenRatios,
    database_faults_as_503,
)
from api.openai_errors import openai_responses
from api.routes.checks import v1_router
from api.schemas.common import SESSION_ID_PATTERN

router = v1_router()

SessionHeader = Annotated[
    str | None,
    Header(
        alias="X-Precis-Session",
        pattern=SESSION_ID_PATTERN,
        max_length=128,
        description="The session this request belongs to (see the session ladder).",
    ),
]


@router.post(
    "/chat/completions",
    responses=openai_responses(400, 401, 403, 409, 413, 429, 502, 503),
)
async def create_chat_completion(
    body: ChatCompletionRequest,
    database: AppDatabase,
    summarization: AppSummarization,
    settings: AppSettings,
    tenant: Tenant,
    ratios: AppTokenRatios,
    session: SessionHeader = None,
) -> Response:
    """Call the model. When the request names a session (`X-Precis-Session`,
    `metadata.session_id`, or the prefix fingerprint with
    MEMORY_IDENTIFY=prefix), the resent messages are reconciled with the stored session, the
    session's context is fitted to the model's window before the new messages, and the turn is
    stored once the answer completes; otherwise the request is passed through."""
    turns = ChatTurns(database, summarization, settings, ratios)
    with database_faults_as_503():
        turn = await chat_completions.prepare(turns, tenant, session, body)
        if not body.stream:
            answer = await chat_completions.complete(turns, turn)
            return Response(json.dumps(answer), media_type="application/json", headers=turn.headers)
        chunks = await chat_completions.open_stream(turns, turn)
    headers = {"Cache-Control": "no-cache", **turn.headers}
    return StreamingResponse(_server_sent(chunks), media_type="text/event-stream", headers=headers)


async def _server_sent(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Each chunk as Chat Completions streams it, then `[DONE]`."""
    async for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"
