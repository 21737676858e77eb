"""A session moved to a new id (a wire's branch keeps its old branch this way) keeps every row.

The session key is derived from the session id, so a new id is a new key: the move copies the
session's messages, summaries (superseded ones included), links, job and stored responses under
the new key with their row ids, deletes the old, and `verify` finds the moved session sound.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api import store
from api.db.models import SummaryJob
from api.errors import SessionNotFound
from api.store import audit
from api.store.keys import session_key
from api.store.moves import move_session
from scripts import verify
from tests.scripts.builders import Seeded

NEW_ID = "chat-1:branch-moved"


def shapes(summaries: list[store.SummaryRow]) -> list[tuple[object, ...]]:
    """What a summary is apart from its session."""
    return [(*summary[:1], *summary[2:]) for summary in summaries]


async def test_a_moved_session_keeps_every_row_under_its_new_key_and_passes_verify(
    sessionmaker: async_sessionmaker[AsyncSession], db: AsyncSession, seeded: Seeded
) -> None:
    await store.enqueue_job(db, seeded.session_key, "proactive", "message_limit")
    await db.commit()
    assert await store.claim_job(db, timedelta(minutes=5)) is not None
    await db.commit()
    session = await store.get_session(db, "default", seeded.external_id)
    summaries = await audit.session_summaries(db, session.id)
    links = [await store.summary_message_ids(db, summary) for summary in summaries]

    moved = await move_session(db, session, NEW_ID)
    await db.commit()

    assert moved.id == session_key("default", NEW_ID)
    assert moved._replace(id=session.id, external_id=session.external_id) == session
    with pytest.raises(SessionNotFound):
        await store.get_session(db, "default", seeded.external_id)
    messages = await store.messages_in_range(db, moved.id, 0, moved.last_seq)
    assert [m.id for m in messages] == [m.id for m in seeded.messages]
    moved_summaries = await audit.session_summaries(db, moved.id)
    assert shapes(moved_summaries) == shapes(summaries)
    assert [await store.summary_message_ids(db, s) for s in moved_summaries] == links
    job = (await db.execute(select(SummaryJob).where(SummaryJob.session_id == moved.id))).one()[0]
    assert (job.status, job.locked_until) == ("pending", None)
    check = await verify.verify_session(sessionmaker, moved.id)
    assert check is not None and check.violations == []
