"""The OpenAI Conversations API through the `openai` package itself, on every backend.

Every answer is parsed with the package's own types, strictly (`model_validate`), as the SDK
reads them; errors arrive as the SDK's exception classes with OpenAI's error body. A
conversation is a Precis session: the session routes see it too (history, compact, removal).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import pytest
from fastapi import FastAPI, Request
from openai import (
    APIStatusError,
    AsyncOpenAI,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    NotFoundError,
)
from openai.types.conversations import (
    Conversation,
    ConversationDeletedResource,
    ConversationItem,
    ConversationItemList,
)
from pydantic import TypeAdapter

from api.errors import ConcurrentChange, Conflict, IdempotencyConflict
from api.main import precis_error
from api.openai_errors import reshaped
from tests.conftest import QUIET
from tests.helpers import said

KEYS = "tenant_a:key_a,tenant_b:key_b"
HEADERS_A = {"Authorization": "Bearer key_a"}

MAX_MESSAGE_BYTES = 20_000
"""This module's item size limit: an item over it is refused (413) after the body is read."""

MAX_REQUEST_BYTES = 60_000
"""This module's body limit: a body over it is refused (413) by the gate, before the app."""

ITEM = TypeAdapter(ConversationItem)
"""The `openai` package's union of every item type, as it reads an item."""

GENERATED_ID = r"[0-9a-f]{48}"


@pytest.fixture(scope="module")
def module_settings() -> dict[str, Any]:
    """Two tenants, the local model, no background jobs: only the summaries a test asks for
    (`compact`)."""
    return {
        **QUIET,
        "dynamic_summary_enabled": True,
        "summary_message_limit": 10_000,
        "api_keys": KEYS,
        "max_message_bytes": MAX_MESSAGE_BYTES,
        "max_request_bytes": MAX_REQUEST_BYTES,
    }


@pytest.fixture(scope="module")
async def api(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """Precis' own REST API on the module's app, as tenant A."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://localhost", headers=HEADERS_A
    ) as http:
        yield http


@pytest.fixture(scope="module")
async def http2(app: FastAPI) -> AsyncIterator[httpx2.AsyncClient]:
    """The transport the `openai` package takes, on the module's app."""
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield http


def openai_client(http: httpx2.AsyncClient, key: str) -> AsyncOpenAI:
    """The one-line switch: the official client, its base URL and key pointing at Precis."""
    return AsyncOpenAI(base_url="http://localhost/v1", api_key=key, http_client=http, max_retries=0)


@pytest.fixture(scope="module")
def client(http2: httpx2.AsyncClient) -> AsyncOpenAI:
    return openai_client(http2, "key_a")


@pytest.fixture(scope="module")
def other_tenant(http2: httpx2.AsyncClient) -> AsyncOpenAI:
    return openai_client(http2, "key_b")


# The builders and `added` are typed Any: the `openai` package's item unions share no
# attributes, and its parameter types are TypedDicts a plain dict is not.


def call(call_id: str) -> Any:
    return {"type": "function_call", "call_id": call_id, "name": "lookup", "arguments": "{}"}


def output(call_id: str) -> Any:
    return {"type": "function_call_output", "call_id": call_id, "output": f"result {call_id}"}


async def created(client: AsyncOpenAI, **params: Any) -> Conversation:
    """A conversation, its answer parsed strictly with the package's type."""
    raw = await client.conversations.with_raw_response.create(**params)
    return Conversation.model_validate(raw.http_response.json())


async def added(client: AsyncOpenAI, conversation_id: str, *items: Any) -> Any:
    raw = await client.conversations.items.with_raw_response.create(
        conversation_id, items=list(items)
    )
    return ConversationItemList.model_validate(raw.http_response.json())


async def listed(client: AsyncOpenAI, conversation_id: str, **params: Any) -> dict[str, Any]:
    """One page of items, every item parsed strictly."""
    raw = await client.conversations.items.with_raw_response.list(conversation_id, **params)
    page: dict[str, Any] = raw.http_response.json()
    assert page["object"] == "list"
    for item in page["data"]:
        ITEM.validate_python(item)
    return page


async def every_item(client: AsyncOpenAI, conversation_id: str, **params: Any) -> list[Any]:
    """Every item, through the SDK's own auto-pagination."""
    return [item async for item in client.conversations.items.list(conversation_id, **params)]


def error_of(raised: pytest.ExceptionInfo[APIStatusError]) -> dict[str, Any]:
    """The error body, which must be OpenAI's shape exactly."""
    body = raised.value.response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    detail: dict[str, Any] = body["error"]
    return detail


# --- conversations ----------------------------------------------------------------------------


async def test_a_created_conversation_has_an_openai_id_its_metadata_and_its_items(
    client: AsyncOpenAI,
) -> None:
    before = int(time.time())
    conversation = await created(
        client,
        metadata={"topic": "demo"},
        items=[{"type": "message", "role": "user", "content": "Hello!"}],
    )
    assert re.fullmatch(f"conv_{GENERATED_ID}", conversation.id)
    assert conversation.object == "conversation"
    assert conversation.metadata == {"topic": "demo"}
    assert before - 1 <= conversation.created_at <= int(time.time()) + 1
    items = await every_item(client, conversation.id)
    assert [(item.type, item.content[0].text) for item in items] == [("message", "Hello!")]


async def test_a_conversation_can_start_empty_as_the_agents_sdk_starts_it(
    client: AsyncOpenAI,
) -> None:
    conversation = await created(client, items=[])
    assert conversation.metadata == {}
    assert await every_item(client, conversation.id) == []


async def test_retrieve_answers_what_create_answered(client: AsyncOpenAI) -> None:
    conversation = await created(client, metadata={"topic": "demo"})
    raw = await client.conversations.with_raw_response.retrieve(conversation.id)
    assert Conversation.model_validate(raw.http_response.json()) == conversation


async def test_update_replaces_the_metadata_and_null_clears_it(client: AsyncOpenAI) -> None:
    conversation = await created(client, metadata={"topic": "demo", "owner": "ana"})
    updated = await client.conversations.update(conversation.id, metadata={"topic": "project-x"})
    assert updated.metadata == {"topic": "project-x"}  # replaced, not merged
    assert updated.created_at == conversation.created_at
    assert (await client.conversations.retrieve(conversation.id)).metadata == {"topic": "project-x"}
    cleared = await client.conversations.update(conversation.id, metadata=None)
    assert cleared.metadata == {}


async def test_a_deleted_conversation_is_gone_from_every_route(client: AsyncOpenAI) -> None:
    conversation = await created(client, items=[said("Hello")])
    raw = await client.conversations.with_raw_response.delete(conversation.id)
    deleted = ConversationDeletedResource.model_validate(raw.http_response.json())
    assert (deleted.id, deleted.object, deleted.deleted) == (
        conversation.id,
        "conversation.deleted",
        True,
    )
    for step in (
        client.conversations.retrieve(conversation.id),
        client.conversations.update(conversation.id, metadata={"a": "b"}),
        client.conversations.delete(conversation.id),
        client.conversations.items.list(conversation.id),
        client.conversations.items.create(conversation.id, items=[said("again")]),
    ):
        with pytest.raises(NotFoundError) as raised:
            await step
        assert error_of(raised)["type"] == "invalid_request_error"
    # adding items did not bring it back
    with pytest.raises(NotFoundError):
        await client.conversations.retrieve(conversation.id)


async def test_a_conversation_is_a_session_of_responses_items(
    client: AsyncOpenAI, api: httpx.AsyncClient
) -> None:
    conversation = await created(
        client, metadata={"topic": "demo"}, items=[said("Hello"), said("Hi!", "assistant")]
    )
    session = (await api.get(f"/v1/sessions/{conversation.id}")).json()
    assert (session["format"], session["metadata"], session["message_count"]) == (
        "responses",
        {"topic": "demo"},
        2,
    )
    history = (await api.get(f"/v1/sessions/{conversation.id}/history")).json()
    assert history["context"] == [said("Hello"), said("Hi!", "assistant")]


async def test_a_session_of_chat_messages_is_not_a_conversation(
    client: AsyncOpenAI, api: httpx.AsyncClient
) -> None:
    chat = f"conv_chat_{time.time_ns()}"
    stored = await api.post(
        f"/v1/sessions/{chat}/messages", json={"messages": [{"role": "user", "content": "hi"}]}
    )
    assert stored.status_code == 201, stored.text
    with pytest.raises(NotFoundError):
        await client.conversations.retrieve(chat)
    with pytest.raises(NotFoundError):
        await client.conversations.items.create(chat, items=[said("hi")])


async def test_another_tenants_conversation_is_not_found(
    client: AsyncOpenAI, other_tenant: AsyncOpenAI
) -> None:
    conversation = await created(client, items=[said("mine")])
    item_id = (await every_item(client, conversation.id))[0].id
    for step in (
        other_tenant.conversations.retrieve(conversation.id),
        other_tenant.conversations.update(conversation.id, metadata={"a": "b"}),
        other_tenant.conversations.delete(conversation.id),
        other_tenant.conversations.items.list(conversation.id),
        other_tenant.conversations.items.create(conversation.id, items=[said("theirs")]),
        other_tenant.conversations.items.retrieve(item_id, conversation_id=conversation.id),
        other_tenant.conversations.items.delete(item_id, conversation_id=conversation.id),
    ):
        with pytest.raises(NotFoundError):
            await step
    assert [item.id for item in await every_item(client, conversation.id)] == [item_id]


async def test_a_wrong_key_is_refused_in_openai_shape(http2: httpx2.AsyncClient) -> None:
    stranger = openai_client(http2, "not-a-key")
    with pytest.raises(AuthenticationError) as raised:
        await stranger.conversations.create()
    error = error_of(raised)
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_api_key")


# --- items ------------------------------------------------------------------------------------


async def test_items_create_answers_a_list_page_of_the_stored_items(client: AsyncOpenAI) -> None:
    conversation = await created(client)
    page = await added(client, conversation.id, said("Hello!"), said("How are you?"))
    assert page.object == "list"
    assert [item.content[0].text for item in page.data] == ["Hello!", "How are you?"]
    assert (page.first_id, page.last_id, page.has_more) == (
        page.data[0].id,
        page.data[1].id,
        False,
    )


async def test_an_item_id_is_its_own_or_one_with_openais_prefix_for_its_type(
    client: AsyncOpenAI,
) -> None:
    conversation = await created(client)
    reasoning = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "look it up"}]}
    page = await added(
        client,
        conversation.id,
        said("Where is my order?"),
        reasoning,
        call("call_1"),
        output("call_1"),
        {**said("Shipped.", "assistant"), "id": "msg_my_own"},
    )
    ids = [item.id for item in page.data]
    prefixes = ["msg_", "rs_", "fc_", "fco_"]
    for item_id, prefix in zip(ids, prefixes, strict=False):
        assert re.fullmatch(prefix + GENERATED_ID, item_id), item_id
    assert ids[-1] == "msg_my_own"
    # stable: listed and retrieved under the same ids
    assert [item.id for item in await every_item(client, conversation.id, order="asc")] == ids
    for item_id in ids:
        item = await client.conversations.items.retrieve(item_id, conversation_id=conversation.id)
        assert item.id == item_id


async def test_an_item_is_served_as_stored_with_what_openais_types_require(
    client: AsyncOpenAI, api: httpx.AsyncClient
) -> None:
    conversation = await created(client)
    given = [
        {"role": "user", "content": "plain text"},
        {"type": "message", "role": "assistant", "content": "an answer"},
        {**call("call_7"), "id": "fc_7"},
        {**output("call_7"), "id": "fco_7"},
    ]
    page = await added(client, conversation.id, *given)
    served = [item.model_dump(exclude_none=True) for item in page.data]
    assert served[0]["content"] == [{"type": "input_text", "text": "plain text"}]
    assert served[0]["status"] == "completed"
    assert served[1]["content"] == [{"type": "output_text", "text": "an answer", "annotations": []}]
    assert (served[2]["status"], served[3]["status"]) == ("completed", "completed")
    # stored verbatim: the session's own API shows each item exactly as given
    stored = (await api.get(f"/v1/sessions/{conversation.id}/messages")).json()["messages"]
    assert [message["item"] for message in stored] == given


async def test_an_assistant_messages_phase_and_unknown_fields_round_trip_verbatim(
    client: AsyncOpenAI, api: httpx.AsyncClient
) -> None:
    conversation = await created(client)
    commentary = {
        **said("Checking the tracking number.", "assistant"),
        "phase": "commentary",
        "x_vendor_hint": {"kept": True},
    }
    final = {**said("It ships Friday.", "assistant"), "phase": "final_answer"}
    page = await added(client, conversation.id, commentary, final)
    assert [item.model_dump().get("phase") for item in page.data] == ["commentary", "final_answer"]
    listed = await every_item(client, conversation.id, order="asc")
    assert [item.model_dump().get("phase") for item in listed] == ["commentary", "final_answer"]
    assert listed[0].model_dump()["x_vendor_hint"] == {"kept": True}
    stored = (await api.get(f"/v1/sessions/{conversation.id}/messages")).json()["messages"]
    assert [message["item"] for message in stored] == [commentary, final]


async def test_a_retried_items_create_with_ids_stores_each_item_once(
    client: AsyncOpenAI,
) -> None:
    conversation = await created(client)
    batch = [{**said("once"), "id": "msg_retry_1"}, {**call("call_r"), "id": "fc_retry_1"}]
    first = await added(client, conversation.id, *batch)
    again = await added(client, conversation.id, *batch)
    assert again == first
    items = await every_item(client, conversation.id, order="asc")
    assert [item.id for item in items] == ["msg_retry_1", "fc_retry_1"]


async def test_an_item_id_given_again_with_other_content_is_a_conflict(
    client: AsyncOpenAI,
) -> None:
    conversation = await created(client, items=[{**said("first"), "id": "msg_taken"}])
    other_content: Any = {**said("second"), "id": "msg_taken"}
    with pytest.raises(ConflictError) as raised:
        await client.conversations.items.create(conversation.id, items=[other_content])
    assert error_of(raised)["code"] == "idempotency_conflict"
    assert len(await every_item(client, conversation.id)) == 1


async def test_the_sdk_does_not_retry_a_conflict_no_wait_resolves(
    client: AsyncOpenAI, app: FastAPI
) -> None:
    conversation = await created(client, items=[{**said("first"), "id": "msg_held"}])
    sent: list[str] = []

    async def count(request: httpx2.Request) -> None:
        sent.append(request.url.path)

    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(
        transport=transport, base_url="http://localhost", event_hooks={"request": [count]}
    ) as http:
        retrying = AsyncOpenAI(base_url="http://localhost/v1", api_key="key_a", http_client=http)
        assert retrying.max_retries > 0, "the SDK's default: it retries a 409"
        other_content: Any = {**said("second"), "id": "msg_held"}
        with pytest.raises(ConflictError) as raised:
            await retrying.conversations.items.create(conversation.id, items=[other_content])
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert len(sent) == 1, "answered at once, not after the SDK's retries"


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (IdempotencyConflict("msg_held holds other content"), False),
        (ConcurrentChange("the session was deleted while this append ran; retry"), True),
    ],
)
def test_a_conflict_a_retry_resolves_is_retried_after_a_second_the_others_not(
    error: Conflict, retried: bool
) -> None:
    answer = asyncio.run(precis_error(Request({"type": "http"}), error))
    shaped = reshaped(answer.status_code, answer.body, answer.headers, None, "/v1/conversations")
    assert shaped.status_code == 409
    if retried:
        assert shaped.headers["retry-after"] == "1"
        assert "x-should-retry" not in shaped.headers
    else:
        assert shaped.headers["x-should-retry"] == "false"
        assert "retry-after" not in shaped.headers


async def test_items_without_ids_are_stored_by_every_call_that_gives_them(
    client: AsyncOpenAI,
) -> None:
    conversation = await created(client)
    await added(client, conversation.id, said("no id"))
    await added(client, conversation.id, said("no id"))
    items = await every_item(client, conversation.id)
    assert len(items) == 2 and items[0].id != items[1].id


async def test_the_list_pages_newest_first_by_default_and_the_sdk_walks_every_page(
    client: AsyncOpenAI,
) -> None:
    conversation = await created(client)
    texts = [f"item {number}" for number in range(25)]
    await added(client, conversation.id, *[said(text) for text in texts[:20]])
    await added(client, conversation.id, *[said(text) for text in texts[20:]])
    first = await listed(client, conversation.id)
    assert [item["content"][0]["text"] for item in first["data"]] == texts[::-1][:20]
    assert first["has_more"] is True
    assert (first["first_id"], first["last_id"]) == (
        first["data"][0]["id"],
        first["data"][-1]["id"],
    )
    rest = await listed(client, conversation.id, after=first["last_id"])
    assert [item["content"][0]["text"] for item in rest["data"]] == texts[::-1][20:]
    assert rest["has_more"] is False
    walked = await every_item(client, conversation.id, limit=7)
    assert [item.content[0].text for item in walked] == texts[::-1]


async def test_the_list_pages_oldest_first_with_order_asc(client: AsyncOpenAI) -> None:
    conversation = await created(client, items=[said(f"item {n}") for n in range(12)])
    first = await listed(client, conversation.id, order="asc", limit=5)
    assert [item["content"][0]["text"] for item in first["data"]] == [f"item {n}" for n in range(5)]
    assert first["has_more"] is True
    walked = await every_item(client, conversation.id, order="asc", limit=5)
    assert [item.content[0].text for item in walked] == [f"item {n}" for n in range(12)]
    last = await listed(client, conversation.id, order="asc", after=walked[-1].id)
    assert (last["data"], last["first_id"], last["last_id"], last["has_more"]) == (
        [],
        None,
        None,
        False,
    )


async def test_include_is_accepted_on_every_items_call(client: AsyncOpenAI) -> None:
    conversation = await created(client)
    include: Any = ["message.output_text.logprobs", "reasoning.encrypted_content"]
    page: Any = await client.conversations.items.create(
        conversation.id, items=[said("hi")], include=include
    )
    listed_page = await client.conversations.items.list(conversation.id, include=include)
    item = await client.conversations.items.retrieve(
        page.data[0].id, conversation_id=conversation.id, include=include
    )
    assert listed_page.data[0].id == item.id == page.data[0].id


async def test_a_deleted_item_answers_the_conversation_and_leaves_every_listing(
    client: AsyncOpenAI, api: httpx.AsyncClient
) -> None:
    conversation = await created(client, metadata={"topic": "demo"})
    page = await added(client, conversation.id, said("keep"), said("drop"), said("keep too"))
    dropped = page.data[1].id
    raw = await client.conversations.items.with_raw_response.delete(
        dropped, conversation_id=conversation.id
    )
    assert Conversation.model_validate(raw.http_response.json()) == conversation
    texts = [item.content[0].text for item in await every_item(client, conversation.id)]
    assert texts == ["keep too", "keep"]
    with pytest.raises(NotFoundError):
        await client.conversations.items.retrieve(dropped, conversation_id=conversation.id)
    with pytest.raises(NotFoundError):
        await client.conversations.items.delete(dropped, conversation_id=conversation.id)
    history = (await api.get(f"/v1/sessions/{conversation.id}/history")).json()
    assert history["context"] == [said("keep"), said("keep too")]


async def test_deleting_a_call_hides_its_output_as_a_session_removal_does(
    client: AsyncOpenAI,
) -> None:
    conversation = await created(
        client, items=[said("look it up"), {**call("call_9"), "id": "fc_9"}, output("call_9")]
    )
    await client.conversations.items.delete("fc_9", conversation_id=conversation.id)
    items = await every_item(client, conversation.id)
    assert [item.type for item in items] == ["message"]


async def test_a_deleted_item_reaches_the_summaries_it_was_in(
    client: AsyncOpenAI, api: httpx.AsyncClient
) -> None:
    conversation = await created(
        client,
        items=[
            said("My locker code is 4711."),
            said("Noted.", "assistant"),
            said("And my cat is called Miso."),
            said("Noted too.", "assistant"),
        ],
    )
    compacted = await api.post(
        f"/v1/sessions/{conversation.id}/compact", json={"trigger": "manual", "keep_last_n": 0}
    )
    assert compacted.status_code == 200, compacted.text
    summary = compacted.json()["summary"]
    assert "4711" in summary["summary_text"]
    first = (await every_item(client, conversation.id, order="asc"))[0]
    await client.conversations.items.delete(first.id, conversation_id=conversation.id)
    erased = (await api.get(f"/v1/summaries/{summary['id']}")).json()
    assert erased["erased_at"] is not None and erased["summary_text"] == ""
    history = (await api.get(f"/v1/sessions/{conversation.id}/history")).json()
    assert "4711" not in str(history["context"])


async def test_items_appended_through_the_session_api_are_served_and_found_by_their_ids(
    client: AsyncOpenAI, api: httpx.AsyncClient
) -> None:
    conversation = await created(client)
    appended = await api.post(
        f"/v1/sessions/{conversation.id}/messages",
        json={
            "items": [{"item": said("no client id")}, {"item": said("mine"), "client_id": "c-1"}]
        },
    )
    assert appended.status_code == 201, appended.text
    row_id = appended.json()["messages"][0]["id"]
    items = await every_item(client, conversation.id, order="asc")
    assert [item.id for item in items] == [f"msg_{row_id:048x}", "c-1"]
    derived: Any = await client.conversations.items.retrieve(
        items[0].id, conversation_id=conversation.id
    )
    assert derived.content[0].text == "no client id"
    await client.conversations.items.delete(items[0].id, conversation_id=conversation.id)
    assert [item.id for item in await every_item(client, conversation.id)] == ["c-1"]


async def test_an_item_of_another_conversation_is_not_found(client: AsyncOpenAI) -> None:
    mine = await created(client)
    theirs = await created(client, items=[{**said("elsewhere"), "id": "msg_elsewhere"}])
    assert (await every_item(client, theirs.id))[0].id == "msg_elsewhere"
    for step in (
        client.conversations.items.retrieve("msg_elsewhere", conversation_id=mine.id),
        client.conversations.items.delete("msg_elsewhere", conversation_id=mine.id),
        client.conversations.items.retrieve(f"msg_{1:048x}", conversation_id=mine.id),
    ):
        with pytest.raises(NotFoundError) as raised:
            await step
        assert "not found" in error_of(raised)["message"]


# --- bad requests -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad_id", ["invalid-no-conv-prefix", "conv_has space", "conv_" + "x" * 124]
)
async def test_an_id_that_is_no_conversation_id_is_a_bad_request_on_every_route(
    client: AsyncOpenAI, bad_id: str
) -> None:
    for step in (
        client.conversations.retrieve(bad_id),
        client.conversations.update(bad_id, metadata={"a": "b"}),
        client.conversations.delete(bad_id),
        client.conversations.items.list(bad_id),
        client.conversations.items.create(bad_id, items=[said("hi")]),
        client.conversations.items.retrieve("msg_1", conversation_id=bad_id),
        client.conversations.items.delete("msg_1", conversation_id=bad_id),
    ):
        with pytest.raises(BadRequestError) as raised:
            await step
        error = error_of(raised)
        assert (error["type"], error["param"]) == ("invalid_request_error", "conversation_id")


@pytest.mark.parametrize(
    "metadata",
    [
        {f"key{n}": "v" for n in range(17)},
        {"k" * 65: "v"},
        {"topic": "v" * 513},
        {"topic": 7},
        {"topic": {"nested": "no"}},
    ],
    ids=["17 pairs", "long key", "long value", "number", "object"],
)
async def test_metadata_outside_openais_rules_is_a_bad_request(
    client: AsyncOpenAI, metadata: Any
) -> None:
    with pytest.raises(BadRequestError) as raised:
        await client.conversations.create(metadata=metadata)
    assert error_of(raised)["param"].startswith("metadata")
    conversation = await created(client)
    with pytest.raises(BadRequestError):
        await client.conversations.update(conversation.id, metadata=metadata)


async def test_more_than_twenty_items_or_none_is_a_bad_request(client: AsyncOpenAI) -> None:
    with pytest.raises(BadRequestError) as raised:
        await client.conversations.create(items=[said(f"{n}") for n in range(21)])
    assert error_of(raised)["param"] == "items"
    conversation = await created(client)
    for items in ([said(f"{n}") for n in range(21)], []):
        with pytest.raises(BadRequestError) as raised:
            await client.conversations.items.create(conversation.id, items=items)
        assert error_of(raised)["param"] == "items"
    assert await every_item(client, conversation.id) == []


async def test_a_malformed_item_is_a_bad_request_naming_it_and_nothing_is_stored(
    client: AsyncOpenAI,
) -> None:
    conversation = await created(client)
    malformed: Any = {"type": "function_call", "name": "lookup"}
    with pytest.raises(BadRequestError) as raised:
        await client.conversations.items.create(conversation.id, items=[said("ok"), malformed])
    error = error_of(raised)
    assert error["param"] == "items[1]" and "call_id" in error["message"]
    assert await every_item(client, conversation.id) == []


@pytest.mark.parametrize(
    ("params", "param"),
    [({"limit": 0}, "limit"), ({"limit": 101}, "limit"), ({"order": "sideways"}, "order")],
)
async def test_a_bad_list_parameter_is_a_bad_request_naming_it(
    client: AsyncOpenAI, params: dict[str, Any], param: str
) -> None:
    conversation = await created(client)
    with pytest.raises(BadRequestError) as raised:
        await client.conversations.items.list(conversation.id, **params)
    assert error_of(raised)["param"] == param


async def test_an_unknown_after_is_not_found_and_an_unknown_parameter_a_bad_request(
    client: AsyncOpenAI, api: httpx.AsyncClient
) -> None:
    conversation = await created(client, items=[said("hi")])
    with pytest.raises(NotFoundError) as missing:
        await client.conversations.items.list(conversation.id, after="msg_never_stored")
    assert error_of(missing)["param"] == "after"
    empty = await api.get(f"/v1/conversations/{conversation.id}/items?after=")
    assert empty.status_code == 200, empty.text
    assert len(empty.json()["data"]) == 1, "an empty after lists from the start"
    with pytest.raises(BadRequestError) as raised:
        await client.conversations.items.list(conversation.id, extra_query={"befor": "x"})
    assert error_of(raised)["param"] == "befor"


async def test_an_unknown_body_field_is_a_bad_request(client: AsyncOpenAI) -> None:
    with pytest.raises(BadRequestError) as raised:
        await client.conversations.create(extra_body={"title": "no such field"})
    assert error_of(raised)["param"] == "title"


async def test_a_create_whose_items_cannot_be_stored_leaves_no_conversation(
    client: AsyncOpenAI, api: httpx.AsyncClient
) -> None:
    before = (await api.get("/v1/sessions", params={"limit": 1})).json()["sessions"]
    too_big = said("x" * (MAX_MESSAGE_BYTES + 1))
    with pytest.raises(APIStatusError) as raised:
        await client.conversations.create(items=[said("fine"), too_big])
    assert raised.value.status_code == 413
    assert error_of(raised)["code"] == "payload_too_large"
    after = (await api.get("/v1/sessions", params={"limit": 1})).json()["sessions"]
    assert after == before


async def test_a_body_over_the_limit_is_refused_in_openai_shape(client: AsyncOpenAI) -> None:
    conversation = await created(client)
    with pytest.raises(APIStatusError) as raised:
        await client.conversations.items.create(
            conversation.id, items=[said("x" * MAX_REQUEST_BYTES)]
        )
    assert raised.value.status_code == 413
    assert error_of(raised)["type"] == "invalid_request_error"


async def test_the_session_routes_keep_precis_error_shape(api: httpx.AsyncClient) -> None:
    missing = await api.get("/v1/sessions/conv_missing")
    assert missing.status_code == 404
    assert set(missing.json()) == {"error", "detail"}


# --- errors in words --------------------------------------------------------------------------


async def test_a_malformed_conversation_id_is_described_in_words(client: AsyncOpenAI) -> None:
    with pytest.raises(BadRequestError) as raised:
        await client.conversations.retrieve("conv_has space")
    error = error_of(raised)
    assert error["param"] == "conversation_id"
    assert "a conversation id is `conv_` then 1 to 123 characters" in error["message"]
    assert "pattern" not in error["message"]


async def test_a_truncated_body_is_not_valid_json_and_names_no_param(
    api: httpx.AsyncClient,
) -> None:
    answer = await api.post(
        "/v1/conversations", content=b'{"items": [', headers={"content-type": "application/json"}
    )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] is None
    assert "invalid JSON at character 11" in error["message"]


async def test_a_wrong_type_in_a_union_is_one_sentence_and_one_param(
    api: httpx.AsyncClient,
) -> None:
    answer = await api.post("/v1/responses", json={"model": "m", "input": 5})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "input"
    assert error["message"] == "body.input: must be a string or a list"


async def test_a_path_no_route_serves_answers_openais_shape_in_words(
    api: httpx.AsyncClient,
) -> None:
    answer = await api.get("/v1/conversations/a/b/c/d")
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert error["code"] == "not_found"
    assert "no route matches GET '/v1/conversations/a/b/c/d'" in error["message"]
