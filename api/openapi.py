"""The OpenAPI document as this server, configured as it is, enforces it: the models a session's
`settings.model` may name, and whether an operation needs a bearer key (with API_KEYS) or
takes one optionally (development mode, where loopback clients are served without one).

FastAPI writes the document from the routes alone; what depends on the settings is set here,
once, when the document is first asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from api.auth import BEARER, OPEN_PATHS
from api.settings import Settings, get_settings

REQUIRED_KEY = (
    "An API key from API_KEYS: every operation but the probes (`/healthz`, `/readyz`) requires one."
)
"""The bearer scheme's description with API_KEYS set."""

OPTIONAL_KEY = (
    "Optional here: this server runs without API_KEYS (development mode), so it serves "
    "loopback clients without a key and checks none sent. With API_KEYS set, every operation "
    "but the probes requires one."
)
"""The bearer scheme's description in development mode."""

BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
"""The numeric bounds of a JSON Schema."""

HTTP_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})
"""The keys of an OpenAPI path item that are operations (the others: parameters, summary...)."""


def document_with_server_rules(
    app: FastAPI, build: Callable[[], dict[str, Any]], settings: Settings | None
) -> dict[str, Any]:
    """The app's OpenAPI document (FastAPI's `build`, which caches it on the app), with what
    the server's settings enforce written into it the first time."""
    if app.openapi_schema is None:
        resolved = settings or get_settings()
        document = build()
        _allowed_models(document, resolved)
        _security(document, key_required=bool(resolved.tenant_keys()))
        _exact_integer_bounds(document)
    return app.openapi_schema or build()


def _allowed_models(document: dict[str, Any], settings: Settings) -> None:
    """The models a session's `settings.model` may name, as an enum."""
    allowed = sorted(settings.allowed_models())
    model = document["components"]["schemas"]["SummaryOverrides"]["properties"]["model"]
    for option in model.get("anyOf", [model]):
        if option.get("type") == "string":
            option["enum"] = allowed


def _exact_integer_bounds(schema: Any) -> None:
    """An integer's bounds written as integers: FastAPI writes every bound as a float, and a
    float is not the bound the server checks past 2**53 (the 64-bit limit of stored JSON
    integers), nor does a client generating values from it send an integer there."""
    if isinstance(schema, dict):
        if schema.get("type") == "integer":
            for bound in BOUNDS:
                value = schema.get(bound)
                if isinstance(value, float) and value.is_integer():
                    schema[bound] = int(value)
        for value in schema.values():
            _exact_integer_bounds(value)
    elif isinstance(schema, list):
        for value in schema:
            _exact_integer_bounds(value)


def _security(document: dict[str, Any], key_required: bool) -> None:
    """Every operation `KeyGate` guards (all but the probes) declares the bearer scheme:
    required with API_KEYS; in development mode optional (`{}`, no requirement, comes
    first), so a schema-driven client neither insists on a key nor reports the server for
    serving without one."""
    name = BEARER.scheme_name
    schemes = document.setdefault("components", {}).setdefault("securitySchemes", {})
    scheme = schemes.setdefault(name, {"type": "http", "scheme": "bearer"})
    scheme["description"] = REQUIRED_KEY if key_required else OPTIONAL_KEY
    requirement: list[dict[str, list[str]]] = [{name: []}] if key_required else [{}, {name: []}]
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            if method not in HTTP_METHODS:
                continue
            if path in OPEN_PATHS:
                operation.pop("security", None)
            else:
                operation["security"] = [dict(option) for option in requirement]
