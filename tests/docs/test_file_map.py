"""The docs' file map matches the tree: every path or module the README and the docs name in
backticks exists, so a move or a rename cannot leave them pointing at nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

TOP_LEVEL = ("api", "summarizer", "scripts", "tests", "migrations", "clients", "docs")

PATH = re.compile(rf"`((?:{'|'.join(TOP_LEVEL)})/[A-Za-z0-9_./-]*)`")
"""A path in backticks: `api/store/loader.py`, `api/db/`, `api/routes` (a module)."""

MODULE = re.compile(r"`((?:api|summarizer|scripts)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
"""A dotted name in backticks, from its start: `api.db.transactions.transaction`."""


def _is_module(parts: list[str]) -> bool:
    base = ROOT.joinpath(*parts)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _path_exists(text: str) -> bool:
    path = ROOT / text.rstrip("/")
    return path.exists() or path.with_suffix(".py").is_file() or path.with_suffix(".md").is_file()


def _named(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    return sorted(
        {
            (document.relative_to(ROOT).as_posix(), found)
            for document in DOCUMENTS
            for found in pattern.findall(document.read_text())
        }
    )


@pytest.mark.parametrize(("document", "path"), _named(PATH))
def test_a_path_the_docs_name_exists(document: str, path: str) -> None:
    assert _path_exists(path), f"{document} names `{path}`, which is not in the tree"


@pytest.mark.parametrize(("document", "name"), _named(MODULE))
def test_a_module_the_docs_name_exists(document: str, name: str) -> None:
    parts = name.split(".")
    # the module is the longest prefix that is one (the rest: a class, a function, ...); past
    # a package, the next part must be a name its `__init__` defines or imports
    end = next((end for end in range(len(parts), 0, -1) if _is_module(parts[:end])), 0)
    assert end >= 2, f"{document} names `{name}`, whose module is not in the tree"
    package_init = ROOT.joinpath(*parts[:end], "__init__.py")
    if end < len(parts) and package_init.is_file():
        assert re.search(rf"\b{parts[end]}\b", package_init.read_text()), (
            f"{document} names `{name}`: `{parts[end]}` is not in {'.'.join(parts[:end])}"
        )
