"""A session as JSON Lines (`GET /v1/sessions/{id}/export`, `POST /v1/sessions/import`): the
shape of each line.

A file is one `session` line, then one `message` line per seq (1..`last_seq`, in order,
tombstones included), then one `summary` line per summary (live, superseded and erased), then
one `end` line counting the lines before it, so a file cut short is told from a whole one.
Internal ids never appear: a message is named by its seq, a summary by its `ref` (its
place among the file's summaries), so the file imports into any database.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, RootModel

from api.schemas.common import MessageFormat, Role, Schema, SessionId
from api.schemas.stored import StoredObject

TRANSFER_VERSION: Literal[1] = 1
"""The version of the file format this server writes and reads."""

Seq = Annotated[int, Field(ge=1, lt=2**62)]
"""A message's seq."""

Count = Annotated[int, Field(ge=0, lt=2**62)]
"""A count, or a seq that may be 0 (none)."""

SeqRange = tuple[Seq, Seq]
"""Seqs `first..last`, both included."""


class Line(Schema):
    """What every line shares: its `type`, and no key it does not declare."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)


class SessionLine(Line):
    """The first line: the session itself."""

    type: Literal["session"]
    """Always `session`."""
    version: Literal[1]
    """The file format's version (`1`)."""
    id: SessionId
    """The session id (an import may store it under another: `POST /v1/sessions/import?id=`)."""
    metadata: StoredObject
    """What the client keeps with the session."""
    settings: StoredObject
    """Its own summary settings (the overrides it was given)."""
    format: MessageFormat | None
    """`openai` or `responses`; null while it holds no message."""
    last_seq: Count
    """The seq of its newest message (tombstones included): the file holds that many
    message lines."""
    pinned_seq: Count
    """The seq of the last leading system/developer message (0: none)."""
    removed_count: Count
    """Its tombstones among the message lines."""
    created_at: datetime
    """When it was created (UTC)."""
    updated_at: datetime
    """When it last changed (UTC)."""
    forked_from: str | None
    """A fork's parent session id; null when not a fork."""
    fork_seq: Count | None
    """A fork's fork point in its parent; null when not a fork."""
    expires_at: datetime | None
    """When it expires (UTC); null when it has no expiry of its own."""


class MessageLine(Line):
    """One message, in seq order; a tombstone (`removed_at` set) keeps its seq, role and times
    and nothing else."""

    type: Literal["message"]
    """Always `message`."""
    seq: Seq
    """Its seq: the first message line is 1, each next one the one before plus 1."""
    role: Role
    """Its role (a Responses item's: the role of its chat reading)."""
    content: str | list[Any] | None
    """Its content as appended: text, a list of content parts, or null."""
    name: str | None
    """The participant name, if any."""
    tool_calls: list[Any] | None
    """An assistant message's tool calls (OpenAI shape)."""
    tool_call_id: str | None
    """The call a tool result answers."""
    metadata: StoredObject | None
    """What the client keeps with the message."""
    client_id: str | None
    """Its idempotency key, unique in the session."""
    token_count: Count
    """Its tokens, as counted when it was appended (0 for a tombstone)."""
    item: StoredObject | None
    """A `responses` session's Responses item as appended (every key in its order); the
    fields above then hold its chat reading. Null in an `openai` session."""
    created_at: datetime
    """When it was appended (UTC)."""
    removed_at: datetime | None
    """When it was removed: the line is a tombstone."""
    orphaned_at: datetime | None
    """When the other half of its tool exchange was removed: kept, shown nowhere."""


class SummaryLine(Line):
    """One summary (live, superseded or erased), with every column and the seqs it covers.

    Lines come newest range first: by `last_seq`, then `level`, descending, so a roll-up
    comes before the summaries it absorbed and `superseded_by` names an earlier line."""

    type: Literal["summary"]
    """Always `summary`."""
    ref: Seq
    """Its place among the file's summary lines (1, 2, ...): what `superseded_by` names."""
    first_seq: Seq
    """The first seq of its range."""
    last_seq: Seq
    """The last seq of its range."""
    covers: list[SeqRange]
    """The seqs of the messages it links, as ascending, disjoint ranges `[first, last]`: every
    message of its range that is neither removed nor orphaned (an erased summary keeps the
    links it was made with, tombstones included)."""
    first_message_seq: Seq
    """The seq of its first message (`first_message_id`): the start of `covers`."""
    last_message_seq: Seq
    """The seq of its last message (`last_message_id`): the end of `covers`."""
    level: Count
    """0 when made from messages, 1+ for a roll-up of summaries."""
    superseded_by: Seq | None
    """The `ref` of the roll-up that absorbed it (an earlier line); null when not absorbed."""
    summary_text: str
    """The summary (empty when erased)."""
    summary_prompt: str
    """The prompt it was made with (empty when erased)."""
    model: str
    """The model that wrote it (`fallback` when any part was written without one)."""
    temperature: float
    """The sampling temperature it was made with."""
    target_summary_tokens: Count
    """The size it was asked to fit."""
    keep_last_n: Count
    """The newest messages its summarization left out."""
    message_count: Count
    """The messages it covers: the seqs of `covers`."""
    approx_tokens: Count
    """Its own tokens."""
    first_message_at: datetime
    """When its first message was appended (UTC)."""
    last_message_at: datetime
    """When its last message was appended (UTC)."""
    metadata: StoredObject
    """How it was made (docs/design.md section 2)."""
    created_at: datetime
    """When it was made (UTC)."""
    erased_at: datetime | None
    """When a removed message erased it: no longer live."""


class EndLine(Line):
    """The last line: what came before it, so a file cut short is refused, not half-read."""

    type: Literal["end"]
    """Always `end`."""
    messages: Count
    """The message lines of the file."""
    summaries: Count
    """The summary lines of the file."""


class TransferLine(
    RootModel[
        Annotated[
            SessionLine | MessageLine | SummaryLine | EndLine,
            Field(discriminator="type"),
        ]
    ]
):
    """One line of an exported session: a JSON object whose `type` says which."""


class ImportResult(Schema):
    """What an import stored."""

    id: str
    """The session id it was stored under."""
    messages: int
    """Its messages, tombstones included (its `last_seq`)."""
    summaries: int
    """Its summaries, live, superseded and erased."""
