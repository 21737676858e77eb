"""scripts.verify on both databases: clean sessions pass; each kind of corruption is named."""

from __future__ import annotations

import io
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from api import store
from scripts import verify
from tests.test_trace_summary import CONVERSATION, Seeded, new_message, seed_session


async def run_verify(database_url: str, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    options = verify.parse_args([*args, "--database-url", database_url])
    code = await verify.run(options, out, err)
    return code, out.getvalue(), err.getvalue()


async def corrupt(db: AsyncSession, sql: str, **params: Any) -> None:
    await db.execute(text(sql), params)
    await db.commit()


def report_lines(out: str, kind: str) -> list[str]:
    """The report lines of one kind of violation."""
    return [line for line in out.splitlines() if line.split()[1:2] == [kind]]


@pytest.fixture
async def seeded(db: AsyncSession) -> Seeded:
    return await seed_session(db)


# --- healthy --------------------------------------------------------------------------------


async def test_healthy_sessions_pass_streamed_in_pages(
    database_url: str, db: AsyncSession, seeded: Seeded
) -> None:
    await store.create_session(db, "default", "empty", {}, {})
    await store.append_messages(db, "acme", "unsummarized", [new_message(CONVERSATION[0])])
    await db.commit()
    await seed_session(db, "chat-2")

    code, out, err = await run_verify(database_url, "--batch-size", "2")

    assert (code, err) == (0, "")
    assert out == "Checked 4 sessions (21 messages, 6 summaries): no violations.\n"


async def test_one_session_is_checked_alone(database_url: str, seeded: Seeded) -> None:
    code, out, _ = await run_verify(database_url, "--session", "chat-1")

    assert code == 0
    assert out == "Checked 1 session (10 messages, 3 summaries): no violations.\n"


async def test_an_unknown_session_exits_2(database_url: str, seeded: Seeded) -> None:
    code, out, err = await run_verify(database_url, "--session", "chat-1", "--tenant", "acme")

    assert (code, out) == (2, "")
    assert err == "verify: no session 'chat-1' in tenant 'acme'\n"


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
    await corrupt(db, "UPDATE sessions SET last_seq = 7 WHERE id = :s", s=seeded.session_id)

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


async def test_a_chain_into_another_session_is_named(
    database_url: str, db: AsyncSession, seeded: Seeded
) -> None:
    other = await seed_session(db, "chat-2")
    await corrupt(
        db,
        "UPDATE session_summaries SET superseded_by = :p WHERE id = :s",
        p=other.rollup.id,
        s=seeded.first.id,
    )

    code, out, _ = await run_verify(database_url)

    assert code == 1
    chain = report_lines(out, "chain")
    assert any(
        f"is superseded by summary {other.rollup.id} of another session" in line for line in chain
    )
    assert all(line.startswith("default/chat-1 ") for line in out.splitlines()[:-1])


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
