"""The benchmark's results: every number measured (`Results.record`), the table's rows
(`RowOut`) and the table itself, rendered as markdown (`table`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from scripts.bench.lib import Stats


@dataclass
class RowOut:
    """One line of the table: a Precis number, what it is compared with, and the target."""

    backend: str
    section: str
    measure: str
    value: str
    reference: str
    ratio: float | None
    target: str
    met: bool | None

    def cells(self) -> list[str]:
        ratio = "" if self.ratio is None else f"{self.ratio:.2f}x"
        verdict = "" if self.met is None else ("met" if self.met else "**missed**")
        return [
            self.backend,
            self.measure,
            self.value,
            self.reference,
            ratio,
            self.target,
            verdict,
        ]


@dataclass
class Results:
    measures: dict[str, dict[str, Any]] = field(default_factory=dict)
    rows: list[RowOut] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def record(self, key: str, stats: Stats, **extra: Any) -> Stats:
        stats.extra.update(extra)
        self.measures[key] = stats.as_dict()
        print(
            f"  {key}: p50 {stats.p50_ms:.3f} ms, p95 {stats.p95_ms:.3f} ms, "
            f"{stats.rate:,.0f}/s over {stats.ops} ops",
            flush=True,
        )
        return stats

    def row(self, row: RowOut) -> None:
        self.rows.append(row)


def ms(stats: Stats, p95: bool = False) -> str:
    value = f"{stats.p50_ms:.2f} ms"
    return value + (f" (p95 {stats.p95_ms:.2f})" if p95 else "")


def per_s(stats: Stats) -> str:
    return f"{stats.rate:,.0f} msg/s"


def table(rows: Sequence[RowOut]) -> str:
    header = ["DB", "measure", "Precis", "reference (same run)", "ratio", "target", "result"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    return "\n".join(lines)
