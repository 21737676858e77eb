"""Summary endpoints, inline summarization in the loader, guards, retries and metrics."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api import worker
from api.db.models import SummaryJob
from api.store import summaries as summary_store
from tests.helpers import append, compact, fake_llm_app, metric, user, wait_for_summary
from tests.support.fake_llm import FakeLLM


@pytest.mark.parametrize("settings_overrides", [{"summary_limit": 2}], indirect=True)
async def test_summaries_list_newest_first_and_superseded_on_request(
    client: httpx.AsyncClient,
) -> None:
    for i in range(3):
        await append(client, "list", user(f"part {i} a"), user(f"part {i} b"))
        await compact(client, "list", trigger="manual", keep_last_n=0)
    live = (await client.get("/v1/sessions/list/summaries")).json()["summaries"]
    every = (await client.get("/v1/sessions/list/summaries?include_superseded=true")).json()
    # Newest first means most recently created: the node of 1..4 came before 5..6 (the
    # forest merges two leaves as soon as the second is stored).
    assert [(s["first_seq"], s["last_seq"], s["level"]) for s in live] == [(5, 6, 0), (1, 4, 1)]
    assert len(every["summaries"]) == 4
    assert [s["id"] for s in every["summaries"]] == sorted(
        (s["id"] for s in every["summaries"]), reverse=True
    )
    superseded = [s for s in every["summaries"] if s["superseded_by"] is not None]
    assert {s["superseded_by"] for s in superseded} == {live[1]["id"]}
    session = (await client.get("/v1/sessions/list")).json()
    assert session["summary_count"] == 2


async def test_summary_detail_lists_its_source_message_ids(client: httpx.AsyncClient) -> None:
    appended = await append(client, "detail", *(user(f"m{i}") for i in range(5)))
    summary = (await compact(client, "detail", trigger="manual", keep_last_n=2))["summary"]
    detail = (await client.get(f"/v1/summaries/{summary['id']}")).json()
    assert detail["message_ids"] == [m["id"] for m in appended["messages"][:3]]
    assert detail["session_id"] == "detail"
    assert (await client.get("/v1/summaries/999999")).status_code == 404


async def test_summaries_list_paginates_with_cursor(client: httpx.AsyncClient) -> None:
    for i in range(3):
        await append(client, "pages", user(f"m{i}"))
        await compact(client, "pages", trigger="manual", keep_last_n=0)
    listing = "/v1/sessions/pages/summaries?include_superseded=true&limit=2"
    first = (await client.get(listing)).json()
    second = (await client.get(f"{listing}&cursor={first['next_cursor']}")).json()
    ids = [s["id"] for s in first["summaries"] + second["summaries"]]
    assert len(ids) == len(set(ids)) == 4  # three leaves, and the node of the first two
    assert second["next_cursor"] is None


@pytest.mark.parametrize(
    "settings_overrides", [{"summary_keep_last_n": 2, "summary_message_limit": 1000}], indirect=True
)
async def test_history_over_budget_compacts_inline_before_truncating(
    client: httpx.AsyncClient,
) -> None:
    text = "We compared the Lyon and Porto warehouses for order 1234 in detail. " * 8
    await append(client, "inline", *(user(f"{i}: {text}") for i in range(30)))
    history = (await client.get("/v1/sessions/inline/history?max_tokens=1500")).json()
    [summary] = history["summaries"]
    assert summary["metadata"]["trigger_reason"] == "token_limit"
    assert summary["last_seq"] == 28
    assert history["token_estimate"] <= 1500
    assert history["context"][0]["role"] == "system"
    assert history["context"][-1]["content"].startswith("29: ")


@pytest.mark.parametrize(
    "settings_overrides",
    [{"summary_keep_last_n": 50, "summary_message_limit": 1000}],
    indirect=True,
)
async def test_history_truncates_when_summarization_cannot_shrink(
    client: httpx.AsyncClient,
) -> None:
    text = "Details about the shipment and the customs papers. " * 10
    await append(client, "nothing", *(user(f"{i}: {text}") for i in range(20)))
    history = (await client.get("/v1/sessions/nothing/history?max_tokens=600")).json()
    assert history["summaries"] == []
    assert history["truncated_messages"] > 0
    assert history["token_estimate"] <= 600
    assert history["context"][-1]["content"].startswith("19: ")


async def test_empty_llm_answer_is_never_stored_as_summary(
    fake_llm: FakeLLM,
    database_url: str,
    engine: Any,
) -> None:
    fake_llm.mode = "empty"
    async with fake_llm_app(
        fake_llm,
        database_url,
        summary_workers=2,
        summary_llm_max_attempts=2,
        summary_llm_backoff_seconds=0.01,
    ) as http:
        await append(http, "empty", user("Please book the 9:40 train to Lyon"), user("and a hotel"))
        summary = (await compact(http, "empty", trigger="manual", keep_last_n=0))["summary"]
    assert summary["summary_text"].strip()
    assert summary["metadata"]["truncated"] is True
    assert summary["metadata"]["failed_llm_calls"] >= 1
    assert 200 in {call.status for call in fake_llm.calls}


async def test_session_settings_override_the_message_limit(client: httpx.AsyncClient) -> None:
    created = await client.post(
        "/v1/sessions", json={"id": "custom", "settings": {"message_limit": 3, "keep_last_n": 1}}
    )
    assert created.status_code == 201, created.text
    answer = await append(client, "custom", user("a"), user("b"), user("c"))
    assert answer["summarization"] == {"scheduled": True, "reason": "message_limit"}
    history = await wait_for_summary(client, "custom")
    assert history["summaries"][0]["last_seq"] == 2


@pytest.mark.parametrize(
    "settings_overrides", [{"summary_message_limit": 3, "summary_keep_last_n": 0}], indirect=True
)
async def test_failed_job_is_retried_with_backoff_and_appends_go_on(
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker, "BACKOFF_BASE_SECONDS", 0.2)
    link_messages = summary_store._link_messages
    failures: list[int] = []

    async def fail_once(*args: Any) -> None:
        if not failures:
            failures.append(1)
            raise RuntimeError("injected database fault")
        await link_messages(*args)

    monkeypatch.setattr(summary_store, "_link_messages", fail_once)
    await append(client, "retry", user("a"), user("b"), user("c"))
    for _ in range(100):
        async with sessionmaker() as db:
            job = await db.scalar(select(SummaryJob))
        if job is not None and job.last_error:
            break
        await asyncio.sleep(0.02)
    assert job is not None and "injected database fault" in (job.last_error or "")
    more = await append(client, "retry", user("d"))
    assert more["messages"][0]["seq"] == 4
    history = await wait_for_summary(client, "retry")
    assert history["summaries"][0]["first_seq"] == 1


async def test_metrics_count_summaries_by_trigger_and_reason(client: httpx.AsyncClient) -> None:
    await append(client, "metrics", user("a"), user("b"))
    await compact(client, "metrics", trigger="manual", keep_last_n=0)
    text = (await client.get("/metrics")).text
    assert 'precis_summaries_total{reason="manual",trigger="manual"}' in text
    assert "precis_append_seconds_bucket" in text
    assert "precis_history_load_seconds" in text


def labelled(text: str, sample: str) -> float:
    """The value of one labelled sample, written as in the text (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    return 0.0


async def test_metrics_count_llm_calls_failures_durations_latencies_and_pending_jobs(
    fake_llm: FakeLLM, database_url: str, engine: Any
) -> None:
    async with fake_llm_app(
        fake_llm,
        database_url,
        summary_llm_backoff_seconds=0.01,
        summary_message_limit=3,
        summary_keep_last_n=0,
    ) as http:
        before = (await http.get("/metrics")).text
        await append(http, "counted", user("a"), user("b"), user("c"))  # schedules a job
        fake_llm.fail_next(503)
        await compact(http, "counted", trigger="manual", keep_last_n=0)
        await http.get("/v1/sessions/counted/history")
        after = (await http.get("/metrics")).text

    def grew(name: str) -> float:
        return metric(after, name) - metric(before, name)

    assert grew("precis_llm_calls_total") == 2  # the failed call and its retry
    failed = 'precis_llm_failed_calls_total{reason="transient"}'
    assert labelled(after, failed) - labelled(before, failed) == 1
    assert grew("precis_summarization_seconds_count") == 1
    assert grew("precis_append_seconds_count") == 1
    assert grew("precis_history_load_seconds_count") >= 1
    assert metric(after, "precis_pending_summary_jobs") == 1  # queued, no worker here


async def test_tool_preview_settings_reach_the_summarizer_prompt(
    fake_llm: FakeLLM, database_url: str, engine: Any
) -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {
                    "name": "lookup",
                    "arguments": '{"q": "ARGHEAD' + "a" * 200 + 'ARGTAIL"}',
                },
            }
        ],
    }
    result = {"role": "tool", "tool_call_id": "c1", "content": "RESHEAD " + "b" * 500 + " RESTAIL"}
    async with fake_llm_app(
        fake_llm,
        database_url,
        summary_tool_result_preview_chars=40,
        summary_tool_args_preview_chars=30,
    ) as http:
        await append(http, "previews", user("look it up"), call, result, user("thanks"))
        await compact(http, "previews", trigger="manual", keep_last_n=0)
    prompt = " ".join(fake_llm.prompts())
    assert "RESHEAD" in prompt and "RESTAIL" not in prompt
    assert "ARGHEAD" in prompt and "ARGTAIL" not in prompt
