"""The append on PostgreSQL: one statement in autocommit, on the pooled connection's asyncpg
connection (`api.db.transactions.driver_connection`). It is the one exception to "the unit of
work (`api.db.transactions.Database`) commits": the statement commits itself, so an append
is one round trip (behind a transaction pooler, the connection's transaction ends with it).

The statement locks the session row (or creates the session), leaves out every message whose
`client_id` the session already holds, inserts the rest at contiguous seqs from one `unnest`
of the batch, and answers what the proactive trigger asks (the backlog after the newest live
summary, and whether a job is queued already): one round trip where a transaction took five.
Every message it inserts carries the request's random `append_id`, so a request that lost
its connection before the answer arrived can tell whether its statement landed
(`landed`). The guarantees (SQLite's append, `api.append.sqlite`, gives the same):
contiguous seqs in per-session order, the whole batch or nothing, and a repeated `client_id`
answered with the stored message.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from api.append.batch import (
    Appended,
    AppendOutcome,
    batch_format,
    check_format,
    in_batch_order,
    raise_idempotency_conflict,
    raise_key_taken,
    stored_row,
)
from api.db.faults import connection_lost, refused_as_read_only
from api.db.models import utcnow
from api.db.pooler import transaction_pooled
from api.db.transactions import driver_connection
from api.errors import ConcurrentChange, SessionNotFound
from api.store.keys import session_key
from api.store.retention import NEVER_IDLE, unexpired_sql
from api.store.rows import MESSAGE_COLUMNS, SESSION_COLUMNS, MessageRow, NewMessage, SessionRow
from api.store.summaries import Backlog
from api.summary_plans import BacklogCounting

CLIENT_ID_INDEX = "uq_messages_session_id_client_id"

_SESSION_RETURNING = ", ".join(column.name for column in SESSION_COLUMNS)
"""The session row's columns in `SessionRow` order (one definition: `api.store.rows`)."""
_MESSAGE_COLUMNS = ", ".join(column.name for column in MESSAGE_COLUMNS)
"""The message row's columns in `MessageRow` order."""

_CLIENT_IDS = """\
known AS (
    SELECT m.* FROM messages AS m
    WHERE m.session_id = $19 AND m.client_id = ANY($10::text[])
),
conflict AS (
    SELECT k.id, k.seq, k.client_id FROM known AS k JOIN batch AS b ON b.client_id = k.client_id
    WHERE (k.role, k.content, k.name, k.tool_call_id, k.item)
              IS DISTINCT FROM (b.role, b.content, b.name, b.tool_call_id, b.item)
       OR k.content_parts IS DISTINCT FROM b.content_parts::jsonb
       OR k.tool_calls IS DISTINCT FROM b.tool_calls::jsonb
       OR k.metadata IS DISTINCT FROM b.metadata::jsonb
    ORDER BY b.ord LIMIT 1
),
fresh AS (
    SELECT b.*, row_number() OVER (ORDER BY b.ord) AS n FROM batch AS b
    WHERE NOT EXISTS (SELECT 1 FROM conflict) AND (b.client_id IS NULL OR (
        b.client_id NOT IN (SELECT client_id FROM known)
        AND b.ord = (SELECT min(d.ord) FROM batch AS d WHERE d.client_id = b.client_id)
    ))
),
"""
"""The batch's messages whose `client_id` the session does not hold yet (`fresh`), and the
first one that repeats a stored `client_id` with another message (`conflict`)."""

_NO_CLIENT_IDS = """\
conflict AS (SELECT NULL::bigint AS id, NULL::bigint AS seq, NULL::text AS client_id WHERE false),
fresh AS (SELECT b.*, b.ord AS n FROM batch AS b),
"""
"""The same for a batch without `client_id`s: every message is fresh, and the server skips
the look at the session's stored ids (a join, a window function and two subqueries)."""


def _append(client_ids: str) -> str:
    """The append statement, with `client_ids` the CTEs that pick the batch's fresh messages."""
    return f"""
WITH batch AS (
    SELECT * FROM unnest(
        $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
        $10::text[], $11::int[], $16::text[]
    ) WITH ORDINALITY AS b(role, content, content_parts, name, tool_calls, tool_call_id,
                           metadata, client_id, token_count, item, ord)
),
{client_ids}counts AS (
    SELECT count(*) AS fresh,
           coalesce(min(n) FILTER (WHERE role NOT IN ('system', 'developer')) - 1, count(*))
               AS leading
    FROM fresh
),
updated AS (
    UPDATE sessions AS s SET
        updated_at = CASE WHEN EXISTS (SELECT 1 FROM conflict) THEN s.updated_at ELSE $12 END,
        last_seq = s.last_seq + c.fresh,
        pinned_seq = CASE WHEN s.pinned_seq = s.last_seq THEN s.last_seq + c.leading
                          ELSE s.pinned_seq END,
        format = coalesce(s.format, $17)
    FROM counts AS c
    WHERE s.id = $19 AND s.tenant = $1 AND s.external_id = $2
      AND (s.format IS NULL OR s.format = $17)
      AND {unexpired_sql("s", "$12", "$18")}
    RETURNING {", ".join(f"s.{column}" for column in _SESSION_RETURNING.split(", "))}
),
created AS (
    INSERT INTO sessions (id, tenant, external_id, metadata, settings, last_seq, pinned_seq,
                          created_at, updated_at, format)
    SELECT $19, $1, $2, '{{}}', '{{}}', c.fresh, c.leading, $12, $12, $17 FROM counts AS c
    WHERE NOT EXISTS (SELECT 1 FROM updated)
    ON CONFLICT (id) DO NOTHING
    RETURNING {_SESSION_RETURNING}
),
session AS (
    SELECT * FROM updated UNION ALL SELECT * FROM created
),
inserted AS (
    INSERT INTO messages (session_id, seq, role, content, content_parts, name, tool_calls,
                          tool_call_id, metadata, client_id, token_count, item, created_at,
                          append_id)
    SELECT s.id, s.last_seq - c.fresh + f.n, f.role, f.content, f.content_parts::jsonb, f.name,
           f.tool_calls::jsonb, f.tool_call_id, f.metadata::jsonb, f.client_id, f.token_count,
           f.item, $12, $13
    FROM session AS s, counts AS c, fresh AS f
    RETURNING id, seq, token_count
),
backlog AS (
    SELECT d.seq AS summarized_seq,
           greatest(d.seq, CASE WHEN $14::boolean THEN s.pinned_seq ELSE 0 END) AS after_seq
    FROM session AS s, LATERAL (
        SELECT coalesce(max(u.last_seq), 0) AS seq FROM session_summaries AS u
        WHERE u.session_id = $19 AND u.superseded_by IS NULL AND u.erased_at IS NULL
    ) AS d
)
SELECT s.*, k.summarized_seq, k.after_seq,
       CASE WHEN s.last_seq - k.after_seq < $15::bigint THEN
           (SELECT coalesce(sum(m.token_count), 0) FROM messages AS m
            WHERE m.session_id = $19 AND m.seq > k.after_seq)
           + (SELECT coalesce(sum(i.token_count), 0) FROM inserted AS i WHERE i.seq > k.after_seq)
       END AS backlog_tokens,
       EXISTS (SELECT 1 FROM summary_jobs AS j WHERE j.session_id = $19) AS job_queued,
       (SELECT array_agg(i.id ORDER BY i.seq) FROM inserted AS i) AS ids,
       (SELECT array_agg(f.ord ORDER BY f.n) FROM fresh AS f) AS fresh_ords,
       (SELECT array[c.id, c.seq] FROM conflict AS c) AS conflict,
       (SELECT c.client_id FROM conflict AS c) AS conflict_client_id
FROM session AS s, backlog AS k
"""


APPEND = _append(_CLIENT_IDS)
"""$1 tenant, $2 external id ($19 their session key, `api.store.keys`), $3-$11 the batch's
columns (JSON as text), $12 the time, $13 the append id, $14-$15 the `BacklogCounting` to
count the backlog with (whether it starts after the pinned prefix; below how many messages its
tokens are counted), $16 the batch's
Responses items (JSON text, or NULLs), $17 its format: a session holding the other format is
left alone, and the statement answers no row; so is an expired session ($18 the idle cutoff,
`api.store.retention.unexpired`), which the INSERT leaves in place too (its id is taken), so
nothing is stored. A batch repeating a stored `client_id` with
another message stores nothing and answers that message (`conflict`).

The counting is the server policy's: the session's own settings are known only once the
statement has read its row, and the statement holds no copy of how they override the
server's. It answers the session row (its settings included) and the newest live summary's
end, from which the use case tells whether what was counted serves the session's own policy
(`api.append.use_case`). The backlog's tokens (existing messages from the statement's
snapshot, the new ones from `inserted`) are counted only when they can matter: the backlog
holds fewer messages than `tokens_below`. So the scan reads fewer than that many rows."""

APPEND_WITHOUT_CLIENT_IDS = _append(_NO_CLIENT_IDS)


def statement(batch: Sequence[NewMessage]) -> str:
    """The append's statement for `batch`: `APPEND`, or the same without the `client_id`
    checks when no message of the batch has one."""
    if any(message.client_id is not None for message in batch):
        return APPEND
    return APPEND_WITHOUT_CLIENT_IDS


_STORED = f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_id = $1 AND client_id = ANY($2)"

_OF_APPEND = f"""
SELECT {_MESSAGE_COLUMNS} FROM messages
WHERE session_id = $1 AND append_id = $2
ORDER BY seq
"""
"""The messages one append stored; a scan of the session's messages, run only after a lost
connection."""


_SESSION = f"SELECT {_SESSION_RETURNING} FROM sessions WHERE id = $1"

_FORMAT_AND_EXPIRY = f"""
SELECT format, NOT ({unexpired_sql("sessions", "$3", "$4")}) AS expired
FROM sessions WHERE id = $5 AND tenant = $1 AND external_id = $2
"""
"""Why an append stored nothing and answered no row: the session's format, and whether it has
expired (a row absent: a concurrent request created the session, or deleted it)."""


_KEY_TAKEN = "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1)"
"""Whether a session of another name holds the session key (`api.store.keys`)."""

_RUNNING = (
    "SELECT pg_is_in_recovery(), "
    "EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state <> 'idle')"
)
"""Whether the server answering is a standby still in recovery, and whether the process is
not idle. A server process not idle may still commit: running a statement, or (behind a
transaction pooler, whose append is a transaction) holding its transaction open until the
pooler closes the connection of the client that went away."""


class AskedAStandby(ConnectionError):
    """The question whether an append landed reached a standby still in recovery (a failover
    under way): a commit the old primary acknowledged may be flushed there and not yet
    replayed, so its answer would be wrong. Asked again, like a lost connection, until the
    promoted primary answers."""


class AppendConnectionLost(Exception):
    """The connection died before the statement's answer arrived: it may have landed."""

    def __init__(self, server_pid: int) -> None:
        super().__init__(f"the append's connection (server process {server_pid}) was lost")
        self.server_pid = server_pid


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


def arguments(
    tenant: str,
    external_id: str,
    batch: Sequence[NewMessage],
    now: datetime,
    append_id: int,
    counting: BacklogCounting,
    idle_cutoff: datetime = NEVER_IDLE,
) -> list[Any]:
    """`APPEND`'s parameters, in order (`idle_cutoff`: a session updated at or before it has
    expired; by default none has)."""
    return [
        tenant,
        external_id,
        [message.role for message in batch],
        [message.content for message in batch],
        [_json(message.content_parts) for message in batch],
        [message.name for message in batch],
        [_json(message.tool_calls) for message in batch],
        [message.tool_call_id for message in batch],
        [_json(message.metadata) for message in batch],
        [message.client_id for message in batch],
        [message.token_count for message in batch],
        now,
        append_id,
        counting.pinned_floor,
        counting.tokens_below,
        [message.item for message in batch],
        batch_format(batch),
        idle_cutoff,
        session_key(tenant, external_id),
    ]


def raced_on_client_id(exc: BaseException) -> bool:
    """A concurrent append stored one of the batch's client ids after this statement looked
    (it reads the session's client ids from its snapshot): nothing landed, run it again."""
    return getattr(exc, "constraint_name", None) == CLIENT_ID_INDEX


async def append(
    engine: AsyncEngine,
    tenant: str,
    external_id: str,
    batch: Sequence[NewMessage],
    append_id: int,
    counting: BacklogCounting,
    idle_cutoff: datetime = NEVER_IDLE,
) -> Appended | None:
    """Append `batch` in one statement; None when a concurrent request created the session
    at the same moment (run it again: the row is there now).

    Raises `SessionNotFound` when the session has expired (`idle_cutoff`: a session updated at
    or before it has), `AppendConnectionLost` when the connection died before the answer
    arrived.
    """
    now = utcnow()
    values = arguments(tenant, external_id, batch, now, append_id, counting, idle_cutoff)
    server_pid: int | None = None
    try:
        # The named exception to "the unit of work commits": the statement commits itself.
        async with driver_connection(engine) as connection:
            server_pid = await _server_pid(engine, connection)
            row = await connection.fetchrow(statement(batch), *values)
            if row is None:
                held = await connection.fetchrow(
                    _FORMAT_AND_EXPIRY, tenant, external_id, now, idle_cutoff, values[-1]
                )
                if held is None and await connection.fetchval(_KEY_TAKEN, values[-1]):
                    raise_key_taken(external_id)
                if held is not None and held["expired"]:
                    raise SessionNotFound(external_id)
                check_format(external_id, None if held is None else held["format"], batch)
                return None
            if row["conflict"] is not None:
                message_id, seq = row["conflict"]
                raise_idempotency_conflict(row["conflict_client_id"], message_id, seq)
            session = SessionRow._make(row[: len(SessionRow._fields)])
            ids: list[int] = row["ids"] or []
            inserted: list[NewMessage] = [batch[ord_ - 1] for ord_ in row["fresh_ords"] or ()]
            first_seq = session.last_seq - len(ids) + 1
            fresh = [
                stored_row(id_, session.id, first_seq + i, new, now)
                for i, (id_, new) in enumerate(zip(ids, inserted, strict=True))
            ]
            stored = await _stored(connection, session.id, batch, fresh)
    except Exception as exc:
        # lost before the statement was sent, or refused by a server that takes no writes:
        # nothing ran, the caller runs it again
        if server_pid is not None and connection_lost(exc) and not refused_as_read_only(exc):
            raise AppendConnectionLost(server_pid) from exc
        raise
    after_seq = row["after_seq"]
    backlog = Backlog(after_seq, session.last_seq - after_seq, row["backlog_tokens"])
    messages = in_batch_order(batch, fresh, stored)
    outcome = AppendOutcome(session, messages, len(fresh))
    return Appended(outcome, backlog, row["summarized_seq"], row["job_queued"])


async def _server_pid(engine: AsyncEngine, connection: Any) -> int:
    """The server process that runs the append: the one the connection reached, or behind a
    transaction pooler (whose answer names the pooler's own) the one lent for this
    transaction, asked inside it."""
    if transaction_pooled(engine):
        pid: int = await connection.fetchval("SELECT pg_backend_pid()")
        return pid
    direct: int = connection.get_server_pid()
    return direct


async def _stored(
    connection: Any, session_key: int, batch: Sequence[NewMessage], fresh: Sequence[MessageRow]
) -> dict[str, MessageRow]:
    """The stored messages that the batch's repeated client ids name."""
    inserted = {message.client_id for message in fresh}
    repeated = {m.client_id for m in batch if m.client_id is not None} - inserted
    if not repeated:
        return {}
    rows = await connection.fetch(_STORED, session_key, list(repeated))
    return {row["client_id"]: MessageRow._make(row) for row in rows}


async def still_running(engine: AsyncEngine, server_pid: int) -> bool:
    """Whether the server process of a lost connection is still running its statement or
    transaction (it commits or rolls back when it ends; a process that is gone or idle has
    ended). Raises `AskedAStandby` when the server answering is in recovery: `landed` must
    then not be asked of it either."""
    async with driver_connection(engine) as connection:
        in_recovery, running = await connection.fetchrow(_RUNNING, server_pid)
    if in_recovery:
        raise AskedAStandby("asked whether an append landed of a standby in recovery")
    return bool(running)


async def landed(
    engine: AsyncEngine,
    tenant: str,
    external_id: str,
    batch: Sequence[NewMessage],
    append_id: int,
) -> AppendOutcome | None:
    """What an append whose statement has ended stored (by its `append_id`), or None if it
    stored nothing: it did not land, or every message in it was a repeat (running it again
    is then the same). Raises `AskedAStandby` when the server answering is in recovery."""
    async with driver_connection(engine) as connection:
        if await connection.fetchval("SELECT pg_is_in_recovery()"):
            raise AskedAStandby("asked whether an append landed of a standby in recovery")
        rows = await connection.fetch(_OF_APPEND, session_key(tenant, external_id), append_id)
        if not rows:
            return None
        fresh = [MessageRow._make(row) for row in rows]
        session_row = await connection.fetchrow(_SESSION, fresh[0].session_id)
        stored = await _stored(connection, fresh[0].session_id, batch, fresh)
    if session_row is None:
        raise ConcurrentChange("the session was deleted while this append ran; retry")
    session = SessionRow._make(session_row)
    return AppendOutcome(session, in_batch_order(batch, fresh, stored), len(fresh))
