"""Forking a session: where to fork it, and the new session's id."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, model_validator

from api.schemas.common import Schema, SessionId
from api.session_settings import JSON_INTEGER

MAX_ROW_ID = 2**63 - 1
"""Largest message id or seq (64-bit): a fork point beyond it cannot exist."""

ForkPointNumber = Annotated[int, Field(ge=1, le=MAX_ROW_ID), *JSON_INTEGER]
"""A message id or a seq: a positive 64-bit integer."""


class ForkRequest(Schema):
    """Where to fork: the message by its `id` (`message_id`) or its `seq`, one of the two;
    the fork holds the messages up to and including it."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "oneOf": [
                {"required": ["message_id"], "properties": {"message_id": {"type": "integer"}}},
                {"required": ["seq"], "properties": {"seq": {"type": "integer"}}},
            ]
        },
    )
    message_id: ForkPointNumber | None = None
    """The fork point by the message's `id`: a message of this session, not removed (404
    `MessageNotFound` when the session never held it, 422 `BadForkPoint` when removed)."""
    seq: ForkPointNumber | None = None
    """The fork point by the message's `seq`: 1 to the session's `last_seq`, not a removed
    message (422 `BadForkPoint` otherwise)."""
    id: SessionId | None = None
    """The new session's id (409 `SessionExists` if taken); generated when absent, `conv_...`
    when the parent's id is a conversation's, else `ses_...`."""

    @model_validator(mode="after")
    def _one_fork_point(self) -> ForkRequest:
        if self.message_id is None and self.seq is None:
            raise ValueError("give the fork point as `message_id` or `seq`")
        if self.message_id is not None and self.seq is not None:
            raise ValueError("give the fork point as either `message_id` or `seq`, not both")
        return self
