"""Migration 0013 keys the sessions stored before it by their names, on both databases.

Rows written at revision 0012 (sessions with the old sequential keys, their messages, a
summary and its links, a job, a lease and a stored response) are found after the upgrade under
each session's derived key, every row id kept, through the store functions the service uses;
a downgrade keeps them, and a second upgrade keys them the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from api import store
from api.db.engine import create_engine, create_sessionmaker
from api.db.models import SummarizationLease, SummaryJob, SummaryMessage
from api.store.keys import session_key
from api.store.responses import get_response
from tests.conftest import run_alembic

BEFORE = "0012"

ROWS_AT_0012 = (
    "INSERT INTO sessions (id, tenant, external_id, metadata, settings, last_seq, pinned_seq, "
    "removed_count, format, created_at, updated_at) VALUES "
    "(1, 'default', 'chat-1', '{}', '{}', 2, 0, 0, 'openai', :at, :at), "
    "(2, 'default', 'chat-2', '{}', '{}', 1, 0, 0, 'openai', :at, :at)",
    "INSERT INTO messages (id, session_id, seq, role, content, token_count, created_at) VALUES "
    "(10, 1, 1, 'user', 'the code word is heron', 6, :at), "
    "(11, 1, 2, 'assistant', 'noted', 2, :at), "
    "(12, 2, 1, 'user', 'another session', 3, :at)",
    "INSERT INTO session_summaries (id, session_id, summary_text, summary_prompt, model, "
    "temperature, target_summary_tokens, keep_last_n, message_count, approx_tokens, "
    "first_message_id, last_message_id, first_seq, last_seq, first_message_at, "
    "last_message_at, level, metadata, created_at) VALUES "
    "(5, 1, 'heron', 'p', 'm', 0, 100, 0, 2, 1, 10, 11, 1, 2, :at, :at, 0, '{}', :at)",
    "INSERT INTO session_summary_messages (summary_id, message_id) VALUES (5, 10), (5, 11)",
    "INSERT INTO summary_jobs (id, session_id, trigger, reason, status, attempts, run_after, "
    "created_at) VALUES (7, 2, 'proactive', 'message_limit', 'pending', 0, :at, :at)",
    "INSERT INTO summarization_leases (session_id, token, expires_at) VALUES (1, 99, :at)",
    "INSERT INTO responses (id, tenant, session_id, first_seq, last_seq, input_count, body, "
    "created_at) VALUES ('resp_kept', 'default', 1, 1, 2, 1, '{}', :at)",
)

both_backends = pytest.mark.parametrize(
    "empty_database_url", ["sqlite", "postgresql"], indirect=True
)


@pytest.fixture
async def upgraded(empty_database_url: str) -> AsyncIterator[str]:
    """A database with rows written at revision 0012 (timestamps as each driver takes them),
    then upgraded to head."""
    url = empty_database_url
    await run_alembic(url, BEFORE)
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    at = moment if url.startswith("postgresql") else "2026-01-01 00:00:00"
    engine = create_engine(url)
    async with engine.begin() as connection:
        for statement in ROWS_AT_0012:
            await connection.execute(text(statement), {"at": at})
    await engine.dispose()
    await run_alembic(url, "head")
    yield url


async def keyed_rows(db: AsyncSession) -> dict[str, object]:
    """What the store finds of the rows written before the upgrade."""
    first = await store.get_session(db, "default", "chat-1")
    second = await store.get_session(db, "default", "chat-2")
    summary = await store.get_summary_by_id(db, first.id, 5)
    assert summary is not None
    response = await get_response(db, "default", "resp_kept")
    jobs = list(await db.scalars(select(SummaryJob.session_id)))
    return {
        "keys": (first.id, second.id),
        "messages": [m.id for m in await store.messages_in_range(db, first.id, 0, 2)],
        "other": [m.id for m in await store.messages_in_range(db, second.id, 0, 1)],
        "links": await store.summary_message_ids(db, summary),
        "response": None if response is None else response.session_key,
        "jobs": jobs,
        "leases": int(await db.scalar(select(func.count()).select_from(SummarizationLease)) or 0),
        "unlinked": int(
            await db.scalar(
                select(func.count())
                .select_from(SummaryMessage)
                .where(SummaryMessage.session_id != first.id)
            )
            or 0
        ),
    }


@both_backends
async def test_the_upgrade_keys_every_session_by_its_name_and_keeps_every_row(
    upgraded: str,
) -> None:
    first, second = session_key("default", "chat-1"), session_key("default", "chat-2")
    engine = create_engine(upgraded)
    try:
        async with create_sessionmaker(engine)() as db:
            found = await keyed_rows(db)
    finally:
        await engine.dispose()
    assert found == {
        "keys": (first, second),
        "messages": [10, 11],
        "other": [12],
        "links": [10, 11],
        "response": first,
        "jobs": [second],
        "leases": 1,
        "unlinked": 0,
    }


@both_backends
async def test_a_downgrade_and_a_second_upgrade_keep_the_rows_and_their_keys(
    upgraded: str,
) -> None:
    await run_alembic(upgraded, BEFORE, verb="downgrade")
    engine = create_engine(upgraded)
    try:
        async with engine.connect() as connection:
            counts = [
                await connection.scalar(text(f"SELECT count(*) FROM {table}"))
                for table in ("sessions", "messages", "session_summary_messages", "responses")
            ]
        assert counts == [2, 3, 2, 1]
        await run_alembic(upgraded, "head")
        async with create_sessionmaker(engine)() as db:
            found = await keyed_rows(db)
    finally:
        await engine.dispose()
    assert found["keys"] == (session_key("default", "chat-1"), session_key("default", "chat-2"))
    assert (found["messages"], found["links"], found["jobs"]) == (
        [10, 11],
        [10, 11],
        [session_key("default", "chat-2")],
    )


def test_a_session_key_is_a_positive_64_bit_integer_that_depends_on_tenant_and_id() -> None:
    keys = {
        session_key("default", "chat-1"),
        session_key("other", "chat-1"),
        session_key("default", "chat-2"),
        session_key('default", "chat', "1"),
    }
    assert len(keys) == 4
    assert all(0 < key < 2**63 for key in keys)
    assert session_key("default", "chat-1") == session_key("default", "chat-1")
