"""The history loader's two reads: the session with its flags, then one statement that reads
only the parts the session has (a pinned prefix, live summaries), on both databases."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from api import store
from api.db import driver
from api.db.driver import DriverStatement
from api.db.engine import create_read_sessionmaker
from api.store.loader import load_statement
from api.store.tail import TAIL_PAGE_SIZE
from tests.helpers import append_batch, summary_draft

TENANT = "default"


def chat(role: str, text: str) -> store.NewMessage:
    return store.NewMessage(role, text, None, None, None, None, None, None, 5)


async def start_of(engine: AsyncEngine, external_id: str) -> store.HistoryStart:
    async with create_read_sessionmaker(engine)() as reading:
        return await store.session_for_history(reading, TENANT, external_id)


async def load(engine: AsyncEngine, start: store.HistoryStart) -> store.LoadedRows:
    async with create_read_sessionmaker(engine)() as reading:
        return await store.load_rows(reading, start.session, 3, None, summarized=start.summarized)


async def test_the_session_read_says_whether_a_live_summary_exists(
    engine: AsyncEngine, db: AsyncSession
) -> None:
    await append_batch(db, TENANT, "s", [chat("user", f"m{i}") for i in range(6)])
    assert not (await start_of(engine, "s")).summarized
    session = (await start_of(engine, "s")).session
    async with db.begin():
        await store.save_summary(db, session.id, summary_draft(1, 4))
    assert (await start_of(engine, "s")).summarized


async def test_a_load_started_before_a_summary_landed_shows_the_messages_it_covers(
    engine: AsyncEngine, db: AsyncSession
) -> None:
    await append_batch(
        db, TENANT, "s", [chat("system", "rules"), *[chat("user", f"m{i}") for i in range(6)]]
    )
    before = await start_of(engine, "s")
    async with db.begin():
        await store.save_summary(db, before.session.id, summary_draft(2, 5))

    earlier = await load(engine, before)  # as if it had run before the summary landed
    assert earlier.summaries == []
    assert [m.content for m in earlier.pinned] == ["rules"]
    assert [m.content for m in earlier.messages] == [f"m{i}" for i in range(6)]

    now = await load(engine, await start_of(engine, "s"))
    assert [s.last_seq for s in now.summaries] == [5]
    assert [m.content for m in now.pinned] == ["rules"]
    assert [m.content for m in now.messages] == ["m4", "m5"]


async def test_a_load_whose_summaries_were_erased_meanwhile_shows_the_messages(
    engine: AsyncEngine, db: AsyncSession
) -> None:
    await append_batch(db, TENANT, "s", [chat("user", f"m{i}") for i in range(6)])
    unsummarized = await start_of(engine, "s")
    ids = {m.content: m.id for m in (await load(engine, unsummarized)).messages}
    async with db.begin():
        await store.save_summary(db, unsummarized.session.id, summary_draft(1, 4))
    started = await start_of(engine, "s")
    assert started.summarized
    async with db.begin():  # m3 is under the summary: removing it erases the summary
        assert await store.remove(db, started.session.id, ids["m3"]) is not None

    rows = await load(engine, started)  # read as summarized; its only summary is gone now
    assert rows.summaries == []
    assert [m.content for m in rows.messages] == ["m0", "m1", "m2", "m4", "m5"]
    assert not (await start_of(engine, "s")).summarized  # an erased summary is not live


async def test_a_load_asking_for_no_summaries_shows_every_message(
    engine: AsyncEngine, db: AsyncSession
) -> None:
    await append_batch(db, TENANT, "s", [chat("user", f"m{i}") for i in range(6)])
    session = (await start_of(engine, "s")).session
    async with db.begin():
        await store.save_summary(db, session.id, summary_draft(1, 4))
    started = await start_of(engine, "s")
    async with create_read_sessionmaker(engine)() as reading:
        for max_tokens in (None, 1000):
            rows = await store.load_rows(
                reading, started.session, 0, max_tokens, summarized=started.summarized
            )
            assert rows.summaries == [] and rows.not_loaded == 0
            assert [m.content for m in rows.messages] == [f"m{i}" for i in range(6)]


def test_a_session_without_summaries_or_prefix_is_loaded_by_one_index_scan() -> None:
    dialect = postgresql.asyncpg.dialect()  # type: ignore[no-untyped-call]

    def sql(pinned_seq: int, summarized: bool) -> str:
        now = datetime.now(UTC)
        session = store.SessionRow(
            1, TENANT, "s", {}, {}, 9, pinned_seq, now, now, 0, None, None, None, None
        )
        return DriverStatement.compile(load_statement(session, summarized), dialect).sql

    bare = sql(0, summarized=False)
    assert "session_summaries" not in bare and "UNION" not in bare
    assert "UNION" in sql(1, summarized=False) and "session_summaries" not in sql(1, False)
    assert "session_summaries" in sql(0, summarized=True)


async def test_a_budgeted_load_walks_back_across_a_long_run_of_removed_messages(
    engine: AsyncEngine, db: AsyncSession
) -> None:
    # every page's window is bounded by seqs, and tombstones keep theirs: the walk widens its
    # window below a short one until it has found enough messages
    outcome = await append_batch(db, TENANT, "s", [chat("user", f"m{i}") for i in range(400)])
    removed = [m.id for m in outcome.messages[20:390]]
    async with db.begin():
        for message_id in removed:
            assert await store.remove(db, outcome.session.id, message_id) is not None
    started = await start_of(engine, "s")
    async with create_read_sessionmaker(engine)() as reading:
        rows = await store.load_rows(reading, started.session, 3, 100, summarized=False)
        everything = await store.load_rows(reading, started.session, 3, 10**6, summarized=False)
    kept = [f"m{i}" for i in (*range(20), *range(390, 400))]
    assert [m.content for m in everything.messages] == kept
    assert everything.not_loaded == 0
    assert [m.content for m in rows.messages] == kept[-len(rows.messages) :]
    assert 100 // 5 < len(rows.messages) < len(kept)  # past the budget, at a message
    assert rows.not_loaded == len(kept) - len(rows.messages)


def sized(role: str, text: str, tokens: int) -> store.NewMessage:
    return store.NewMessage(role, text, None, None, None, None, None, None, tokens)


async def test_a_page_below_the_first_reads_what_the_budget_takes_not_a_full_page(
    engine: AsyncEngine, db: AsyncSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    # older messages far larger than the newest page: a page sized by the newest ones' counts
    # would read a thousand large messages for a budget that takes three of them
    older = [sized("user", f"large {i}", 10_000) for i in range(1500)]
    newer = [sized("user", f"small {i}", 5) for i in range(TAIL_PAGE_SIZE)]
    for start in range(0, len(older), 500):
        await append_batch(db, TENANT, "s", older[start : start + 500])
    await append_batch(db, TENANT, "s", newer)
    read: list[int] = []
    fetch = driver.read

    async def counted(*args: Any, **kwargs: Any) -> list[Any]:
        rows = await fetch(*args, **kwargs)
        read.append(len(rows))
        return rows

    monkeypatch.setattr(driver, "read", counted)
    started = await start_of(engine, "s")
    budget = TAIL_PAGE_SIZE * 5 + 25_000
    async with create_read_sessionmaker(engine)() as reading:
        rows = await store.load_rows(reading, started.session, 3, budget, summarized=False)
    assert [m.content for m in rows.messages] == [
        *(f"large {i}" for i in range(1497, 1500)),
        *(f"small {i}" for i in range(TAIL_PAGE_SIZE)),
    ]
    assert read == [1, TAIL_PAGE_SIZE, 3]  # the session, the first page, three large ones


async def test_a_budget_passed_at_a_tool_result_reads_on_to_its_call(
    engine: AsyncEngine, db: AsyncSession
) -> None:
    call = store.NewMessage(
        "assistant",
        None,
        None,
        None,
        [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        None,
        None,
        None,
        5,
    )
    result = store.NewMessage("tool", "out", None, None, None, "c1", None, None, 5)
    history = [
        *(sized("user", f"old {i}", 5) for i in range(200)),
        call,
        result,
        *(sized("user", f"new {i}", 5) for i in range(100)),
    ]
    await append_batch(db, TENANT, "s", history)
    started = await start_of(engine, "s")
    async with create_read_sessionmaker(engine)() as reading:
        # the second page ends at the tool result, which passes the budget: its call is read
        # by a third
        rows = await store.load_rows(reading, started.session, 3, 5 * 100 + 1, summarized=False)
    assert [m.role for m in rows.messages[:2]] == ["assistant", "tool"]
    assert len(rows.messages) == 102
