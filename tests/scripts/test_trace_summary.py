"""scripts.trace_summary on both databases: by summary, by session and by message, text and JSON."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from api import store
from api.store import audit
from scripts import trace_summary
from tests.helpers import (
    append,
    append_batch,
    compact,
    tool_call,
    tool_result,
    trace,
    user,
)
from tests.scripts.builders import (
    CONVERSATION,
    LONG_LINE,
    REMOVALS,
    Removed,
    Seeded,
    new_message,
    seed_session,
)
from tests.support.scratch_db import REPO_ROOT


async def trace_json(database_url: str, *args: str) -> Any:
    code, out, err = await trace(database_url, *args, "--json")
    assert code == 0, err
    return json.loads(out)


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
        "internal_id": seeded.session_key,
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
    assert answer["session"]["internal_id"] == seeded.session_key
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


# --- removals -------------------------------------------------------------------------------


def parsed_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def shown_time(value: str) -> str:
    """An API or JSON timestamp as the text output shows it."""
    return trace_summary.short_time(parsed_time(value))


@REMOVALS
async def test_a_tombstone_shows_among_the_sources_as_removed_without_content(
    database_url: str, removed: Removed
) -> None:
    tombstone = removed.messages[3]
    answer = await trace_json(database_url, str(removed.second["id"]))
    code, out, err = await trace(database_url, str(removed.second["id"]))

    first, second = answer["summary"]["messages"]
    assert (first["id"], first["seq"], first["role"]) == (tombstone["id"], 3, "user")
    assert first["content"] is None and first["removed_at"] is not None
    assert parsed_time(first["created_at"]) == parsed_time(tombstone["created_at"])
    assert (second["seq"], second["content"], second["removed_at"]) == (4, "part 1 answers", None)
    assert code == 0, err
    [row] = [line for line in out.splitlines() if line.split()[:2] == ["3", str(tombstone["id"])]]
    assert row.split()[2] == "user"
    assert row.endswith(f"  [removed at {shown_time(first['removed_at'])}]")
    assert "part 1 asks" not in out and "alice" not in out


@REMOVALS
async def test_an_erased_summary_shows_when_it_was_erased_instead_of_its_state_and_no_text(
    database_url: str, removed: Removed
) -> None:
    rollup, second = removed.rollup, removed.second
    code, out, err = await trace(database_url, str(rollup["id"]))
    answer = (await trace_json(database_url, str(rollup["id"])))["summary"]

    assert code == 0, err
    erased_at = shown_time(rollup["erased_at"])
    assert (
        f"Summary {rollup['id']} · level 1 · seqs 1..4 · 4 messages · erased at {erased_at}" in out
    )
    assert (
        f"Summary {second['id']} · level 0 · seqs 3..4 · 2 messages · erased at {erased_at}" in out
    )
    headings = [line.strip() for line in out.splitlines() if line.strip().startswith("Summary ")]
    assert len(headings) == 2 and all(
        line.endswith(f" · erased at {erased_at}") for line in headings
    )
    assert not any(line.strip() == "text:" for line in out.splitlines())
    assert "absorbed 1 summary (seqs 1..2: made live again when it was erased):" in out
    assert parsed_time(answer["erased_at"]) == parsed_time(rollup["erased_at"])
    assert (answer["summary_text"], answer["superseded_by"]) == ("", None)
    [child] = answer["children"]
    assert (child["id"], child["superseded_by"], child["summary_text"]) == (
        second["id"],
        rollup["id"],
        "",
    )
    assert parsed_time(child["erased_at"]) == parsed_time(second["erased_at"])
    live = (await trace_json(database_url, str(removed.first["id"])))["summary"]
    assert live["erased_at"] is None and live["summary_text"]
    _, live_text, _ = await trace(database_url, str(removed.first["id"]))
    shown = f"seqs 1..2 · 2 messages · superseded by {removed.node['id']}"
    assert shown in live_text and "  text:" in live_text


@REMOVALS
async def test_message_trace_of_a_removed_message_names_the_erased_summaries_that_covered_it(
    database_url: str, removed: Removed
) -> None:
    tombstone = removed.messages[3]
    code, out, err = await trace(database_url, "--message", str(tombstone["id"]))
    answer = await trace_json(database_url, "--message", str(tombstone["id"]))

    assert code == 0, err
    removed_at = shown_time(answer["message"]["removed_at"])
    lines = out.splitlines()
    assert lines[0].startswith(f"Message {tombstone['id']} · seq 3 · user · ")
    assert lines[1] == f"  [removed at {removed_at}]"
    assert lines[3] == (
        f"Removed at {removed_at} UTC; it was covered by 2 summaries, all now erased:"
    )
    rows = [line.split() for line in lines[5:]]
    assert [row[0] for row in rows] == [str(removed.rollup["id"]), str(removed.second["id"])]
    assert all(row[4:6] == ["erased", "at"] for row in rows)
    assert answer["message"]["content"] is None
    assert [s["id"] for s in answer["summaries"]] == [removed.rollup["id"], removed.second["id"]]
    assert all(s["erased_at"] is not None for s in answer["summaries"])


@REMOVALS
async def test_message_trace_of_a_removed_message_no_summary_covered_says_so(
    database_url: str, removed: Removed
) -> None:
    result = removed.messages[8]  # popped, then its call, after the newest summary
    code, out, _ = await trace(database_url, "--message", str(result["id"]))
    answer = await trace_json(database_url, "--message", str(result["id"]))

    assert code == 0
    removed_at = shown_time(answer["message"]["removed_at"])
    assert out.splitlines()[3] == f"Removed at {removed_at} UTC; no summary had covered it."
    assert answer["summaries"] == []
    assert (answer["message"]["content"], answer["message"]["tool_call_id"]) == (None, None)


@REMOVALS
async def test_message_trace_lists_live_then_superseded_then_erased_summaries(
    database_url: str, removed: Removed
) -> None:
    kept = removed.messages[4]  # in the erased roll-up and 3..4, then in the re-made 3..6

    answer = await trace_json(database_url, "--message", str(kept["id"]))

    assert answer["message"]["removed_at"] is None
    assert [s["id"] for s in answer["summaries"]] == [
        removed.node["id"],
        removed.remade["id"],
        removed.rollup["id"],
        removed.second["id"],
    ]
    assert [s["erased_at"] is None for s in answer["summaries"]] == [True, True, False, False]


@REMOVALS
async def test_session_tree_shows_erased_summaries_and_the_summary_made_again_after_them(
    database_url: str, removed: Removed
) -> None:
    code, out, err = await trace(database_url, "--session", removed.external_id)
    answer = await trace_json(database_url, "--session", removed.external_id)

    assert code == 0, err
    assert "8 messages (3 removed), 6 summaries (1 live, 3 erased)" in out
    table = out.splitlines()[2:]
    assert table[0].split() == list(trace_summary.SUMMARY_HEADERS)
    erased = ["erased", "at", *shown_time(removed.rollup["erased_at"]).split()]
    rows = [line.split() for line in table[1:]]
    assert [row[:4] for row in rows] == [
        [str(removed.rollup["id"]), "1", "1..4", "4"],
        [str(removed.second["id"]), "0", "3..4", "2"],
        [str(removed.node["id"]), "1", "1..6", "5"],
        [str(removed.first["id"]), "0", "1..2", "2"],
        [str(removed.remade["id"]), "0", "3..6", "3"],
        [str(removed.third["id"]), "0", "5..6", "2"],
    ]
    assert table[2].startswith(f"  {removed.second['id']} "), "under the roll-up that absorbed it"
    assert [row[4:8] for row in rows if row[4] == "erased"] == [erased] * 3
    assert rows[2][4] == "live"
    node = str(removed.node["id"])
    assert rows[4][4:9] == ["superseded", "by", node, "proactive", "erasure"], "says why"
    roots = answer["summaries"]
    assert [root["id"] for root in roots] == [
        removed.rollup["id"],
        removed.node["id"],
        removed.third["id"],
    ]
    assert [root["erased_at"] is None for root in roots] == [False, True, False]
    children = roots[1]["children"]
    assert [child["id"] for child in children] == [removed.first["id"], removed.remade["id"]]
    assert children[1]["metadata"]["trigger_reason"] == "erasure"
    assert [child["id"] for child in roots[0]["children"]] == [removed.second["id"]]


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


@REMOVALS
async def test_the_hidden_half_of_a_tool_exchange_shows_as_hidden_with_its_content(
    database_url: str, client: httpx.AsyncClient, sid: str
) -> None:
    stored = (await append(client, sid, user("q"), tool_call("c1"), tool_result("c1")))["messages"]
    summary = (await compact(client, sid, keep_last_n=0))["summary"]
    removed = await client.delete(f"/v1/sessions/{sid}/messages/{stored[2]['id']}")
    assert removed.status_code == 204

    answer = await trace_json(database_url, str(summary["id"]))
    code, out, _ = await trace(database_url, str(summary["id"]))

    call = next(m for m in answer["summary"]["messages"] if m["seq"] == 2)
    assert call["orphaned_at"] is not None and call["removed_at"] is None
    assert call["tool_calls"] == tool_call("c1")["tool_calls"]  # kept as appended
    assert code == 0
    [row] = [line for line in out.splitlines() if line.split()[:2] == ["2", str(call["id"])]]
    assert f"[hidden since {shown_time(call['orphaned_at'])}]" in row
