"""A session's page: one window of its timeline, the summaries over it as bars, and the
context `GET /history` answers.

The timeline is a box of its own height that opens at its newest rows on the newest page
(`data-open="end"`, which the console's script scrolls to), with the context preview right
below it: the newest messages and the context the next model call gets read on one screen.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from api.console.html import Window, attr, esc, link, pager, session_path, when
from api.console.labels import (
    is_conversation,
    is_fallback,
    is_repair,
    item_id,
    message_class,
    message_text,
    part_text,
    state,
)
from api.schemas import History
from api.store.rows import MessageRow, SessionRow, SummaryRow

TEXT_SHOWN = 300
"""Characters of a message shown in a timeline row; the summary page shows them whole."""

STATE_ORDER = {"live": 0, "superseded": 1}
"""The lanes drawn open, live coverage first; erased summaries are folded below them."""


def body(
    session: SessionRow,
    window: Window,
    messages: Sequence[MessageRow],
    summaries: Sequence[SummaryRow],
    history: History,
    max_tokens: int,
    page_size: int,
) -> str:
    """A session's page: its facts (a fork's parent and fork point linked), the pager, the
    summaries over `window` as bars, the timeline of `messages` (pages of `page_size` seqs),
    and the context `history` holds for `max_tokens`."""
    base = "/sessions/" + session_path(session.external_id)
    facts = (
        f'<p class="facts">{session.last_seq - session.removed_count} messages '
        f"({session.removed_count} removed) · last seq {session.last_seq} · format "
        f"{esc(session.format or '-')} · created {when(session.created_at)} · last activity "
        f"{when(session.updated_at)} UTC</p>"
    )
    return (
        facts
        + _fork(session, page_size)
        + pager(base, window, max_tokens=max_tokens)
        + _bars(window, summaries)
        + _timeline(session, window, messages)
        + _context(base, window, history, max_tokens)
    )


def _fork(session: SessionRow, page_size: int) -> str:
    """A fork's parent and fork point, each a link to the parent's page holding that seq."""
    if session.forked_from is None or session.fork_seq is None:
        return ""
    seq = session.fork_seq
    page = max(1, -(-seq // page_size))
    parent = link("/sessions/" + session_path(session.forked_from), page=page)
    return (
        f'<p class="facts" id="fork">Fork of <a id="fork-parent" href="{parent}">'
        f"{esc(session.forked_from)}</a> at seq "
        f'<a id="fork-point" href="{parent}#seq-{seq}">{seq}</a>: seqs 1..{seq} are copies of '
        "the parent's messages, the rest its own.</p>"
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
    shown = sorted(
        (lane for lane in lanes.items() if lane[0][1] != "erased"),
        key=lambda lane: (STATE_ORDER[lane[0][1]], -lane[0][0]),
    )
    rows = "".join(_lane(level, kind, bars) for (level, kind), bars in shown)
    erased = sorted(
        (lane for lane in lanes.items() if lane[0][1] == "erased"), key=lambda lane: -lane[0][0]
    )
    if not rows:
        rows = (
            '<p id="no-live-summaries">No live or superseded summary reaches into these seqs.</p>'
            if erased
            else '<p id="no-summaries">No summary reaches into these seqs.</p>'
        )
    return (
        '<section id="coverage"><h2>Summaries over these seqs</h2>'
        f"{_LEGEND}"
        f'<div class="axis"><span>{window.first}</span><span>{window.last}</span></div>'
        f"{rows}{_erased(erased)}</section>"
    )


_LEGEND = (
    '<p class="legend" id="legend">'
    + "".join(
        f'<span class="key" data-key="{name}"><i class="swatch {marks}"></i>{name}</span>'
        for name, marks in (
            ("live", "live"),
            ("superseded", "superseded"),
            ("erased", "erased"),
            ("fallback", "live fallback"),
            ("repair", "live repair"),
        )
    )
    + "</p>"
)
"""What the bars' colours and marks mean: labels beside swatches, nothing that looks pressable."""


def _lane(level: int, kind: str, bars: list[str]) -> str:
    return (
        f'<div class="lane"><span class="lane-name">level {level} {kind}</span>'
        f'<div class="track">{"".join(bars)}</div></div>'
    )


def _erased(lanes: list[tuple[tuple[int, str], list[str]]]) -> str:
    """The erased summaries' lanes, folded (closed until opened): history a removal reached,
    drawn below the live coverage rather than over it."""
    if not lanes:
        return ""
    count = sum(len(bars) for _, bars in lanes)
    noun = "summary" if count == 1 else "summaries"
    drawn = "".join(_lane(level, kind, bars) for (level, kind), bars in lanes)
    return (
        f'<details id="erased-summaries"><summary>{count} erased {noun} (a removal reached '
        f"them; their text is gone)</summary>{drawn}</details>"
    )


def _timeline(session: SessionRow, window: Window, messages: Sequence[MessageRow]) -> str:
    """The window's messages, oldest first, in a box that opens at its newest rows on the
    newest page; a conversation's rows show their item ids (`msg_...`, `fc_...`) beside the
    row ids, and a fork's row at its fork point is marked."""
    conversation = is_conversation(session)
    rows = "".join(_row(m, conversation, session.fork_seq) for m in messages)
    item_head = '<th class="item-id">item id</th>' if conversation else ""
    opens = ' data-open="end"' if window.page == window.pages else ""
    return (
        '<section id="timeline-section"><h2>Timeline</h2>'
        f'<div id="timeline-box" class="scroller"{opens}>'
        f'<table id="timeline"><thead><tr><th>seq</th><th>id</th>{item_head}'
        "<th>role</th><th>tokens</th><th>content</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></div></section>"
    )


def _row(m: MessageRow, conversation: bool, fork_seq: int | None) -> str:
    kind = message_class(m) + (" fork-point" if m.seq == fork_seq else "")
    item = ""
    if conversation:
        served = item_id(m)
        item = f'<td class="item-id">{esc(served) if served else "-"}</td>'
    return (
        f'<tr id="seq-{m.seq}" class="{kind}" data-seq="{m.seq}">'
        f'<td class="n">{m.seq}</td><td class="n">{m.id}</td>{item}<td>{esc(m.role)}</td>'
        f'<td class="n">{m.token_count}</td><td>{esc(_clipped(message_text(m)))}</td></tr>'
    )


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
        return " ".join(part_text(part) for part in content)
    return ""
