"""A summary's page: its facts, its metadata as JSON, its text, and what it was made from."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from api.console.html import Window, attr, esc, link, pager, session_path, when
from api.console.labels import (
    is_fallback,
    is_repair,
    message_class,
    message_text,
    state,
)
from api.store.rows import MessageRow, SummaryRow
from summarizer import METADATA_KEYS


def body(
    summary: SummaryRow,
    session_id: str,
    absorbed: Sequence[SummaryRow],
    sources: Sequence[MessageRow],
    window: Window,
) -> str:
    """A summary as `trace_summary` shows it: its facts and its metadata (as JSON, as the API
    answers it), then the summaries it absorbed (each a link to its own page) or, for one made
    from messages, its source messages of the seqs `window` holds, with a pager over the
    summary's range."""
    kind = state(summary)
    status = (
        f'superseded by <a href="{link("/summaries/" + str(summary.superseded_by))}">'
        f"{summary.superseded_by}</a>"
        if kind == "superseded"
        else kind
    )
    facts = [
        (
            "session",
            f'<a href="{link("/sessions/" + session_path(session_id))}">{esc(session_id)}</a>',
        ),
        ("status", status),
        ("level", str(summary.level)),
        ("seqs", f"{summary.first_seq}..{summary.last_seq}"),
        ("messages", str(summary.message_count)),
        ("model", esc(summary.model)),
        ("tokens", str(summary.approx_tokens)),
        ("created", when(summary.created_at) + " UTC"),
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
            f'<tr class="{message_class(m)}" data-seq="{m.seq}"><td class="n">{m.seq}</td>'
            f'<td class="n">{m.id}</td><td>{esc(m.role)}</td><td class="n">{m.token_count}</td>'
            f"<td>{esc(message_text(m))}</td></tr>"
            for m in sources
        )
        source = (
            f"<h2>Source messages ({summary.message_count})</h2>"
            + pager(f"/summaries/{summary.id}", window)
            + '<table id="sources"><thead><tr>'
            "<th>seq</th><th>id</th><th>role</th><th>tokens</th><th>content</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )
    return (
        f'<p class="marks" id="marks">{marks}</p><table id="facts">{table}</table>'
        f"<h2>Metadata</h2>{_metadata(summary)}<h2>Text</h2>{text}{source}"
    )


def _metadata(summary: SummaryRow) -> str:
    """The summary's metadata as JSON (`null`, `{}`, `true` as the API answers them), the
    design's keys first in their order, then any others by name."""
    metadata = summary.metadata or {}
    keys = [key for key in METADATA_KEYS if key in metadata]
    keys += sorted(key for key in metadata if key not in METADATA_KEYS)
    ordered = {key: metadata[key] for key in keys}
    text = json.dumps(ordered, ensure_ascii=False, indent=2)
    return f'<pre id="metadata-json">{esc(text)}</pre>'


def _summary_list(summaries: Iterable[SummaryRow], element_id: str) -> str:
    items = "".join(
        f'<li data-summary-id="{s.id}"><a href="{link("/summaries/" + str(s.id))}">summary '
        f"{s.id}</a> · level {s.level} · seqs {s.first_seq}..{s.last_seq} · {state(s)}"
        f"{' · fallback' if is_fallback(s) else ''}</li>"
        for s in summaries
    )
    return f'<ul id="{element_id}">{items}</ul>'
