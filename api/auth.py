"""Authentication: bearer keys mapped to tenants, or loopback-only development mode.

`KeyGate` authenticates every request but the probes before the application sees it, so a
client without a valid key learns nothing: not a validation error, not even which paths
exist. The `Tenant` dependency then reads the tenant the gate found.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Mapping
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import Forbidden, PrecisError, Unauthorized
from api.openai_errors import is_anthropic_path

DEVELOPMENT_TENANT = "default"
"""The single tenant of development mode (no API_KEYS configured)."""

API_KEY_HEADER = "x-api-key"
"""Where Anthropic's clients send their key (accepted on the Messages API's routes)."""

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
"""Probes answer anyone: orchestrators call them without credentials and they reveal no data."""

OPERATOR_PATHS = frozenset({"/metrics"})
"""Server-wide views (every tenant's traffic): with API_KEYS, only OPERATOR_KEY opens them."""

OPERATOR_SCOPE_KEY = "precis.operator"
"""Where `KeyGate` marks a request made with the operator's key (or in development mode)."""

TENANT_SCOPE_KEY = "precis.tenant"
"""Where `KeyGate` leaves the authenticated tenant in the ASGI scope."""

CONSOLE_PATH = "/console"
"""The operator console's pages (`api.console`): authenticated by a cookie, not a header."""

CONSOLE_COOKIE = "precis_console"
"""The console's cookie: the random token of a login (`api.console.logins`), never the key."""

BEARER = HTTPBearer(
    auto_error=False,
    description="An API key from API_KEYS. Without API_KEYS (development mode) no key is "
    "needed, but only loopback clients are served.",
)
"""Declares the bearer scheme in the OpenAPI document; `KeyGate` does the checking."""

logger = logging.getLogger("precis.auth")


def _is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _names_loopback(host_header: str) -> bool:
    """A Host header naming this machine: a loopback address, `localhost` or a name under it
    (RFC 6761: browsers resolve those to loopback themselves, never through DNS)."""
    try:
        name = urlsplit("//" + host_header).hostname
    except ValueError:
        return False
    if name is None:
        return False
    return _is_loopback(name) or name.endswith(".localhost")


def authenticate(
    keys: Mapping[str, str],
    host: str | None,
    authorization: str,
    origin: str | None = None,
    host_header: str | None = None,
) -> str:
    """The tenant of a request; keys are compared in constant time and never logged.

    `keys` maps each API key to its tenant; empty means development mode (loopback only).
    In development mode a request from a web page of another site is refused too: its
    `Origin` is not loopback (a body without `Content-Type` is read as JSON, and a browser
    sends such a request from any page without asking first), or its `Host` is not (DNS
    rebinding: a page of another site whose name was made to point at 127.0.0.1 reaches the
    server from loopback, same-origin, with its own name in `Host`).
    """
    if not keys:
        if not _is_loopback(host):
            logger.warning("refused %s: no API_KEYS configured, so only loopback is served", host)
            raise Forbidden("no API_KEYS are configured: only loopback clients are served")
        if origin is not None and not _is_loopback(urlsplit(origin).hostname):
            raise Forbidden(
                f"no API_KEYS are configured: requests from web pages of other sites "
                f"({origin}) are refused"
            )
        if host_header is not None and not _names_loopback(host_header):
            raise Forbidden(
                "no API_KEYS are configured: only requests addressed to localhost or a loopback "
                f"address are served, not to {host_header[:100]!r}"
            )
        return DEVELOPMENT_TENANT
    scheme, _, presented = authorization.partition(" ")
    candidate = presented.strip().encode()
    if scheme.lower() != "bearer" or not candidate:
        raise Unauthorized(
            "missing bearer API key: send `Authorization: Bearer <key>` (`x-api-key` is read on "
            "/v1/messages only, as Anthropic's clients send it)"
        )
    tenant: str | None = None
    for key, key_tenant in keys.items():  # no early exit: the time does not tell which key
        if hmac.compare_digest(key.encode(), candidate):
            tenant = key_tenant
    if tenant is None:
        raise Unauthorized("invalid API key")
    return tenant


def authenticate_operator(
    keys: Mapping[str, str], operator_key: str | None, authorization: str
) -> None:
    """Let the operator's key through (keys are set); a tenant's key or none is refused.

    A tenant's key is refused with 403, not 401: its holder knows the key is valid, and is
    told which key this path wants instead."""
    scheme, _, presented = authorization.partition(" ")
    candidate = presented.strip().encode()
    if scheme.lower() != "bearer" or not candidate:
        raise Unauthorized("missing bearer API key (this path wants OPERATOR_KEY)")
    if operator_key is not None and hmac.compare_digest(operator_key.encode(), candidate):
        return
    tenant_key = False
    for key in keys:  # no early exit, as in `authenticate`
        tenant_key |= hmac.compare_digest(key.encode(), candidate)
    if tenant_key:
        raise Forbidden(
            "this path shows every tenant's traffic: it answers the operator's key "
            "(OPERATOR_KEY), not a tenant's"
        )
    raise Unauthorized("invalid API key")


def is_console_path(path: str) -> bool:
    return path == CONSOLE_PATH or path.startswith(CONSOLE_PATH + "/")


class KeyGate:
    """Pure ASGI middleware: refuses (401/403) any request but the probes without a valid key.

    The console's paths carry no key: with API_KEYS they reach the console with no tenant, and
    it finds its login's tenant itself (`api.console.logins`: a database read, which has no
    place in front of every request) or answers its login form; in development mode they get
    the API's loopback rules and its tenant."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _route_path(scope) in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        host = client[0] if client else None
        try:
            headers = Headers(scope=scope)
            keys = scope["app"].state.tenant_keys
            origin = headers.get("origin")
            host_header = headers.get("host")
            path = _route_path(scope)
            if is_console_path(path):
                # with API_KEYS the console reads its cookie's login itself, or asks for a key
                tenant = None if keys else authenticate(keys, host, "", origin, host_header)
            elif path in OPERATOR_PATHS and keys:
                operator_key = scope["app"].state.operator_key
                authenticate_operator(keys, operator_key, _one_authorization(headers))
                tenant, scope[OPERATOR_SCOPE_KEY] = None, True
            else:
                authorization = _one_authorization(headers, path)
                tenant = authenticate(keys, host, authorization, origin, host_header)
                # development mode: the one loopback user is the operator too
                scope[OPERATOR_SCOPE_KEY] = not keys
        except PrecisError as exc:
            challenge = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
            response = JSONResponse(
                {"error": type(exc).__name__, "detail": exc.detail},
                status_code=exc.status_code,
                headers=challenge,
            )
            await response(scope, receive, send)
            return
        if tenant is not None:
            scope[TENANT_SCOPE_KEY] = tenant
        await self.app(scope, receive, send)


def _one_authorization(headers: Headers, path: str = "") -> str:
    """The Authorization header; sent twice it is refused, not resolved by picking one. On
    the Messages API's routes, the key may come as `x-api-key` instead, as Anthropic's
    clients send it."""
    values = headers.getlist("authorization")
    if not values and is_anthropic_path(path):
        values = [f"Bearer {key}" for key in headers.getlist(API_KEY_HEADER)]
    if len(values) > 1:
        raise Unauthorized("more than one Authorization header")
    return values[0] if values else ""


def _route_path(scope: Scope) -> str:
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


async def tenant_for(
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
) -> str:
    """The tenant `KeyGate` authenticated; the credentials parameter only documents the scheme."""
    tenant = request.scope.get(TENANT_SCOPE_KEY)
    if not isinstance(tenant, str):
        raise Unauthorized("the request was not authenticated")
    return tenant


Tenant = Annotated[str, Depends(tenant_for)]


async def operator_for(
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
) -> None:
    """Only the operator (`KeyGate` marked the request) gets through."""
    if request.scope.get(OPERATOR_SCOPE_KEY) is not True:
        raise Forbidden("this path answers the operator's key (OPERATOR_KEY) only")


Operator = Annotated[None, Depends(operator_for)]
