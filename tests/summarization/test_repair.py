"""Fallback summaries are repaired: once the model answers again, every lost fact comes back."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api import store
from tests.helpers import WAIT_SECONDS, append, assistant, llm_overrides, user
from tests.invariants import invariant_violations
from tests.support.fake_llm import FakeLLM


@pytest.fixture
def settings_overrides(fake_llm: FakeLLM) -> dict[str, Any]:
    return {
        **llm_overrides(fake_llm),
        "summary_llm_timeout_seconds": 2.0,
        "summary_message_limit": 12,
        "summary_workers": 1,
        "summary_repair_interval_seconds": 0.2,
        "summary_target_tokens": 60,
        # a background summary stores its fallback at once instead of waiting out the outage
        "summary_outage_backlog_factor": 1,
    }


def facts(first: int, count: int) -> list[dict[str, Any]]:
    """`count` turns of a user fact and a long assistant reply (the fallback cannot keep all)."""
    turns = []
    for index in range(first, first + count):
        turns.append(user(f"Remember MARKER-f{index}: " + "the plan is long " * 30))
        turns.append(assistant("Noted. " + "details of the plan " * 30))
    return turns


async def live_summaries(client: httpx.AsyncClient, session: str) -> list[dict[str, Any]]:
    answer = await client.get(f"/v1/sessions/{session}/summaries")
    return list(answer.json()["summaries"])


async def wait_for(client: httpx.AsyncClient, session: str, repaired: bool) -> list[Any]:
    """Poll until a live summary exists and (with `repaired`) none is a fallback."""
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while asyncio.get_running_loop().time() < deadline:
        live = await live_summaries(client, session)
        if live and (not repaired or all(s["model"] != "fallback" for s in live)):
            return live
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {'repaired ' if repaired else ''}summary within {WAIT_SECONDS} s")


async def test_a_fallback_summary_is_repaired_once_the_model_is_back(
    client: httpx.AsyncClient,
    fake_llm: FakeLLM,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    fake_llm.mode = "marker_echo"
    fake_llm.fail_always(503)
    await append(client, "outage", *facts(0, 6))
    [fallback] = await wait_for(client, "outage", repaired=False)
    assert fallback["model"] == "fallback"
    context = str((await client.get("/v1/sessions/outage/history")).json()["context"])
    lost = {f"MARKER-f{i}" for i in range(5)} - set(re.findall(r"MARKER-f\d+", context))
    assert lost  # the deterministic summary could not keep every fact

    fake_llm.fail_always(None)
    [repaired] = await wait_for(client, "outage", repaired=True)
    assert repaired["metadata"]["repair_of"] == fallback["id"]
    assert (repaired["first_seq"], repaired["last_seq"]) == (
        fallback["first_seq"],
        fallback["last_seq"],
    )
    assert repaired["model"] == "openai/fake"
    context = str((await client.get("/v1/sessions/outage/history")).json()["context"])
    assert {f"MARKER-f{i}" for i in range(6)} <= set(re.findall(r"MARKER-f\d+", context))
    every = (await client.get("/v1/sessions/outage/summaries?include_superseded=true")).json()
    old = next(s for s in every["summaries"] if s["id"] == fallback["id"])
    assert old["superseded_by"] == repaired["id"]
    async with sessionmaker() as db:
        session_key = (await store.get_session(db, "default", "outage")).id
        assert await invariant_violations(db, session_key) == []


async def test_while_the_model_is_down_the_fallback_stays_and_nothing_else_is_stored(
    client: httpx.AsyncClient, fake_llm: FakeLLM
) -> None:
    fake_llm.fail_always(503)
    await append(client, "still-down", *facts(0, 6))
    [fallback] = await wait_for(client, "still-down", repaired=False)
    calls = len(fake_llm.calls)
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while len(fake_llm.calls) < calls + 2:  # the repair tried, twice
        assert asyncio.get_running_loop().time() < deadline, "the repair never tried again"
        await asyncio.sleep(0.05)
    every = (await client.get("/v1/sessions/still-down/summaries?include_superseded=true")).json()
    assert [s["id"] for s in every["summaries"]] == [fallback["id"]]


@pytest.mark.parametrize("window", [1500, 3000])
async def test_every_fact_stays_in_the_context_through_roll_ups_and_an_outage(
    client: httpx.AsyncClient, fake_llm: FakeLLM, window: int
) -> None:
    """The perfect-recall model, a small window, roll-ups, and the model down for a while."""
    fake_llm.mode = "marker_echo"
    fake_llm.context_window = window
    session = f"recall-{window}"
    await client.post(
        "/v1/sessions",
        json={
            "id": session,
            "settings": {"model_context_tokens": window, "target_tokens": 800, "summary_limit": 2},
        },
    )
    planted: set[str] = set()
    for batch in range(8):
        fake_llm.fail_always(503 if batch in (3, 4) else None)
        messages = []
        for index in range(6):
            marker = f"MARKER-b{batch}i{index}"
            planted.add(marker)
            messages.append(user(f"{marker} " + "some detail " * 25))
            messages.append(assistant("ok " * 20))
        await append(client, session, *messages)
        await wait_for(client, session, repaired=batch not in (3, 4))
    fake_llm.fail_always(None)
    await wait_for(client, session, repaired=True)
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while True:
        history = (await client.get(f"/v1/sessions/{session}/history")).json()
        if not history["summarization_pending"] or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.05)
    assert planted <= set(re.findall(r"MARKER-b\d+i\d+", str(history["context"])))
