"""Sessions: create, update, and how one is answered."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)

from api.json_values import check_json_value
from api.schemas.common import (
    MessageFormat,
    Schema,
    SessionId,
)
from api.schemas.stored import StoredObject
from api.session_settings import SummaryOverrides

if TYPE_CHECKING:
    from api.store.rows import SessionRow


def _a_date_time_string(value: Any) -> Any:
    """Only a string is a moment: in lax parsing a number would pass as Unix seconds."""
    if not isinstance(value, str):
        raise ValueError(
            "must be an RFC 3339 date-time with a time zone, e.g. 2030-01-01T00:00:00Z"
        )
    return value


def _ahead(value: datetime) -> datetime:
    """A session is given an expiry ahead of now: one already past would only delete it, which
    `DELETE /v1/sessions/{id}` does."""
    if value <= datetime.now(UTC):
        raise ValueError(
            "must be in the future (a session past its expires_at is deleted; to delete one "
            "now, DELETE it)"
        )
    return value


ExpiresAt = Annotated[
    AwareDatetime,
    Field(strict=False),
    BeforeValidator(_a_date_time_string),
    AfterValidator(_ahead),
]
"""When a session expires: an RFC 3339 date-time with a time zone (a naive one is refused),
in the future. From then on the session answers 404, and the retention sweep deletes it."""


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
    expires_at: ExpiresAt | None = None
    """When the session expires (RFC 3339 with a time zone, in the future): from then on it
    answers 404 and the retention sweep deletes it; absent or null: only the server's idle
    expiry (SESSION_IDLE_TTL_DAYS) applies."""

    @model_validator(mode="after")
    def _storable(self) -> SessionCreate:
        check_json_value(self.metadata, "metadata")
        return self


class SessionUpdate(Schema):
    """A JSON Merge Patch (RFC 7396) of `metadata`, `settings` and `expires_at`: a key given
    replaces its value (objects in `metadata` merge recursively), a key given as null is
    removed, absent keys stay; `"metadata": null` or `"settings": null` clears the whole
    object, `"expires_at": null` the session's expiry."""

    model_config = ConfigDict(extra="forbid", strict=True)
    metadata: StoredObject | None = None
    """A merge patch of the session's metadata (null: clear it)."""
    settings: SummaryOverrides | None = None
    """A merge patch of the session's settings (null: clear them)."""
    expires_at: ExpiresAt | None = None
    """A new expiry (RFC 3339 with a time zone, in the future); null: none. An expired session
    cannot be patched (404)."""

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
