"""Per-message removal: delete and pop, tombstones, tool-call pairs, and erasure of every summary
a removed message reached (docs/design.md, section 2 amendments)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api import store
from api.db.models import Message, Session, Summary
from tests.helpers import (
    WAIT_SECONDS,
    Gate,
    append,
    assistant,
    compact,
    metric,
    tool_call,
    tool_result,
    user,
    wait_until,
)
from tests.invariants import invariant_violations
from tests.support.fake_llm import MARKER_PATTERN, FakeLLM

LOCAL_ONLY: dict[str, Any] = {"summary_workers": 0, "summary_message_limit": 10_000}
"""The local model, no background jobs: only the summaries a test asks for (`compact`)."""


async def messages_of(client: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    answer = await client.get(f"/v1/sessions/{sid}/messages")
    assert answer.status_code == 200, answer.text
    return list(answer.json()["messages"])


async def violations(sessionmaker: async_sessionmaker[AsyncSession], sid: str) -> list[str]:
    async with sessionmaker() as db:
        session_key = await db.scalar(select(Session.id).where(Session.external_id == sid))
        assert session_key is not None
        return await invariant_violations(db, session_key)


async def test_a_removed_message_is_never_listed_or_loaded_and_seqs_stay(
    client: httpx.AsyncClient, sid: str
) -> None:
    stored = (await append(client, sid, user("one"), assistant("two"), user("three")))["messages"]
    removed = await client.delete(f"/v1/sessions/{sid}/messages/{stored[1]['id']}")
    assert removed.status_code == 204, removed.text
    assert [m["seq"] for m in await messages_of(client, sid)] == [1, 3]
    history = (await client.get(f"/v1/sessions/{sid}/history")).json()
    assert history["context"] == [user("one"), user("three")]
    session = (await client.get(f"/v1/sessions/{sid}")).json()
    assert (session["message_count"], session["last_seq"]) == (2, 3)
    appended = (await append(client, sid, user("four")))["messages"]
    assert appended[0]["seq"] == 4  # a tombstone keeps its seq
    # removing it again changes nothing; a message the session never held is 404
    again = await client.delete(f"/v1/sessions/{sid}/messages/{stored[1]['id']}")
    assert again.status_code == 204
    unknown = await client.delete(f"/v1/sessions/{sid}/messages/{stored[-1]['id'] + 1000}")
    assert unknown.status_code == 404
    assert unknown.json()["error"] == "MessageNotFound"


async def test_a_message_of_another_session_cannot_be_removed_through_this_one(
    client: httpx.AsyncClient, sid: str
) -> None:
    other = (await append(client, f"{sid}-other", user("not yours")))["messages"][0]
    await append(client, sid, user("mine"))
    answer = await client.delete(f"/v1/sessions/{sid}/messages/{other['id']}")
    assert answer.status_code == 404
    assert [m["content"] for m in await messages_of(client, f"{sid}-other")] == ["not yours"]


async def test_a_tombstone_keeps_no_content(
    client: httpx.AsyncClient, sid: str, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    message = user("MARKER-secret", metadata={"k": "v"}, client_id="c-1", name="alice")
    stored = (await append(client, sid, message))["messages"][0]
    assert (await client.delete(f"/v1/sessions/{sid}/messages/{stored['id']}")).status_code == 204
    async with sessionmaker() as db:
        row = (await db.execute(select(Message).where(Message.id == stored["id"]))).scalar_one()
        kept = (row.seq, row.role, row.token_count)
        gone = (row.content, row.content_parts, row.name, row.metadata_, row.client_id)
        assert kept == (1, "user", 0) and gone == (None,) * 5
        assert row.removed_at is not None
    # its client id is free again: the same message appended again is a new message
    again = (await append(client, sid, message))["messages"][0]
    assert (again["seq"], again["content"]) == (2, "MARKER-secret")


async def test_a_removed_tool_call_and_result_keep_no_calls_ids_or_parts(
    client: httpx.AsyncClient, sid: str, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    parts = {"role": "user", "content": [{"type": "text", "text": "MARKER-part"}]}
    stored = (await append(client, sid, parts, tool_call("c1"), tool_result("c1")))["messages"]
    for message in (stored[0], stored[2], stored[1]):
        answer = await client.delete(f"/v1/sessions/{sid}/messages/{message['id']}")
        assert answer.status_code == 204
    ids = [message["id"] for message in stored]
    async with sessionmaker() as db:
        removed = list((await db.execute(select(Message).where(Message.id.in_(ids)))).scalars())
    assert len(removed) == 3
    for row in removed:
        left = (row.content_parts, row.tool_calls, row.tool_call_id, row.item, row.token_count)
        assert left == (None, None, None, None, 0) and row.removed_at is not None


async def test_pop_answers_the_newest_message_as_appended_until_none_is_left(
    client: httpx.AsyncClient, sid: str
) -> None:
    first = user("first", metadata={"source": "web"}, client_id="a")
    second = assistant("second ✓ ünïcode")
    stored = (await append(client, sid, first, second))["messages"]
    popped = await client.post(f"/v1/sessions/{sid}/messages/pop")
    assert popped.status_code == 200, popped.text
    assert popped.json() == {"message": stored[1]}
    assert (await client.post(f"/v1/sessions/{sid}/messages/pop")).json()["message"] == stored[0]
    empty = await client.post(f"/v1/sessions/{sid}/messages/pop")
    assert empty.status_code == 404
    assert empty.json()["error"] == "MessageNotFound"
    assert (await client.get(f"/v1/sessions/{sid}")).json()["message_count"] == 0
    missing = await client.post("/v1/sessions/no-such-session/messages/pop")
    assert missing.status_code == 404 and missing.json()["error"] == "SessionNotFound"


async def test_removing_a_tool_result_hides_its_call_and_the_call_s_other_results(
    client: httpx.AsyncClient, sid: str
) -> None:
    call = tool_call("c1")
    call["tool_calls"].append(
        {"id": "c2", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    )
    stored = (
        await append(
            client, sid, user("q"), call, tool_result("c1"), tool_result("c2"), assistant("a")
        )
    )["messages"]
    answer = await client.delete(f"/v1/sessions/{sid}/messages/{stored[3]['id']}")
    assert answer.status_code == 204
    assert [m["seq"] for m in await messages_of(client, sid)] == [1, 5]
    for message_format in ("openai", "responses"):
        history = (await client.get(f"/v1/sessions/{sid}/history?format={message_format}")).json()
        assert [m["seq"] for m in history["messages"]] == [1, 5]
        assert len(history["context"]) == 2  # no call without its results, no orphan result
    # the hidden half is still there to remove: popping walks back through it one by one
    popped = [(await client.post(f"/v1/sessions/{sid}/messages/pop")).json() for _ in range(4)]
    assert [p["message"]["seq"] for p in popped] == [5, 3, 2, 1]
    assert popped[2]["message"] == stored[1]  # the hidden call, as it was appended


async def test_popping_undoes_a_tool_exchange_one_message_at_a_time(
    client: httpx.AsyncClient, sid: str
) -> None:
    """What an Agents SDK rewind does: pop the newest items, compare, and put them back."""
    stored = (await append(client, sid, user("q"), tool_call("c1"), tool_result("c1")))["messages"]
    result = (await client.post(f"/v1/sessions/{sid}/messages/pop")).json()["message"]
    call = (await client.post(f"/v1/sessions/{sid}/messages/pop")).json()["message"]
    assert (result, call) == (stored[2], stored[1])
    assert [m["seq"] for m in await messages_of(client, sid)] == [1]
    await append(client, sid, tool_call("c1"), tool_result("c1"))  # put back
    context = (await client.get(f"/v1/sessions/{sid}/history")).json()["context"]
    assert context == [user("q"), tool_call("c1"), tool_result("c1")]


async def test_removing_a_call_hides_its_results(client: httpx.AsyncClient, sid: str) -> None:
    stored = (
        await append(client, sid, user("q"), tool_call("c1"), tool_result("c1"), user("next"))
    )["messages"]
    assert (
        await client.delete(f"/v1/sessions/{sid}/messages/{stored[1]['id']}")
    ).status_code == 204
    assert [m["seq"] for m in await messages_of(client, sid)] == [1, 4]
    session = (await client.get(f"/v1/sessions/{sid}")).json()
    assert session["message_count"] == 3  # the hidden result is stored still


@pytest.mark.parametrize("settings_overrides", [LOCAL_ONLY], indirect=True)
async def test_a_removal_erases_the_summary_that_covered_it_and_the_history_loads_raw(
    client: httpx.AsyncClient, sid: str, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    stored = (await append(client, sid, user("MARKER-keep one"), user("MARKER-gone two")))[
        "messages"
    ]
    summary = (await compact(client, sid, keep_last_n=0))["summary"]
    await append(client, sid, user("three"))
    assert (
        await client.delete(f"/v1/sessions/{sid}/messages/{stored[1]['id']}")
    ).status_code == 204
    history = (await client.get(f"/v1/sessions/{sid}/history")).json()
    assert history["summaries"] == []
    assert history["context"] == [user("MARKER-keep one"), user("three")]
    every = (await client.get(f"/v1/sessions/{sid}/summaries?include_superseded=true")).json()
    (erased,) = every["summaries"]
    assert erased["id"] == summary["id"]
    assert erased["summary_text"] == "" and erased["erased_at"] is not None
    assert (await client.get(f"/v1/sessions/{sid}")).json()["summary_count"] == 0
    remade = (await compact(client, sid, keep_last_n=0))["summary"]
    assert (remade["first_seq"], remade["last_seq"]) == (1, 3)
    detail = (await client.get(f"/v1/summaries/{remade['id']}")).json()
    assert stored[1]["id"] not in detail["message_ids"]
    assert "MARKER-gone" not in remade["summary_text"]
    assert await violations(sessionmaker, sid) == []


async def three_parts(
    client: httpx.AsyncClient, sid: str, settings: dict[str, Any]
) -> list[dict[str, Any]]:
    """A session of three parts of two messages, each compacted: the stored messages."""
    await client.post("/v1/sessions", json={"id": sid, "settings": settings})
    stored: list[dict[str, Any]] = []
    for part in range(3):
        stored += (await append(client, sid, user(f"part {part} a"), user(f"part {part} b")))[
            "messages"
        ]
        await compact(client, sid, keep_last_n=0)
    return stored


@pytest.mark.parametrize("settings_overrides", [LOCAL_ONLY], indirect=True)
async def test_erasure_through_a_roll_up_brings_back_the_summaries_it_did_not_reach(
    client: httpx.AsyncClient, sid: str, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    ids = [message["id"] for message in await three_parts(client, sid, {"summary_limit": 2})]
    live = (await client.get(f"/v1/sessions/{sid}/summaries")).json()["summaries"]
    assert sorted((s["first_seq"], s["last_seq"], s["level"]) for s in live) == [
        (1, 4, 1),
        (5, 6, 0),
    ]
    assert (await client.delete(f"/v1/sessions/{sid}/messages/{ids[2]}")).status_code == 204
    history = (await client.get(f"/v1/sessions/{sid}/history")).json()
    # the leaf of seqs 3..4 and the roll-up above it are erased; the other leaf under the
    # roll-up is live again, the leaf after it stays, and the hole between them loads raw,
    # in place
    assert [(s["first_seq"], s["last_seq"], s["level"]) for s in history["summaries"]] == [
        (1, 2, 0),
        (5, 6, 0),
    ]
    assert [m["seq"] for m in history["messages"]] == [4]
    summaries = history["summaries"]
    assert history["context"] == [
        summary_entry(summaries[0]),
        user("part 1 b"),
        summary_entry(summaries[1]),
    ]
    every = (await client.get(f"/v1/sessions/{sid}/summaries?include_superseded=true")).json()
    erased = sorted((s["first_seq"], s["last_seq"]) for s in every["summaries"] if s["erased_at"])
    assert erased == [(1, 4), (3, 4)]
    assert all(s["summary_text"] == "" for s in every["summaries"] if s["erased_at"])
    assert await violations(sessionmaker, sid) == []
    remade = (await compact(client, sid, keep_last_n=0))["summary"]
    # the hole's leaf is made again from its messages alone, then the roll-up above it
    assert (remade["first_seq"], remade["last_seq"], remade["message_count"]) == (3, 4, 1)
    live = (await client.get(f"/v1/sessions/{sid}/summaries")).json()["summaries"]
    assert sorted((s["first_seq"], s["last_seq"]) for s in live) == [(1, 4), (5, 6)]
    assert await violations(sessionmaker, sid) == []


def summary_entry(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary as the context shows it."""
    first, last, text = summary["first_seq"], summary["last_seq"], summary["summary_text"]
    return {
        "role": "system",
        "content": f"Summary of earlier conversation (messages {first}-{last}):\n{text}",
    }


async def test_a_removal_preview_names_what_the_removal_erases_and_changes_nothing(
    client: httpx.AsyncClient, sid: str, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    ids = [message["id"] for message in await three_parts(client, sid, {"summary_limit": 2})]
    await append(client, sid, user("raw tail"))
    before = (await client.get(f"/v1/sessions/{sid}/summaries?include_superseded=true")).json()

    preview = await client.get(f"/v1/sessions/{sid}/messages/{ids[2]}/removal")
    assert preview.status_code == 200, preview.text
    answer = preview.json()
    # the hole after the summary of 1..2 is the erased leaf's range (3..4): its other
    # message is summarized again, then the roll-up above it
    assert (answer["seq"], answer["remake_after_seq"]) == (3, 2)
    assert answer["remake_messages"] == 1 and answer["remake_model_calls"] == 2
    after = (await client.get(f"/v1/sessions/{sid}/summaries?include_superseded=true")).json()
    assert after == before, "a preview stores nothing"

    assert (await client.delete(f"/v1/sessions/{sid}/messages/{ids[2]}")).status_code == 204
    every = (await client.get(f"/v1/sessions/{sid}/summaries?include_superseded=true")).json()
    erased = sorted(s["id"] for s in every["summaries"] if s["erased_at"])
    assert sorted(answer["erased_summaries"]) == erased and erased
    gone = await client.get(f"/v1/sessions/{sid}/messages/{ids[2]}/removal")
    assert gone.status_code == 404
    await wait_idle(client, sid)  # the erasure job ends before the test's session goes
    assert await violations(sessionmaker, sid) == []


async def test_a_removal_preview_counts_the_messages_and_tokens_to_make_again(
    client: httpx.AsyncClient, sid: str
) -> None:
    settings = {"summary_limit": 2, "keep_last_n": 0, "message_limit": 2}
    stored = await three_parts(client, sid, settings)
    answer = (await client.get(f"/v1/sessions/{sid}/messages/{stored[2]['id']}/removal")).json()
    remade = [m for m in stored if m["seq"] == 4]  # the rest of the erased leaf, 3..4
    assert answer["remake_messages"] == len(remade) == 1
    assert answer["remake_tokens"] == sum(m["token_count"] for m in remade)
    assert answer["remake_model_calls"] == 2  # the leaf, and the roll-up above it
    newest = (await client.get(f"/v1/sessions/{sid}/messages/{stored[5]['id']}/removal")).json()
    assert newest["erased_summaries"] and newest["remake_after_seq"] == 4
    assert newest["remake_messages"] == 1 and newest["remake_model_calls"] == 1


async def test_removals_are_counted_in_the_metrics(client: httpx.AsyncClient, sid: str) -> None:
    before = metric((await client.get("/metrics")).text, "precis_removed_messages_total")
    await append(client, sid, user("q"), tool_call("c1"), tool_result("c1"))
    await client.post(f"/v1/sessions/{sid}/messages/pop")
    await client.post(f"/v1/sessions/{sid}/messages/pop")
    after = metric((await client.get("/metrics")).text, "precis_removed_messages_total")
    assert after - before == 2


# --- fidelity with the perfect-recall model -------------------------------------------------


def fact_turns(count: int, filler_words: int) -> list[dict[str, Any]]:
    """`count` alternating user/assistant messages, each carrying one marker."""
    filler = " ".join(f"word{index % 7}" for index in range(filler_words))
    return [
        (user if index % 2 == 0 else assistant)(f"MARKER-f{index} {filler}")
        for index in range(count)
    ]


def markers_in(value: Any) -> set[str]:
    return set(MARKER_PATTERN.findall(str(value)))


async def wait_idle(client: httpx.AsyncClient, sid: str) -> dict[str, Any]:
    """The history once no summarization is pending and no live summary is a fallback."""
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while asyncio.get_running_loop().time() < deadline:
        history = (await client.get(f"/v1/sessions/{sid}/history")).json()
        fallback = any(s["model"] == "fallback" for s in history["summaries"])
        if not history["summarization_pending"] and not fallback:
            return dict(history)
        await asyncio.sleep(0.05)
    raise AssertionError(f"{sid} did not settle within {WAIT_SECONDS} s")


def recalling(fake_llm: FakeLLM, window: int) -> dict[str, Any]:
    fake_llm.mode = "marker_echo"
    return {
        "summary_model": "openai/fake",
        "summary_api_base": fake_llm.base_url,
        "summary_api_key": "test",
        "summary_model_context_tokens": window,
        "summary_message_limit": 8,
        "summary_keep_last_n": 2,
        "summary_limit": 2,
        "summary_llm_max_attempts": 1,
        "summary_repair_interval_seconds": 0.2,
    }


@pytest.fixture
def settings_overrides(request: pytest.FixtureRequest, fake_llm: FakeLLM) -> dict[str, Any]:
    param = dict(getattr(request, "param", {}))
    window = param.pop("recall_window", None)
    return {**recalling(fake_llm, window), **param} if window else param


@pytest.mark.parametrize(
    ("settings_overrides", "model_fails"),
    [
        ({"recall_window": 1500}, False),
        ({"recall_window": 128_000}, False),
        ({"recall_window": 1500}, True),
    ],
    indirect=["settings_overrides"],
    ids=["small-window", "large-window", "model-failing"],
)
async def test_an_erased_fact_leaves_every_summary_and_every_other_fact_stays(
    client: httpx.AsyncClient,
    sid: str,
    fake_llm: FakeLLM,
    sessionmaker: async_sessionmaker[AsyncSession],
    model_fails: bool,
) -> None:
    turns = fact_turns(40, 60)
    stored: list[dict[str, Any]] = []
    for start in range(0, len(turns), 10):  # a summary per ten: they are merged into nodes
        stored += (await append(client, sid, *turns[start : start + 10]))["messages"]
        history = await wait_idle(client, sid)
    assert 1 <= len(history["summaries"]) <= 2 and history["summaries"][0]["level"] >= 1
    assert markers_in(history["context"]) == markers_in(turns)

    removed = stored[3]  # in the oldest summarized range, under the roll-up
    gone = "MARKER-f3"
    if model_fails:
        fake_llm.fail_always(503)
    answer = await client.delete(f"/v1/sessions/{sid}/messages/{removed['id']}")
    assert answer.status_code == 204
    if model_fails:
        await asyncio.sleep(0.5)  # the re-make runs, and falls back, while the model is down
        fake_llm.fail_always(None)
    history = await wait_idle(client, sid)

    assert history["summaries"], "the erased range was made again"
    assert gone not in markers_in(history["context"])
    assert markers_in(history["context"]) == markers_in(turns) - {gone}
    async with sessionmaker() as db:
        texts = list(await db.scalars(select(Summary.summary_text)))
        prompts = list(await db.scalars(select(Summary.summary_prompt)))
    assert not any(gone in markers_in(text) for text in texts + prompts)  # live or not
    assert await violations(sessionmaker, sid) == []


@pytest.mark.parametrize("settings_overrides", [{"recall_window": 128_000}], indirect=True)
async def test_a_removal_racing_a_summarization_never_lands_in_its_summary(
    client: httpx.AsyncClient,
    sid: str,
    fake_llm: FakeLLM,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    await client.post("/v1/sessions", json={"id": sid, "settings": {"message_limit": 10_000}})
    stored = (
        await append(client, sid, user("MARKER-a one"), user("MARKER-race two"), user("MARKER-c"))
    )["messages"]
    gate = Gate("MARKER-race", first_only=True)

    def held_recall(messages: list[dict[str, Any]]) -> str:
        prompt = " ".join(str(message.get("content")) for message in messages)
        gate.hold(prompt)
        return "\n".join(sorted(markers_in(prompt)))

    fake_llm.responder = held_recall
    compacting = asyncio.create_task(compact(client, sid, keep_last_n=0))
    try:
        await wait_until(gate.entered)  # the model is reading the message to be removed
        answer = await client.delete(f"/v1/sessions/{sid}/messages/{stored[1]['id']}")
        assert answer.status_code == 204
    finally:
        gate.release.set()
    summary = (await compacting)["summary"]
    assert summary is not None
    assert markers_in(summary["summary_text"]) == {"MARKER-a", "MARKER-c"}
    assert (summary["first_seq"], summary["last_seq"]) == (1, 3)
    assert await violations(sessionmaker, sid) == []


async def test_a_reused_call_id_ties_each_result_to_its_own_call(
    client: httpx.AsyncClient, sid: str
) -> None:
    """Call ids need only be unique within one message: removing one exchange leaves another
    exchange with the same id alone."""
    first = (await append(client, sid, user("q1"), tool_call("c"), tool_result("c")))["messages"]
    second = (await append(client, sid, user("q2"), tool_call("c"), tool_result("c")))["messages"]
    assert (
        await client.delete(f"/v1/sessions/{sid}/messages/{second[1]['id']}")
    ).status_code == 204
    assert (
        await client.delete(f"/v1/sessions/{sid}/messages/{second[2]['id']}")
    ).status_code == 204
    assert [m["seq"] for m in await messages_of(client, sid)] == [1, 2, 3, 4]
    assert (await client.delete(f"/v1/sessions/{sid}/messages/{first[1]['id']}")).status_code == 204
    assert [m["seq"] for m in await messages_of(client, sid)] == [1, 4]
    second = (await append(client, sid, tool_call("c"), tool_result("c")))["messages"]
    context = (await client.get(f"/v1/sessions/{sid}/history")).json()["context"]
    assert context == [user("q1"), user("q2"), tool_call("c"), tool_result("c")]


@pytest.mark.parametrize("settings_overrides", [LOCAL_ONLY], indirect=True)
async def test_a_re_make_is_owed_until_the_erased_range_is_summarized_again(
    client: httpx.AsyncClient, sid: str, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    stored = (await append(client, sid, user("one"), user("two"), user("three")))["messages"]
    await compact(client, sid, keep_last_n=0)
    async with sessionmaker() as db:
        session_key = await db.scalar(select(Session.id).where(Session.external_id == sid))
        assert session_key is not None
        assert not await store.remake_owed(db, session_key, 0)
    await client.delete(f"/v1/sessions/{sid}/messages/{stored[1]['id']}")
    async with sessionmaker() as db:
        assert await store.remake_owed(db, session_key, 0)
    await compact(client, sid, keep_last_n=0)
    async with sessionmaker() as db:
        assert not await store.remake_owed(db, session_key, 0)
