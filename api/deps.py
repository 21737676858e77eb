"""Request dependencies: the request's database transaction and the settings."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext, suppress
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.errors import ServiceUnavailable
from api.settings import Settings
from api.summarization import Summarizer
from api.worker import Worker


async def read_transaction(request: Request) -> AsyncIterator[AsyncSession]:
    """The database session of a request that only reads (autocommit: see
    `api.db.engine.create_read_sessionmaker`)."""
    async with _request_transaction(request.app.state.read_sessionmaker) as db:
        yield db


async def write_transaction(request: Request) -> AsyncIterator[AsyncSession]:
    """The transaction of a request that writes. On SQLite, the process's writers take turns.

    SQLite has one write lock per database, and a writer that finds it taken polls with
    growing sleeps: under many concurrent appends some starve for seconds. Queueing them
    in-process first (FIFO) keeps the wait proportional to the queue.
    """
    lock: asyncio.Lock | None = request.app.state.write_lock
    writer = _request_transaction(request.app.state.sessionmaker)
    async with lock if lock is not None else nullcontext(), writer as db:
        yield db


@asynccontextmanager
async def _request_transaction(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> AsyncIterator[AsyncSession]:
    """The request owns its transaction: commit on success, roll back on any error.

    Ends before the response is sent, so a 2xx means the data is committed.
    """
    async with sessionmaker() as db:
        try:
            yield db
            await db.commit()
        except DBAPIError as exc:
            with suppress(Exception):
                await db.rollback()
            if _unavailable(exc):
                raise ServiceUnavailable("the database is unavailable; retry") from exc
            raise
        except PoolTimeout as exc:
            with suppress(Exception):
                await db.rollback()
            raise ServiceUnavailable("no database connection was free in time; retry") from exc
        except OSError as exc:  # the driver could not even connect (refused, unreachable)
            with suppress(Exception):
                await db.rollback()
            raise ServiceUnavailable("the database is unreachable; retry") from exc
        except BaseException:
            with suppress(Exception):
                await db.rollback()
            raise


def _unavailable(exc: DBAPIError) -> bool:
    """The database, not the statement, failed: a lost connection, or none could be made."""
    return (
        exc.connection_invalidated
        or isinstance(exc, (OperationalError, InterfaceError))
        or exc.statement is None  # raised while connecting, before any statement ran
    )


async def summarizer_of(request: Request) -> Summarizer:
    summarizer: Summarizer = request.app.state.summarizer
    return summarizer


async def worker_of(request: Request) -> Worker:
    worker: Worker = request.app.state.worker
    return worker


async def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


ReadDb = Annotated[AsyncSession, Depends(read_transaction, scope="function")]
WriteDb = Annotated[AsyncSession, Depends(write_transaction, scope="function")]
AppSettings = Annotated[Settings, Depends(settings_of)]
AppSummarizer = Annotated[Summarizer, Depends(summarizer_of)]
AppWorker = Annotated[Worker, Depends(worker_of)]
