"""The fidelity bench's least-calls bound (`scripts.bench.fidelity.least_calls`): what each
stored summary needed of the model at the least."""

from __future__ import annotations

from typing import Any

import pytest

from scripts.bench.fidelity import least_calls


def _summary(**metadata: Any) -> dict[str, Any]:
    return {"metadata": metadata}


@pytest.mark.parametrize(
    ("metadata", "calls"),
    [
        ({"trigger_reason": "message_limit", "chunk_count": 1}, 1),
        ({"trigger_reason": "message_limit", "chunk_count": 3}, 5),  # three leaves, two merges
        ({"trigger_reason": "rollup", "chunk_count": 2}, 1),  # one merge of two summaries
        ({"trigger_reason": "rollup", "chunk_count": 2, "fallback": True}, 0),
        ({"trigger_reason": "message_limit", "fallback": True}, 0),
        # a repair summarizes the source messages again, a repaired roll-up's too
        ({"trigger_reason": "rollup", "chunk_count": 1, "repair_of": 7}, 1),
        ({"trigger_reason": "message_limit", "chunk_count": 2, "repair_of": 3}, 3),
    ],
)
def test_least_calls_counts_leaves_merges_and_repairs(metadata: dict[str, Any], calls: int) -> None:
    assert least_calls(_summary(**metadata)) == calls
