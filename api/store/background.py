"""Background responses: queue one, claim it, mark it storing, finish, fail, cancel, delete.

A background response (`POST /v1/responses` with `background: true`) is a row of
`background_responses` from its answer (`queued`) until its turn is stored and its response
kept in `responses`: `in_progress` while a worker runs it (under a lease), `storing` once the
worker has taken the right to store its turn, `failed` or `cancelled` for good. Its key is the
session key its id would name (`session_key(tenant, id)`): every statement but the claim's
candidate read touches one row by that key (one shard on Citus).

The worker's move to `storing` and a cancel's move to `cancelled` are each one conditional
UPDATE of the same row: exactly one of them wins, so a cancelled response never stores its
turn, and one whose turn is being stored can no longer be cancelled.

Functions take the caller's AsyncSession and never commit: the caller owns the transaction;
but the queue's insert and the run's two steps on its own row, `start_storing` and
`finish_background`, are one statement each on the driver, committed.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Select, and_, bindparam, delete, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.dml import Insert

from api.db import driver
from api.db.models import BACKGROUND_RESPONSES, utcnow
from api.db.transactions import Database
from api.store.keys import session_key

_background = BACKGROUND_RESPONSES.c

WAITING = ("queued", "in_progress")
"""The statuses a cancel stops."""

ENDED = ("failed", "cancelled")
"""The statuses of a response that stored nothing, for good."""

CLAIM_CANDIDATES = 8
"""Claimable rows a claim reads before trying them one by one."""


class BackgroundRow(NamedTuple):
    """A background response not yet kept in `responses` (or failed, or cancelled)."""

    key: int
    id: str
    tenant: str
    status: str
    request: str | None
    """The request as the client sent it (JSON); cleared once the response has ended."""
    body: str
    """The response object as answered so far (JSON): the queued shell, or its end."""
    attempts: int
    claimed_until: datetime | None
    created_at: datetime


BACKGROUND_COLUMNS = tuple(_background[name] for name in BackgroundRow._fields)


def _one(tenant: str, response_id: str) -> list[ColumnElement[bool]]:
    return [
        _background.key == session_key(tenant, response_id),
        _background.id == response_id,
        _background.tenant == tenant,
    ]


def _claimed(claim: BackgroundRow, *statuses: str) -> list[ColumnElement[bool]]:
    """The row while `claim` still holds it in one of `statuses` (each claim counts an
    attempt, so a worker whose lease ran out and whose row was claimed again matches no
    more)."""
    return [
        _background.key == claim.key,
        _background.id == claim.id,
        _background.status.in_(statuses),
        _background.attempts == claim.attempts,
    ]


def _queue_once(dialect: Any) -> Insert:
    """The insert of a queued response, doing nothing when its row is there (its id is
    random: only a run again of this insert made it)."""
    values: dict[str, Any] = {name: bindparam(name) for name in BackgroundRow._fields}
    values["updated_at"] = bindparam("created_at")
    inserted: Insert = dialect.insert(BACKGROUND_RESPONSES).values(values).on_conflict_do_nothing()
    return inserted


_QUEUE_ONCE = {"postgresql": _queue_once(postgresql), "sqlite": _queue_once(sqlite)}


async def queue_response(
    database: Database,
    tenant: str,
    response_id: str,
    request: str,
    body: str,
    claimed_for: timedelta | None = None,
) -> BackgroundRow | None:
    """Queue a response (None: its row was there already, from an earlier try of this insert
    whose answer was lost); with `claimed_for`, already claimed by the caller for that lease (its
    first attempt, `in_progress`): the replica that queues it runs it at once. One statement
    on the driver, committed, tried once: run again after a lost connection, it could queue
    again a response that ran and ended meanwhile (its row deleted), so the caller reads back
    what landed first."""
    now = utcnow()
    row = BackgroundRow(
        key=session_key(tenant, response_id),
        id=response_id,
        tenant=tenant,
        status="queued" if claimed_for is None else "in_progress",
        request=request,
        body=body,
        attempts=0 if claimed_for is None else 1,
        claimed_until=None if claimed_for is None else now + claimed_for,
        created_at=now,
    )
    statement = _QUEUE_ONCE[database.engine.dialect.name]
    inserted = await driver.write(database, statement, row._asdict(), repeat=False)
    return row if inserted else None


async def get_background(db: AsyncSession, tenant: str, response_id: str) -> BackgroundRow | None:
    row = (await db.execute(select(*BACKGROUND_COLUMNS).where(*_one(tenant, response_id)))).first()
    return None if row is None else BackgroundRow._make(row)


def _claimable(now: datetime) -> ColumnElement[bool]:
    """Queued (and not put off: `claimed_until` is then when it may run again), or in
    progress (or storing) with its worker's lease run out."""
    return or_(
        and_(
            _background.status == "queued",
            or_(_background.claimed_until.is_(None), _background.claimed_until < now),
        ),
        and_(_background.status.in_(("in_progress", "storing")), _background.claimed_until < now),
    )


def claim_candidates(now: datetime) -> Select[Any]:
    """The oldest claimable rows: read through `(status, updated_at)`, so only unfinished
    ones, however many ended ones the table holds."""
    return (
        select(_background.key, _background.id, _background.status)
        .where(_claimable(now))
        .order_by(_background.created_at)
        .limit(CLAIM_CANDIDATES)
    )


async def claim_background(db: AsyncSession, lease: timedelta) -> BackgroundRow | None:
    """Claim the oldest claimable response: a plain read of candidates, then an UPDATE of one
    row that holds only while it is still claimable (of workers racing for it, one wins; the
    others try the next). A row claimed as `storing` was left by a worker that stopped while
    storing its turn: the caller ends it."""
    now = utcnow()
    candidates = await db.execute(claim_candidates(now))
    for key, response_id, status in candidates.all():
        claimed = await db.execute(
            update(BACKGROUND_RESPONSES)
            .where(
                _background.key == key,
                _background.id == response_id,
                _background.status == status,
                _claimable(now),
            )
            .values(
                status="in_progress" if status != "storing" else "storing",
                attempts=_background.attempts + 1,
                claimed_until=now + lease,
                updated_at=now,
            )
            .returning(*BACKGROUND_COLUMNS)
        )
        row = claimed.first()
        if row is not None:
            return BackgroundRow._make(row)
    return None


async def renew_background(db: AsyncSession, claim: BackgroundRow, lease: timedelta) -> bool:
    """Extend a running (or storing) response's lease; False once it is no longer this
    claim's (cancelled, deleted, or claimed again after its lease ran out)."""
    renewed = await db.execute(
        update(BACKGROUND_RESPONSES)
        .where(*_claimed(claim, "in_progress", "storing"))
        .values(claimed_until=utcnow() + lease)
        .returning(_background.id)
    )
    return renewed.first() is not None


def _held_by_claim(*statuses: str) -> ColumnElement[bool]:
    """`_claimed`, its claim bound when the statement runs (a statement built once)."""
    return and_(
        _background.key == bindparam("p_key"),
        _background.id == bindparam("p_id"),
        or_(*(_background.status == status for status in statuses)),
        _background.attempts == bindparam("p_attempts"),
    )


_START_STORING = (
    update(BACKGROUND_RESPONSES)
    .where(_held_by_claim("in_progress", "storing"))
    .values(status="storing", updated_at=bindparam("p_now"))
)
_FINISH = delete(BACKGROUND_RESPONSES).where(_held_by_claim("storing"))


def _claim_params(claim: BackgroundRow) -> dict[str, Any]:
    return {"p_key": claim.key, "p_id": claim.id, "p_attempts": claim.attempts}


async def start_storing(database: Database, claim: BackgroundRow) -> bool:
    """Take the right to store the response's turn; False: it was cancelled (or deleted, or is
    no longer this claim's), and nothing of it may be stored. One statement on the driver,
    committed; run twice by one claim (again after a lost connection), it answers True again."""
    params = {**_claim_params(claim), "p_now": utcnow()}
    return await driver.write(database, _START_STORING, params) == 1


async def finish_background(database: Database, claim: BackgroundRow) -> None:
    """Delete the row once its response is kept in `responses`: one statement on the driver,
    committed."""
    await driver.write(database, _FINISH, _claim_params(claim))


async def fail_background(db: AsyncSession, claim: BackgroundRow, body: dict[str, Any]) -> None:
    """End a claimed response as failed (`body`: its answer, with its error) while the claim
    holds it."""
    await db.execute(
        update(BACKGROUND_RESPONSES)
        .where(*_claimed(claim, "in_progress", "storing"))
        .values(
            status="failed",
            body=json.dumps(body),
            request=None,
            claimed_until=None,
            updated_at=utcnow(),
        )
    )


async def release_background(
    db: AsyncSession,
    claim: BackgroundRow,
    delay: timedelta = timedelta(0),
    storing_too: bool = False,
) -> None:
    """Put a running response back in the queue, to run again after `delay` (its worker
    stopped, or met a passing fault); `storing_too`: one that took the right to store and
    stored nothing (its append said so)."""
    now = utcnow()
    statuses = ("in_progress", "storing") if storing_too else ("in_progress",)
    await db.execute(
        update(BACKGROUND_RESPONSES)
        .where(*_claimed(claim, *statuses))
        .values(status="queued", claimed_until=now + delay, updated_at=now)
    )


async def cancel_background(db: AsyncSession, tenant: str, response_id: str, body: str) -> bool:
    """Cancel a queued or running response (its answer becomes `body`); False: it was not
    waiting (already ended, being stored, or not there)."""
    cancelled = await db.execute(
        update(BACKGROUND_RESPONSES)
        .where(*_one(tenant, response_id), _background.status.in_(WAITING))
        .values(
            status="cancelled", body=body, request=None, claimed_until=None, updated_at=utcnow()
        )
        .returning(_background.id)
    )
    return cancelled.first() is not None


async def delete_background(
    db: AsyncSession, tenant: str, response_id: str, storing_too: bool = False
) -> bool:
    """Delete the row (a running response then stores nothing); False: none. A row storing
    its turn stays (its response is about to be stored) unless `storing_too` (it is)."""
    statuses = [*WAITING, *ENDED] + (["storing"] if storing_too else [])
    deleted = await db.execute(
        delete(BACKGROUND_RESPONSES)
        .where(*_one(tenant, response_id), _background.status.in_(statuses))
        .returning(_background.id)
    )
    return deleted.first() is not None


async def ended_before(db: AsyncSession, cutoff: datetime, limit: int) -> list[tuple[int, str]]:
    """Keys and ids of responses that ended (failed, cancelled) before `cutoff`: what the
    retention sweep deletes (a read across keys)."""
    found = await db.execute(ended_before_statement(cutoff, limit))
    return [(key, response_id) for key, response_id in found.all()]


def ended_before_statement(cutoff: datetime, limit: int) -> Select[Any]:
    """Read through `(status, updated_at)`: only rows that ended before `cutoff`."""
    return (
        select(_background.key, _background.id)
        .where(_background.status.in_(ENDED), _background.updated_at < cutoff)
        .limit(limit)
    )


async def delete_ended(db: AsyncSession, key: int, response_id: str, cutoff: datetime) -> bool:
    """Delete one response that ended before `cutoff`; False: it is not one (any more)."""
    deleted = await db.execute(
        delete(BACKGROUND_RESPONSES)
        .where(
            _background.key == key,
            _background.id == response_id,
            _background.status.in_(ENDED),
            _background.updated_at < cutoff,
        )
        .returning(_background.id)
    )
    return deleted.first() is not None
