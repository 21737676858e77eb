"""Request dependencies: the request's database transaction and the settings."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncSession

from api.background_responses import BackgroundResponses
from api.db.faults import connection_lost, describe_fault
from api.db.transactions import CommitConnectionLost, Database
from api.errors import ServiceUnavailable
from api.model_tokens import TokenRatios
from api.settings import Settings
from api.summarization import Summarization
from api.worker import Worker

logger = logging.getLogger("precis.db")


async def read_transaction(request: Request) -> AsyncIterator[AsyncSession]:
    """The database session of a request that only reads (autocommit: see
    `api.db.engine.create_read_sessionmaker`)."""
    with database_faults_as_503():
        async with database_of(request).reading() as db:
            yield db


def database_of(request: Request) -> Database:
    database: Database = request.app.state.database
    return database


async def app_database(request: Request) -> Database:
    """The app's database, for a use case that opens its own units of work (an append, a
    write run again when its connection is lost: `Database.write`). Each commits before the
    response is sent, so a 2xx means the data is committed.

    Every dependency here is async: FastAPI runs a plain function in a worker thread, a
    thread hop per dependency per request."""
    return database_of(request)


@contextmanager
def database_faults_as_503() -> Iterator[None]:
    """A database that failed (rather than a statement) becomes 503 with Retry-After, logged
    once at WARNING with its cause. A lost connection gets here once the request's retry
    budget is spent (DATABASE_RETRY_SECONDS), or when the work cannot be run again."""
    try:
        yield
    except Exception as exc:
        unavailable = _as_503(exc)
        if unavailable is None:
            raise
        logger.warning("answering 503 (%s): %s", unavailable.detail, describe_fault(exc))
        raise unavailable from exc


def _as_503(exc: Exception) -> ServiceUnavailable | None:
    if isinstance(exc, CommitConnectionLost):
        return ServiceUnavailable(
            "the database connection was lost while committing; whether the change was "
            "stored is unknown: read it back, or retry"
        )
    if isinstance(exc, PoolTimeout):
        return ServiceUnavailable("no database connection was free in time; retry")
    if isinstance(exc, OSError):  # the driver could not even connect (refused, unreachable)
        return ServiceUnavailable("the database is unreachable; retry")
    if _unavailable(exc):
        return ServiceUnavailable("the database is unavailable; retry")
    return None


def _unavailable(exc: Exception) -> bool:
    """The database, not the statement, failed: a lost connection, or none could be made."""
    return connection_lost(exc) or (
        isinstance(exc, DBAPIError)
        and (
            isinstance(exc, (OperationalError, InterfaceError))
            or exc.statement is None  # raised while connecting, before any statement ran
        )
    )


async def summarization_of(request: Request) -> Summarization:
    summarization: Summarization = request.app.state.summarization
    return summarization


async def worker_of(request: Request) -> Worker:
    worker: Worker = request.app.state.worker
    return worker


async def background_responses_of(request: Request) -> BackgroundResponses:
    runs: BackgroundResponses = request.app.state.background_responses
    return runs


async def token_ratios_of(request: Request) -> TokenRatios:
    ratios: TokenRatios = request.app.state.token_ratios
    return ratios


async def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


ReadDb = Annotated[AsyncSession, Depends(read_transaction, scope="function")]
AppDatabase = Annotated[Database, Depends(app_database)]
AppSettings = Annotated[Settings, Depends(settings_of)]
AppSummarization = Annotated[Summarization, Depends(summarization_of)]
AppWorker = Annotated[Worker, Depends(worker_of)]
AppTokenRatios = Annotated[TokenRatios, Depends(token_ratios_of)]
AppBackgroundResponses = Annotated[BackgroundResponses, Depends(background_responses_of)]
