"""Guided summaries through the REST API: a compact's `instructions` and a session's
`summary_instructions` reach the summarizer's prompt (the session's first), are recorded in
every summary's metadata, and steer proactive summaries, roll-ups and repairs too."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest

from tests.helpers import (
    WAIT_SECONDS,
    append,
    assert_error,
    assistant,
    compact,
    llm_overrides,
    user,
    wait_for_summary,
)
from tests.support.fake_llm import Call, FakeLLM

SESSION_ASKS = "Keep every file path"
REQUEST_ASKS = "Keep every error message"

_INSTRUCTIONS = re.compile(r"<instructions>\n(.*)\n</instructions>\Z", re.DOTALL)


@pytest.fixture
def settings_overrides(fake_llm: FakeLLM) -> dict[str, Any]:
    return {
        **llm_overrides(fake_llm),
        "summary_keep_last_n": 0,
        "summary_workers": 1,
        "summary_repair_interval_seconds": 0.1,
        "summary_llm_max_attempts": 1,
    }


def asked(call: Call) -> str | None:
    """The instructions a summarizer call carried (None: none)."""
    found = _INSTRUCTIONS.search(str(call.messages[-1]["content"]))
    return found[1] if found else None


def merges(fake_llm: FakeLLM) -> list[Call]:
    return [call for call in fake_llm.calls if "<summary>" in str(call.messages[-1]["content"])]


async def guided_session(client: httpx.AsyncClient, sid: str, **settings: Any) -> None:
    answer = await client.post(
        "/v1/sessions",
        json={"id": sid, "settings": {"summary_instructions": SESSION_ASKS, **settings}},
    )
    assert answer.status_code == 201, answer.text


def turns(count: int, tag: str = "t") -> list[dict[str, Any]]:
    return [
        message
        for index in range(count)
        for message in (user(f"{tag}{index}: edit /srv/app/{index}.py"), assistant("done"))
    ]


async def test_a_compact_s_instructions_reach_the_prompt_and_the_metadata(
    client: httpx.AsyncClient, fake_llm: FakeLLM, sid: str
) -> None:
    await append(client, sid, *turns(3))
    answer = await compact(client, sid, instructions=REQUEST_ASKS)
    assert answer["summary"]["metadata"]["instructions"] == REQUEST_ASKS
    assert [asked(call) for call in fake_llm.calls] == [REQUEST_ASKS]
    stored = (await client.get(f"/v1/summaries/{answer['summary']['id']}")).json()
    assert stored["metadata"]["instructions"] == REQUEST_ASKS


async def test_a_summary_without_instructions_records_null(
    client: httpx.AsyncClient, fake_llm: FakeLLM, sid: str
) -> None:
    await append(client, sid, *turns(3))
    answer = await compact(client, sid)
    assert answer["summary"]["metadata"]["instructions"] is None
    assert [asked(call) for call in fake_llm.calls] == [None]


async def test_the_session_s_instructions_come_first_then_the_compact_s(
    client: httpx.AsyncClient, fake_llm: FakeLLM, sid: str
) -> None:
    await guided_session(client, sid)
    await append(client, sid, *turns(3))
    answer = await compact(client, sid, instructions=REQUEST_ASKS)
    both = f"{SESSION_ASKS}\n\n{REQUEST_ASKS}"
    assert answer["summary"]["metadata"]["instructions"] == both
    assert [asked(call) for call in fake_llm.calls] == [both]


async def test_the_session_s_instructions_reach_a_proactive_summary_of_the_worker(
    client: httpx.AsyncClient, fake_llm: FakeLLM, sid: str
) -> None:
    await guided_session(client, sid, message_limit=4)
    appended = await append(client, sid, *turns(2))
    assert appended["summarization"]["scheduled"] is True
    [summary] = (await wait_for_summary(client, sid))["summaries"]
    assert summary["metadata"]["trigger"] == "proactive"
    assert summary["metadata"]["instructions"] == SESSION_ASKS
    assert [asked(call) for call in fake_llm.calls] == [SESSION_ASKS]


async def test_a_roll_up_follows_the_session_s_instructions_not_the_compact_s(
    client: httpx.AsyncClient, fake_llm: FakeLLM, sid: str
) -> None:
    await guided_session(client, sid, summary_limit=1)
    await append(client, sid, *turns(2, "a"))
    await compact(client, sid)
    await append(client, sid, *turns(2, "b"))
    answer = await compact(client, sid, instructions=REQUEST_ASKS)
    assert answer["summary"]["metadata"]["instructions"] == f"{SESSION_ASKS}\n\n{REQUEST_ASKS}"
    [roll_up] = answer["history"]["summaries"]
    assert roll_up["id"] == answer["summary"]["superseded_by"]
    assert roll_up["metadata"]["trigger_reason"] == "rollup"
    assert roll_up["metadata"]["instructions"] == SESSION_ASKS
    assert [asked(call) for call in merges(fake_llm)] == [SESSION_ASKS]


async def repaired(client: httpx.AsyncClient, sid: str) -> dict[str, Any]:
    """The live summary once the worker has repaired the session's fallback."""
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while asyncio.get_running_loop().time() < deadline:
        live = (await client.get(f"/v1/sessions/{sid}/summaries")).json()["summaries"]
        if live and live[0]["metadata"].get("repair_of"):
            return dict(live[0])
        await asyncio.sleep(0.05)
    raise AssertionError(f"no repair of {sid}'s fallback within {WAIT_SECONDS} s")


async def a_failed_call_asking(fake_llm: FakeLLM, instructions: str) -> None:
    """Wait until the (failing) model has been asked to follow `instructions`."""
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while asyncio.get_running_loop().time() < deadline:
        if any(call.status != 200 and asked(call) == instructions for call in fake_llm.calls):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no call asked {instructions!r} within {WAIT_SECONDS} s")


async def test_a_repair_follows_the_instructions_its_fallback_recorded(
    client: httpx.AsyncClient, fake_llm: FakeLLM, sid: str
) -> None:
    fake_llm.fail_always(503)
    await append(client, sid, *turns(3))
    fallback = (await compact(client, sid, instructions=REQUEST_ASKS))["summary"]
    assert fallback["model"] == "fallback"
    assert fallback["metadata"]["instructions"] == REQUEST_ASKS
    patched = await client.patch(
        f"/v1/sessions/{sid}", json={"settings": {"summary_instructions": SESSION_ASKS}}
    )
    assert patched.status_code == 200, patched.text
    fake_llm.fail_always(None)
    repair = await repaired(client, sid)
    assert repair["metadata"]["repair_of"] == fallback["id"]
    assert repair["metadata"]["instructions"] == REQUEST_ASKS
    assert {asked(call) for call in fake_llm.calls if call.status == 200} == {REQUEST_ASKS}


async def test_a_repair_of_a_fallback_made_without_instructions_follows_the_session_s(
    client: httpx.AsyncClient, fake_llm: FakeLLM, sid: str
) -> None:
    fake_llm.fail_always(503)
    await append(client, sid, *turns(3))
    fallback = (await compact(client, sid))["summary"]
    assert fallback["metadata"]["instructions"] is None
    patched = await client.patch(
        f"/v1/sessions/{sid}", json={"settings": {"summary_instructions": SESSION_ASKS}}
    )
    assert patched.status_code == 200, patched.text
    # a repair that read the settings before the patch may still be calling the model
    await a_failed_call_asking(fake_llm, SESSION_ASKS)
    fake_llm.fail_always(None)
    repair = await repaired(client, sid)
    assert repair["metadata"]["instructions"] == SESSION_ASKS
    assert {asked(call) for call in fake_llm.calls if call.status == 200} == {SESSION_ASKS}


@pytest.mark.parametrize(
    "instructions",
    ["keep the \x00 byte", "", "x" * 4001, 42],
    ids=["nul", "empty", "too-long", "not-text"],
)
async def test_bad_instructions_are_refused_naming_the_field_and_nothing_is_stored(
    client: httpx.AsyncClient, fake_llm: FakeLLM, sid: str, instructions: Any
) -> None:
    await append(client, sid, *turns(3))
    answer = await client.post(
        f"/v1/sessions/{sid}/compact", json={"keep_last_n": 0, "instructions": instructions}
    )
    assert_error(answer, 422, "instructions")
    summaries = (await client.get(f"/v1/sessions/{sid}/summaries")).json()["summaries"]
    assert summaries == []
    assert fake_llm.calls == []
