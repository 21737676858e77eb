"""The OpenAI Conversations API's wire shapes (as the `openai` package's types read them):
conversations, their items, the pages of items.

Items go in and out as plain JSON objects: a conversation stores each item verbatim, and the
served view (`api.conversation_items.served_item`) adds only what OpenAI's types require.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field

from api.items import ITEM_SCHEMA, check_item
from api.json_values import check_json_value
from api.schemas.common import ClientId, Schema
from api.schemas.stored import NO_NUL_PATTERN, StoredObject, TextKeys

if TYPE_CHECKING:
    from api.store.rows import SessionRow

MAX_ITEMS_PER_CALL = 20
"""Items one create takes at most, as OpenAI's API allows."""

MAX_METADATA_PAIRS = 16
"""OpenAI's metadata rules: at most this many key-value pairs ..."""

MAX_METADATA_KEY_CHARS = 64
"""... keys of at most this many characters ..."""

MAX_METADATA_VALUE_CHARS = 512
"""... and string values of at most this many characters."""

MAX_ITEM_ID_CHARS = 256
"""Longest item id: an item's id is the row's `client_id`."""


def _openai_metadata(metadata: dict[str, str]) -> dict[str, str]:
    if len(metadata) > MAX_METADATA_PAIRS:
        raise ValueError(f"at most {MAX_METADATA_PAIRS} key-value pairs")
    for key in metadata:
        if len(key) > MAX_METADATA_KEY_CHARS:
            raise ValueError(f"key {key[:20]!r}... is over {MAX_METADATA_KEY_CHARS} characters")
    check_json_value(metadata, "metadata")
    return metadata


Metadata = Annotated[
    dict[
        Annotated[str, Field(pattern=NO_NUL_PATTERN)],
        Annotated[str, Field(max_length=MAX_METADATA_VALUE_CHARS, pattern=NO_NUL_PATTERN)],
    ],
    TextKeys(),
    AfterValidator(_openai_metadata),
]
"""OpenAI's metadata: at most 16 pairs of strings, keys up to 64 characters, values up to 512."""


def _conversation_item(item: dict[str, Any]) -> dict[str, Any]:
    check_item(item, "item")
    own_id = item.get("id")
    if own_id is not None and not (
        isinstance(own_id, str) and 0 < len(own_id) <= MAX_ITEM_ID_CHARS
    ):
        raise ValueError(f"item: id must be a string of 1 to {MAX_ITEM_ID_CHARS} characters")
    return item


InputItem = Annotated[
    StoredObject, AfterValidator(_conversation_item), Field(json_schema_extra=ITEM_SCHEMA)
]
"""A Responses input item, stored as given; its `id`, when it has one, is its id here too."""


class ConversationCreate(Schema):
    model_config = ConfigDict(extra="forbid", strict=True)
    items: Annotated[list[InputItem], Field(max_length=MAX_ITEMS_PER_CALL)] | None = None
    """Initial items of the conversation, up to 20."""
    metadata: Metadata | None = None
    """Up to 16 string pairs kept with the conversation (keys up to 64 characters, values up
    to 512)."""


class ConversationUpdate(Schema):
    model_config = ConfigDict(extra="forbid", strict=True)
    metadata: Metadata | None
    """The conversation's new metadata, replacing the old (null: none)."""


class ItemsCreate(Schema):
    model_config = ConfigDict(extra="forbid", strict=True)
    items: Annotated[list[InputItem], Field(min_length=1, max_length=MAX_ITEMS_PER_CALL)]
    """The items to add, 1 to 20, in order. An item carrying an `id` is stored once per
    conversation: a retry answers the stored item."""


class Conversation(Schema):
    id: str
    """The conversation's id (`conv_...`): the id of the Precis session it is."""
    object: Literal["conversation"] = "conversation"
    """Always `conversation`."""
    created_at: int
    """When it was created, in seconds since the Unix epoch."""
    metadata: dict[str, Any]
    """What the client keeps with it."""

    @classmethod
    def from_row(cls, row: SessionRow) -> Conversation:
        return cls(
            id=row.external_id, created_at=int(row.created_at.timestamp()), metadata=row.metadata
        )


class ConversationDeleted(Schema):
    id: str
    """The deleted conversation's id."""
    object: Literal["conversation.deleted"] = "conversation.deleted"
    """Always `conversation.deleted`."""
    deleted: bool = True
    """Always true."""


class ConversationItemList(Schema):
    object: Literal["list"] = "list"
    """Always `list`."""
    data: list[dict[str, Any]]
    """The items of this page: Responses items as stored, with `id` (and `type` and `status`
    where OpenAI's types require them)."""
    first_id: str | None
    """The id of the first item of `data` (null when it is empty)."""
    last_id: str | None
    """The id of the last item of `data`: `after` of the next page (null when it is empty)."""
    has_more: bool
    """Whether more items follow in this order."""


ItemId = Annotated[ClientId, Field(max_length=MAX_ITEM_ID_CHARS)]
"""An item's id: its own, one generated when it was added, or one derived from its row."""
