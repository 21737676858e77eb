"""The summarization lease: one holder per session across processes, a crashed holder's lease
runs out, and a holder that lost its lease saves nothing (on every database, and through
PgBouncer in transaction mode, where a lock held by a connection would not hold)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from api import store
from api.db.engine import create_database
from api.db.models import SummarizationLease, utcnow
from api.errors import SessionGone, SummarizationInProgress
from api.locks import LEASE_DURATION, LeaseLost, SessionLocks
from api.store import leases
from tests.helpers import append_batch

TENANT = "default"


async def new_session(db: AsyncSession, name: str) -> int:
    message = store.NewMessage("user", "hello", None, None, None, None, None, None, 5)
    return (await append_batch(db, TENANT, name, [message])).session.id


async def expire_leases(db: AsyncSession, session_key: int) -> None:
    """As if the holder had died a lease period ago (it never renewed)."""
    async with db.begin():
        await db.execute(
            update(SummarizationLease)
            .where(SummarizationLease.session_id == session_key)
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )


async def test_a_lease_is_taken_once_until_it_runs_out(db: AsyncSession) -> None:
    session_key = await new_session(db, "lease")
    now = utcnow()
    async with db.begin():
        assert await leases.take_lease(db, session_key, 1, now, LEASE_DURATION)
    async with db.begin():
        assert not await leases.take_lease(db, session_key, 2, now, LEASE_DURATION)
    later = now + LEASE_DURATION
    async with db.begin():
        assert await leases.take_lease(db, session_key, 2, later, LEASE_DURATION)
        assert not await leases.renew_lease(db, session_key, 1, later, LEASE_DURATION)
        assert await leases.holds_lease(db, session_key, 2, later)
        assert not await leases.holds_lease(db, session_key, 1, later)


async def test_another_process_waits_for_the_lease_and_takes_it_once_given_back(
    engine: AsyncEngine, db: AsyncSession
) -> None:
    session_key = await new_session(db, "replicas")
    here, elsewhere = (
        SessionLocks(create_database(engine)),
        SessionLocks(create_database(engine)),
    )  # two replicas' locks
    async with here.hold(session_key, 0.0):
        with pytest.raises(SummarizationInProgress):
            async with elsewhere.hold(session_key, 0.2):
                pass
    async with elsewhere.hold(session_key, 0.0), elsewhere.fenced(session_key):
        pass  # given back when `here` let go


async def test_a_crashed_holders_lease_runs_out_and_is_taken_over(
    engine: AsyncEngine, db: AsyncSession
) -> None:
    session_key = await new_session(db, "crashed")
    async with db.begin():  # a holder that never gives it back
        assert await leases.take_lease(db, session_key, 7, utcnow(), LEASE_DURATION)
    survivor = SessionLocks(create_database(engine))
    with pytest.raises(SummarizationInProgress):
        async with survivor.hold(session_key, 0.0):
            pass
    await expire_leases(db, session_key)
    async with survivor.hold(session_key, 0.0), survivor.fenced(session_key):
        pass


async def test_a_holder_whose_lease_was_taken_over_saves_nothing(
    engine: AsyncEngine, db: AsyncSession
) -> None:
    session_key = await new_session(db, "fenced")
    stalled, other = SessionLocks(create_database(engine)), SessionLocks(create_database(engine))
    async with stalled.hold(session_key, 0.0):
        await expire_leases(db, session_key)  # it stalled past its lease, unrenewed
        async with other.hold(session_key, 0.0):
            with pytest.raises(LeaseLost):
                async with stalled.fenced(session_key):
                    pytest.fail("a write ran without the lease")
            async with other.fenced(session_key):
                pass


async def test_a_lease_on_a_deleted_session_says_it_is_gone(
    engine: AsyncEngine, db: AsyncSession
) -> None:
    session_key = await new_session(db, "deleted")
    async with db.begin():
        await store.delete_session(db, TENANT, "deleted")
    with pytest.raises(SessionGone):
        async with SessionLocks(create_database(engine)).hold(session_key, 0.0):
            pass
