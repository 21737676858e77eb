"""HTTP routes: parse input, call one service function, return its answer."""

from __future__ import annotations

from contextlib import suppress
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response, status
from fastapi.dependencies.models import Dependant
from fastapi.responses import PlainTextResponse
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.exc import OperationalError, ProgrammingError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from api import appending, metrics, service, store
from api.auth import Tenant
from api.db.faults import connection_lost
from api.db.models import SCHEMA_REVISION
from api.db.transactions import Database, RetryPolicy, retry_budget, retrying
from api.deps import (
    AppCompactor,
    AppDatabase,
    AppSettings,
    AppWorker,
    ReadDb,
    database_faults_as_503,
)
from api.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    MessageNotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    SessionExists,
    SessionNotFound,
    SummarizationInProgress,
    SummarizationTimeout,
    SummaryNotFound,
    Unauthorized,
    UnfaithfulView,
    UnsupportedMediaType,
    ValidationFailed,
    responses,
)
from api.limits import check_metadata_size
from api.schemas import (
    SESSION_ID_PATTERN,
    AppendRequest,
    AppendResponse,
    CompactRequest,
    CompactResponse,
    Health,
    History,
    MessageFormat,
    MessageList,
    MessageOut,
    PoppedMessage,
    SessionCreate,
    SessionList,
    SessionOut,
    SessionUpdate,
    SummaryDetail,
    SummaryList,
)
from api.settings import Settings, SummaryOverrides
from api.worker import Worker

MAX_PAGE_SIZE = 1000
"""Largest page a list endpoint returns in one answer."""

MAX_SEQ = 2**62
"""Largest seq a query parameter may name (seqs are 64-bit)."""

MAX_HISTORY_TOKENS = 10_000_000
"""Largest `max_tokens` budget accepted by the history loader."""

MAX_ID = 2**63 - 1
"""Largest row id (64-bit): path ids and cursors beyond it cannot exist."""

SessionPath = Annotated[str, Path(pattern=SESSION_ID_PATTERN, max_length=128)]
PageSize = Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)]
CURSOR_PATTERN = r"^[0-9]{1,18}$"
"""What the cursors handed out look like (documented; others get 400, not 422)."""

Cursor = Annotated[
    str | None,
    Query(
        max_length=32,
        description="`next_cursor` of the previous page",
        json_schema_extra={"pattern": CURSOR_PATTERN},
    ),
]


def checked_cursor(cursor: str | None) -> str | None:
    """A cursor is a positive 64-bit id in ASCII digits: anything else was not handed out."""
    if cursor is not None and not (
        cursor.isascii() and cursor.isdigit() and int(cursor[:20]) <= MAX_ID
    ):
        raise BadRequest("cursor is not one this server handed out")
    return cursor


COMMON = (Unauthorized, Forbidden, ValidationFailed, ServiceUnavailable)
BODY = (PayloadTooLarge, UnsupportedMediaType)
"""What a route taking a JSON body may answer about the body itself."""


def _query_names(dependant: Dependant) -> frozenset[str]:
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return frozenset(names)


_route_query_names: dict[int, tuple[APIRoute, frozenset[str]]] = {}
"""The query parameters of each route, by route (kept alive, so its id names no other)."""


def _query_names_of(route: APIRoute) -> frozenset[str]:
    found = _route_query_names.get(id(route))
    if found is None:
        found = _route_query_names[id(route)] = (route, _query_names(route.dependant))
    return found[1]


def known_query_only(request: Request) -> None:
    """Refuse query parameters a route does not take: a typo (`max_token=`) must not pass
    silently as if the client had not asked."""
    route = request.scope.get("route")
    if not request.scope.get("query_string") or not isinstance(route, APIRoute):
        return
    unknown = sorted(set(request.query_params) - _query_names_of(route))
    if unknown:
        raise ValidationFailed(
            "; ".join(f"query.{name}: not a parameter of this route" for name in unknown)
        )


def check_session_model(overrides: SummaryOverrides | None, settings: Settings) -> None:
    """A session may only name a model the server allows: it would be summarized with
    SUMMARY_MODEL instead, which the client should hear about, not find out later."""
    model = overrides.model if overrides is not None else None
    allowed = settings.allowed_models()
    if model is not None and model not in allowed:
        raise ValidationFailed(
            f"settings.model: {model!r} is not allowed on this server "
            f"(allowed: {', '.join(sorted(allowed))}; see SUMMARY_ALLOWED_MODELS)"
        )


def json_bodies_only(request: Request) -> None:
    """A body declared as something other than JSON is refused by its type, not misread."""
    declared = request.headers.get("content-type")
    if request.method not in ("POST", "PATCH") or declared is None:
        return
    media_type = declared.partition(";")[0].strip().lower()
    if media_type != "application/json" and not media_type.endswith("+json"):
        raise UnsupportedMediaType(
            f"Content-Type {media_type or declared!r}: request bodies are application/json"
        )


async def well_formed(request: Request) -> None:
    """What every /v1 request is checked for before its parameters are read.

    One async dependency: FastAPI pays per dependency, and runs a plain function in a worker
    thread (a thread hop per request)."""
    known_query_only(request)
    json_bodies_only(request)


router = APIRouter(prefix="/v1", dependencies=[Depends(well_formed)])
probes = APIRouter()

PROBE_RETRIES = RetryPolicy(budget_seconds=0.5)
"""The probes (`/readyz`, `/metrics`) answer within a prober's timeout (Kubernetes: 1 s by
default), so they wait this long at most for an unreachable database, not
DATABASE_RETRY_SECONDS."""


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
        # not repeatable: a create that landed would answer 409 the second time
        return await database.write(lambda db: service.create_session(db, settings, tenant, body))


@router.get("/sessions", responses=responses(*COMMON, BadRequest))
async def list_sessions(
    db: ReadDb, tenant: Tenant, settings: AppSettings, limit: PageSize = 50, cursor: Cursor = None
) -> SessionList:
    """The tenant's sessions, newest first, `limit` per page; `next_cursor` gives the next
    page."""
    page = await service.list_sessions(db, settings, tenant, limit, checked_cursor(cursor))
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
        # a merge patch applied twice gives what it gave once
        return await database.write(
            lambda db: service.update_session(db, settings, tenant, session_id, body),
            repeatable=True,
        )


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
        # not repeatable: a delete that landed would answer 404 the second time
        await database.write(lambda db: service.delete_session(db, tenant, session_id))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


def serialized(answer: BaseModel, status_code: int = status.HTTP_200_OK) -> Response:
    """`answer` as JSON, serialized once: a returned model would be dumped, validated against
    the route's response model again and then encoded (about a third of a history load)."""
    return Response(answer.model_dump_json(), status_code, media_type="application/json")


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
        answer = await appending.append(database, settings, tenant, session_id, body.batch)
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
        # Removing a given message twice answers as once (204); a second pop would remove
        # the next message.
        removal = await database.write(
            lambda db: service.remove_message(db, settings, tenant, session_id, message_id),
            repeatable=message_id is not None,
        )
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


@router.get(
    "/sessions/{session_id}/history",
    response_model=History,
    responses=responses(*COMMON, SessionNotFound, UnfaithfulView),
)
async def history(
    session_id: SessionPath,
    database: AppDatabase,
    tenant: Tenant,
    compactor: AppCompactor,
    summary_limit: Annotated[int | None, Query(ge=1, le=100)] = None,
    max_tokens: Annotated[int | None, Query(ge=1, le=MAX_HISTORY_TOKENS)] = None,
    context_format: Annotated[
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
    # The read session is opened here, not by the ReadDb dependency: a dependency with a
    # cleanup step costs FastAPI an exit stack and a shielded scope per request.
    with database_faults_as_503(), metrics.HISTORY_SECONDS.time():
        async with database.reading() as db:
            loaded = await service.history(
                db, compactor, tenant, session_id, summary_limit, max_tokens, context_format
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
    compactor: AppCompactor,
    body: CompactRequest | None = None,
) -> CompactResponse:
    """Summarize now, inline, and answer the summary with the history after it; 409 while
    another summarization holds the session, 504 past its deadline."""
    return await service.compact(db, compactor, tenant, session_id, body or CompactRequest())


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


@probes.get("/healthz")
async def healthz() -> Health:
    """Liveness: the process answers."""
    return Health(status="ok")


@probes.get("/readyz", responses=responses(ServiceUnavailable))
async def readyz(request: Request) -> Health:
    """Readiness: the database answers, and its schema is at the revision this build needs."""
    probe = partial(_database_revision, request.app.state.engine)
    try:
        with retry_budget(PROBE_RETRIES):
            revision = await retrying(probe, "the readiness probe", "read")
    except Exception as exc:
        raise ServiceUnavailable(f"the database is unreachable: {type(exc).__name__}") from exc
    if revision != SCHEMA_REVISION:
        raise ServiceUnavailable(
            f"the database schema is at revision {revision or 'none'}, this build needs "
            f"{SCHEMA_REVISION}: run `alembic upgrade head`"
        )
    return Health(status="ok")


async def _database_revision(engine: AsyncEngine) -> str | None:
    """Reach the database; its Alembic revision."""
    async with engine.connect() as connection:
        await connection.execute(text("SELECT 1"))
        return await _schema_revision(connection)


async def _schema_revision(connection: AsyncConnection) -> str | None:
    """The database's Alembic revision; None on a database that was never migrated."""
    try:
        version = await connection.execute(text("SELECT version_num FROM alembic_version"))
    except (OperationalError, ProgrammingError) as exc:  # no such table
        if connection_lost(exc):
            raise
        return None
    return version.scalar_one_or_none()


@probes.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={
        error.status_code: {
            "description": error.__name__,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
        }
        for error in (Unauthorized, Forbidden, ServiceUnavailable)
    },
)
async def prometheus_metrics(_tenant: Tenant, db: ReadDb) -> PlainTextResponse:
    """Prometheus text; needs a key like every /v1 route (loopback only without API_KEYS)."""
    # database down: the gauge keeps its last value
    with suppress(SQLAlchemyError, OSError), retry_budget(PROBE_RETRIES):
        metrics.PENDING_JOBS.set(await store.pending_job_count(db))
    return PlainTextResponse(generate_latest().decode(), media_type=CONTENT_TYPE_LATEST)
