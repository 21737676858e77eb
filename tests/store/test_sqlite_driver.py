"""SQLite on the driver (`api.db.driver`): where reads run, and what a connection carries back
to the pool."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from api.db import driver
from api.db.engine import create_engine
from api.db.transactions import driver_connection
from tests.conftest import migrated_database

THREAD = select(func.thread_ident())


@pytest.fixture
async def sqlite_engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    """An engine with one pooled connection on a fresh migrated SQLite file; its connections
    answer `thread_ident()` with the thread a statement runs in."""
    async with migrated_database("sqlite", tmp_path, False) as url:
        engine = create_engine(url, pool_size=1, max_overflow=0)

        @event.listens_for(engine.sync_engine, "connect")
        def _thread_function(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.create_function("thread_ident", 0, threading.get_ident)

        try:
            yield engine
        finally:
            await engine.dispose()


async def test_a_page_is_read_on_the_event_loop_a_larger_read_in_the_drivers_thread(
    sqlite_engine: AsyncEngine,
) -> None:
    """A WAL read never waits for a writer, so a page costs the loop no more than reading it;
    a read of unknown size must not hold the loop."""
    loop_thread = threading.get_ident()
    [(paged,)] = await driver.fetch(sqlite_engine, THREAD, {}, paged=True)
    [(unpaged,)] = await driver.fetch(sqlite_engine, THREAD, {}, paged=False)
    assert paged == loop_thread
    assert unpaged != loop_thread


async def test_a_connection_returned_inside_a_transaction_is_rolled_back(
    sqlite_engine: AsyncEngine,
) -> None:
    """The pool sends no ROLLBACK for a connection without a transaction (a hop to the
    driver's thread); one returned inside a transaction is rolled back, so its write lock
    and its uncommitted rows do not outlive it."""
    async with driver_connection(sqlite_engine) as connection:
        await connection.execute(
            "INSERT INTO sessions (tenant, external_id, metadata, settings, created_at,"
            " updated_at) VALUES ('t', 'left-open', '{}', '{}', '2026-01-01', '2026-01-01')"
        )
        assert connection.in_transaction
    async with driver_connection(sqlite_engine) as connection:  # the same, only connection
        assert not connection.in_transaction
    async with sqlite_engine.connect() as other:
        count = select(func.count()).select_from(text("sessions"))
        assert await other.scalar(count) == 0
