"""A session moved as JSON Lines: export (`GET /v1/sessions/{id}/export`) and import
(`POST /v1/sessions/import`), the format in `api.schemas.transfer`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, status
from fastapi.responses import JSONResponse, StreamingResponse

from api.auth import Tenant
from api.deps import AppDatabase, AppSettings, database_faults_as_503
from api.errors import (
    PayloadTooLarge,
    SessionExists,
    SessionNotFound,
    UnsupportedMediaType,
    responses,
)
from api.limits import IMPORT_PATH
from api.routes.checks import COMMON, SessionPath, known_query_only, well_formed
from api.schemas.common import SESSION_ID_PATTERN
from api.schemas.transfer import ImportResult, TransferLine
from api.transfer import export, importer
from api.transfer.lines import NDJSON, body_too_large, spooled

LINE_MEDIA_TYPES = frozenset({NDJSON, "application/jsonl"})
"""What an import's body may be declared as (or nothing): JSON Lines under its two names."""

router = APIRouter(prefix="/v1")
"""Each route names its own checks: an import's body is JSON Lines, not JSON."""


async def well_formed_lines(request: Request) -> None:
    """`well_formed`'s checks for a JSON Lines body: no unknown query parameter, and a body
    declared as JSON Lines (or not declared)."""
    known_query_only(request)
    declared = request.headers.get("content-type")
    if declared is None:
        return
    media_type = declared.partition(";")[0].strip().lower()
    if media_type not in LINE_MEDIA_TYPES:
        raise UnsupportedMediaType(
            f"Content-Type {media_type or declared!r}: an import is {NDJSON} "
            "(JSON Lines, as an export answers)"
        )


_ERROR_BODY = {"$ref": "#/components/schemas/ErrorBody"}
_LINES_CONTENT = {NDJSON: {"schema": {"$ref": "#/components/schemas/TransferLine"}}}


class JsonLinesDocumented(JSONResponse):
    """How the document names an export's answer: JSON Lines, each line a `TransferLine` (a
    JSONResponse to FastAPI, so it writes the lines' schema, not `type: string`); the route
    answers a StreamingResponse of that type."""

    media_type = NDJSON


@router.get(
    "/sessions/{session_id}/export",
    dependencies=[Depends(well_formed)],
    response_class=JsonLinesDocumented,
    responses={
        status.HTTP_200_OK: {
            "model": TransferLine,
            "description": "The session as JSON Lines, one `TransferLine` per line.",
        },
        # the errors are JSON, not the answer's JSON Lines
        **{
            status_code: {"content": {"application/json": {"schema": _ERROR_BODY}}}
            for status_code in responses(*COMMON, SessionNotFound)
        },
    },
)
async def export_session(
    session_id: SessionPath, database: AppDatabase, tenant: Tenant
) -> StreamingResponse:
    """The session as JSON Lines (`application/x-ndjson`), streamed from one consistent
    snapshot: a `session` line, every message in seq order (tombstones included), every
    summary (live, superseded and erased, each with the seqs it covers), and an `end` line
    counting them; a file without its `end` line was cut short."""
    with database_faults_as_503():
        lines = await export.export_session(database, tenant, session_id)
    return StreamingResponse(lines, media_type=NDJSON)


ImportId = Annotated[
    str | None,
    Query(
        alias="id",
        pattern=SESSION_ID_PATTERN,
        max_length=128,
        description="Store the session under this id instead of the file's.",
    ),
]


@router.post(
    IMPORT_PATH.removeprefix(router.prefix),  # its body passes the body limit (api.limits)
    status_code=status.HTTP_201_CREATED,
    dependencies=[Depends(well_formed_lines)],
    responses=responses(*COMMON, SessionExists, PayloadTooLarge, UnsupportedMediaType),
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "An exported session: JSON Lines, one `TransferLine` per line.",
            "content": _LINES_CONTENT,
        }
    },
)
async def import_session(
    request: Request,
    database: AppDatabase,
    tenant: Tenant,
    settings: AppSettings,
    session_id: ImportId = None,
) -> ImportResult:
    """Store an exported session (the body: what `GET /v1/sessions/{id}/export` answered) with
    the same seqs, contents, summaries and coverage, under its own id or `id`; 409 if that id
    is taken. The body is read as a stream of at most MAX_IMPORT_BYTES and MAX_IMPORT_LINES,
    each line at most MAX_REQUEST_BYTES, each message within the append's limits (413); each
    message's tokens are counted again, as an append counts them. A file that is not JSON
    Lines of the export's shape (a blank line included), is cut short (no `end` line, or
    counts that differ) or does not hold together (seqs out of order, a summary covering a
    removed message, `superseded_by` naming no summary, ...) answers 422 naming its first
    wrong line, and nothing of it is stored."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > settings.max_import_bytes:
        raise body_too_large(settings.max_import_bytes)
    chunks: AsyncIterator[bytes] = request.stream()
    with database_faults_as_503():
        async with spooled(chunks, settings.max_import_bytes, settings.max_import_lines) as body:
            return await importer.import_session(
                database,
                tenant,
                body,
                settings.max_request_bytes,
                session_id,
                allowed_models=settings.allowed_models(),
                limits=importer.AppendLimits.of(settings),
            )
