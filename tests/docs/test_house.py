"""The house rules `docs/design.md` states about the tree hold: small modules under `api/`, test
support where the tests live, dependencies pointing down (that only the unit of work commits is
`tests/store/test_unit_of_work.py`'s)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

MAX_API_MODULE_LINES = 450
"""Past this a module under `api/` is doing more than one job: split it by job."""

STORE_MAY_IMPORT = ("api.db", "api.errors", "api.items", "api.store")
"""What `api/store/` builds on: the models and the unit of work, errors, Responses items."""

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
def test_the_store_imports_only_what_it_builds_on(path: Path) -> None:
    upward = {
        name
        for name in _imports(path)
        if (name == "api" or name.startswith("api."))
        and not any(name == base or name.startswith(base + ".") for base in STORE_MAY_IMPORT)
    }
    assert not upward, f"{_relative(path)} imports {sorted(upward)}: the store sits below them"
