"""Appending messages: contiguous seqs, idempotency per client_id, concurrency, token counts.

Tests share the module's app (`api`, `app_db` from conftest), each on its own session ids.
"""

from __future__ import annotations

import asyncio
import base64
import sqlite3
import struct
import zlib
from datetime import datetime
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api import store
from api.append import AppendOutcome, new_messages, postgresql, sqlite, store_batch
from api.db.models import Message, Session
from summarizer.text import OFFLOAD_CHARS
from summarizer.tokens import IMAGE_UNKNOWN_SIZE_TOKENS, count_message
from tests.helpers import append, user

CONCURRENT_TASKS = 8
APPENDS_PER_TASK = 50
HTTP_APPENDS_PER_TASK = 5


async def append_messages(
    api: httpx.AsyncClient, session_id: str, *messages: dict[str, Any]
) -> list[dict[str, Any]]:
    """The messages the append answered it stored."""
    stored: list[dict[str, Any]] = (await append(api, session_id, *messages))["messages"]
    return stored


async def stored_messages(api: httpx.AsyncClient, session_id: str) -> list[dict[str, Any]]:
    answer = await api.get(f"/v1/sessions/{session_id}/messages", params={"limit": 1000})
    assert answer.status_code == 200, answer.text
    messages: list[dict[str, Any]] = answer.json()["messages"]
    return messages


def new_message(content: str, client_id: str | None = None) -> store.NewMessage:
    return store.NewMessage(
        role="user",
        content=content,
        content_parts=None,
        name=None,
        tool_calls=None,
        tool_call_id=None,
        metadata=None,
        client_id=client_id,
        token_count=count_message({"role": "user", "content": content}),
    )


# --- HTTP: seqs and session creation --------------------------------------------------------


async def test_seqs_are_contiguous_across_batches(api: httpx.AsyncClient, sid: str) -> None:
    seqs: list[int] = []
    for size in (3, 1, 4):
        batch = await append_messages(api, sid, *(user(f"m{n}") for n in range(size)))
        seqs += [m["seq"] for m in batch]
    assert seqs == list(range(1, 9))


async def test_append_answers_201_with_a_summarization_status(
    api: httpx.AsyncClient, sid: str
) -> None:
    answer = await api.post(f"/v1/sessions/{sid}/messages", json={"messages": [user("hi")]})
    assert answer.status_code == 201
    assert answer.json()["summarization"] == {"scheduled": False, "reason": None}


async def test_append_creates_a_missing_session(api: httpx.AsyncClient, sid: str) -> None:
    assert (await api.get(f"/v1/sessions/{sid}")).status_code == 404
    await append_messages(api, sid, user("a"), user("b"))
    session = await api.get(f"/v1/sessions/{sid}")
    assert session.status_code == 200
    assert session.json()["last_seq"] == 2


async def test_append_to_an_existing_session_keeps_its_metadata(
    api: httpx.AsyncClient, sid: str
) -> None:
    created = await api.post("/v1/sessions", json={"id": sid, "metadata": {"k": "v"}})
    assert created.status_code == 201
    await append_messages(api, sid, user("a"))
    assert (await api.get(f"/v1/sessions/{sid}")).json()["metadata"] == {"k": "v"}


async def test_appended_messages_come_back_in_seq_order(api: httpx.AsyncClient, sid: str) -> None:
    await append_messages(api, sid, user("one"), user("two"))
    await append_messages(api, sid, user("three"))
    assert [m["content"] for m in await stored_messages(api, sid)] == ["one", "two", "three"]


async def test_message_ids_grow_with_seq(api: httpx.AsyncClient, sid: str) -> None:
    batch = await append_messages(api, sid, user("a"), user("b"), user("c"))
    ids = [m["id"] for m in batch]
    assert ids == sorted(ids) and len(set(ids)) == 3


async def test_created_at_in_the_answer_carries_a_time_zone(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append_messages(api, sid, user("a"))
    (message,) = await stored_messages(api, sid)
    assert datetime.fromisoformat(message["created_at"]).utcoffset() is not None


# --- HTTP: idempotency ----------------------------------------------------------------------


async def test_repeated_client_id_returns_the_stored_message(
    api: httpx.AsyncClient, sid: str
) -> None:
    (first,) = await append_messages(api, sid, user("hello", client_id="c-1"))
    (again,) = await append_messages(api, sid, user("hello", client_id="c-1"))
    assert (again["id"], again["seq"]) == (first["id"], first["seq"])


async def test_repeated_client_id_stores_nothing_new(api: httpx.AsyncClient, sid: str) -> None:
    await append_messages(api, sid, user("hello", client_id="c-1"))
    await append_messages(api, sid, user("hello", client_id="c-1"))
    assert len(await stored_messages(api, sid)) == 1
    assert (await api.get(f"/v1/sessions/{sid}")).json()["last_seq"] == 1


@pytest.mark.parametrize(
    "changed",
    [
        user("changed", client_id="c-1"),
        user("original", client_id="c-1", metadata={"k": 1}),
        {"role": "assistant", "content": "original", "client_id": "c-1"},
    ],
    ids=["content", "metadata", "role"],
)
async def test_a_client_id_repeated_with_another_message_is_a_conflict_storing_nothing(
    api: httpx.AsyncClient, sid: str, changed: dict[str, Any]
) -> None:
    (original,) = await append_messages(api, sid, user("original", client_id="c-1"))
    before = (await api.get(f"/v1/sessions/{sid}")).json()
    answer = await api.post(
        f"/v1/sessions/{sid}/messages", json={"messages": [user("new one"), changed]}
    )
    assert answer.status_code == 409, answer.text
    body = answer.json()
    assert body["error"] == "IdempotencyConflict"
    assert f"message {original['id']} (seq 1)" in body["detail"]
    assert [m["content"] for m in await stored_messages(api, sid)] == ["original"]
    assert (await api.get(f"/v1/sessions/{sid}")).json() == before  # not even touched
    (same,) = await append_messages(api, sid, user("original", client_id="c-1"))  # a true retry
    assert same["id"] == original["id"]


async def test_duplicate_client_id_within_one_batch_is_stored_once(
    api: httpx.AsyncClient, sid: str
) -> None:
    batch = await append_messages(api, sid, user("a", client_id="dup"), user("a", client_id="dup"))
    assert batch[0]["id"] == batch[1]["id"]
    assert len(await stored_messages(api, sid)) == 1


async def test_a_batch_mixing_known_and_new_client_ids_stores_only_the_new(
    api: httpx.AsyncClient, sid: str
) -> None:
    (known,) = await append_messages(api, sid, user("a", client_id="c-1"))
    batch = await append_messages(api, sid, user("a", client_id="c-1"), user("b", client_id="c-2"))
    assert [m["seq"] for m in batch] == [known["seq"], 2]
    assert [m["client_id"] for m in await stored_messages(api, sid)] == ["c-1", "c-2"]


async def test_concurrent_repeats_of_one_client_id_store_it_once(
    api: httpx.AsyncClient, sid: str
) -> None:
    answers = await asyncio.gather(
        *(
            append_messages(api, sid, user("retry", client_id="c-1"))
            for _ in range(CONCURRENT_TASKS)
        )
    )
    assert {(a["id"], a["seq"]) for (a,) in answers} == {(answers[0][0]["id"], 1)}
    assert len(await stored_messages(api, sid)) == 1


async def test_messages_without_client_id_are_never_deduplicated(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append_messages(api, sid, user("same"), user("same"))
    await append_messages(api, sid, user("same"))
    assert len(await stored_messages(api, sid)) == 3


async def test_the_same_client_id_in_two_sessions_is_stored_in_both(
    api: httpx.AsyncClient, sid: str
) -> None:
    (in_a,) = await append_messages(api, f"{sid}-a", user("x", client_id="c-1"))
    (in_b,) = await append_messages(api, f"{sid}-b", user("x", client_id="c-1"))
    assert in_a["id"] != in_b["id"]
    assert in_b["seq"] == 1


# --- HTTP: concurrency ----------------------------------------------------------------------


async def test_concurrent_requests_to_one_session_get_contiguous_seqs(
    api: httpx.AsyncClient, sid: str
) -> None:
    # The full 8 x 50 runs at store level below; over HTTP each append costs ~10 ms here.
    async def task(worker: int) -> None:
        for n in range(HTTP_APPENDS_PER_TASK):
            await append_messages(api, sid, user(f"{worker}-{n}"))

    await asyncio.gather(*(task(w) for w in range(CONCURRENT_TASKS)))
    messages = await stored_messages(api, sid)
    total = CONCURRENT_TASKS * HTTP_APPENDS_PER_TASK
    assert [m["seq"] for m in messages] == list(range(1, total + 1))
    assert len({m["content"] for m in messages}) == total


async def test_concurrent_appends_to_different_sessions_do_not_interfere(
    api: httpx.AsyncClient, sid: str
) -> None:
    async def task(session_id: str) -> None:
        for n in range(10):
            await append_messages(api, session_id, user(f"{session_id}-{n}"))

    sessions = [f"{sid}-{n}" for n in range(4)]
    await asyncio.gather(*(task(s) for s in sessions))
    for session_id in sessions:
        messages = await stored_messages(api, session_id)
        assert [m["seq"] for m in messages] == list(range(1, 11))
        assert [m["content"] for m in messages] == [f"{session_id}-{n}" for n in range(10)]


# --- HTTP: token counts ---------------------------------------------------------------------

TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Zürich"}'},
}

COUNTED_MESSAGES = {
    "plain user text": {"role": "user", "content": "What is the weather like today?"},
    "named user": {"role": "user", "content": "hi", "name": "alice"},
    "system": {"role": "system", "content": "You are terse."},
    "assistant with tool calls": {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
    "tool result": {"role": "tool", "content": '{"temp": 21}', "tool_call_id": "call_1"},
    "text parts": {
        "role": "user",
        "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}],
    },
}


@pytest.mark.parametrize("message", COUNTED_MESSAGES.values(), ids=COUNTED_MESSAGES.keys())
async def test_token_count_equals_count_message_of_the_openai_message(
    api: httpx.AsyncClient, sid: str, message: dict[str, Any]
) -> None:
    with_extras = {**message, "metadata": {"ignored": "x" * 50}, "client_id": "c-1"}
    (stored,) = await append_messages(api, sid, with_extras)
    assert stored["token_count"] == count_message(message)


def png_header_url(width: int, height: int) -> str:
    """A data URL of a PNG's signature and IHDR chunk: as much of it as a token count reads."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    crc = struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    header = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + crc
    return "data:image/png;base64," + base64.b64encode(header).decode()


IMAGES = {
    "remote, size unknown": ({"url": "https://example.com/cat.png"}, IMAGE_UNKNOWN_SIZE_TOKENS),
    "low detail": ({"url": "https://example.com/cat.png", "detail": "low"}, 85),
    "1024x1024 data URL": ({"url": png_header_url(1024, 1024)}, 765),
}


@pytest.mark.parametrize(("image", "tokens"), IMAGES.values(), ids=IMAGES.keys())
async def test_an_image_part_counts_by_the_tile_rule(
    api: httpx.AsyncClient, sid: str, image: dict[str, Any], tokens: int
) -> None:
    text_part = {"type": "text", "text": "what is this?"}
    image_part = {"type": "image_url", "image_url": image}
    with_image, text_only = await append_messages(
        api,
        sid,
        {"role": "user", "content": [text_part, image_part]},
        {"role": "user", "content": [text_part]},
    )
    assert with_image["token_count"] - text_only["token_count"] == tokens


async def test_token_count_is_stored_with_the_message(api: httpx.AsyncClient, sid: str) -> None:
    (answer,) = await append_messages(api, sid, user("count me once"))
    (stored,) = await stored_messages(api, sid)
    assert stored["token_count"] == answer["token_count"] > 0


async def test_a_batch_counted_off_the_event_loop_gets_the_same_token_counts(
    api: httpx.AsyncClient, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over OFFLOAD_CHARS the batch is measured and counted in a worker thread."""
    offloaded: list[Any] = []
    to_thread = asyncio.to_thread

    async def spy(function: Any, *args: Any) -> Any:
        offloaded.append(function)
        return await to_thread(function, *args)

    monkeypatch.setattr(asyncio, "to_thread", spy)
    big = [
        user("The quarterly report covers revenue, churn and hiring. " * 600),
        user("季度报告涵盖收入、流失率和招聘情况。" * 2_000),
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
    ]
    assert sum(len(str(message["content"] or "")) for message in big) > OFFLOAD_CHARS
    stored = await append_messages(api, sid, *big)
    assert [message["token_count"] for message in stored] == [count_message(m) for m in big]
    assert [message["seq"] for message in stored] == [1, 2, 3]
    assert [getattr(f, "func", None) for f in offloaded] == [new_messages]


# --- store level ----------------------------------------------------------------------------


async def appended(app: FastAPI, sid: str, *batch: store.NewMessage) -> AppendOutcome:
    """`batch` appended by the store's append (what the route calls), without HTTP."""
    outcome, _reason = await store_batch(app.state.database, app.state.settings, "t", sid, batch)
    return outcome


async def test_store_append_assigns_contiguous_seqs(app: FastAPI, sid: str) -> None:
    first = await appended(app, sid, new_message("a"), new_message("b"))
    second = await appended(app, sid, new_message("c"))
    assert [m.seq for m in first.messages + second.messages] == [1, 2, 3]
    assert second.session.last_seq == 3


async def test_store_append_creates_the_session(
    app: FastAPI, app_db: AsyncSession, sid: str
) -> None:
    await appended(app, sid, new_message("a"))
    session = await store.get_session(app_db, "t", sid)
    assert session.last_seq == 1


async def test_store_append_reports_what_it_inserted(app: FastAPI, sid: str) -> None:
    await appended(app, sid, new_message("a", client_id="c-1"))
    outcome = await appended(
        app, sid, new_message("a", client_id="c-1"), new_message("b", client_id="c-2")
    )
    assert outcome.inserted == 1
    assert [m.seq for m in outcome.messages] == [1, 2]


async def test_store_repeated_client_id_returns_the_stored_row(
    app: FastAPI, app_db: AsyncSession, sid: str
) -> None:
    first = await appended(app, sid, new_message("a", client_id="c-1"))
    again = await appended(app, sid, new_message("a", client_id="c-1"))
    assert again.messages[0].id == first.messages[0].id
    assert again.inserted == 0
    count = select(func.count()).where(Message.session_id == first.session.id)
    assert await app_db.scalar(count) == 1


async def test_a_batch_that_fails_halfway_stores_nothing(
    app: FastAPI, app_db: AsyncSession, sid: str
) -> None:
    """Past the first INSERT (SQLite inserts 500 rows per statement), a message the table
    refuses: neither the session nor any message of the batch is stored."""
    batch = [new_message(f"{sid} {i}") for i in range(sqlite.ROWS_PER_INSERT + 1)]
    batch[-1] = batch[-1]._replace(token_count=None)  # type: ignore[arg-type]
    with pytest.raises((sqlite3.IntegrityError, asyncpg.NotNullViolationError)):
        await appended(app, sid, *batch)
    assert await app_db.scalar(select(func.count()).where(Session.external_id == sid)) == 0
    like = Message.content.like(f"{sid} %")
    assert await app_db.scalar(select(func.count()).where(like)) == 0


async def test_concurrent_appends_to_one_session_get_seqs_1_to_400(
    app: FastAPI, app_sessionmaker: async_sessionmaker[AsyncSession], sid: str
) -> None:
    # One message per append, 8 at once.
    async def task(worker: int) -> None:
        for n in range(APPENDS_PER_TASK):
            await appended(app, sid, new_message(f"{worker}-{n}"))

    await asyncio.gather(*(task(w) for w in range(CONCURRENT_TASKS)))
    async with app_sessionmaker() as app_db:
        session = await store.get_session(app_db, "t", sid)
        query = select(Message.seq, Message.content).where(Message.session_id == session.id)
        rows = (await app_db.execute(query.order_by(Message.seq))).all()
    assert [seq for seq, _ in rows] == list(range(1, CONCURRENT_TASKS * APPENDS_PER_TASK + 1))
    assert len({content for _, content in rows}) == CONCURRENT_TASKS * APPENDS_PER_TASK


def test_a_batch_without_client_ids_is_appended_without_their_checks() -> None:
    plain = store.NewMessage("user", "a", None, None, None, None, None, None, 1)
    keyed = plain._replace(client_id="c1")

    lean = postgresql.statement([plain, plain])
    assert lean == postgresql.APPEND_WITHOUT_CLIENT_IDS
    assert "known AS" not in lean and "row_number()" not in lean
    assert postgresql.statement([plain, keyed]) == postgresql.APPEND
    assert "known AS" in postgresql.APPEND
