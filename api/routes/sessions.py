"""The session routes: create, list, read, patch, delete."""

from __future__ import annotations

from fastapi import Response, status

from api import service
from api.auth import Tenant
from api.deps import AppDatabase, AppSettings, ReadDb, database_faults_as_503
from api.errors import BadRequest, SessionExists, SessionNotFound, responses
from api.limits import check_metadata_size
from api.routes.checks import (
    BODY,
    COMMON,
    PageSize,
    SessionCursor,
    SessionPath,
    check_session_model,
    checked_session_cursor,
    v1_router,
)
from api.schemas import SessionCreate, SessionList, SessionOut, SessionUpdate

router = v1_router()


@router.post(
    "/sessions",
    status_code=status.HTTP_201_CREATED,
    responses=responses(*COMMON, SessionExists, *BODY),
)
async def create_session(
    body: SessionCreate, database: AppDatabase, tenant: Tenant, settings: AppSettings
) -> SessionOut:
    """Create an empty session (`id` generated when absent; `format` fixed now or by its first
    append); 409 `SessionExists` if the id is taken."""
    check_metadata_size(body.metadata, "metadata", settings.max_metadata_bytes)
    check_session_model(body.settings, settings)
    with database_faults_as_503():
        return await service.create_session(database, settings, tenant, body)


@router.get("/sessions", responses=responses(*COMMON, BadRequest))
async def list_sessions(
    db: ReadDb,
    tenant: Tenant,
    settings: AppSettings,
    limit: PageSize = 50,
    cursor: SessionCursor = None,
) -> SessionList:
    """The tenant's sessions, newest first, `limit` per page; `next_cursor` gives the next
    page."""
    page = await service.list_sessions(db, settings, tenant, limit, checked_session_cursor(cursor))
    sessions, next_cursor = page
    return SessionList(sessions=sessions, next_cursor=next_cursor)


@router.get("/sessions/{session_id}", responses=responses(*COMMON, SessionNotFound))
async def get_session(
    session_id: SessionPath, db: ReadDb, tenant: Tenant, settings: AppSettings
) -> SessionOut:
    """One session: its metadata, its own and its effective settings, its counts."""
    return await service.get_session(db, settings, tenant, session_id)


@router.patch("/sessions/{session_id}", responses=responses(*COMMON, SessionNotFound, *BODY))
async def update_session(
    session_id: SessionPath,
    body: SessionUpdate,
    database: AppDatabase,
    tenant: Tenant,
    settings: AppSettings,
) -> SessionOut:
    """A JSON Merge Patch (RFC 7396) of `metadata` and `settings`: a key given replaces its
    value, null removes it, absent keys stay."""
    check_session_model(body.settings, settings)
    with database_faults_as_503():
        return await service.update_session(database, settings, tenant, session_id, body)


@router.delete(
    "/sessions/{session_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=responses(*COMMON, SessionNotFound),
)
async def delete_session(
    session_id: SessionPath, database: AppDatabase, tenant: Tenant
) -> Response:
    """Delete the session with its messages, summaries and links."""
    with database_faults_as_503():
        await service.delete_session(database, tenant, session_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
