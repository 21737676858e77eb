"""The message routes: append, remove, pop, list."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query, Response, status

from api import append, metrics, service, store
from api.auth import Tenant
from api.db.transactions import Database
from api.deps import AppDatabase, AppSettings, AppWorker, ReadDb, database_faults_as_503
from api.errors import BadRequest, Conflict, MessageNotFound, SessionNotFound, responses
from api.limits import check_metadata_size
from api.routes.checks import (
    BODY,
    COMMON,
    MAX_ID,
    PageSize,
    SessionPath,
    serialized,
    v1_router,
)
from api.schemas import (
    AppendRequest,
    AppendResponse,
    MessageList,
    MessageOut,
    PoppedMessage,
    RemovalPreviewOut,
)
from api.settings import Settings
from api.worker import Worker

MAX_SEQ = 2**62
"""Largest seq a query parameter may name (seqs are 64-bit)."""

router = v1_router()


@router.post(
    "/sessions/{session_id}/messages",
    status_code=status.HTTP_201_CREATED,
    response_model=AppendResponse,
    responses=responses(*COMMON, Conflict, *BODY),
)
async def append_messages(
    session_id: SessionPath,
    body: AppendRequest,
    database: AppDatabase,
    tenant: Tenant,
    settings: AppSettings,
    worker: AppWorker,
) -> Response:
    """Append 1-500 chat messages (`messages`) or Responses items (`items`), creating the
    session if missing. Idempotent per `client_id` (409 `IdempotencyConflict` when it names
    another stored message); when the backlog reaches a limit a background summary is
    queued."""
    name = "messages" if body.messages is not None else "items"
    for index, message in enumerate(body.batch):
        where = f"{name}[{index}].metadata"
        check_metadata_size(message.metadata, where, settings.max_metadata_bytes)
    with metrics.APPEND_SECONDS.time(), database_faults_as_503():
        answer = await append.append(database, settings, tenant, session_id, body.batch)
    if answer.summarization.scheduled:
        # The append has committed its job: the worker finds it. (A background task would
        # run this plain function in a worker thread, a thread hop per append.)
        worker.wake()
    return serialized(answer, status.HTTP_201_CREATED)


MessageIdPath = Annotated[int, Path(ge=1, le=MAX_ID, description="The message's `id`.")]


@router.delete(
    "/sessions/{session_id}/messages/{message_id:int}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=responses(*COMMON, SessionNotFound, MessageNotFound),
)
async def remove_message(
    session_id: SessionPath,
    message_id: MessageIdPath,
    database: AppDatabase,
    tenant: Tenant,
    settings: AppSettings,
    worker: AppWorker,
) -> Response:
    """Erase one message: it keeps its seq as a tombstone without content, is never listed or
    loaded again, and every summary it reached is erased and made again without it in the
    background. The rest of its tool-call exchange is hidden from every view (still
    removable). Removing a removed message is a no-op (204)."""
    await _remove(database, settings, worker, tenant, session_id, message_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/sessions/{session_id}/messages/{message_id:int}/removal",
    responses=responses(*COMMON, SessionNotFound, MessageNotFound),
)
async def preview_removal(
    session_id: SessionPath,
    message_id: MessageIdPath,
    db: ReadDb,
    tenant: Tenant,
    settings: AppSettings,
) -> RemovalPreviewOut:
    """What removing the message would do, nothing changed: the summaries it would erase and
    what the erasure job would summarize again (messages, tokens, about how many model
    calls). 404 for a message removed already."""
    return await service.preview_removal(db, settings, tenant, session_id, message_id)


@router.post(
    "/sessions/{session_id}/messages/pop",
    responses=responses(*COMMON, SessionNotFound, MessageNotFound),
)
async def pop_message(
    session_id: SessionPath,
    database: AppDatabase,
    tenant: Tenant,
    settings: AppSettings,
    worker: AppWorker,
) -> PoppedMessage:
    """Remove the newest remaining message (as `DELETE` does; a hidden half of a tool-call
    exchange counts) and answer it as it was appended; 404 when none is left."""
    removal = await _remove(database, settings, worker, tenant, session_id, None)
    assert removal is not None  # popping finds a message or raises MessageNotFound
    return PoppedMessage(message=MessageOut.from_row(removal.message))


async def _remove(
    database: Database,
    settings: Settings,
    worker: Worker,
    tenant: str,
    session_id: str,
    message_id: int | None,
) -> store.Removal | None:
    with database_faults_as_503():
        removal = await service.remove_message(database, settings, tenant, session_id, message_id)
    if removal is not None:
        metrics.REMOVED_MESSAGES.inc()
        metrics.ERASED_SUMMARIES.inc(removal.erased_summaries)
        if removal.erased_summaries:
            worker.wake()  # the removal committed the re-make's job
    return removal


@router.get(
    "/sessions/{session_id}/messages", responses=responses(*COMMON, SessionNotFound, BadRequest)
)
async def list_messages(
    session_id: SessionPath,
    db: ReadDb,
    tenant: Tenant,
    after_seq: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    limit: PageSize = 100,
) -> MessageList:
    """The stored messages, ascending by seq, after `after_seq` (summarized or not; removed
    ones never)."""
    messages, next_cursor = await service.list_messages(db, tenant, session_id, after_seq, limit)
    return MessageList(messages=messages, next_cursor=next_cursor)
