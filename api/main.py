"""The ASGI application: `api.main:app`. Engine and sessionmaker are built in the lifespan."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.auth import KeyGate
from api.db.engine import create_engine, create_sessionmaker
from api.errors import PrecisError
from api.limits import BodySizeLimit
from api.locks import SessionLocks
from api.routes import probes, router
from api.settings import Settings, get_settings
from api.summarization import Summarizer
from api.worker import Worker

logger = logging.getLogger("precis")

HTTP_ERROR_NAMES = {404: "NotFound", 405: "MethodNotAllowed", 413: "PayloadTooLarge"}


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app; settings are read at start-up (not at import) unless given."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        resolved = settings or get_settings()
        app.state.settings = resolved
        app.state.tenant_keys = resolved.tenant_keys()
        engine = create_engine(resolved.database_url)
        sessionmaker = create_sessionmaker(engine)
        summarizer = Summarizer(resolved, sessionmaker, SessionLocks(engine))
        worker = Worker(sessionmaker, summarizer, resolved.summary_workers)
        app.state.engine = engine
        app.state.sessionmaker = sessionmaker
        app.state.summarizer = summarizer
        app.state.worker = worker
        if resolved.summary_workers:
            worker.start()
        try:
            yield
        finally:
            await worker.stop()
            await engine.dispose()

    app = FastAPI(title="Precis", version="0.1.0", lifespan=lifespan)
    app.include_router(router)
    app.include_router(probes)
    app.add_exception_handler(PrecisError, _precis_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)
    app.add_middleware(BodySizeLimit)  # reads settings.max_request_bytes once they are known
    app.add_middleware(KeyGate)  # added last, so it runs first: no key, nothing else happens
    return app


def _error(status: int, name: str, detail: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": name, "detail": detail})


async def _precis_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PrecisError)
    return _error(exc.status_code, type(exc).__name__, exc.detail)


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return _error(422, "ValidationError", "; ".join(_describe(e) for e in exc.errors()))


def _describe(error: Any) -> str:
    location = ".".join(str(part) for part in error.get("loc", ()))
    message = str(error.get("msg", "invalid"))
    return f"{location}: {message}" if location else message


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    name = HTTP_ERROR_NAMES.get(exc.status_code, "HTTPError")
    return _error(exc.status_code, name, str(exc.detail))


async def _unexpected_error(_request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unexpected error", exc_info=exc)
    return _error(500, "InternalError", "an unexpected error occurred; it has been logged")


app = create_app()
