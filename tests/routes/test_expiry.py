"""Session expiry through the REST API: `expires_at` on create and patch, and an expired session
gone for clients from the moment it expires, on every route that finds a session, before the
retention sweep deletes it (docs/lifecycle.md, "Retention")."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.db.models import Message, Session
from tests.conftest import QUIET
from tests.helpers import (
    append,
    append_items,
    assert_error,
    assistant,
    save_summaries,
    summary_draft,
    user,
)

FUTURE = "2999-01-01T00:00:00+02:00"
"""An expiry no test reaches, with an offset: it is answered in UTC."""


@pytest.fixture(scope="module")
def module_settings() -> dict[str, Any]:
    """No background work; one model allowed, at an address nothing answers: a Responses turn
    that got as far as calling it would fail with 502, not 404."""
    return {
        **QUIET,
        "model_allowed": "openai/fake",
        "model_context_tokens": "openai/fake=3000",
        "model_api_base": "http://127.0.0.1:9/v1",
    }


async def expire(sessionmaker: async_sessionmaker[AsyncSession], sid: str, **values: Any) -> None:
    """Set the session's `expires_at` (by default a second ago) or `updated_at`, in the store."""
    values = values or {"expires_at": datetime.now(UTC) - timedelta(seconds=1)}
    async with sessionmaker() as db:
        await db.execute(update(Session).where(Session.external_id == sid).values(**values))
        await db.commit()


async def stored_row(
    sessionmaker: async_sessionmaker[AsyncSession], sid: str
) -> tuple[int, int] | None:
    """The session's `last_seq` and its stored messages, read past any expiry; None if absent."""
    async with sessionmaker() as db:
        key = await db.scalar(select(Session.id).where(Session.external_id == sid))
        if key is None:
            return None
        last_seq = await db.scalar(select(Session.last_seq).where(Session.id == key))
        count = await db.scalar(
            select(func.count()).select_from(Message).where(Message.session_id == key)
        )
        return int(last_seq or 0), int(count or 0)


def moment(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# --- expires_at on create and patch -----------------------------------------------------------


async def test_create_takes_expires_at_with_a_time_zone_and_answers_it_in_utc(
    api: httpx.AsyncClient, sid: str
) -> None:
    created = await api.post("/v1/sessions", json={"id": sid, "expires_at": FUTURE})
    assert created.status_code == 201, created.text
    assert moment(created.json()["expires_at"]) == moment(FUTURE)
    assert moment(created.json()["expires_at"]).utcoffset() == timedelta(0)
    read = (await api.get(f"/v1/sessions/{sid}")).json()
    assert moment(read["expires_at"]) == moment(FUTURE)


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("2999-01-01T00:00:00", "timezone"),
        ("2000-01-01T00:00:00Z", "future"),
        (32_503_680_000, "RFC 3339"),
        ("next tuesday", "expires_at"),
    ],
    ids=["naive", "past", "a number", "not a date"],
)
async def test_a_bad_expires_at_on_create_is_422_naming_it_and_nothing_is_stored(
    api: httpx.AsyncClient, sid: str, given: Any, says: str
) -> None:
    refused = await api.post("/v1/sessions", json={"id": sid, "expires_at": given})
    assert_error(refused, 422, "expires_at", says)
    assert (await api.get(f"/v1/sessions/{sid}")).status_code == 404


async def test_patch_sets_and_clears_expires_at(api: httpx.AsyncClient, sid: str) -> None:
    assert (await api.post("/v1/sessions", json={"id": sid})).status_code == 201
    patched = await api.patch(f"/v1/sessions/{sid}", json={"expires_at": FUTURE})
    assert patched.status_code == 200, patched.text
    assert moment(patched.json()["expires_at"]) == moment(FUTURE)
    kept = await api.patch(f"/v1/sessions/{sid}", json={"metadata": {"k": "v"}})
    assert moment(kept.json()["expires_at"]) == moment(FUTURE)  # absent: unchanged
    cleared = await api.patch(f"/v1/sessions/{sid}", json={"expires_at": None})
    assert cleared.status_code == 200, cleared.text
    assert cleared.json()["expires_at"] is None


async def test_a_past_or_naive_expires_at_on_patch_is_422_and_changes_nothing(
    api: httpx.AsyncClient, sid: str
) -> None:
    assert (await api.post("/v1/sessions", json={"id": sid, "expires_at": FUTURE})).is_success
    for given, says in (("2000-01-01T00:00:00Z", "future"), ("2999-01-01T00:00:00", "timezone")):
        refused = await api.patch(
            f"/v1/sessions/{sid}", json={"expires_at": given, "metadata": {"k": 1}}
        )
        assert_error(refused, 422, "expires_at", says)
    read = (await api.get(f"/v1/sessions/{sid}")).json()
    assert (moment(read["expires_at"]), read["metadata"]) == (moment(FUTURE), {})


# --- gone from the moment it expires ----------------------------------------------------------


async def test_a_session_expiring_a_moment_ahead_is_404_once_that_moment_passes(
    api: httpx.AsyncClient, sid: str
) -> None:
    soon = datetime.now(UTC) + timedelta(seconds=2)
    created = await api.post("/v1/sessions", json={"id": sid, "expires_at": soon.isoformat()})
    assert created.status_code == 201, created.text
    assert (await api.get(f"/v1/sessions/{sid}")).status_code == 200
    await asyncio.sleep(max(0.0, (soon - datetime.now(UTC)).total_seconds()) + 0.1)
    assert_error(await api.get(f"/v1/sessions/{sid}"), 404, sid)


async def test_every_route_of_an_expired_session_answers_404(
    api: httpx.AsyncClient, app_sessionmaker: async_sessionmaker[AsyncSession], sid: str
) -> None:
    stored = (await append(api, sid, user("one"), assistant("two"), user("three")))["messages"]
    async with app_sessionmaker() as db:
        [summary_id] = await save_summaries(db, sid, summary_draft(1, 2))
    await expire(app_sessionmaker, sid)
    base = f"/v1/sessions/{sid}"
    answers = {
        "get": await api.get(base),
        "patch": await api.patch(base, json={"metadata": {"k": 1}}),
        "patch expiry away": await api.patch(base, json={"expires_at": None}),
        "messages": await api.get(f"{base}/messages"),
        "remove": await api.delete(f"{base}/messages/{stored[0]['id']}"),
        "pop": await api.post(f"{base}/messages/pop"),
        "history": await api.get(f"{base}/history"),
        "compact": await api.post(f"{base}/compact", json={"trigger": "manual"}),
        "summaries": await api.get(f"{base}/summaries"),
        "a summary": await api.get(f"/v1/summaries/{summary_id}"),
        "delete": await api.delete(base),
    }
    assert {route: answer.status_code for route, answer in answers.items()} == dict.fromkeys(
        answers, 404
    )
    assert await stored_row(app_sessionmaker, sid) == (3, 3)  # untouched: the sweep's to delete


async def test_an_expired_session_is_left_out_of_the_list(
    api: httpx.AsyncClient, app_sessionmaker: async_sessionmaker[AsyncSession], sid: str
) -> None:
    for suffix in ("live", "gone"):
        assert (await api.post("/v1/sessions", json={"id": f"{sid}-{suffix}"})).is_success
    await expire(app_sessionmaker, f"{sid}-gone")
    listed = (await api.get("/v1/sessions", params={"limit": 200})).json()["sessions"]
    ids = {session["id"] for session in listed}
    assert f"{sid}-live" in ids
    assert f"{sid}-gone" not in ids


async def test_an_append_to_an_expired_session_is_404_and_stores_nothing(
    api: httpx.AsyncClient, app_sessionmaker: async_sessionmaker[AsyncSession], sid: str
) -> None:
    await append(api, sid, user("one", client_id="c1"))
    await expire(app_sessionmaker, sid)
    plain = await api.post(f"/v1/sessions/{sid}/messages", json={"messages": [user("two")]})
    assert_error(plain, 404, sid)
    keyed = await api.post(
        f"/v1/sessions/{sid}/messages", json={"messages": [user("other", client_id="c1")]}
    )
    assert_error(keyed, 404, sid)  # not 409: the stored message is gone for clients
    items = await api.post(
        f"/v1/sessions/{sid}/messages", json={"items": [{"item": {"role": "user", "content": "x"}}]}
    )
    assert_error(items, 404, sid)  # not the format's 409 either
    assert await stored_row(app_sessionmaker, sid) == (1, 1)


async def test_a_create_with_an_expired_sessions_id_is_409_until_the_sweep(
    api: httpx.AsyncClient, app_sessionmaker: async_sessionmaker[AsyncSession], sid: str
) -> None:
    assert (await api.post("/v1/sessions", json={"id": sid})).is_success
    await expire(app_sessionmaker, sid)
    assert_error(await api.post("/v1/sessions", json={"id": sid}), 409, sid, "has expired")
    assert (await api.post("/v1/sessions", json={"id": f"{sid}-live"})).status_code == 201
    assert_error(await api.post("/v1/sessions", json={"id": f"{sid}-live"}), 409, "already exists")


async def test_an_expired_conversation_is_404_on_every_conversation_route(
    api: httpx.AsyncClient, app_sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    created = await api.post("/v1/conversations", json={"items": [user("hello")]})
    assert created.status_code == 200, created.text
    conversation = created.json()["id"]
    item_id = (await api.get(f"/v1/conversations/{conversation}/items")).json()["first_id"]
    await expire(app_sessionmaker, conversation)
    base = f"/v1/conversations/{conversation}"
    answers = {
        "get": await api.get(base),
        "update": await api.post(base, json={"metadata": {"k": "v"}}),
        "items": await api.get(f"{base}/items"),
        "add items": await api.post(f"{base}/items", json={"items": [user("more")]}),
        "an item": await api.get(f"{base}/items/{item_id}"),
        "delete an item": await api.delete(f"{base}/items/{item_id}"),
        "delete": await api.delete(base),
        "a turn": await api.post(
            "/v1/responses",
            json={"model": "openai/fake", "input": "hi", "conversation": conversation},
        ),
    }
    assert {route: answer.status_code for route, answer in answers.items()} == dict.fromkeys(
        answers, 404
    )
    assert await stored_row(app_sessionmaker, conversation) == (1, 1)


async def test_items_of_an_expired_responses_session_are_not_appended(
    api: httpx.AsyncClient, app_sessionmaker: async_sessionmaker[AsyncSession], sid: str
) -> None:
    await append_items(api, sid, {"role": "user", "content": "one"})
    await expire(app_sessionmaker, sid)
    refused = await api.post(
        f"/v1/sessions/{sid}/messages", json={"items": [{"item": {"role": "user", "content": "x"}}]}
    )
    assert_error(refused, 404, sid)
    assert await stored_row(app_sessionmaker, sid) == (1, 1)


# --- idle expiry ------------------------------------------------------------------------------

IDLE_DAYS = 2.0


@pytest.mark.parametrize("settings_overrides", [{**QUIET, "session_idle_ttl_days": IDLE_DAYS}])
async def test_a_session_idle_past_the_ttl_is_404_everywhere_and_takes_no_append(
    client: httpx.AsyncClient, sessionmaker: async_sessionmaker[AsyncSession], sid: str
) -> None:
    await append(client, sid, user("one"))
    await append(client, f"{sid}-busy", user("one"))
    idle_since = datetime.now(UTC) - timedelta(days=IDLE_DAYS, minutes=1)
    await expire(sessionmaker, sid, updated_at=idle_since)
    assert_error(await client.get(f"/v1/sessions/{sid}"), 404, sid)
    assert (await client.get(f"/v1/sessions/{sid}/history")).status_code == 404
    refused = await client.post(f"/v1/sessions/{sid}/messages", json={"messages": [user("two")]})
    assert_error(refused, 404, sid)
    assert await stored_row(sessionmaker, sid) == (1, 1)
    listed = {s["id"] for s in (await client.get("/v1/sessions")).json()["sessions"]}
    assert f"{sid}-busy" in listed
    assert sid not in listed


@pytest.mark.parametrize("settings_overrides", [{**QUIET, "session_idle_ttl_days": IDLE_DAYS}])
async def test_every_append_and_patch_keeps_a_session_from_idling_out(
    client: httpx.AsyncClient, sessionmaker: async_sessionmaker[AsyncSession], sid: str
) -> None:
    await append(client, sid, user("one"))
    almost_idle = datetime.now(UTC) - timedelta(days=IDLE_DAYS, minutes=-1)
    await expire(sessionmaker, sid, updated_at=almost_idle)
    await append(client, sid, user("two"))
    after_append = moment((await client.get(f"/v1/sessions/{sid}")).json()["updated_at"])
    assert after_append > datetime.now(UTC) - timedelta(minutes=1)
    await expire(sessionmaker, sid, updated_at=almost_idle)
    assert (await client.patch(f"/v1/sessions/{sid}", json={"metadata": {"k": 1}})).is_success
    after_patch = moment((await client.get(f"/v1/sessions/{sid}")).json()["updated_at"])
    assert after_patch > datetime.now(UTC) - timedelta(minutes=1)


async def test_without_an_idle_ttl_an_old_session_stays(
    api: httpx.AsyncClient, app_sessionmaker: async_sessionmaker[AsyncSession], sid: str
) -> None:
    await append(api, sid, user("one"))
    await expire(app_sessionmaker, sid, updated_at=datetime(1999, 1, 1, tzinfo=UTC))
    assert (await api.get(f"/v1/sessions/{sid}")).status_code == 200
    assert (await api.get(f"/v1/sessions/{sid}/history")).status_code == 200
    assert (await append(api, sid, user("two")))["messages"][0]["seq"] == 2
