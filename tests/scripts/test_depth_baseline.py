"""The depth benchmark's same-run baseline (`scripts.bench.depth_baseline`) without running it:
a baseline's JSON rows read back, and the two structures printed side by side."""

from __future__ import annotations

import json

from scripts.bench import fidelity_depth
from scripts.bench.depth_baseline import Baseline, rows_from_report, side_by_side
from scripts.bench.fidelity_depth import DepthRow


def row(messages: int, probability: float, level: int, depth: int | None) -> DepthRow:
    return DepthRow(
        messages=messages,
        keep_probability=probability,
        quarter_shares=[0.5, 0.6, 0.7, 0.8],
        deepest_level=level,
        deepest_depth=depth,
        deepest_passes=level + 1,
        leaves=30,
        llm_calls=57,
        failed_calls=0,
        input_tokens=180_000,
        raw_tokens=148_000,
        removal_calls=3,
        removal_input_tokens=147_000,
        removal_quarter_shares=[0.5, 0.5, 0.5, 0.5],
        unsettled_waits=0,
        seconds=8.0,
        removal_seconds=1.0,
        summaries=60,
    )


def test_a_baseline_s_json_rows_read_back_as_the_rows_it_measured() -> None:
    measured = [row(600, 0.9, 27, None), row(3_000, 1.0, 147, None)]
    written = json.loads(json.dumps(fidelity_depth.report(measured)))
    assert "missed" in written[0]
    assert rows_from_report(written) == measured


def test_each_row_is_printed_after_the_baseline_s_row_of_the_same_session() -> None:
    baseline = Baseline("b9180b6", [row(600, 0.9, 27, None), row(600, 1.0, 27, None)])
    forest = [row(600, 0.9, 5, 6), row(600, 1.0, 5, 6)]
    table = side_by_side(baseline, forest).splitlines()
    assert table[0].startswith("| depth: messages | p | structure | oldest quarter |")
    cells = [line.split(" | ") for line in table[2:-1]]
    assert [(c[0], c[1], c[2]) for c in cells] == [
        ("| 600", "0.9", "chain (b9180b6)"),
        ("| 600", "0.9", "forest"),
        ("| 600", "1", "chain (b9180b6)"),
        ("| 600", "1", "forest"),
    ]
    assert "27, n/a, 28 (<= 7)" in table[2] and "MISSED" in table[2]
    assert "5, 6, 6 (<= 7)" in table[3]
    widths = {line.count("|") for line in table}
    assert len(widths) == 1, "every line has the same columns"


def test_a_session_measured_on_one_structure_only_keeps_its_row() -> None:
    baseline = Baseline("b9180b6", [row(600, 0.9, 27, None)])
    table = side_by_side(baseline, [row(3_000, 0.9, 8, 9)]).splitlines()
    assert [line.split(" | ")[2] for line in table[2:-1]] == ["chain (b9180b6)", "forest"]


def test_another_commit_is_named_a_baseline() -> None:
    assert Baseline("b9180b6", []).structure == "chain (b9180b6)"
    assert Baseline("42c5ea3", []).structure == "baseline (42c5ea3)"


def test_without_structures_the_table_has_no_structure_column() -> None:
    assert "structure" not in fidelity_depth.render([row(600, 0.9, 5, 6)])
