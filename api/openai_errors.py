"""OpenAI's error shape on the OpenAI-compatible routes.

The official SDKs read `{"error": {"message", "type", "param", "code"}}` and raise their own
exception class by status (`NotFoundError` for 404, `BadRequestError` for 400, ...). Every route
under one of `OPENAI_PATH_PREFIXES` answers its errors in that shape, with OpenAI's statuses (a
bad parameter is 400, never 422); the rest of the API keeps Precis' `{"error", "detail"}`.

Two ways in: `openai_shaped` wraps each exception handler of the app (the handler's own answer
is re-rendered, so its status, words and headers stay one decision), and `OpenAIGateErrors`
re-renders the answers of the middlewares that run before the app (the key gate's 401/403, the
body limit's 413). A route raises `OpenAIError` for an error that only OpenAI's API has.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.compat import anthropic_shapes
from api.validation_words import located_errors

ANTHROPIC_PATH_PREFIXES = ("/v1/messages",)
"""Routes that answer errors in Anthropic's shape (`{"type": "error", "error": {"type",
"message"}}`): the Messages API."""

OPENAI_PATH_PREFIXES = (
    "/v1/conversations",
    "/v1/responses",
    "/v1/chat/completions",
    *ANTHROPIC_PATH_PREFIXES,
)
"""Routes that answer errors in OpenAI's shape (or Anthropic's, on `ANTHROPIC_PATH_PREFIXES`):
the Conversations, Responses and Chat Completions APIs, and the Messages API."""

INVALID_REQUEST = "invalid_request_error"
"""OpenAI's `type` of every 4xx answer but a rate limit."""

SERVER_ERROR = "server_error"
"""OpenAI's `type` of a 5xx answer."""

RATE_LIMIT = "rate_limit_error"
"""The `type` of a 429 answer."""

UNPROCESSABLE = 422
"""Precis' status for a request that does not validate; OpenAI answers those 400."""

BAD_REQUEST = 400
UNAUTHORIZED = 401
CONFLICT = 409

SHOULD_RETRY = "x-should-retry"
"""The header the official OpenAI and Anthropic SDKs read before their own retry rules."""

VALIDATION_FAILED = "validation_failed"
"""The `code` of a request that does not validate (Precis's `ValidationFailed`, in snake case)."""

INVALID_API_KEY = "invalid_api_key"
"""OpenAI's `code` of a 401: the SDKs and their users know it."""

_WORD_START = re.compile(r"(?<!^)(?=[A-Z])")
_LOCATION = re.compile(r"^(?:body|query|path|header)\.(\S+?):\s")
"""The field a Precis detail starts with (`query.limit: ...`): the `param` of its answer."""

_ROOTS = frozenset({"body", "query", "path", "header"})


class OpenAIErrorDetail(BaseModel):
    """What went wrong, as OpenAI's API says it."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    message: str
    """What is wrong, in words."""
    type: str
    """`invalid_request_error` (4xx), `rate_limit_error` (429) or `server_error` (5xx)."""
    param: str | None
    """The request parameter at fault (`items[0].content`, `limit`), when one is."""
    code: str | None
    """A machine-readable name of the error (`not_found`, `idempotency_conflict`), or null."""


class OpenAIErrorBody(BaseModel):
    """The body of every 4xx and 5xx answer of the OpenAI-compatible routes."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    error: OpenAIErrorDetail
    """The error."""


class OpenAIError(Exception):
    """An error answered in OpenAI's shape, whatever the route: raise it where only OpenAI's
    API has the error (an unsupported parameter, an upstream model's failure)."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.type = type or error_type(status_code)
        self.param = param
        self.code = code
        self.headers = dict(headers or {})


def error_type(status_code: int) -> str:
    """OpenAI's `type` for a status."""
    if status_code == 429:
        return RATE_LIMIT
    return SERVER_ERROR if status_code >= 500 else INVALID_REQUEST


def is_openai_path(path: str) -> bool:
    """Whether `path` (without the app's root path) is an OpenAI-compatible route."""
    return _under(path, OPENAI_PATH_PREFIXES)


def is_anthropic_path(path: str) -> bool:
    """Whether `path` (without the app's root path) is a route of Anthropic's Messages API."""
    return _under(path, ANTHROPIC_PATH_PREFIXES)


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == prefix or path.startswith(prefix + "/") for prefix in prefixes)


def _route_path(scope: Scope) -> str:
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def error_response(error: OpenAIError, path: str = "") -> JSONResponse:
    """`error` as an answer in OpenAI's shape (Anthropic's on its routes)."""
    headers = dict(error.headers or {})
    if error.status_code == CONFLICT and not {"retry-after", SHOULD_RETRY} & {
        key.lower() for key in headers
    }:
        # a conflict no wait resolves (an id given to other content): the SDKs, which retry
        # every 409 otherwise, answer it at once
        headers[SHOULD_RETRY] = "false"
    if is_anthropic_path(path):
        body = anthropic_shapes.error_body(error.status_code, error.message)
        return JSONResponse(body, status_code=error.status_code, headers=headers)
    body = {
        "error": {
            "message": error.message,
            "type": error.type,
            "param": error.param,
            "code": error.code,
        }
    }
    return JSONResponse(body, status_code=error.status_code, headers=headers)


async def openai_error(request: Request, exc: Exception) -> Response:
    """The handler of `OpenAIError`, on any route."""
    assert isinstance(exc, OpenAIError)
    return error_response(exc, _route_path(request.scope))


Handler = Callable[[Request, Exception], Awaitable[Response]]


def openai_shaped(handler: Handler) -> Handler:
    """`handler`, whose answer is re-rendered in OpenAI's shape on the OpenAI-compatible
    routes (422 becoming 400, `param` naming the field at fault)."""

    async def handle(request: Request, exc: Exception) -> Response:
        answer = await handler(request, exc)
        if not is_openai_path(_route_path(request.scope)):
            return answer
        path = _route_path(request.scope)
        return reshaped(answer.status_code, answer.body, answer.headers, _param_of(exc), path)

    return handle


def reshaped(
    status_code: int,
    body: bytes | memoryview,
    headers: Mapping[str, str],
    param: str | None,
    path: str = "",
) -> Response:
    """A Precis error answer (`{"error": <name>, "detail": ...}`) in OpenAI's shape."""
    try:
        parsed = json.loads(bytes(body))
    except ValueError:
        parsed = None
    if not (isinstance(parsed, dict) and isinstance(parsed.get("error"), str)):
        return Response(bytes(body), status_code, headers=dict(headers))
    name, detail = parsed["error"], str(parsed.get("detail", ""))
    status = BAD_REQUEST if status_code == UNPROCESSABLE else status_code
    match = _LOCATION.match(detail)
    kept = {
        key: value
        for key, value in headers.items()
        if key.lower() in ("retry-after", "www-authenticate", "allow")
    }
    error = OpenAIError(
        status,
        detail,
        param=param or (_as_param(match.group(1).split(".")) if match else None),
        code=INVALID_API_KEY if status == UNAUTHORIZED else snake_case(name),
        headers=kept,
    )
    return error_response(error, path)


def _param_of(exc: Exception) -> str | None:
    """The field a validation error names first, as OpenAI writes a `param`."""
    if isinstance(exc, RequestValidationError):
        for location, _ in located_errors(exc.errors(), exc.body):
            if location:
                return _as_param([str(part) for part in location])
    if isinstance(exc, OpenAIError):
        return exc.param
    return None


def _as_param(location: list[str]) -> str | None:
    """`["body", "items", "0", "content"]` as `items[0].content`."""
    parts = location[1:] if location and location[0] in _ROOTS else location
    text = ""
    for part in parts:
        text += f"[{part}]" if part.isdigit() else (f".{part}" if text else part)
    return text or None


def snake_case(name: str) -> str:
    """`IdempotencyConflict` as `idempotency_conflict`."""
    return _WORD_START.sub("_", name).lower()


class OpenAIGateErrors:
    """Pure ASGI middleware, outside the key gate and the body limit: their refusals (401,
    403, 413) of an OpenAI-compatible route in OpenAI's shape. Answers other than a Precis
    error pass through untouched, streamed ones included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_openai_path(_route_path(scope)):
            await self.app(scope, receive, send)
            return
        held: Message | None = None
        chunks: list[bytes] = []

        async def reshaping_send(message: Message) -> None:
            nonlocal held
            if message["type"] == "http.response.start" and message["status"] >= BAD_REQUEST:
                held = message
                return
            if held is None:
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            headers = {key.decode(): value.decode() for key, value in held["headers"]}
            answer = reshaped(held["status"], b"".join(chunks), headers, None, _route_path(scope))
            await answer(scope, receive, send)

        await self.app(scope, receive, reshaping_send)


def openai_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` of an OpenAI-compatible route: each status answers `OpenAIErrorBody`."""
    return {status: {"model": OpenAIErrorBody} for status in statuses}


class AnthropicErrorDetail(BaseModel):
    """What went wrong, as Anthropic's API says it."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    type: str
    """`invalid_request_error`, `authentication_error`, `rate_limit_error`, `api_error`, ..."""
    message: str
    """What is wrong, in words."""


class AnthropicErrorBody(BaseModel):
    """The body of every 4xx and 5xx answer of the Messages API's routes."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    type: str
    """Always `error`."""
    error: AnthropicErrorDetail
    """The error."""


def anthropic_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` of a Messages API route: each status answers `AnthropicErrorBody`."""
    return {status: {"model": AnthropicErrorBody} for status in statuses}
