"""Engine construction: one async engine per process, built in the app's lifespan."""

from __future__ import annotations

import asyncio
import select
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.util import await_

from api.db.driver import uses_driver
from api.db.faults import mark_lost_connections
from api.db.pooler import mark_pooled, pooler_connect_args, split_pooler, transaction_pooled
from api.db.transactions import Database, PooledReadSession, ReadSession
from api.db.urls import async_database_url

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""How long an SQLite writer waits for the write lock before failing; appends queue behind it."""

ALIVE_BYPASS_SECONDS = 0.5
"""A pooled PostgreSQL connection back in the pool for less than this is handed out unpinged.

Under traffic a connection returns and leaves again within milliseconds: pinging it each time
would cost three round trips per request (more than a history load's own queries). A
connection idle for longer, which a server restart or an idle timeout may have closed, is pinged
first (one round trip) and replaced if dead.
"""


def create_engine(database_url: str, **kwargs: Any) -> AsyncEngine:
    """An async engine; on SQLite with WAL, foreign keys and a busy timeout on every connection.

    `database_url` is read by `api.db.urls.async_database_url` (`postgresql://` as asyncpg,
    `sqlite:///` as aiosqlite; ValueError for any other scheme).

    Statement parameters (message contents, metadata) are kept out of error messages, so a
    logged database error never carries user data.
    """
    kwargs.setdefault("hide_parameters", True)
    url, pooled = split_pooler(make_url(async_database_url(database_url)))
    if url.get_backend_name() != "sqlite":
        if pooled:
            kwargs["connect_args"] = {**kwargs.get("connect_args", {}), **pooler_connect_args()}
        engine = create_async_engine(url, **kwargs)
        if pooled:
            mark_pooled(engine)
        mark_lost_connections(engine)
        _ping_idle_connections(engine)
        return engine
    if url.database and url.database != ":memory:":
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    # `api.db.driver` reads small pages on the event loop, outside aiosqlite's thread.
    kwargs.setdefault("connect_args", {}).setdefault("check_same_thread", False)
    # A connection goes back to the pool without the ROLLBACK the pool would send (a hop to
    # aiosqlite's thread, about half the cost of a history load) unless a transaction is open.
    kwargs.setdefault("pool_reset_on_return", None)
    engine = create_async_engine(url, **kwargs)

    @event.listens_for(engine.sync_engine, "reset")
    def _roll_back_open_transaction(dbapi_connection: Any, record: Any, state: Any) -> None:
        if (
            state.asyncio_safe
            and not state.terminate_only
            and record.driver_connection.in_transaction
        ):
            dbapi_connection.rollback()

    @event.listens_for(engine.sync_engine, "connect")
    def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.close()

    return engine


def _ping_idle_connections(engine: AsyncEngine) -> None:
    """Replace dead connections at checkout: a closed one always, one the server spoke to
    while it sat in the pool always, an idle one after a ping.

    Raising `DisconnectionError` in a checkout listener makes the pool discard the connection
    and hand out a fresh one instead.
    """

    @event.listens_for(engine.sync_engine, "checkin")
    def _returned(_dbapi_connection: Any, record: Any) -> None:
        record.info["returned_at"] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _check_alive(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if record.driver_connection.is_closed():
            raise DisconnectionError("the connection was closed")
        if _server_spoke(record.driver_connection):
            raise DisconnectionError("the server spoke to the connection while it was idle")
        returned_at = record.info.get("returned_at")
        if returned_at is None or time.monotonic() - returned_at < ALIVE_BYPASS_SECONDS:
            return
        try:
            # One round trip: a query in the simple protocol, outside any transaction
            # (the dialect's ping() sends BEGIN, a query and ROLLBACK).
            await_(record.driver_connection.execute("SELECT 1"))
        except Exception as exc:
            raise DisconnectionError("the connection failed its ping") from exc


def _server_spoke(driver_connection: Any) -> bool:
    """Whether a pooled connection has unread input: the server's "terminating connection"
    message, or the end of the stream after it.

    A server says nothing to an idle connection but that goodbye. asyncpg reads the message
    and the end of the stream in two turns of the event loop, and a checkout between them
    would get a connection that can no longer run anything ("another operation is in
    progress"): `is_closed()` is not yet true, but the socket is readable.
    """
    transport = getattr(driver_connection, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return False
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


def create_read_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Sessions for requests that only read: no BEGIN and no ROLLBACK round trip (except
    behind a transaction pooler, where every statement needs a transaction: `api.db.pooler`).

    On PostgreSQL they run in autocommit; SQLite's driver already starts a transaction only
    before a write. Each statement then sees what was committed when it started, which is
    all a transaction at PostgreSQL's default level (read committed) gives too. The readers
    are built for it: messages never change once stored, so a summary landing between two
    statements of a load only leaves already-summarized messages in the tail, never a gap.
    A read request that waits on the LLM (`compact`, inline summarization) holds no open
    transaction either. A statement that lost its connection runs once more (`ReadSession`).
    """
    session_class = PooledReadSession if transaction_pooled(engine) else ReadSession
    reads = read_engine(engine)
    return async_sessionmaker(
        reads,
        class_=session_class,
        expire_on_commit=False,
        driver=reads if uses_driver(engine) else None,
    )


def create_database(engine: AsyncEngine, write_lock: asyncio.Lock | None = None) -> Database:
    """The units of work on `engine` (`api.db.transactions.Database`); on SQLite, `write_lock`
    is the one every engine on the same database shares."""
    return Database(create_sessionmaker(engine), create_read_sessionmaker(engine), write_lock)


def read_engine(engine: AsyncEngine) -> AsyncEngine:
    """`engine` for statements that only read (see `create_read_sessionmaker`)."""
    if engine.dialect.name == "postgresql" and not transaction_pooled(engine):
        return engine.execution_options(isolation_level="AUTOCOMMIT")
    return engine
