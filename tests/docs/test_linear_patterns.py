"""Every regular expression that reads client text takes linear time.

Python's `re` backtracks and holds the GIL while it does, so one quadratic pattern fed a large
message stalls every tenant's requests, even from a worker thread. Each pattern of `api/` and
`summarizer/` is a module constant (a literal at a call site would hide from this test), and
quadrupling an adversarial input at most quadruples its time, with slack for a busy machine
(a quadratic pattern takes sixteen times as long); so does the offline summarizer.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import api
import summarizer
from summarizer.local import _guide, merge_texts, summarize_transcript
from summarizer.transcript import TranscriptEntry

ROOT = Path(__file__).resolve().parents[2]

NOT_PYTHON_RE = {"summarizer.tokens._CL100K_PATTERN", "summarizer.tokens._O200K_PATTERN"}
"""Patterns another engine runs: the cl100k and o200k split patterns are tiktoken's (Rust)."""

UNITS = (
    "a", "A", "1", " ", "-", "_", ".", "/", "`", ":", "\\", "×", ",", "(", ")", "#", "\n",
    "中", "。", "a-", "a.", "a_", "aA", "Aa", "A-", "a ", ". ", "/a", "a/", "a:", "A:", "sk-",
    "bearer ", "a,", "a ×", " ×1", "#1 ", "- ", "http://", "~/", "../", "aA ", "a, A", "$ ",
    "decid", "conv_", "body.a", "1.", "a\\a",
)  # fmt: skip
"""Repeated, these are the inputs that make backtracking patterns blow up: runs a pattern
scans from every position, separators it looks for and never finds."""

SIZE = 4_000
"""Characters of the smaller input: a quadratic pattern already takes a tenth of a second on
four times as many."""

GROWTH = 4
"""The larger input is this many times the smaller."""

NOISE = 2.0
"""How much slower than linear a run may look on a busy machine (quadratic: GROWTH times; a
pattern matching at every character, making an object per match, measured 1.8 here while
another process ran)."""

SLACK_SECONDS = 0.002
"""Timer noise allowed on top: linear patterns take microseconds here."""


def _constants(value: Any) -> Iterator[Any]:
    if isinstance(value, tuple | list | frozenset | set):
        for item in value:
            yield from _constants(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _constants(item)
    else:
        yield value


def _module_patterns() -> dict[str, re.Pattern[str]]:
    found: dict[str, re.Pattern[str]] = {}
    for package in (api, summarizer):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                key = f"{info.name}.{name}"
                if key in NOT_PYTHON_RE:
                    continue
                if name.endswith("_PATTERN") and isinstance(value, str):
                    found[key] = re.compile(value)
                for item in _constants(value):
                    if isinstance(item, re.Pattern) and isinstance(item.pattern, str):
                        found[f"{key}/{item.pattern[:40]}"] = item
    return found


PATTERNS = _module_patterns()


def _best_time(work: Callable[[], object], runs: int = 3) -> float:
    """The least CPU time this thread spent on `work` over `runs` runs: other processes on a
    busy machine do not count."""
    best = float("inf")
    for _ in range(runs):
        started = time.thread_time()
        work()
        best = min(best, time.thread_time() - started)
    return best


def _assert_linear(work: Callable[[str], object], unit: str, size: int, what: str) -> None:
    small = unit * (size // len(unit))
    large = unit * (GROWTH * size // len(unit))
    small_time = _best_time(lambda: work(small))
    large_time = _best_time(lambda: work(large))
    assert large_time <= GROWTH * NOISE * small_time + SLACK_SECONDS, (
        f"{what} on {unit!r} repeated: {small_time:.4f} s at {len(small)} chars, "
        f"{large_time:.4f} s at {len(large)}: not linear"
    )


def test_the_patterns_are_found() -> None:
    """Module constants, patterns inside tuples, and the pattern strings pydantic checks."""
    names = {key.partition("/")[0] for key in PATTERNS}
    expected = {
        "summarizer.local._FEATURES",
        "api.items._BASE64",
        "api.schemas.common.SESSION_ID_PATTERN",
    }
    assert expected <= names
    assert sum(key.startswith("summarizer.local._FEATURES/") for key in PATTERNS) == 6


@pytest.mark.parametrize("key", sorted(PATTERNS))
def test_every_pattern_takes_linear_time(key: str) -> None:
    pattern = PATTERNS[key]

    def work(text: str) -> object:
        pattern.findall(text)
        return pattern.sub("", text)

    for unit in UNITS:
        _assert_linear(work, unit, SIZE, key)


def test_the_instructions_guide_takes_linear_time() -> None:
    guide = _guide("keep every path, error, decision and aaaa-aaaa, a.b, and file names")
    assert guide is not None
    for unit in UNITS:
        _assert_linear(guide.findall, unit, SIZE, "the instructions guide")


def _calls_with_a_literal_pattern(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "re"
            and node.func.attr != "compile"
            and node.args
            and not isinstance(node.args[0], ast.Name)
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_pattern_is_a_module_constant() -> None:
    """A pattern written at its call site would escape the linearity test above."""
    calls = [
        call
        for folder in ("api", "summarizer")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for call in _calls_with_a_literal_pattern(path)
    ]
    assert not calls, f"compile these patterns as module constants: {calls}"


@pytest.mark.parametrize("unit", ["a-", "a_", "aA", "a.", "` ", "a ×", "Aa-", "sk-a", "a"])
def test_the_offline_summarizer_takes_linear_time(unit: str) -> None:
    def summarize(text: str) -> object:
        entries = [TranscriptEntry(1, "user", "", text), TranscriptEntry(2, "assistant", "", text)]
        summary = summarize_transcript(entries, 400)
        return merge_texts([summary, f"Tools used: {text} ×2.\n- {text}"], 400)

    _assert_linear(summarize, unit, 25_000, "the offline summarizer")
