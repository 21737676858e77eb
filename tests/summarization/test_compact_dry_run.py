"""`POST .../compact` with `dry_run: true`: the summary (and roll-ups) a real call would store,
and the context that would result, made the same way and stored nowhere (no summary, no link,
no job, no lease); within the same deadline."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api import store
from api.auth import DEVELOPMENT_TENANT
from api.db.models import SummarizationLease, Summary, SummaryJob, SummaryMessage
from tests.helpers import (
    append,
    assert_error,
    assistant,
    compact,
    fake_llm_app,
    history,
    user,
)
from tests.support.fake_llm import FakeLLM

DRAFT_FIELDS = (
    "level",
    "first_seq",
    "last_seq",
    "message_count",
    "approx_tokens",
    "summary_text",
    "model",
)
"""What a dry run's summary says, as the stored summary says it."""


def chat(count: int, tag: str = "m") -> list[dict[str, Any]]:
    return [
        message
        for index in range(count)
        for message in (
            user(f"{tag}{index}: move /srv/{tag}/{index}.txt to the archive, ticket T-{index}."),
            assistant(f"Moved {tag}{index}; the archive now holds {index + 1} files."),
        )
    ]


async def stored(maker: async_sessionmaker[AsyncSession], sid: str) -> dict[str, Any]:
    """Everything a compact could store for the session: summaries, links, jobs, leases."""
    async with maker() as db:
        key = (await store.get_session(db, DEVELOPMENT_TENANT, sid)).id
        summaries = list(
            await db.scalars(
                select(Summary.id).where(Summary.session_id == key).order_by(Summary.id)
            )
        )
        links = await db.scalar(
            select(func.count())
            .select_from(SummaryMessage)
            .join(Summary, Summary.id == SummaryMessage.summary_id)
            .where(Summary.session_id == key)
        )
        jobs = await db.scalar(
            select(func.count()).select_from(SummaryJob).where(SummaryJob.session_id == key)
        )
        leases = await db.scalar(
            select(func.count())
            .select_from(SummarizationLease)
            .where(SummarizationLease.session_id == key)
        )
    return {"summaries": summaries, "links": links, "jobs": jobs, "leases": leases}


async def dry_run(api: httpx.AsyncClient, sid: str, **body: Any) -> dict[str, Any]:
    answer = await compact(api, sid, dry_run=True, **body)
    assert answer["dry_run"] is True
    return answer


async def test_a_dry_run_stores_no_summary_no_link_no_job(
    api: httpx.AsyncClient, app_sessionmaker: async_sessionmaker[AsyncSession], sid: str
) -> None:
    await append(api, sid, *chat(6))
    before = await stored(app_sessionmaker, sid)
    listed = (await api.get(f"/v1/sessions/{sid}/summaries?include_superseded=true")).json()
    preview = await dry_run(api, sid, keep_last_n=2)
    assert preview["summary"] is not None
    assert await stored(app_sessionmaker, sid) == before
    assert before == {"summaries": [], "links": 0, "jobs": 0, "leases": 0}
    again = (await api.get(f"/v1/sessions/{sid}/summaries?include_superseded=true")).json()
    assert again == listed
    session = (await api.get(f"/v1/sessions/{sid}")).json()
    assert session["summary_count"] == 0


async def test_a_dry_run_answers_what_a_real_compact_then_stores(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append(api, sid, {"role": "system", "content": "You are terse."}, *chat(6))
    preview = await dry_run(api, sid, keep_last_n=2, instructions="Keep every ticket")
    real = await compact(api, sid, keep_last_n=2, instructions="Keep every ticket")
    assert real["dry_run"] is False
    draft, made = preview["summary"], real["summary"]
    assert {key: draft[key] for key in DRAFT_FIELDS} == {key: made[key] for key in DRAFT_FIELDS}
    assert "id" not in draft and "created_at" not in draft
    assert draft["metadata"]["instructions"] == made["metadata"]["instructions"]
    assert preview["rollups"] == []
    assert preview["reason"] is None
    assert preview["context"] == real["history"]["context"]
    assert preview["token_estimate"] == real["history"]["token_estimate"]
    assert preview["context"][0] == {"role": "system", "content": "You are terse."}
    assert preview["context"][1]["content"].startswith("Summary of earlier conversation")


async def test_a_dry_run_previews_the_roll_up_a_real_compact_makes(
    api: httpx.AsyncClient, app_sessionmaker: async_sessionmaker[AsyncSession], sid: str
) -> None:
    created = await api.post("/v1/sessions", json={"id": sid, "settings": {"summary_limit": 1}})
    assert created.status_code == 201, created.text
    await append(api, sid, *chat(3, "a"))
    await compact(api, sid, keep_last_n=0)
    await append(api, sid, *chat(3, "b"))
    before = await stored(app_sessionmaker, sid)
    preview = await dry_run(api, sid, keep_last_n=0)
    assert await stored(app_sessionmaker, sid) == before
    [rollup] = preview["rollups"]
    assert (rollup["level"], rollup["first_seq"], rollup["last_seq"]) == (1, 1, 12)
    assert rollup["message_count"] == 12
    assert rollup["metadata"]["trigger_reason"] == "rollup"
    real = await compact(api, sid, keep_last_n=0)
    [stored_rollup] = real["history"]["summaries"]
    assert {key: rollup[key] for key in DRAFT_FIELDS} == {
        key: stored_rollup[key] for key in DRAFT_FIELDS
    }
    assert preview["context"] == real["history"]["context"]


async def test_a_dry_run_with_nothing_to_summarize_answers_the_context_as_it_is(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append(api, sid, *chat(2))
    preview = await dry_run(api, sid, keep_last_n=10)
    assert preview["summary"] is None
    assert preview["reason"] == "nothing_to_summarize"
    loaded = await history(api, sid)
    assert preview["context"] == loaded["context"]
    assert preview["token_estimate"] == loaded["token_estimate"]


async def test_an_overflow_retry_dry_run_keeps_the_pending_question(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append(api, sid, *chat(3), user("And where is the archive?"))
    preview = await dry_run(api, sid, trigger="overflow_retry")
    assert preview["summary"]["last_seq"] == 6
    assert preview["context"][-1] == {"role": "user", "content": "And where is the archive?"}


async def test_a_dry_run_of_an_unknown_session_is_404(api: httpx.AsyncClient, sid: str) -> None:
    answer = await api.post(f"/v1/sessions/{sid}/compact", json={"dry_run": True})
    assert_error(answer, 404, sid)


async def test_a_dry_run_past_the_compact_deadline_is_504_and_stores_nothing(
    fake_llm: FakeLLM,
    database_url: str,
    sessionmaker: async_sessionmaker[AsyncSession],
    sid: str,
) -> None:
    fake_llm.slow_next(5.0, times=4)
    async with fake_llm_app(
        fake_llm,
        database_url,
        summary_compact_deadline_seconds=0.3,
        summary_llm_timeout_seconds=5.0,
    ) as http:
        await append(http, sid, *chat(3))
        answer = await http.post(
            f"/v1/sessions/{sid}/compact", json={"dry_run": True, "keep_last_n": 0}
        )
        assert_error(answer, 504, "SUMMARY_COMPACT_DEADLINE_SECONDS")
        assert await stored(sessionmaker, sid) == {
            "summaries": [],
            "links": 0,
            "jobs": 0,
            "leases": 0,
        }
