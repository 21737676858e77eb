"""The house rules `docs/design.md` states about the tree hold: small modules under `api/`, one
owner of commits, test support where the tests live, dependencies pointing down."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

MAX_API_MODULE_LINES = 450

UNIT_OF_WORK = ROOT / "api" / "db" / "transactions.py"

TEST_SUPPORT = ("FakeLLM", "LiveServer", "scratch_db", "running_fake_llm")
"""Names of the test support the tests and the benchmarks share (`tests/support/`)."""


def _python_files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("path", _python_files("api"), ids=_relative)
def test_no_module_under_api_is_over_the_size_limit(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_API_MODULE_LINES, (
        f"{_relative(path)} has {lines} lines: split it by job (limit {MAX_API_MODULE_LINES})"
    )


def test_only_the_unit_of_work_commits() -> None:
    committing = [
        f"{_relative(path)}:{number}"
        for path in _python_files("api")
        if path != UNIT_OF_WORK
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"\bcommit\(", line)
    ]
    assert not committing, f"only {_relative(UNIT_OF_WORK)} commits; found: {committing}"


def _defined_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


@pytest.mark.parametrize("path", _python_files("scripts/bench"), ids=_relative)
def test_the_benchmarks_hold_no_test_support(path: Path) -> None:
    defined = _defined_names(path) & set(TEST_SUPPORT)
    assert not defined, f"{_relative(path)} defines {sorted(defined)}: it belongs in tests/support/"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", _python_files("summarizer"), ids=_relative)
def test_the_summarizer_imports_nothing_from_the_service(path: Path) -> None:
    upward = {name for name in _imports(path) if name == "api" or name.startswith("api.")}
    assert not upward, f"{_relative(path)} imports {sorted(upward)}: the summarizer is pure"


@pytest.mark.parametrize("path", _python_files("api/store"), ids=_relative)
def test_the_store_imports_no_use_case_or_route(path: Path) -> None:
    above = ("api.routes", "api.service", "api.worker", "api.main", "api.console")
    upward = {name for name in _imports(path) if name.startswith(above)}
    assert not upward, f"{_relative(path)} imports {sorted(upward)}: the store sits below them"
