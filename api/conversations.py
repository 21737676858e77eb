"""Use cases of the OpenAI Conversations API: a conversation is a Precis session holding
Responses items, an item one of its messages (`docs/design.md`, "OpenAI Conversations").

Each use case opens its own unit of work through `Database`, and reuses the session's own:
the append (`api.append`), the removal and the deletion (`api.service`).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncSession

from api import append, service, store
from api.conversation_items import (
    derived_item_id,
    derived_row_id,
    new_conversation_items,
    served_item,
)
from api.db.transactions import Database
from api.errors import BadRequest, NotFound, SessionNotFound
from api.items import parse_item
from api.schemas import PATTERN_WORDS, SESSION_ID_PATTERN
from api.schemas.conversations import Conversation, ConversationItemList
from api.settings import Settings

CONVERSATION_ID_PREFIX = "conv_"
"""What every conversation id begins with, as OpenAI's do."""

CONVERSATION_ID_PATTERN = r"^conv_[A-Za-z0-9._:-]{1,123}$"
"""A conversation id: the prefix, then a session id's characters (128 in all at most)."""
PATTERN_WORDS[CONVERSATION_ID_PATTERN] = (
    "a conversation id is `conv_` then 1 to 123 characters, each a letter (A-Z, a-z), a digit "
    "or one of `.` `_` `:` `-`"
)

CONVERSATION_ID_HEX_DIGITS = 48
"""Hex digits after the prefix of a generated conversation id (192 random bits)."""

RESPONSES_FORMAT = "responses"
"""The message format of a conversation's session: Responses API items."""

ItemOrder = Literal["asc", "desc"]


class ConversationNotFound(NotFound):
    def __init__(self, conversation_id: str) -> None:
        super().__init__(f"Conversation with id '{conversation_id}' not found.")


class ItemNotFound(NotFound):
    def __init__(self, item_id: str, conversation_id: str) -> None:
        super().__init__(f"Item with id '{item_id}' not found in conversation '{conversation_id}'.")


class InvalidConversationId(BadRequest):
    def __init__(self, conversation_id: str) -> None:
        super().__init__(
            f"path.conversation_id: invalid conversation id {conversation_id[:140]!r}: expected "
            f"an id that begins with '{CONVERSATION_ID_PREFIX}' (up to 128 letters, digits "
            "and `.` `_` `:` `-`)"
        )


class UnknownCursor(NotFound):
    """`after` names no live item of the conversation (or one removed since)."""

    def __init__(self, item_id: str, conversation_id: str) -> None:
        super().__init__(
            f"query.after: no item with id {item_id[:300]!r} in conversation '{conversation_id}'"
        )


def checked_conversation_id(conversation_id: str) -> str:
    """A conversation id as OpenAI's API takes it (`conv_...`) that is a session id too."""
    if not (
        conversation_id.startswith(CONVERSATION_ID_PREFIX)
        and re.fullmatch(SESSION_ID_PATTERN, conversation_id)
    ):
        raise InvalidConversationId(conversation_id)
    return conversation_id


def new_conversation_id() -> str:
    return CONVERSATION_ID_PREFIX + secrets.token_hex(CONVERSATION_ID_HEX_DIGITS // 2)


@dataclass(frozen=True)
class Added:
    """What adding items did: the page of stored items, and whether a summary was queued."""

    items: ConversationItemList
    summarization_scheduled: bool


# --- conversations --------------------------------------------------------------------------


async def create_conversation(
    database: Database,
    settings: Settings,
    tenant: str,
    items: Sequence[dict[str, Any]],
    metadata: dict[str, str],
) -> tuple[Conversation, bool]:
    """A new conversation with its first items; whether a summary was queued. If the items
    cannot be stored, the conversation is deleted again: a failed create leaves nothing."""
    conversation_id = new_conversation_id()
    session = await database.write(
        lambda db: store.create_session(db, tenant, conversation_id, metadata, {}, RESPONSES_FORMAT)
    )
    scheduled = False
    if items:
        try:
            answer = await append.append(
                database, settings, tenant, conversation_id, new_conversation_items(items)
            )
        except Exception:
            with suppress(Exception):
                await service.delete_session(database, tenant, conversation_id)
            raise
        scheduled = answer.summarization.scheduled
    return Conversation.from_row(session), scheduled


async def get_conversation(database: Database, tenant: str, conversation_id: str) -> Conversation:
    async with database.reading() as db:
        return Conversation.from_row(await _conversation(db, tenant, conversation_id))


async def update_conversation(
    database: Database, tenant: str, conversation_id: str, metadata: dict[str, str]
) -> Conversation:
    """Replace the conversation's metadata, as OpenAI's API does (not a merge)."""

    async def update(db: AsyncSession) -> Conversation:
        await _conversation(db, tenant, conversation_id, for_update=True)
        session = await store.update_session(db, tenant, conversation_id, {"metadata": metadata})
        return Conversation.from_row(session)

    # setting the same metadata twice gives what it gave once
    return await database.write(update, repeatable=True)


async def delete_conversation(database: Database, tenant: str, conversation_id: str) -> None:
    """Delete the conversation's session with everything of it (as `DELETE /v1/sessions`)."""

    async def delete(db: AsyncSession) -> None:
        await _conversation(db, tenant, conversation_id, for_update=True)
        await store.delete_session(db, tenant, conversation_id)

    # not repeatable: a delete that landed would answer 404 the second time
    await database.write(delete)


async def _conversation(
    db: AsyncSession, tenant: str, conversation_id: str, for_update: bool = False
) -> store.SessionRow:
    """The tenant's session of that id, if it holds Responses items (or nothing yet)."""
    try:
        session = await store.get_session(db, tenant, conversation_id, for_update=for_update)
    except SessionNotFound as exc:
        raise ConversationNotFound(conversation_id) from exc
    if session.format not in (None, RESPONSES_FORMAT):
        raise ConversationNotFound(conversation_id)  # a chat-message session is no conversation
    return session


# --- items ----------------------------------------------------------------------------------


async def add_items(
    database: Database,
    settings: Settings,
    tenant: str,
    conversation_id: str,
    items: Sequence[dict[str, Any]],
) -> Added:
    """Append the items (the session's own append: exactly once, idempotent per item id) and
    answer them as stored, in order."""
    async with database.reading() as db:
        await _conversation(db, tenant, conversation_id)
    answer = await append.append(
        database, settings, tenant, conversation_id, new_conversation_items(items)
    )
    data = [
        served_item(message.item or {}, message.client_id, message.id)
        for message in answer.messages
    ]
    return Added(_page(data, has_more=False), answer.summarization.scheduled)


async def list_items(
    database: Database,
    tenant: str,
    conversation_id: str,
    after: str | None,
    limit: int,
    order: ItemOrder,
) -> ConversationItemList:
    """A page of the conversation's items in `order`, after the item `after`; removed and
    orphaned items never appear."""
    async with database.reading() as db:
        session = await _conversation(db, tenant, conversation_id)
        cursor = None
        if after is not None:
            # an item orphaned since it ended the previous page still marks its place
            cursor = await _find_item(db, session, after, orphaned=True)
            if cursor is None:
                raise UnknownCursor(after, conversation_id)
        if order == "asc":
            after_seq = cursor.seq if cursor is not None else 0
            rows = await store.messages_in_range(
                db, session.id, after_seq, session.last_seq, limit=limit + 1
            )
        else:
            before_seq = cursor.seq if cursor is not None else session.last_seq + 1
            rows = await store.messages_before(db, session.id, before_seq, limit=limit + 1)
    data = [_served(row) for row in rows[:limit]]
    return _page(data, has_more=len(rows) > limit)


async def get_item(
    database: Database, tenant: str, conversation_id: str, item_id: str
) -> dict[str, Any]:
    async with database.reading() as db:
        session = await _conversation(db, tenant, conversation_id)
        row = await _find_item(db, session, item_id)
    if row is None:
        raise ItemNotFound(item_id, conversation_id)
    return _served(row)


async def delete_item(
    database: Database, settings: Settings, tenant: str, conversation_id: str, item_id: str
) -> tuple[Conversation, store.Removal | None]:
    """Remove the item as `DELETE /v1/sessions/{id}/messages/{message_id}` does (it leaves
    every listing, reaches every summary it was in, hides the rest of its tool exchange) and
    answer the conversation."""
    async with database.reading() as db:
        session = await _conversation(db, tenant, conversation_id)
        row = await _find_item(db, session, item_id, orphaned=True)
    if row is None:
        raise ItemNotFound(item_id, conversation_id)
    removal = await service.remove_message(database, settings, tenant, conversation_id, row.id)
    return Conversation.from_row(session), removal


async def _find_item(
    db: AsyncSession, session: store.SessionRow, item_id: str, orphaned: bool = False
) -> store.MessageRow | None:
    """The live item of that id: by its `client_id`, or by the row id a derived id names (a
    row without `client_id`); `orphaned`: an orphaned item counts too (it can be removed)."""
    row = await store.message_by_client_id(db, session.id, item_id)
    row_id = derived_row_id(item_id) if row is None else None
    if row_id is not None:
        row = await store.message_by_id(db, session.id, row_id)
        if row is not None and (
            row.client_id is not None
            or row.item is None
            or derived_item_id(parse_item(row.item), row_id) != item_id
        ):
            row = None
    if row is None or row.item is None or row.removed_at is not None:
        return None
    if row.orphaned_at is not None and not orphaned:
        return None
    return row


def _served(row: store.MessageRow) -> dict[str, Any]:
    return served_item(parse_item(row.item or "{}"), row.client_id, row.id)


def _page(data: list[dict[str, Any]], has_more: bool) -> ConversationItemList:
    return ConversationItemList(
        data=data,
        first_id=data[0]["id"] if data else None,
        last_id=data[-1]["id"] if data else None,
        has_more=has_more,
    )
