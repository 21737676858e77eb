"""The console's own reads, each bounded: a page never reads a whole session.

What the API already reads (a session, its live summary counts, the history, a summary, the
summaries a roll-up absorbed) the console reads through the same store functions; these are
the reads only the console makes (a summary's sources a page at a time among them). Nothing
here writes.
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import func, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from api.db.models import (
    MESSAGES,
    SESSIONS,
    SUMMARIES,
    SUMMARY_JOBS,
    SUMMARY_LINKS,
    Session,
)
from api.store.retention import Expiry, unexpired
from api.store.rows import (
    JOB_COLUMNS,
    MESSAGE_COLUMNS,
    SESSION_COLUMNS,
    SUMMARY_COLUMNS,
    JobRow,
    MessageRow,
    SessionRow,
    SummaryRow,
    live,
)
from api.store.sessions import SessionPosition
from summarizer.summarize import FALLBACK_MODEL

_sessions = SESSIONS.c
_messages = MESSAGES.c
_summaries = SUMMARIES.c
_jobs = SUMMARY_JOBS.c
_links = SUMMARY_LINKS.c


async def sessions_page(
    db: AsyncSession, tenant: str, prefix: str, limit: int, before: SessionPosition | None
) -> list[SessionRow]:
    """The tenant's unexpired sessions whose session id starts with `prefix`, newest first
    (by creation, then session key, as `GET /v1/sessions`), keyset-paginated."""
    query = select(*SESSION_COLUMNS).where(_sessions.tenant == tenant, unexpired(_sessions))
    if prefix:
        query = query.where(_sessions.external_id.startswith(prefix, autoescape=True))
    if before is not None:
        query = query.where(
            tuple_(_sessions.created_at, _sessions.id) < tuple_(before.created_at, before.key)
        )
    ordered = query.order_by(_sessions.created_at.desc(), _sessions.id.desc()).limit(limit)
    result = await db.execute(ordered, Expiry.of(db).params())
    return [SessionRow._make(row) for row in result]


async def live_fallback_counts(db: AsyncSession, session_keys: list[int]) -> dict[int, int]:
    """Live summaries written without the model, per session (the page's sessions only)."""
    if not session_keys:
        return {}
    rows = await db.execute(
        select(_summaries.session_id, func.count())
        .where(
            _summaries.session_id.in_(session_keys),
            _summaries.model == FALLBACK_MODEL,
            live(_summaries),
        )
        .group_by(_summaries.session_id)
    )
    return {session_key: count for session_key, count in rows}


async def timeline(
    db: AsyncSession, session_key: int, after_seq: int, last_seq: int
) -> list[MessageRow]:
    """Every message of seqs `after_seq + 1..last_seq`, removed and orphaned ones included:
    an index range scan on `(session_id, seq)` of at most `last_seq - after_seq` rows."""
    result = await db.execute(
        select(*MESSAGE_COLUMNS)
        .where(
            _messages.session_id == session_key,
            _messages.seq > after_seq,
            _messages.seq <= last_seq,
        )
        .order_by(_messages.seq)
    )
    return [MessageRow._make(row) for row in result]


async def summary_sources(
    db: AsyncSession, summary: SummaryRow, first_seq: int, last_seq: int
) -> list[MessageRow]:
    """The messages `summary` links among seqs `first_seq..last_seq`, in seq order: an index
    range scan on `(session_id, seq)` of at most that many rows, each probed for its link on
    the links' primary key (a summary of a whole session links every message of it). The
    probe is a scalar subquery, not EXISTS: PostgreSQL may turn an EXISTS into a join driven
    by the summary's links, all of them, when it lacks statistics of a fresh session."""
    linked = (
        select(_links.message_id)
        .where(
            _links.session_id == summary.session_id,
            _links.summary_id == summary.id,
            _links.message_id == _messages.id,
        )
        .limit(1)
        .scalar_subquery()
        .is_not(None)
    )
    result = await db.execute(
        select(*MESSAGE_COLUMNS)
        .where(
            _messages.session_id == summary.session_id,
            _messages.seq >= first_seq,
            _messages.seq <= last_seq,
            linked,
        )
        .order_by(_messages.seq)
    )
    return [MessageRow._make(row) for row in result]


async def summaries_over(
    db: AsyncSession, session_key: int, first_seq: int, last_seq: int, limit: int
) -> list[SummaryRow]:
    """The summaries (live, superseded and erased) reaching into seqs `first_seq..last_seq`,
    at most `limit`, read on the index `(session_id, last_seq)`."""
    result = await db.execute(
        select(*SUMMARY_COLUMNS)
        .where(
            _summaries.session_id == session_key,
            _summaries.last_seq >= first_seq,
            _summaries.first_seq <= last_seq,
        )
        .order_by(_summaries.last_seq, _summaries.level, _summaries.id)
        .limit(limit)
    )
    return [SummaryRow._make(row) for row in result]


class TenantJob(NamedTuple):
    job: JobRow
    session_id: str


async def job_counts(db: AsyncSession, tenant: str) -> dict[str, int]:
    """The tenant's summarization jobs by status (`pending`, `running`), and `failing`: those
    whose last attempt failed (`last_error` set), whatever their status."""
    rows = await db.execute(
        select(_jobs.status, func.count(), func.count(_jobs.last_error))
        .join(Session, Session.id == _jobs.session_id)
        .where(Session.tenant == tenant)
        .group_by(_jobs.status)
    )
    counts: dict[str, int] = {"pending": 0, "running": 0, "failing": 0}
    for status, count, failing in rows:
        counts[status] = counts.get(status, 0) + count
        counts["failing"] += failing
    return counts


async def jobs(db: AsyncSession, tenant: str, limit: int) -> list[TenantJob]:
    """The tenant's jobs, running first, then the failing ones, oldest first, at most `limit`."""
    result = await db.execute(
        select(*JOB_COLUMNS, Session.external_id)
        .join(Session, Session.id == _jobs.session_id)
        .where(Session.tenant == tenant)
        .order_by((_jobs.status == "running").desc(), _jobs.last_error.is_(None), _jobs.created_at)
        .limit(limit)
    )
    return [TenantJob(JobRow._make(values), external_id) for *values, external_id in result]


class TenantSummary(NamedTuple):
    summary: SummaryRow
    session_id: str


async def fallbacks_waiting(db: AsyncSession, tenant: str, limit: int) -> list[TenantSummary]:
    """The tenant's live fallback summaries (written without the model, waiting for their
    repair), oldest first, at most `limit`."""
    result = await db.execute(
        select(*SUMMARY_COLUMNS, Session.external_id)
        .join(Session, Session.id == _summaries.session_id)
        .where(Session.tenant == tenant, _summaries.model == FALLBACK_MODEL, live(_summaries))
        .order_by(_summaries.id)
        .limit(limit)
    )
    return [TenantSummary(SummaryRow._make(values), external_id) for *values, external_id in result]
