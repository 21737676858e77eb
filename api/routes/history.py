"""The history routes: load the context for the next model call, compact now."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Response

from api import metrics, service
from api.auth import Tenant
from api.deps import AppDatabase, AppSummarization, ReadDb, database_faults_as_503
from api.errors import (
    SessionNotFound,
    SummarizationInProgress,
    SummarizationTimeout,
    UnfaithfulView,
    responses,
)
from api.routes.checks import BODY, COMMON, SessionPath, serialized, v1_router
from api.schemas import CompactRequest, CompactResponse, History, MessageFormat

MAX_HISTORY_TOKENS = 10_000_000
"""Largest `max_tokens` budget accepted by the history loader."""

router = v1_router()


@router.get(
    "/sessions/{session_id}/history",
    response_model=History,
    responses=responses(*COMMON, SessionNotFound, UnfaithfulView),
)
async def history(
    session_id: SessionPath,
    database: AppDatabase,
    tenant: Tenant,
    summarization: AppSummarization,
    summary_limit: Annotated[int | None, Query(ge=1, le=100)] = None,
    max_tokens: Annotated[int | None, Query(ge=1, le=MAX_HISTORY_TOKENS)] = None,
    message_format: Annotated[
        MessageFormat | None,
        Query(
            alias="format",
            description="Shape of `context`: OpenAI chat messages (`openai`) or Responses API "
            "input items (`responses`), whatever format the session holds (default: the "
            "session's own); 422 `UnfaithfulView` when a message has no exact shape in it.",
        ),
    ] = None,
) -> Response:
    """What to send to the model before its next call: the pinned prefix, the newest live
    summaries and the messages after them in `context`, fitted to `max_tokens` (compacting
    inline first when enabled), in the `format` asked."""
    with database_faults_as_503(), metrics.HISTORY_SECONDS.time():
        loaded = await service.read_history(
            database, summarization, tenant, session_id, summary_limit, max_tokens, message_format
        )
    return serialized(loaded)


@router.post(
    "/sessions/{session_id}/compact",
    responses=responses(
        *COMMON, SessionNotFound, SummarizationInProgress, SummarizationTimeout, *BODY
    ),
)
async def compact(
    session_id: SessionPath,
    db: ReadDb,
    tenant: Tenant,
    summarization: AppSummarization,
    body: CompactRequest | None = None,
) -> CompactResponse:
    """Summarize now, inline, and answer the summary with the history after it; 409 while
    another summarization holds the session, 504 past its deadline."""
    return await service.compact(db, summarization, tenant, session_id, body or CompactRequest())
