"""The ASGI application: `api.main:app`. Engine and sessionmaker are built in the lifespan."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from functools import partial

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from api.auth import CONSOLE_PATH, KeyGate
from api.background_responses import BackgroundResponses
from api.compat.responses import Responder
from api.console import routes as console
from api.db.engine import create_database, create_engine
from api.db.transactions import RetryPolicy, retry_budget
from api.errors import PrecisError, ValidationFailed
from api.limits import BodySizeLimit
from api.locks import SessionLocks
from api.model_tokens import TokenRatios
from api.openai_errors import OpenAIError, OpenAIGateErrors, openai_error, openai_shaped
from api.openapi import document_with_server_rules
from api.retention import Sweeper
from api.routes import ROUTERS
from api.settings import Settings, get_settings
from api.store.retention import expire_idle_after
from api.summarization import Summarization
from api.validation_words import as_text, located_errors
from api.worker import Worker
from summarizer.llm import load_litellm
from summarizer.local import LOCAL_MODEL
from summarizer.tokens import encoding

logger = logging.getLogger("precis")

HTTP_ERROR_NAMES = {
    400: "BadRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    413: "PayloadTooLarge",
}

MAX_PATH_SHOWN = 200
"""Characters of an unrouted path a 404 quotes back: enough to see the typo, not an echo."""

API_DESCRIPTION = (
    "Persistent chat sessions with an SQL-backed, traceable summary store. Append messages "
    "(OpenAI chat messages or Responses API items), and before every LLM call load a history "
    "that fits the model's context: the latest summaries plus the messages after them. "
    'Every error answers `{"error": "<Name>", "detail": "..."}`, but on the OpenAI-compatible '
    "routes (`/v1/conversations`, `/v1/responses`), which answer OpenAI's "
    '`{"error": {"message", "type", "param", "code"}}`.'
)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app; settings are read at start-up (not at import) unless given."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        resolved = settings or get_settings()
        app.state.settings = resolved
        app.state.tenant_keys = resolved.tenant_keys()
        operator_key = resolved.operator_key
        app.state.operator_key = operator_key.get_secret_value() if operator_key else None
        app.state.retry_policy = RetryPolicy(resolved.database_retry_seconds)
        encoding()  # load the tokenizer now, not in the first request
        if resolved.summary_model != LOCAL_MODEL or resolved.responses_models():
            # Importing litellm takes seconds of CPU: pay it before serving, not mid-traffic.
            await load_litellm()
        engine = create_engine(
            resolved.database_url, pool_size=resolved.database_pool_size, max_overflow=0
        )
        # Summarization runs while the request that asked for it holds a connection: with one
        # shared pool, requests could hold every connection and wait for each other forever.
        running = resolved.summary_concurrency
        background = create_engine(resolved.database_url, pool_size=2 * running, max_overflow=0)
        write_lock = asyncio.Lock() if engine.dialect.name == "sqlite" else None
        database = create_database(engine, write_lock)
        expire_idle_after(database, resolved.session_idle_ttl_days)
        # one unit of work for summarization, its lease and the worker, on their own pool
        summarizing = create_database(background, write_lock)
        locks = SessionLocks(summarizing, max_running=running)
        summarization = Summarization(resolved, summarizing, locks)
        worker = Worker(summarizing, summarization, resolved.summary_workers)
        sweeper = Sweeper(summarizing, resolved)
        ratios = TokenRatios(database)
        responder = Responder(database, summarization, resolved, ratios)
        runs = BackgroundResponses(responder, resolved.background_response_workers)
        app.state.engine = engine
        app.state.sessionmaker = database.sessionmaker
        app.state.database = database
        app.state.token_ratios = ratios
        app.state.summarization = summarization
        app.state.worker = worker
        app.state.sweeper = sweeper
        app.state.background_responses = runs
        if resolved.summary_workers:
            worker.start()
            sweeper.start()  # the worker's process deletes expired sessions too
            if resolved.background_response_workers:
                runs.start()
        try:
            yield
        finally:
            await sweeper.stop()
            await runs.stop()
            await worker.stop()
            await engine.dispose()
            await background.dispose()

    # A body without Content-Type is read as JSON (simple HTTP clients send none); `KeyGate` refuses
    # such requests from other sites' web pages in development mode.
    # /docs and /redoc serve their scripts and styles from this package, not a CDN.
    app = FastAPIOffline(
        title="Precis",
        version="0.1.0",
        description=API_DESCRIPTION,
        lifespan=lifespan,
        strict_content_type=False,
    )
    for router in ROUTERS:
        app.include_router(router)
    app.include_router(console.router)  # HTML pages, left out of the OpenAPI document
    app.openapi = partial(document_with_server_rules, app, app.openapi, settings)  # type: ignore[method-assign]
    # On the OpenAI-compatible routes each handler's answer is re-rendered in OpenAI's shape.
    app.add_exception_handler(PrecisError, openai_shaped(precis_error))
    app.add_exception_handler(RequestValidationError, openai_shaped(_validation_error))
    app.add_exception_handler(StarletteHTTPException, openai_shaped(_http_error))
    app.add_exception_handler(OpenAIError, openai_error)
    app.add_exception_handler(Exception, openai_shaped(_unexpected_error))
    app.add_middleware(DatabaseRetryBudget)
    app.add_middleware(BodySizeLimit)  # reads settings.max_request_bytes once they are known
    app.add_middleware(KeyGate)  # added late, so it runs early: no key, nothing else happens
    app.add_middleware(OpenAIGateErrors)  # the gates' refusals of OpenAI routes, OpenAI-shaped
    return app


class DatabaseRetryBudget:
    """Give each HTTP request a database retry budget of its own (DATABASE_RETRY_SECONDS from
    its first lost connection: `api.db.transactions.RetryBudget`), which every unit of work
    of the request draws on, the driver's hot reads included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        policy: RetryPolicy = scope["app"].state.retry_policy
        with retry_budget(policy):
            await self.app(scope, receive, send)


def _error(
    status: int, name: str, detail: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    content = {"error": name, "detail": detail}
    return JSONResponse(status_code=status, content=content, headers=headers)


async def precis_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PrecisError)
    retry_after = exc.retry_after_seconds
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return _error(exc.status_code, type(exc).__name__, exc.detail, headers)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    said = "; ".join(as_text(*each) for each in located_errors(exc.errors(), exc.body))
    if _is_console(request):
        return console.error_page(request, 422, said)
    return _error(422, ValidationFailed.__name__, said)


def _is_console(request: Request) -> bool:
    path = request.url.path
    return path == CONSOLE_PATH or path.startswith(CONSOLE_PATH + "/")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and exc.__cause__ is not None:
        # FastAPI could not parse the JSON body: malformed JSON, like any other, gets 422.
        return _error(422, ValidationFailed.__name__, _unparsable_body(exc.__cause__))
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        # Starlette lists the methods of one route; a path may have several routes.
        headers["Allow"] = ", ".join(_allowed_methods(request.url.path)) or headers.get("Allow", "")
    name = HTTP_ERROR_NAMES.get(exc.status_code, "HTTPError")
    detail = str(exc.detail)
    if exc.status_code == 404 and "endpoint" not in request.scope:
        detail = _no_route(request.method, request.url.path)
    if _is_console(request) and exc.status_code in (400, 404):
        return console.error_page(request, exc.status_code, detail)
    return _error(exc.status_code, name, detail, headers)


def _no_route(method: str, path: str) -> str:
    """Which path matched no route, and where the routes of its family are listed."""
    families = {
        "/".join(route.path.split("/")[:3])
        for router in ROUTERS
        for route in router.routes
        if isinstance(route, APIRoute)
    }
    family = next((f for f in sorted(families) if path == f or path.startswith(f + "/")), None)
    where = f"the routes under {family}" if family else "the API's routes"
    shown = path if len(path) <= MAX_PATH_SHOWN else path[:MAX_PATH_SHOWN] + "..."
    return f"no route matches {method} {shown!r}; {where} are listed at /docs"


def _allowed_methods(path: str) -> list[str]:
    methods: set[str] = set()
    for route in (route for router in ROUTERS for route in router.routes):
        if isinstance(route, APIRoute) and route.path_regex.match(path):
            methods |= route.methods or set()
    return sorted(methods)


def _unparsable_body(cause: BaseException) -> str:
    """Why a body that is not malformed JSON to the letter still could not be parsed."""
    if isinstance(cause, RecursionError):
        return "body: JSON nested too deeply to parse"
    if isinstance(cause, UnicodeDecodeError):
        return f"body: invalid JSON: not UTF-8 at byte {cause.start}"
    if isinstance(cause, ValueError) and "digits" in str(cause):
        return "body: a number has too many digits (4300 at most)"
    return f"body: could not be read ({type(cause).__name__})"


async def _unexpected_error(_request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unexpected error", exc_info=exc)
    return _error(500, "InternalError", "an unexpected error occurred; it has been logged")


app = create_app()
