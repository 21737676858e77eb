"""The readiness probe's read: the database answers, at its schema revision."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from api.db.faults import connection_lost


async def database_revision(engine: AsyncEngine) -> str | None:
    """Reach the database; its Alembic revision."""
    async with engine.connect() as connection:
        await connection.execute(text("SELECT 1"))
        return await _schema_revision(connection)


async def _schema_revision(connection: AsyncConnection) -> str | None:
    """The database's Alembic revision; None on a database that was never migrated."""
    try:
        version = await connection.execute(text("SELECT version_num FROM alembic_version"))
    except (OperationalError, ProgrammingError) as exc:  # no such table
        if connection_lost(exc):
            raise
        return None
    return version.scalar_one_or_none()
