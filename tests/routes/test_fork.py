"""Forking a session at a message (`POST /v1/sessions/{id}/fork`): the fork loads the context
the parent loaded when it ended at the fork point, with no LLM call; its messages are copies in
the same shapes, removed ones stay removed; carried summaries link the fork's own messages;
bad fork points are refused; a fork that fails halfway leaves nothing.

Tests share the module's app, which summarizes with a fake LLM of the module's (on demand
only: no worker, no proactive trigger), each on its own session ids.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.db.models import Message, Session, Summary, SummaryMessage
from api.db.transactions import RetryPolicy
from api.store import forks as fork_store
from tests.helpers import (
    WAIT_SECONDS,
    append,
    append_items,
    assert_error,
    compact,
    history,
    kill_connections,
    llm_overrides,
    run_verify,
    said,
    save_summaries,
    summary_draft,
    tool_call,
    tool_result,
    trace,
    user,
)
from tests.support.fake_llm import FakeLLM, running_fake_llm

SESSION_SETTINGS = {"keep_last_n": 0, "summary_limit": 5}
"""The parent sessions' own settings: compact summarizes everything, and several live
summaries load side by side (no roll-up)."""


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    """The module's summarizer; tests count its calls."""
    with running_fake_llm() as server:
        yield server


@pytest.fixture(scope="module")
def module_settings(llm: FakeLLM) -> dict[str, Any]:
    return llm_overrides(llm)


async def fork(api: httpx.AsyncClient, sid: str, **body: Any) -> dict[str, Any]:
    """`POST .../fork` with `body`; it must be a 201."""
    answer = await api.post(f"/v1/sessions/{sid}/fork", json=body)
    assert answer.status_code == 201, answer.text
    forked: dict[str, Any] = answer.json()
    return forked


async def messages(api: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    answer = await api.get(f"/v1/sessions/{sid}/messages", params={"limit": 1000})
    assert answer.status_code == 200, answer.text
    listed: list[dict[str, Any]] = answer.json()["messages"]
    return listed


async def created(api: httpx.AsyncClient, sid: str, **body: Any) -> None:
    answer = await api.post("/v1/sessions", json={"id": sid, **body})
    assert answer.status_code == 201, answer.text


def without_ids(message: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in message.items() if key != "id"}


def loaded(answer: dict[str, Any]) -> dict[str, Any]:
    """What a history load answers, but the row ids (the fork's rows are its own)."""
    return {
        "pinned": [without_ids(message) for message in answer["pinned"]],
        "summaries": [
            (summary["first_seq"], summary["last_seq"], summary["summary_text"], summary["level"])
            for summary in answer["summaries"]
        ],
        "messages": [without_ids(message) for message in answer["messages"]],
        "context": answer["context"],
        "token_estimate": answer["token_estimate"],
        "truncated_messages": answer["truncated_messages"],
    }


async def row_counts(app: FastAPI) -> tuple[int, ...]:
    """Sessions, messages, summaries and links in the whole database."""
    sessionmaker: async_sessionmaker[AsyncSession] = app.state.sessionmaker
    async with sessionmaker() as db:
        return tuple(
            [
                int(await db.scalar(select(func.count()).select_from(model)) or 0)
                for model in (Session, Message, Summary, SummaryMessage)
            ]
        )


async def chat(api: httpx.AsyncClient, sid: str, first: int, last: int) -> None:
    """Questions and answers `first..last`, appended one pair per request."""
    for n in range(first, last + 1):
        await append(api, sid, user(f"question {n} about topic {n}"), _answer(n))


def _answer(n: int) -> dict[str, Any]:
    return {"role": "assistant", "content": f"answer {n}: the topic {n} explained"}


# --- the context at the fork point ----------------------------------------------------------


async def test_a_fork_loads_the_parents_context_at_the_fork_point_with_no_llm_call(
    api: httpx.AsyncClient, llm: FakeLLM, sid: str
) -> None:
    """The parent is summarized twice, and its history recorded when it ended at seqs 11 and
    18; forks at those seqs, made afterwards, load exactly those histories (a summary crossing
    seq 11 is not carried: its messages load raw, as they did then), and nothing calls the
    LLM."""
    await created(api, sid, settings=SESSION_SETTINGS, metadata={"user": "ana"})
    await append(api, sid, {"role": "system", "content": "You are terse."})  # pinned: seq 1
    await chat(api, sid, 1, 3)  # seqs 2..7
    assert (await compact(api, sid))["summary"]["last_seq"] == 7
    await chat(api, sid, 4, 5)  # seqs 8..11
    at_11 = await history(api, sid)
    await chat(api, sid, 6, 8)  # seqs 12..17
    assert (await compact(api, sid))["summary"]["first_seq"] == 8
    question = (await append(api, sid, user("question 9")))["messages"][0]  # seq 18
    at_18 = await history(api, sid)
    await append(api, sid, _answer(9))  # seq 19
    calls = len(llm.calls)

    fork_11 = await fork(api, sid, seq=11)
    fork_18 = await fork(api, sid, message_id=question["id"])

    assert (fork_11["fork_seq"], fork_11["last_seq"], fork_11["summary_count"]) == (11, 11, 1)
    # the two leaves were merged into one node, the one live summary
    assert (fork_18["fork_seq"], fork_18["last_seq"], fork_18["summary_count"]) == (18, 18, 1)
    assert loaded(await history(api, fork_11["id"])) == loaded(at_11)
    assert loaded(await history(api, fork_18["id"])) == loaded(at_18)
    assert len(llm.calls) == calls


async def test_the_fork_answers_a_session_with_the_parents_settings_and_metadata(
    api: httpx.AsyncClient, sid: str
) -> None:
    await created(api, sid, settings={"message_limit": 40}, metadata={"user": {"name": "ana"}})
    await chat(api, sid, 1, 3)

    forked = await fork(api, sid, seq=4)

    assert re.fullmatch(r"ses_[0-9a-f]{32}", forked["id"])
    assert (forked["forked_from"], forked["fork_seq"], forked["expires_at"]) == (sid, 4, None)
    assert (forked["metadata"], forked["settings"]) == (
        {"user": {"name": "ana"}},
        {"message_limit": 40},
    )
    assert forked["effective_settings"]["message_limit"] == 40
    assert (forked["format"], forked["last_seq"], forked["message_count"]) == ("openai", 4, 4)
    assert (await api.get(f"/v1/sessions/{forked['id']}")).json() == forked
    parent = (await api.get(f"/v1/sessions/{sid}")).json()
    assert (parent["last_seq"], parent["forked_from"], parent["fork_seq"]) == (6, None, None)


async def test_a_fork_takes_the_id_given(api: httpx.AsyncClient, sid: str) -> None:
    await chat(api, sid, 1, 1)

    forked = await fork(api, sid, seq=1, id=f"{sid}.branch")

    assert forked["id"] == f"{sid}.branch"
    assert [m["content"] for m in await messages(api, forked["id"])] == ["question 1 about topic 1"]


# --- messages as they are ---------------------------------------------------------------------


async def test_messages_are_copied_in_every_shape_with_their_seqs(
    api: httpx.AsyncClient, sid: str
) -> None:
    parts = [{"type": "text", "text": "look"}, {"type": "text", "text": "twice"}]
    await append(
        api,
        sid,
        {"role": "developer", "content": "Be brief."},
        user("hi", name="ana", metadata={"lang": "en"}, client_id="c-1"),
        {"role": "user", "content": parts},
        tool_call("call_1", "call_2"),
        tool_result("call_1"),
        tool_result("call_2", "second"),
        user("after"),
    )

    forked = await fork(api, sid, seq=6)

    parent = await messages(api, sid)
    copies = await messages(api, forked["id"])
    assert [without_ids(m) for m in copies] == [without_ids(m) for m in parent[:6]]
    assert [m["id"] for m in copies] == sorted(m["id"] for m in copies)
    assert not {m["id"] for m in copies} & {m["id"] for m in parent}
    assert [m["seq"] for m in (await history(api, forked["id"]))["pinned"]] == [1]
    # the idempotency key is the fork's own: appending it again stores nothing new
    again = await append(
        api, forked["id"], user("hi", name="ana", metadata={"lang": "en"}, client_id="c-1")
    )
    assert again["messages"][0]["id"] == copies[1]["id"]


async def test_responses_items_are_copied_as_appended(api: httpx.AsyncClient, sid: str) -> None:
    call = {"type": "function_call", "call_id": "fc_1", "name": "lookup", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "fc_1", "output": "42"}
    await append_items(api, sid, said("what is it?"), call, output, said("it is 42", "assistant"))

    forked = await fork(api, sid, seq=3)

    assert forked["format"] == "responses"
    copies = await messages(api, forked["id"])
    assert [without_ids(m) for m in copies] == [without_ids(m) for m in await messages(api, sid)][
        :3
    ]
    assert [m["item"]["type"] for m in copies] == [
        "message",
        "function_call",
        "function_call_output",
    ]
    fork_history = await history(api, forked["id"], format="responses")
    assert [item["type"] for item in fork_history["context"]] == [
        "message",
        "function_call",
        "function_call_output",
    ]


async def test_a_conversations_fork_is_a_conversation(api: httpx.AsyncClient) -> None:
    answer = await api.post("/v1/conversations", json={"items": [said("one"), said("two")]})
    assert answer.status_code == 200, answer.text
    conversation = answer.json()["id"]

    forked = await fork(api, conversation, seq=1)

    assert forked["id"].startswith("conv_") and forked["id"] != conversation
    listed = await api.get(f"/v1/conversations/{forked['id']}/items", params={"order": "asc"})
    assert listed.status_code == 200, listed.text
    assert [item["content"][0]["text"] for item in listed.json()["data"]] == ["one"]


async def test_a_removed_message_stays_removed_in_the_fork(
    api: httpx.AsyncClient, database_url: str, sid: str
) -> None:
    await chat(api, sid, 1, 3)  # seqs 1..6
    removed = (await messages(api, sid))[2]
    assert (await api.delete(f"/v1/sessions/{sid}/messages/{removed['id']}")).status_code == 204

    forked = await fork(api, sid, seq=5)

    assert (forked["last_seq"], forked["message_count"]) == (5, 4)
    assert [m["seq"] for m in await messages(api, forked["id"])] == [1, 2, 4, 5]
    assert [m["seq"] for m in (await history(api, forked["id"]))["messages"]] == [1, 2, 4, 5]
    code, out, err = await run_verify(database_url, "--session", forked["id"])
    assert (code, err) == (0, ""), out


async def test_an_orphaned_half_of_a_tool_exchange_stays_hidden_in_the_fork(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append(api, sid, user("look it up"), tool_call("call_1"), tool_result("call_1"))
    result = (await messages(api, sid))[2]
    assert (await api.delete(f"/v1/sessions/{sid}/messages/{result['id']}")).status_code == 204

    forked = await fork(api, sid, seq=2)

    assert [m["seq"] for m in await messages(api, forked["id"])] == [1]
    assert loaded(await history(api, forked["id"]))["context"] == [
        {"role": "user", "content": "look it up"}
    ]


# --- forks of forks, and summaries carried -----------------------------------------------------


async def test_a_fork_of_a_fork_names_its_own_parent_and_carries_the_summaries(
    api: httpx.AsyncClient, app_db: AsyncSession, database_url: str, sid: str
) -> None:
    await chat(api, sid, 1, 6)  # seqs 1..12
    await save_summaries(app_db, sid, summary_draft(1, 4), summary_draft(5, 8))
    parent_at_10 = await fork(api, sid, seq=10)

    grandchild = await fork(api, parent_at_10["id"], seq=9)

    assert (grandchild["forked_from"], grandchild["fork_seq"]) == (parent_at_10["id"], 9)
    assert grandchild["summary_count"] == 2
    loaded_from_grandchild = await history(api, grandchild["id"])
    assert [(s["first_seq"], s["last_seq"]) for s in loaded_from_grandchild["summaries"]] == [
        (1, 4),
        (5, 8),
    ]
    assert [m["seq"] for m in loaded_from_grandchild["messages"]] == [9]
    code, out, err = await run_verify(database_url, "--session", grandchild["id"])
    assert (code, err) == (0, ""), out


async def test_a_roll_up_is_carried_and_a_summary_crossing_the_fork_point_is_not(
    api: httpx.AsyncClient, app_db: AsyncSession, database_url: str, sid: str
) -> None:
    await chat(api, sid, 1, 6)  # seqs 1..12
    first, second = await save_summaries(app_db, sid, summary_draft(1, 3), summary_draft(4, 6))
    await save_summaries(app_db, sid, summary_draft(1, 6, absorbs=(first, second)))
    await save_summaries(app_db, sid, summary_draft(7, 10))

    forked = await fork(api, sid, seq=8)

    fork_history = await history(api, forked["id"])
    assert [(s["first_seq"], s["last_seq"], s["level"]) for s in fork_history["summaries"]] == [
        (1, 6, 1)
    ]
    assert [m["seq"] for m in fork_history["messages"]] == [7, 8]
    listed = await api.get(
        f"/v1/sessions/{forked['id']}/summaries", params={"include_superseded": "true"}
    )
    carried = [
        (s["first_seq"], s["last_seq"], s["superseded_by"]) for s in listed.json()["summaries"]
    ]
    roll_up = fork_history["summaries"][0]["id"]
    # the roll-up and the two it absorbed, superseded by the roll-up's copy (trace follows them)
    assert sorted(carried) == [(1, 3, roll_up), (1, 6, None), (4, 6, roll_up)]
    code, out, err = await run_verify(database_url, "--session", forked["id"])
    assert (code, err) == (0, ""), out


async def test_summaries_a_later_roll_up_absorbed_are_carried_as_they_were_live(
    api: httpx.AsyncClient, app_db: AsyncSession, database_url: str, sid: str
) -> None:
    """The parent rolled 1-3, 4-6 and 7-10 up into 1-10 after it had passed seq 8: ended at 8,
    it loaded 1-3 and 4-6 then 7 and 8 raw, and so does a fork at 8."""
    await chat(api, sid, 1, 6)  # seqs 1..12
    parts = await save_summaries(
        app_db, sid, summary_draft(1, 3), summary_draft(4, 6), summary_draft(7, 10)
    )
    await save_summaries(app_db, sid, summary_draft(1, 10, absorbs=tuple(parts)))
    parent_at_8 = await fork(api, sid, seq=8)

    fork_history = await history(api, parent_at_8["id"])
    assert [(s["first_seq"], s["last_seq"], s["level"]) for s in fork_history["summaries"]] == [
        (1, 3, 0),
        (4, 6, 0),
    ]
    assert [m["seq"] for m in fork_history["messages"]] == [7, 8]
    assert parent_at_8["summary_count"] == 2
    code, out, err = await run_verify(database_url, "--session", parent_at_8["id"])
    assert (code, err) == (0, ""), out
    at_10 = await history(api, (await fork(api, sid, seq=10))["id"])
    assert [(s["first_seq"], s["last_seq"]) for s in at_10["summaries"]] == [(1, 10)]


async def test_a_carried_summary_traces_to_the_forks_own_messages(
    api: httpx.AsyncClient, app_db: AsyncSession, database_url: str, sid: str
) -> None:
    await chat(api, sid, 1, 4)  # seqs 1..8
    await save_summaries(app_db, sid, summary_draft(1, 6))
    forked = await fork(api, sid, seq=7)
    carried = (await history(api, forked["id"]))["summaries"][0]
    copies = await messages(api, forked["id"])

    code, out, err = await trace(database_url, str(carried["id"]), "--json")

    assert (code, err) == (0, "")
    traced = json.loads(out)
    assert traced["session"]["id"] == forked["id"]
    assert [m["id"] for m in traced["summary"]["messages"]] == [m["id"] for m in copies[:6]]
    detail = (await api.get(f"/v1/summaries/{carried['id']}")).json()
    assert detail["message_ids"] == [m["id"] for m in copies[:6]]
    assert (detail["first_message_id"], detail["last_message_id"]) == (
        copies[0]["id"],
        copies[5]["id"],
    )
    assert detail["metadata"] == {"algorithm": "test"}
    code, out, err = await run_verify(database_url, "--session", forked["id"])
    assert (code, err) == (0, ""), out


# --- bad fork points ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({}, "give the fork point as `message_id` or `seq`"),
        ({"seq": 1, "message_id": 1}, "not both"),
        ({"seq": 0}, "seq"),
        ({"seq": -3}, "seq"),
        ({"seq": "2"}, "seq"),
        ({"seq": 2**63}, "seq"),
        ({"message_id": 0}, "message_id"),
        ({"seq": 1, "id": "has space"}, "id"),
        ({"seq": 1, "id": "x" * 129}, "id"),
        ({"seq": 1, "keep": True}, "keep"),
    ],
)
async def test_a_malformed_fork_request_gets_422_and_stores_nothing(
    api: httpx.AsyncClient, app: FastAPI, sid: str, body: dict[str, Any], named: str
) -> None:
    await chat(api, sid, 1, 1)
    before = await row_counts(app)

    answer = await api.post(f"/v1/sessions/{sid}/fork", json=body)

    assert_error(answer, 422, named)
    assert await row_counts(app) == before


async def test_a_seq_past_the_newest_message_gets_422_naming_seq(
    api: httpx.AsyncClient, app: FastAPI, sid: str
) -> None:
    await chat(api, sid, 1, 2)
    before = await row_counts(app)

    answer = await api.post(f"/v1/sessions/{sid}/fork", json={"seq": 5})

    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "BadForkPoint"
    assert answer.json()["detail"].startswith("seq: 5 is past the newest message")
    assert await row_counts(app) == before


@pytest.mark.parametrize("by", ["seq", "message_id"])
async def test_a_removed_message_is_no_fork_point(
    api: httpx.AsyncClient, app: FastAPI, sid: str, by: str
) -> None:
    await chat(api, sid, 1, 2)
    removed = (await messages(api, sid))[1]
    assert (await api.delete(f"/v1/sessions/{sid}/messages/{removed['id']}")).status_code == 204
    before = await row_counts(app)

    point = removed["seq"] if by == "seq" else removed["id"]

    answer = await api.post(f"/v1/sessions/{sid}/fork", json={by: point})

    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "BadForkPoint"
    assert answer.json()["detail"].startswith(f"{by}: ")
    assert "removed" in answer.json()["detail"]
    assert await row_counts(app) == before


async def test_a_message_of_another_session_gets_404(
    api: httpx.AsyncClient, app: FastAPI, sid: str
) -> None:
    await chat(api, sid, 1, 1)
    elsewhere = (await append(api, f"{sid}-other", user("not yours")))["messages"][0]["id"]
    before = await row_counts(app)

    answer = await api.post(f"/v1/sessions/{sid}/fork", json={"message_id": elsewhere})

    assert_error(answer, 404, f"message {elsewhere} not found in session {sid!r}")
    assert answer.json()["error"] == "MessageNotFound"
    assert await row_counts(app) == before


async def test_an_unknown_parent_gets_404(api: httpx.AsyncClient, sid: str) -> None:
    answer = await api.post(f"/v1/sessions/{sid}/fork", json={"seq": 1})

    assert_error(answer, 404, sid)
    assert answer.json()["error"] == "SessionNotFound"


async def test_a_taken_id_gets_409_and_nothing_is_created(
    api: httpx.AsyncClient, app: FastAPI, sid: str
) -> None:
    await chat(api, sid, 1, 2)
    await append(api, f"{sid}-taken", user("mine"))
    before = await row_counts(app)

    answer = await api.post(f"/v1/sessions/{sid}/fork", json={"seq": 2, "id": f"{sid}-taken"})

    assert_error(answer, 409, f"{sid}-taken")
    assert answer.json()["error"] == "SessionExists"
    assert await row_counts(app) == before
    assert [m["content"] for m in await messages(api, f"{sid}-taken")] == ["mine"]


# --- one transaction --------------------------------------------------------------------------


class Interrupted(Exception):
    """Injected between the fork's statements."""


async def test_a_fork_failing_after_its_copies_were_written_leaves_nothing(
    api: httpx.AsyncClient,
    app: FastAPI,
    app_db: AsyncSession,
    monkeypatch: pytest.MonkeyPatch,
    sid: str,
) -> None:
    await chat(api, sid, 1, 4)
    await save_summaries(app_db, sid, summary_draft(1, 4))
    before = await row_counts(app)

    async def fail(*_args: Any) -> None:  # the messages and the summary are written by now
        raise Interrupted

    monkeypatch.setattr(fork_store, "link_carried", fail)
    with pytest.raises(Interrupted):
        await api.post(f"/v1/sessions/{sid}/fork", json={"seq": 6, "id": f"{sid}-half"})

    assert await row_counts(app) == before
    assert (await api.get(f"/v1/sessions/{sid}-half")).status_code == 404
    monkeypatch.undo()
    forked = await fork(api, sid, seq=6, id=f"{sid}-half")
    assert forked["summary_count"] == 1


def paused_after(
    original: Callable[..., Awaitable[Any]], reached: asyncio.Event, resume: asyncio.Event
) -> Callable[..., Awaitable[Any]]:
    """Wrap a store function of the fork: its first call signals `reached` once done, and
    waits for `resume`."""
    first = True

    async def paused(*args: Any, **kwargs: Any) -> Any:
        nonlocal first
        result = await original(*args, **kwargs)
        if first:
            first = False
            reached.set()
            await asyncio.wait_for(resume.wait(), WAIT_SECONDS)
        return result

    return paused


async def forked_while_paused(
    api: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
    sid: str,
    body: dict[str, Any],
    meanwhile: Callable[[], Awaitable[Any]],
    step: str = "copy_messages",
) -> httpx.Response:
    """The fork's answer, `meanwhile` having run once its `step` (a function of
    `api.store.forks`) was done."""
    reached, resume = asyncio.Event(), asyncio.Event()
    monkeypatch.setattr(fork_store, step, paused_after(getattr(fork_store, step), reached, resume))
    request = asyncio.create_task(api.post(f"/v1/sessions/{sid}/fork", json=body))
    await asyncio.wait_for(reached.wait(), WAIT_SECONDS)
    try:
        await meanwhile()
    finally:
        resume.set()
    return await request


@pytest.mark.postgresql_only
async def test_a_fork_reads_the_parent_in_one_snapshot(
    api: httpx.AsyncClient,
    app_db: AsyncSession,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    sid: str,
) -> None:
    """A removal committed while the fork runs (it erases the summary covering the removed
    message) shows in none of the fork's statements: the fork is the parent before it, its
    summary linked to all its copies, and appends to the parent never waited on it."""
    await chat(api, sid, 1, 4)  # seqs 1..8
    await save_summaries(app_db, sid, summary_draft(1, 4))
    removed = (await messages(api, sid))[1]

    async def remove_and_append() -> None:
        url = f"/v1/sessions/{sid}/messages/{removed['id']}"
        assert (await api.delete(url)).status_code == 204
        await append(api, sid, user("while forking"))

    answer = await forked_while_paused(
        api, monkeypatch, sid, {"seq": 6, "id": f"{sid}-fork"}, remove_and_append
    )

    assert answer.status_code == 201, answer.text
    assert (answer.json()["message_count"], answer.json()["summary_count"]) == (6, 1)
    fork_history = await history(api, f"{sid}-fork")
    assert [(s["first_seq"], s["last_seq"]) for s in fork_history["summaries"]] == [(1, 4)]
    assert [m["seq"] for m in fork_history["messages"]] == [5, 6]
    assert (await history(api, sid))["summaries"] == []  # the parent's was erased
    for session in (sid, f"{sid}-fork"):
        code, out, err = await run_verify(database_url, "--session", session)
        assert (code, err) == (0, ""), out


@pytest.mark.postgresql_only
async def test_an_id_taken_while_the_fork_reads_its_snapshot_gets_409(
    api: httpx.AsyncClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch, sid: str
) -> None:
    """The fork's snapshot began before a create took the id: the fork answers 409 as if the
    id had been taken before, and stores nothing."""
    await chat(api, sid, 1, 2)

    async def take_the_id() -> None:
        answer = await api.post("/v1/sessions", json={"id": f"{sid}-fork"})
        assert answer.status_code == 201, answer.text

    answer = await forked_while_paused(
        api, monkeypatch, sid, {"seq": 4, "id": f"{sid}-fork"}, take_the_id, step="message_at"
    )

    assert_error(answer, 409, f"{sid}-fork")
    assert (await api.get(f"/v1/sessions/{sid}-fork")).json()["last_seq"] == 0


@pytest.mark.postgresql_only
async def test_a_fork_that_lost_its_connection_runs_again_and_lands_once(
    api: httpx.AsyncClient,
    app: FastAPI,
    app_db: AsyncSession,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    sid: str,
) -> None:
    await chat(api, sid, 1, 4)
    await save_summaries(app_db, sid, summary_draft(1, 4))
    before = await row_counts(app)

    async def kill() -> None:
        assert await kill_connections(database_url) >= 1

    answer = await forked_while_paused(api, monkeypatch, sid, {"seq": 7, "id": f"{sid}-fork"}, kill)

    assert answer.status_code == 201, answer.text
    expected = (before[0] + 1, before[1] + 7, before[2] + 1, before[3] + 4)
    assert await row_counts(app) == expected
    code, out, err = await run_verify(database_url, "--session", f"{sid}-fork")
    assert (code, err) == (0, ""), out


@pytest.mark.postgresql_only
async def test_a_fork_that_lost_its_connection_past_the_retry_budget_leaves_nothing(
    api: httpx.AsyncClient,
    app: FastAPI,
    app_db: AsyncSession,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    sid: str,
) -> None:
    await chat(api, sid, 1, 4)
    await save_summaries(app_db, sid, summary_draft(1, 4))
    before = await row_counts(app)
    monkeypatch.setattr(app.state, "retry_policy", RetryPolicy(budget_seconds=0.0))

    async def kill() -> None:
        assert await kill_connections(database_url) >= 1

    answer = await forked_while_paused(api, monkeypatch, sid, {"seq": 7, "id": f"{sid}-fork"}, kill)

    assert_error(answer, 503)
    assert answer.headers["Retry-After"] == "1"
    assert await row_counts(app) == before
    assert (await api.get(f"/v1/sessions/{sid}-fork")).status_code == 404
