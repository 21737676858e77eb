"""The depth benchmark's baseline: the same rows measured, in the same run, on the service as it
was at an earlier commit (by default the roll-up chain's), printed beside today's.

The commit's tree is extracted into a temporary directory (`git archive`) and its own
`python -m scripts.bench.fidelity_depth` runs there with this interpreter (its `api`,
`summarizer` and `tests.support` are the tree's: the working directory comes first on the
module path), with `--quick` when this run has it; its JSON rows are read back as `DepthRow`s
and judged against today's targets. The default commit, b9180b6, is the last one before the
forest: its service is 5a48958's (it adds only the benchmark, its fake model mode and tests),
and it runs unpatched with today's environment.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from scripts.bench.fidelity_depth import DepthRow, render, report

ROOT = Path(__file__).resolve().parents[2]
BASELINE_COMMIT = "b9180b6"
"""The last commit with the roll-up chain (and the benchmark that measured it)."""
CURRENT_STRUCTURE = "forest"
PROGRESS_PREFIX = "depth "
"""The start of the baseline's progress lines, echoed as they come."""
ERROR_LINES = 30
"""The baseline's last output lines a failure quotes."""


@dataclass
class Baseline:
    commit: str
    """The commit measured, abbreviated."""
    rows: list[DepthRow]

    @property
    def structure(self) -> str:
        chain = self.commit.startswith(BASELINE_COMMIT) or BASELINE_COMMIT.startswith(self.commit)
        return f"{'chain' if chain else 'baseline'} ({self.commit})"


def _git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True).stdout


def rows_from_report(rows: list[dict[str, Any]]) -> list[DepthRow]:
    """`DepthRow`s from the JSON rows of a `fidelity_depth` run (what it derives, such as
    `missed`, is left out: it is computed again against today's targets)."""
    names = {field.name for field in fields(DepthRow)}
    return [DepthRow(**{key: value for key, value in row.items() if key in names}) for row in rows]


def measure(commit: str = BASELINE_COMMIT, quick: bool = False) -> Baseline:
    """Run `commit`'s depth benchmark in a copy of its tree; its progress lines are printed."""
    short = _git("rev-parse", "--short", f"{commit}^{{commit}}").decode().strip()
    structure = Baseline(short, []).structure
    with tempfile.TemporaryDirectory(prefix="bench-depth-baseline-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        subprocess.run(["tar", "-x", "-C", str(tree)], input=_git("archive", short), check=True)
        output = Path(tmp) / "rows.json"
        command = [sys.executable, "-m", "scripts.bench.fidelity_depth", "--output", str(output)]
        env = {**os.environ, "PYTHONPATH": str(tree)}
        last: collections.deque[str] = collections.deque(maxlen=ERROR_LINES)
        with subprocess.Popen(
            command + (["--quick"] if quick else []),
            cwd=tree,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as child:
            assert child.stdout is not None
            for line in child.stdout:
                last.append(line)
                if line.startswith(PROGRESS_PREFIX):
                    print(f"{structure}: {line}", end="", flush=True)
        if child.returncode != 0:
            raise RuntimeError(
                f"the depth benchmark at {short} exited {child.returncode}:\n" + "".join(last)
            )
        body = json.loads(output.read_text(encoding="utf-8"))
    return Baseline(short, rows_from_report(body["rows"]))


def side_by_side(baseline: Baseline, rows: list[DepthRow]) -> str:
    """One table: for each (messages, p), the baseline's row, then today's."""
    keys = list(dict.fromkeys((r.messages, r.keep_probability) for r in baseline.rows + rows))
    paired: list[tuple[str, DepthRow]] = []
    for key in keys:
        for structure, group in ((baseline.structure, baseline.rows), (CURRENT_STRUCTURE, rows)):
            paired += [(structure, r) for r in group if (r.messages, r.keep_probability) == key]
    return render([row for _, row in paired], [structure for structure, _ in paired])


def baseline_report(baseline: Baseline) -> dict[str, Any]:
    return {
        "commit": baseline.commit,
        "structure": baseline.structure,
        "rows": report(baseline.rows),
    }
