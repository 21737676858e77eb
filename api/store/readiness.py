"""The readiness probe's read: the database answers, at its schema revision, and takes writes."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from api.db.faults import connection_lost
from api.db.models import SCHEMA_REVISION


@dataclass(frozen=True)
class DatabaseState:
    revision: str | None
    """The database's Alembic revision; None on a database that was never migrated."""
    in_recovery: bool
    """A PostgreSQL standby still in recovery: it takes no writes (a replica, a failover
    under way)."""


def schema_mismatch(revision: str | None) -> str | None:
    """What keeps this build from serving a database at `revision`, in one sentence (as
    /readyz and `python -m api` say it); None: nothing."""
    if revision == SCHEMA_REVISION:
        return None
    return (
        f"the database schema is at revision {revision or 'none'}, this build needs "
        f"{SCHEMA_REVISION}: run `alembic upgrade head`"
    )


async def database_state(engine: AsyncEngine) -> DatabaseState:
    """Reach the database: its Alembic revision, and whether it is a standby in recovery."""
    async with engine.connect() as connection:
        in_recovery = False
        if connection.dialect.name == "postgresql":
            in_recovery = bool(await connection.scalar(text("SELECT pg_is_in_recovery()")))
        else:
            await connection.execute(text("SELECT 1"))
        return DatabaseState(await _schema_revision(connection), in_recovery)


async def _schema_revision(connection: AsyncConnection) -> str | None:
    """The database's Alembic revision; None on a database that was never migrated."""
    try:
        version = await connection.execute(text("SELECT version_num FROM alembic_version"))
    except (OperationalError, ProgrammingError) as exc:  # no such table
        if connection_lost(exc):
            raise
        return None
    return version.scalar_one_or_none()
