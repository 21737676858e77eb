"""A stored response's row (`api.store.responses.insert_response`, one statement on the
driver) whose connection is cut around its statement: stored once, whether the statement
never arrived or ran and its answer was lost (`tests/support/pg_proxy.py`). PostgreSQL's:
SQLite has no connection to lose."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from api.auth import DEVELOPMENT_TENANT
from api.db.engine import create_database, create_engine
from api.db.models import RESPONSES, SESSIONS
from api.store.responses import NewResponse, insert_response
from tests.helpers import append, user
from tests.support.pg_proxy import Cut, cutting_proxy

pytestmark = pytest.mark.postgresql_only


def write_retries() -> float:
    sample = REGISTRY.get_sample_value("precis_database_retries_total", {"kind": "write"})
    return sample or 0.0


@pytest.mark.parametrize("cut", ["cut_before", "cut_after"])
async def test_a_response_row_whose_statement_or_answer_is_lost_is_stored_once(
    client: httpx.AsyncClient, engine: AsyncEngine, database_url: str, cut: Cut
) -> None:
    await append(client, "turns", user("asked"))
    async with engine.connect() as connection:
        session_key = (
            await connection.execute(select(SESSIONS.c.id).where(SESSIONS.c.external_id == "turns"))
        ).scalar_one()
    row = NewResponse(
        id=f"resp_{cut}",
        tenant=DEVELOPMENT_TENANT,
        session_key=session_key,
        first_seq=1,
        last_seq=1,
        input_count=1,
        previous_response_id=None,
        body="{}",
    )
    before = write_retries()
    async with cutting_proxy(database_url) as proxy:
        proxied = create_engine(proxy.url(database_url))
        try:
            proxy.arm(cut, row.id.encode())
            await insert_response(create_database(proxied), row)
        finally:
            await proxied.dispose()
        assert proxy.cuts == 1
    assert write_retries() == before + 1
    async with engine.connect() as connection:
        stored = (await connection.execute(select(RESPONSES.c.id))).scalars().all()
    assert stored == [row.id]
