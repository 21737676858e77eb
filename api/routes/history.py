"""The history routes: load the context for the next model call, compact now."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Response

from api import compact as compact_use_case  # the route below is named `compact`
from api import metrics, service
from api.auth import Tenant
from api.context_edits import EditOverrides
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
from api.session_settings import ToolName

MAX_HISTORY_TOKENS = 10_000_000
"""Largest `max_tokens` budget accepted by the history loader."""

EDIT_OVERRIDE = (
    "Overrides, for this load only, the session's setting of the same name (context editing: "
    "docs/context-editing.md)."
)

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
    clear_tool_results_trigger_tokens: Annotated[
        int | None, Query(ge=0, le=MAX_HISTORY_TOKENS, description=EDIT_OVERRIDE)
    ] = None,
    clear_tool_results_keep: Annotated[
        int | None, Query(ge=0, le=MAX_HISTORY_TOKENS, description=EDIT_OVERRIDE)
    ] = None,
    clear_tool_results_at_least_tokens: Annotated[
        int | None, Query(ge=0, le=MAX_HISTORY_TOKENS, description=EDIT_OVERRIDE)
    ] = None,
    clear_tool_results_exclude_tools: Annotated[
        list[ToolName] | None,
        Query(max_length=100, description=EDIT_OVERRIDE + " Repeat it for several tools."),
    ] = None,
    clear_tool_inputs: Annotated[bool | None, Query(description=EDIT_OVERRIDE)] = None,
    clear_file_parts_keep: Annotated[
        int | None, Query(ge=0, le=MAX_HISTORY_TOKENS, description=EDIT_OVERRIDE)
    ] = None,
) -> Response:
    """What to send to the model before its next call: the pinned prefix, the newest live
    summaries and the messages after them in `context`, fitted to `max_tokens` (compacting
    inline first when enabled), in the `format` asked, old tool results and files cleared as
    the session's context editing (or the `clear_*` parameters) says."""
    edits = EditOverrides(
        tool_results_trigger_tokens=clear_tool_results_trigger_tokens,
        tool_results_keep=clear_tool_results_keep,
        tool_results_at_least_tokens=clear_tool_results_at_least_tokens,
        exclude_tools=None
        if clear_tool_results_exclude_tools is None
        else frozenset(clear_tool_results_exclude_tools),
        clear_tool_inputs=clear_tool_inputs,
        file_parts_keep=clear_file_parts_keep,
    )
    with database_faults_as_503(), metrics.HISTORY_SECONDS.time():
        loaded = await service.read_history(
            database,
            summarization,
            tenant,
            session_id,
            summary_limit,
            max_tokens,
            message_format,
            edits,
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
    return await compact_use_case.compact(
        db, summarization, tenant, session_id, body or CompactRequest()
    )
