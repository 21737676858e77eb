"""The console's routes: GET pages, and the POSTs of the login and logout forms.

With API_KEYS a page finds its tenant by the login its cookie's token names
(`api.console.logins`), in the read session it reads in; without one it answers the login
form (401). Every page reads in one read session, through the store functions the API uses
and the bounded reads of `api.store.console`; none writes (logging in and out write only
their login), and none summarizes: the context preview is the history load `GET /history`
makes before it would summarize inline.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from prometheus_client import Counter
from sqlalchemy.ext.asyncio import AsyncSession

from api import history_load, metrics, service, store
from api.auth import CONSOLE_COOKIE, CONSOLE_PATH, authenticate
from api.console import (
    health_page,
    html,
    login_page,
    logins,
    session_page,
    sessions_page,
    summary_page,
)
from api.console.assets import CSS, JS
from api.errors import NotFound, PrecisError
from api.routes.checks import MAX_ID, checked_session_cursor
from api.routes.history import MAX_HISTORY_TOKENS
from api.schemas import History
from api.settings import Settings
from api.store import audit
from api.store import console as reads

PAGE_SEQS = 200
"""Seqs one page of a session's timeline, or of a summary's sources, shows: a page reads at most
this many messages."""

SESSIONS_PER_PAGE = 50
"""Sessions one page of the list shows (as `GET /v1/sessions` by default)."""

SUMMARIES_DRAWN = 500
"""Most summaries drawn over one timeline page: more would not be readable as bars."""

HEALTH_ROWS = 100
"""Most jobs and most fallback summaries the health page lists."""

DEFAULT_MAX_TOKENS = 4000
"""The context preview's budget until the form asks for another."""

MAX_KEY_BYTES = 4096
"""Largest login form body read: a key is far shorter."""

router = APIRouter(prefix=CONSOLE_PATH, include_in_schema=False)


def _keyed(request: Request) -> bool:
    return bool(request.app.state.tenant_keys)


def _html(
    request: Request, title: str, body: str, status: int = 200, *, signed_in: bool = True
) -> HTMLResponse:
    page = html.layout(title, body, signed_in=signed_in, keyed=_keyed(request))
    headers = {
        "Content-Security-Policy": html.CONTENT_SECURITY_POLICY,
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }
    return HTMLResponse(page, status_code=status, headers=headers)


def error_page(request: Request, status: int, detail: str) -> HTMLResponse:
    """An error answered to a console path (a query or path the page does not take, a page
    that does not exist) as a page, not as the API's JSON."""
    title = "Not found" if status == 404 else "Not understood"
    return _html(request, title, html.problem(detail), status=status, signed_in=False)


def _login_form(request: Request, problem: str | None = None) -> HTMLResponse:
    return _html(request, "Log in", login_page.body(problem), status=401, signed_in=False)


async def _page(
    request: Request, render: Callable[[AsyncSession, str], Awaitable[Response]]
) -> Response:
    """Find the request's tenant and run the page's `render(db, tenant)`, in one read session;
    no tenant: the login form; a session or summary of another tenant (or none): 404, as the
    API answers."""
    try:
        async with request.app.state.database.reading() as db:
            tenant = await logins.signed_in_tenant(request, db)
            if tenant is None:
                return _login_form(request)
            return await render(db, tenant)
    except NotFound as exc:
        return _html(request, "Not found", html.problem(exc.detail), status=404)


# --- assets, login, logout ------------------------------------------------------------------


@router.get("/static/console.css")
async def stylesheet() -> Response:
    return Response(CSS, media_type="text/css", headers={"Cache-Control": "max-age=3600"})


@router.get("/static/console.js")
async def script() -> Response:
    return Response(JS, media_type="text/javascript", headers={"Cache-Control": "max-age=3600"})


@router.get("/login")
async def login_form(request: Request) -> Response:
    async with request.app.state.database.reading() as db:
        tenant = await logins.signed_in_tenant(request, db)
    if tenant is not None:
        return RedirectResponse(CONSOLE_PATH, status_code=303)
    return _html(request, "Log in", login_page.body(None), signed_in=False)


@router.post("/login")
async def login(request: Request) -> Response:
    """Check the key of the form; a valid one starts a login, whose random token is kept in an
    HttpOnly, SameSite Strict cookie scoped to the console for as long as the login lasts, and
    the browser goes to the sessions."""
    keys: dict[str, str] = request.app.state.tenant_keys
    if not keys:
        return RedirectResponse(CONSOLE_PATH, status_code=303)  # development mode: no key
    problem = logins.cross_site(request)
    if problem is not None:
        # a form posted from another site would log this browser in under that site's key
        return _login_form(request, problem)
    body = await request.body()
    if len(body) > MAX_KEY_BYTES:
        return _login_form(request, "the form is too large to hold a key")
    form = parse_qs(body.decode("utf-8", "replace"), max_num_fields=4)
    key = (form.get("key") or [""])[0].strip()
    client = request.client
    try:
        tenant = authenticate(keys, client.host if client else None, f"Bearer {key}")
    except PrecisError as exc:
        return _login_form(request, exc.detail)
    settings: Settings = request.app.state.settings
    ttl = settings.console_login_ttl_seconds
    token = await logins.log_in(request.app.state.database, tenant, ttl)
    answer = RedirectResponse(CONSOLE_PATH, status_code=303)
    # whole seconds, rounded up: a Max-Age of 0 would delete the cookie at once
    lasting = math.ceil(ttl)
    answer.set_cookie(CONSOLE_COOKIE, token, max_age=lasting, **_cookie_attributes(request))
    return answer


@router.get("/logout")
async def logout_form(request: Request) -> Response:
    """The logout button on a page of its own: a GET changes nothing."""

    async def render(db: AsyncSession, tenant: str) -> Response:
        return _html(request, "Log out", html.logout_form())

    return await _page(request, render)


@router.post("/logout")
async def logout(request: Request) -> Response:
    """End the login the cookie names (on every replica) and clear the cookie; refused from
    another site's page, as a login is."""
    problem = logins.cross_site(request)
    if problem is not None:
        body = f'<p class="problem" id="problem">{html.esc(problem)}</p>'
        return _html(request, "Not logged out", body, status=403, signed_in=False)
    token = request.cookies.get(CONSOLE_COOKIE)
    if token and _keyed(request):
        await logins.log_out(request.app.state.database, token)
    answer = RedirectResponse(f"{CONSOLE_PATH}/login", status_code=303)
    answer.delete_cookie(CONSOLE_COOKIE, **_cookie_attributes(request))
    return answer


def _cookie_attributes(request: Request) -> dict[str, Any]:
    """The key cookie's scope, set and cleared alike: the console's paths, no script, no other
    site, and HTTPS only when the console is served over it."""
    return {
        "path": CONSOLE_PATH,
        "httponly": True,
        "samesite": "strict",
        "secure": request.url.scheme == "https",
    }


# --- pages ----------------------------------------------------------------------------------


@router.get("")
async def sessions(
    request: Request,
    q: Annotated[str, Query(max_length=128)] = "",
    cursor: Annotated[str | None, Query(max_length=40)] = None,
) -> Response:
    """The tenant's sessions, newest first; `q` keeps those whose session id starts with it."""
    before = service.session_position(checked_session_cursor(cursor))

    async def render(db: AsyncSession, tenant: str) -> Response:
        rows = await reads.sessions_page(db, tenant, q, SESSIONS_PER_PAGE + 1, before)
        page = rows[:SESSIONS_PER_PAGE]
        keys = [row.id for row in page]
        live = await store.live_summary_counts(db, keys)
        fallbacks = await reads.live_fallback_counts(db, keys)
        following = service.session_cursor(page[-1]) if len(rows) > SESSIONS_PER_PAGE else None
        return _html(request, "Sessions", sessions_page.body(page, live, fallbacks, q, following))

    return await _page(request, render)


@router.get("/sessions/{session_id}")
async def session(
    request: Request,
    session_id: Annotated[str, Path(max_length=128)],
    page: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    max_tokens: Annotated[int, Query(ge=1, le=MAX_HISTORY_TOKENS)] = DEFAULT_MAX_TOKENS,
) -> Response:
    """A session: one page of its timeline (the newest by default, opening at its newest
    rows), the summaries over it, and the context `GET /history?max_tokens=` answers."""

    async def render(db: AsyncSession, tenant: str) -> Response:
        found = await store.get_session(db, tenant, session_id)
        window = html.window(1, found.last_seq, PAGE_SEQS, page)
        messages = await reads.timeline(db, found.id, window.first - 1, window.last)
        drawn = await reads.summaries_over(db, found.id, window.first, window.last, SUMMARIES_DRAWN)
        history = await _history(request, db, tenant, session_id, max_tokens)
        body = session_page.body(found, window, messages, drawn, history, max_tokens, PAGE_SEQS)
        return _html(request, f"Session {session_id}", body)

    return await _page(request, render)


async def _history(
    request: Request, db: AsyncSession, tenant: str, session_id: str, max_tokens: int
) -> History:
    """What `GET /history?max_tokens=` answers, short of the inline summarization it may make
    when over budget (the console changes nothing): the same `history_load.load_context`."""
    summarization = request.app.state.summarization
    start = await store.session_for_history(db, tenant, session_id)
    loaded = await history_load.load_context(db, summarization, start, None, max_tokens)
    return loaded.history()


@router.get("/summaries/{summary_id}")
async def summary(
    request: Request,
    summary_id: Annotated[int, Path(ge=1, le=MAX_ID)],
    page: Annotated[int, Query(ge=1, le=MAX_ID)] = 1,
) -> Response:
    """A summary, its metadata, and what it was made from: what `trace_summary` shows, its
    source messages a page of PAGE_SEQS seqs at a time, oldest first."""

    async def render(db: AsyncSession, tenant: str) -> Response:
        found, session_id = await store.get_summary(db, tenant, summary_id)
        absorbed = await audit.absorbed_summaries(db, found)
        window = html.window(found.first_seq, found.last_seq, PAGE_SEQS, page)
        sources = (
            [] if absorbed else await reads.summary_sources(db, found, window.first, window.last)
        )
        body = summary_page.body(found, session_id, absorbed, sources, window)
        return _html(request, f"Summary {summary_id}", body)

    return await _page(request, render)


@router.get("/health")
async def health(request: Request) -> Response:
    """Jobs queued, running and failing, fallbacks waiting for repair, the LLM's failures."""

    async def render(db: AsyncSession, tenant: str) -> Response:
        counts = await reads.job_counts(db, tenant)
        jobs = await reads.jobs(db, tenant, HEALTH_ROWS)
        waiting = await reads.fallbacks_waiting(db, tenant, HEALTH_ROWS)
        return _html(request, "Health", health_page.body(counts, jobs, waiting, process))

    # with API_KEYS a tenant sees no counters of every tenant's traffic: those are /metrics'
    process = None if _keyed(request) else _process_counts()
    return await _page(request, render)


def _process_counts() -> health_page.ProcessCounts:
    """This process's counters since it started, every tenant's together."""
    return health_page.ProcessCounts(
        _by_label(metrics.LLM_FAILURES, "reason"),
        _by_label(metrics.FALLBACK_SUMMARIES, "reason"),
        sum(_by_label(metrics.REPAIRED_SUMMARIES, "").values()),
    )


def _by_label(counter: Counter, label: str) -> dict[str, float]:
    """A counter's totals in this process, by the value of `label` ("" when it has none)."""
    totals: dict[str, float] = {}
    for family in counter.collect():
        for sample in family.samples:
            if sample.name.endswith("_total"):
                key = sample.labels.get(label, "")
                totals[key] = totals.get(key, 0.0) + sample.value
    return totals
