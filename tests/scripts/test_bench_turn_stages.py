"""The turn-stages bench (`scripts/bench/turn_stages.py`) times every step it names: run as
its command runs, in a process of its own (it wraps the service's functions with its clock)."""

from __future__ import annotations

import subprocess
import sys

from scripts.bench.turn_stages import STEPS

LENGTHS = (4, 40)


def test_every_step_of_the_turn_is_timed_at_every_length() -> None:
    command = ["-m", "scripts.bench.turn_stages", "--backend", "sqlite", "--calls", "3"]
    answer = subprocess.run(
        [sys.executable, *command, "--earlier", ",".join(map(str, LENGTHS))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert answer.returncode == 0, answer.stderr
    rows = {
        line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
        for line in answer.stdout.splitlines()[2:]
    }
    assert set(rows) == {label for _, _, label in STEPS} | {"whole request"}
    for cells in rows.values():
        assert len(cells) == len(LENGTHS)
        assert all(float(cell.removesuffix(" ms")) > 0 for cell in cells)
    whole = [float(cell.removesuffix(" ms")) for cell in rows["whole request"]]
    steps = [[float(cell.removesuffix(" ms")) for cell in rows[label]] for _, _, label in STEPS]
    assert all(max(step[i] for step in steps) < whole[i] for i in range(len(LENGTHS)))
