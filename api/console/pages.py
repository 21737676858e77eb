"""The console's HTML: plain functions from rows to markup, every value from data escaped.

Session ids, message contents and summary texts are the clients' (untrusted): each goes
through `esc` (or `attr`), and the pages load no inline script (see `CONTENT_SECURITY_POLICY`),
so a `<script>` in a message is shown as text and could not run if it slipped through.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

from api.schemas import History
from api.store.console import TenantJob, TenantSummary
from api.store.rows import MessageRow, SessionRow, SummaryRow
from summarizer import METADATA_KEYS
from summarizer.summarize import FALLBACK_MODEL

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; style-src-attr 'unsafe-inline'; script-src 'self'; "
    "img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""Only the console's own stylesheet and script, nothing from elsewhere, no inline script; style
attributes are allowed (they place the summaries' bars and can run nothing)."""

TEXT_SHOWN = 300
"""Characters of a message shown in a timeline row; the summary page shows them whole."""


def esc(value: object) -> str:
    return escape(str(value), quote=False)


def attr(value: object) -> str:
    return escape(str(value), quote=True)


def when(value: datetime | None) -> str:
    if value is None:
        return "-"
    moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def link(path: str, **params: object) -> str:
    """A console URL, its query built from the non-empty `params`."""
    query = urlencode({k: v for k, v in params.items() if v is not None and v != ""})
    return attr(f"/console{path}{'?' + query if query else ''}")


def layout(title: str, body: str, *, signed_in: bool, keyed: bool) -> str:
    """A whole page; `keyed`: API_KEYS are set, so a signed-in console offers to log out."""
    logout = '<a href="/console/logout">Log out</a>' if keyed and signed_in else ""
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


# --- login ----------------------------------------------------------------------------------


def login(problem: str | None) -> str:
    shown = f'<p class="problem" id="problem">{esc(problem)}</p>' if problem else ""
    return (
        f'{shown}<form method="post" action="/console/login" id="login">'
        '<label>API key <input type="password" name="key" autocomplete="off" autofocus '
        'required></label> <button type="submit">Open the console</button></form>'
        "<p>The key is one of API_KEYS; the console then shows its tenant's sessions only.</p>"
    )


def not_found(what: str) -> str:
    return f'<p class="problem">{esc(what)}</p><p><a href="/console">All sessions</a></p>'


# --- sessions -------------------------------------------------------------------------------


def sessions(
    rows: Sequence[SessionRow],
    live_counts: dict[int, int],
    fallback_counts: dict[int, int],
    prefix: str,
    next_cursor: str | None,
) -> str:
    search = (
        '<form method="get" action="/console" id="search"><label>Session id starts with '
        f'<input name="q" value="{attr(prefix)}" maxlength="128"></label> '
        '<button type="submit">Search</button></form>'
    )
    if not rows:
        return search + '<p id="empty">No sessions.</p>'
    body = "".join(
        f'<tr data-session-id="{attr(row.external_id)}">'
        f'<td><a href="{link("/sessions/" + _path(row.external_id))}">'
        f"{esc(row.external_id)}</a></td>"
        f'<td class="n">{row.last_seq - row.removed_count}</td>'
        f'<td class="n">{live_counts.get(row.id, 0)}</td>'
        f'<td class="n">{fallback_counts.get(row.id, 0)}</td>'
        f"<td>{when(row.updated_at)}</td></tr>"
        for row in rows
    )
    more = (
        f'<p><a id="next" href="{link("", q=prefix, cursor=next_cursor)}">Older sessions</a></p>'
        if next_cursor
        else ""
    )
    return (
        f'{search}<table id="sessions"><thead><tr><th>session id</th><th>messages</th>'
        "<th>live summaries</th><th>fallbacks</th><th>last activity (UTC)</th></tr></thead>"
        f"<tbody>{body}</tbody></table>{more}"
    )


def _path(external_id: str) -> str:
    return quote(external_id, safe="")


# --- a session ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """The seqs one page of a session's timeline shows: `first..last` of page `page`."""

    page: int
    pages: int
    first: int
    last: int


def message_text(message: MessageRow) -> str:
    """A message as one line of text: its text parts, its parts' types, its tool calls named."""
    if message.removed_at is not None:
        return f"[removed at {when(message.removed_at)}]"
    pieces: list[str] = []
    if message.tool_call_id is not None:
        pieces.append(f"[result of {message.tool_call_id}]")
    body = message.body
    if isinstance(body, str):
        pieces.append(body)
    elif body:
        pieces.extend(_part_text(part) for part in body)
    for call in message.tool_calls or ():
        function = call.get("function", {}) if isinstance(call, dict) else {}
        pieces.append(f"-> {function.get('name', '?')}({function.get('arguments', '')})")
    return " ".join(piece for piece in pieces if piece)


def _part_text(part: Any) -> str:
    if isinstance(part, dict):
        if isinstance(part.get("text"), str):
            return str(part["text"])
        return f"[{part.get('type', 'part')}]"
    return "[part]"


def state(summary: SummaryRow) -> str:
    if summary.erased_at is not None:
        return "erased"
    return "live" if summary.superseded_by is None else "superseded"


def is_fallback(summary: SummaryRow) -> bool:
    return summary.model == FALLBACK_MODEL


def is_repair(summary: SummaryRow) -> bool:
    return (summary.metadata or {}).get("repair_of") is not None


def session_page(
    session: SessionRow,
    window: Window,
    messages: Sequence[MessageRow],
    summaries: Sequence[SummaryRow],
    history: History,
    max_tokens: int,
) -> str:
    base = "/sessions/" + _path(session.external_id)
    facts = (
        f'<p class="facts">{session.last_seq - session.removed_count} messages '
        f"({session.removed_count} removed) · last seq {session.last_seq} · format "
        f"{esc(session.format or '-')} · created {when(session.created_at)} · last activity "
        f"{when(session.updated_at)} UTC</p>"
    )
    return (
        facts
        + _pager(base, window, max_tokens)
        + _bars(window, summaries)
        + _timeline(messages)
        + _context(base, window, history, max_tokens)
    )


def _pager(base: str, window: Window, max_tokens: int) -> str:
    def to(page: int, label: str, name: str) -> str:
        if page == window.page or page < 1 or page > window.pages:
            return f'<span class="off">{label}</span>'
        href = link(base, page=page, max_tokens=max_tokens)
        return f'<a id="{name}" href="{href}">{label}</a>'

    return (
        f'<p class="pager" id="pager">seqs {window.first}..{window.last} · page {window.page} '
        f"of {window.pages} · {to(1, 'first', 'page-first')} "
        f"{to(window.page - 1, 'previous', 'page-previous')} "
        f"{to(window.page + 1, 'next', 'page-next')} "
        f"{to(window.pages, 'last', 'page-last')}</p>"
    )


def _bars(window: Window, summaries: Sequence[SummaryRow]) -> str:
    """The summaries reaching into the window as bars over its seq axis, one lane per level
    and state; each bar's data attributes keep its whole range, its drawing is clipped."""
    span = max(1, window.last - window.first + 1)
    lanes: dict[tuple[int, str], list[str]] = {}
    for summary in summaries:
        first = max(summary.first_seq, window.first)
        last = min(summary.last_seq, window.last)
        left = 100 * (first - window.first) / span
        width = 100 * (last - first + 1) / span
        kind = state(summary)
        marks = [kind] + (["fallback"] if is_fallback(summary) else [])
        marks += ["repair"] if is_repair(summary) else []
        label = f"{summary.id}" + (" fallback" if is_fallback(summary) else "")
        label += " repair" if is_repair(summary) else ""
        title = f"summary {summary.id}: seqs {summary.first_seq}..{summary.last_seq}, {kind}"
        lanes.setdefault((summary.level, kind), []).append(
            f'<a class="bar {" ".join(marks)}" href="{link("/summaries/" + str(summary.id))}" '
            f'data-summary-id="{summary.id}" data-first-seq="{summary.first_seq}" '
            f'data-last-seq="{summary.last_seq}" data-level="{summary.level}" '
            f'data-state="{kind}" title="{attr(title)}" '
            f'style="left:{left:.3f}%;width:{width:.3f}%">{esc(label)}</a>'
        )
    order = {"live": 0, "superseded": 1, "erased": 2}
    rows = "".join(
        f'<div class="lane"><span class="lane-name">level {level} {kind}</span>'
        f'<div class="track">{"".join(bars)}</div></div>'
        for (level, kind), bars in sorted(lanes.items(), key=lambda i: (-i[0][0], order[i[0][1]]))
    )
    if not rows:
        rows = '<p id="no-summaries">No summary reaches into these seqs.</p>'
    return (
        '<section id="coverage"><h2>Summaries over these seqs</h2>'
        '<p class="legend"><span class="bar live">live</span> '
        '<span class="bar superseded">superseded</span> <span class="bar erased">erased</span> '
        '<span class="bar live fallback">fallback</span> '
        '<span class="bar live repair">repair</span></p>'
        f'<div class="axis"><span>{window.first}</span><span>{window.last}</span></div>'
        f"{rows}</section>"
    )


def _timeline(messages: Sequence[MessageRow]) -> str:
    rows = "".join(
        f'<tr id="seq-{m.seq}" class="{_message_class(m)}" data-seq="{m.seq}">'
        f'<td class="n">{m.seq}</td><td class="n">{m.id}</td><td>{esc(m.role)}</td>'
        f'<td class="n">{m.token_count}</td><td>{esc(_clipped(message_text(m)))}</td></tr>'
        for m in messages
    )
    return (
        '<section><h2>Timeline</h2><table id="timeline"><thead><tr><th>seq</th><th>id</th>'
        "<th>role</th><th>tokens</th><th>content</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></section>"
    )


def _message_class(message: MessageRow) -> str:
    if message.removed_at is not None:
        return "removed"
    return "orphaned" if message.orphaned_at is not None else "shown"


def _clipped(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= TEXT_SHOWN else flat[: TEXT_SHOWN - 1] + "…"


def _context(base: str, window: Window, history: History, max_tokens: int) -> str:
    """The context `GET /history` answers for `max_tokens`, by part, then as JSON exactly."""
    form = (
        f'<form method="get" action="{link(base)}" id="budget">'
        f'<input type="hidden" name="page" value="{window.page}">'
        f'<label>max_tokens <input name="max_tokens" type="number" min="1" '
        f'value="{max_tokens}"></label> <button type="submit">Load</button></form>'
    )
    pinned = "".join(
        f"<li>seq {m.seq} · {esc(m.role)}: {esc(_clipped(_out_text(m.content)))}</li>"
        for m in history.pinned
    )
    left_out = set(history.omitted.summaries)
    summaries = "".join(
        f'<li data-summary-id="{s.id}"><a href="{link("/summaries/" + str(s.id))}">summary '
        f"{s.id}</a> · level {s.level} · seqs {s.first_seq}..{s.last_seq}"
        f"{' · left out' if s.id in left_out else ''}</li>"
        for s in history.summaries
    )
    tail = history.messages
    tail_line = (
        f"{len(tail)} messages, seqs {tail[0].seq}..{tail[-1].seq}" if tail else "no messages"
    )
    marker = _left_out(history)
    context_json = json.dumps(history.context, ensure_ascii=False, indent=1)
    return (
        '<section id="context"><h2>Context for the next model call</h2>'
        f"{form}<p>{history.token_estimate} tokens · format as the session's own</p>"
        f'<h3>Pinned prefix</h3><ul id="pinned">{pinned or "<li>none</li>"}</ul>'
        f'<h3>Summaries</h3><ul id="context-summaries">{summaries or "<li>none</li>"}</ul>'
        f'<h3>Tail</h3><p id="tail">{tail_line}</p>{marker}'
        f'<h3>As sent</h3><pre id="context-json">{esc(context_json)}</pre></section>'
    )


def _left_out(history: History) -> str:
    """The truncation marker: what `context` leaves out to fit the budget (`omitted`)."""
    omitted = history.omitted
    parts = []
    if history.truncated_messages:
        parts.append(f"{history.truncated_messages} messages")
    if omitted.summaries:
        parts.append(f"summaries {', '.join(str(i) for i in omitted.summaries)}")
    if omitted.unsendable:
        parts.append(f"{len(omitted.unsendable)} messages the model's API would refuse")
    if not parts:
        return '<p id="not-truncated">Nothing left out.</p>'
    return f'<p class="truncated" id="truncated">Left out to fit max_tokens: {"; ".join(parts)}</p>'


def _out_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(_part_text(part) for part in content)
    return ""


# --- a summary ------------------------------------------------------------------------------


def summary_page(
    summary: SummaryRow,
    session_id: str,
    absorbed: Sequence[SummaryRow],
    sources: Sequence[MessageRow],
) -> str:
    """A summary as `trace_summary` shows it: its metadata, then the summaries it absorbed
    (each a link to its own page) or, for one made from messages, its source messages."""
    metadata = summary.metadata or {}
    keys = [key for key in METADATA_KEYS if key in metadata]
    keys += sorted(key for key in metadata if key not in METADATA_KEYS)
    kind = state(summary)
    status = (
        f'superseded by <a href="{link("/summaries/" + str(summary.superseded_by))}">'
        f"{summary.superseded_by}</a>"
        if kind == "superseded"
        else kind
    )
    facts = [
        ("session", f'<a href="{link("/sessions/" + _path(session_id))}">{esc(session_id)}</a>'),
        ("status", status),
        ("level", str(summary.level)),
        ("seqs", f"{summary.first_seq}..{summary.last_seq}"),
        ("messages", str(summary.message_count)),
        ("model", esc(summary.model)),
        ("tokens", str(summary.approx_tokens)),
        ("created", when(summary.created_at) + " UTC"),
        *((key, esc(_value(metadata[key]))) for key in keys),
    ]
    table = "".join(
        f'<tr data-key="{attr(k)}"><th>{esc(k)}</th><td>{v}</td></tr>' for k, v in facts
    )
    marks = " ".join(
        label
        for label, on in (("fallback", is_fallback(summary)), ("repair", is_repair(summary)))
        if on
    )
    text = (
        '<p id="summary-text" class="erased">(erased: its text is gone)</p>'
        if summary.erased_at is not None
        else f'<pre id="summary-text">{esc(summary.summary_text)}</pre>'
    )
    if absorbed:
        source = "<h2>Absorbed summaries</h2>" + _summary_list(absorbed, "absorbed")
    else:
        rows = "".join(
            f'<tr class="{_message_class(m)}" data-seq="{m.seq}"><td class="n">{m.seq}</td>'
            f'<td class="n">{m.id}</td><td>{esc(m.role)}</td><td class="n">{m.token_count}</td>'
            f"<td>{esc(message_text(m))}</td></tr>"
            for m in sources
        )
        source = (
            f'<h2>Source messages ({len(sources)})</h2><table id="sources"><thead><tr>'
            "<th>seq</th><th>id</th><th>role</th><th>tokens</th><th>content</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )
    return (
        f'<p class="marks" id="marks">{marks}</p><table id="metadata">{table}</table>'
        f"<h2>Text</h2>{text}{source}"
    )


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _summary_list(summaries: Iterable[SummaryRow], element_id: str) -> str:
    items = "".join(
        f'<li data-summary-id="{s.id}"><a href="{link("/summaries/" + str(s.id))}">summary '
        f"{s.id}</a> · level {s.level} · seqs {s.first_seq}..{s.last_seq} · {state(s)}"
        f"{' · fallback' if is_fallback(s) else ''}</li>"
        for s in summaries
    )
    return f'<ul id="{element_id}">{items}</ul>'


# --- health ---------------------------------------------------------------------------------


def health(
    counts: dict[str, int],
    jobs: Sequence[TenantJob],
    fallbacks: Sequence[TenantSummary],
    llm_failures: dict[str, float],
    fallbacks_made: dict[str, float],
    repaired: float,
) -> str:
    summary = (
        f'<p id="job-counts">jobs queued <b id="jobs-pending">{counts.get("pending", 0)}</b> · '
        f'running <b id="jobs-running">{counts.get("running", 0)}</b> · whose last attempt '
        f'failed <b id="jobs-failing">{counts.get("failing", 0)}</b></p>'
    )
    job_rows = "".join(
        f'<tr class="{"failing" if j.job.last_error else j.job.status}">'
        f'<td><a href="{link("/sessions/" + _path(j.session_id))}">{esc(j.session_id)}</a></td>'
        f"<td>{esc(j.job.status)}</td><td>{esc(j.job.trigger)}/{esc(j.job.reason)}</td>"
        f'<td class="n">{j.job.attempts}</td><td>{when(j.job.run_after)}</td>'
        f"<td>{esc(j.job.last_error or '')}</td></tr>"
        for j in jobs
    )
    waiting = "".join(
        f'<li data-summary-id="{f.summary.id}"><a href="{link("/summaries/" + str(f.summary.id))}">'
        f"summary {f.summary.id}</a> of {esc(f.session_id)} · seqs {f.summary.first_seq}.."
        f"{f.summary.last_seq} · {esc(_value((f.summary.metadata or {}).get('fallback_reason')))}"
        "</li>"
        for f in fallbacks
    )
    return (
        f"<section><h2>Summarization jobs</h2>{summary}"
        '<table id="jobs"><thead><tr><th>session</th><th>status</th><th>trigger/reason</th>'
        "<th>attempts</th><th>run after (UTC)</th><th>last error</th></tr></thead>"
        f"<tbody>{job_rows}</tbody></table></section>"
        f'<section><h2>Fallback summaries waiting for repair</h2><ul id="fallbacks">'
        f"{waiting or '<li>none</li>'}</ul></section>"
        "<section><h2>This process since it started (all tenants)</h2>"
        + _counter_table("llm-failures", "failed LLM calls by reason", llm_failures)
        + _counter_table("fallbacks-made", "fallback summaries by reason", fallbacks_made)
        + f'<p>repaired summaries <b id="repaired">{repaired:g}</b></p></section>'
    )


def _counter_table(element_id: str, caption: str, values: dict[str, float]) -> str:
    rows = "".join(
        f'<tr data-reason="{attr(k)}"><td>{esc(k)}</td><td class="n">{v:g}</td></tr>'
        for k, v in sorted(values.items())
    )
    return (
        f'<table id="{element_id}"><caption>{esc(caption)}</caption>'
        f"<tbody>{rows or '<tr><td>none</td></tr>'}</tbody></table>"
    )
