"""The background responses' store: the worker's right to store a turn and a cancel exclude
each other, and a claim that lost its lease can do nothing more (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from fastapi import FastAPI

from api.db.transactions import Database
from api.store.background import (
    BackgroundRow,
    cancel_background,
    claim_background,
    delete_background,
    finish_background,
    get_background,
    queue_response,
    renew_background,
    start_storing,
)

LEASE = timedelta(seconds=30)
TENANT = "tenant-store"


async def queued_and_claimed(database: Database, lease: timedelta = LEASE) -> BackgroundRow:
    response_id = f"resp_{uuid.uuid4().hex}"
    await queue_response(database, TENANT, response_id, '{"model": "m"}', '{"status": "queued"}')
    async with database.transaction() as db:
        claim = await claim_background(db, lease)
    assert claim is not None and claim.id == response_id and claim.status == "in_progress"
    return claim


async def test_a_cancelled_response_can_no_longer_be_stored(app: FastAPI) -> None:
    database: Database = app.state.database
    claim = await queued_and_claimed(database)
    async with database.transaction() as db:
        assert await cancel_background(db, TENANT, claim.id, '{"status": "cancelled"}')
    assert not await start_storing(database, claim)
    async with database.transaction() as db:
        assert not await renew_background(db, claim, LEASE)
    async with database.reading() as db:
        row = await get_background(db, TENANT, claim.id)
    assert row is not None and row.status == "cancelled" and row.request is None


async def test_a_response_being_stored_can_no_longer_be_cancelled(app: FastAPI) -> None:
    database: Database = app.state.database
    claim = await queued_and_claimed(database)
    assert await start_storing(database, claim)
    async with database.transaction() as db:
        assert not await cancel_background(db, TENANT, claim.id, '{"status": "cancelled"}')
    assert await start_storing(database, claim)  # run again after a lost connection: its own
    async with database.transaction() as db:
        assert await renew_background(db, claim, LEASE)
    await finish_background(database, claim)
    async with database.reading() as db:
        assert await get_background(db, TENANT, claim.id) is None


async def test_a_claim_whose_lease_ran_out_is_claimed_again_and_the_first_can_do_nothing(
    app: FastAPI,
) -> None:
    database: Database = app.state.database
    first = await queued_and_claimed(database, timedelta(seconds=0.05))
    await asyncio.sleep(0.1)
    async with database.transaction() as db:
        second = await claim_background(db, LEASE)
    assert second is not None and second.id == first.id and second.attempts == 2
    assert not await start_storing(database, first)
    async with database.transaction() as db:
        assert not await renew_background(db, first, LEASE)
    assert await start_storing(database, second)
    await finish_background(database, second)


async def test_a_response_storing_its_turn_is_not_deleted_until_its_response_is(
    app: FastAPI,
) -> None:
    database: Database = app.state.database
    claim = await queued_and_claimed(database)
    assert await start_storing(database, claim)
    async with database.transaction() as db:
        assert not await delete_background(db, TENANT, claim.id)
        assert await delete_background(db, TENANT, claim.id, storing_too=True)
        assert await get_background(db, TENANT, claim.id) is None
