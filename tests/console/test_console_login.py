"""The console's login: same-origin forms, a random token per login kept as a row (so it holds
on every replica), its expiry, logging out, and what a page shows every tenant.

The module's app has two tenants' keys; other apps on the same database play other replicas,
or the same service restarted with other settings.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select

from api import metrics
from api.auth import CONSOLE_COOKIE
from api.db.models import ConsoleLogin
from api.main import create_app
from tests.conftest import QUIET, make_settings
from tests.console.seeding import KEYS

TINY_TTL_SECONDS = 0.05
"""A login's life in the expiry tests: over before the test looks again."""


@pytest.fixture(scope="module")
def module_settings() -> dict[str, Any]:
    return {**QUIET, "api_keys": KEYS}


@asynccontextmanager
async def replica(database_url: str, **settings: Any) -> AsyncIterator[FastAPI]:
    """Another app on the module's database: another replica, or a restart with `settings`."""
    app = create_app(make_settings(database_url, **{**QUIET, **settings}))
    async with app.router.lifespan_context(app):
        yield app


@asynccontextmanager
async def browser(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client that keeps its cookies, as a browser does, on loopback."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield http


async def log_in(app: FastAPI, key: str = "key_a", **headers: str) -> httpx.Response:
    async with browser(app) as http:
        return await http.post("/console/login", data={"key": key}, headers=headers)


async def token_of(app: FastAPI, key: str = "key_a") -> str:
    """The cookie a login with `key` sets."""
    answer = await log_in(app, key)
    assert answer.status_code == 303, answer.text
    return answer.cookies[CONSOLE_COOKIE]


def with_token(token: str) -> dict[str, str]:
    return {"Cookie": f"{CONSOLE_COOKIE}={token}"}


async def sessions_page(app: FastAPI, token: str) -> httpx.Response:
    """`GET /console` with only `token` as the cookie (replayed, as a thief would)."""
    async with browser(app) as http:
        return await http.get("/console", headers=with_token(token))


async def page_at(app: FastAPI, path: str, token: str) -> str:
    async with browser(app) as http:
        answer = await http.get(path, headers=with_token(token))
    assert answer.status_code == 200, answer.text
    return answer.text


def asks_for_a_key(answer: httpx.Response) -> bool:
    return answer.status_code == 401 and 'id="login"' in answer.text


async def stored_logins(app: FastAPI, token: str) -> int:
    digest = hashlib.sha256(token.encode()).hexdigest()
    async with app.state.database.reading() as db:
        counted = select(func.count()).where(ConsoleLogin.token_hash == digest)
        return int(await db.scalar(counted) or 0)


# --- logging in -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "origin", ["https://attacker.example", "http://localhost:8000", "https://localhost"]
)
async def test_a_login_posted_from_another_origin_is_refused(app: FastAPI, origin: str) -> None:
    answer = await log_in(app, Origin=origin)
    assert asks_for_a_key(answer)
    assert 'id="problem">a form posted from another site is refused' in answer.text
    assert "set-cookie" not in answer.headers


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://localhost"},
        {"Origin": "http://localhost:80", "Sec-Fetch-Site": "same-origin"},
        {"Origin": "null", "Sec-Fetch-Site": "same-origin"},
        {},
    ],
    ids=["own-origin", "own-origin-with-port", "null-same-origin", "no-origin"],
)
async def test_a_login_from_the_consoles_own_page_is_accepted(
    app: FastAPI, headers: dict[str, str]
) -> None:
    """The pages send no referrer, so a browser's form post from them says `Origin: null`
    (Fetch Metadata then says same-origin); clients that are not browsers send no Origin."""
    answer = await log_in(app, **headers)
    assert answer.status_code == 303
    assert CONSOLE_COOKIE in answer.cookies


@pytest.mark.parametrize("fetch_site", [None, "none", "same-site", "cross-site"])
async def test_origin_null_without_fetch_metadata_saying_same_origin_is_refused(
    app: FastAPI, fetch_site: str | None
) -> None:
    """A page of any site can make its posts say `Origin: null` (no referrer, a sandbox)."""
    headers = {"Origin": "null"} | ({"Sec-Fetch-Site": fetch_site} if fetch_site else {})
    answer = await log_in(app, **headers)
    assert asks_for_a_key(answer)
    assert "set-cookie" not in answer.headers


async def test_two_logins_with_one_key_get_different_cookies_not_derived_from_it(
    app: FastAPI,
) -> None:
    first, second = await token_of(app), await token_of(app)
    old_digest = hashlib.sha256(b"precis-console:key_a").hexdigest()
    assert first != second
    assert old_digest not in (first, second)
    assert "key_a" not in first + second


async def test_the_cookie_lasts_as_long_as_the_login(app: FastAPI) -> None:
    answer = await log_in(app)
    attributes = {part.strip().lower() for part in answer.headers["set-cookie"].split(";")}
    assert f"max-age={int(app.state.settings.console_login_ttl_seconds)}" in attributes


async def test_a_login_holds_on_another_replica(app: FastAPI, database_url: str) -> None:
    token = await token_of(app)
    async with replica(database_url, api_keys=KEYS) as other:
        assert (await sessions_page(other, token)).status_code == 200


async def test_an_expired_login_gets_the_form(database_url: str) -> None:
    async with replica(
        database_url, api_keys=KEYS, console_login_ttl_seconds=TINY_TTL_SECONDS
    ) as short:
        token = await token_of(short)
        await asyncio.sleep(2 * TINY_TTL_SECONDS)
        assert asks_for_a_key(await sessions_page(short, token))


async def test_the_next_login_deletes_expired_logins(database_url: str) -> None:
    async with replica(
        database_url, api_keys=KEYS, console_login_ttl_seconds=TINY_TTL_SECONDS
    ) as short:
        expired = await token_of(short)
        await asyncio.sleep(2 * TINY_TTL_SECONDS)
        assert await stored_logins(short, expired) == 1
        fresh = await token_of(short)
        assert await stored_logins(short, expired) == 0
        assert await stored_logins(short, fresh) == 1


async def test_a_removed_tenants_login_gets_the_form(app: FastAPI, database_url: str) -> None:
    """Even where its old key now belongs to another tenant (a cookie derived from the key
    would then open that tenant's console)."""
    token = await token_of(app, "key_b")
    async with replica(database_url, api_keys="tenant_a:key_a,tenant_c:key_b") as restarted:
        assert asks_for_a_key(await sessions_page(restarted, token))


async def test_an_unknown_token_gets_the_form(app: FastAPI) -> None:
    assert asks_for_a_key(await sessions_page(app, "x" * 43))


# --- logging out ----------------------------------------------------------------------------


async def test_logging_out_ends_the_login_its_cookie_named(app: FastAPI) -> None:
    token = await token_of(app)
    async with browser(app) as http:
        answer = await http.post("/console/logout", headers=with_token(token))
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/login"
    assert answer.headers["set-cookie"].startswith(f'{CONSOLE_COOKIE}=""')
    assert asks_for_a_key(await sessions_page(app, token))
    assert await stored_logins(app, token) == 0


async def test_a_logout_posted_from_another_site_is_refused(app: FastAPI) -> None:
    token = await token_of(app)
    async with browser(app) as http:
        answer = await http.post(
            "/console/logout",
            headers=with_token(token) | {"Origin": "https://attacker.example"},
        )
    assert answer.status_code == 403
    assert "set-cookie" not in answer.headers
    assert (await sessions_page(app, token)).status_code == 200


async def test_get_logout_does_not_log_out(app: FastAPI) -> None:
    async with browser(app) as http:
        assert (await http.post("/console/login", data={"key": "key_a"})).status_code == 303
        answer = await http.get("/console/logout")
        after = await http.get("/console")
    assert answer.status_code == 200
    assert "set-cookie" not in answer.headers
    assert re.search(r'<form method="post" action="/console/logout"', answer.text)
    assert after.status_code == 200


async def test_a_signed_in_page_offers_a_logout_form_not_a_link(app: FastAPI) -> None:
    page = await sessions_page(app, await token_of(app))
    assert '<form method="post" action="/console/logout" class="logout">' in page.text
    assert 'href="/console/logout"' not in page.text
    assert "form-action 'self'" in page.headers["content-security-policy"]


# --- what every tenant sees -----------------------------------------------------------------


async def test_with_keys_the_health_page_leaves_out_the_all_tenants_counters(
    app: FastAPI,
) -> None:
    metrics.LLM_FAILURES.labels("context_window").inc()
    page = await page_at(app, "/console/health", await token_of(app))
    assert 'id="process-counters"' not in page
    assert 'id="llm-failures"' not in page
    assert 'id="process-counters-withheld"' in page
    assert "/metrics" in page


async def test_without_keys_the_health_page_shows_the_all_tenants_counters(
    database_url: str,
) -> None:
    def shown(page: str) -> float:
        row = re.search(
            r'<tr data-reason="context_window"><td>context_window</td><td class="n">([\d.]+)', page
        )
        return 0.0 if row is None else float(row.group(1))

    async with replica(database_url) as development, browser(development) as http:
        before = (await http.get("/console/health")).text
        metrics.LLM_FAILURES.labels("context_window").inc()
        after = (await http.get("/console/health")).text
    assert 'id="process-counters"' in after
    assert "This process since it started (all tenants)" in after
    assert shown(after) == shown(before) + 1
