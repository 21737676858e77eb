"""Summarization leases: take, renew, check and give back the lease on a session's summarizer.

A lease is a row with a random token and an expiry (`api.db.models.SummarizationLease`). Taking
it inserts the row, or takes over one whose expiry has passed; renewing, checking and giving it
back all name the token, so a holder whose lease ran out and was taken over changes nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from api.db.models import SummarizationLease
from api.errors import SessionGone


async def take_lease(
    db: AsyncSession, session_key: int, token: int, now: datetime, duration: timedelta
) -> bool:
    """Take the session's lease for `token` until `now + duration`, if nobody holds it (or the
    holder's lease has run out); whether it was taken. `SessionGone` if the session is."""
    dialect = postgresql if db.get_bind().dialect.name == "postgresql" else sqlite
    insert = dialect.insert(SummarizationLease).values(
        session_id=session_key, token=token, expires_at=now + duration
    )
    try:
        taken = await db.scalar(
            insert.on_conflict_do_update(
                index_elements=[SummarizationLease.session_id],
                set_={"token": token, "expires_at": now + duration},
                where=SummarizationLease.expires_at <= now,
            ).returning(SummarizationLease.token)
        )
    except IntegrityError as exc:  # the only constraint left to break: the session's key
        raise SessionGone("the session no longer exists") from exc
    return bool(taken == token)


async def renew_lease(
    db: AsyncSession, session_key: int, token: int, now: datetime, duration: timedelta
) -> bool:
    """Extend the lease `token` holds to `now + duration`; False if it no longer holds it."""
    renewed = await db.scalar(
        update(SummarizationLease)
        .where(SummarizationLease.session_id == session_key, SummarizationLease.token == token)
        .values(expires_at=now + duration)
        .returning(SummarizationLease.token)
    )
    return renewed is not None


async def holds_lease(db: AsyncSession, session_key: int, token: int, now: datetime) -> bool:
    """Whether `token` still holds the session's lease. On PostgreSQL the row stays locked
    until the caller's transaction ends, so nobody takes the lease over meanwhile."""
    statement = select(SummarizationLease.token).where(
        SummarizationLease.session_id == session_key,
        SummarizationLease.token == token,
        SummarizationLease.expires_at > now,
    )
    if db.get_bind().dialect.name == "postgresql":
        statement = statement.with_for_update()
    return await db.scalar(statement) is not None


async def give_back_lease(db: AsyncSession, session_key: int, token: int) -> None:
    """End the lease `token` holds, if it still does."""
    await db.execute(
        delete(SummarizationLease).where(
            SummarizationLease.session_id == session_key, SummarizationLease.token == token
        )
    )
