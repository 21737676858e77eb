"""The append on SQLite: one transaction in one call to the driver's thread (`api.db.driver`).

aiosqlite runs every call in its connection's thread, and each of those hops costs about as
much as a small statement: the append through SQLAlchemy's session made a dozen. Here one
function, run in that thread inside the transaction the unit of work begins and commits
around it (`api.db.transactions.Database.driver_transaction`: BEGIN IMMEDIATE takes the write
lock), leaves out every message whose `client_id` the session already holds, moves the
session's seqs (or creates the session), inserts the batch in one multi-row INSERT and counts
what the proactive trigger asks, with the counting of the session's own policy. Its answer
and guarantees are `api.append.postgresql`'s: contiguous seqs in per-session order, the whole
batch or nothing, a repeated `client_id` answered with the stored message. A local COMMIT loses
no connection halfway, so it needs no append id.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import cache, partial
from typing import Any

from sqlalchemy.dialects import sqlite

from api.append.batch import (
    Appended,
    AppendOutcome,
    batch_format,
    check_format,
    check_repeats,
    in_batch_order,
    leading_pinned,
    raise_key_taken,
    stored_row,
)
from api.db import driver
from api.db.models import MESSAGES, SESSIONS, utcnow
from api.db.transactions import Database
from api.errors import SessionNotFound
from api.store.keys import session_key
from api.store.retention import NEVER_IDLE, unexpired_sql
from api.store.rows import MESSAGE_COLUMNS, SESSION_COLUMNS, MessageRow, NewMessage, SessionRow
from api.store.summaries import Backlog
from api.summary_plans import BacklogCounting

_DIALECT = sqlite.dialect()
_SESSION_NAMES = ", ".join(column.name for column in SESSION_COLUMNS)
_MESSAGE_NAMES = ", ".join(f"m.{column.name}" for column in MESSAGE_COLUMNS)

_INSERTED = tuple(column for column in MESSAGE_COLUMNS if column.name != "id")
"""The columns an append writes, in `MessageRow` order: session_id, seq, the message, created_at."""

_SESSION_DECODERS = driver.decoders(SESSION_COLUMNS, _DIALECT)
_MESSAGE_DECODERS = driver.decoders(MESSAGE_COLUMNS, _DIALECT)
_MESSAGE_ENCODERS = driver.encoders(_INSERTED, _DIALECT)
_TIME_ENCODER = driver.encoders([SESSIONS.c.updated_at], _DIALECT)[0]

ROWS_PER_INSERT = 500
"""Messages per INSERT statement: SQLite binds at most 32,766 parameters in one."""

STORED = f"""
SELECT {_MESSAGE_NAMES} FROM messages AS m JOIN sessions AS s ON m.session_id = s.id
WHERE s.id = ?6 AND m.session_id = ?6 AND s.tenant = ?1 AND s.external_id = ?2
  AND m.client_id IN (SELECT value FROM json_each(?3)) AND {unexpired_sql("s", "?4", "?5")}
"""
"""The stored messages a batch's client ids name (?3, a JSON list), of an unexpired session
(?4 the time, ?5 the idle cutoff; ?6 the session key)."""

UPDATE_SESSION = f"""
UPDATE sessions SET
    updated_at = ?1,
    last_seq = last_seq + ?2,
    pinned_seq = CASE WHEN pinned_seq = last_seq THEN last_seq + ?3 ELSE pinned_seq END,
    format = coalesce(format, ?4)
WHERE id = ?9 AND tenant = ?5 AND external_id = ?6 AND (format IS NULL OR format = ?7)
  AND {unexpired_sql("sessions", "?1", "?8")}
RETURNING {_SESSION_NAMES}
"""
"""?1 the time, ?2 the messages to add, ?3 the leading pinned ones, ?4 the batch's format,
?5 tenant, ?6 external id, ?7 the format again, ?8 the idle cutoff, ?9 the session key
(`api.store.keys`): a session holding the
other format, or expired (`api.store.retention.unexpired`), is left alone."""

CREATE_SESSION = f"""
INSERT INTO sessions (id, tenant, external_id, metadata, settings, last_seq, pinned_seq,
                      created_at, updated_at, format)
VALUES (?, ?, ?, '{{}}', '{{}}', ?, ?, ?, ?, ?)
ON CONFLICT (id) DO NOTHING
RETURNING {_SESSION_NAMES}
"""

_INSERT_MESSAGES = (
    f"INSERT INTO {MESSAGES.name} (id, {', '.join(column.name for column in _INSERTED)}) VALUES "
)
_PLACEHOLDERS = ", ".join("?" for _ in _INSERTED)
_LARGEST_ID = f"(SELECT coalesce(max(id), 0) FROM {MESSAGES.name})"


@cache
def insert_statement(rows: int) -> str:
    """The INSERT of `rows` messages, returning each one's seq and id: the n-th row's id the
    n-th after the largest stored (`api.store.keys.new_id`)."""
    values = ", ".join(f"({_LARGEST_ID} + {n}, {_PLACEHOLDERS})" for n in range(1, rows + 1))
    return _INSERT_MESSAGES + values + " RETURNING seq, id"


def insert_values(rows: Sequence[MessageRow]) -> list[Any]:
    """`insert_statement`'s parameters: every column but the id, as SQLite stores them."""
    return [
        value if encode is None or value is None else encode(value)
        for row in rows
        for encode, value in zip(_MESSAGE_ENCODERS, row[1:], strict=True)
    ]


def encode_time(moment: datetime) -> Any:
    """A timestamp as SQLite stores it."""
    return moment if _TIME_ENCODER is None else _TIME_ENCODER(moment)


SUMMARIZED_AND_QUEUED = """
SELECT (SELECT coalesce(max(last_seq), 0) FROM session_summaries
        WHERE session_id = ? AND superseded_by IS NULL AND erased_at IS NULL),
       EXISTS (SELECT 1 FROM summary_jobs WHERE session_id = ?)
"""

FORMAT_AND_EXPIRY = f"""
SELECT format, NOT ({unexpired_sql("sessions", "?3", "?4")})
FROM sessions WHERE id = ?5 AND tenant = ?1 AND external_id = ?2
"""
"""Why the UPDATE left the session alone: its format, and whether it has expired."""

TOKENS_AFTER = "SELECT coalesce(sum(token_count), 0) FROM messages WHERE session_id = ? AND seq > ?"


CountingOf = Callable[[dict[str, Any]], BacklogCounting]
"""The counting of a session's own policy, from its settings (`Settings.policy` resolves them)."""


async def append(
    database: Database,
    tenant: str,
    external_id: str,
    batch: Sequence[NewMessage],
    counting_of: CountingOf,
    idle_cutoff: datetime = NEVER_IDLE,
) -> Appended:
    """Append `batch` in one transaction, in one call to the driver's thread; an expired
    session (`idle_cutoff`: one updated at or before it has) is `SessionNotFound`."""
    return await database.driver_transaction(
        partial(
            _append,
            tenant=tenant,
            external_id=external_id,
            batch=batch,
            counting_of=counting_of,
            idle_cutoff=idle_cutoff,
        )
    )


def _append(
    connection: sqlite3.Connection,
    *,
    tenant: str,
    external_id: str,
    batch: Sequence[NewMessage],
    counting_of: CountingOf,
    idle_cutoff: datetime,
) -> Appended:
    now = utcnow()
    at, cutoff = encode_time(now), encode_time(idle_cutoff)
    key = session_key(tenant, external_id)
    stored = _stored(connection, (tenant, external_id, key), batch, (at, cutoff))
    check_repeats(batch, stored)
    fresh = _fresh(batch, stored)
    reserve, leading, given = len(fresh), leading_pinned(fresh), batch_format(batch)
    row = connection.execute(
        UPDATE_SESSION, (at, reserve, leading, given, tenant, external_id, given, cutoff, key)
    ).fetchone()
    if row is None:
        # no such session, or one holding the other format or expired (left alone by the UPDATE)
        held = connection.execute(
            FORMAT_AND_EXPIRY, (tenant, external_id, at, cutoff, key)
        ).fetchone()
        if held is not None:
            if held[1]:
                raise SessionNotFound(external_id)
            check_format(external_id, held[0], batch)
        row = connection.execute(
            CREATE_SESSION, (key, tenant, external_id, reserve, leading, at, at, given)
        ).fetchone()
        if row is None:
            raise_key_taken(external_id)
    session = SessionRow._make(driver.decode([row], _SESSION_DECODERS)[0])
    inserted = _insert(connection, session, fresh, now)
    summarized, job_queued = connection.execute(
        SUMMARIZED_AND_QUEUED, (session.id, session.id)
    ).fetchone()
    backlog = _backlog(connection, session, summarized, counting_of(session.settings))
    messages = in_batch_order(batch, inserted, stored)
    outcome = AppendOutcome(session, messages, len(inserted))
    return Appended(outcome, backlog, summarized, bool(job_queued))


def _stored(
    connection: sqlite3.Connection,
    named: tuple[str, str, int],
    batch: Sequence[NewMessage],
    expiry: tuple[Any, Any],
) -> dict[str, MessageRow]:
    """The session's stored messages that the batch's client ids name (none of an expired
    session: `expiry`, the time and the idle cutoff as SQLite stores them); `named`: its tenant,
    session id and key."""
    client_ids = sorted({message.client_id for message in batch if message.client_id is not None})
    if not client_ids:
        return {}
    tenant, external_id, key = named
    values = (tenant, external_id, json.dumps(client_ids), *expiry, key)
    rows = connection.execute(STORED, values).fetchall()
    messages = [MessageRow._make(row) for row in driver.decode(rows, _MESSAGE_DECODERS)]
    return {message.client_id: message for message in messages if message.client_id is not None}


def _fresh(batch: Sequence[NewMessage], stored: dict[str, MessageRow]) -> list[NewMessage]:
    """The messages to insert: each without a client id, and the first with each client id
    the session does not hold."""
    seen = set(stored)
    fresh: list[NewMessage] = []
    for message in batch:
        if message.client_id is not None:
            if message.client_id in seen:
                continue
            seen.add(message.client_id)
        fresh.append(message)
    return fresh


def _insert(
    connection: sqlite3.Connection,
    session: SessionRow,
    fresh: Sequence[NewMessage],
    now: datetime,
) -> list[MessageRow]:
    """Insert `fresh` at the seqs the session row just reserved (the last `len(fresh)`)."""
    first_seq = session.last_seq - len(fresh) + 1
    rows = [stored_row(0, session.id, first_seq + i, new, now) for i, new in enumerate(fresh)]
    id_of_seq: dict[int, int] = {}
    for start in range(0, len(rows), ROWS_PER_INSERT):
        chunk = rows[start : start + ROWS_PER_INSERT]
        sql = insert_statement(len(chunk))
        id_of_seq.update(connection.execute(sql, insert_values(chunk)).fetchall())
    return [row._replace(id=id_of_seq[row.seq]) for row in rows]


def _backlog(
    connection: sqlite3.Connection,
    session: SessionRow,
    summarized: int,
    counting: BacklogCounting,
) -> Backlog:
    """What lies after the newest live summary and the pinned prefix; the tokens are counted
    only when they can matter, as `postgresql.APPEND` does."""
    after_seq = max(summarized, session.pinned_seq if counting.pinned_floor else 0)
    message_count = session.last_seq - after_seq
    if message_count >= counting.tokens_below:
        return Backlog(after_seq, message_count, None)
    (tokens,) = connection.execute(TOKENS_AFTER, (session.id, after_seq)).fetchone()
    return Backlog(after_seq, message_count, int(tokens))
