"""Read sessions hand back what they took, and close for free when the statements ran on the
driver (`api.db.driver`) and the session never opened a connection of its own."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from api import store
from api.db.engine import create_engine, create_read_sessionmaker
from api.db.transactions import ReadSession
from api.errors import SessionNotFound
from api.store.responses import get_response


@pytest.fixture
def closes(monkeypatch: pytest.MonkeyPatch) -> list[ReadSession]:
    """The read sessions whose `close` ran."""
    closed: list[ReadSession] = []
    close = ReadSession.close

    async def counted(self: ReadSession) -> Any:
        closed.append(self)
        return await close(self)

    monkeypatch.setattr(ReadSession, "close", counted)
    return closed


async def test_a_read_session_that_ran_a_statement_closes_and_hands_its_connection_back(
    engine: AsyncEngine, closes: list[ReadSession]
) -> None:
    async with create_read_sessionmaker(engine)() as db:
        assert (await db.execute(text("SELECT 1"))).scalar_one() == 1
        assert engine.pool.checkedout() == 1  # type: ignore[attr-defined]
    assert closes == [db]
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_a_read_session_whose_reads_ran_on_the_driver_has_nothing_to_close(
    engine: AsyncEngine, closes: list[ReadSession]
) -> None:
    async with create_read_sessionmaker(engine)() as db:
        with pytest.raises(SessionNotFound):
            await store.session_for_history(db, "default", "missing")
    assert closes == []
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_a_read_after_one_through_sqlalchemy_stays_on_the_sessions_connection(
    database_url: str,
) -> None:
    # the driver would take a second connection: with a pool of one, the read would wait for
    # the connection its own session holds (as requests each holding one would wait for
    # another) until the pool's timeout
    single = create_engine(database_url, pool_size=1, max_overflow=0, pool_timeout=2)
    try:
        async with create_read_sessionmaker(single)() as db:
            assert (await db.execute(text("SELECT 1"))).scalar_one() == 1
            assert await get_response(db, "default", "resp_never_stored") is None
            with pytest.raises(SessionNotFound):
                await store.get_session(db, "default", "never-made")
            assert single.pool.checkedout() == 1  # type: ignore[attr-defined]
    finally:
        await single.dispose()
