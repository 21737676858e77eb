"""`PrecisSession` against a real server on both databases: the Agents SDK session protocol
and its edge cases."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest
from agents.items import TResponseInputItem
from agents.memory import Session, SessionSettings
from agents.run_internal.session_persistence import rewind_session_items
from precis_client import PrecisClient, SessionNotFound
from precis_client.agents import PrecisSession

from tests.helpers import contents, easy_message


@pytest.fixture
def session(service_url: str, sid: str) -> PrecisSession:
    return PrecisSession(sid, base_url=service_url)


def test_it_is_an_agents_sdk_session(session: PrecisSession, sid: str) -> None:
    typed: Session = session  # mypy checks the protocol; isinstance checks it at run time
    assert isinstance(typed, Session)
    assert typed.session_id == sid


async def test_items_come_back_as_added_in_order(session: PrecisSession) -> None:
    await session.add_items([easy_message("one"), easy_message("two", "assistant")])
    await session.add_items([easy_message("three")])
    assert await session.get_items() == [
        easy_message("one"),
        easy_message("two", "assistant"),
        easy_message("three"),
    ]


async def test_get_items_of_a_missing_session_is_empty(session: PrecisSession) -> None:
    assert await session.get_items() == []


async def test_get_items_limit_counts_from_the_newest(session: PrecisSession) -> None:
    await session.add_items([easy_message(f"item {n}") for n in range(5)])
    assert contents(await session.get_items(limit=2)) == ["item 3", "item 4"]
    assert contents(await session.get_items(limit=9)) == [f"item {n}" for n in range(5)]


async def test_get_items_limit_zero_is_empty(session: PrecisSession) -> None:
    await session.add_items([easy_message("one"), easy_message("two")])
    assert await session.get_items(limit=0) == []


async def test_session_settings_limit_applies_without_an_explicit_limit(
    service_url: str, sid: str
) -> None:
    session = PrecisSession(sid, base_url=service_url, session_settings=SessionSettings(limit=1))
    await session.add_items([easy_message("old"), easy_message("new")])
    assert contents(await session.get_items()) == ["new"]
    assert contents(await session.get_items(limit=2)) == ["old", "new"]


async def test_items_are_stored_in_a_responses_session(
    session: PrecisSession, precis: PrecisClient, sid: str
) -> None:
    await session.add_items([easy_message("hi")])
    assert precis.get_session(sid)["format"] == "responses"


async def test_pop_item_returns_the_newest_and_removes_it(session: PrecisSession) -> None:
    await session.add_items([easy_message("keep"), easy_message("drop")])
    assert await session.pop_item() == easy_message("drop")
    assert await session.get_items() == [easy_message("keep")]


async def test_pop_item_of_an_empty_session_is_none(
    session: PrecisSession, precis: PrecisClient, sid: str
) -> None:
    precis.create_session(sid, format="responses")
    assert await session.pop_item() is None


async def test_pop_item_of_a_missing_session_is_none(session: PrecisSession) -> None:
    assert await session.pop_item() is None


async def test_the_sdk_s_rewind_pops_a_tool_exchange_item_by_item(session: PrecisSession) -> None:
    """The runner's own rewind (a retried turn) pops the items it added, newest first, and
    compares each with what it added: every pop must give back exactly one of them."""
    turn = [
        easy_message("weather in Łódź?"),
        cast(
            TResponseInputItem,
            {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
        ),
        cast(
            TResponseInputItem, {"type": "function_call_output", "call_id": "c1", "output": "rain"}
        ),
    ]
    await session.add_items([easy_message("earlier"), *turn])
    await rewind_session_items(session, turn)
    assert await session.get_items() == [easy_message("earlier")]
    assert await session.pop_item() == easy_message("earlier")
    assert await session.pop_item() is None


async def test_two_sessions_do_not_see_each_others_items(service_url: str, sid: str) -> None:
    first = PrecisSession(f"{sid}-1", base_url=service_url)
    second = PrecisSession(f"{sid}-2", base_url=service_url)
    await first.add_items([easy_message("for the first")])
    await second.add_items([easy_message("for the second")])
    assert await first.pop_item() == easy_message("for the first")
    assert await second.get_items() == [easy_message("for the second")]
    assert await first.get_items() == []


async def test_non_ascii_items_come_back_exactly(session: PrecisSession) -> None:
    item = cast(
        TResponseInputItem,
        {
            "type": "message",
            "role": "user",
            "content": [
                {
                    "type": "input_text",
                    "text": "Zürich → 東京, שלום, e\u0301, 👩🏽‍🔬, \\n not a newline",
                }
            ],
        },
    )
    await session.add_items([item])
    (back,) = await session.get_items()
    assert back == item
    assert list(back) == ["type", "role", "content"]


async def test_concurrent_add_items_store_every_item_once(
    session: PrecisSession, precis: PrecisClient, sid: str
) -> None:
    await asyncio.gather(*(session.add_items([easy_message(f"concurrent {n}")]) for n in range(10)))
    stored = precis.list_messages(sid)["messages"]
    assert sorted(str(m["content"]) for m in stored) == sorted(f"concurrent {n}" for n in range(10))
    assert [m["seq"] for m in stored] == list(range(1, 11))
    assert len(await session.get_items()) == 10


async def test_clear_session_deletes_it(
    session: PrecisSession, precis: PrecisClient, sid: str
) -> None:
    await session.add_items([easy_message("one")])
    await session.clear_session()
    assert await session.get_items() == []
    with pytest.raises(SessionNotFound):
        precis.get_session(sid)


async def test_clear_session_of_a_missing_session_is_fine(session: PrecisSession) -> None:
    await session.clear_session()
    assert await session.get_items() == []


async def test_max_tokens_fits_the_items_to_the_budget(service_url: str, sid: str) -> None:
    session = PrecisSession(sid, base_url=service_url, max_tokens=100)
    words = " ".join(f"word{n}" for n in range(150))
    await session.add_items(
        [easy_message(words), easy_message(words, "assistant"), easy_message("newest")]
    )
    items = await session.get_items()
    assert items[0] == {
        "type": "message",
        "role": "developer",
        "content": "[Earlier messages truncated to manage context length]",
    }
    assert items[-1] == easy_message("newest")
    assert len(await PrecisSession(sid, base_url=service_url).get_items()) == 3


def test_one_session_object_serves_successive_event_loops(service_url: str, sid: str) -> None:
    """As under `Runner.run_sync`, which runs each call in a loop of its own."""
    session = PrecisSession(sid, base_url=service_url)
    asyncio.run(session.add_items([easy_message("first loop")]))
    asyncio.run(session.add_items([easy_message("second loop")]))
    assert contents(asyncio.run(session.get_items())) == ["first loop", "second loop"]
