"""scripts.trace_summary on both databases: by summary, by session and by message, text and JSON."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from api import store
from api.store import audit
from scripts import trace_summary
from scripts.bench.scratch_db import REPO_ROOT
from tests.helpers import append_batch

LONG_LINE = "word " * 200

CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "Where is my order 1234?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup_order", "arguments": '{"order": 1234}'},
            }
        ],
    },
    {"role": "tool", "content": '{"status": "shipped"}', "tool_call_id": "call_1"},
    {"role": "assistant", "content": "It shipped yesterday.\nTracking number: ZX-99."},
    {"role": "user", "content": "谢谢！什么时候到？"},
    {"role": "assistant", "content": "预计周五送达。"},
    {"role": "user", "content": LONG_LINE},
    {"role": "assistant", "content": "Yes, until it leaves the depot."},
    {"role": "user", "content": "Please do."},
    {"role": "assistant", "content": "Done."},
]
"""Ten messages: a tool call with its result, Chinese text, a multi-line and a very long one."""

FULL_METADATA: dict[str, Any] = {
    "algorithm": "bisect_v1",
    "trigger": "proactive",
    "trigger_reason": "message_limit",
    "chunk_count": 3,
    "max_depth": 1,
    "truncated": True,
    "compression_ratio": 0.25,
    "input_tokens": 400,
    "output_tokens": 100,
    "llm_calls": 3,
    "failed_llm_calls": 0,
    "duration_ms": 12,
}


@dataclass(frozen=True)
class Seeded:
    """A session of ten messages: summaries 1..4 and 5..8 rolled up into one (level 1)."""

    session_id: int
    external_id: str
    messages: list[store.MessageRow]
    first: store.SummaryRow
    second: store.SummaryRow
    rollup: store.SummaryRow


def new_message(spec: dict[str, Any]) -> store.NewMessage:
    return store.NewMessage(
        role=spec["role"],
        content=spec.get("content"),
        content_parts=None,
        name=None,
        tool_calls=spec.get("tool_calls"),
        tool_call_id=spec.get("tool_call_id"),
        metadata=None,
        client_id=None,
        token_count=5,
    )


def draft(
    first_seq: int,
    last_seq: int,
    metadata: dict[str, Any],
    level: int = 0,
    absorbs: tuple[int, ...] = (),
) -> store.SummaryDraft:
    return store.SummaryDraft(
        first_seq=first_seq,
        last_seq=last_seq,
        summary_text=f"Summary of seqs {first_seq}..{last_seq}.\nSecond line.",
        summary_prompt="prompt",
        model="local",
        temperature=0.3,
        target_summary_tokens=800,
        keep_last_n=2,
        approx_tokens=10,
        metadata=metadata,
        level=level,
        absorbs=absorbs,
    )


async def save(
    db: AsyncSession, session_id: int, summary_draft: store.SummaryDraft
) -> store.SummaryRow:
    summary = await store.save_summary(db, session_id, summary_draft)
    await db.commit()
    return summary


async def seed_session(
    db: AsyncSession, external_id: str = "chat-1", tenant: str = "default"
) -> Seeded:
    """Ten messages, two level-0 summaries (one with sparse metadata) and their roll-up."""
    outcome = await append_batch(
        db, tenant, external_id, [new_message(spec) for spec in CONVERSATION]
    )
    session_id = outcome.session.id
    first = await save(db, session_id, draft(1, 4, FULL_METADATA))
    second = await save(db, session_id, draft(5, 8, {"trigger": "manual"}))
    rollup_metadata = {**FULL_METADATA, "trigger_reason": "rollup", "truncated": False}
    rollup = await save(
        db, session_id, draft(1, 8, rollup_metadata, level=1, absorbs=(first.id, second.id))
    )
    return Seeded(session_id, external_id, outcome.messages, first, second, rollup)


async def trace(database_url: str, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    options = trace_summary.parse_args([*args, "--database-url", database_url])
    code = await trace_summary.run(options, out, err)
    return code, out.getvalue(), err.getvalue()


async def trace_json(database_url: str, *args: str) -> Any:
    code, out, err = await trace(database_url, *args, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
async def seeded(db: AsyncSession) -> Seeded:
    return await seed_session(db)


# --- by summary -----------------------------------------------------------------------------


async def test_trace_of_a_rollup_prints_its_metadata_and_follows_it_down_to_every_message(
    database_url: str, seeded: Seeded
) -> None:
    code, out, err = await trace(database_url, str(seeded.rollup.id))

    assert code == 0, err
    assert f"Summary {seeded.rollup.id} · level 1 · seqs 1..8 · 8 messages · live" in out
    assert "trigger_reason=rollup" in out
    assert "compression_ratio=0.250" in out
    assert "absorbed 2 summaries" in out
    assert f"Summary {seeded.first.id} · level 0 · seqs 1..4" in out
    assert f"superseded by {seeded.rollup.id}" in out
    assert "Summary of seqs 5..8." in out
    rows = [line.split() for line in out.splitlines() if line.startswith("      ")]
    seqs_listed = [int(row[0]) for row in rows if row and row[0].isdigit()]
    assert seqs_listed == list(range(1, 9))
    assert '-> lookup_order({"order": 1234})' in out
    assert '[result of call_1] {"status": "shipped"}' in out
    assert "谢谢！什么时候到？" in out


async def test_trace_clips_contents_to_one_line_and_full_prints_them_whole(
    database_url: str, seeded: Seeded
) -> None:
    _, clipped, _ = await trace(database_url, str(seeded.first.id))
    _, full, _ = await trace(database_url, str(seeded.second.id), "--full")

    assert "It shipped yesterday. Tracking number: ZX-99." in clipped
    assert all(len(line) <= trace_summary.DEFAULT_WIDTH for line in clipped.splitlines()[6:])
    assert LONG_LINE.strip() in full
    _, first_full, _ = await trace(database_url, str(seeded.first.id), "--full")
    assert any(line.strip() == "Tracking number: ZX-99." for line in first_full.splitlines())


async def test_trace_json_nests_absorbed_summaries_with_their_messages(
    database_url: str, seeded: Seeded
) -> None:
    answer = await trace_json(database_url, str(seeded.rollup.id))

    assert answer["session"] == {
        "id": "chat-1",
        "tenant": "default",
        "internal_id": seeded.session_id,
        "last_seq": 10,
    }
    rollup = answer["summary"]
    assert {"id", "level", "first_seq", "last_seq", "metadata", "summary_text"} <= rollup.keys()
    assert (rollup["id"], rollup["level"], rollup["first_seq"], rollup["last_seq"]) == (
        seeded.rollup.id,
        1,
        1,
        8,
    )
    assert rollup["messages"] is None, "a roll-up's messages are listed under its children"
    assert [child["id"] for child in rollup["children"]] == [seeded.first.id, seeded.second.id]
    first, second = rollup["children"]
    assert [m["seq"] for m in first["messages"]] == [1, 2, 3, 4]
    assert [m["seq"] for m in second["messages"]] == [5, 6, 7, 8]
    assert first["children"] == [] and second["metadata"] == {"trigger": "manual"}
    call = first["messages"][1]
    assert set(call) >= {"id", "seq", "role", "created_at", "content"}
    assert call["content"] is None and call["tool_calls"][0]["id"] == "call_1"
    assert datetime.fromisoformat(call["created_at"]).tzinfo is not None
    assert second["messages"][0]["content"] == "谢谢！什么时候到？"


# --- by session -----------------------------------------------------------------------------


async def test_session_tree_shows_levels_ranges_and_metadata_of_live_and_superseded(
    database_url: str, seeded: Seeded
) -> None:
    code, out, err = await trace(database_url, "--session", "chat-1")

    assert code == 0, err
    assert "10 messages, 3 summaries (1 live)" in out
    table = out.splitlines()[2:]
    assert table[0].split() == list(trace_summary.SUMMARY_HEADERS)
    rollup, first, second = (line.split() for line in table[1:4])
    assert rollup[:5] == [str(seeded.rollup.id), "1", "1..8", "8", "live"]
    assert rollup[5:10] == ["proactive", "rollup", "3", "no", "0.250"]
    assert table[2].startswith(f"  {seeded.first.id} ")
    assert first[:4] == [str(seeded.first.id), "0", "1..4", "4"]
    assert first[4:7] == ["superseded", "by", str(seeded.rollup.id)]
    assert first[7:12] == ["proactive", "message_limit", "3", "yes", "0.250"]
    assert second[7:12] == ["manual", "-", "-", "-", "-"], "missing metadata keys show as -"


async def test_session_tree_json_has_live_roots_with_absorbed_children(
    database_url: str, seeded: Seeded
) -> None:
    answer = await trace_json(database_url, "--session", "chat-1")

    [root] = answer["summaries"]
    assert root["id"] == seeded.rollup.id and root["messages"] is None
    assert [child["id"] for child in root["children"]] == [seeded.first.id, seeded.second.id]
    assert all(child["superseded_by"] == seeded.rollup.id for child in root["children"])


async def test_session_ids_are_looked_up_in_the_given_tenant(
    database_url: str, db: AsyncSession, seeded: Seeded
) -> None:
    other = await append_batch(db, "acme", "chat-1", [new_message(CONVERSATION[0])])

    answer = await trace_json(database_url, "--session", "chat-1", "--tenant", "acme")

    assert answer["session"]["internal_id"] == other.session.id
    assert answer["summaries"] == []
    code, out, _ = await trace(database_url, "--session", "chat-1", "--tenant", "acme")
    assert code == 0 and "No summaries yet." in out


async def test_without_tenant_a_session_id_is_found_in_whichever_tenant_has_it(
    database_url: str, db: AsyncSession
) -> None:
    seeded = await seed_session(db, "chat-9", tenant="acme")

    answer = await trace_json(database_url, "--session", "chat-9")

    assert answer["session"]["tenant"] == "acme"
    assert answer["session"]["internal_id"] == seeded.session_id
    assert [root["id"] for root in answer["summaries"]] == [seeded.rollup.id]


async def test_a_session_id_in_several_tenants_without_tenant_exits_2_naming_them(
    database_url: str, db: AsyncSession, seeded: Seeded
) -> None:
    await store.create_session(db, "acme", "chat-1", {}, {})
    await db.commit()

    code, out, err = await trace(database_url, "--session", "chat-1")

    assert (code, out) == (2, "")
    assert err == (
        "trace_summary: session 'chat-1' exists in 2 tenants ('acme', 'default'): "
        "pass --tenant to choose one\n"
    )


async def test_the_tenants_of_an_ambiguous_session_id_are_named_up_to_a_bound(
    database_url: str, db: AsyncSession
) -> None:
    tenants = [f"t{index:02d}" for index in range(audit.TENANTS_NAMED + 2)]
    for tenant in tenants:
        await store.create_session(db, tenant, "shared", {}, {})
    await db.commit()

    code, _, err = await trace(database_url, "--session", "shared")

    named = ", ".join(repr(tenant) for tenant in tenants[: audit.TENANTS_NAMED])
    assert code == 2
    assert err == (
        f"trace_summary: session 'shared' exists in {len(tenants)} tenants ({named} and 2 more): "
        "pass --tenant to choose one\n"
    )


# --- by message -----------------------------------------------------------------------------


async def test_message_trace_lists_the_live_summary_then_the_superseded_chain(
    database_url: str, seeded: Seeded
) -> None:
    message = seeded.messages[1]

    code, out, err = await trace(database_url, "--message", str(message.id))
    answer = await trace_json(database_url, "--message", str(message.id))

    assert code == 0, err
    assert f"Message {message.id} · seq 2 · assistant" in out
    assert "Covered by 2 summaries, live first:" in out
    assert [s["id"] for s in answer["summaries"]] == [seeded.rollup.id, seeded.first.id]
    assert answer["message"]["seq"] == 2
    assert answer["summaries"][0]["superseded_by"] is None


async def test_message_after_the_newest_summary_is_reported_as_not_summarized(
    database_url: str, seeded: Seeded
) -> None:
    message = seeded.messages[-1]

    code, out, _ = await trace(database_url, "--message", str(message.id))
    answer = await trace_json(database_url, "--message", str(message.id))

    assert code == 0
    assert "No summary covers this message yet." in out
    assert answer["summaries"] == []


# --- errors and entry points ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["987654"], "no summary with id 987654"),
        (["--message", "987654"], "no message with id 987654"),
        (["--session", "nope"], "no session 'nope' in any tenant"),
        (["--session", "chat-1", "--tenant", "acme"], "no session 'chat-1' in tenant 'acme'"),
    ],
)
async def test_unknown_ids_exit_2_with_one_clear_line(
    database_url: str, seeded: Seeded, args: list[str], complaint: str
) -> None:
    code, out, err = await trace(database_url, *args)

    assert code == 2
    assert out == ""
    assert err == f"trace_summary: {complaint}\n"


async def test_a_missing_sqlite_file_is_reported_not_created(tmp_path: Path) -> None:
    path = tmp_path / "absent" / "precis.db"

    code, _, err = await trace(f"sqlite+aiosqlite:///{path}", "1")

    assert code == 2 and "no SQLite database" in err
    assert not path.parent.exists()


async def test_runs_as_a_module(database_url: str, seeded: Seeded) -> None:
    command = [sys.executable, "-m", "scripts.trace_summary", "--json", str(seeded.rollup.id)]

    code, out, _ = await run_process([*command, "--database-url", database_url], cwd=REPO_ROOT)

    assert code == 0
    assert json.loads(out)["summary"]["id"] == seeded.rollup.id


async def test_runs_as_a_script_from_any_directory(tmp_path: Path) -> None:
    script = REPO_ROOT / "scripts" / "trace_summary.py"
    missing = f"sqlite+aiosqlite:///{tmp_path / 'none.db'}"

    code, _, err = await run_process([sys.executable, str(script), "1", "--database-url", missing])

    assert code == 2
    assert err.startswith("trace_summary: no SQLite database at")


async def run_process(command: list[str], cwd: Path = Path("/")) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *command, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()
