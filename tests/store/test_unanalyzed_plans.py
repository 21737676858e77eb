"""The hot path's cost does not depend on planner statistics (PostgreSQL).

A session bulk-appended right after its creation is exactly what a production table's
statistics have not seen yet (autoanalyze waits for a tenth of the table to change): the
planner then believes the session holds about one row. Every statement of the history load and
of the append must read a bounded page of it all the same. The test records the statements
the service really runs (on the driver's connection), then runs each under
`EXPLAIN (ANALYZE, BUFFERS)` on the unanalyzed table and bounds the rows every plan node read.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy import event, text

from api import store
from api.db.engine import create_engine, create_sessionmaker
from api.db.models import utcnow
from api.main import create_app
from api.store import background as background_statements
from api.store import console as console_reads
from api.store.keys import session_key
from api.store.tail import MAX_TAIL_PAGE
from tests.conftest import QUIET, make_settings, migrated_database

SESSION_SIZE = 50_000
"""Messages bulk-loaded into the session the statistics have not seen."""

ANALYZED_SESSIONS = 200
"""Small sessions the statistics have seen, so the big one is unknown to them (not rare)."""

ROW_BOUND = 2 * MAX_TAIL_PAGE
"""Most rows any plan node may produce or filter out: the largest page of a history load's
walk back twice, never the session (SESSION_SIZE)."""

TABLES = ("sessions", "messages", "session_summaries", "summary_jobs")


@pytest.fixture(scope="module")
async def unanalyzed_url(
    tmp_path_factory: pytest.TempPathFactory, postgres_available: bool
) -> AsyncIterator[str]:
    """A database whose statistics know small sessions, then a big session bulk-appended."""
    async with migrated_database(
        "postgresql", tmp_path_factory.mktemp("plans"), postgres_available
    ) as url:
        engine = create_engine(url)
        async with engine.begin() as connection:
            for table in TABLES:  # no autoanalyze may catch up while the test runs
                await connection.execute(
                    text(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
                )
            await connection.execute(
                text(
                    "INSERT INTO sessions (id, tenant, external_id, metadata, settings, last_seq, "
                    "pinned_seq, removed_count, format, created_at, updated_at) "
                    "VALUES (:id, 'default', :name, '{}', '{}', 20, 0, 0, 'openai', now(), now())"
                ),
                [
                    {"id": session_key("default", f"small-{n}"), "name": f"small-{n}"}
                    for n in range(1, ANALYZED_SESSIONS + 1)
                ],
            )
            await connection.execute(
                text(
                    "INSERT INTO messages (session_id, seq, role, content, token_count, "
                    "created_at) SELECT s.id, n, 'user', 'small ' || n, 5, now() "
                    "FROM sessions AS s, generate_series(1, 20) AS n"
                )
            )
        async with engine.connect() as connection:
            await connection.execute(text("ANALYZE"))
        async with engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO sessions (id, tenant, external_id, metadata, settings, last_seq, "
                    "pinned_seq, removed_count, format, created_at, updated_at) VALUES "
                    f"({session_key('default', 'big')}, 'default', 'big', '{{}}', '{{}}', "
                    f"{SESSION_SIZE}, 0, 0, 'openai', now(), now())"
                )
            )
            await connection.execute(
                text(
                    "INSERT INTO messages (session_id, seq, role, content, client_id, "
                    "token_count, created_at) SELECT s.id, n, "
                    "CASE WHEN n % 2 = 1 THEN 'user' ELSE 'assistant' END, "
                    "'message number ' || n, 'c' || n, 6, now() "
                    f"FROM sessions AS s, generate_series(1, {SESSION_SIZE}) AS n "
                    "WHERE s.external_id = 'big'"
                )
            )
        await engine.dispose()
        yield url


@pytest.fixture
async def api(unanalyzed_url: str) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(make_settings(unanalyzed_url, **QUIET))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://localhost"
        ) as http,
    ):
        yield http


@contextmanager
def recorded_statements() -> Iterator[list[tuple[str, tuple[Any, ...]]]]:
    """Every statement run on an asyncpg connection's `fetch`, `fetchrow` or `fetchval`
    meanwhile (the driver's hot path), with its arguments."""
    statements: list[tuple[str, tuple[Any, ...]]] = []
    names = ("fetch", "fetchrow", "fetchval")
    originals = {name: getattr(asyncpg.Connection, name) for name in names}

    def recording(original: Any) -> Any:
        async def run(self: asyncpg.Connection, query: str, *args: Any, **kwargs: Any) -> Any:
            statements.append((query, args))
            return await original(self, query, *args, **kwargs)

        return run

    for name, original in originals.items():
        setattr(asyncpg.Connection, name, recording(original))
    try:
        yield statements
    finally:
        for name, original in originals.items():
            setattr(asyncpg.Connection, name, original)


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


async def widest_node(url: str, query: str, args: tuple[Any, ...]) -> tuple[int, str]:
    """The most rows one node of `query`'s plan produced or filtered out, run for real (in a
    transaction rolled back, so an append stores nothing), and that node's type."""
    connection = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
    try:
        transaction = connection.transaction()
        await transaction.start()
        try:
            explained = await connection.fetchval(
                f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {query}", *args
            )
        finally:
            await transaction.rollback()
    finally:
        await connection.close()
    plan = json.loads(explained)[0]["Plan"]
    return max(
        (
            node["Actual Rows"] * node["Actual Loops"]
            + node.get("Rows Removed by Filter", 0)
            + node.get("Rows Removed by Index Recheck", 0),
            node["Node Type"],
        )
        for node in _nodes(plan)
    )


async def assert_bounded(url: str, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
    assert statements, "the driver ran nothing: the hot path was not recorded"
    for query, args in statements:
        rows, node = await widest_node(url, query, args)
        assert rows <= ROW_BOUND, f"{node} read {rows} rows of:\n{query}"


async def test_a_history_load_reads_a_page_of_an_unanalyzed_session(
    api: httpx.AsyncClient, unanalyzed_url: str
) -> None:
    with recorded_statements() as statements:
        answer = await api.get("/v1/sessions/big/history", params={"max_tokens": 8000})
    assert answer.status_code == 200, answer.text
    assert answer.json()["messages"][-1]["content"] == f"message number {SESSION_SIZE}"
    await assert_bounded(unanalyzed_url, statements)


async def test_an_append_reads_a_page_of_an_unanalyzed_session(
    api: httpx.AsyncClient, unanalyzed_url: str
) -> None:
    batch = {"messages": [{"role": "user", "content": "one more", "client_id": "fresh-1"}]}
    with recorded_statements() as statements:
        answer = await api.post("/v1/sessions/big/messages", json=batch)
    assert answer.status_code == 201, answer.text
    await assert_bounded(unanalyzed_url, statements)


async def test_an_append_without_client_ids_reads_a_page_of_an_unanalyzed_session(
    api: httpx.AsyncClient, unanalyzed_url: str
) -> None:
    batch = {"messages": [{"role": "assistant", "content": "an answer"}]}
    with recorded_statements() as statements:
        answer = await api.post("/v1/sessions/big/messages", json=batch)
    assert answer.status_code == 201, answer.text
    await assert_bounded(unanalyzed_url, statements)


async def test_an_append_repeating_a_client_id_reads_a_page(
    api: httpx.AsyncClient, unanalyzed_url: str
) -> None:
    repeat = {"messages": [{"role": "user", "content": "message number 7", "client_id": "c7"}]}
    with recorded_statements() as statements:
        answer = await api.post("/v1/sessions/big/messages", json=repeat)
    assert answer.status_code == 201, answer.text
    assert answer.json()["messages"][0]["seq"] == 7
    await assert_bounded(unanalyzed_url, statements)


async def test_a_history_load_after_a_removal_counts_what_it_left_out_in_a_page(
    api: httpx.AsyncClient, unanalyzed_url: str
) -> None:
    listed = await api.get("/v1/sessions/big/messages", params={"after_seq": 99, "limit": 1})
    removed = listed.json()["messages"][0]
    assert (await api.delete(f"/v1/sessions/big/messages/{removed['id']}")).status_code == 204
    with recorded_statements() as statements:
        answer = await api.get("/v1/sessions/big/history", params={"max_tokens": 8000})
    assert answer.status_code == 200, answer.text
    history = answer.json()
    in_context = len(history["context"]) - 1  # behind the truncation marker
    # two appended by the tests above (the repeat stores nothing), one removed
    assert history["truncated_messages"] == SESSION_SIZE + 1 - in_context
    await assert_bounded(unanalyzed_url, statements)


@pytest.mark.parametrize(
    ("direction", "cursor"), [("asc", 0), ("asc", 30_000), ("desc", None), ("desc", 30_000)]
)
async def test_a_listing_reads_a_page_of_an_unanalyzed_session(
    unanalyzed_url: str, direction: str, cursor: int | None
) -> None:
    """The messages listing and the conversation items listing (both orders, from the start
    or from a cursor) read seq windows, never the session."""
    engine = create_engine(unanalyzed_url)
    statements: list[tuple[str, tuple[Any, ...]]] = []

    def record(*args: Any) -> None:
        statement, parameters = args[2], args[3]
        if "FROM messages" in statement:
            statements.append((statement, tuple(parameters)))

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        async with create_sessionmaker(engine)() as db:
            session = await store.get_session(db, "default", "big")
            if direction == "asc":
                rows = await store.messages_in_range(
                    db, session.id, cursor or 0, session.last_seq, limit=21
                )
                assert [row.seq for row in rows] == list(
                    range((cursor or 0) + 1, (cursor or 0) + 22)
                )
            else:
                before = cursor if cursor is not None else session.last_seq + 1
                rows = await store.messages_before(db, session.id, before, limit=21)
                assert [row.seq for row in rows] == list(range(before - 1, before - 22, -1))
    finally:
        await engine.dispose()
    await assert_bounded(unanalyzed_url, statements)


async def test_a_summarys_sources_page_reads_a_page_of_an_unanalyzed_session(
    unanalyzed_url: str,
) -> None:
    """The console's page of a summary linking all 50,000 messages reads the page's seqs, each
    probed for its link, never the summary's every link."""
    engine = create_engine(unanalyzed_url)
    statements: list[tuple[str, tuple[Any, ...]]] = []

    def record(*args: Any) -> None:
        statement, parameters = args[2], args[3]
        if "FROM messages" in statement:
            statements.append((statement, tuple(parameters)))

    try:
        async with engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO session_summaries (session_id, summary_text, summary_prompt, "
                    "model, temperature, target_summary_tokens, keep_last_n, message_count, "
                    "approx_tokens, first_message_id, last_message_id, first_seq, last_seq, "
                    "first_message_at, last_message_at, level, metadata, created_at) "
                    "SELECT s.id, 'all of it', 'p', 'm', 0, 1, 0, s.last_seq, 1, 0, 0, 1, "
                    "s.last_seq, now(), now(), 0, '{}', now() FROM sessions AS s "
                    "WHERE s.external_id = 'big'"
                )
            )
            await connection.execute(
                text(
                    "INSERT INTO session_summary_messages (session_id, summary_id, message_id) "
                    "SELECT u.session_id, u.id, m.id FROM session_summaries AS u "
                    "JOIN messages AS m ON m.session_id = u.session_id "
                    "WHERE u.summary_text = 'all of it'"
                )
            )
        async with create_sessionmaker(engine)() as db:
            session = await store.get_session(db, "default", "big")
            [summary] = await store.live_summaries(db, session.id)
            event.listen(engine.sync_engine, "before_cursor_execute", record)
            rows = await console_reads.summary_sources(db, summary, 30_001, 30_200)
            event.remove(engine.sync_engine, "before_cursor_execute", record)
        assert [row.seq for row in rows] == list(range(30_001, 30_201))
        await assert_bounded(unanalyzed_url, statements)
    finally:
        async with engine.begin() as connection:
            await connection.execute(
                text("DELETE FROM session_summaries WHERE summary_text = 'all of it'")
            )
        await engine.dispose()


async def test_the_background_claim_and_sweep_read_only_the_rows_they_take(
    unanalyzed_url: str,
) -> None:
    """Many ended background responses, unseen by the statistics: a claim reads the
    unfinished rows only, the retention sweep only those that ended before its cutoff."""
    engine = create_engine(unanalyzed_url)
    try:
        async with engine.begin() as connection:
            await connection.execute(
                text("ALTER TABLE background_responses SET (autovacuum_enabled = false)")
            )
            await connection.execute(
                text(
                    "INSERT INTO background_responses (key, id, tenant, status, body, attempts, "
                    "created_at, updated_at) SELECT n, 'resp_' || n, 'default', CASE WHEN "
                    "n % 5000 = 0 THEN 'queued' WHEN n % 2 = 0 THEN 'failed' ELSE 'cancelled' "
                    "END, '{}', 0, now(), now() FROM generate_series(1, :rows) AS n"
                ),
                {"rows": SESSION_SIZE},
            )
        now = utcnow()
        statements = [
            background_statements.claim_candidates(now),
            background_statements.ended_before_statement(now - timedelta(days=1), 100),
        ]
        for statement in statements:
            query = str(
                statement.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True})
            )
            rows, node = await widest_node(unanalyzed_url, query, ())
            assert rows <= ROW_BOUND, f"{node} read {rows} rows of:\n{query}"
    finally:
        async with engine.begin() as connection:
            await connection.execute(text("DELETE FROM background_responses"))
        await engine.dispose()
