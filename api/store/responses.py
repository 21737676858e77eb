"""Stored responses: insert one after its turn is stored, read one (with its session), delete.

Functions take the caller's AsyncSession and never commit: the caller owns the transaction;
the insert, one statement, commits itself (`insert_response`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy import Insert, bindparam, delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from api.db import driver
from api.db.models import RESPONSES, SESSIONS, utcnow
from api.db.transactions import Database
from api.store.retention import loader_expiry_params, unexpired

_responses = RESPONSES.c
_sessions = SESSIONS.c


class ResponseRow(NamedTuple):
    """A stored response and where its items are."""

    id: str
    session_key: int
    session_id: str
    """The external id of its session."""
    session_last_seq: int
    first_seq: int
    last_seq: int
    input_count: int
    previous_response_id: str | None
    body: str


class NewResponse(NamedTuple):
    id: str
    tenant: str
    session_key: int
    first_seq: int
    last_seq: int
    input_count: int
    previous_response_id: str | None
    body: str


def _insert_once(dialect: Any) -> Insert:
    """The insert of a response, doing nothing when its row is there: a run again after a
    lost connection is the same."""
    names = [*NewResponse._fields, "created_at"]
    column = {"session_key": "session_id"}
    values: dict[str, Any] = {column.get(name, name): bindparam(name) for name in names}
    inserted: Insert = dialect.insert(RESPONSES).values(values).on_conflict_do_nothing()
    return inserted


_INSERT_ONCE = {"postgresql": _insert_once(postgresql), "sqlite": _insert_once(sqlite)}


async def insert_response(database: Database, response: NewResponse) -> None:
    """Keep a response: one statement on the driver (`api.db.driver.write`), committed."""
    statement = _INSERT_ONCE[database.engine.dialect.name]
    await driver.write(database, statement, {**response._asdict(), "created_at": utcnow()})


_RESPONSE = (
    select(
        _responses.id,
        _responses.session_id,
        _sessions.external_id,
        _sessions.last_seq,
        _responses.first_seq,
        _responses.last_seq,
        _responses.input_count,
        _responses.previous_response_id,
        _responses.body,
    )
    .join(SESSIONS, _sessions.id == _responses.session_id)
    .where(
        _responses.id == bindparam("p_response_id"),
        _responses.tenant == bindparam("p_tenant"),
        unexpired(_sessions),
    )
)


async def get_response(db: AsyncSession, tenant: str, response_id: str) -> ResponseRow | None:
    """The tenant's stored response, unless its session has expired (or it is another's); on
    the driver in a read session (a turn after `previous_response_id` reads it first)."""
    params = {"p_response_id": response_id, "p_tenant": tenant, **loader_expiry_params(db)}
    rows = await driver.read(db, _RESPONSE, params)
    return ResponseRow._make(rows[0]) if rows else None


async def delete_response(db: AsyncSession, tenant: str, response_id: str) -> bool:
    """Delete the tenant's stored response (its items stay in its session); False: none. Found
    by its id alone (a read of every shard on Citus), deleted in its session."""
    found = select(_responses.session_id).where(
        _responses.id == response_id, _responses.tenant == tenant
    )
    session_keys = list(await db.scalars(found))
    if not session_keys:
        return False
    await db.execute(
        delete(RESPONSES).where(
            _responses.session_id == session_keys[0], _responses.id == response_id
        )
    )
    return True
