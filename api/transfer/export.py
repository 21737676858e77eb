"""An export: a session as JSON Lines, streamed a page at a time from one read snapshot."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from api.db.transactions import Database
from api.schemas.transfer import EndLine
from api.store import sessions
from api.store import transfer as store
from api.transfer.lines import encoded, message_line, session_line, summary_line

EXPORT_MESSAGE_PAGE = 1000
"""Messages read per statement of an export (one window of seqs), sent as one chunk."""

EXPORT_SUMMARY_PAGE = 100
"""Summaries read per statement of an export, their covered seqs read with them: fewer than
messages, since a roll-up's runs are read in the same round trip."""


@asynccontextmanager
async def snapshot(database: Database) -> AsyncIterator[AsyncSession]:
    """A session reading one consistent moment of the database, however many statements it
    runs: on PostgreSQL a REPEATABLE READ transaction, on SQLite a read transaction (in WAL
    mode writers go on meanwhile). It only reads, and rolls back when the block ends."""
    async with database.sessionmaker() as db:
        if db.get_bind().dialect.name == "postgresql":
            await db.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            await db.execute(text("SET TRANSACTION READ ONLY"))
        else:
            # sqlite3 begins no transaction before a read; the snapshot starts at the first one
            await db.execute(text("BEGIN"))
        yield db


async def export_session(database: Database, tenant: str, external_id: str) -> AsyncIterator[bytes]:
    """The session as JSON Lines, in chunks of whole lines. The session is read before this
    returns (`SessionNotFound` is raised here, not in the stream); the rest streams from the
    same snapshot."""
    lines = _export(database, tenant, external_id)
    first = await anext(lines)
    return _after(first, lines)


async def _after(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        yield first
        async for chunk in rest:
            yield chunk
    finally:
        await rest.aclose()  # type: ignore[attr-defined]


async def _export(database: Database, tenant: str, external_id: str) -> AsyncIterator[bytes]:
    async with snapshot(database) as db:
        session = await sessions.get_session(db, tenant, external_id)
        yield encoded(session_line(session))
        messages = 0
        after = 0
        while after < session.last_seq:
            through = min(after + EXPORT_MESSAGE_PAGE, session.last_seq)
            rows = await store.message_window(db, session.id, after, through)
            messages += len(rows)
            yield b"".join(encoded(message_line(row)) for row in rows)
            after = through
        refs: dict[int, int] = {}
        position: store.SummaryPosition | None = None
        while True:
            page = await store.summary_page(db, session.id, position, EXPORT_SUMMARY_PAGE)
            if not page:
                break
            covers = await store.covered_ranges(
                db, session.id, [summary.row.id for summary in page]
            )
            chunk: list[bytes] = []
            for summary in page:
                refs[summary.row.id] = len(refs) + 1
                chunk.append(encoded(summary_line(summary, refs, covers[summary.row.id])))
            yield b"".join(chunk)
            position = page[-1].position
        yield encoded(EndLine(type="end", messages=messages, summaries=len(refs)))
