"""The shape of a session's summaries: a forest of bounded depth, and the cover a load shows.

Leaves are summaries of messages. A node is made from neighbouring roots of the forest, never
from a summary that already absorbed one of them: the trailing roots of fewer than `group_size`
leaves are merged into one node once they hold that many, and the two newest roots are merged
while the newer holds at least as many leaves as the older (a binary counter), so a fact goes
through about log2(leaves) merges. When two or more roots hold `group_size` leaves or more, the
load shows one cover made from them (made again from the roots, never from the previous cover,
whenever they change) and the smaller roots after it: at most `summary_limit` summaries, the
whole past, contiguous, in order.

A removal erases a leaf and the nodes above it (`api.store.removal`); once the leaf is made
again, the merges owed are where the erased nodes were (`_merge`), from the same neighbours.

`next_step` reads a `Forest` (no I/O) and says what to store next; `api.summarization` reads
the forest (`read_forest`), stores each step, and reads it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncSession

from api import store

Kind = Literal["leaf", "node", "cover"]
"""`metadata.kind` of a summary: made from messages, from forest roots, or shown over them."""

MAX_GROUP_LEVEL = 3
"""Leaves gather in groups of at most 2**3 before they are merged: a larger group would show
more small roots than a load has room for, a smaller one makes more merges per leaf."""

LEGACY_LEVEL_CAP = 30
"""A roll-up made before the forest (no `metadata.leaves`) counts as 2**level leaves, capped:
it stays a root of its own, as old as it is large, and only covers ever read it."""


def kind_of(summary: store.SummaryRow) -> Kind:
    kind = (summary.metadata or {}).get("kind")
    if kind in ("leaf", "node", "cover"):
        return kind  # type: ignore[no-any-return]
    return "leaf" if summary.level == 0 else "node"


def leaves_of(summary: store.SummaryRow) -> int:
    """The leaves a summary stands for (`metadata.leaves`, else estimated from its level)."""
    leaves = (summary.metadata or {}).get("leaves")
    if isinstance(leaves, int) and leaves >= 1:
        return int(leaves)
    return 1 << min(summary.level, LEGACY_LEVEL_CAP)


def depth_of(summary: store.SummaryRow) -> int:
    """The most model passes any fact of a summary went through (`metadata.depth`, else one
    per level: a roll-up made before depths were recorded)."""
    depth = (summary.metadata or {}).get("depth")
    return int(depth) if isinstance(depth, int) and depth >= 1 else summary.level + 1


def group_size(summary_limit: int) -> int:
    """Leaves a group holds: its smaller roots (one per bit below it) and a cover fit
    `summary_limit`."""
    return int(2 ** max(0, min(summary_limit - 1, MAX_GROUP_LEVEL)))


def leaf_count(message_count: int, message_limit: int) -> int:
    """The leaves a summary of `message_count` messages stands for: one for a proactive summary,
    more for a large range (a compaction, a re-make after a removal), so a large summary is not
    merged as a small one."""
    return max(1, -(-message_count // max(1, message_limit)))


def forest_metadata(
    kind: Kind, leaves: int, sources: Sequence[store.SummaryRow], merge_depth: int
) -> dict[str, Any]:
    """What a summary's metadata says of its place in the forest: its kind, its leaves, and
    its depth (a leaf: its own bisect's passes; a node or cover: its sources' deepest, plus
    the passes of the merge that made it)."""
    before = max((depth_of(source) for source in sources), default=0)
    return {"kind": kind, "leaves": leaves, "depth": before + max(1, merge_depth)}


@dataclass(frozen=True)
class Forest:
    """A session's live summaries as the forest sees them."""

    roots: tuple[store.SummaryRow, ...]
    """The forest's roots, oldest first: live ones, and those the cover stands for."""
    covers: tuple[store.SummaryRow, ...] = ()
    """The cover shown over the leading roots, top first (a repaired cover above the one it
    repaired), or none."""
    covered: int = 0
    """How many leading roots the cover stands for."""


@dataclass(frozen=True)
class Merge:
    """Store a node made from these consecutive live roots."""

    sources: tuple[store.SummaryRow, ...]


@dataclass(frozen=True)
class Cover:
    """Store a cover made from these consecutive live roots (the leading ones)."""

    sources: tuple[store.SummaryRow, ...]


@dataclass(frozen=True)
class Uncover:
    """Delete the cover (its roots are live again): the roots it stands for change."""

    covers: tuple[store.SummaryRow, ...]


Step = Merge | Cover | Uncover


def _tail_merge(roots: Sequence[store.SummaryRow], group: int) -> tuple[store.SummaryRow, ...]:
    """The roots to merge at the end of `roots`, or none: a full group of small trailing roots,
    else the two newest while the newer is as large as the older."""
    small: list[store.SummaryRow] = []
    for root in reversed(roots):
        if leaves_of(root) >= group:
            break
        small.insert(0, root)
    if len(small) > 1 and sum(map(leaves_of, small)) >= group:
        return tuple(small)
    if len(roots) >= 2 and leaves_of(roots[-1]) >= leaves_of(roots[-2]):
        return tuple(roots[-2:])
    return ()


def _merge(roots: Sequence[store.SummaryRow], group: int) -> tuple[store.SummaryRow, ...]:
    """The roots to merge next, or none, oldest first.

    A forest grown leaf by leaf owes merges at its end only (`_tail_merge`); one a local
    erasure opened owes them where the erased nodes were: a run of small roots a larger one
    follows (the re-made leaf and its old siblings) is merged as one group, then the first
    prefix of the roots whose end owes a merge gets it, so the erased nodes are made again
    from the same neighbours, at the same depth."""
    run: list[store.SummaryRow] = []
    for root in roots:
        if leaves_of(root) < group:
            run.append(root)
            continue
        if len(run) > 1:
            return tuple(run)
        run = []
    for end in range(2, len(roots) + 1):
        merge = _tail_merge(roots[:end], group)
        if merge:
            return merge
    return ()


def next_step(forest: Forest, summary_limit: int) -> Step | None:
    """What to store next so the forest is complete and a load shows at most
    `summary_limit` summaries; None when nothing is owed."""
    group = group_size(summary_limit)
    roots = forest.roots
    merge = _merge(roots, group)
    covered = roots[: forest.covered]
    if merge:
        if forest.covers and any(source in covered for source in merge):
            return Uncover(forest.covers)
        return Merge(merge)
    large = tuple(root for root in roots if leaves_of(root) >= group)
    if forest.covers and covered != large:
        return Uncover(forest.covers)
    if not forest.covers and len(large) >= 2:
        return Cover(large)
    return None


def after(forest: Forest, step: Merge | Cover, made: store.SummaryRow) -> Forest:
    """The forest once `made`, the node or cover of `step`, is stored (what a preview
    simulates)."""
    if isinstance(step, Cover):
        return Forest(forest.roots, (made,), len(step.sources))
    start = forest.roots.index(step.sources[0])
    roots = (*forest.roots[:start], made, *forest.roots[start + len(step.sources) :])
    return Forest(roots, forest.covers, forest.covered)


def shown(forest: Forest) -> list[store.SummaryRow]:
    """What a load shows of the forest: the cover, then the roots it does not stand for."""
    return [*forest.covers[:1], *forest.roots[forest.covered :]]


MAX_FOREST_STEPS = 64
"""Steps one run takes to complete the forest at most (a few merges and a cover are owed after
a leaf; a session whose roll-ups a long outage held back may owe a few dozen)."""


async def read_forest(db: AsyncSession, live: list[store.SummaryRow]) -> Forest:
    """The session's forest: its live summaries, the oldest of them a cover standing for the
    leading roots when there is one (a repaired cover above the cover it repaired)."""
    if not live or kind_of(live[0]) != "cover":
        return Forest(tuple(live))
    covers = [live[0]]
    under = await store.absorbed_by(db, live[0])
    while len(under) == 1 and kind_of(under[0]) == "cover":
        covers.append(under[0])
        under = await store.absorbed_by(db, under[0])
    return Forest((*under, *live[1:]), tuple(covers), len(under))
