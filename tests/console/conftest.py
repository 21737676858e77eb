"""The console's browser tests need Chromium, its driver and Selenium: without them they are
left out (not collected) and the run ends with one line saying how to install them;
with CI=true they must run."""

from __future__ import annotations

import importlib.util
import shutil
from typing import Any

import pytest

from tests.conftest import IN_CI

BROWSER_MODULE = "test_console_browser"

MISSING_BROWSER_REASON = (
    "no headless Chromium for Selenium: `apt-get install chromium chromium-driver` (as root) "
    "and `pip install -e '.[dev]'` to run them"
)


def browser_available() -> bool:
    """Chromium, chromedriver and the selenium package are all here."""
    return (
        shutil.which("chromium") is not None
        and shutil.which("chromedriver") is not None
        and importlib.util.find_spec("selenium") is not None
    )


BROWSER_AVAILABLE = browser_available()

# not collected at all without them: the module imports selenium
collect_ignore = [] if BROWSER_AVAILABLE else [f"{BROWSER_MODULE}.py"]


def pytest_configure(config: pytest.Config) -> None:
    if IN_CI and not BROWSER_AVAILABLE:
        raise pytest.UsageError(
            f"CI=true but the console's browser tests cannot run: {MISSING_BROWSER_REASON}"
        )


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if not BROWSER_AVAILABLE:
        terminalreporter.write_line(f"console browser tests not run: {MISSING_BROWSER_REASON}")
