"""The forest's rule (`api.summary_forest`), run on summaries in memory: a load shows at most
`summary_limit` summaries covering the whole past in order, every fact goes through
O(log leaves) merges, and the merges per leaf stay no more than a chain's roll-ups."""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime

import pytest

from api import store
from api.summary_forest import (
    Cover,
    Forest,
    Kind,
    Merge,
    Uncover,
    after,
    depth_of,
    forest_metadata,
    leaves_of,
    next_step,
    shown,
)

NOW = datetime(2026, 11, 26, tzinfo=UTC)
_ids = itertools.count(1)


def row(first: int, last: int, level: int, metadata: dict[str, object]) -> store.SummaryRow:
    return store.SummaryRow(
        id=next(_ids),
        session_id=1,
        summary_text=f"{first}..{last}",
        summary_prompt="",
        model="m",
        temperature=0.0,
        target_summary_tokens=800,
        keep_last_n=0,
        message_count=last - first + 1,
        approx_tokens=10,
        first_message_id=first,
        last_message_id=last,
        first_seq=first,
        last_seq=last,
        first_message_at=NOW,
        last_message_at=NOW,
        level=level,
        superseded_by=None,
        metadata=metadata,
        created_at=NOW,
        erased_at=None,
    )


def leaf(index: int) -> store.SummaryRow:
    return row(index, index, 0, forest_metadata("leaf", 1, (), 1))


def made(step: Merge | Cover) -> store.SummaryRow:
    kind: Kind = "node" if isinstance(step, Merge) else "cover"
    sources = step.sources
    level = max(source.level for source in sources) + 1
    place = forest_metadata(kind, sum(map(leaves_of, sources)), sources, 1)
    return row(sources[0].first_seq, sources[-1].last_seq, level, place)


def completed(forest: Forest, summary_limit: int) -> tuple[Forest, int]:
    """The forest once every step it owes is stored, and how many model calls they made."""
    calls = 0
    while (step := next_step(forest, summary_limit)) is not None:
        if isinstance(step, Uncover):
            forest = Forest(forest.roots)
            continue
        forest = after(forest, step, made(step))
        calls += 1
    return forest, calls


@pytest.mark.parametrize("summary_limit", [1, 2, 3, 4, 6])
def test_a_load_shows_the_whole_past_in_at_most_summary_limit_summaries(
    summary_limit: int,
) -> None:
    forest = Forest(())
    for index in range(1, 300):
        forest, _ = completed(
            Forest((*forest.roots, leaf(index)), forest.covers, forest.covered), summary_limit
        )
        live = shown(forest)
        assert len(live) <= summary_limit, (index, [(s.first_seq, s.last_seq) for s in live])
        assert [s.first_seq for s in live] == [1] + [s.last_seq + 1 for s in live[:-1]]
        assert live[-1].last_seq == index


@pytest.mark.parametrize("leaves", [8, 37, 100, 187, 600])
def test_every_fact_goes_through_at_most_log2_leaves_plus_two_passes(leaves: int) -> None:
    forest = Forest(())
    calls = 0
    for index in range(1, leaves + 1):
        grown = Forest((*forest.roots, leaf(index)), forest.covers, forest.covered)
        forest, made_calls = completed(grown, 3)
        calls += made_calls
    deepest = max(depth_of(summary) for summary in shown(forest))
    assert deepest <= math.ceil(math.log2(leaves)) + 2
    # a chain makes one roll-up per leaf past the limit: never more merges than that
    assert calls <= leaves


def test_a_cover_is_made_again_from_the_roots_not_from_the_previous_cover() -> None:
    forest = Forest(())
    covers: list[store.SummaryRow] = []
    for index in range(1, 40):
        forest, _ = completed(
            Forest((*forest.roots, leaf(index)), forest.covers, forest.covered), 3
        )
        if forest.covers and forest.covers[0] not in covers:
            covers.append(forest.covers[0])
    assert len(covers) >= 2
    roots = {summary.id for summary in forest.roots}
    assert all(cover.id not in roots for cover in covers)
    # each cover's depth comes from the roots under it, plus its own pass
    assert (
        depth_of(forest.covers[0]) == max(depth_of(r) for r in forest.roots[: forest.covered]) + 1
    )


def test_a_merge_under_the_cover_deletes_the_cover_first() -> None:
    big = [
        row(1, 4, 2, forest_metadata("node", 4, (), 3)),
        row(5, 8, 2, forest_metadata("node", 4, (), 3)),
    ]
    cover = row(1, 8, 3, forest_metadata("cover", 8, big, 1))
    forest = Forest((*big, row(9, 12, 2, forest_metadata("node", 4, (), 3))), (cover,), 2)
    step = next_step(forest, 3)
    assert step == Uncover((cover,))
    # the oldest neighbours owing a merge go first
    assert next_step(Forest(forest.roots), 3) == Merge(tuple(forest.roots[:2]))


def test_a_hole_s_new_leaf_and_its_old_siblings_are_merged_as_the_erased_nodes_were() -> None:
    """After a local erasure: the re-made leaf 5..6 and its siblings, between a node of four
    leaves and one of eight, are merged as one group, then equal neighbours, oldest first:
    the same nodes as before the removal, at the same depth."""
    leaf = forest_metadata("leaf", 1, (), 1)
    group = [row(2 * i + 1, 2 * i + 2, 0, leaf) for i in range(2, 6)]
    roots = (
        row(1, 4, 2, forest_metadata("node", 4, (), 2)),
        *group,
        row(13, 28, 3, forest_metadata("node", 8, (), 4)),
    )
    step = next_step(Forest(roots), 3)
    assert step == Merge(tuple(group))
    grouped = row(5, 12, 1, forest_metadata("node", 4, group, 1))
    merged = after(Forest(roots), Merge(tuple(group)), grouped)
    assert next_step(merged, 3) == Merge((roots[0], grouped))
    eight = row(1, 12, 3, forest_metadata("node", 8, (roots[0], grouped), 1))
    merged = after(merged, Merge((roots[0], grouped)), eight)
    assert next_step(merged, 3) == Merge((eight, roots[-1]))


def test_a_legacy_roll_up_without_leaves_stays_a_root_of_its_own() -> None:
    legacy = row(1, 300, 27, {"trigger_reason": "rollup"})
    assert leaves_of(legacy) == 2**27 and depth_of(legacy) == 28
    forest, _ = completed(Forest((legacy, leaf(301))), 3)
    assert forest.roots[0] == legacy
