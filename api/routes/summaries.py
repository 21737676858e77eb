"""The summary routes: a session's summaries, and one summary with its sources."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

from api import service
from api.auth import Tenant
from api.deps import ReadDb
from api.errors import BadRequest, SessionNotFound, SummaryNotFound, responses
from api.routes.checks import (
    COMMON,
    MAX_ID,
    Cursor,
    PageSize,
    SessionPath,
    checked_cursor,
    v1_router,
)
from api.schemas import SummaryDetail, SummaryList

router = v1_router()


@router.get(
    "/sessions/{session_id}/summaries",
    responses=responses(*COMMON, SessionNotFound, BadRequest),
)
async def list_summaries(
    session_id: SessionPath,
    db: ReadDb,
    tenant: Tenant,
    include_superseded: bool = False,
    limit: PageSize = 50,
    cursor: Cursor = None,
) -> SummaryList:
    """The session's summaries, newest first; live ones only unless `include_superseded`."""
    summaries, next_cursor = await service.list_summaries(
        db, tenant, session_id, include_superseded, limit, checked_cursor(cursor)
    )
    return SummaryList(summaries=summaries, next_cursor=next_cursor)


@router.get("/summaries/{summary_id}", responses=responses(*COMMON, SummaryNotFound))
async def get_summary(
    summary_id: Annotated[int, Path(ge=1, le=MAX_ID)], db: ReadDb, tenant: Tenant
) -> SummaryDetail:
    """One summary with the ids of every message it covers."""
    return await service.get_summary(db, tenant, summary_id)
