"""Row types of the store: what an append takes, and plain rows the hot reads return."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from sqlalchemy.orm import class_mapper
from sqlalchemy.orm.instrumentation import ClassManager

from api.db.models import Message, Session

Model = TypeVar("Model")


@dataclass(frozen=True)
class NewMessage:
    """A validated message ready to insert; `token_count` is counted before the transaction."""

    role: str
    content: str | None
    content_parts: list[Any] | None
    name: str | None
    tool_calls: list[Any] | None
    tool_call_id: str | None
    metadata: dict[str, Any] | None
    client_id: str | None
    token_count: int


class MessageRow(NamedTuple):
    """A stored message as the history loader reads it: plain values, no ORM identity.

    Same attribute names as `Message`; building one is a tuple, not an ORM instance, which
    is most of a load's cost once the query itself is an index range scan.
    """

    id: int
    seq: int
    role: str
    content: str | None
    content_parts: list[Any] | None
    name: str | None
    tool_calls: list[Any] | None
    tool_call_id: str | None
    metadata_: dict[str, Any] | None
    client_id: str | None
    token_count: int
    created_at: datetime


class SummaryRow(NamedTuple):
    """A live summary as the history loader reads it: plain values, like `MessageRow`."""

    id: int
    level: int
    first_seq: int
    last_seq: int
    first_message_id: int
    last_message_id: int
    message_count: int
    approx_tokens: int
    summary_text: str
    model: str
    superseded_by: int | None
    metadata_: dict[str, Any]
    created_at: datetime


MESSAGE_MANAGER = class_mapper(Message).class_manager
SESSION_MANAGER = class_mapper(Session).class_manager


def stored(manager: ClassManager[Model], values: dict[str, Any]) -> Model:
    """A model instance for a row just written, filled the way the ORM loader fills one.

    The values go straight into the instance dict, without the change events the constructor
    fires for each attribute, and the instance joins no ORM session: the caller only reads
    it. For a message this is about 13x cheaper than the constructor (most of a 50-message
    batch's CPU before).
    """
    instance = manager.new_instance()
    instance.__dict__.update(values)
    return instance
