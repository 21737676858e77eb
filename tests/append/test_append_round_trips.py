"""The append on PostgreSQL is one round trip: one statement on the driver, which counts the
backlog as the server's policy reads it (`api.summary_plans.BacklogCounting`). A session whose own
settings change where the backlog starts, or raise the limit below which its tokens matter,
costs one read more on the appends that need it; nothing else does."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import event

from tests.helpers import append, user

pytestmark = pytest.mark.postgresql_only

SERVER_LIMIT = 4
"""The server's message limit: the appends below count up to and past it."""

APPENDS = 6
"""Appends to each session: past `SERVER_LIMIT`, and no job due on a default session."""


@pytest.fixture(scope="module")
def module_settings() -> dict[str, Any]:
    return {"summary_workers": 0, "summary_message_limit": SERVER_LIMIT}


@contextmanager
def round_trips(app: FastAPI) -> Iterator[list[str]]:
    """The statements the app sends while the block runs: on asyncpg's connections (the
    driver's hot path) and through SQLAlchemy on the request engine."""
    sent: list[str] = []
    names = ("fetch", "fetchrow", "fetchval", "execute")
    originals = {name: getattr(asyncpg.Connection, name) for name in names}

    def recording(original: Any) -> Any:
        async def run(self: asyncpg.Connection, query: str, *args: Any, **kwargs: Any) -> Any:
            sent.append(query)
            return await original(self, query, *args, **kwargs)

        return run

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        sent.append(statement)

    target = app.state.engine.sync_engine
    for name, original in originals.items():
        setattr(asyncpg.Connection, name, recording(original))
    event.listen(target, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(target, "before_cursor_execute", record)
        for name, original in originals.items():
            setattr(asyncpg.Connection, name, original)


async def trips_per_append(api: httpx.AsyncClient, app: FastAPI, sid: str) -> list[int]:
    """The round trips of each of `APPENDS` appends to the session, after one elsewhere (a
    fresh pooled connection's set-up is not the append's)."""
    await append(api, f"{sid}-warm-up", user("warm up"))
    trips = []
    for n in range(APPENDS):
        with round_trips(app) as sent:
            await append(api, sid, user(f"message {n}"))
        trips.append(len(sent))
    return trips


async def create(api: httpx.AsyncClient, sid: str, **settings: Any) -> None:
    created = await api.post("/v1/sessions", json={"id": sid, "settings": settings})
    assert created.status_code == 201, created.text


async def test_an_append_to_a_session_with_the_servers_settings_is_one_round_trip(
    api: httpx.AsyncClient, app: FastAPI, sid: str
) -> None:
    assert await trips_per_append(api, app, sid) == [1] * APPENDS


async def test_a_session_lowering_its_limits_appends_in_one_round_trip(
    api: httpx.AsyncClient, app: FastAPI, sid: str
) -> None:
    """What the server's policy counts covers a lower limit, and summarization turned off."""
    await create(api, sid, message_limit=SERVER_LIMIT - 1, keep_last_n=APPENDS)
    assert await trips_per_append(api, app, sid) == [1] * APPENDS
    await create(api, f"{sid}-off", dynamic_summary_enabled=False)
    assert await trips_per_append(api, app, f"{sid}-off") == [1] * APPENDS


async def test_a_session_raising_its_message_limit_reads_its_backlog_past_the_servers(
    api: httpx.AsyncClient, app: FastAPI, sid: str
) -> None:
    """Past the server's limit the statement counts no tokens; the session's own token limit
    still reads them, in one read more."""
    await create(api, sid, message_limit=100)
    below = [1] * (SERVER_LIMIT - 1)
    assert await trips_per_append(api, app, sid) == below + [2] * (APPENDS - len(below))
