"""The depth benchmark's core (`scripts.bench.fidelity_depth.measure`) on a small session: the
figures are computed, perfect recall keeps every fact and a lossy model fewer."""

from __future__ import annotations

from typing import Any

import pytest

from scripts.bench import fidelity_depth
from scripts.bench.fidelity_depth import DepthRow, measure, migrated_template, passes

Summary = dict[str, Any]

MESSAGES = 100
"""Five leaf summaries: two roll-ups at `summary_limit` 3."""


@pytest.fixture(scope="module")
async def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[float, DepthRow]:
    folder = tmp_path_factory.mktemp("depth")
    template = await migrated_template(folder)
    return {p: await measure(MESSAGES, p, template, folder) for p in (1.0, 0.5)}


@pytest.mark.parametrize("probability", [1.0, 0.5])
async def test_the_figures_of_a_small_session_are_computed(
    rows: dict[float, DepthRow], probability: float
) -> None:
    row = rows[probability]
    assert len(row.quarter_shares) == fidelity_depth.QUARTERS
    assert all(0.0 <= share <= 1.0 for share in row.quarter_shares)
    assert len(row.removal_quarter_shares) == fidelity_depth.QUARTERS
    assert 0.0 < row.kept_after_removal <= 1.0
    assert row.leaves >= 4
    assert row.deepest_level >= 1
    assert row.deepest_depth is None or row.deepest_depth >= 1
    assert row.deepest_passes >= 2  # a leaf, then at least one merge
    assert row.llm_calls >= row.leaves and row.input_tokens > row.llm_calls
    assert row.raw_tokens > 0
    assert row.removal_calls >= 1 and row.removal_input_tokens > 0
    assert row.unsettled_waits == 0
    assert fidelity_depth.render([row]).count("\n") == 3


async def test_perfect_recall_keeps_every_fact_of_every_quarter(
    rows: dict[float, DepthRow],
) -> None:
    assert rows[1.0].quarter_shares == [1.0] * fidelity_depth.QUARTERS
    assert "perfect recall" not in rows[1.0].missed()


async def test_a_lossy_model_loses_facts(
    rows: dict[float, DepthRow],
) -> None:
    shares = rows[0.5].quarter_shares
    assert sum(shares) < fidelity_depth.QUARTERS
    assert shares[0] < 1.0


def test_passes_follow_the_links_of_roll_ups() -> None:
    def summary(key: int, level: int, superseded_by: int | None, **metadata: Any) -> Summary:
        return {"id": key, "level": level, "superseded_by": superseded_by, "metadata": metadata}

    found = passes(
        [
            summary(1, 0, 3, trigger_reason="message_limit", max_depth=0),
            summary(2, 0, 3, trigger_reason="message_limit", max_depth=2),  # bisected twice
            summary(3, 1, 5, trigger_reason="rollup", max_depth=1),
            summary(4, 0, 5, trigger_reason="message_limit", max_depth=0),
            summary(5, 2, None, trigger_reason="rollup", max_depth=1),
        ]
    )
    assert found == {1: 1, 2: 3, 3: 4, 4: 1, 5: 5}
