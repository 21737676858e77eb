"""Sessions: create, read, update, delete, and the row lock an append takes.

Functions take the caller's AsyncSession and never commit: the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import (
    Table,
    bindparam,
    case,
    delete,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from api.db.models import Session, utcnow
from api.errors import SessionExists, SessionNotFound
from api.store.rows import SESSION_COLUMNS, NewMessage, SessionRow

_SESSION_TABLE = cast(Table, Session.__table__)
_sessions = _SESSION_TABLE.c


async def _insert_session(
    db: AsyncSession,
    tenant: str,
    external_id: str,
    metadata: dict[str, Any],
    settings: dict[str, Any],
) -> SessionRow | None:
    """INSERT a new, empty session; None if the id is taken (a concurrent request's included)."""
    dialect = postgresql if db.get_bind().dialect.name == "postgresql" else sqlite
    now = utcnow()
    result = await db.execute(
        dialect.insert(_SESSION_TABLE)
        .values(
            tenant=tenant,
            external_id=external_id,
            metadata=metadata,
            settings=settings,
            last_seq=0,
            pinned_seq=0,
            created_at=now,
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=["tenant", "external_id"])
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
) -> SessionRow:
    session = await _insert_session(db, tenant, external_id, metadata, settings)
    if session is None:
        raise SessionExists(external_id)
    return session


_SESSION_BY_EXTERNAL_ID = select(*SESSION_COLUMNS).where(
    _sessions.tenant == bindparam("p_tenant"), _sessions.external_id == bindparam("p_external_id")
)
_SESSION_BY_ID = select(*SESSION_COLUMNS).where(_sessions.id == bindparam("p_session_id"))


async def get_session(db: AsyncSession, tenant: str, external_id: str) -> SessionRow:
    result = await db.execute(
        _SESSION_BY_EXTERNAL_ID, {"p_tenant": tenant, "p_external_id": external_id}
    )
    row = result.first()
    if row is None:
        raise SessionNotFound(external_id)
    return SessionRow._make(row)


async def get_session_by_id(db: AsyncSession, session_id: int) -> SessionRow | None:
    row = (await db.execute(_SESSION_BY_ID, {"p_session_id": session_id})).first()
    return None if row is None else SessionRow._make(row)


async def list_sessions(
    db: AsyncSession, tenant: str, limit: int, before_id: int | None
) -> list[SessionRow]:
    """Newest first (by internal id, which grows with creation), keyset-paginated."""
    query = select(*SESSION_COLUMNS).where(_sessions.tenant == tenant)
    if before_id is not None:
        query = query.where(_sessions.id < before_id)
    result = await db.execute(query.order_by(_sessions.id.desc()).limit(limit))
    return [SessionRow._make(row) for row in result]


async def update_session(
    db: AsyncSession, tenant: str, external_id: str, changes: dict[str, Any]
) -> SessionRow:
    """Replace `metadata` and/or `settings` in one UPDATE (a concurrent DELETE makes it 404)."""
    values = {key: changes[key] for key in ("metadata", "settings") if key in changes}
    result = await db.execute(
        update(_SESSION_TABLE)
        .where(_sessions.tenant == tenant, _sessions.external_id == external_id)
        .values(updated_at=utcnow(), **values)
        .returning(*SESSION_COLUMNS)
    )
    row = result.first()
    if row is None:
        raise SessionNotFound(external_id)
    return SessionRow._make(row)


async def delete_session(db: AsyncSession, tenant: str, external_id: str) -> None:
    """Delete a session; its messages, summaries and links go with it (ON DELETE CASCADE)."""
    result = await db.execute(
        delete(_SESSION_TABLE)
        .where(_sessions.tenant == tenant, _sessions.external_id == external_id)
        .returning(_sessions.id)
    )
    if result.first() is None:
        raise SessionNotFound(external_id)


_LOCK_SESSION = (
    update(_SESSION_TABLE)
    .where(
        _sessions.tenant == bindparam("p_tenant"),
        _sessions.external_id == bindparam("p_external_id"),
    )
    .values(
        updated_at=bindparam("p_now", type_=_sessions.updated_at.type),
        last_seq=_sessions.last_seq + bindparam("p_reserve", type_=_sessions.last_seq.type),
        # the pinned prefix grows while every message so far belongs to it
        pinned_seq=case(
            (
                _sessions.pinned_seq == _sessions.last_seq,
                _sessions.last_seq + bindparam("p_leading", type_=_sessions.last_seq.type),
            ),
            else_=_sessions.pinned_seq,
        ),
    )
    .returning(*SESSION_COLUMNS)
)
"""A Core UPDATE: the ORM-enabled one rebuilt its cache key and an ORM object on every append."""

PINNED_ROLES = frozenset({"system", "developer"})
"""Roles of the pinned prefix: the leading messages that are never summarized."""


def leading_pinned(batch: Sequence[NewMessage]) -> int:
    """How many messages at the start of `batch` have a pinned role."""
    count = 0
    for message in batch:
        if message.role not in PINNED_ROLES:
            break
        count += 1
    return count


async def lock_session(
    db: AsyncSession, tenant: str, external_id: str, reserve: int, leading: int
) -> SessionRow | None:
    """Lock the session row, touch `updated_at`, add `reserve` to `last_seq` (and `leading`
    to `pinned_seq` while the session holds nothing but its pinned prefix).

    Returns the updated row.
    """
    result = await db.execute(
        _LOCK_SESSION,
        {
            "p_tenant": tenant,
            "p_external_id": external_id,
            "p_now": utcnow(),
            "p_reserve": reserve,
            "p_leading": leading,
        },
    )
    row = result.first()
    return None if row is None else SessionRow._make(row)


async def create_if_missing(db: AsyncSession, tenant: str, external_id: str) -> None:
    """INSERT a new, empty session; nothing if a concurrent request created it first."""
    await _insert_session(db, tenant, external_id, {}, {})


_SET_LAST_SEQ = (
    update(_SESSION_TABLE)
    .where(_sessions.id == bindparam("p_session_id"))
    .values(
        last_seq=bindparam("p_last_seq", type_=_sessions.last_seq.type),
        pinned_seq=bindparam("p_pinned_seq", type_=_sessions.pinned_seq.type),
    )
)


async def set_last_seq(db: AsyncSession, session_id: int, last_seq: int, pinned_seq: int) -> None:
    """Record the seqs an append used, once it knows how many messages were new."""
    await db.execute(
        _SET_LAST_SEQ,
        {"p_session_id": session_id, "p_last_seq": last_seq, "p_pinned_seq": pinned_seq},
    )
