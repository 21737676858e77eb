"""Forking a session at one of its messages (`POST /v1/sessions/{id}/fork`)."""

from __future__ import annotations

from fastapi import status

from api import forks
from api.auth import Tenant
from api.deps import AppDatabase, AppSettings, database_faults_as_503
from api.errors import MessageNotFound, SessionExists, SessionNotFound, responses
from api.routes.checks import BODY, COMMON, SessionPath, v1_router
from api.schemas.forks import ForkRequest
from api.schemas.sessions import SessionOut

router = v1_router()


@router.post(
    "/sessions/{session_id}/fork",
    status_code=status.HTTP_201_CREATED,
    responses=responses(*COMMON, SessionNotFound, MessageNotFound, SessionExists, *BODY),
)
async def fork_session(
    session_id: SessionPath,
    body: ForkRequest,
    database: AppDatabase,
    tenant: Tenant,
    settings: AppSettings,
) -> SessionOut:
    """A new session holding this one's messages up to and including the fork point (by
    `message_id` or `seq`), with its settings, metadata and format and the live summaries
    lying wholly at or below the fork point, linked to the copies: its history loads as this
    session's did when it ended there, with no LLM call. `forked_from` and `fork_seq` name the
    parent and the fork point. 404 `SessionNotFound` (this session), 404 `MessageNotFound`
    (`message_id` is no message of it), 422 `BadForkPoint` (a seq past its newest message,
    or a removed message), 409 `SessionExists` (`id` taken); nothing is stored then."""
    with database_faults_as_503():
        return await forks.fork_session(database, settings, tenant, session_id, body)
