"""The sessions page: the tenant's sessions, newest first, searched by the start of their id."""

from __future__ import annotations

from collections.abc import Sequence

from api.console.html import attr, esc, link, session_path, when
from api.store.rows import SessionRow


def body(
    rows: Sequence[SessionRow],
    live_counts: dict[int, int],
    fallback_counts: dict[int, int],
    prefix: str,
    next_cursor: str | None,
) -> str:
    """The sessions list: a search by id prefix, one row per session with its counts, and a
    link to the next page (`next_cursor`) when there is one."""
    search = (
        '<form method="get" action="/console" id="search"><label>Session id starts with '
        f'<input name="q" value="{attr(prefix)}" maxlength="128"></label> '
        '<button type="submit">Search</button></form>'
    )
    if not rows:
        return search + '<p id="empty">No sessions.</p>'
    table_rows = "".join(
        f'<tr data-session-id="{attr(row.external_id)}">'
        f'<td><a href="{link("/sessions/" + session_path(row.external_id))}">'
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
        f"<tbody>{table_rows}</tbody></table>{more}"
    )
