"""The `pooler` option of DATABASE_URL: named, it changes how Precis talks to PostgreSQL;
misspelt, it stops the server with a message naming it."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from api.db.engine import create_engine, read_engine
from api.db.pooler import split_pooler, transaction_pooled

POOLED = "postgresql+asyncpg://app@pgbouncer:6432/precis?pooler=transaction"


def test_the_option_is_taken_off_the_url_the_driver_sees() -> None:
    url, pooled = split_pooler(make_url(POOLED))
    assert pooled and "pooler" not in url.query
    assert url.render_as_string() == "postgresql+asyncpg://app@pgbouncer:6432/precis"
    assert split_pooler(make_url("postgresql+asyncpg://app@db/precis"))[1] is False


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+asyncpg://app@pgbouncer/precis?pooler=session",
        "sqlite+aiosqlite:///precis.db?pooler=transaction",
    ],
)
def test_another_value_or_database_stops_with_a_message_naming_it(url: str) -> None:
    with pytest.raises(ValueError, match="pooler"):
        create_engine(url)


async def test_a_pooled_engine_reads_in_transactions_a_direct_one_in_autocommit() -> None:
    engine = create_engine(POOLED)  # connects lazily: no server needed to inspect it
    try:
        assert transaction_pooled(engine)
        assert read_engine(engine) is engine  # no autocommit reads behind a pooler
        direct = create_engine("postgresql+asyncpg://app@db/precis")
        assert not transaction_pooled(direct)
        assert read_engine(direct) is not direct
        await direct.dispose()
    finally:
        await engine.dispose()
