"""Request dependencies: the request's database transaction and the settings."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncSession

from api.errors import ServiceUnavailable
from api.settings import Settings
from api.summarization import Summarizer
from api.worker import Worker


async def transaction(request: Request) -> AsyncIterator[AsyncSession]:
    """The request owns its transaction: commit on success, roll back on any error.

    Ends before the response is sent, so a 2xx means the data is committed.
    """
    async with request.app.state.sessionmaker() as db:
        try:
            yield db
            await db.commit()
        except DBAPIError as exc:
            with suppress(Exception):
                await db.rollback()
            if exc.connection_invalidated or isinstance(exc, (OperationalError, InterfaceError)):
                raise ServiceUnavailable("the database is unavailable; retry") from exc
            raise
        except BaseException:
            with suppress(Exception):
                await db.rollback()
            raise


def summarizer_of(request: Request) -> Summarizer:
    summarizer: Summarizer = request.app.state.summarizer
    return summarizer


def worker_of(request: Request) -> Worker:
    worker: Worker = request.app.state.worker
    return worker


def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


Db = Annotated[AsyncSession, Depends(transaction, scope="function")]
AppSettings = Annotated[Settings, Depends(settings_of)]
AppSummarizer = Annotated[Summarizer, Depends(summarizer_of)]
AppWorker = Annotated[Worker, Depends(worker_of)]
