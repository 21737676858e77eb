"""scripts.trace_summary on both databases: by summary, by session and by message, text and JSON."""

from __future__ import annotations

import asyncio
import json
import math
import re
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from api import store
from api.db.engine import create_engine
from api.main import create_app
from api.store import audit
from scripts import summary_tree, trace_summary
from scripts.terminal import short_time
from tests.conftest import _empty_tables, make_settings
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
    draft,
    every_summary,
    new_message,
    save,
    seed_session,
)
from tests.support.fake_llm import running_fake_llm
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


async def test_session_tree_shows_each_summary_under_the_one_made_from_it(
    database_url: str, seeded: Seeded
) -> None:
    code, out, err = await trace(database_url, "--session", "chat-1")

    assert code == 0, err
    lines = out.splitlines()
    assert lines[:3] == [
        f"Session chat-1 (tenant default, session key {seeded.session_key})",
        "10 messages, 3 summaries (1 live)",
        "A load shows 1 root: 2 leaves, deepest 2 passes.",
    ]
    table = lines[4:]
    assert table[0].split() == list(summary_tree.HEADERS)
    rollup, first, second = (line.split() for line in table[1:4])
    assert rollup[:6] == ["node", str(seeded.rollup.id), "1..8", "2", "2", "live"]
    assert " ".join(rollup[6:]) == "Summary of seqs 1..8. Second line.", "the text on one line"
    assert first[:7] == ["├─", "leaf", str(seeded.first.id), "1..4", "1", "1", "merged"]
    assert second[:7] == ["└─", "leaf", str(seeded.second.id), "5..8", "1", "1", "merged"]
    assert len(table) == 4


async def test_session_tree_json_is_a_flat_list_with_parent_and_source_ids(
    database_url: str, seeded: Seeded
) -> None:
    answer = await trace_json(database_url, "--session", "chat-1")

    rollup, first, second = answer["summaries"]
    assert (rollup["id"], rollup["parent_id"]) == (seeded.rollup.id, None)
    assert rollup["source_ids"] == [seeded.first.id, seeded.second.id]
    assert (rollup["kind"], rollup["status"], rollup["leaves"], rollup["depth"]) == (
        "node",
        "live",
        2,
        2,
    ), "a summary made before the forest recorded it: kind, leaves and depth from its level"
    assert [first["id"], second["id"]] == [seeded.first.id, seeded.second.id]
    for child in (first, second):
        assert (child["kind"], child["status"], child["parent_id"]) == (
            "leaf",
            "superseded",
            seeded.rollup.id,
        )
        assert child["source_ids"] == [] and "children" not in child
    assert second["metadata"] == {"trigger": "manual"}
    assert first["summary_text"] == "Summary of seqs 1..4.\nSecond line."


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
    assert [s["id"] for s in answer["summaries"] if s["status"] == "live"] == [seeded.rollup.id]


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
    return short_time(parsed_time(value))


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
async def test_session_tree_lists_erased_summaries_after_the_live_tree_folded_by_erasure(
    database_url: str, client: httpx.AsyncClient, removed: Removed
) -> None:
    every = {s["id"]: s for s in await every_summary(client, removed.external_id)}
    code, out, err = await trace(database_url, "--session", removed.external_id)

    assert code == 0, err
    erased = [s for s in every.values() if s["erased_at"] is not None]
    live = [s for s in every.values() if s["superseded_by"] is None and s["erased_at"] is None]
    removed_count = 3  # seq 3, then the tool call and its result
    assert out.splitlines()[1] == (
        f"{max(removed.messages)} messages ({removed_count} removed), {len(every)} summaries "
        f"({len(live)} live, {len(erased)} erased)"
    )
    live_tree, history = out.split("\n\nErased at ")
    assert f"node {removed.node['id']} " in live_tree
    assert not any("erased" in found.string for found in tree_lines(live_tree))
    assert f"leaf {removed.remade['id']} " in live_tree
    remade = next(line for line in live_tree.splitlines() if f" {removed.remade['id']} " in line)
    assert "[made again]" in remade, "says why it was made"
    heading, *rows = history.splitlines()
    erased_at = shown_time(removed.rollup["erased_at"])
    assert heading == (f"{erased_at} UTC: {len(erased)} summaries, folded (--full unfolds them):")
    tops = sorted(
        (s for s in erased if s["superseded_by"] is None), key=lambda s: (s["first_seq"], s["id"])
    )
    assert [row.split()[1] for row in rows] == [str(s["id"]) for s in tops], "one line a tree"
    rollup = next(row for row in rows if row.split()[1] == str(removed.rollup["id"]))
    assert rollup.split()[2:] == ["1..4", "2", "2", "erased", "[+1", "folded]"]


@REMOVALS
async def test_session_tree_with_full_unfolds_the_erased_summaries(
    database_url: str, removed: Removed
) -> None:
    _, out, _ = await trace(database_url, "--session", removed.external_id, "--full")
    answer = await trace_json(database_url, "--session", removed.external_id)

    history = out.split("\n\nErased at ")[1].splitlines()
    assert "folded" not in history[0]
    rows = tree_lines("\n".join(history))
    under = [int(found["id"]) for found in rows].index(removed.rollup["id"]) + 1
    assert rows[under].string.split()[:7] == [
        "└─",
        "leaf",
        str(removed.second["id"]),
        "3..4",
        "1",
        "1",
        "erased",
    ]
    erased = [s for s in answer["summaries"] if s["status"] == "erased"]
    assert len(rows) == len(history) - 1 == len(erased), "every erased summary, once"
    by_id = {s["id"]: s for s in answer["summaries"]}
    second = by_id[removed.second["id"]]
    assert (second["parent_id"], second["erased_at"] is not None) == (removed.rollup["id"], True)
    assert by_id[removed.rollup["id"]]["source_ids"] == [removed.second["id"]]
    assert by_id[removed.remade["id"]]["metadata"]["trigger_reason"] == "erasure"
    assert by_id[removed.first["id"]]["parent_id"] == removed.node["id"]
    assert [s["status"] for s in answer["summaries"]][-len(erased) :] == ["erased"] * len(erased)


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


# --- a long session's forest ----------------------------------------------------------------

FOREST_LEAVES = 40
"""Leaves of the long session: a cover over five levels of nodes."""

TREE_LINE = re.compile(r"^(?P<prefix>[│├└─… ]*)(?P<kind>leaf|node|cover) (?P<id>\d+) ")
"""A line of the session's tree: its glyphs, then the summary's kind and id."""


FOREST_SETTINGS: dict[str, Any] = {
    "summary_model": "openai/fake",
    "summary_api_key": "test",
    "summary_limit": 2,
    "summary_keep_last_n": 0,
    "summary_message_limit": 10_000,
    "summary_workers": 0,
}
"""The app that makes the long session: the perfect-recall model (`summary_api_base` is the
fake's), every leaf compacted by hand."""


@dataclass(frozen=True)
class Forest:
    """The long session, made once per database for the tests below (it takes seconds): its
    summaries as the API lists them, and what the trace printed of it, in text and in JSON."""

    summaries: list[dict[str, Any]]
    code: int
    out: str
    err: str
    as_json: tuple[int, str, str]
    """`--json`'s exit code, output and errors."""


@pytest.fixture(scope="module")
async def forest(database_url: str) -> AsyncIterator[Forest]:
    """A session of `FOREST_LEAVES` leaves of three messages each, made by `compact` through
    the service (nodes and a cover follow each leaf), and its traces; the tables are emptied
    once they are read, as the `engine` fixture empties them after every test."""
    sid = f"forest-{uuid.uuid4().hex[:12]}"
    with running_fake_llm(mode="marker_echo") as fake_llm:
        settings = make_settings(
            database_url, **FOREST_SETTINGS, summary_api_base=fake_llm.base_url
        )
        app = create_app(settings)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://localhost"
            ) as client,
        ):
            for batch in range(FOREST_LEAVES):
                notes = (user(f"note MARKER-{batch * 3 + index} of the plan") for index in range(3))
                await append(client, sid, *notes)
                await compact(client, sid, trigger="manual", keep_last_n=0)
            summaries = await every_summary(client, sid)
    try:
        code, out, err = await trace(database_url, "--session", sid)
        as_json = await trace(database_url, "--session", sid, "--json")
    finally:
        engine = create_engine(database_url)
        try:
            await _empty_tables(engine)
        finally:
            await engine.dispose()
    yield Forest(summaries, code, out, err, as_json)


def tree_lines(out: str) -> list[re.Match[str]]:
    return [found for line in out.splitlines() if (found := TREE_LINE.match(line))]


def levels(found: re.Match[str]) -> int:
    return len(found["prefix"]) // len(summary_tree.BRANCH)


async def test_a_long_sessions_tree_fits_80_columns(forest: Forest) -> None:
    code, out, err = forest.code, forest.out, forest.err

    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert len(tree_lines(out)) == len(forest.summaries)


async def test_a_long_sessions_tree_is_as_deep_as_the_forest(forest: Forest) -> None:
    out = forest.out

    deepest = max(levels(found) for found in tree_lines(out))
    assert deepest <= math.ceil(math.log2(FOREST_LEAVES)) + 3, out
    assert deepest >= math.floor(math.log2(FOREST_LEAVES)), "nodes sit over their sources"


async def test_a_long_sessions_tree_shows_every_live_summary_once_on_top(forest: Forest) -> None:
    out, summaries = forest.out, forest.summaries

    live = {s["id"] for s in summaries if s["superseded_by"] is None and s["erased_at"] is None}
    lines = tree_lines(out)
    shown = [int(found["id"]) for found in lines]
    assert sorted(shown) == sorted(s["id"] for s in summaries), "each summary once"
    assert {int(found["id"]) for found in lines if levels(found) == 0} == live
    assert all(found.string.split()[5] == "live" for found in lines if levels(found) == 0)
    [cover] = [s for s in summaries if s["id"] in live and s["metadata"]["kind"] == "cover"]
    under_cover = [found for found in lines if levels(found) == 1]
    assert {int(found["id"]) for found in under_cover} == {
        s["id"] for s in summaries if s["superseded_by"] == cover["id"]
    }
    assert all(found.string.split()[6] == "covered" for found in under_cover)


async def test_a_long_sessions_tree_lists_sources_under_the_summary_made_from_them(
    forest: Forest,
) -> None:
    out, summaries = forest.out, forest.summaries

    above: list[int] = []
    parents: dict[int, int | None] = {}
    for found in tree_lines(out):
        depth = levels(found)
        del above[depth:]
        parents[int(found["id"])] = above[-1] if above else None
        above.append(int(found["id"]))
    assert parents == {s["id"]: s["superseded_by"] for s in summaries}


async def test_a_long_sessions_json_is_flat_and_rebuilds_the_forest(forest: Forest) -> None:
    code, printed, err = forest.as_json
    assert code == 0, err
    answer, summaries = json.loads(printed), forest.summaries

    listed = answer["summaries"]
    by_id = {s["id"]: s for s in summaries}
    assert sorted(s["id"] for s in listed) == sorted(by_id)
    assert all("children" not in s and "messages" not in s for s in listed), "flat"
    for summary in listed:
        stored = by_id[summary["id"]]
        assert summary["parent_id"] == stored["superseded_by"]
        assert summary["source_ids"] == sorted(
            (s["id"] for s in summaries if s["superseded_by"] == summary["id"]),
            key=lambda i: by_id[i]["first_seq"],
        )
        assert (summary["kind"], summary["leaves"], summary["depth"]) == (
            stored["metadata"]["kind"],
            stored["metadata"]["leaves"],
            stored["metadata"]["depth"],
        )
        assert (summary["first_seq"], summary["last_seq"], summary["level"]) == (
            stored["first_seq"],
            stored["last_seq"],
            stored["level"],
        )
        assert summary["status"] == ("live" if stored["superseded_by"] is None else "superseded")
        assert datetime.fromisoformat(summary["created_at"]).tzinfo is not None
    leaves = [s for s in listed if s["kind"] == "leaf"]
    assert len(leaves) == FOREST_LEAVES and all(s["source_ids"] == [] for s in leaves)


CHAIN_ROLLUPS = 16
"""Roll-ups of a session summarized before the forest: each absorbed the one before it."""


async def test_a_chain_made_before_the_forest_still_fits_80_columns_cut_on_the_left(
    database_url: str, db: AsyncSession
) -> None:
    spec = {"role": "user", "content": "note " * 40}
    outcome = await append_batch(
        db, "default", "chain", [new_message(spec) for _ in range(2 * CHAIN_ROLLUPS + 2)]
    )
    key = outcome.session.id
    older = await save(db, key, draft(1, 2, {}))
    for index in range(1, CHAIN_ROLLUPS + 1):
        leaf = await save(db, key, draft(2 * index + 1, 2 * index + 2, {}))
        older = await save(
            db, key, draft(1, 2 * index + 2, {}, level=index, absorbs=(older.id, leaf.id))
        )

    code, out, err = await trace(database_url, "--session", "chain")

    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= 80, out
    lines = tree_lines(out)
    assert len(lines) == 2 * CHAIN_ROLLUPS + 1
    assert lines[0]["prefix"] == "" and lines[0]["id"] == str(older.id)
    assert any(found["prefix"].startswith("…") for found in lines), "the outer levels cut"
    assert all(found.string.split()[-1] != "merged" for found in lines), "text keeps room"
