"""The history loader's reads: the session with its flags (a job pending, a live summary), then
the pinned prefix, the live summaries and the newest messages after them in one statement.

An HTTP history load is two round trips while the tail's first page covers the token budget
(the usual case); a larger budget reads further pages, each up to the message that passes the
budget (`api.store.tail`), one round trip each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sqlalchemy import (
    ColumnElement,
    Integer,
    bindparam,
    exists,
    func,
    literal,
    null,
    or_,
    select,
    union_all,
)
from sqlalchemy import (
    cast as cast_,
)
from sqlalchemy.ext.asyncio import AsyncSession

from api.db import driver
from api.db.models import (
    MESSAGES,
    SESSIONS,
    SUMMARIES,
    SUMMARY_JOBS,
)
from api.errors import SessionNotFound
from api.store.retention import loader_expiry_params, unexpired
from api.store.rows import (
    MESSAGE_COLUMNS,
    SESSION_COLUMNS,
    SUMMARY_COLUMNS,
    UNBOUNDED,
    MessageRow,
    SessionRow,
    SummaryRow,
    live,
    shown,
)
from api.store.sessions import named
from api.store.summaries import holes
from api.store.tail import TAIL_PAGE_SIZE, Window, not_loaded, walk_back

_messages = MESSAGES.c
_summaries = SUMMARIES.c
_sessions = SESSIONS.c
_jobs = SUMMARY_JOBS.c

_SESSION_WITH_JOB = select(
    *SESSION_COLUMNS,
    exists().where(_jobs.session_id == bindparam("p_session_id")).label("job_pending"),
    exists()
    .where(_summaries.session_id == bindparam("p_session_id"), live(_summaries))
    .label("summarized"),
).where(
    _sessions.id == bindparam("p_session_id"),
    _sessions.tenant == bindparam("p_tenant"),
    _sessions.external_id == bindparam("p_external_id"),
    unexpired(_sessions),
)


class HistoryStart(NamedTuple):
    """What a history load reads first, in one round trip."""

    session: SessionRow
    job_pending: bool
    """Whether a summarization job of the session is pending or running."""
    summarized: bool
    """Whether the session had a live summary: if not, the load reads no summaries. One that
    lands in between is seen by the next load, as if this one had run a moment earlier."""


async def session_for_history(db: AsyncSession, tenant: str, external_id: str) -> HistoryStart:
    """The session (unless it has expired), whether a summarization job of it is pending and
    whether it has a live summary."""
    params = {**named(tenant, external_id), **loader_expiry_params(db)}
    found = await driver.read(db, _SESSION_WITH_JOB, params)
    if not found:
        raise SessionNotFound(external_id)
    *values, job_pending, summarized = found[0]
    return HistoryStart(SessionRow._make(values), bool(job_pending), bool(summarized))


_PINNED, _SUMMARY, _TAIL = 0, 1, 2
"""Which part of the load a row of the one statement belongs to (its first column)."""


def _nulls(columns: tuple[Any, ...]) -> list[ColumnElement[Any]]:
    """NULLs cast to the types of `columns`: PostgreSQL matches a union's column types part by
    part, and the result's types (JSON decoding included) come from its first part."""
    return [cast_(null(), column.type) for column in columns]


def _build_load(summarized: bool, pinned: bool) -> Any:
    """The load's one statement: the tail's first page, with the pinned prefix if `pinned`,
    with the live summaries if `summarized`. Plain index scans, no CTE: a union carries a cost
    per part and per column, so a session without summaries or a prefix pays for neither;
    whether a loaded summary covers the prefix is decided in Python (`load_rows`)."""
    after_seq: Any = bindparam("p_pinned_seq")
    if summarized:
        after_seq = (
            select(func.coalesce(func.max(_summaries.last_seq), bindparam("p_pinned_seq")))
            .where(_summaries.session_id == bindparam("p_session_id"), live(_summaries))
            .scalar_subquery()
        )
    tail = (
        select(*MESSAGE_COLUMNS)
        .where(
            _messages.session_id == bindparam("p_session_id"),
            _messages.seq > after_seq,
            _messages.seq > bindparam("p_floor_seq"),
            shown(_messages),
        )
        .order_by(_messages.seq.desc())
        .limit(bindparam("p_page"))
        .subquery("tail")
    )
    padding = _nulls(SUMMARY_COLUMNS) if summarized else []
    parts = [select(literal(_TAIL, Integer), *tail.c, *padding)]
    if pinned:
        parts.append(
            select(literal(_PINNED, Integer), *MESSAGE_COLUMNS, *padding).where(
                _messages.session_id == bindparam("p_session_id"),
                _messages.seq <= bindparam("p_pinned_seq"),
                shown(_messages),
            )
        )
    if summarized:
        summaries = (
            select(*SUMMARY_COLUMNS)
            .where(_summaries.session_id == bindparam("p_session_id"), live(_summaries))
            .order_by(_summaries.last_seq.desc())
            .limit(bindparam("p_summary_limit"))
            .subquery("summaries")
        )
        parts.append(select(literal(_SUMMARY, Integer), *_nulls(MESSAGE_COLUMNS), *summaries.c))
    return union_all(*parts) if len(parts) > 1 else parts[0]


_LOADS = {
    (summarized, pinned): _build_load(summarized, pinned)
    for summarized in (False, True)
    for pinned in (False, True)
}
"""Built once each (SQLAlchemy memoizes a statement's cache key on the object)."""


def load_statement(session: SessionRow, summarized: bool) -> Any:
    """The load's statement for `session` (`summarized`: it had a live summary when read);
    its parameters: `load_parameters`."""
    return _LOADS[summarized, session.pinned_seq > 0]


_MESSAGE_END = 1 + len(MessageRow._fields)


@dataclass(frozen=True)
class LoadedRows:
    """What one history load read: the pinned prefix, the live summaries (oldest first) and
    the newest messages after them (ascending); `after_seq` is where those messages start
    after. Removed messages are never read."""

    pinned: list[MessageRow]
    summaries: list[SummaryRow]
    messages: list[MessageRow]
    after_seq: int
    not_loaded: int = 0
    """Older messages after `after_seq` left unread because the budget was already spent."""
    holes: list[MessageRow] = field(default_factory=list)
    """The messages of the holes between live summaries (a removal erased their leaf, which is
    being made again), ascending: shown in place, between the summaries around them."""


def first_floor(session: SessionRow, max_tokens: int | None) -> int:
    """The seq the load statement's tail starts after (besides the newest summary): a page of
    seqs below the session's newest under a token budget, else none."""
    return -1 if max_tokens is None else session.last_seq - TAIL_PAGE_SIZE


def load_parameters(
    session: SessionRow, summary_limit: int, max_tokens: int | None
) -> dict[str, Any]:
    """The load statement's parameters: a page of the tail under a token budget, else all of it.

    The page is bounded by seqs (`first_floor`), not only by its LIMIT: on a session the
    planner's statistics have not seen yet (bulk-appended since the last ANALYZE), a plan
    that reads the whole range and sorts it looks as cheap as one that stops after a page."""
    return {
        "p_session_id": session.id,
        "p_summary_limit": summary_limit,
        "p_pinned_seq": session.pinned_seq,
        "p_floor_seq": first_floor(session, max_tokens),
        "p_page": UNBOUNDED if max_tokens is None else TAIL_PAGE_SIZE,
    }


EVERY_LIVE_SUMMARY = 100
"""The most live summaries a load reads (the API's largest `summary_limit`): every live one.
Roll-ups keep them few; while one is pending (a crash before it, a lowered `summary_limit`),
a load shows them all, or names in `omitted` those a smaller limit asked for leaves out."""


async def load_rows(
    db: AsyncSession,
    session: SessionRow,
    summary_limit: int,
    max_tokens: int | None,
    *,
    summarized: bool,
) -> LoadedRows:
    """The pinned prefix, the newest `summary_limit` live summaries (read only if
    `summarized`, `HistoryStart.summarized`) and the newest messages after them whose stored
    token counts reach `max_tokens` less the pinned prefix's.

    Walks back from the newest message in pages, so the cost follows what is returned, not
    the session's size; it keeps walking while the oldest loaded message is a tool result,
    so a tool call is not cut off from its results at the window's edge. The first page comes
    with the summaries and the pinned prefix in one statement. Without `max_tokens`, every
    message after the newest loaded summary.
    """
    params = load_parameters(session, summary_limit, max_tokens)
    # no summary shown, none hides a message
    statement = load_statement(session, summarized and summary_limit > 0)
    result = await driver.read(db, statement, params, paged=max_tokens is not None)
    pinned: list[MessageRow] = []
    summaries: list[SummaryRow] = []
    page: list[MessageRow] = []
    for row in result:
        if row[0] == _SUMMARY:
            summaries.append(SummaryRow._make(row[_MESSAGE_END:]))
        elif row[0] == _PINNED:
            pinned.append(MessageRow._make(row[1:_MESSAGE_END]))
        else:
            page.append(MessageRow._make(row[1:_MESSAGE_END]))
    summaries.sort(key=lambda summary: summary.last_seq)
    if any(summary.first_seq <= session.pinned_seq for summary in summaries):
        # a loaded summary covers the prefix (pinning was off when the session's first
        # summary was made): the summary shows it
        pinned = []
    pinned.sort(key=lambda message: message.seq)
    page.sort(key=lambda message: message.seq, reverse=True)
    after_seq = summaries[-1].last_seq if summaries else session.pinned_seq
    in_holes = await _hole_messages(db, session, summaries, summary_limit)
    if max_tokens is None:
        page.reverse()
        return LoadedRows(pinned, summaries, page, after_seq, holes=in_holes)
    budget = max(1, max_tokens - sum(message.token_count for message in pinned))
    floor = max(after_seq, first_floor(session, max_tokens))
    first = Window(floor, UNBOUNDED, TAIL_PAGE_SIZE, TAIL_PAGE_SIZE)
    messages = await walk_back(db, session.id, after_seq, budget, page, first)
    unread = await not_loaded(db, session, after_seq, messages)
    return LoadedRows(pinned, summaries, messages, after_seq, unread, in_holes)


HOLES_PER_READ = 8
"""Holes one read of their messages covers: a statement per number of them, built once."""


def _build_hole_read(count: int) -> Any:
    ranges = [
        _messages.seq.between(bindparam(f"p_first_{i}"), bindparam(f"p_last_{i}"))
        for i in range(count)
    ]
    return (
        select(*MESSAGE_COLUMNS)
        .where(_messages.session_id == bindparam("p_session_id"), or_(*ranges), shown(_messages))
        .order_by(_messages.seq)
    )


_HOLE_READS = {count: _build_hole_read(count) for count in range(1, HOLES_PER_READ + 1)}


async def _hole_messages(
    db: AsyncSession, session: SessionRow, summaries: list[SummaryRow], summary_limit: int
) -> list[MessageRow]:
    """The shown messages of the holes between `summaries` (none when they are contiguous,
    the usual case: no round trip then), ascending. Before the oldest of them, a hole counts
    only when it is the oldest live summary (fewer than `summary_limit` were read)."""
    if not summaries:
        return []
    floor = session.pinned_seq if len(summaries) < summary_limit else summaries[0].first_seq
    ranges = holes(summaries, floor)
    found: list[MessageRow] = []
    for start in range(0, len(ranges), HOLES_PER_READ):
        chunk = ranges[start : start + HOLES_PER_READ]
        params: dict[str, Any] = {"p_session_id": session.id}
        for i, (first, last) in enumerate(chunk):
            params |= {f"p_first_{i}": first, f"p_last_{i}": last}
        rows = await driver.read(db, _HOLE_READS[len(chunk)], params, paged=False)
        found += [MessageRow._make(row) for row in rows]
    return found
