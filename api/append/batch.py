"""What both appends share: their answer (`AppendOutcome`, `Appended`), the backlog they count,
and the checks a batch passes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NoReturn

from api.errors import Conflict, FormatConflict, IdempotencyConflict
from api.store.rows import MessageRow, NewMessage, SessionRow
from api.store.summaries import Backlog


@dataclass(frozen=True)
class AppendOutcome:
    session: SessionRow
    messages: list[MessageRow]
    inserted: int


@dataclass(frozen=True)
class Appended:
    outcome: AppendOutcome
    backlog: Backlog
    """What lies after the newest live summary (and the pinned prefix), as the statement
    counted it with the `api.summary_plans.BacklogCounting` it was given."""
    summarized_seq: int
    """The newest live summary's last seq (0: none)."""
    job_queued: bool


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


def raise_key_taken(external_id: str) -> NoReturn:
    """Another session id of the tenant has this one's session key (`api.store.keys`)."""
    raise Conflict(f"session id {external_id!r} is taken (its session key is another's)")


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


def stored_row(
    message_id: int, session_key: int, seq: int, new: NewMessage, created_at: datetime
) -> MessageRow:
    """The row an append stores for `new`, built by name: a column added to both row types
    needs no change here."""
    return MessageRow(
        id=message_id,
        session_id=session_key,
        seq=seq,
        created_at=created_at,
        removed_at=None,
        orphaned_at=None,
        **new._asdict(),
    )
