"""The wires' fidelity benchmark (`scripts.bench.fidelity_wires.run_row`) on a short
conversation that outgrows a small window: a client resending everything through
`POST /v1/messages` to a model counting 1.5x cl100k's tokens keeps every fact in every
request, inside the window, each message stored once, and a regenerated answer branches."""

from __future__ import annotations

from pathlib import Path

from scripts.bench.fidelity_wires import run_row

WINDOW = 3_000
TURNS = 40
"""About 4,000 tokens of conversation: the fit to the window has to summarize."""


async def test_a_resent_conversation_keeps_every_fact_inside_the_window(tmp_path: Path) -> None:
    row = await run_row("messages", "window", 1.5, WINDOW, TURNS, tmp_path)
    assert row.summaries >= 1
    assert row.min_share == row.regenerated_share == 1.0
    assert row.largest_request <= WINDOW
    assert row.late_refusals == 0 and row.failed_turns == []
    assert row.stored == row.expected_stored == 2 * TURNS + 1 and row.stored_as_sent
    assert row.branched and row.earlier_branch_kept
    assert row.missed() == []
