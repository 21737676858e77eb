"""The Agents SDK's own `OpenAIConversationsSession` against Precis's Conversations API, on
both databases: the one-line switch is `AsyncOpenAI(base_url=<precis>/v1, api_key=<key>)`.

The session speaks only the official `openai` client: items create (20 a request), items list
(auto-paginated with `after`, ascending without a limit, descending with one), item delete
(its `pop_item`) and conversation create/delete. Items come back as added, with ids from the
server where they carried none.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from agents.items import TResponseInputItem
from agents.memory import OpenAIConversationsSession
from openai import AsyncOpenAI, NotFoundError

from tests.client.keyed_server import OTHER_TENANT_KEY, TENANT_KEY, KeyedService
from tests.helpers import said, text_of

REQUEST_TIMEOUT_SECONDS = 30.0
"""Per request of the SDK's client: generous for a loaded CI machine, short of pytest's patience."""

ITEMS_PER_REQUEST = 20
"""What the SDK sends in one items create (its `_MAX_ITEMS_PER_REQUEST`), also the default page
size of an items list: more items than this cross both boundaries."""

QUESTION: dict[str, Any] = {
    "type": "message",
    "role": "user",
    "content": [{"type": "input_text", "text": "Where is order 1234? Zürich → 東京 👩🏽‍🔬"}],
}
CALL: dict[str, Any] = {
    "type": "function_call",
    "id": "fc_order_status_1234",
    "call_id": "call_1234",
    "name": "order_status",
    "arguments": '{"order": "1234"}',
    "status": "completed",
}
CALL_OUTPUT: dict[str, Any] = {
    "type": "function_call_output",
    "call_id": "call_1234",
    "output": "Order 1234: shipped on Monday",
}
ANSWER: dict[str, Any] = {
    "type": "message",
    "id": "msg_answer_1234",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "It shipped on Monday.", "annotations": []}],
}
TOOL_TURN = [QUESTION, CALL, CALL_OUTPUT, ANSWER]
"""One turn of a tool-using agent, as the SDK stores it: two items with ids of their own."""


def as_input(items: list[dict[str, Any]]) -> list[TResponseInputItem]:
    return cast(list[TResponseInputItem], items)


def as_added(back: TResponseInputItem, added: dict[str, Any]) -> dict[str, Any]:
    """The fields of `added` as they came `back`: the server may add fields (`id`, `status`),
    never change one."""
    returned = cast(dict[str, Any], back)
    return {key: returned.get(key) for key in added}


def ids_of(items: list[TResponseInputItem]) -> list[Any]:
    return [cast(dict[str, Any], item).get("id") for item in items]


@pytest.fixture(scope="module")
def precis_url(keyed_service: KeyedService) -> str:
    """A Precis server on this backend's database, requiring keys (shared by the SDK
    modules)."""
    return keyed_service.url


@pytest.fixture
async def openai_client(precis_url: str) -> AsyncIterator[AsyncOpenAI]:
    """The official client pointed at Precis: the one-line switch."""
    client = AsyncOpenAI(
        base_url=f"{precis_url}/v1", api_key=TENANT_KEY, timeout=REQUEST_TIMEOUT_SECONDS
    )
    yield client
    await client.close()


@pytest.fixture
def session(openai_client: AsyncOpenAI) -> OpenAIConversationsSession:
    return OpenAIConversationsSession(openai_client=openai_client)


async def test_the_session_starts_a_conversation_on_first_use(
    session: OpenAIConversationsSession, openai_client: AsyncOpenAI
) -> None:
    assert await session.get_items() == []
    conversation = await openai_client.conversations.retrieve(session.session_id)
    assert conversation.id == session.session_id
    assert conversation.id.startswith("conv_")
    assert conversation.object == "conversation"


async def test_items_come_back_as_added_with_ids_from_the_server(
    session: OpenAIConversationsSession,
) -> None:
    await session.add_items(as_input(TOOL_TURN))
    back = await session.get_items()
    assert [as_added(item, added) for item, added in zip(back, TOOL_TURN, strict=True)] == (
        TOOL_TURN
    )
    question_id, call_id, output_id, answer_id = ids_of(back)
    assert isinstance(question_id, str) and question_id.startswith("msg_")
    assert (call_id, answer_id) == (CALL["id"], ANSWER["id"])  # an item's own id is kept
    assert isinstance(output_id, str) and output_id
    assert len({question_id, call_id, output_id, answer_id}) == len(TOOL_TURN)


async def test_item_ids_are_stable_across_reads(session: OpenAIConversationsSession) -> None:
    await session.add_items(as_input([said("first"), said("second")]))
    first_read = ids_of(await session.get_items())
    assert ids_of(await session.get_items()) == first_read
    assert ids_of(await session.get_items(limit=1)) == first_read[-1:]


async def test_a_plain_chat_message_comes_back_as_a_message_item(
    session: OpenAIConversationsSession,
) -> None:
    """What the runner stores for a string input: `{"role": "user", "content": "..."}`."""
    await session.add_items(as_input([{"role": "user", "content": "hello there"}]))
    (back,) = await session.get_items()
    returned = cast(dict[str, Any], back)
    assert (returned["type"], returned["role"]) == ("message", "user")
    assert text_of(back) == "hello there"


async def test_get_items_with_a_limit_answers_the_newest_in_order(
    session: OpenAIConversationsSession,
) -> None:
    await session.add_items(as_input([said(f"item {n}") for n in range(5)]))
    assert [text_of(item) for item in await session.get_items(limit=2)] == ["item 3", "item 4"]
    assert [text_of(item) for item in await session.get_items(limit=9)] == [
        f"item {n}" for n in range(5)
    ]
    assert await session.get_items(limit=0) == []


async def test_session_settings_limit_applies_without_an_explicit_limit(
    openai_client: AsyncOpenAI,
) -> None:
    session = OpenAIConversationsSession(openai_client=openai_client, session_settings={"limit": 2})
    await session.add_items(as_input([said(f"item {n}") for n in range(4)]))
    assert [text_of(item) for item in await session.get_items()] == ["item 2", "item 3"]


async def test_more_items_than_a_page_round_trip_in_order_both_ways(
    session: OpenAIConversationsSession,
) -> None:
    """45 items: three creates of at most 20, then pages of 20 ascending (no limit) and
    descending (a limit past the first page)."""
    count = 2 * ITEMS_PER_REQUEST + 5
    added = [said(f"item {n}") for n in range(count)]
    await session.add_items(as_input(added))
    back = await session.get_items()
    assert [as_added(item, expected) for item, expected in zip(back, added, strict=True)] == added
    assert len(set(ids_of(back))) == count
    newest = await session.get_items(limit=ITEMS_PER_REQUEST + 5)
    assert [text_of(item) for item in newest] == [
        f"item {n}" for n in range(count - ITEMS_PER_REQUEST - 5, count)
    ]
    assert ids_of(newest) == ids_of(back)[-(ITEMS_PER_REQUEST + 5) :]


async def test_pop_item_removes_and_returns_the_newest(
    session: OpenAIConversationsSession,
) -> None:
    await session.add_items(as_input(TOOL_TURN))
    popped = await session.pop_item()
    assert popped is not None
    assert as_added(popped, ANSWER) == ANSWER
    kept = await session.get_items()
    assert [as_added(item, added) for item, added in zip(kept, TOOL_TURN[:-1], strict=True)] == (
        TOOL_TURN[:-1]
    )
    popped_output = await session.pop_item()
    assert popped_output is not None
    assert as_added(popped_output, CALL_OUTPUT) == CALL_OUTPUT


async def test_pop_item_empties_the_conversation_then_answers_none(
    session: OpenAIConversationsSession,
) -> None:
    await session.add_items(as_input([said("only")]))
    popped = await session.pop_item()
    assert popped is not None and text_of(popped) == "only"
    assert await session.pop_item() is None
    assert await session.get_items() == []


async def test_clear_session_deletes_the_conversation_and_forgets_its_id(
    session: OpenAIConversationsSession, openai_client: AsyncOpenAI
) -> None:
    await session.add_items(as_input([said("to be cleared")]))
    cleared_id = session.session_id
    await session.clear_session()
    with pytest.raises(NotFoundError):
        await openai_client.conversations.retrieve(cleared_id)
    with pytest.raises(ValueError, match="Session ID not yet available"):
        _ = session.session_id
    assert await session.get_items() == []  # a new, empty conversation
    assert session.session_id != cleared_id


async def test_a_session_on_an_existing_conversation_reads_its_initial_items(
    openai_client: AsyncOpenAI,
) -> None:
    conversation = await openai_client.conversations.create(
        items=cast(Any, [QUESTION]), metadata={"topic": "orders"}
    )
    session = OpenAIConversationsSession(
        conversation_id=conversation.id, openai_client=openai_client
    )
    await session.add_items(as_input([ANSWER]))
    back = await session.get_items()
    assert [
        as_added(item, added) for item, added in zip(back, [QUESTION, ANSWER], strict=True)
    ] == [
        QUESTION,
        ANSWER,
    ]


async def test_another_tenant_cannot_read_the_conversation(
    session: OpenAIConversationsSession, precis_url: str
) -> None:
    await session.add_items(as_input([said("private")]))
    async with AsyncOpenAI(
        base_url=f"{precis_url}/v1", api_key=OTHER_TENANT_KEY, timeout=REQUEST_TIMEOUT_SECONDS
    ) as other_client:
        stranger = OpenAIConversationsSession(
            conversation_id=session.session_id, openai_client=other_client
        )
        with pytest.raises(NotFoundError):
            await stranger.get_items()
    assert [text_of(item) for item in await session.get_items()] == ["private"]
