"""Console logins: one row per login to the operator console (`api.db.models.ConsoleLogin`),
found by the digest of its token; a login that has expired opens nothing, whether or not its
row has been deleted yet."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from api.db.models import CONSOLE_LOGINS

_logins = CONSOLE_LOGINS.c


async def add_login(
    db: AsyncSession, token_hash: str, tenant: str, now: datetime, expires_at: datetime
) -> None:
    """Store a login of `tenant` under its token's digest, until `expires_at`."""
    await db.execute(
        insert(CONSOLE_LOGINS).values(
            token_hash=token_hash, tenant=tenant, created_at=now, expires_at=expires_at
        )
    )


async def login_tenant(db: AsyncSession, token_hash: str, now: datetime) -> str | None:
    """The tenant of the login stored under `token_hash`; None when there is none, or it has
    expired by `now`."""
    tenant: str | None = await db.scalar(
        select(_logins.tenant).where(_logins.token_hash == token_hash, _logins.expires_at > now)
    )
    return tenant


async def end_login(db: AsyncSession, token_hash: str) -> None:
    """Delete the login stored under `token_hash`, if any."""
    await db.execute(delete(CONSOLE_LOGINS).where(_logins.token_hash == token_hash))


async def delete_expired_logins(db: AsyncSession, now: datetime) -> int:
    """Delete every login expired by `now` (through `expires_at`'s index); how many."""
    result = await db.execute(delete(CONSOLE_LOGINS).where(_logins.expires_at <= now))
    return int(getattr(result, "rowcount", 0) or 0)
