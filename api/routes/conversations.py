"""The OpenAI Conversations API: conversations and their items, as the official SDKs call them.

Errors answer in OpenAI's shape (`api.openai_errors`); a create answers 200, as OpenAI's does.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query, Response
from fastapi.responses import JSONResponse

from api import conversations, metrics
from api.auth import Tenant
from api.conversations import CONVERSATION_ID_PATTERN, ItemOrder
from api.deps import AppDatabase, AppSettings, AppWorker, database_faults_as_503
from api.openai_errors import openai_responses
from api.routes.checks import serialized, v1_router
from api.schemas.conversations import (
    MAX_ITEM_ID_CHARS,
    Conversation,
    ConversationCreate,
    ConversationDeleted,
    ConversationItemList,
    ConversationUpdate,
    ItemsCreate,
)
from api.worker import Worker

MAX_PAGE_ITEMS = 100
"""Largest page of items, as OpenAI's API allows."""

DEFAULT_PAGE_ITEMS = 20
"""Items per page when `limit` is not given, as OpenAI's API answers."""

ERRORS = openai_responses(400, 401, 403, 404, 503)
WRITE_ERRORS = openai_responses(400, 401, 403, 404, 409, 413, 415, 503)

router = v1_router()

ConversationPath = Annotated[
    str,
    Path(
        description="The conversation's id (`conv_...`).",
        pattern=CONVERSATION_ID_PATTERN,
        max_length=128,
    ),
]
ItemPath = Annotated[
    str,
    Path(
        description="The item's id: its own, the one generated when it was added, or one "
        "derived from its row.",
        max_length=1024,
    ),
]
Include = Annotated[
    list[str] | None,
    Query(description="Accepted and ignored: items are served as stored."),
]
IncludeBrackets = Annotated[
    list[str] | None,
    Query(
        alias="include[]",
        description="`include` as the `openai` packages write it; accepted and ignored.",
    ),
]


@router.post("/conversations", responses=WRITE_ERRORS)
async def create_conversation(
    body: ConversationCreate,
    database: AppDatabase,
    tenant: Tenant,
    settings: AppSettings,
    worker: AppWorker,
) -> Conversation:
    """Create a conversation (a Precis session of Responses items) with up to 20 first
    `items` and `metadata`; its id is generated (`conv_...`)."""
    with database_faults_as_503():
        conversation, scheduled = await conversations.create_conversation(
            database, settings, tenant, body.items or [], body.metadata or {}
        )
    _wake_if(worker, scheduled)
    return conversation


@router.get("/conversations/{conversation_id}", responses=ERRORS)
async def get_conversation(
    conversation_id: ConversationPath, database: AppDatabase, tenant: Tenant
) -> Conversation:
    """One conversation: its id, creation time and metadata."""
    checked = conversations.checked_conversation_id(conversation_id)
    with database_faults_as_503():
        return await conversations.get_conversation(database, tenant, checked)


@router.post("/conversations/{conversation_id}", responses=WRITE_ERRORS)
async def update_conversation(
    conversation_id: ConversationPath,
    body: ConversationUpdate,
    database: AppDatabase,
    tenant: Tenant,
) -> Conversation:
    """Replace the conversation's `metadata` (null: none)."""
    checked = conversations.checked_conversation_id(conversation_id)
    with database_faults_as_503():
        return await conversations.update_conversation(
            database, tenant, checked, body.metadata or {}
        )


@router.delete("/conversations/{conversation_id}", responses=ERRORS)
async def delete_conversation(
    conversation_id: ConversationPath, database: AppDatabase, tenant: Tenant
) -> ConversationDeleted:
    """Delete the conversation with its items, summaries and links (as `DELETE
    /v1/sessions/{id}` does)."""
    checked = conversations.checked_conversation_id(conversation_id)
    with database_faults_as_503():
        await conversations.delete_conversation(database, tenant, checked)
    return ConversationDeleted(id=checked)


@router.post(
    "/conversations/{conversation_id}/items",
    response_model=ConversationItemList,
    responses=WRITE_ERRORS,
)
async def add_items(
    conversation_id: ConversationPath,
    body: ItemsCreate,
    database: AppDatabase,
    tenant: Tenant,
    settings: AppSettings,
    worker: AppWorker,
    include: Include = None,
    include_brackets: IncludeBrackets = None,
) -> Response:
    """Add 1-20 items, in order, and answer them as stored. An item carrying an `id` is
    stored once per conversation (a retry answers the stored item; the same id with other
    content is 409); an item without one is stored by every call that gives it."""
    checked = conversations.checked_conversation_id(conversation_id)
    with database_faults_as_503():
        added = await conversations.add_items(database, settings, tenant, checked, body.items)
    _wake_if(worker, added.summarization_scheduled)
    return serialized(added.items)


@router.get(
    "/conversations/{conversation_id}/items",
    response_model=ConversationItemList,
    responses=ERRORS,
)
async def list_items(
    conversation_id: ConversationPath,
    database: AppDatabase,
    tenant: Tenant,
    after: Annotated[
        str | None,
        Query(
            description="List the items after this item id (`last_id` of the previous page); "
            "empty: from the start, as when it is left out."
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_ITEMS)] = DEFAULT_PAGE_ITEMS,
    order: ItemOrder = "desc",
    include: Include = None,
    include_brackets: IncludeBrackets = None,
) -> Response:
    """A page of the conversation's items, newest first (`order=desc`, the default) or oldest
    first; `has_more` says whether more follow, `last_id` is the next page's `after`."""
    checked = conversations.checked_conversation_id(conversation_id)
    with database_faults_as_503():
        page = await conversations.list_items(
            database, tenant, checked, after or None, limit, order
        )
    return serialized(page)


@router.get(
    "/conversations/{conversation_id}/items/{item_id}",
    responses={200: {"description": "The item as stored, with its `id`."}, **ERRORS},
)
async def get_item(
    conversation_id: ConversationPath,
    item_id: ItemPath,
    database: AppDatabase,
    tenant: Tenant,
    include: Include = None,
    include_brackets: IncludeBrackets = None,
) -> Response:
    """One item of the conversation, as stored, with its `id`."""
    checked = conversations.checked_conversation_id(conversation_id)
    if len(item_id) > MAX_ITEM_ID_CHARS:
        raise conversations.ItemNotFound(item_id[:MAX_ITEM_ID_CHARS] + "...", checked)
    with database_faults_as_503():
        item = await conversations.get_item(database, tenant, checked, item_id)
    return JSONResponse(item)


@router.delete("/conversations/{conversation_id}/items/{item_id}", responses=ERRORS)
async def delete_item(
    conversation_id: ConversationPath,
    item_id: ItemPath,
    database: AppDatabase,
    tenant: Tenant,
    settings: AppSettings,
    worker: AppWorker,
) -> Conversation:
    """Remove one item and answer the conversation. The item leaves every listing for good,
    every summary it reached is erased and made again without it, and the rest of its tool
    exchange is hidden (as `DELETE /v1/sessions/{id}/messages/{message_id}` does)."""
    checked = conversations.checked_conversation_id(conversation_id)
    if len(item_id) > MAX_ITEM_ID_CHARS:
        raise conversations.ItemNotFound(item_id[:MAX_ITEM_ID_CHARS] + "...", checked)
    with database_faults_as_503():
        conversation, removal = await conversations.delete_item(
            database, settings, tenant, checked, item_id
        )
    if removal is not None:
        metrics.REMOVED_MESSAGES.inc()
        metrics.ERASED_SUMMARIES.inc(removal.erased_summaries)
        _wake_if(worker, removal.erased_summaries > 0)  # the removal committed the re-make's job
    return conversation


def _wake_if(worker: Worker, scheduled: bool) -> None:
    """Wake the worker for a job the request committed."""
    if scheduled:
        worker.wake()
