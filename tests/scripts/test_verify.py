"""scripts.verify on both databases: clean sessions pass; each kind of corruption is named."""

from __future__ import annotations

import hashlib
import io
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from api import store
from api.db.engine import create_engine, create_sessionmaker
from api.db.models import Message
from api.store import audit
from api.store.keys import session_key
from scripts import verify
from tests.conftest import migrated_database
from tests.helpers import append_batch, run_verify, trace
from tests.scripts.builders import (
    CONVERSATION,
    REMOVALS,
    Removed,
    Seeded,
    new_message,
    seed_session,
)


async def corrupt(db: AsyncSession, sql: str, **params: Any) -> None:
    await db.execute(text(sql), params)
    await db.commit()


def report_lines(out: str, kind: str) -> list[str]:
    """The report lines of one kind of violation."""
    return [line for line in out.splitlines() if line.split()[1:2] == [kind]]


# --- healthy --------------------------------------------------------------------------------


async def test_healthy_sessions_pass_streamed_in_pages(
    database_url: str, db: AsyncSession, seeded: Seeded
) -> None:
    await store.create_session(db, "default", "empty", {}, {})
    await db.commit()
    await append_batch(db, "acme", "unsummarized", [new_message(CONVERSATION[0])])
    await seed_session(db, "chat-2")

    code, out, err = await run_verify(database_url, "--batch-size", "2")

    assert (code, err) == (0, "")
    assert out == "Checked 4 sessions (21 messages, 6 summaries): no violations.\n"


async def test_one_session_is_checked_alone(database_url: str, seeded: Seeded) -> None:
    code, out, _ = await run_verify(database_url, "--session", "chat-1")

    assert code == 0
    assert out == "Checked 1 session (10 messages, 3 summaries): no violations.\n"


async def test_json_gives_the_totals_and_every_violation(
    database_url: str, db: AsyncSession, seeded: Seeded
) -> None:
    code, out, _ = await run_verify(database_url, "--json")
    assert code == 0
    assert json.loads(out) == {
        "sessions": 1,
        "messages": 10,
        "summaries": 3,
        "violations": [],
        "bad_sessions": 0,
        "removed": 0,
        "erased": 0,
    }
    await corrupt(
        db,
        "DELETE FROM session_summary_messages WHERE summary_id = :s AND message_id = :m",
        s=seeded.rollup.id,
        m=seeded.messages[2].id,
    )
    code, out, _ = await run_verify(database_url, "--json")
    report = json.loads(out)
    assert code == 1
    assert {violation["kind"] for violation in report["violations"]} == {"links", "coverage"}
    assert {violation["session"] for violation in report["violations"]} == {"default/chat-1"}
    assert (len(report["violations"]), report["bad_sessions"]) == (2, 1)


async def test_an_unknown_session_exits_2(database_url: str, seeded: Seeded) -> None:
    code, out, err = await run_verify(database_url, "--session", "nope")

    assert (code, out) == (2, "")
    assert err == "verify: no session 'nope' in any tenant\n"


async def test_tenant_restricts_the_session_lookup(database_url: str, seeded: Seeded) -> None:
    code, out, err = await run_verify(database_url, "--session", "chat-1", "--tenant", "acme")

    assert (code, out) == (2, "")
    assert err == "verify: no session 'chat-1' in tenant 'acme'\n"


async def test_without_tenant_a_session_is_found_in_whichever_tenant_has_it(
    database_url: str, db: AsyncSession
) -> None:
    await seed_session(db, "chat-9", tenant="acme")
    await seed_session(db, "chat-1")

    code, out, err = await run_verify(database_url, "--session", "chat-9")

    assert (code, err) == (0, "")
    assert out == "Checked 1 session (10 messages, 3 summaries): no violations.\n"


async def test_a_session_id_in_several_tenants_needs_tenant(
    database_url: str, db: AsyncSession, seeded: Seeded
) -> None:
    await seed_session(db, "chat-1", tenant="acme")

    code, out, err = await run_verify(database_url, "--session", "chat-1")
    chosen = await run_verify(database_url, "--session", "chat-1", "--tenant", "acme")

    assert (code, out) == (2, "")
    assert err == (
        "verify: session 'chat-1' exists in 2 tenants ('acme', 'default'): "
        "pass --tenant to choose one\n"
    )
    assert chosen == (0, "Checked 1 session (10 messages, 3 summaries): no violations.\n", "")


# --- corrupted on purpose -------------------------------------------------------------------


async def test_a_deleted_link_is_named(database_url: str, db: AsyncSession, seeded: Seeded) -> None:
    message = seeded.messages[2]
    await corrupt(
        db,
        "DELETE FROM session_summary_messages WHERE summary_id = :s AND message_id = :m",
        s=seeded.rollup.id,
        m=message.id,
    )

    code, out, _ = await run_verify(database_url)

    assert code == 1
    [links] = report_lines(out, "links")
    assert links.startswith("default/chat-1  links")
    assert (
        f"summary {seeded.rollup.id} (seqs 1..8) does not link 1 of its 8 messages: "
        f"seq 3 (message {message.id})"
    ) in links
    [coverage] = report_lines(out, "coverage")
    assert f"seq 3 (message {message.id}) is in 0" in coverage
    assert out.endswith("2 violations in 1 session.\n")


async def test_an_overlapping_live_summary_is_named(
    database_url: str, db: AsyncSession, seeded: Seeded
) -> None:
    await corrupt(
        db, "UPDATE session_summaries SET superseded_by = NULL WHERE id = :s", s=seeded.second.id
    )

    code, out, _ = await run_verify(database_url)

    assert code == 1
    [overlap] = report_lines(out, "live_ranges")
    assert (
        f"live summary {seeded.rollup.id} (seqs 1..8) and summary {seeded.second.id} "
        "(seqs 5..8) overlap on seqs 5..8"
    ) in overlap
    [coverage] = report_lines(out, "coverage")
    assert "4 messages up to seq 8" in coverage and "is in 2" in coverage


async def test_a_gap_in_seqs_is_named(database_url: str, db: AsyncSession, seeded: Seeded) -> None:
    await corrupt(db, "DELETE FROM messages WHERE id = :m", m=seeded.messages[8].id)

    code, out, _ = await run_verify(database_url)

    assert code == 1
    assert report_lines(out, "seqs") == ["default/chat-1  seqs           seq 9 missing"]


async def test_a_last_seq_behind_the_messages_is_named(
    database_url: str, db: AsyncSession, seeded: Seeded
) -> None:
    await corrupt(db, "UPDATE sessions SET last_seq = 7 WHERE id = :s", s=seeded.session_key)

    code, out, _ = await run_verify(database_url)

    assert code == 1
    [seqs] = report_lines(out, "seqs")
    assert "sessions.last_seq is 7 but the newest message has seq 10" in seqs
    [live] = report_lines(out, "live_ranges")
    assert "live summaries reach seq 8, past sessions.last_seq 7" in live


async def test_a_broken_superseded_chain_is_named(
    database_url: str, db: AsyncSession, seeded: Seeded
) -> None:
    first, second = seeded.first.id, seeded.second.id
    await corrupt(
        db, "UPDATE session_summaries SET superseded_by = :p WHERE id = :s", p=second, s=first
    )

    code, out, _ = await run_verify(database_url)

    assert code == 1
    chain = "\n".join(report_lines(out, "chain"))
    assert f"summary {first} (seqs 1..4) is superseded by summary {second} of level 0" in chain
    assert f"superseded by summary {second}, whose seqs 5..8 omit it" in chain
    assert f"roll-up summary {seeded.rollup.id} (seqs 1..8) absorbed summaries covering 5..8" in (
        chain
    )


async def test_a_chain_into_another_session_is_refused_by_the_schema(
    db: AsyncSession, seeded: Seeded
) -> None:
    """`superseded_by`'s foreign key includes the session key, so no chain leaves its session."""
    other = await seed_session(db, "chat-2")
    with pytest.raises(IntegrityError):
        await corrupt(
            db,
            "UPDATE session_summaries SET superseded_by = :p WHERE id = :s",
            p=other.rollup.id,
            s=seeded.first.id,
        )


async def test_a_superseded_cycle_is_named(
    database_url: str, db: AsyncSession, seeded: Seeded
) -> None:
    await corrupt(
        db,
        "UPDATE session_summaries SET superseded_by = :p WHERE id = :s",
        p=seeded.first.id,
        s=seeded.rollup.id,
    )

    code, out, _ = await run_verify(database_url)

    assert code == 1
    loop = f"{seeded.first.id} -> {seeded.rollup.id} -> {seeded.first.id}"
    reverse = f"{seeded.rollup.id} -> {seeded.first.id} -> {seeded.rollup.id}"
    chain = "\n".join(report_lines(out, "chain"))
    assert f"superseded chain loops: {loop}" in chain or reverse in chain


async def test_a_last_message_id_pointing_at_another_message_is_named(
    database_url: str, db: AsyncSession, seeded: Seeded
) -> None:
    third, fourth = seeded.messages[2], seeded.messages[3]
    await corrupt(
        db,
        "UPDATE session_summaries SET last_message_id = :m WHERE id = :s",
        m=third.id,
        s=seeded.first.id,
    )

    code, out, _ = await run_verify(database_url)

    assert code == 1
    assert report_lines(out, "message_ids") == [
        f"default/chat-1  message_ids    summary {seeded.first.id} (seqs 1..4) records "
        f"last_message_id {third.id}, but seq 4 is message {fourth.id}; "
        f"message {third.id} is seq 3"
    ]
    assert out.endswith("1 violation in 1 session.\n")


async def test_a_first_message_id_of_another_session_or_of_no_message_is_named(
    database_url: str, db: AsyncSession, seeded: Seeded
) -> None:
    other = await seed_session(db, "chat-2")
    foreign = other.messages[0]
    await corrupt(
        db,
        "UPDATE session_summaries SET first_message_id = :m WHERE id = :s",
        m=foreign.id,
        s=seeded.rollup.id,
    )
    await corrupt(
        db,
        "UPDATE session_summaries SET first_message_id = 987654 WHERE id = :s",
        s=seeded.second.id,
    )

    code, out, _ = await run_verify(database_url)

    assert code == 1
    first, fifth = seeded.messages[0], seeded.messages[4]
    assert report_lines(out, "message_ids") == [
        f"default/chat-1  message_ids    summary {seeded.second.id} (seqs 5..8) records "
        f"first_message_id 987654, but seq 5 is message {fifth.id}; no message has id 987654",
        f"default/chat-1  message_ids    summary {seeded.rollup.id} (seqs 1..8) records "
        f"first_message_id {foreign.id}, but seq 1 is message {first.id}; "
        f"message {foreign.id} is in another session (session key {other.session_key})",
    ]


async def test_a_negative_token_count_is_named(
    database_url: str, db: AsyncSession, seeded: Seeded
) -> None:
    message = seeded.messages[1]
    await corrupt(db, "UPDATE messages SET token_count = -1 WHERE id = :m", m=message.id)

    code, out, _ = await run_verify(database_url)

    assert code == 1
    [line] = report_lines(out, "token_count")
    assert line.endswith(f"token_count missing or negative: seq 2 (message {message.id})")


async def test_a_missing_database_exits_2(tmp_path: Any) -> None:
    code, out, err = await run_verify(f"sqlite+aiosqlite:///{tmp_path / 'none.db'}")

    assert (code, out) == (2, "")
    assert err.startswith("verify: no SQLite database at")


# --- removals -------------------------------------------------------------------------------


@REMOVALS
async def test_removed_messages_and_an_erased_rollup_verify_clean_and_are_counted(
    database_url: str, removed: Removed
) -> None:
    code, out, err = await run_verify(database_url)
    alone = await run_verify(database_url, "--session", removed.external_id)

    assert (code, err) == (0, "")
    counted = "8 messages, 3 removed; 6 summaries, 2 erased"
    assert out == f"Checked 1 session ({counted}): no violations.\n"
    assert alone == (0, out, "")


@REMOVALS
@pytest.mark.parametrize(
    "kept",
    [
        pytest.param("content = 'part 1 asks'", id="content"),
        pytest.param(
            """content_parts = '[{"type": "text", "text": "part 1 asks"}]'""", id="content_parts"
        ),
        pytest.param("name = 'alice'", id="name"),
        pytest.param("""tool_calls = '[{"id": "c9", "type": "function"}]'""", id="tool_calls"),
        pytest.param("tool_call_id = 'c9'", id="tool_call_id"),
        pytest.param("""metadata = '{"part": 1}'""", id="metadata"),
        pytest.param("client_id = 'q1'", id="client_id"),
        pytest.param("""item = '{"role": "user", "content": "part 1 asks"}'""", id="item"),
        pytest.param("token_count = 9", id="token_count"),
    ],
)
async def test_a_tombstone_still_holding_content_is_named(
    database_url: str, db: AsyncSession, removed: Removed, kept: str
) -> None:
    tombstone = removed.messages[3]
    await corrupt(db, f"UPDATE messages SET {kept} WHERE id = :m", m=tombstone["id"])

    code, out, _ = await run_verify(database_url)

    assert code == 1
    assert report_lines(out, "tombstone") == [
        f"default/{removed.external_id}  tombstone      removed messages still hold content: "
        f"seq 3 (message {tombstone['id']})"
    ]
    assert out.endswith("1 violation in 1 session.\n")


@REMOVALS
@pytest.mark.parametrize(
    ("kept", "named"),
    [
        pytest.param("summary_text = 'part 1 asks'", "summary_text", id="text"),
        pytest.param("summary_prompt = 'part 1 asks'", "summary_prompt", id="prompt"),
        pytest.param(
            "summary_text = 'a', summary_prompt = 'b'", "summary_text and summary_prompt", id="both"
        ),
    ],
)
async def test_an_erased_summary_still_holding_text_or_prompt_is_named(
    database_url: str, db: AsyncSession, removed: Removed, kept: str, named: str
) -> None:
    rollup = removed.rollup["id"]
    await corrupt(db, f"UPDATE session_summaries SET {kept} WHERE id = :s", s=rollup)

    code, out, _ = await run_verify(database_url)

    assert code == 1
    assert report_lines(out, "erased") == [
        f"default/{removed.external_id}  erased         "
        f"erased summary {rollup} (seqs 1..4) still holds its {named}"
    ]
    assert out.endswith("1 violation in 1 session.\n")


@REMOVALS
async def test_a_removed_count_that_is_not_the_number_of_tombstones_is_named(
    database_url: str, db: AsyncSession, removed: Removed
) -> None:
    await corrupt(
        db, "UPDATE sessions SET removed_count = 1 WHERE external_id = :s", s=removed.external_id
    )

    code, out, _ = await run_verify(database_url)

    assert code == 1
    assert report_lines(out, "removed_count") == [
        f"default/{removed.external_id}  removed_count  "
        "sessions.removed_count is 1 but the session has 3 removed messages"
    ]
    assert out.endswith("1 violation in 1 session.\n")


@REMOVALS
async def test_a_removed_message_linked_to_a_live_summary_is_named(
    database_url: str, db: AsyncSession, removed: Removed
) -> None:
    tombstone, node = removed.messages[3]["id"], removed.node["id"]
    await corrupt(
        db,
        "INSERT INTO session_summary_messages (session_id, summary_id, message_id) "
        "VALUES (:k, :s, :m)",
        k=session_key("default", removed.external_id),
        s=node,
        m=tombstone,
    )

    code, out, _ = await run_verify(database_url)

    assert code == 1
    assert report_lines(out, "coverage") == [
        f"default/{removed.external_id}  coverage       "
        f"1 removed message is in a live summary: seq 3 (message {tombstone})"
    ]
    assert report_lines(out, "links") == [
        f"default/{removed.external_id}  links          summary {node} (seqs 1..4) is not "
        f"erased but links removed messages: seq 3 (message {tombstone})"
    ]


@REMOVALS
async def test_an_erased_summary_counts_as_live_nowhere(
    database_url: str, db: AsyncSession, removed: Removed
) -> None:
    # the erased node 1..4 was a root: were it live, it would overlap the node made again
    rollup = removed.rollup["id"]
    await corrupt(db, "UPDATE session_summaries SET erased_at = NULL WHERE id = :s", s=rollup)

    code, out, _ = await run_verify(database_url)

    assert code == 1
    [overlap] = report_lines(out, "live_ranges")
    assert f"summary {rollup} (seqs 1..4)" in overlap and "overlap on seqs 1..4" in overlap


@REMOVALS
async def test_a_summary_left_absorbed_by_an_erased_rollup_is_named(
    database_url: str, db: AsyncSession, removed: Removed
) -> None:
    first, rollup = removed.first["id"], removed.rollup["id"]
    await corrupt(
        db, "UPDATE session_summaries SET superseded_by = :p WHERE id = :s", p=rollup, s=first
    )

    code, out, _ = await run_verify(database_url)

    assert code == 1
    # the node made again of 1..4 lost 1..2 to the erased roll-up: it is named too
    assert report_lines(out, "chain") == [
        f"default/{removed.external_id}  chain          summary {first} (seqs 1..2) is superseded "
        f"by summary {rollup}, which is erased, but is neither erased nor live",
        f"default/{removed.external_id}  chain          roll-up summary {removed.node['id']} "
        "(seqs 1..4) absorbed summaries covering 3..4",
    ]


@REMOVALS
async def test_a_first_message_id_naming_a_tombstone_removed_before_the_summary_is_named(
    database_url: str, db: AsyncSession, removed: Removed
) -> None:
    # the re-made 3..4 starts at the tombstone: its first message is seq 4
    remade, tombstone, fourth = removed.remade["id"], removed.messages[3], removed.messages[4]
    await corrupt(
        db,
        "UPDATE session_summaries SET first_message_id = :m WHERE id = :s",
        m=tombstone["id"],
        s=remade,
    )

    code, out, _ = await run_verify(database_url)

    assert code == 1
    assert report_lines(out, "message_ids") == [
        f"default/{removed.external_id}  message_ids    summary {remade} (seqs 3..4) records "
        f"first_message_id {tombstone['id']}, but its first message is seq 4 "
        f"(message {fourth['id']}); message {tombstone['id']} is seq 3"
    ]
    assert out.endswith("1 violation in 1 session.\n")


# --- read-only --------------------------------------------------------------------------------


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def journal_mode(path: Path) -> str:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        [(mode,)] = connection.execute("PRAGMA journal_mode").fetchall()
    connection.close()
    return str(mode)


@pytest.mark.parametrize("mode", ["delete", "wal"])
async def test_the_tools_leave_an_sqlite_file_and_its_journal_mode_unchanged(
    tmp_path: Path, mode: str
) -> None:
    async with migrated_database("sqlite", tmp_path / "a folder", False) as url:
        engine = create_engine(url)  # the server's engine: it switches the file to WAL
        async with create_sessionmaker(engine)() as db:
            seeded = await seed_session(db, tenant="acme")
        await engine.dispose()
        path = Path(str(make_url(url).database))
        with sqlite3.connect(path) as connection:
            connection.execute(f"PRAGMA journal_mode={mode}")
        connection.close()
        before = sha256(path)

        results = [
            await run_verify(url),
            await run_verify(url, "--session", "chat-1"),
            await trace(url, "--session", "chat-1"),
            await trace(url, str(seeded.rollup.id)),
        ]

        assert [code for code, _, _ in results] == [0, 0, 0, 0]
        assert sha256(path) == before
        assert journal_mode(path) == mode


async def test_the_read_engine_refuses_writes(
    database_url: str, db: AsyncSession, seeded: Seeded
) -> None:
    engine = audit.read_only_engine(database_url)
    try:
        async with engine.connect() as connection:
            with pytest.raises(DBAPIError):
                await connection.execute(text("DELETE FROM messages"))
    finally:
        await engine.dispose()

    assert await db.scalar(select(func.count()).select_from(Message)) == len(CONVERSATION)


@pytest.mark.postgresql_only
async def test_the_read_engine_refuses_writes_outside_a_transaction_on_postgresql(
    database_url: str, db: AsyncSession, seeded: Seeded
) -> None:
    engine = audit.read_only_engine(database_url)
    try:
        async with engine.execution_options(isolation_level="AUTOCOMMIT").connect() as connection:
            with pytest.raises(DBAPIError, match="read-only transaction"):
                await connection.execute(text("DELETE FROM messages"))
    finally:
        await engine.dispose()

    assert await db.scalar(select(func.count()).select_from(Message)) == len(CONVERSATION)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_on_a_terminal_and_is_cleared_before_a_violation() -> None:
    out, err = io.StringIO(), Terminal()
    report = verify.Report(out, verify.Progress(err, total=2))

    report.add(verify.SessionCheck("default/a"))
    report.add(verify.SessionCheck("default/b", [verify.Violation("seqs", "seq 3 missing")]))
    report.finish()

    assert err.getvalue().startswith("\rverify: 1/2 sessions, 0 violations\r\x1b[K")
    assert out.getvalue().splitlines() == [
        "default/b  seqs           seq 3 missing",
        "Checked 2 sessions (0 messages, 0 summaries): 1 violation in 1 session.",
    ]
