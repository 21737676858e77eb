"""`POST .../compact` that stores no summary says why: nothing outside `keep_last_n` to
summarize, or another summarization took the range while this one waited for the session."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncSession

from api import store
from api.auth import DEVELOPMENT_TENANT
from tests.helpers import WAIT_SECONDS, append, compact, user

POLL_SECONDS = 0.01
"""How often the test looks whether the `compact` calls wait for the session."""


async def test_a_compact_with_everything_kept_says_nothing_was_to_summarize(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append(api, sid, user("one"), user("two"))
    answer = await compact(api, sid, keep_last_n=10)
    assert answer["summary"] is None
    assert answer["reason"] == "nothing_to_summarize"


async def test_a_compact_after_everything_was_summarized_says_nothing_was_to_summarize(
    api: httpx.AsyncClient, sid: str
) -> None:
    await append(api, sid, user("one"), user("two"))
    first = await compact(api, sid, keep_last_n=0)
    assert first["summary"] is not None and first["reason"] is None
    again = await compact(api, sid, keep_last_n=0)
    assert again["summary"] is None
    assert again["reason"] == "nothing_to_summarize"


async def test_a_compact_whose_range_another_took_while_it_waited_says_so(
    api: httpx.AsyncClient, app: FastAPI, app_db: AsyncSession, sid: str
) -> None:
    """Two `compact` calls queue for the session while the test holds it: the first summarizes
    the range, the second finds it summarized by the other."""
    await append(api, sid, user("book a train"), user("and a hotel"))
    session = await store.get_session(app_db, DEVELOPMENT_TENANT, sid)
    await app_db.close()
    locks = app.state.summarization.locks
    async with locks.hold(session.id, WAIT_SECONDS):
        first = asyncio.create_task(compact(api, sid, keep_last_n=0))
        await _until_waiting(locks, session.id, 1)
        second = asyncio.create_task(compact(api, sid, keep_last_n=0))
        await _until_waiting(locks, session.id, 2)
    answers = await asyncio.gather(first, second)
    assert answers[0]["summary"] is not None and answers[0]["reason"] is None
    assert answers[1]["summary"] is None
    assert answers[1]["reason"] == "already_summarized"


async def _until_waiting(locks: Any, session_key: int, count: int) -> None:
    """Until `count` summarizations wait for the session's lock (asyncio's lock queues its
    waiters first come, first served)."""
    for _ in range(round(WAIT_SECONDS / POLL_SECONDS)):
        if len(getattr(locks._local[session_key], "_waiters", None) or ()) >= count:
            return
        await asyncio.sleep(POLL_SECONDS)
    raise AssertionError(f"{count} compact calls did not queue within {WAIT_SECONDS} s")
