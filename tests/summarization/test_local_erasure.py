"""Local erasure: removing a message erases only the summaries that hold its facts (its leaf,
the nodes above it, the cover over them); the hole loads raw in place until the erasure job
makes its leaf again and the nodes above it, from the same neighbours."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from tests.helpers import append, append_items, compact, user
from tests.routes.test_transfer import export, import_file, renamed
from tests.scripts.builders import every_summary
from tests.summarization.test_removal import markers_in, summary_entry, violations
from tests.support.fake_llm import FakeLLM

TURNS = 96
PER_LEAF = 6


@pytest.fixture
def settings_overrides(fake_llm: FakeLLM) -> dict[str, Any]:
    """The perfect-recall fake, no background jobs: the test makes each leaf (`compact`)."""
    fake_llm.mode = "marker_echo"
    return {
        "summary_model": "openai/fake",
        "summary_api_base": fake_llm.base_url,
        "summary_api_key": "test",
        "summary_model_context_tokens": 128_000,
        "summary_llm_max_attempts": 1,
        "summary_workers": 0,
        "summary_message_limit": 10_000,
        "summary_limit": 3,
    }


async def session_of_leaves(client: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    """`TURNS` marked messages, a leaf made of every `PER_LEAF` (16 leaves: a forest with a
    cover): the stored messages."""
    stored: list[dict[str, Any]] = []
    for start in range(0, TURNS, PER_LEAF):
        said = [user(f"MARKER-f{index} turn {index}") for index in range(start, start + PER_LEAF)]
        stored += (await append(client, sid, *said))["messages"]
        await compact(client, sid, keep_last_n=0)
    return stored


async def remove(client: httpx.AsyncClient, sid: str, message: dict[str, Any]) -> None:
    answer = await client.delete(f"/v1/sessions/{sid}/messages/{message['id']}")
    assert answer.status_code == 204, answer.text


async def test_a_removal_erases_only_what_covered_it_and_the_hole_loads_in_place(
    client: httpx.AsyncClient,
    sid: str,
    fake_llm: FakeLLM,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    stored = await session_of_leaves(client, sid)
    before = await every_summary(client, sid)
    leaves = sum(1 for s in before if s["metadata"].get("kind") == "leaf")
    assert leaves == TURNS // PER_LEAF
    removed = stored[PER_LEAF + 2]  # in the second leaf: deep under the cover
    preview = (await client.get(f"/v1/sessions/{sid}/messages/{removed['id']}/removal")).json()

    await remove(client, sid, removed)
    after = await every_summary(client, sid)
    erased = {s["id"] for s in after if s["erased_at"]}
    assert erased == set(preview["erased_summaries"])
    seq = removed["seq"]
    # only summaries whose range holds the removed seq: the leaf, the nodes above it, the cover
    assert all(s["first_seq"] <= seq <= s["last_seq"] for s in after if s["id"] in erased)
    assert len(erased) <= math.ceil(math.log2(leaves)) + 2
    untouched = [s for s in before if s["last_seq"] < seq or s["first_seq"] > seq]
    assert all(s["id"] not in erased for s in untouched)
    assert await violations(sessionmaker, sid) == []

    # the hole loads raw, in place, between the summaries around it
    history = (await client.get(f"/v1/sessions/{sid}/history")).json()
    hole = [m for m in stored if m["seq"] != seq and PER_LEAF < m["seq"] <= 2 * PER_LEAF]
    assert [m["seq"] for m in history["messages"]] == [m["seq"] for m in hole]
    context = history["context"]
    summaries = history["summaries"]
    assert context[0] == summary_entry(summaries[0])
    assert context[1 : 1 + len(hole)] == [user(m["content"]) for m in hole]
    assert context[1 + len(hole) :] == [summary_entry(s) for s in summaries[1:]]
    assert markers_in(context) == markers_in(stored) - {f"MARKER-f{PER_LEAF + 2}"}
    assert history["omitted"]["summaries"] == [] and history["omitted"]["messages"] == []

    # the erasure job (here: the next compact) makes the leaf again, then the nodes above it
    calls = len(fake_llm.calls)
    await compact(client, sid, keep_last_n=0)
    remake_calls = len(fake_llm.calls) - calls
    # the re-made leaf and its old siblings merge as one group where the erased nodes had
    # taken two steps: no more calls than the preview said
    assert 1 + 1 <= remake_calls <= preview["remake_model_calls"]
    assert remake_calls <= math.ceil(math.log2(leaves)) + 3 + 1  # summary_limit 3
    known = {s["id"] for s in before}
    remade = [s for s in await every_summary(client, sid) if s["id"] not in known]
    erased_ranges = {(s["first_seq"], s["last_seq"]) for s in after if s["id"] in erased}
    assert {(s["first_seq"], s["last_seq"]) for s in remade} <= erased_ranges
    history = (await client.get(f"/v1/sessions/{sid}/history")).json()
    assert len(history["summaries"]) <= 3 and history["messages"] == []
    assert markers_in(history["context"]) == markers_in(stored) - {f"MARKER-f{PER_LEAF + 2}"}
    depths = [s["metadata"]["depth"] for s in remade]
    assert max(depths) <= max(s["metadata"]["depth"] for s in before)
    assert await violations(sessionmaker, sid) == []


async def test_a_hole_fits_a_budget_by_its_oldest_units_and_names_what_it_left_out(
    client: httpx.AsyncClient, sid: str
) -> None:
    # no inline summarization: it would make the hole's leaf again before answering
    settings = {"retry_on_context_overflow": False}
    assert (await client.post("/v1/sessions", json={"id": sid, "settings": settings})).is_success
    stored = await session_of_leaves(client, sid)
    removed = stored[2]  # in the first leaf: the hole comes first
    await remove(client, sid, removed)
    full = (await client.get(f"/v1/sessions/{sid}/history")).json()
    hole = [m for m in full["messages"] if m["seq"] <= PER_LEAF]
    assert len(hole) == PER_LEAF - 1
    budget = full["token_estimate"] - 1
    fitted = (await client.get(f"/v1/sessions/{sid}/history?max_tokens={budget}")).json()
    assert fitted["token_estimate"] <= budget
    left_out = fitted["omitted"]["messages"]
    assert left_out and set(left_out) <= {m["id"] for m in hole}
    assert left_out == [m["id"] for m in hole[: len(left_out)]], "oldest first"
    assert fitted["truncated_messages"] == len(left_out)


async def test_a_session_with_a_hole_exports_and_imports_as_it_is(
    client: httpx.AsyncClient, sid: str, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    stored = await session_of_leaves(client, sid)
    removed = stored[PER_LEAF * 3 + 1]
    await remove(client, sid, removed)
    body = await export(client, sid)
    copy = f"{sid}-copy"
    imported = await import_file(client, renamed(body, sid, copy))
    assert imported.status_code == 201, imported.text
    original = (await client.get(f"/v1/sessions/{sid}/history")).json()
    again = (await client.get(f"/v1/sessions/{copy}/history")).json()
    assert again["context"] == original["context"]
    assert await violations(sessionmaker, copy) == []
    await compact(client, copy, keep_last_n=0)  # the copy's hole is made again too
    assert (await client.get(f"/v1/sessions/{copy}/history")).json()["messages"] == []
    assert await violations(sessionmaker, copy) == []


async def test_a_fork_past_a_hole_has_it_too_and_owes_its_leaf(
    client: httpx.AsyncClient, sid: str, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    stored = await session_of_leaves(client, sid)
    removed = stored[PER_LEAF + 1]
    await remove(client, sid, removed)
    forked = await client.post(f"/v1/sessions/{sid}/fork", json={"seq": 4 * PER_LEAF})
    assert forked.status_code == 201, forked.text
    fork_id = forked.json()["id"]
    history = (await client.get(f"/v1/sessions/{fork_id}/history")).json()
    hole = [m["seq"] for m in stored if PER_LEAF < m["seq"] <= 2 * PER_LEAF]
    assert [m["seq"] for m in history["messages"]] == [s for s in hole if s != removed["seq"]]
    assert history["summarization_pending"], "the fork's erasure job is recorded"
    assert await violations(sessionmaker, fork_id) == []


async def test_a_message_in_a_hole_previews_a_removal_that_erases_nothing(
    client: httpx.AsyncClient, sid: str
) -> None:
    stored = await session_of_leaves(client, sid)
    await remove(client, sid, stored[1])
    answer = await client.get(f"/v1/sessions/{sid}/messages/{stored[2]['id']}/removal")
    assert answer.status_code == 200, answer.text
    assert answer.json()["erased_summaries"] == [] and answer.json()["remake_model_calls"] == 0


async def test_a_prefix_pinned_no_longer_is_no_hole(client: httpx.AsyncClient, sid: str) -> None:
    await append(client, sid, {"role": "system", "content": "MARKER-system you help"})
    await session_of_leaves(client, sid)
    assert (await client.get(f"/v1/sessions/{sid}/history")).json()["pinned"]
    patched = await client.patch(f"/v1/sessions/{sid}", json={"settings": {"pin_system": False}})
    assert patched.status_code == 200, patched.text
    await append(client, sid, user("MARKER-later one"))
    await compact(client, sid, keep_last_n=0)
    history = (await client.get(f"/v1/sessions/{sid}/history")).json()
    assert [m["seq"] for m in history["pinned"]] == [1], "the pinned prefix stays as it was"


async def test_a_hole_ending_in_a_reasoning_item_is_made_again_and_the_tail_goes_on(
    client: httpx.AsyncClient, sid: str
) -> None:
    def reasoning(i: int) -> dict[str, Any]:
        return {"type": "reasoning", "summary": [{"type": "summary_text", "text": f"MARKER-r{i}"}]}

    def said(text: str, role: str = "user") -> dict[str, Any]:
        return {"type": "message", "role": role, "content": text}

    stored: list[dict[str, Any]] = []
    for i in range(4):
        turn = (said(f"MARKER-q{i}"), reasoning(i), said(f"MARKER-a{i}", "assistant"))
        stored += (await append_items(client, sid, *turn))["messages"]
        await compact(client, sid, keep_last_n=0)
    # the answer closing the second leaf goes: the reasoning before it ends the hole
    await remove(client, sid, stored[5])
    await append_items(client, sid, said("MARKER-q4"), said("MARKER-a4", "assistant"))
    await compact(client, sid, keep_last_n=0)
    history = (await client.get(f"/v1/sessions/{sid}/history")).json()
    assert history["messages"] == [], "the hole and the tail are summarized"


async def test_over_budget_a_hole_s_old_messages_go_before_the_newest_ones(
    client: httpx.AsyncClient, sid: str
) -> None:
    settings = {"retry_on_context_overflow": False}
    assert (await client.post("/v1/sessions", json={"id": sid, "settings": settings})).is_success
    stored = await session_of_leaves(client, sid)
    await remove(client, sid, stored[8])
    tail = (await append(client, sid, *[user(f"MARKER-t{i}") for i in range(6)]))["messages"]
    full = (await client.get(f"/v1/sessions/{sid}/history")).json()
    fitted = (
        await client.get(f"/v1/sessions/{sid}/history?max_tokens={full['token_estimate'] - 30}")
    ).json()
    left_out = set(fitted["omitted"]["messages"])
    assert left_out and not left_out & {m["id"] for m in tail}, "the newest messages stay"
    assert fitted["omitted"]["summaries"] == []
