"""Use case: fork a session at one of its messages (`POST /v1/sessions/{id}/fork`).

A fork is a new session holding copies of the parent's messages up to the fork point (same
seqs, same shapes, tombstones and orphans as they are) and of its live summaries lying wholly
at or below it, linked to the copies: its context loads as the parent's did when it ended
there, and no LLM is called. A live summary crossing the fork point is not carried; the
messages it covered load raw in the fork until the fork is summarized in its turn. Everything
is written in one transaction (`api.store.forks`): a fork that fails or loses its connection
leaves nothing of itself.
"""

from __future__ import annotations

import uuid

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from api import store
from api.conversations import CONVERSATION_ID_PREFIX, new_conversation_id
from api.db.transactions import Database
from api.errors import MessageNotFound, SessionExists, ValidationFailed
from api.schemas.forks import ForkRequest
from api.schemas.sessions import SessionOut
from api.settings import Settings
from api.store import forks as fork_store
from api.store.moves import move_session
from api.store.rows import SessionRow
from api.summary_jobs import schedule_remake_if_owed

BRANCH_ATTEMPTS = 3
"""Runs of a branch at most when concurrent branches of one session refuse its snapshot."""

BRANCH_ID_ROOM = 128 - len(":branch-") - 12
"""Characters of a session's id an earlier branch's id keeps (an id is at most 128)."""


class BadForkPoint(ValidationFailed):
    """The fork point names no message a fork can end at: a seq past the session's newest,
    or a removed message. It depends on what the session holds, not on the request's shape."""


def new_fork_id(parent_id: str) -> str:
    """A generated id of the fork: a conversation's fork is a conversation too (`conv_...`),
    any other session's a session (`ses_...`, as `POST /v1/sessions` generates)."""
    if parent_id.startswith(CONVERSATION_ID_PREFIX):
        return new_conversation_id()
    return f"ses_{uuid.uuid4().hex}"


async def fork_session(
    database: Database, settings: Settings, tenant: str, external_id: str, body: ForkRequest
) -> SessionOut:
    """Fork the session at `body`'s fork point into a new session, in one transaction."""

    # not repeatable: a fork that landed would answer 409, or make a second fork
    async def fork(db: AsyncSession) -> SessionOut:
        await fork_store.read_one_snapshot(db)
        return await _fork(db, settings, tenant, external_id, body)

    return await database.write(fork)


async def branch_session(
    database: Database, settings: Settings, tenant: str, external_id: str, seq: int
) -> str:
    """Branch the session after `seq` (0: from its start), in one transaction: the session as
    it was keeps going under a new id (returned), and `external_id` names a fork of it at
    `seq`; from then on the id leads to the branch. A wire's resend that diverges from what
    is stored goes on this way, never overwriting or duplicating what was stored."""

    async def branch(db: AsyncSession) -> str:
        await fork_store.read_one_snapshot(db)
        session = await store.get_session(db, tenant, external_id, for_update=True)
        kept_as = branch_id(external_id)
        parent = await move_session(db, session, kept_as)
        if seq > 0:
            await _fork(db, settings, tenant, kept_as, ForkRequest(seq=seq, id=external_id))
        else:
            await fork_store.insert_fork(db, parent, external_id, 0)
        # the branch ends when the session would have: its expiry goes with it
        changes = {"expires_at": parent.expires_at}
        await store.update_session(db, tenant, external_id, changes)
        return kept_as

    for attempt in range(BRANCH_ATTEMPTS):
        try:
            return await database.write(branch)
        except DBAPIError as exc:
            # two branches of one session at once: the later one's snapshot is refused; or the
            # move of the old branch met a summary's save or a job's finish locking the same
            # rows in the other order, and PostgreSQL broke the deadlock
            raced = getattr(exc.orig, "sqlstate", None) in fork_store.RUN_AGAIN
            if not raced or attempt == BRANCH_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def branch_id(external_id: str) -> str:
    """The id an earlier branch keeps: the session's id and a random suffix, within 128."""
    return f"{external_id[:BRANCH_ID_ROOM]}:branch-{uuid.uuid4().hex[:12]}"


async def _fork(
    db: AsyncSession, settings: Settings, tenant: str, external_id: str, body: ForkRequest
) -> SessionOut:
    """The fork, in `db`'s transaction (begun with `read_one_snapshot`)."""
    parent = await store.get_session(db, tenant, external_id)
    fork_seq = await _fork_seq(db, parent, body)
    fork_id = body.id or new_fork_id(parent.external_id)
    fork = await fork_store.insert_fork(db, parent, fork_id, fork_seq)
    if fork is None:
        raise SessionExists(fork_id)
    await fork_store.copy_messages(db, parent.id, fork.id, fork_seq)
    live = 0
    if await fork_store.carry_summaries(db, parent.id, fork.id, fork_seq):
        await fork_store.repoint_superseded(db, parent.id, fork.id, fork_seq)
        await fork_store.link_carried(db, parent.id, fork.id, fork_seq)
        live = await fork_store.live_count(db, fork.id)
        # a hole of the parent's before the fork point is the fork's too
        await schedule_remake_if_owed(db, fork, settings.policy(fork.settings))
    return SessionOut.from_row(fork, live, settings.effective(fork.settings))


async def _fork_seq(db: AsyncSession, parent: SessionRow, body: ForkRequest) -> int:
    """The seq of the message `body` names in `parent`, checked: the session holds it, and it
    was not removed (a fork never ends on a tombstone)."""
    if body.message_id is not None:
        message = await store.message_by_id(db, parent.id, body.message_id)
        if message is None:
            raise MessageNotFound(
                f"message {body.message_id} not found in session {parent.external_id!r}"
            )
        if message.removed_at is not None:
            raise BadForkPoint(
                f"message_id: message {body.message_id} was removed; fork at a message the "
                "session still holds"
            )
        return message.seq
    seq = body.seq
    assert seq is not None, "ForkRequest gives one of message_id and seq"
    if seq > parent.last_seq:
        raise BadForkPoint(
            f"seq: {seq} is past the newest message of session {parent.external_id!r} "
            f"(last_seq {parent.last_seq})"
        )
    message = await fork_store.message_at(db, parent.id, seq)
    assert message is not None, "seqs 1..last_seq are contiguous"
    if message.removed_at is not None:
        raise BadForkPoint(
            f"seq: the message at seq {seq} was removed; fork at a message the session still holds"
        )
    return seq
