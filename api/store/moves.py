"""Moving a session to a new id: its rows copied under the new id's session key, then the old
ones deleted, in the caller's transaction.

The session key is a function of the session id (`api.store.keys`), so a new id is a new key:
a rename moves every row of the session (a wire's branch keeps the old branch under a new id
this way, `api.forks.branch_session`). Row ids are kept: the copies take the ids of the rows
they replace, which are gone when the transaction commits, so ids stay unique across sessions
and every link, end message and roll-up pointer stays as it was.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, String, Table, delete, insert, literal, select
from sqlalchemy.ext.asyncio import AsyncSession

from api.db.models import MESSAGES, RESPONSES, SESSIONS, SUMMARIES, SUMMARY_JOBS, SUMMARY_LINKS
from api.store.keys import session_key
from api.store.rows import SESSION_COLUMNS, SessionRow

SESSION_DATA = (MESSAGES, SUMMARIES, SUMMARY_LINKS, SUMMARY_JOBS, RESPONSES)
"""The tables a move copies, each after those its foreign keys name. A summarization lease is
not moved: a summarization under way stores nothing under the old key (its save finds no
lease), and the moved session is summarized afresh: its job is moved as pending."""

RESET = {SUMMARY_JOBS.name: {"status": "pending", "locked_until": None}}
"""Columns a move sets rather than copies: a job's claim was its worker's at the old key."""


async def move_session(db: AsyncSession, session: SessionRow, external_id: str) -> SessionRow:
    """The session under the id `external_id` (of the same tenant; not taken), every row of it
    as it was; the old id is free when the transaction commits."""
    key = session_key(session.tenant, external_id)
    kept = [column.name for column in SESSIONS.columns if column.name not in ("id", "external_id")]
    copied = select(
        literal(key, BigInteger), literal(external_id, String), *(SESSIONS.c[name] for name in kept)
    ).where(SESSIONS.c.id == session.id)
    moved = await db.execute(
        insert(SESSIONS)
        .from_select(["id", "external_id", *kept], copied)
        .returning(*SESSION_COLUMNS)
    )
    row = SessionRow._make(moved.one())
    for table in SESSION_DATA:
        await _copy_rows(db, table, session.id, key)
    await db.execute(delete(SESSIONS).where(SESSIONS.c.id == session.id))
    return row


async def _copy_rows(db: AsyncSession, table: Table, from_key: int, to_key: int) -> None:
    """Copy one session's rows of `table` under another key, every other column as it is."""
    names = [column.name for column in table.columns if column.name != "session_id"]
    reset = RESET.get(table.name, {})
    values = (
        literal(reset[name], table.c[name].type) if name in reset else table.c[name]
        for name in names
    )
    rows = select(literal(to_key, BigInteger), *values).where(table.c.session_id == from_key)
    await db.execute(insert(table).from_select(["session_id", *names], rows))
