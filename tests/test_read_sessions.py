"""Read sessions hand back what they took, whichever way their statements ran, and the
PostgreSQL connections plan each prepared statement once."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from api.db.engine import PLAN_CACHE_MODE, create_read_sessionmaker


async def test_a_read_session_that_ran_a_statement_hands_its_connection_back(
    engine: AsyncEngine,
) -> None:
    reading = create_read_sessionmaker(engine)
    async with reading() as db:
        assert (await db.execute(text("SELECT 1"))).scalar_one() == 1
        assert engine.pool.checkedout() == 1  # type: ignore[attr-defined]
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]


@pytest.mark.postgresql_only
async def test_postgresql_connections_run_generic_plans(engine: AsyncEngine) -> None:
    async with engine.connect() as connection:
        mode = (await connection.execute(text("SHOW plan_cache_mode"))).scalar_one()
    assert mode == PLAN_CACHE_MODE == "force_generic_plan"
