"""The unit of work (`api.db.transactions.Database`) is the one thing under `api/` that commits;
its driver transaction, which the SQLite append runs in, stores all of its work or none of it,
after the process's other writers.

The named exceptions commit without a `commit(` call: the append on PostgreSQL, one autocommit
statement (`api/append/postgresql.py`), and `api.db.driver.write`, one statement that may run
twice to the same effect (autocommit on PostgreSQL, `Database.driver_transaction` on SQLite)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from api.db.engine import create_database, create_engine
from api.db.models import Session
from api.db.transactions import Database
from tests.conftest import migrated_database

ROOT = Path(__file__).resolve().parents[2]

UNIT_OF_WORK = "api/db/transactions.py"

INSERT_SESSION = (
    "INSERT INTO sessions (tenant, external_id, metadata, settings, created_at, updated_at) "
    "VALUES ('t', ?, '{}', '{}', '2026-01-01', '2026-01-01')"
)

LOCK_WAIT_SECONDS = 0.2
"""How long a driver transaction is watched waiting for a writer that holds the lock."""


class WorkFailed(Exception):
    """Raised by a unit of work's work halfway."""


@pytest.fixture
async def sqlite_database(tmp_path: Path) -> AsyncIterator[Database]:
    """The units of work on a fresh migrated SQLite file, with the process's write lock."""
    async with migrated_database("sqlite", tmp_path, False) as url:
        engine = create_engine(url)
        try:
            yield create_database(engine, asyncio.Lock())
        finally:
            await engine.dispose()


async def stored_sessions(database: Database) -> int:
    async with database.reading() as db:
        return int(await db.scalar(select(func.count()).select_from(Session)) or 0)


def test_no_module_under_api_commits_but_the_unit_of_work() -> None:
    committing = sorted(
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "api").rglob("*.py")
        if "commit(" in path.read_text()
    )
    assert committing == [UNIT_OF_WORK]


async def test_a_driver_transaction_stores_its_work_in_one_transaction_in_the_drivers_thread(
    sqlite_database: Database,
) -> None:
    seen: list[tuple[bool, int]] = []

    def work(connection: sqlite3.Connection) -> str:
        connection.execute(INSERT_SESSION, ("first",))
        connection.execute(INSERT_SESSION, ("second",))
        seen.append((connection.in_transaction, threading.get_ident()))
        return "done"

    assert await sqlite_database.driver_transaction(work) == "done"
    [(in_transaction, thread)] = seen
    assert in_transaction
    assert thread != threading.get_ident()
    assert await stored_sessions(sqlite_database) == 2


async def test_a_driver_transaction_whose_work_fails_stores_none_of_it(
    sqlite_database: Database,
) -> None:
    def work(connection: sqlite3.Connection) -> None:
        connection.execute(INSERT_SESSION, ("kept-out",))
        raise WorkFailed("halfway")

    with pytest.raises(WorkFailed):
        await sqlite_database.driver_transaction(work)
    assert await stored_sessions(sqlite_database) == 0


async def test_a_driver_transaction_waits_for_the_processs_other_writers(
    sqlite_database: Database,
) -> None:
    started = threading.Event()  # set in the driver's thread

    def work(connection: sqlite3.Connection) -> None:
        started.set()
        connection.execute(INSERT_SESSION, ("after-the-writer",))

    assert sqlite_database.write_lock is not None
    async with sqlite_database.write_lock:
        waiting = asyncio.create_task(sqlite_database.driver_transaction(work))
        await asyncio.sleep(LOCK_WAIT_SECONDS)
        assert not started.is_set()
    await waiting
    assert started.is_set()
    assert await stored_sessions(sqlite_database) == 1
