"""Messages: the listings, and the answer an append gives (the appends themselves are in
`api.store.pg_append` and `api.store.sqlite_append`, the history loader's reads in
`api.store.loader`).

Functions take the caller's AsyncSession and never commit: the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn, cast

from sqlalchemy import Table, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from api.db.models import Message
from api.errors import FormatConflict, IdempotencyConflict
from api.store.rows import MESSAGE_COLUMNS, UNBOUNDED, MessageRow, NewMessage, SessionRow, shown

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


@dataclass(frozen=True)
class AppendOutcome:
    session: SessionRow
    messages: list[MessageRow]
    inserted: int


def in_batch_order(
    batch: Sequence[NewMessage], fresh: Sequence[MessageRow], stored: dict[str, MessageRow]
) -> list[MessageRow]:
    """The answer to an append, one row per message of `batch`: the `fresh` rows it inserted
    (in order: each message without a client id, and the first with each client id that
    `stored` does not hold), and the `stored` row for every repeated client id."""
    by_client_id = dict(stored)
    inserted = iter(fresh)
    answer: list[MessageRow] = []
    for new in batch:
        if new.client_id is not None and new.client_id in by_client_id:
            answer.append(by_client_id[new.client_id])
            continue
        row = next(inserted)
        if new.client_id is not None:
            by_client_id[new.client_id] = row
        answer.append(row)
    return answer


def batch_format(batch: Sequence[NewMessage]) -> str:
    """The message format of a batch (an append holds one format)."""
    return "responses" if batch[0].item is not None else "openai"


def check_format(external_id: str, held: str | None, batch: Sequence[NewMessage]) -> None:
    """Refuse a batch in the other format than the session's (`held`; None: not fixed yet)."""
    given = batch_format(batch)
    if held is not None and held != given:
        raise FormatConflict(
            f"session {external_id!r} holds {FORMAT_NAMES[held]}; this batch is "
            f"{FORMAT_NAMES[given]} (a session holds one format)"
        )


FORMAT_NAMES = {"openai": "chat messages (`messages`)", "responses": "Responses items (`items`)"}


def raise_idempotency_conflict(client_id: str, message_id: int, seq: int) -> NoReturn:
    raise IdempotencyConflict(
        f"client_id {client_id!r} is message {message_id} (seq {seq}), stored with another "
        "message: a retry repeats its message exactly, a new message needs a new client_id"
    )


def check_repeats(batch: Sequence[NewMessage], stored: dict[str, MessageRow]) -> None:
    """Refuse a batch repeating a stored `client_id` with another message."""
    for new in batch:
        row = stored.get(new.client_id) if new.client_id is not None else None
        if row is not None and _content_of(new) != _content_of(row):
            raise_idempotency_conflict(new.client_id or "", row.id, row.seq)


def _content_of(message: NewMessage | MessageRow) -> tuple[object, ...]:
    """What a repeated `client_id` must repeat: the message, not its token count."""
    return (
        message.role,
        message.content,
        message.content_parts,
        message.name,
        message.tool_calls,
        message.tool_call_id,
        message.metadata,
        message.item,
    )


async def messages_in_range(
    db: AsyncSession,
    session_id: int,
    after_seq: int,
    last_seq: int = UNBOUNDED,
    limit: int = UNBOUNDED,
) -> list[MessageRow]:
    """The first `limit` messages of seqs `after_seq + 1..last_seq`, ascending, removed and
    orphaned ones left out: an index range scan on `(session_id, seq)`."""
    result = await db.execute(
        _RANGE,
        {"session_id": session_id, "after_seq": after_seq, "last_seq": last_seq, "limit": limit},
    )
    return [MessageRow._make(row) for row in result]
