"""Messages: the listings and single lookups (the append is in `api.append`, the history
loader's reads in `api.store.loader`).

Functions take the caller's AsyncSession and never commit: the caller owns the transaction.
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from api.db.models import Message
from api.store.rows import MESSAGE_COLUMNS, UNBOUNDED, MessageRow, shown

_MESSAGE_TABLE = cast(Table, Message.__table__)
_messages = _MESSAGE_TABLE.c

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
    orphaned ones left out: an index range scan on `(session_id, seq)`."""
    result = await db.execute(
        _RANGE,
        {"session_id": session_key, "after_seq": after_seq, "last_seq": last_seq, "limit": limit},
    )
    return [MessageRow._make(row) for row in result]


_BEFORE = (
    select(*MESSAGE_COLUMNS)
    .where(
        _messages.session_id == bindparam("session_id"),
        _messages.seq < bindparam("before_seq"),
        shown(_messages),
    )
    .order_by(_messages.seq.desc())
    .limit(bindparam("limit"))
)


async def messages_before(
    db: AsyncSession, session_key: int, before_seq: int = UNBOUNDED, limit: int = UNBOUNDED
) -> list[MessageRow]:
    """The last `limit` messages before seq `before_seq`, newest first, removed and orphaned
    ones left out: the same index range scan as `messages_in_range`, walked backwards."""
    result = await db.execute(
        _BEFORE, {"session_id": session_key, "before_seq": before_seq, "limit": limit}
    )
    return [MessageRow._make(row) for row in result]


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
    result = await db.execute(_BY_CLIENT_ID, {"session_id": session_key, "client_id": client_id})
    row = result.first()
    return None if row is None else MessageRow._make(row)


async def message_by_id(db: AsyncSession, session_key: int, message_id: int) -> MessageRow | None:
    """The session's message `message_id`, whatever its state (a tombstone included)."""
    result = await db.execute(_BY_ID, {"session_id": session_key, "message_id": message_id})
    row = result.first()
    return None if row is None else MessageRow._make(row)
