"""Sessions: create, update, and how one is answered."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, Field, model_validator

from api.json_values import check_json_value
from api.schemas.common import (
    MessageFormat,
    Schema,
    SessionId,
)
from api.schemas.stored import StoredObject
from api.settings import SummaryOverrides

if TYPE_CHECKING:
    from api.store.rows import SessionRow


class SessionCreate(Schema):
    model_config = ConfigDict(extra="forbid", strict=True)
    id: SessionId | None = None
    """The session's id; generated (`ses_<hex>`) when absent."""
    metadata: StoredObject = Field(default_factory=dict)
    """Anything the client keeps with the session."""
    settings: SummaryOverrides = Field(default_factory=SummaryOverrides)
    """Per-session summary settings overriding the server's."""
    format: MessageFormat | None = Field(
        default=None,
        description="The session's message format; when absent, its first append fixes it.",
    )

    @model_validator(mode="after")
    def _storable(self) -> SessionCreate:
        check_json_value(self.metadata, "metadata")
        return self


class SessionUpdate(Schema):
    """A JSON Merge Patch (RFC 7396) of `metadata` and `settings`: a key given replaces its
    value (objects in `metadata` merge recursively), a key given as null is removed, absent
    keys stay; `"metadata": null` or `"settings": null` clears the whole object."""

    model_config = ConfigDict(extra="forbid", strict=True)
    metadata: StoredObject | None = None
    """A merge patch of the session's metadata (null: clear it)."""
    settings: SummaryOverrides | None = None
    """A merge patch of the session's settings (null: clear them)."""

    @model_validator(mode="after")
    def _storable(self) -> SessionUpdate:
        check_json_value(self.metadata, "metadata")
        return self


class SessionOut(Schema):
    id: str
    """The session's id."""
    metadata: dict[str, Any]
    """What the client keeps with it."""
    settings: dict[str, Any]
    """Its own summary settings (the overrides it was given)."""
    format: MessageFormat | None = Field(
        description="`openai` (chat messages) or `responses` (Responses items); null until "
        "the first append fixes it."
    )
    effective_settings: dict[str, Any] = Field(
        description="Every per-session setting in force: the server's defaults with this "
        "session's `settings` applied."
    )
    message_count: int
    """Messages it holds (removed ones not counted)."""
    summary_count: int
    """Its live summaries."""
    last_seq: int
    """The seq of its newest message (removed ones included)."""
    created_at: datetime
    """When it was created (UTC)."""
    updated_at: datetime
    """When it last changed (UTC)."""
    forked_from: str | None
    """A fork's parent: the id of the session it was forked from; null when not a fork."""
    fork_seq: int | None
    """A fork's fork point: the parent's seq of the last message it copied."""
    expires_at: datetime | None
    """When it expires (UTC): from then on it answers 404 and is deleted; null when it has no
    expiry of its own (the server's idle expiry, SESSION_IDLE_TTL_DAYS, may still apply)."""

    @classmethod
    def from_row(
        cls, row: SessionRow, summary_count: int, effective_settings: dict[str, Any]
    ) -> SessionOut:
        """Every seq holds a message or a removed message's tombstone."""
        return cls.model_validate(
            {
                **row._asdict(),
                "id": row.external_id,
                "effective_settings": effective_settings,
                "message_count": row.last_seq - row.removed_count,
                "summary_count": summary_count,
            }
        )


class SessionList(Schema):
    sessions: list[SessionOut]
    """The sessions of this page, newest first."""
    next_cursor: str | None
    """`cursor` of the next page; null on the last."""
