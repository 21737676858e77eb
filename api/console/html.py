"""The console's markup, shared by its pages: the escaping every value from data goes through,
links, the page around each page's body.

Session ids, message contents and summary texts are the clients' (untrusted): each goes
through `esc` (or `attr`), and the pages load no inline script (see `CONTENT_SECURITY_POLICY`),
so a `<script>` in a message is shown as text and could not run if it slipped through.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from urllib.parse import quote, urlencode

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; style-src-attr 'unsafe-inline'; script-src 'self'; "
    "img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""Only the console's own stylesheet and script, nothing from elsewhere, no inline script; style
attributes are allowed (they place the summaries' bars and can run nothing)."""


def esc(value: object) -> str:
    """`value` as text safe between tags."""
    return escape(str(value), quote=False)


def attr(value: object) -> str:
    """`value` as text safe inside a quoted attribute."""
    return escape(str(value), quote=True)


def when(value: datetime | None) -> str:
    """A moment in UTC to the second (`-` for none)."""
    if value is None:
        return "-"
    moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def link(path: str, **params: object) -> str:
    """A console URL, its query built from the non-empty `params`."""
    query = urlencode({k: v for k, v in params.items() if v is not None and v != ""})
    return attr(f"/console{path}{'?' + query if query else ''}")


def logout_form() -> str:
    """The logout button: a form posting to the console (a link would log out on a GET, which
    any page of any site can make a browser send)."""
    return (
        '<form method="post" action="/console/logout" class="logout">'
        '<button type="submit">Log out</button></form>'
    )


def layout(title: str, body: str, *, signed_in: bool, keyed: bool) -> str:
    """A whole page; `keyed`: API_KEYS are set, so a signed-in console offers to log out."""
    logout = logout_form() if keyed and signed_in else ""
    nav = (
        '<nav><a href="/console">Sessions</a> <a href="/console/health">Health</a> ' + logout
        if signed_in
        else "<nav>"
    ) + "</nav>"
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)} · Precis console</title>"
        '<link rel="stylesheet" href="/console/static/console.css">'
        '<script src="/console/static/console.js" defer></script>'
        f"</head><body><header><strong>Precis console</strong>{nav}</header>"
        f"<main><h1>{esc(title)}</h1>{body}</main></body></html>"
    )


@dataclass(frozen=True)
class Window:
    """The seqs one page of a paged list of messages shows: `first..last` of page `page`."""

    page: int
    pages: int
    first: int
    last: int


def window(first_seq: int, last_seq: int, size: int, page: int | None) -> Window:
    """Page `page` (None: the last) of the seqs `first_seq..last_seq`, `size` seqs a page."""
    pages = max(1, -(-(last_seq - first_seq + 1) // size))
    shown = min(page or pages, pages)
    first = first_seq + (shown - 1) * size
    return Window(shown, pages, first, max(first, min(last_seq, first + size - 1)))


def pager(base: str, window: Window, **params: object) -> str:
    """First, previous, next and last links of a paged list (`params` kept in each)."""

    def to(page: int, label: str, name: str) -> str:
        if page == window.page or page < 1 or page > window.pages:
            return f'<span class="off">{label}</span>'
        return f'<a id="{name}" href="{link(base, page=page, **params)}">{label}</a>'

    return (
        f'<p class="pager" id="pager">seqs {window.first}..{window.last} · page {window.page} '
        f"of {window.pages} · {to(1, 'first', 'page-first')} "
        f"{to(window.page - 1, 'previous', 'page-previous')} "
        f"{to(window.page + 1, 'next', 'page-next')} "
        f"{to(window.pages, 'last', 'page-last')}</p>"
    )


def session_path(external_id: str) -> str:
    """A session id as one segment of a console path."""
    return quote(external_id, safe="")


def problem(what: str) -> str:
    """The body of an error page: what is wrong, and the way back."""
    return f'<p class="problem">{esc(what)}</p><p><a href="/console">All sessions</a></p>'
