"""The session the console's tests look at, seeded through the API and the store.

Tenant A's session holds twelve messages (seq 11 a `<script>`, seq 12 removed), two summaries
rolled up into a third, a fallback summary, and a job whose last attempt failed. Its long
session holds 250 messages (two pages) and eight summaries of 30 seqs each, seven of them
erased by the removal of seq 45: the one of seqs 1..30 is the only live one.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from datetime import timedelta

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api import store
from api.db.models import utcnow
from summarizer.summarize import FALLBACK_MODEL
from tests.helpers import summary_draft, user

KEYS = "tenant_a:key_a,tenant_b:key_b"
A = {"Authorization": "Bearer key_a"}
SCRIPT = "<script>window.owned = 1</script><img src=x onerror='window.owned = 1'>"
MESSAGES = 12
SCRIPT_SEQ = 11
REMOVED_SEQ = 12
JOB_ERROR = "summarizer model unavailable: <timeout>"
LONG_MESSAGES = 250
LONG_CHUNK = 30
LONG_SUMMARIES = 8
LONG_REMOVED_SEQ = 45


@dataclass(frozen=True)
class Seeded:
    session_id: str
    leaves: tuple[int, int]
    rollup: int
    fallback: int
    long_id: str
    long_summaries: tuple[int, ...]
    """The long session's summaries, oldest first: the first live, the others erased."""


async def seed(http: httpx.AsyncClient, sessionmaker: async_sessionmaker[AsyncSession]) -> Seeded:
    """Seed tenant A's session: messages and the removal through `http` (the API), summaries
    and the job through the store on `sessionmaker`."""
    sid = f"console-{uuid.uuid4().hex[:8]}"
    contents = [f"message {seq}" for seq in range(1, MESSAGES + 1)]
    contents[SCRIPT_SEQ - 1] = SCRIPT
    answer = await http.post(
        f"/v1/sessions/{sid}/messages", json={"messages": [user(c) for c in contents]}, headers=A
    )
    assert answer.status_code == 201, answer.text
    removed_id = answer.json()["messages"][REMOVED_SEQ - 1]["id"]
    removed = await http.delete(f"/v1/sessions/{sid}/messages/{removed_id}", headers=A)
    assert removed.status_code == 204
    fallback = dataclasses.replace(
        summary_draft(9, 10),
        model=FALLBACK_MODEL,
        summary_text="written without the model",
        metadata={"trigger": "proactive", "fallback_reason": "llm_unavailable"},
    )
    async with sessionmaker() as db:
        session = await store.get_session(db, "tenant_a", sid)
        first = await store.save_summary(db, session.id, summary_draft(1, 4))
        second = await store.save_summary(db, session.id, summary_draft(5, 8))
        rollup = await store.save_summary(
            db, session.id, summary_draft(1, 8, absorbs=(first.id, second.id))
        )
        made = await store.save_summary(db, session.id, fallback)
        await store.enqueue_job(db, session.id, "proactive", "message_limit")
        await db.commit()
        job = await store.claim_job(db, timedelta(minutes=5))
        assert job is not None
        await store.release_job(db, job, utcnow(), JOB_ERROR)
        await db.commit()
    long_id, long_summaries = await _seed_long(http, sessionmaker)
    return Seeded(sid, (first.id, second.id), rollup.id, made.id, long_id, long_summaries)


async def _seed_long(
    http: httpx.AsyncClient, sessionmaker: async_sessionmaker[AsyncSession]
) -> tuple[str, tuple[int, ...]]:
    """Tenant A's long session: its messages through `http`, its summaries through the store,
    then the removal that erases all but the first of them."""
    sid = f"console-paged-{uuid.uuid4().hex[:8]}"
    batch = {"messages": [user(f"long {seq}") for seq in range(1, LONG_MESSAGES + 1)]}
    answer = await http.post(f"/v1/sessions/{sid}/messages", json=batch, headers=A)
    assert answer.status_code == 201, answer.text
    async with sessionmaker() as db:
        session = await store.get_session(db, "tenant_a", sid)
        made = [
            await store.save_summary(db, session.id, summary_draft(first, first + LONG_CHUNK - 1))
            for first in range(1, LONG_SUMMARIES * LONG_CHUNK, LONG_CHUNK)
        ]
        await db.commit()
    removed_id = answer.json()["messages"][LONG_REMOVED_SEQ - 1]["id"]
    removed = await http.delete(f"/v1/sessions/{sid}/messages/{removed_id}", headers=A)
    assert removed.status_code == 204
    return sid, tuple(summary.id for summary in made)
