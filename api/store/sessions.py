"""Sessions: create, read, update, delete (an append moves a session's seqs in its own
statement: `api.append.postgresql`, `api.append.sqlite`).

Functions take the caller's AsyncSession and never commit: the caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import (
    bindparam,
    delete,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from api.db import driver
from api.db.models import SESSIONS, utcnow
from api.errors import SessionExists, SessionNotFound
from api.store.keys import session_key
from api.store.retention import Expiry, loader_expiry_params, unexpired
from api.store.rows import SESSION_COLUMNS, SessionRow

_sessions = SESSIONS.c


async def _insert_session(
    db: AsyncSession,
    tenant: str,
    external_id: str,
    metadata: dict[str, Any],
    settings: dict[str, Any],
    message_format: str | None,
    expires_at: datetime | None,
) -> SessionRow | None:
    """INSERT a new, empty session; None if the id is taken (a concurrent request's included,
    and an expired session's, until the retention sweep deletes it)."""
    dialect = postgresql if db.get_bind().dialect.name == "postgresql" else sqlite
    now = utcnow()
    result = await db.execute(
        dialect.insert(SESSIONS)
        .values(
            id=session_key(tenant, external_id),
            tenant=tenant,
            external_id=external_id,
            metadata=metadata,
            settings=settings,
            last_seq=0,
            pinned_seq=0,
            format=message_format,
            expires_at=expires_at,
            created_at=now,
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=["id"])
        .returning(*SESSION_COLUMNS)
    )
    row = result.first()
    return None if row is None else SessionRow._make(row)


async def create_session(
    db: AsyncSession,
    tenant: str,
    external_id: str,
    metadata: dict[str, Any],
    settings: dict[str, Any],
    message_format: str | None = None,
    expires_at: datetime | None = None,
) -> SessionRow:
    """A new, empty session; `message_format` None leaves the format to its first append.

    An expired session keeps its id until the retention sweep deletes it: a create of that id
    meanwhile is `SessionExists`, as an append to it is `SessionNotFound`."""
    session = await _insert_session(
        db, tenant, external_id, metadata, settings, message_format, expires_at
    )
    if session is None:
        try:
            await get_session(db, tenant, external_id)
        except SessionNotFound:  # there, but expired
            raise SessionExists(external_id, expired=True) from None
        raise SessionExists(external_id)
    return session


_SESSION_BY_EXTERNAL_ID = select(*SESSION_COLUMNS).where(
    _sessions.id == bindparam("p_session_id"),
    _sessions.tenant == bindparam("p_tenant"),
    _sessions.external_id == bindparam("p_external_id"),
    unexpired(_sessions),
)


def named(tenant: str, external_id: str) -> dict[str, Any]:
    """The parameters naming a session: its key, tenant and session id (the key routes the
    statement; the name guards against another name of the same key)."""
    return {
        "p_session_id": session_key(tenant, external_id),
        "p_tenant": tenant,
        "p_external_id": external_id,
    }


class SessionPosition(NamedTuple):
    """Where a page of `list_sessions` ends: its last session's creation time and key."""

    created_at: datetime
    key: int


_SESSION_BY_KEY = select(*SESSION_COLUMNS).where(_sessions.id == bindparam("p_session_id"))


async def get_session(
    db: AsyncSession, tenant: str, external_id: str, for_update: bool = False
) -> SessionRow:
    """The session, unless it has expired; `for_update`: its row locked until the transaction
    ends (PostgreSQL; on SQLite the writers take turns anyway)."""
    if for_update:
        params = {**named(tenant, external_id), **Expiry.of(db).params()}
        rows = list(await db.execute(_SESSION_BY_EXTERNAL_ID.with_for_update(), params))
    else:  # on the driver in a read session (a chat wire's turn reads it first)
        params = {**named(tenant, external_id), **loader_expiry_params(db)}
        rows = await driver.read(db, _SESSION_BY_EXTERNAL_ID, params)
    if not rows:
        raise SessionNotFound(external_id)
    return SessionRow._make(rows[0])


async def get_session_by_key(db: AsyncSession, session_key: int) -> SessionRow | None:
    """The session, expired or not: summarization, its lease and the worker find it by key,
    on no client's behalf."""
    row = (await db.execute(_SESSION_BY_KEY, {"p_session_id": session_key})).first()
    return None if row is None else SessionRow._make(row)


async def list_sessions(
    db: AsyncSession, tenant: str, limit: int, before: SessionPosition | None
) -> list[SessionRow]:
    """Newest first (by creation, then session key), keyset-paginated; expired sessions left
    out. A read of every shard on Citus: a tenant's sessions are spread by key."""
    query = select(*SESSION_COLUMNS).where(_sessions.tenant == tenant, unexpired(_sessions))
    if before is not None:
        query = query.where(
            tuple_(_sessions.created_at, _sessions.id) < tuple_(before.created_at, before.key)
        )
    ordered = query.order_by(_sessions.created_at.desc(), _sessions.id.desc()).limit(limit)
    result = await db.execute(ordered, Expiry.of(db).params())
    return [SessionRow._make(row) for row in result]


async def update_session(
    db: AsyncSession, tenant: str, external_id: str, changes: dict[str, Any]
) -> SessionRow:
    """Set `metadata`, `settings` and/or `expires_at` in one UPDATE (a concurrent DELETE, or
    the session expiring, makes it 404)."""
    values = {key: changes[key] for key in ("metadata", "settings", "expires_at") if key in changes}
    result = await db.execute(
        update(SESSIONS)
        .where(
            _sessions.id == session_key(tenant, external_id),
            _sessions.tenant == tenant,
            _sessions.external_id == external_id,
            unexpired(_sessions),
        )
        .values(updated_at=utcnow(), **values)
        .returning(*SESSION_COLUMNS),
        Expiry.of(db).params(),
    )
    row = result.first()
    if row is None:
        raise SessionNotFound(external_id)
    return SessionRow._make(row)


async def delete_session(db: AsyncSession, tenant: str, external_id: str) -> None:
    """Delete a session; its messages, summaries and links go with it (ON DELETE CASCADE). An
    expired one is `SessionNotFound`: it is the retention sweep's to delete."""
    result = await db.execute(
        delete(SESSIONS)
        .where(
            _sessions.id == session_key(tenant, external_id),
            _sessions.tenant == tenant,
            _sessions.external_id == external_id,
            unexpired(_sessions),
        )
        .returning(_sessions.id),
        Expiry.of(db).params(),
    )
    if result.first() is None:
        raise SessionNotFound(external_id)
