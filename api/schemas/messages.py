"""Messages and items: what an append takes, and how a stored message is answered."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from api.items import ITEM_SCHEMA, check_item, parse_item
from api.json_values import check_json_value, check_text
from api.schemas.common import (
    ClientId,
    ParticipantName,
    Role,
    Schema,
    ToolCallId,
)
from api.schemas.stored import StoredObject, StoredText
from summarizer.triggers import ProactiveReason

if TYPE_CHECKING:
    from api.store.rows import MessageRow


class TextPart(Schema):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["text"]
    """Always `text`."""
    text: StoredText
    """The text."""


class ImageUrl(Schema):
    model_config = ConfigDict(extra="forbid", strict=True)
    url: Annotated[StoredText, Field(min_length=1)]
    """An `https:` URL or a `data:` URL of the image."""
    detail: Literal["auto", "low", "high"] | None = None
    """How closely the model looks at it, as OpenAI takes it."""


class ImagePart(Schema):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["image_url"]
    """Always `image_url`."""
    image_url: ImageUrl
    """The image."""


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]


class ToolFunction(Schema):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: Annotated[StoredText, Field(min_length=1, max_length=256)]
    """The function's name."""
    arguments: StoredText
    """Its arguments as a JSON string, as the model wrote them."""


class ToolCall(Schema):
    """One tool call of an assistant message, in OpenAI shape."""

    model_config = ConfigDict(extra="forbid", strict=True)
    id: ToolCallId
    """The call's id; a tool message answers it by `tool_call_id`."""
    type: Literal["function"] = "function"
    """Always `function`."""
    function: ToolFunction
    """The function called and its arguments."""


class ChatMessageIn(Schema):
    """A message to append, in OpenAI chat shape plus `metadata` and `client_id`: what the
    messages of every role have in common (`MessageIn` picks the role's own schema)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    role: Role = Field(description="Who wrote it: `developer` is OpenAI's newer `system`.")
    content: StoredText | Annotated[Sequence[ContentPart], Field(min_length=1)] | None = Field(
        default=None, description="Text, or a non-empty list of content parts."
    )
    name: ParticipantName | None = Field(
        default=None, description="Optional participant name, as OpenAI accepts it."
    )
    tool_calls: Annotated[list[ToolCall], Field(min_length=1, max_length=128)] | None = Field(
        default=None, description="The tool calls of an assistant message (unique ids)."
    )
    tool_call_id: ToolCallId | None = Field(
        default=None, description="The call a tool message answers."
    )
    metadata: StoredObject | None = Field(
        default=None,
        description="Anything the client keeps with the message; never sent to a model.",
    )
    client_id: ClientId | None = Field(
        default=None,
        description="Idempotency key, unique per session: a message whose client_id is stored "
        "already is answered with the stored one, not stored again.",
    )

    @model_validator(mode="after")
    def _openai_shape(self) -> Self:
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


TextContent = StoredText | Annotated[list[TextPart], Field(min_length=1)]
"""Text, or a non-empty list of text parts: the content of every role but `user`."""

NOT_HERE = "Not allowed on this role."


class SystemMessageIn(ChatMessageIn):
    role: Literal["system"] = Field(description="A system prompt.")
    content: TextContent = Field(description="Text, or a non-empty list of text parts.")
    tool_calls: None = Field(default=None, description=NOT_HERE)
    tool_call_id: None = Field(default=None, description=NOT_HERE)


class DeveloperMessageIn(ChatMessageIn):
    role: Literal["developer"] = Field(description="OpenAI's newer name for `system`.")
    content: TextContent = Field(description="Text, or a non-empty list of text parts.")
    tool_calls: None = Field(default=None, description=NOT_HERE)
    tool_call_id: None = Field(default=None, description=NOT_HERE)


class UserMessageIn(ChatMessageIn):
    role: Literal["user"] = Field(description="The user's turn.")
    content: StoredText | Annotated[list[ContentPart], Field(min_length=1)] = Field(
        description="Text, or a non-empty list of text and image parts."
    )
    tool_calls: None = Field(default=None, description=NOT_HERE)
    tool_call_id: None = Field(default=None, description=NOT_HERE)


class AssistantMessageIn(ChatMessageIn):
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": ["content"], "properties": {"content": {"not": {"type": "null"}}}},
                {"required": ["tool_calls"], "properties": {"tool_calls": {"type": "array"}}},
            ]
        }
    )
    role: Literal["assistant"] = Field(description="The model's turn.")
    content: TextContent | None = Field(
        default=None,
        description="Text, or a non-empty list of text parts; null only with `tool_calls`.",
    )
    tool_call_id: None = Field(default=None, description=NOT_HERE)

    @model_validator(mode="after")
    def _says_something(self) -> Self:
        if self.content is None and not self.tool_calls:
            raise ValueError("content may be null only on an assistant message with tool_calls")
        return self


class ToolMessageIn(ChatMessageIn):
    role: Literal["tool"] = Field(description="A tool's result.")
    content: TextContent = Field(description="The result: text, or a list of text parts.")
    tool_call_id: ToolCallId = Field(description="The call this result answers.")
    tool_calls: None = Field(default=None, description=NOT_HERE)


MessageIn = Annotated[
    SystemMessageIn | DeveloperMessageIn | UserMessageIn | AssistantMessageIn | ToolMessageIn,
    Field(discriminator="role"),
]
"""A chat message to append: each role's schema says what it may and must carry."""


class ItemIn(Schema):
    """A Responses API item to append, stored verbatim, with Precis' own `metadata` and
    `client_id` beside it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    item: StoredObject = Field(
        json_schema_extra=ITEM_SCHEMA,
        description="The item as the Responses API or the Agents SDK writes it (`message`, "
        "`function_call`, `function_call_output`, `reasoning`, or any other `type`); kept as "
        "given, every key in its order.",
    )
    metadata: StoredObject | None = None
    """Anything the client keeps with the item; never sent to a model."""
    client_id: ClientId | None = None
    """Idempotency key, unique per session, as for chat messages."""

    @model_validator(mode="after")
    def _an_item(self) -> ItemIn:
        check_item(self.item, "item")
        check_json_value(self.metadata, "metadata")
        if self.client_id is not None:
            check_text(self.client_id, "client_id")
        return self


class AppendRequest(Schema):
    """Chat messages (`messages`) or Responses items (`items`): a session holds one format."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "oneOf": [
                {"required": ["messages"], "properties": {"messages": {"type": "array"}}},
                {"required": ["items"], "properties": {"items": {"type": "array"}}},
            ]
        },
    )
    messages: Annotated[list[MessageIn], Field(min_length=1, max_length=500)] | None = None
    """Chat messages to append (a session holding chat messages), 1 to 500; a `client_id`
    given twice must come with the same message both times (422 otherwise)."""
    items: Annotated[list[ItemIn], Field(min_length=1, max_length=500)] | None = None
    """Responses API items to append (a session holding items), 1 to 500; a `client_id`
    given twice must come with the same item both times (422 otherwise)."""

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
    def batch(self) -> Sequence[ChatMessageIn | ItemIn]:
        """The messages or the items, whichever was given."""
        return self.messages if self.messages is not None else self.items or []


class MessageOut(Schema):
    id: int
    """The message's id (for `DELETE .../messages/{message_id}` and summary links)."""
    seq: int
    """Its place in the session: 1-based, contiguous, never changed."""
    role: Role
    """Who wrote it (a Responses item: how the summarizer reads it)."""
    content: str | list[dict[str, Any]] | None
    """Text, or a list of content parts."""
    name: str | None
    """The participant name, if given."""
    tool_calls: list[dict[str, Any]] | None
    """An assistant message's tool calls, if any."""
    tool_call_id: str | None
    """The call a tool message answers."""
    metadata: dict[str, Any] | None
    """What the client stored with it."""
    client_id: str | None
    """Its idempotency key, if given."""
    token_count: int
    """Its tokens (cl100k), counted once when it was appended."""
    created_at: datetime
    """When it was appended (UTC)."""
    item: dict[str, Any] | None = Field(
        description="In a `responses` session, the item as appended; the fields above are "
        "then how the summarizer reads it."
    )

    @classmethod
    def from_row(cls, row: MessageRow) -> MessageOut:
        item = None if row.item is None else parse_item(row.item)
        return cls.model_validate({**row._asdict(), "content": row.body, "item": item})


class PoppedMessage(Schema):
    message: MessageOut
    """The removed message, as it was appended."""


class SummarizationStatus(Schema):
    scheduled: bool
    """Whether this append queued a background summary."""
    reason: ProactiveReason | None = None
    """Which limit the backlog reached, when scheduled."""


class AppendResponse(Schema):
    messages: list[MessageOut]
    """One per message given, in order: the stored one for a repeated `client_id`."""
    summarization: SummarizationStatus
    """Whether a summary was queued."""


class MessageList(Schema):
    messages: list[MessageOut]
    """The messages of this page, ascending by seq."""
    next_cursor: str | None
    """`after_seq` of the next page; null on the last."""


class RemovalPreviewOut(Schema):
    """What removing a message would do, nothing changed (`GET .../messages/{id}/removal`)."""

    message_id: int
    """The message."""
    seq: int
    """Its seq."""
    erased_summaries: list[int]
    """Ids of the summaries the removal would erase, oldest first (empty: none covers it)."""
    remake_after_seq: int
    """Where the first range the erasure job would summarize again starts after: the erased
    leaf's range (a hole between the summaries left live), or, for summaries made before the
    forest, everything after the newest summary left live, a leaf (`message_limit` messages)
    at a time."""
    remake_messages: int
    """Messages the erasure job would summarize again (the removed one left out)."""
    remake_tokens: int
    """Their stored token counts: what the model reads for the leaves."""
    remake_model_calls: int
    """About how many model calls that takes: one per leaf, one per erased node or cover made
    again (with a window too small for a leaf's messages, bisecting adds more)."""
