"""Row types of the store: one frozen type per record, returned by every read of the store.

Each is a NamedTuple whose fields are its table's columns: a statement selects the
`*_COLUMNS` tuple beside it, and `Row._make(result_row)` makes the record, no ORM instance
involved. The ORM models of `api.db.models` describe the tables (for Alembic and the
statements) and never leave the store. Adding a column: the model, a migration, the field
here.

The fields keep their columns' names, since `_columns` finds each column by its field's name
(and the PostgreSQL append derives its column lists from them): `SessionRow.id` is the session
key (the integer primary key; the session id is `external_id`, the client's string), and the
`session_id` fields of messages, summaries and jobs hold that key, as their column does. Code
outside the rows calls the integer `session_key`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Column, ColumnElement, Table, and_, or_

from api.db.models import Message, Session, Summary, SummaryJob, SummaryMessage
from summarizer.triggers import Reason, Trigger

UNBOUNDED = 2**62
"""A seq above every stored seq and a row count above any a query returns: no bound."""


def _columns(model: type[Any], fields: Sequence[str]) -> tuple[Column[Any], ...]:
    """The columns of `model`'s table named `fields` (a row type's `_fields`), in that order."""
    table: Table = model.__table__
    return tuple(table.c[name] for name in fields)


class SessionRow(NamedTuple):
    """A session: `external_id` is its session id (the client's), `id` its session key."""

    id: int
    tenant: str
    external_id: str
    metadata: dict[str, Any]
    settings: dict[str, Any]
    last_seq: int
    pinned_seq: int
    created_at: datetime
    updated_at: datetime
    removed_count: int
    format: str | None
    forked_from: str | None
    fork_seq: int | None
    expires_at: datetime | None


SESSION_COLUMNS = _columns(Session, SessionRow._fields)


class MessageRow(NamedTuple):
    """A stored message. The table keeps text content in `content` and a list of content
    parts in `content_parts` (plain text loads faster than JSON); use `body` for either."""

    id: int
    session_id: int
    seq: int
    role: str
    content: str | None
    content_parts: list[Any] | None
    name: str | None
    tool_calls: list[Any] | None
    tool_call_id: str | None
    metadata: dict[str, Any] | None
    client_id: str | None
    token_count: int
    item: str | None
    created_at: datetime
    removed_at: datetime | None
    orphaned_at: datetime | None

    @property
    def body(self) -> str | list[Any] | None:
        """The content as appended: text, or a list of content parts."""
        return self.content if self.content_parts is None else self.content_parts

    def openai(self) -> dict[str, Any]:
        """The message in OpenAI chat shape."""
        out: dict[str, Any] = {"role": self.role, "content": self.body}
        if self.name is not None:
            out["name"] = self.name
        if self.tool_calls is not None:
            out["tool_calls"] = self.tool_calls
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


MESSAGE_COLUMNS = _columns(Message, MessageRow._fields)


def live(summaries: Any) -> ColumnElement[bool]:
    """The summaries a load may show (`summaries`: the table's columns, or an alias's):
    neither superseded nor erased."""
    return and_(summaries.superseded_by.is_(None), summaries.erased_at.is_(None))


def shown(messages: Any) -> ColumnElement[bool]:
    """The messages any view shows (`messages`: the table's columns, or an alias's): neither
    removed nor orphaned."""
    return and_(messages.removed_at.is_(None), messages.orphaned_at.is_(None))


LINK_OF_SUMMARY = and_(
    SummaryMessage.session_id == Summary.session_id, SummaryMessage.summary_id == Summary.id
)
"""A summary and its links (the join pairs the session key on both sides, as the foreign key
does)."""

LINK_OF_MESSAGE = and_(
    SummaryMessage.session_id == Message.session_id, SummaryMessage.message_id == Message.id
)
"""A message and its links."""


def hidden(messages: Any) -> ColumnElement[bool]:
    """The messages no view shows (removed or orphaned): the predicate of the partial index
    `ix_messages_hidden`, which a count of them in a seq range reads."""
    return or_(messages.removed_at.is_not(None), messages.orphaned_at.is_not(None))


class SummaryRow(NamedTuple):
    """A stored summary of the seqs `first_seq..last_seq`; live while `superseded_by` and
    `erased_at` are None."""

    id: int
    session_id: int
    summary_text: str
    summary_prompt: str
    model: str
    temperature: float
    target_summary_tokens: int
    keep_last_n: int
    message_count: int
    approx_tokens: int
    first_message_id: int
    last_message_id: int
    first_seq: int
    last_seq: int
    first_message_at: datetime
    last_message_at: datetime
    level: int
    superseded_by: int | None
    metadata: dict[str, Any]
    created_at: datetime
    erased_at: datetime | None


SUMMARY_COLUMNS = _columns(Summary, SummaryRow._fields)


class JobRow(NamedTuple):
    """A background summarization job (one per session at most: its key is the session's);
    `attempts` names the current claim."""

    session_id: int
    trigger: Trigger
    reason: Reason
    status: str
    attempts: int
    run_after: datetime
    locked_until: datetime | None
    last_error: str | None
    created_at: datetime


JOB_COLUMNS = _columns(SummaryJob, JobRow._fields)


class NewMessage(NamedTuple):
    """A validated message ready to insert: the fields of `MessageRow` a client gives, in its
    order; `token_count` is counted before the transaction."""

    role: str
    content: str | None
    content_parts: list[Any] | None
    name: str | None
    tool_calls: list[Any] | None
    tool_call_id: str | None
    metadata: dict[str, Any] | None
    client_id: str | None
    token_count: int
    item: str | None = None
    """A Responses API item's JSON text as appended; the fields above are its chat reading."""
