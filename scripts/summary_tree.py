"""A session's summaries as the forest they form (`api.summary_forest`), for
`scripts.trace_summary --session`: a tree that fits a terminal, and a flat list for machines.

The live tree starts at each live summary, in seq order: a cover first, over the roots it
stands for, then the roots a load shows after it. Under every summary come the summaries it
was made from (a node's neighbouring roots, a repair's fallback), down to the leaves, so the
tree is as deep as the forest: about log2(leaves) levels. What no live summary holds is
history: the summaries a removal erased (with the erased ones they had absorbed), grouped by
erasure and folded to one line per tree unless unfolded, then any summary cut off from the
rest (a corrupted chain).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from api.store.rows import SummaryRow
from api.summary_forest import depth_of, kind_of, leaves_of
from scripts.terminal import clip, display_width, optional_time, pad, short_time, timestamp

Status = Literal["live", "superseded", "erased"]
"""A summary's state as stored: live while neither superseded nor erased."""

HEADERS = ("summary", "seqs", "leaves", "depth", "status", "text")
"""The tree's columns: kind and id (indented), range, leaves, model passes, status, text."""

RIGHT_ALIGNED = (False, True, True, False)
"""Which of the middle columns (seqs .. status) are numbers, aligned right."""

BRANCH, LAST_BRANCH, RAIL, SPACE = "├─ ", "└─ ", "│  ", "   "
"""The glyphs before a summary: three columns per level of the tree."""

CUT = "…"
"""Stands for the levels left out where a tree (made before the forest) is too deep for the
line."""

MIN_TEXT_COLUMNS = 16
"""Columns kept for a summary's text before a too deep line loses its outer levels: a few
words of what it says matter more than rails far to the left."""

SEPARATOR = "  "

PLURALS = {"leaf": "leaves", "summary": "summaries"}


@dataclass(frozen=True)
class SummaryTree:
    """A session's summaries, each under the summary that absorbed it (`superseded_by`)."""

    summaries: dict[int, SummaryRow]
    sources: dict[int, list[int]]
    """Summary id -> the ids of the summaries it absorbed, in seq order."""
    live: list[int]
    """The live summaries, in seq order: the tops of the live tree."""
    erased: list[tuple[datetime, list[int]]]
    """The tops of the erased trees, grouped by the time of their erasure, oldest first."""
    stray: list[int]
    """The tops of what is under no live summary and no erased one (a corrupted chain)."""

    def walk(
        self, tops: Sequence[int], unfold: bool = True
    ) -> Iterator[tuple[int, tuple[bool, ...]]]:
        """Each summary from `tops` down (pre-order) with, for it and each summary above it,
        whether it is the last of its siblings; `unfold=False` gives the tops alone."""
        stack: list[tuple[int, tuple[bool, ...]]] = [
            (top, (index == len(tops) - 1,)) for index, top in enumerate(tops)
        ]
        stack.reverse()
        seen: set[int] = set()
        while stack:
            summary_id, lasts = stack.pop()
            if summary_id in seen:  # a corrupted, cyclic chain
                continue
            seen.add(summary_id)
            yield summary_id, lasts
            if not unfold:
                continue
            below = self.sources.get(summary_id, [])
            for index in range(len(below) - 1, -1, -1):
                stack.append((below[index], (*lasts, index == len(below) - 1)))

    def beneath(self, summary_id: int) -> int:
        """How many summaries are under `summary_id`, at any level."""
        return sum(1 for _ in self.walk([summary_id])) - 1

    def parent(self, summary: SummaryRow) -> SummaryRow | None:
        return None if summary.superseded_by is None else self.summaries.get(summary.superseded_by)

    def everything(self) -> list[int]:
        """Every summary once, in the order the tree shows it: the live tree, then history."""
        tops = [*self.live, *(top for _, group in self.erased for top in group), *self.stray]
        return [summary_id for summary_id, _ in self.walk(tops)]


def build(summaries: Sequence[SummaryRow]) -> SummaryTree:
    """The tree of `summaries` (one session's, in seq order)."""
    by_id = {summary.id: summary for summary in summaries}
    sources: dict[int, list[int]] = {}
    for summary in sorted(summaries, key=lambda s: (s.first_seq, s.level, s.id)):
        if summary.superseded_by in by_id:
            sources.setdefault(summary.superseded_by, []).append(summary.id)
    live = [summary.id for summary in summaries if status_of(summary) == "live"]
    tree = SummaryTree(by_id, sources, live, [], [])
    placed = {summary_id for summary_id, _ in tree.walk(live)}
    erased: dict[datetime, list[int]] = {}
    for summary in sorted(summaries, key=lambda s: (s.first_seq, s.id)):
        if summary.erased_at is not None and summary.id not in placed and not _held(summary, by_id):
            erased.setdefault(timestamp(summary.erased_at), []).append(summary.id)
    for time in sorted(erased):
        tree.erased.append((time, erased[time]))
        placed.update(summary_id for summary_id, _ in tree.walk(erased[time]))
    for summary in summaries:  # in a cycle, or under no summary in the session
        if summary.id not in placed:
            tree.stray.append(summary.id)
            placed.update(summary_id for summary_id, _ in tree.walk([summary.id]))
    return tree


def _held(summary: SummaryRow, by_id: dict[int, SummaryRow]) -> bool:
    return summary.superseded_by is not None and summary.superseded_by in by_id


def status_of(summary: SummaryRow) -> Status:
    if summary.erased_at is not None:
        return "erased"
    return "live" if summary.superseded_by is None else "superseded"


def shown_status(summary: SummaryRow, parent: SummaryRow | None) -> str:
    """The status a line shows: `live`, `erased`, or what the summary above it did with it:
    `covered` (a root a cover stands for), `merged` (into a node), `repaired`."""
    status = status_of(summary)
    if status != "superseded" or parent is None:
        return status
    if (parent.metadata or {}).get("repair_of") == summary.id:
        return "repaired"
    return "covered" if kind_of(parent) == "cover" else "merged"


# --- JSON -----------------------------------------------------------------------------------


def flat_json(tree: SummaryTree) -> list[dict[str, Any]]:
    """One object per summary, in the tree's order; `parent_id` and `source_ids` rebuild it."""
    return [summary_json(tree, tree.summaries[summary_id]) for summary_id in tree.everything()]


def summary_json(tree: SummaryTree, summary: SummaryRow) -> dict[str, Any]:
    parent = tree.parent(summary)
    return {
        "id": summary.id,
        "kind": kind_of(summary),
        "first_seq": summary.first_seq,
        "last_seq": summary.last_seq,
        "level": summary.level,
        "leaves": leaves_of(summary),
        "depth": depth_of(summary),
        "status": status_of(summary),
        "parent_id": None if parent is None else parent.id,
        "source_ids": tree.sources.get(summary.id, []),
        "message_count": summary.message_count,
        "model": summary.model,
        "created_at": timestamp(summary.created_at).isoformat(),
        "erased_at": optional_time(summary.erased_at),
        "metadata": summary.metadata,
        "summary_text": summary.summary_text,
    }


# --- text -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    """One summary's line before layout."""

    lasts: tuple[bool, ...]
    """For the summary and each above it, whether it is the last of its siblings."""
    label: str
    cells: tuple[str, str, str, str]
    text: str


def overview(tree: SummaryTree) -> str:
    """What a load shows of the forest: its cover and roots, its leaves, its deepest pass."""
    live = [tree.summaries[summary_id] for summary_id in tree.live]
    if not live:
        return "A load shows no summary."
    leaves = sum(map(leaves_of, live))
    deepest = max(map(depth_of, live))
    roots = [summary for summary in live if kind_of(summary) != "cover"]
    shown = _count(len(roots), "root")
    if len(roots) < len(live):
        cover = next(summary for summary in live if kind_of(summary) == "cover")
        under = tree.sources.get(cover.id, [])
        while len(under) == 1 and kind_of(tree.summaries[under[0]]) == "cover":  # repaired
            under = tree.sources.get(under[0], [])
        covered = _count(len(under), "root")
        shown = f"cover {cover.id} (over {covered})" + (f" and {shown}" if roots else "")
    return f"A load shows {shown}: {_count(leaves, 'leaf')}, deepest {deepest} passes."


def _count(count: int, noun: str) -> str:
    plural = PLURALS.get(noun, f"{noun}s")
    return f"{count} {noun if count == 1 else plural}"


def render(tree: SummaryTree, width: int, unfold_erased: bool) -> list[str]:
    """The tree as lines of at most `width` columns: the live tree, then the erased trees (one
    line each unless `unfold_erased`), then any stray summary."""
    sections: list[tuple[str | None, list[Line]]] = [(None, _lines(tree, tree.live, True))]
    for erased_at, group in tree.erased:
        count = sum(1 for _ in tree.walk(group))
        folded = "" if unfold_erased or count == len(group) else ", folded (--full unfolds them)"
        heading = f"Erased at {short_time(erased_at)} UTC: {_count(count, 'summary')}{folded}:"
        sections.append((heading, _lines(tree, group, unfold_erased)))
    if tree.stray:
        stray = f"Under no live or erased summary: {_count(len(tree.stray), 'tree')}:"
        sections.append((stray, _lines(tree, tree.stray, True)))
    layout = Layout.fit([line for _, lines in sections for line in lines], width)
    rendered = [layout.header()]
    if not tree.live:
        rendered.append("(no live summary)")
    for title, lines in sections:
        if title is not None:
            rendered += ["", *wrap(title, width)]
        rendered.extend(layout.line(line) for line in lines)
    return rendered


def _lines(tree: SummaryTree, tops: Sequence[int], unfold: bool) -> list[Line]:
    return [_line(tree, summary_id, lasts, unfold) for summary_id, lasts in tree.walk(tops, unfold)]


def _line(tree: SummaryTree, summary_id: int, lasts: tuple[bool, ...], unfold: bool) -> Line:
    summary = tree.summaries[summary_id]
    notes: list[str] = []
    if not unfold and tree.sources.get(summary_id):
        notes.append(f"+{tree.beneath(summary_id)} folded")
    metadata = summary.metadata or {}
    if metadata.get("repair_of") is not None:
        notes.append(f"repair of {metadata['repair_of']}")
    if summary.model == "fallback":
        notes.append("fallback")
    if metadata.get("trigger_reason") == "erasure":
        notes.append("made again")
    text = " ".join([*(f"[{note}]" for note in notes), summary.summary_text])
    cells = (
        f"{summary.first_seq}..{summary.last_seq}",
        str(leaves_of(summary)),
        str(depth_of(summary)),
        shown_status(summary, tree.parent(summary)),
    )
    return Line(lasts, f"{kind_of(summary)} {summary.id}", cells, text)


def _prefix(lasts: tuple[bool, ...]) -> list[str]:
    """One glyph group per level below the top: the rails of the levels above, then the
    branch to the summary."""
    if len(lasts) <= 1:
        return []
    groups = [SPACE if last else RAIL for last in lasts[1:-1]]
    return [*groups, LAST_BRANCH if lasts[-1] else BRANCH]


def wrap(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` columns, at spaces (a longer word is clipped)."""
    words = text.split(" ")
    lines = [""]
    for word in words:
        candidate = f"{lines[-1]} {word}" if lines[-1] else word
        if display_width(candidate) <= width or not lines[-1]:
            lines[-1] = candidate
        else:
            lines.append(word)
    return [clip(line, width) for line in lines]


@dataclass(frozen=True)
class Layout:
    """Column widths that fit the lines to a width."""

    width: int
    tree_budget: int
    """Columns the first column may take: a deeper line loses its outer levels."""
    tree_columns: int
    """The first column's width: the widest line's glyphs, kind and id."""
    cell_columns: tuple[int, ...]

    @classmethod
    def fit(cls, lines: Sequence[Line], width: int) -> Layout:
        cells = [display_width(header) for header in HEADERS[1:-1]]
        for line in lines:
            cells = [max(a, display_width(b)) for a, b in zip(cells, line.cells, strict=True)]
        fixed = sum(cells) + len(SEPARATOR) * (len(cells) + 1)
        budget = width - fixed - MIN_TEXT_COLUMNS
        shown = [display_width(_tree_cell(line, budget)) for line in lines]
        return cls(width, budget, max([display_width(HEADERS[0]), *shown]), tuple(cells))

    def header(self) -> str:
        return self._join(HEADERS[0], HEADERS[1:-1], HEADERS[-1])

    def line(self, line: Line) -> str:
        return self._join(_tree_cell(line, self.tree_budget), line.cells, line.text)

    def _join(self, first: str, cells: Sequence[str], text: str) -> str:
        parts = [pad(first, self.tree_columns)]
        for cell, columns, right in zip(cells, self.cell_columns, RIGHT_ALIGNED, strict=True):
            parts.append(cell.rjust(columns) if right else pad(cell, columns))
        room = self.width - display_width(SEPARATOR.join(parts)) - len(SEPARATOR)
        if room > 1 and text.strip():
            parts.append(clip(text, room))
        line = SEPARATOR.join(parts).rstrip()
        # a line can only overflow when the columns alone are wider than the terminal
        return _cut(line, self.width)


def _tree_cell(line: Line, budget: int) -> str:
    """Glyphs, kind and id; past `budget` columns the outer levels give way to `CUT`."""
    groups = _prefix(line.lasts)
    full = "".join(groups) + line.label
    if display_width(full) <= budget or not groups:
        return full
    room = budget - display_width(line.label) - display_width(CUT)
    keep = max(1, room // len(BRANCH))
    return CUT + "".join(groups[-keep:]) + line.label


def _cut(line: str, width: int) -> str:
    """`line` cut to `width` columns, its spacing kept."""
    if display_width(line) <= width:
        return line
    kept = ""
    for char in line:
        if display_width(kept + char) > width - display_width(CUT):
            break
        kept += char
    return kept + CUT
