"""The probes: liveness, readiness, Prometheus metrics."""

from __future__ import annotations

from contextlib import suppress
from functools import partial

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.exc import SQLAlchemyError

from api import metrics, store
from api.auth import Operator
from api.db.transactions import RetryPolicy, retry_budget, retrying
from api.deps import ReadDb
from api.errors import Forbidden, ServiceUnavailable, Unauthorized, responses
from api.schemas import Health
from api.store import readiness

PROBE_RETRIES = RetryPolicy(budget_seconds=0.5)
"""The probes (`/readyz`, `/metrics`) answer within a prober's timeout (Kubernetes: 1 s by
default), so they wait this long at most for an unreachable database, not
DATABASE_RETRY_SECONDS."""

router = APIRouter()


@router.get("/healthz")
async def healthz() -> Health:
    """Liveness: the process answers."""
    return Health(status="ok")


@router.get("/readyz", responses=responses(ServiceUnavailable))
async def readyz(request: Request) -> Health:
    """Readiness: the database answers, takes writes (not a standby in recovery), and its
    schema is at the revision this build needs."""
    probe = partial(readiness.database_state, request.app.state.engine)
    try:
        with retry_budget(PROBE_RETRIES):
            state = await retrying(probe, "the readiness probe", "read")
    except Exception as exc:
        raise ServiceUnavailable(f"the database is unreachable: {type(exc).__name__}") from exc
    if state.in_recovery:
        raise ServiceUnavailable(
            "the database is a standby in recovery and takes no writes: point DATABASE_URL at "
            "the primary (several hosts: add target_session_attrs=primary)"
        )
    mismatch = readiness.schema_mismatch(state.revision)
    if mismatch is not None:
        raise ServiceUnavailable(mismatch)
    return Health(status="ok")


@router.get(
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
async def prometheus_metrics(_operator: Operator, db: ReadDb) -> PlainTextResponse:
    """Prometheus text, every tenant's traffic: with API_KEYS only OPERATOR_KEY opens it (a
    tenant's key is 403); without, loopback only."""
    # database down: the gauge keeps its last value
    with suppress(SQLAlchemyError, OSError), retry_budget(PROBE_RETRIES):
        metrics.PENDING_JOBS.set(await store.pending_job_count(db))
    return PlainTextResponse(generate_latest().decode(), media_type=CONTENT_TYPE_LATEST)
