"""The proactive trigger reads the tail as a history load shows it: clearing old tool results
delays summarization; the summarizer still reads the results in full."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.helpers import append, fake_llm_app, user
from tests.history.test_context_edits import call, result
from tests.support.fake_llm import FakeLLM

TRIGGER = {
    "summary_max_context_tokens": 2_000,
    "summary_message_limit": 10_000,
    "summary_keep_last_n": 2,
}
CLEARING = {"clear_tool_results_trigger_tokens": 1_000, "clear_tool_results_keep": 2}


async def exchanges(api: httpx.AsyncClient, sid: str, first: int, last: int) -> list[Any]:
    """Append exchanges `first` to `last` - 1; each append's `summarization` answer."""
    answers = []
    for turn in range(first, last):
        call_id = f"call_{turn}"
        stored = await append(api, sid, user(f"question {turn}"), call(call_id), result(call_id))
        answers.append(stored["summarization"])
    return answers


async def test_clearing_delays_the_token_trigger(
    fake_llm: FakeLLM, database_url: str, engine: AsyncEngine
) -> None:
    """(`engine` empties the tables afterwards, here as in the test below: the jobs these tests
    leave pending must not reach another test's worker.)"""
    async with fake_llm_app(fake_llm, database_url, **TRIGGER) as api:
        plain = await api.post("/v1/sessions", json={"id": "plain"})
        clearing = await api.post("/v1/sessions", json={"id": "clearing", "settings": CLEARING})
        assert plain.status_code == clearing.status_code == 201
        # about 4,300 raw tokens: over 2,000 unless old results are cleared
        plain_answers = await exchanges(api, "plain", 0, 8)
        clearing_answers = await exchanges(api, "clearing", 0, 8)
        assert any(answer["scheduled"] for answer in plain_answers)
        assert not any(answer["scheduled"] for answer in clearing_answers)
        shown = await api.get("/v1/sessions/clearing/history")
        assert shown.json()["token_estimate"] < TRIGGER["summary_max_context_tokens"]
        # the cleared view grows too: the trigger fires once it reaches the limit
        later = await exchanges(api, "clearing", 8, 40)
        due = [answer for answer in later if answer["scheduled"]]
        assert due and due[0]["reason"] == "token_limit"


async def test_a_summary_of_a_clearing_session_reads_the_results_in_full(
    fake_llm: FakeLLM, database_url: str, engine: AsyncEngine
) -> None:
    async with fake_llm_app(fake_llm, database_url, **TRIGGER) as api:
        created = await api.post("/v1/sessions", json={"id": "s", "settings": CLEARING})
        assert created.status_code == 201
        await exchanges(api, "s", 0, 6)
        loaded = (await api.get("/v1/sessions/s/history")).json()
        assert "call_0-fact-0" not in str(loaded["context"])  # cleared from the view
        answer = await api.post("/v1/sessions/s/compact", json={})
        assert answer.status_code == 200, answer.text
        assert answer.json()["summary"] is not None
        prompts = " ".join(str(message) for c in fake_llm.calls for message in c.messages)
        assert "call_0-fact-0" in prompts
