"""Messages: the listings and single lookups (the append is in `api.append`, the history
loader's reads in `api.store.loader`).

Functions take the caller's AsyncSession and never commit: the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Iterator

from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from api.db import driver
from api.db.models import MESSAGES
from api.store.rows import MESSAGE_COLUMNS, UNBOUNDED, MessageRow, shown

_messages = MESSAGES.c

# The statements are built once: SQLAlchemy memoizes a statement's cache key on the object,
# so reusing it skips the per-call traversal that a freshly built select() pays.
_RANGE = (
    select(*MESSAGE_COLUMNS)
    .where(
        _messages.session_id == bindparam("session_id"),
        _messages.seq > bindparam("after_seq"),
        _messages.seq <= bindparam("last_seq"),
        shown(_messages),
    )
    .order_by(_messages.seq)
    .limit(bindparam("limit"))
)


async def messages_in_range(
    db: AsyncSession,
    session_key: int,
    after_seq: int,
    last_seq: int = UNBOUNDED,
    limit: int = UNBOUNDED,
) -> list[MessageRow]:
    """The first `limit` messages of seqs `after_seq + 1..last_seq`, ascending, removed and
    orphaned ones left out: an index range scan on `(session_id, seq)`. With a `limit`,
    read in seq windows (`_windows`), so no plan reads more than a few pages."""
    rows: list[MessageRow] = []
    for floor, ceiling in _windows(after_seq, last_seq, limit, upwards=True):
        params = {"session_id": session_key, "after_seq": floor, "last_seq": ceiling}
        result = await db.execute(_RANGE, {**params, "limit": limit - len(rows)})
        rows += [MessageRow._make(row) for row in result]
        if len(rows) >= limit:
            break
    return rows


_BEFORE = (
    select(*MESSAGE_COLUMNS)
    .where(
        _messages.session_id == bindparam("session_id"),
        _messages.seq > bindparam("after_seq"),
        _messages.seq < bindparam("before_seq"),
        shown(_messages),
    )
    .order_by(_messages.seq.desc())
    .limit(bindparam("limit"))
)


async def messages_before(
    db: AsyncSession, session_key: int, before_seq: int, limit: int
) -> list[MessageRow]:
    """The last `limit` messages before seq `before_seq` (at most the session's `last_seq`
    + 1), newest first, removed and orphaned ones left out: the same index range scan as
    `messages_in_range`, walked backwards in seq windows."""
    rows: list[MessageRow] = []
    for floor, ceiling in _windows(0, before_seq - 1, limit, upwards=False):
        params = {"session_id": session_key, "after_seq": floor, "before_seq": ceiling + 1}
        result = await db.execute(_BEFORE, {**params, "limit": limit - len(rows)})
        rows += [MessageRow._make(row) for row in result]
        if len(rows) >= limit:
            break
    return rows


def _windows(after_seq: int, last_seq: int, limit: int, upwards: bool) -> Iterator[tuple[int, int]]:
    """Seq ranges `(floor, ceiling]` covering `after_seq + 1..last_seq` from one end: the
    first as wide as `limit`, each next one twice as wide (removed messages keep their seqs,
    so a window can come back short). Every read names both bounds, so even a plan the
    planner's statistics got wrong reads a bounded range, never the session."""
    width = max(limit, 1)
    low, high = after_seq, last_seq
    while low < high:
        if upwards:
            ceiling = min(high, low + width)
            yield low, ceiling
            low = ceiling
        else:
            floor = max(low, high - width)
            yield floor, high
            high = floor
        width = min(2 * width, UNBOUNDED)


_BY_CLIENT_ID = select(*MESSAGE_COLUMNS).where(
    _messages.session_id == bindparam("session_id"),
    _messages.client_id == bindparam("client_id"),
)
_BY_ID = select(*MESSAGE_COLUMNS).where(
    _messages.session_id == bindparam("session_id"), _messages.id == bindparam("message_id")
)


async def message_by_client_id(
    db: AsyncSession, session_key: int, client_id: str
) -> MessageRow | None:
    """The session's message stored with `client_id` (a tombstone keeps none): the unique
    index on `(session_id, client_id)`."""
    rows = await driver.read(db, _BY_CLIENT_ID, {"session_id": session_key, "client_id": client_id})
    return MessageRow._make(rows[0]) if rows else None


async def message_by_id(db: AsyncSession, session_key: int, message_id: int) -> MessageRow | None:
    """The session's message `message_id`, whatever its state (a tombstone included)."""
    result = await db.execute(_BY_ID, {"session_id": session_key, "message_id": message_id})
    row = result.first()
    return None if row is None else MessageRow._make(row)
