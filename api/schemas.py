"""Pydantic schemas of the REST API, kept apart from the ORM models.

Request models are strict: a JSON value must have the documented type (`"12"` is not an
integer, `true` is not 1) and unknown fields are refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.items import check_item, parse_item
from api.json_values import check_json_value
from api.settings import JSON_INTEGER, SummaryOverrides
from summarizer.triggers import CompactTrigger, ProactiveReason

if TYPE_CHECKING:
    from api.store.rows import MessageRow, SessionRow, SummaryRow

SESSION_ID_PATTERN = r"^([A-Za-z0-9._:-]{3,128}|[A-Za-z0-9_:-][A-Za-z0-9._:-]?|\.[A-Za-z0-9_:-])$"
"""1-128 characters of `[A-Za-z0-9._:-]`, except `.` and `..`: clients and proxies resolve
those as path segments, so a session with such an id could not be addressed."""

PATTERN_WORDS: dict[str, str] = {}
"""What each pattern of the schemas allows, in words: an error names that, not a regex."""

PATTERN_WORDS[SESSION_ID_PATTERN] = (
    "a session id is 1 to 128 characters, each a letter (A-Z, a-z), a digit or one of "
    "`.` `_` `:` `-`, and is not `.` or `..`"
)

SessionId = Annotated[str, Field(pattern=SESSION_ID_PATTERN, min_length=1, max_length=128)]
"""Client-chosen session id: see `SESSION_ID_PATTERN`."""

ClientId = Annotated[str, Field(min_length=1, max_length=256)]
"""Idempotency key of a message, unique per session."""

ToolCallId = Annotated[str, Field(min_length=1, max_length=256)]
"""Id linking a tool call to its result."""

PARTICIPANT_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
PATTERN_WORDS[PARTICIPANT_NAME_PATTERN] = (
    "a name is 1 to 64 characters, each a letter (A-Z, a-z), a digit, `_` or `-`"
)
ParticipantName = Annotated[str, Field(pattern=PARTICIPANT_NAME_PATTERN)]
"""Optional participant name, as OpenAI accepts it."""

Role = Literal["system", "developer", "user", "assistant", "tool"]
"""`developer` is OpenAI's newer name for `system`; both are accepted and kept as given."""


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["text"]
    text: str


class ImageUrl(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    url: Annotated[str, Field(min_length=1)]
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["image_url"]
    image_url: ImageUrl


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]


class ToolFunction(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: Annotated[str, Field(min_length=1, max_length=256)]
    arguments: str


class ToolCall(BaseModel):
    """One tool call of an assistant message, in OpenAI shape."""

    model_config = ConfigDict(extra="forbid", strict=True)
    id: ToolCallId
    type: Literal["function"] = "function"
    function: ToolFunction


class MessageIn(BaseModel):
    """A message to append, in OpenAI chat shape plus `metadata` and `client_id`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    role: Role
    content: str | Annotated[list[ContentPart], Field(min_length=1)] | None = None
    name: ParticipantName | None = None
    tool_calls: Annotated[list[ToolCall], Field(min_length=1, max_length=128)] | None = None
    tool_call_id: ToolCallId | None = None
    metadata: dict[str, Any] | None = None
    client_id: ClientId | None = None

    @model_validator(mode="after")
    def _openai_shape(self) -> MessageIn:
        if self.role == "tool" and self.tool_call_id is None:
            raise ValueError("a tool message needs tool_call_id")
        if self.role != "tool" and self.tool_call_id is not None:
            raise ValueError("tool_call_id is only allowed on tool messages")
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError("tool_calls are only allowed on assistant messages")
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError("content may be null only on an assistant message with tool_calls")
        if (
            isinstance(self.content, list)
            and self.role != "user"
            and any(isinstance(part, ImagePart) for part in self.content)
        ):
            raise ValueError("content: image parts are only allowed in user messages")
        if self.tool_calls is not None:
            ids = [call.id for call in self.tool_calls]
            if len(set(ids)) != len(ids):
                raise ValueError("tool_calls ids must be unique within a message")
        check_json_value(self.model_dump(exclude_none=True, exclude={"metadata"}), "message")
        check_json_value(self.metadata, "metadata")  # the same depth limit as a session's
        return self

    def openai_dict(self) -> dict[str, Any]:
        """The message in OpenAI chat shape (without metadata and client_id)."""
        return self.model_dump(exclude_none=True, exclude={"metadata", "client_id"})


class ItemIn(BaseModel):
    """A Responses API item to append, stored verbatim, with Precis' own `metadata` and
    `client_id` beside it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    item: dict[str, Any] = Field(
        description="The item as the Responses API or the Agents SDK writes it (`message`, "
        "`function_call`, `function_call_output`, `reasoning`, or any other `type`); kept as "
        "given, every key in its order."
    )
    metadata: dict[str, Any] | None = None
    client_id: ClientId | None = None

    @model_validator(mode="after")
    def _an_item(self) -> ItemIn:
        check_item(self.item, "item")
        check_json_value(self.metadata, "metadata")
        return self


class AppendRequest(BaseModel):
    """Chat messages (`messages`) or Responses items (`items`): a session holds one format."""

    model_config = ConfigDict(extra="forbid", strict=True)
    messages: Annotated[list[MessageIn], Field(min_length=1, max_length=500)] | None = None
    items: Annotated[list[ItemIn], Field(min_length=1, max_length=500)] | None = None

    @model_validator(mode="after")
    def _one_format_and_one_message_per_client_id(self) -> AppendRequest:
        """One of the two lists; a repeated `client_id` must repeat its message: only the first
        would be stored."""
        if (self.messages is None) == (self.items is None):
            raise ValueError("give either `messages` (chat messages) or `items` (Responses items)")
        name = "messages" if self.messages is not None else "items"
        batch = self.batch
        first_of: dict[str, int] = {}
        for index, message in enumerate(batch):
            if message.client_id is None:
                continue
            first = first_of.setdefault(message.client_id, index)
            if message != batch[first]:
                raise ValueError(
                    f"{name}[{index}] repeats the client_id {message.client_id!r} of "
                    f"{name}[{first}] with a different message"
                )
        return self

    @property
    def batch(self) -> Sequence[MessageIn | ItemIn]:
        """The messages or the items, whichever was given."""
        return self.messages if self.messages is not None else self.items or []


class MessageOut(BaseModel):
    id: int
    seq: int
    role: Role
    content: str | list[dict[str, Any]] | None
    name: str | None
    tool_calls: list[dict[str, Any]] | None
    tool_call_id: str | None
    metadata: dict[str, Any] | None
    client_id: str | None
    token_count: int
    created_at: datetime
    item: dict[str, Any] | None = Field(
        description="In a `responses` session, the item as appended; the fields above are "
        "then how the summarizer reads it."
    )

    @classmethod
    def from_row(cls, row: MessageRow) -> MessageOut:
        item = None if row.item is None else parse_item(row.item)
        return cls.model_validate({**row._asdict(), "content": row.body, "item": item})


class PoppedMessage(BaseModel):
    message: MessageOut = Field(description="The removed message, as it was appended.")
    also_removed: list[MessageOut] = Field(
        description="The other half of its tool-call pair (a call's results, or a result's "
        "call and that call's other results), removed with it."
    )


class SummarizationStatus(BaseModel):
    scheduled: bool
    reason: ProactiveReason | None = None


class AppendResponse(BaseModel):
    messages: list[MessageOut]
    summarization: SummarizationStatus


class MessageList(BaseModel):
    messages: list[MessageOut]
    next_cursor: str | None


MessageFormat = Literal["openai", "responses"]
"""How a session's messages are written: OpenAI chat messages, or Responses API items."""


class SessionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    id: SessionId | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    settings: SummaryOverrides = Field(default_factory=SummaryOverrides)
    format: MessageFormat | None = Field(
        default=None,
        description="The session's message format; when absent, its first append fixes it.",
    )

    @model_validator(mode="after")
    def _storable(self) -> SessionCreate:
        check_json_value(self.metadata, "metadata")
        return self


class SessionUpdate(BaseModel):
    """A JSON Merge Patch (RFC 7396) of `metadata` and `settings`: a key given replaces its
    value (objects in `metadata` merge recursively), a key given as null is removed, absent
    keys stay; `"metadata": null` or `"settings": null` clears the whole object."""

    model_config = ConfigDict(extra="forbid", strict=True)
    metadata: dict[str, Any] | None = None
    settings: SummaryOverrides | None = None

    @model_validator(mode="after")
    def _storable(self) -> SessionUpdate:
        check_json_value(self.metadata, "metadata")
        return self


class SessionOut(BaseModel):
    id: str
    metadata: dict[str, Any]
    settings: dict[str, Any]
    format: MessageFormat | None = Field(
        description="`openai` (chat messages) or `responses` (Responses items); null until "
        "the first append fixes it."
    )
    effective_settings: dict[str, Any] = Field(
        description="Every per-session setting in force: the server's defaults with this "
        "session's `settings` applied."
    )
    message_count: int
    summary_count: int
    last_seq: int
    created_at: datetime
    updated_at: datetime

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


class SessionList(BaseModel):
    sessions: list[SessionOut]
    next_cursor: str | None


class SummaryOut(BaseModel):
    id: int
    session_id: str
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
    metadata: dict[str, Any]
    created_at: datetime
    erased_at: datetime | None = Field(
        description="When a removed message reached this summary (it covered the message or "
        "was made after one that did): its text is erased and it is no longer live."
    )

    @classmethod
    def from_row(cls, row: SummaryRow, session_external_id: str, **extra: Any) -> Self:
        return cls.model_validate({**row._asdict(), "session_id": session_external_id, **extra})


class SummaryDetail(SummaryOut):
    message_ids: list[int]


class SummaryList(BaseModel):
    summaries: list[SummaryOut]
    next_cursor: str | None


class History(BaseModel):
    session_id: str
    pinned: list[MessageOut] = Field(
        description="The pinned prefix (leading system/developer messages no loaded summary "
        "covers): always first in `context`, verbatim, never truncated."
    )
    summaries: list[SummaryOut]
    messages: list[MessageOut]
    context: list[dict[str, Any]]
    token_estimate: int
    truncated_messages: int
    summarization_pending: bool


class CompactRequest(BaseModel):
    """`overflow_retry` summarizes everything (keep_last_n 0); `manual` keeps the newest."""

    model_config = ConfigDict(extra="forbid", strict=True)
    trigger: CompactTrigger = "manual"
    keep_last_n: Annotated[int, Field(ge=0, le=1_000_000), *JSON_INTEGER] | None = None


class CompactResponse(BaseModel):
    summary: SummaryOut | None
    history: History


class Health(BaseModel):
    status: Literal["ok"]
