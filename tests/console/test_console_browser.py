"""The console in a real browser: headless Chromium driven by Selenium against a live server.

One server (`python -m api`, with two tenants' keys) on a seeded SQLite database and one
browser serve every test; each logs in as a person would, checks what a person would check
against the API's own answers, and saves a screenshot under its temporary directory.
Without Chromium, chromedriver or selenium these tests are left out (tests/console/conftest.py).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from api.auth import CONSOLE_COOKIE
from api.db.engine import create_engine, create_sessionmaker
from tests.conftest import QUIET, migrated_database
from tests.console.seeding import (
    KEYS,
    LONG_MESSAGES,
    REMOVED_SEQ,
    SCRIPT_SEQ,
    A,
    Seeded,
    seed,
)
from tests.support.live_server import LiveServer

WAIT_SECONDS = 10.0
"""How long a page may take to load after a click before the test fails."""


@pytest.fixture(scope="module")
async def live(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[str, Seeded]]:
    """The server's base URL and what was seeded in its database."""
    folder = tmp_path_factory.mktemp("console")
    async with migrated_database("sqlite", folder, postgres_available=False) as url:
        settings = {**QUIET, "api_keys": KEYS}
        with LiveServer(url, folder / "server.log", settings) as server:
            engine = create_engine(url)
            try:
                async with httpx.AsyncClient(base_url=server.base_url) as http:
                    seeded = await seed(http, create_sessionmaker(engine))
            finally:
                await engine.dispose()
            yield server.base_url, seeded


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    """One headless Chromium for the module."""
    options = Options()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1000,700")
    # the system's Chromium and driver, named: Selenium Manager would look for its own online
    options.binary_location = shutil.which("chromium") or "chromium"
    service = Service(shutil.which("chromedriver") or "chromedriver")
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


def log_in(browser: WebDriver, base_url: str, key: str) -> None:
    """Log out (with the button) if logged in, then log in with `key` on the form."""
    browser.get(f"{base_url}/console/login")
    logout = browser.find_elements(By.CSS_SELECTOR, "form.logout button")
    if logout:
        logout[0].click()
        WebDriverWait(browser, WAIT_SECONDS).until(
            expected_conditions.url_to_be(f"{base_url}/console/login")
        )
    browser.find_element(By.NAME, "key").send_keys(key)
    browser.find_element(By.CSS_SELECTOR, "#login button").click()
    WebDriverWait(browser, WAIT_SECONDS).until(expected_conditions.url_to_be(f"{base_url}/console"))


def api_get(base_url: str, path: str, **params: Any) -> Any:
    answer = httpx.get(f"{base_url}{path}", params=params, headers=A)
    answer.raise_for_status()
    return answer.json()


def test_bars_cover_the_summaries_seq_ranges(
    browser: WebDriver, live: tuple[str, Seeded], tmp_path: Path
) -> None:
    base_url, seeded = live
    log_in(browser, base_url, "key_a")
    browser.find_element(By.LINK_TEXT, seeded.session_id).click()
    WebDriverWait(browser, WAIT_SECONDS).until(expected_conditions.title_contains("Session"))
    browser.save_screenshot(str(tmp_path / "session.png"))
    listed = api_get(
        base_url, f"/v1/sessions/{seeded.session_id}/summaries", include_superseded="true"
    )
    expected = {s["id"]: (s["first_seq"], s["last_seq"], s["level"]) for s in listed["summaries"]}
    bars = browser.find_elements(By.CSS_SELECTOR, ".track .bar")
    drawn = {
        int(bar.get_attribute("data-summary-id") or 0): (
            int(bar.get_attribute("data-first-seq") or 0),
            int(bar.get_attribute("data-last-seq") or 0),
            int(bar.get_attribute("data-level") or 0),
        )
        for bar in bars
    }
    assert drawn == expected
    # drawn where their ranges are: a bar of 1..8 spans the two bars of 1..4 and 5..8
    by_id = {int(bar.get_attribute("data-summary-id") or 0): bar.rect for bar in bars}
    left, right = (by_id[leaf] for leaf in seeded.leaves)
    rollup = by_id[seeded.rollup]
    assert rollup["x"] == pytest.approx(left["x"], abs=2)
    assert rollup["x"] + rollup["width"] == pytest.approx(right["x"] + right["width"], abs=2)
    assert left["x"] + left["width"] <= right["x"] + 1
    # the legend's "repair" reads as a label beside a swatch, not as a focused button
    legend = browser.find_element(By.ID, "legend")
    repair = legend.find_element(By.CSS_SELECTOR, '.key[data-key="repair"]')
    swatch = repair.find_element(By.CLASS_NAME, "swatch")
    assert repair.text == "repair" and swatch.text == ""
    assert repair.value_of_css_property("color") == legend.value_of_css_property("color")
    assert repair.value_of_css_property("background-color") == "rgba(0, 0, 0, 0)"
    for element in (repair, swatch):
        assert element.value_of_css_property("outline-style") == "none"
    assert swatch.size["height"] <= repair.size["height"]


IN_VIEW = """
var box = document.getElementById("timeline-box").getBoundingClientRect();
var row = document.getElementById(arguments[0]).getBoundingClientRect();
var context = document.getElementById("context").getBoundingClientRect();
return {
  rowInBox: row.top >= box.top - 1 && row.bottom <= box.bottom + 1,
  rowOnScreen: row.top >= 0 && row.bottom <= window.innerHeight,
  contextTop: context.top, rowBottom: row.bottom, height: window.innerHeight
};
"""
"""Where a timeline row and the context preview are drawn, in the window's coordinates."""


def test_a_long_session_opens_at_its_newest_rows_and_folds_erased_summaries(
    browser: WebDriver, live: tuple[str, Seeded], tmp_path: Path
) -> None:
    base_url, seeded = live
    log_in(browser, base_url, "key_a")
    browser.get(f"{base_url}/console/sessions/{seeded.long_id}")
    browser.save_screenshot(str(tmp_path / "newest.png"))
    newest = browser.execute_script(IN_VIEW, f"seq-{LONG_MESSAGES}")
    assert newest["rowInBox"] and newest["rowOnScreen"]
    # the context preview starts below the newest row, with room to read it on the same screen
    assert newest["rowBottom"] <= newest["contextTop"] <= newest["height"] * 0.6
    browser.find_element(By.ID, "page-first").click()
    WebDriverWait(browser, WAIT_SECONDS).until(expected_conditions.url_contains("page=1"))
    browser.save_screenshot(str(tmp_path / "first-page.png"))
    assert browser.execute_script(IN_VIEW, "seq-1")["rowInBox"]  # an older page opens at its top
    live_id, *erased = seeded.long_summaries
    visible = "return arguments[0].checkVisibility()"
    live_bar = browser.find_element(By.CSS_SELECTOR, f'.bar[data-summary-id="{live_id}"]')
    assert browser.execute_script(visible, live_bar)
    folded = browser.find_element(By.ID, "erased-summaries")
    erased_bar = folded.find_element(By.CSS_SELECTOR, f'.bar[data-summary-id="{erased[0]}"]')
    assert not browser.execute_script(visible, erased_bar)
    assert live_bar.location["y"] < folded.location["y"]  # live coverage first
    folded.find_element(By.TAG_NAME, "summary").click()
    assert browser.execute_script(visible, erased_bar)
    browser.save_screenshot(str(tmp_path / "erased-opened.png"))


def test_removed_message_is_grey_and_a_script_in_a_message_does_not_run(
    browser: WebDriver, live: tuple[str, Seeded], tmp_path: Path
) -> None:
    base_url, seeded = live
    log_in(browser, base_url, "key_a")
    browser.get(f"{base_url}/console/sessions/{seeded.session_id}")
    browser.save_screenshot(str(tmp_path / "timeline.png"))
    removed = browser.find_element(By.CSS_SELECTOR, f"#seq-{REMOVED_SEQ} td")
    shown = browser.find_element(By.CSS_SELECTOR, "#seq-1 td")
    assert removed.value_of_css_property("color") != shown.value_of_css_property("color")
    assert "<script>" in browser.find_element(By.ID, f"seq-{SCRIPT_SEQ}").text
    assert browser.execute_script("return window.owned === undefined")


def test_context_preview_equals_the_history_answer(
    browser: WebDriver, live: tuple[str, Seeded], tmp_path: Path
) -> None:
    base_url, seeded = live
    log_in(browser, base_url, "key_a")
    browser.get(f"{base_url}/console/sessions/{seeded.session_id}")
    budget = browser.find_element(By.NAME, "max_tokens")
    budget.clear()
    budget.send_keys("30")
    browser.find_element(By.CSS_SELECTOR, "#budget button").click()
    WebDriverWait(browser, WAIT_SECONDS).until(expected_conditions.url_contains("max_tokens=30"))
    browser.save_screenshot(str(tmp_path / "context.png"))
    history = api_get(base_url, f"/v1/sessions/{seeded.session_id}/history", max_tokens=30)
    shown = browser.find_element(By.ID, "context-json").get_attribute("textContent") or ""
    assert json.loads(shown) == history["context"]
    left_out = history["omitted"]["summaries"]
    assert left_out  # the budget leaves the oldest summaries out, and the page says which
    marker = browser.find_element(By.ID, "truncated").text
    assert marker.endswith(f"summaries {', '.join(str(i) for i in left_out)}")


def test_another_tenants_session_is_not_reachable_by_url(
    browser: WebDriver, live: tuple[str, Seeded], tmp_path: Path
) -> None:
    base_url, seeded = live
    log_in(browser, base_url, "key_b")
    assert seeded.session_id not in browser.page_source
    browser.get(f"{base_url}/console/sessions/{seeded.session_id}")
    browser.save_screenshot(str(tmp_path / "other-tenant.png"))
    assert browser.find_element(By.TAG_NAME, "h1").text == "Not found"
    assert not browser.find_elements(By.ID, "timeline")
    browser.get(f"{base_url}/console/summaries/{seeded.rollup}")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Not found"


def test_summary_and_health_pages_show_sources_and_the_failing_job(
    browser: WebDriver, live: tuple[str, Seeded], tmp_path: Path
) -> None:
    base_url, seeded = live
    log_in(browser, base_url, "key_a")
    browser.get(f"{base_url}/console/summaries/{seeded.leaves[0]}")
    browser.save_screenshot(str(tmp_path / "summary.png"))
    seqs = [
        row.get_attribute("data-seq")
        for row in browser.find_elements(By.CSS_SELECTOR, "#sources tr[data-seq]")
    ]
    assert seqs == ["1", "2", "3", "4"]
    browser.find_element(By.LINK_TEXT, "Health").click()
    WebDriverWait(browser, WAIT_SECONDS).until(expected_conditions.title_contains("Health"))
    browser.save_screenshot(str(tmp_path / "health.png"))
    assert browser.find_element(By.ID, "jobs-failing").text == "1"
    waiting = browser.find_elements(By.CSS_SELECTOR, "#fallbacks li[data-summary-id]")
    assert [item.get_attribute("data-summary-id") for item in waiting] == [str(seeded.fallback)]


def test_the_logout_button_ends_the_login(
    browser: WebDriver, live: tuple[str, Seeded], tmp_path: Path
) -> None:
    """Chromium posts the forms with `Origin: null` (the pages send no referrer) and
    Sec-Fetch-Site same-origin: both the login and the logout pass; the token is dead after."""
    base_url, _ = live
    log_in(browser, base_url, "key_a")
    cookie = browser.get_cookie(CONSOLE_COOKIE)
    assert cookie is not None and cookie["httpOnly"]
    browser.find_element(By.CSS_SELECTOR, "form.logout button").click()
    WebDriverWait(browser, WAIT_SECONDS).until(
        expected_conditions.url_to_be(f"{base_url}/console/login")
    )
    browser.save_screenshot(str(tmp_path / "logged-out.png"))
    assert browser.get_cookie(CONSOLE_COOKIE) is None
    replayed = httpx.get(
        f"{base_url}/console", headers={"Cookie": f"{CONSOLE_COOKIE}={cookie['value']}"}
    )
    assert replayed.status_code == 401 and 'id="login"' in replayed.text
