"""Read-only SQL of the operator tools (`scripts/trace_summary`, `scripts/verify`): their
engine, the session lookup and the reads that trace summaries; the integrity queries are in
`api.store.integrity`.

Nothing here writes. The request paths never call these functions; the tools never call
the HTTP routes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import Select, event, func, select
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine

from api.db.engine import SQLITE_BUSY_TIMEOUT_MS, create_engine
from api.db.models import Message, Session, Summary, SummaryMessage
from api.db.pooler import split_pooler
from api.errors import SessionNotFound
from api.store.rows import (
    LINK_OF_MESSAGE,
    LINK_OF_SUMMARY,
    MESSAGE_COLUMNS,
    SESSION_COLUMNS,
    SUMMARY_COLUMNS,
    MessageRow,
    SessionRow,
    SummaryRow,
)
from api.store.sessions import get_session

TENANTS_NAMED = 10
"""Tenants named when a session id is in several: enough to pick one, one line even with many."""


def read_only_engine(database_url: str) -> AsyncEngine:
    """A read-only engine whose transactions each read one consistent snapshot.

    The tools run against live servers: without a snapshot, a message appended between two
    queries of a check would look like a violation. PostgreSQL gets REPEATABLE READ, read-only
    transactions and `default_transaction_read_only` for anything outside them (behind a
    transaction pooler, which refuses that startup parameter, nothing is outside them). SQLite
    opens the file read-only (`mode=ro`), so the tools cannot write it, not even the switch to
    WAL that the server's engine makes on connect; its driver would not start a transaction
    before a SELECT, so an explicit BEGIN is emitted (the recipe of SQLAlchemy's aiosqlite
    documentation).
    Raises FileNotFoundError for an SQLite file that does not exist.
    """
    url = make_url(database_url)
    if url.get_backend_name() == "postgresql":
        connect_args: dict[str, Any] = {}
        # a transaction pooler refuses startup parameters it does not know; behind one every
        # statement runs in a (read-only) transaction anyway
        if url.get_driver_name() == "asyncpg" and not split_pooler(url)[1]:
            connect_args["server_settings"] = {"default_transaction_read_only": "on"}
        return create_engine(
            database_url,
            isolation_level="REPEATABLE READ",
            execution_options={"postgresql_readonly": True},
            connect_args=connect_args,
        )
    engine = create_async_engine(_read_only_sqlite_url(url))

    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # the driver's own BEGIN; see `_begin`
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN")

    return engine


def _read_only_sqlite_url(url: URL) -> URL:
    """`url` as an SQLite URI opened with `mode=ro`: SQLite refuses every write on it."""
    if url.query.get("uri") in ("true", "1"):
        return url.update_query_dict({"mode": "ro"})
    if not url.database or url.database == ":memory:":
        return url  # a new, empty database: nothing to protect
    path = Path(url.database)
    if not path.is_file():
        raise FileNotFoundError(f"no SQLite database at {url.database}")
    database = f"file:{quote(str(path.resolve()))}"
    return url.set(database=database).update_query_dict({"mode": "ro", "uri": "true"})


# --- lookups --------------------------------------------------------------------------------


class SessionLookupError(LookupError):
    """A session id given on the command line names no session, or more than one."""


class UnknownSession(SessionLookupError):
    """No session has the id (in the tenant, when one was given)."""


class AmbiguousSession(SessionLookupError):
    """No tenant was given and several tenants have a session with the id."""


async def find_session(db: AsyncSession, external_id: str, tenant: str | None = None) -> SessionRow:
    """The session with this session id in `tenant`, or, without one, in whichever tenant has it.

    Raises UnknownSession, or AmbiguousSession when no tenant was given and several have the
    id. Searching every tenant scans `sessions` (the session key is the tenant's and the id's),
    which an operator's one-off lookup can afford.
    """
    if tenant is not None:
        try:
            return await get_session(db, tenant, external_id)
        except SessionNotFound:
            raise UnknownSession(f"no session {external_id!r} in tenant {tenant!r}") from None
    named = select(*SESSION_COLUMNS).where(Session.external_id == external_id)
    result = await db.execute(named.order_by(Session.tenant).limit(TENANTS_NAMED + 1))
    found = [SessionRow._make(row) for row in result]
    if not found:
        raise UnknownSession(f"no session {external_id!r} in any tenant")
    if len(found) == 1:
        return found[0]
    total = len(found)
    if total > TENANTS_NAMED:
        count = select(func.count()).select_from(Session).where(Session.external_id == external_id)
        total = int(await db.scalar(count) or 0)
    tenants = ", ".join(repr(session.tenant) for session in found[:TENANTS_NAMED])
    more = f" and {total - TENANTS_NAMED} more" if total > TENANTS_NAMED else ""
    raise AmbiguousSession(
        f"session {external_id!r} exists in {total} tenants ({tenants}{more}): "
        "pass --tenant to choose one"
    )


async def message_by_id(db: AsyncSession, message_id: int) -> MessageRow | None:
    """A message named by its id alone (an operator's trace): read on every shard on Citus."""
    row = (await db.execute(select(*MESSAGE_COLUMNS).where(Message.id == message_id))).first()
    return None if row is None else MessageRow._make(row)


async def summary_by_id(db: AsyncSession, summary_id: int) -> SummaryRow | None:
    """A summary named by its id alone (an operator's trace): read on every shard on Citus."""
    row = (await db.execute(select(*SUMMARY_COLUMNS).where(Summary.id == summary_id))).first()
    return None if row is None else SummaryRow._make(row)


async def linked_messages(db: AsyncSession, summary: SummaryRow) -> list[MessageRow]:
    """The messages a summary links, in seq order."""
    result = await db.execute(
        select(*MESSAGE_COLUMNS)
        .join(SummaryMessage, LINK_OF_MESSAGE)
        .where(
            SummaryMessage.session_id == summary.session_id,
            Message.session_id == summary.session_id,
            SummaryMessage.summary_id == summary.id,
        )
        .order_by(Message.seq)
    )
    return [MessageRow._make(row) for row in result]


async def _summaries(db: AsyncSession, query: Select[Any]) -> list[SummaryRow]:
    return [SummaryRow._make(row) for row in await db.execute(query)]


async def absorbed_summaries(db: AsyncSession, summary: SummaryRow) -> list[SummaryRow]:
    """The summaries a roll-up absorbed (`superseded_by` = its id), oldest range first."""
    return await _summaries(
        db,
        select(*SUMMARY_COLUMNS)
        .where(Summary.session_id == summary.session_id, Summary.superseded_by == summary.id)
        .order_by(Summary.first_seq),
    )


async def session_summaries(db: AsyncSession, session_key: int) -> list[SummaryRow]:
    """Every summary of a session, live, superseded and erased, by range then highest level
    first."""
    return await _summaries(
        db,
        select(*SUMMARY_COLUMNS)
        .where(Summary.session_id == session_key)
        .order_by(Summary.first_seq, Summary.level.desc(), Summary.id),
    )


async def summaries_covering(db: AsyncSession, message: MessageRow) -> list[SummaryRow]:
    """The summaries linking a message: the live one first, then down the superseded chain,
    then the erased ones (an erased summary keeps its links), each highest level first."""
    return await _summaries(
        db,
        select(*SUMMARY_COLUMNS)
        .join(SummaryMessage, LINK_OF_SUMMARY)
        .where(
            Summary.session_id == message.session_id,
            SummaryMessage.session_id == message.session_id,
            SummaryMessage.message_id == message.id,
        )
        .order_by(
            Summary.erased_at.is_not(None),
            Summary.superseded_by.is_not(None),
            Summary.level.desc(),
            Summary.id,
        ),
    )


# --- streaming sessions ---------------------------------------------------------------------


async def count_sessions(db: AsyncSession) -> int:
    return int(await db.scalar(select(func.count()).select_from(Session)) or 0)


async def session_keys_after(db: AsyncSession, after_key: int, limit: int) -> list[int]:
    """One keyset page of session keys in order: callers stream all sessions page by page."""
    return list(
        await db.scalars(
            select(Session.id).where(Session.id > after_key).order_by(Session.id).limit(limit)
        )
    )
