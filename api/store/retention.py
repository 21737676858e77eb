"""Retention: the rule of when a session has expired, and the retention sweep's statements.

A session expires at its `expires_at`, or once its `updated_at` (moved by every append and
every patch) is older than SESSION_IDLE_TTL_DAYS. `unexpired` is that rule, in one place:
every lookup of a session on a client's behalf reads it (`api.store.sessions`, the history
loader, a summary by id, both appends), so an expired session is gone for clients from the
moment it expires, before the sweep (`api.retention`) deletes it. Lookups by session key
(summarization, its lease, the worker) do not read it: they serve no client.

The sweep finds sessions past their `expires_at` through the partial index
`ix_sessions_expires_at`, and idle ones by walking `sessions` by key in small pages: no index
on `updated_at`, which every append changes (an index on it would cost PostgreSQL the
heap-only updates of the session row on the hot path). It deletes a session in short
transactions, each on the session's row locked (PostgreSQL: `SKIP LOCKED`, so sweeps of
several replicas share the work and never wait on each other), each deleting at most a window
of its messages. Functions take the caller's AsyncSession and never commit.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import (
    ColumnElement,
    and_,
    bindparam,
    column,
    delete,
    literal_column,
    not_,
    or_,
    select,
    table,
    update,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from api.db import driver
from api.db.models import MESSAGES, SESSIONS, SUMMARIES
from api.db.transactions import Database

_sessions = SESSIONS.c
_messages = MESSAGES.c
_summaries = SUMMARIES.c

NEVER_IDLE = datetime(1970, 1, 1, tzinfo=UTC)
"""The idle cutoff when idle expiry is off: every session was updated after it."""

IDLE_TTL_INFO = "precis_session_idle_ttl_days"
"""The key of a database session's `info` holding SESSION_IDLE_TTL_DAYS (`expire_idle_after`),
read by every lookup of a session on a client's behalf."""

_SQLITE_TIME = driver.encoders([_sessions.updated_at], sqlite.dialect())[0]
"""A timestamp as SQLite stores it (the driver's hot reads bind values as they are)."""


class Expiry(NamedTuple):
    """The moment a lookup judges expiry at, and the idle cutoff: a session updated at or before
    it has expired."""

    now: datetime
    idle_cutoff: datetime

    @classmethod
    def at(cls, now: datetime, idle_ttl_days: float | None) -> Expiry:
        cutoff = NEVER_IDLE if idle_ttl_days is None else now - timedelta(days=idle_ttl_days)
        return cls(now, cutoff)

    @classmethod
    def of(cls, db: AsyncSession) -> Expiry:
        """Now, with the idle expiry of the database the session `db` belongs to."""
        return cls.at(datetime.now(UTC), db.info.get(IDLE_TTL_INFO))

    def params(self) -> dict[str, datetime]:
        """The bind parameters of `unexpired`'s default placeholders."""
        return {"p_now": self.now, "p_idle_cutoff": self.idle_cutoff}


def loader_expiry_params(db: AsyncSession) -> dict[str, Any]:
    """`Expiry.of(db).params()` as the history loader's reads take them: on SQLite's driver
    (`api.db.driver.reading_engine`) values are bound as they
    are, so the timestamps go as SQLite stores them."""
    params: dict[str, Any] = Expiry.of(db).params()
    engine = driver.reading_engine(db)
    if engine is not None and engine.dialect.name == "sqlite" and _SQLITE_TIME is not None:
        params = {name: _SQLITE_TIME(value) for name, value in params.items()}
    return params


def expire_idle_after(database: Database, idle_ttl_days: float | None) -> None:
    """Make every database session of `database` judge idle expiry by SESSION_IDLE_TTL_DAYS
    (the requests' unit of work: `api.main`)."""
    info = {IDLE_TTL_INFO: idle_ttl_days}
    database.sessionmaker.configure(info=info)
    database.read_sessionmaker.configure(info=info)


def unexpired(sessions: Any, now: Any = None, idle_cutoff: Any = None) -> ColumnElement[bool]:
    """The sessions not expired (`sessions`: the table's columns, or an alias's): no
    `expires_at` or one still ahead of `now`, and updated after the idle cutoff. `now` and
    `idle_cutoff` default to the bind parameters `p_now` and `p_idle_cutoff`
    (`Expiry.params`)."""
    now = bindparam("p_now") if now is None else now
    idle_cutoff = bindparam("p_idle_cutoff") if idle_cutoff is None else idle_cutoff
    return and_(
        or_(sessions.expires_at.is_(None), sessions.expires_at > now),
        sessions.updated_at > idle_cutoff,
    )


def unexpired_sql(alias: str, now: str, idle_cutoff: str) -> str:
    """`unexpired` as SQL text for the statements written as text (the appends): `alias` names
    the sessions table, `now` and `idle_cutoff` are the statement's placeholders."""
    sessions = table(alias, column("expires_at"), column("updated_at"))
    predicate = unexpired(sessions.c, literal_column(now), literal_column(idle_cutoff))
    return str(predicate.compile(compile_kwargs={"literal_binds": True}))


# --- the sweep ------------------------------------------------------------------------------


async def past_expiry(
    db: AsyncSession, expiry: Expiry, skipped: Collection[int], limit: int
) -> list[int]:
    """Keys of at most `limit` sessions whose `expires_at` has passed, the earliest first, by
    the partial index `ix_sessions_expires_at`; none of `skipped` (the sweep's own, held by
    another sweep). No keyset cursor: a deleted session leaves the index, and a cursor on
    `(expires_at, id)` would read every session sharing one `expires_at` again per page."""
    query = select(_sessions.id).where(
        _sessions.expires_at.is_not(None), _sessions.expires_at <= expiry.now
    )
    if skipped:
        query = query.where(_sessions.id.not_in(skipped))
    ordered = query.order_by(_sessions.expires_at).limit(limit)
    return list(await db.scalars(ordered))


async def expired_in_key_range(
    db: AsyncSession, expiry: Expiry, after_key: int, limit: int
) -> tuple[list[int], int | None]:
    """Of the `limit` sessions after the key `after_key` (a range of the primary key), the keys
    of those expired; and the last key read (None: none was left)."""
    page = (
        select(_sessions.id, _sessions.expires_at, _sessions.updated_at)
        .where(_sessions.id > after_key)
        .order_by(_sessions.id)
        .limit(limit)
        .subquery()
    )
    expired = not_(unexpired(page.c, expiry.now, expiry.idle_cutoff)).label("expired")
    rows = list(await db.execute(select(page.c.id, expired)))
    if not rows:
        return [], None
    return [key for key, gone in rows if gone], max(key for key, _gone in rows)


async def lock_expired(db: AsyncSession, session_key: int, expiry: Expiry) -> int | None:
    """The session's `last_seq`, its row locked until the transaction ends, if it has expired;
    None if it has not (any more), is gone, or another sweep holds it (PostgreSQL skips a
    locked row: that sweep deletes it)."""
    query = (
        select(_sessions.last_seq)
        .where(
            _sessions.id == session_key,
            not_(unexpired(_sessions, expiry.now, expiry.idle_cutoff)),
        )
        .with_for_update(skip_locked=True)
    )
    last_seq: int | None = await db.scalar(query)
    return last_seq


async def keep_expired(db: AsyncSession, session_key: int, now: datetime) -> None:
    """Set the session's `expires_at` to `now` unless it is earlier: a session deleted over
    several transactions stays expired in between, even if the idle expiry is raised."""
    await db.execute(
        update(SESSIONS)
        .where(
            _sessions.id == session_key,
            or_(_sessions.expires_at.is_(None), _sessions.expires_at > now),
        )
        .values(expires_at=now)
    )


async def delete_messages(db: AsyncSession, session_key: int, after_seq: int, upto_seq: int) -> int:
    """Delete the session's messages with seqs in `after_seq + 1 .. upto_seq` (a range of the
    `(session_id, seq)` index), their summary links with them (ON DELETE CASCADE); how many."""
    result = await db.execute(
        delete(MESSAGES).where(
            _messages.session_id == session_key,
            _messages.seq > after_seq,
            _messages.seq <= upto_seq,
        )
    )
    return int(getattr(result, "rowcount", 0) or 0)


async def delete_summaries(db: AsyncSession, session_key: int) -> int:
    """Delete every summary of the session (their remaining links with them); how many."""
    result = await db.execute(delete(SUMMARIES).where(_summaries.session_id == session_key))
    return int(getattr(result, "rowcount", 0) or 0)


async def delete_session_row(db: AsyncSession, session_key: int) -> bool:
    """Delete the session's row (its job and lease with it, ON DELETE CASCADE); whether it was
    there."""
    result = await db.execute(delete(SESSIONS).where(_sessions.id == session_key))
    return bool(getattr(result, "rowcount", 0))
