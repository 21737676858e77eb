"""Precis as the benchmark drives it: at the store layer (`PrecisStore`: the product's own
engine, sessionmaker and store functions, no HTTP) and through HTTP (`post`, `get`)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api import store
from api.append import store_batch
from api.db import driver
from api.db.engine import (
    create_engine,
    create_read_sessionmaker,
    create_sessionmaker,
    read_engine,
)
from api.db.transactions import Database
from api.settings import Settings
from api.store.loader import load_parameters, load_statement
from scripts.bench.lib import TENANT, Payloads


class PrecisStore:
    """The product's own engine, sessionmaker and store functions: no HTTP, no pydantic."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: AsyncEngine = create_engine(url)
        self.sessionmaker: async_sessionmaker[AsyncSession] = create_sessionmaker(self.engine)
        self.read_engine = read_engine(self.engine)
        self.read_sessionmaker = create_read_sessionmaker(self.engine)
        sqlite = self.engine.dialect.name == "sqlite"
        self.database = Database(
            self.sessionmaker, self.read_sessionmaker, asyncio.Lock() if sqlite else None
        )
        self.settings = Settings(_env_file=None, database_url=url, summary_workers=0)
        self.starts: dict[int, store.HistoryStart] = {}
        """What a load of each session starts from: the session row and its flags, as the
        history route reads them first (`refresh`)."""

    async def append(self, external_id: str, batch: Sequence[store.NewMessage]) -> None:
        """The service's append (`store_batch`): PostgreSQL's one statement, SQLite's
        transaction, and the proactive trigger's check."""
        await store_batch(self.database, self.settings, TENANT, external_id, batch)

    async def create(self, external_id: str, settings: dict[str, Any]) -> int:
        async with self.sessionmaker() as db:
            session = await store.create_session(db, TENANT, external_id, {}, settings)
            await db.commit()
            return session.id

    async def refresh(self, external_id: str) -> store.HistoryStart:
        """Read what a load of the session starts from (the route's first round trip)."""
        async with self.read_sessionmaker() as db:
            start = await store.session_for_history(db, TENANT, external_id)
        self.starts[start.session.id] = start
        return start

    async def load(self, session_key: int, max_tokens: int | None) -> int:
        """What the loader asks of the store once it has the session row: the live summaries
        and the messages after them (one statement while a page covers the budget)."""
        start = self.starts[session_key]
        async with self.read_sessionmaker() as db:
            rows = await store.load_rows(
                db, start.session, 3, max_tokens, summarized=start.summarized
            )
            return len(rows.messages)

    async def pooled_statement(self, session_key: int, max_tokens: int | None) -> None:
        """The least the store's load can cost on the service's pool: a connection checked
        out, the loader's statement run on its driver connection (and, on SQLite, its values
        decoded), the connection checked back in (`api.db.driver.fetch`); no row types, no
        token budget, no read session."""
        start = self.starts[session_key]
        statement = load_statement(start.session, start.summarized)
        params = load_parameters(start.session, 3, max_tokens)
        await driver.fetch(self.read_engine, statement, params, paged=max_tokens is not None)

    async def close(self) -> None:
        await self.engine.dispose()


def new_message(payloads: Payloads, index: int) -> store.NewMessage:
    message = payloads.message(index)
    return store.NewMessage(
        role=message["role"],
        content=message["content"],
        content_parts=None,
        name=None,
        tool_calls=None,
        tool_call_id=None,
        metadata=None,
        client_id=None,
        token_count=payloads.tokens(index),
    )


async def post(client: httpx.AsyncClient, session: str, messages: list[dict[str, str]]) -> Any:
    response = await client.post(f"/v1/sessions/{session}/messages", json={"messages": messages})
    if response.status_code != 201:
        raise RuntimeError(f"append answered {response.status_code}: {response.text[:300]}")
    return response.json()


async def get(client: httpx.AsyncClient, path: str, params: dict[str, str]) -> Any:
    response = await client.get(path, params=params)
    if response.status_code != 200:
        raise RuntimeError(f"GET {path} answered {response.status_code}: {response.text[:300]}")
    return response.json()
