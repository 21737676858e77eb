"""Sessions: create, read, update, list with cursors, delete with everything they own.

Tests share the module's app, each on its own session ids; the list tests, which look at
every session, start from `empty_database`.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from api import store
from api.auth import DEVELOPMENT_TENANT
from api.db.models import Message, Summary, SummaryMessage
from api.schemas import SESSION_ID_PATTERN
from api.session_settings import SummaryOverrides
from tests.helpers import append, save_summaries, summary_draft, user


@pytest.fixture
async def empty_database(app: FastAPI) -> None:
    """For the tests that look at every session: start from none."""
    async with app.state.engine.begin() as connection:
        await connection.execute(text("DELETE FROM sessions"))  # cascades to the rest


async def create(api: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await api.post("/v1/sessions", json=body)


# --- create ---------------------------------------------------------------------------------


async def test_create_with_an_id_answers_201_with_an_empty_session(
    api: httpx.AsyncClient, sid: str
) -> None:
    answer = await create(api, id=sid, metadata={"user": "ü"})
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert (body["id"], body["metadata"], body["settings"]) == (sid, {"user": "ü"}, {})
    assert (body["message_count"], body["summary_count"], body["last_seq"]) == (0, 0, 0)


async def test_create_with_an_existing_id_answers_409(api: httpx.AsyncClient, sid: str) -> None:
    assert (await create(api, id=sid)).status_code == 201
    answer = await create(api, id=sid, metadata={"other": True})
    assert answer.status_code == 409
    assert set(answer.json()) == {"error", "detail"}
    assert (await api.get(f"/v1/sessions/{sid}")).json()["metadata"] == {}


async def test_create_without_an_id_generates_one_matching_the_pattern(
    api: httpx.AsyncClient,
) -> None:
    answer = await create(api)
    assert answer.status_code == 201
    generated = answer.json()["id"]
    assert re.fullmatch(SESSION_ID_PATTERN, generated)
    assert (await api.get(f"/v1/sessions/{generated}")).status_code == 200


async def test_generated_ids_are_unique(api: httpx.AsyncClient) -> None:
    ids = {(await create(api)).json()["id"] for _ in range(5)}
    assert len(ids) == 5


@pytest.mark.parametrize("bad_id", ["", "x" * 129, "has space", "slash/inside", "ü"])
async def test_create_with_a_bad_id_gets_422(api: httpx.AsyncClient, bad_id: str) -> None:
    answer = await create(api, id=bad_id)
    assert answer.status_code == 422
    assert "id" in answer.json()["detail"]


async def test_create_with_an_unknown_field_gets_422(api: httpx.AsyncClient, sid: str) -> None:
    answer = await create(api, id=sid, colour="blue")
    assert answer.status_code == 422
    assert "colour" in answer.json()["detail"]


async def test_create_with_settings_stores_them(api: httpx.AsyncClient, sid: str) -> None:
    await create(api, id=sid, settings={"message_limit": 10, "temperature": 0.5})
    settings = (await api.get(f"/v1/sessions/{sid}")).json()["settings"]
    assert settings == {"message_limit": 10, "temperature": 0.5}


# --- read -----------------------------------------------------------------------------------


async def test_get_shows_message_count_summary_count_and_last_seq(
    api: httpx.AsyncClient, sid: str, app_db: AsyncSession
) -> None:
    await append(api, sid, *(user(f"m{n}") for n in range(5)))
    await save_summaries(app_db, sid, summary_draft(1, 2))
    body = (await api.get(f"/v1/sessions/{sid}")).json()
    assert (body["message_count"], body["summary_count"], body["last_seq"]) == (5, 1, 5)


async def test_summary_count_counts_only_live_summaries(
    api: httpx.AsyncClient, sid: str, app_db: AsyncSession
) -> None:
    await append(api, sid, *(user(f"m{n}") for n in range(6)))
    first, second = await save_summaries(app_db, sid, summary_draft(1, 2), summary_draft(3, 4))
    session = await store.get_session(app_db, DEVELOPMENT_TENANT, sid)
    await store.save_summary(app_db, session.id, summary_draft(1, 4, absorbs=(first, second)))
    await app_db.commit()
    assert (await api.get(f"/v1/sessions/{sid}")).json()["summary_count"] == 1


async def test_get_shows_created_and_updated_times_with_a_time_zone(
    api: httpx.AsyncClient, sid: str
) -> None:
    await create(api, id=sid)
    body = (await api.get(f"/v1/sessions/{sid}")).json()
    for key in ("created_at", "updated_at"):
        assert re.search(r"(Z|[+-]\d\d:\d\d)$", body[key]), body[key]


async def test_get_an_unknown_session_answers_404(api: httpx.AsyncClient) -> None:
    answer = await api.get("/v1/sessions/nobody")
    assert answer.status_code == 404
    assert set(answer.json()) == {"error", "detail"}


# --- update ---------------------------------------------------------------------------------


async def test_patch_merges_metadata_as_a_json_merge_patch(
    api: httpx.AsyncClient, sid: str
) -> None:
    await create(api, id=sid, metadata={"old": 1, "gone": True, "nested": {"a": 1, "b": 2}})
    patch = {"metadata": {"new": [1, "二"], "gone": None, "nested": {"b": None, "c": 3}}}
    answer = await api.patch(f"/v1/sessions/{sid}", json=patch)
    assert answer.status_code == 200, answer.text
    expected = {"old": 1, "nested": {"a": 1, "c": 3}, "new": [1, "二"]}
    assert (await api.get(f"/v1/sessions/{sid}")).json()["metadata"] == expected
    cleared = await api.patch(f"/v1/sessions/{sid}", json={"metadata": None})
    assert cleared.json()["metadata"] == {}


async def test_patch_merges_settings_and_null_restores_the_server_default(
    api: httpx.AsyncClient, sid: str
) -> None:
    await create(api, id=sid, settings={"message_limit": 10, "keep_last_n": 2})
    defaults = (await create(api, id=f"{sid}-plain")).json()["effective_settings"]
    answer = await api.patch(
        f"/v1/sessions/{sid}", json={"settings": {"keep_last_n": None, "model": "local"}}
    )
    assert answer.status_code == 200, answer.text
    session = (await api.get(f"/v1/sessions/{sid}")).json()
    assert session["settings"] == {"message_limit": 10, "model": "local"}
    assert session["effective_settings"] == {**defaults, "message_limit": 10, "model": "local"}
    assert session["effective_settings"]["keep_last_n"] == defaults["keep_last_n"]


async def test_effective_settings_name_every_per_session_key(
    api: httpx.AsyncClient, sid: str
) -> None:
    session = (await create(api, id=sid, settings={"summary_limit": 7})).json()
    effective = session["effective_settings"]
    assert set(effective) == set(SummaryOverrides.model_fields)
    assert effective["summary_limit"] == 7
    listed = (await api.get("/v1/sessions")).json()["sessions"]
    assert next(s for s in listed if s["id"] == sid)["effective_settings"] == effective


async def test_patch_of_settings_leaves_metadata_unchanged(
    api: httpx.AsyncClient, sid: str
) -> None:
    await create(api, id=sid, metadata={"keep": "me"})
    await api.patch(f"/v1/sessions/{sid}", json={"settings": {"keep_last_n": 4}})
    assert (await api.get(f"/v1/sessions/{sid}")).json()["metadata"] == {"keep": "me"}


async def test_patch_of_metadata_leaves_settings_unchanged(
    api: httpx.AsyncClient, sid: str
) -> None:
    await create(api, id=sid, settings={"keep_last_n": 4})
    await api.patch(f"/v1/sessions/{sid}", json={"metadata": {"a": 1}})
    assert (await api.get(f"/v1/sessions/{sid}")).json()["settings"] == {"keep_last_n": 4}


async def test_patch_answers_the_updated_session(api: httpx.AsyncClient, sid: str) -> None:
    await create(api, id=sid)
    answer = await api.patch(f"/v1/sessions/{sid}", json={"metadata": {"a": 1}})
    assert answer.json()["metadata"] == {"a": 1}
    assert answer.json()["id"] == sid


BAD_SETTINGS = {
    "unknown key": {"colour": "blue"},
    "message_limit not a number": {"message_limit": "many"},
    "message_limit zero": {"message_limit": 0},
    "keep_last_n negative": {"keep_last_n": -1},
    "temperature out of range": {"temperature": 5},
    "bisect_enabled not a bool": {"bisect_enabled": "perhaps"},
    "model empty": {"model": ""},
    "api_base": {"api_base": "http://attacker.example"},
    "api_key": {"api_key": "sk-stolen"},
    "summary_api_base": {"summary_api_base": "http://attacker.example"},
}


@pytest.mark.parametrize("settings", BAD_SETTINGS.values(), ids=list(BAD_SETTINGS.keys()))
async def test_patch_with_bad_settings_gets_422_and_changes_nothing(
    api: httpx.AsyncClient, sid: str, settings: dict[str, Any]
) -> None:
    await create(api, id=sid, settings={"keep_last_n": 4})
    answer = await api.patch(f"/v1/sessions/{sid}", json={"settings": settings})
    assert answer.status_code == 422, answer.text
    assert next(iter(settings)) in answer.json()["detail"]
    assert (await api.get(f"/v1/sessions/{sid}")).json()["settings"] == {"keep_last_n": 4}


@pytest.mark.parametrize("key", ["api_base", "summary_api_base", "api_key"])
async def test_create_rejects_a_per_session_api_base_or_key(
    api: httpx.AsyncClient, sid: str, key: str
) -> None:
    answer = await create(api, id=sid, settings={key: "http://attacker.example"})
    assert answer.status_code == 422
    assert (await api.get(f"/v1/sessions/{sid}")).status_code == 404


async def test_patch_with_an_unknown_field_gets_422(api: httpx.AsyncClient, sid: str) -> None:
    await create(api, id=sid)
    answer = await api.patch(f"/v1/sessions/{sid}", json={"id": "renamed"})
    assert answer.status_code == 422


async def test_patch_of_an_unknown_session_answers_404(api: httpx.AsyncClient) -> None:
    answer = await api.patch("/v1/sessions/nobody", json={"metadata": {}})
    assert answer.status_code == 404


# --- list -----------------------------------------------------------------------------------

every_session = pytest.mark.usefixtures("empty_database")


@every_session
async def test_list_shows_sessions_newest_first(api: httpx.AsyncClient) -> None:
    for name in ("first", "second", "third"):
        await create(api, id=name)
    listed = (await api.get("/v1/sessions")).json()
    assert [s["id"] for s in listed["sessions"]] == ["third", "second", "first"]
    assert listed["next_cursor"] is None


@every_session
async def test_list_pagination_covers_every_session_exactly_once(api: httpx.AsyncClient) -> None:
    created = [f"s{n}" for n in range(7)]
    for name in created:
        await create(api, id=name)
    seen: list[str] = []
    pages = 0
    params: dict[str, Any] = {"limit": 3}
    while True:
        page = (await api.get("/v1/sessions", params=params)).json()
        pages += 1
        seen += [s["id"] for s in page["sessions"]]
        if page["next_cursor"] is None:
            break
        params = {"limit": 3, "cursor": page["next_cursor"]}
    assert seen == list(reversed(created))
    assert pages == 3


@every_session
async def test_list_with_an_exact_page_ends_without_a_cursor(api: httpx.AsyncClient) -> None:
    for name in ("a", "b", "c"):
        await create(api, id=name)
    first = (await api.get("/v1/sessions", params={"limit": 3})).json()
    assert len(first["sessions"]) == 3
    assert first["next_cursor"] is None


@every_session
async def test_list_of_no_sessions_is_empty(api: httpx.AsyncClient) -> None:
    assert (await api.get("/v1/sessions")).json() == {"sessions": [], "next_cursor": None}


async def test_list_shows_counts_per_session(api: httpx.AsyncClient, sid: str) -> None:
    await append(api, f"{sid}-busy", *(user(f"m{n}") for n in range(3)))
    await create(api, id=f"{sid}-idle")
    listed = (await api.get("/v1/sessions", params={"limit": 1000})).json()["sessions"]
    counts = {s["id"]: s["message_count"] for s in listed}
    assert (counts[f"{sid}-busy"], counts[f"{sid}-idle"]) == (3, 0)


# --- delete ---------------------------------------------------------------------------------


async def test_delete_answers_204_and_the_session_is_gone(api: httpx.AsyncClient, sid: str) -> None:
    await append(api, sid, *(user(f"m{n}") for n in range(2)))
    answer = await api.delete(f"/v1/sessions/{sid}")
    assert answer.status_code == 204
    assert answer.content == b""
    assert (await api.get(f"/v1/sessions/{sid}")).status_code == 404


async def test_delete_removes_messages_summaries_and_links(
    api: httpx.AsyncClient, sid: str, app_db: AsyncSession
) -> None:
    await append(api, sid, *(user(f"m{n}") for n in range(4)))
    (summary_id,) = await save_summaries(app_db, sid, summary_draft(1, 2))
    session_key = (await store.get_session(app_db, DEVELOPMENT_TENANT, sid)).id
    await app_db.commit()
    assert (await api.delete(f"/v1/sessions/{sid}")).status_code == 204
    assert await rows(app_db, session_key, summary_id) == (0, 0, 0)


async def test_delete_leaves_other_sessions_untouched(
    api: httpx.AsyncClient, sid: str, app_db: AsyncSession
) -> None:
    await append(api, f"{sid}-doomed", *(user(f"m{n}") for n in range(2)))
    await append(api, f"{sid}-kept", *(user(f"m{n}") for n in range(3)))
    (summary_id,) = await save_summaries(app_db, f"{sid}-kept", summary_draft(1, 2))
    kept_id = (await store.get_session(app_db, DEVELOPMENT_TENANT, f"{sid}-kept")).id
    await app_db.commit()
    assert (await api.delete(f"/v1/sessions/{sid}-doomed")).status_code == 204
    assert await rows(app_db, kept_id, summary_id) == (3, 1, 2)


async def rows(app_db: AsyncSession, session_key: int, summary_id: int) -> tuple[int, int, int]:
    """Stored messages and summaries of a session, and links of one summary."""
    counted = (
        await app_db.scalar(select(func.count()).where(Message.session_id == session_key)),
        await app_db.scalar(select(func.count()).where(Summary.session_id == session_key)),
        await app_db.scalar(select(func.count()).where(SummaryMessage.summary_id == summary_id)),
    )
    await app_db.commit()
    return (counted[0] or 0, counted[1] or 0, counted[2] or 0)


async def test_a_second_delete_answers_404(api: httpx.AsyncClient, sid: str) -> None:
    await create(api, id=sid)
    assert (await api.delete(f"/v1/sessions/{sid}")).status_code == 204
    second = await api.delete(f"/v1/sessions/{sid}")
    assert second.status_code == 404
    assert set(second.json()) == {"error", "detail"}


async def test_append_after_delete_starts_a_new_session_at_seq_1(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append(api, sid, *(user(f"m{n}") for n in range(3)))
    await api.delete(f"/v1/sessions/{sid}")
    answer = await api.post(
        f"/v1/sessions/{sid}/messages", json={"messages": [{"role": "user", "content": "again"}]}
    )
    assert answer.json()["messages"][0]["seq"] == 1
    listed = (await api.get(f"/v1/sessions/{sid}/messages")).json()["messages"]
    assert [m["content"] for m in listed] == ["again"]
