"""What every route shares: the checks a request passes before its route runs, the
parameter types, the errors the routes declare, and answers serialized once."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response, status
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel

from api.errors import (
    BadRequest,
    Forbidden,
    PayloadTooLarge,
    ServiceUnavailable,
    Unauthorized,
    UnsupportedMediaType,
    ValidationFailed,
)
from api.schemas import SESSION_ID_PATTERN
from api.session_settings import SummaryOverrides, model_not_allowed
from api.settings import Settings

MAX_PAGE_SIZE = 1000
"""Largest page a list endpoint returns in one answer."""

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


SESSION_CURSOR_PATTERN = r"^[0-9]{1,17}-[0-9]{1,19}$"
"""What the session list's cursors look like: its last session's creation time (microseconds
since the epoch) and session key."""
_SESSION_CURSOR = re.compile(SESSION_CURSOR_PATTERN)

SessionCursor = Annotated[
    str | None,
    Query(
        max_length=40,
        description="`next_cursor` of the previous page",
        json_schema_extra={"pattern": SESSION_CURSOR_PATTERN},
    ),
]


def checked_session_cursor(cursor: str | None) -> str | None:
    """A session list's cursor as handed out (`SESSION_CURSOR_PATTERN`, a key within 64 bits)."""
    if cursor is not None and not (
        cursor.isascii()
        and _SESSION_CURSOR.match(cursor)
        and int(cursor.partition("-")[2]) <= MAX_ID
    ):
        raise BadRequest("cursor is not one this server handed out")
    return cursor


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
        raise ValidationFailed(model_not_allowed(model, allowed))


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


def v1_router() -> APIRouter:
    """A router of /v1 routes, each request checked by `well_formed` first."""
    return APIRouter(prefix="/v1", dependencies=[Depends(well_formed)])


def serialized(answer: BaseModel, status_code: int = status.HTTP_200_OK) -> Response:
    """`answer` as JSON, serialized once: a returned model would be dumped, validated against
    the route's response model again and then encoded (about a third of a history load)."""
    return Response(answer.model_dump_json(), status_code, media_type="application/json")
