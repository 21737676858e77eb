"""Background responses: the worker's runs of `POST /v1/responses` with `background: true`.

A background response is queued as a row (`api.store.background`) and answered `queued` at
once; a worker claims it (`in_progress`, under a lease it renews every HEARTBEAT_SECONDS),
runs its turn as a foreground request runs it (`api.compat.responses`), and stores the turn
only after taking the right to (`storing`, one conditional UPDATE that a cancel cannot pass):
a cancelled or deleted response stores nothing. The heartbeat that finds the response
cancelled or deleted stops its run at once; a cancel on the replica running it stops it
sooner. Rows live in the database, so a restart or a killed worker loses none: a run whose
lease ran out is run again from the start (nothing of it was stored), at most MAX_ATTEMPTS
times. Runs on the replicas that run the summarization worker (`SUMMARY_WORKERS` > 0),
BACKGROUND_RESPONSE_WORKERS at once; a response queued on such a replica with a run free is
queued claimed and run there at once (`take_slot`, `run_claimed`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import suppress
from datetime import timedelta
from functools import partial
from typing import Any

from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from api.compat import background
from api.compat.responses import BackgroundRun, Responder, StoringRefused
from api.db.faults import describe_fault
from api.db.transactions import (
    RetryPolicy,
    connection_lost_or_commit_unknown,
    retry_budget,
    retrying,
)
from api.errors import (
    ConcurrentChange,
    PrecisError,
    ServiceUnavailable,
    SummarizationDeferred,
    SummarizationInProgress,
)
from api.openai_errors import OpenAIError, snake_case
from api.schemas.responses import ResponseRequest
from api.store.background import (
    BackgroundRow,
    claim_background,
    fail_background,
    finish_background,
    release_background,
    renew_background,
    start_storing,
)

logger = logging.getLogger("precis.background")

LEASE = timedelta(seconds=30)
"""How long a claim lasts unrenewed: a killed worker's response is run again after this."""

HEARTBEAT_SECONDS = 1.0
"""How often a run renews its lease, and so how soon a cancel on another replica stops it."""

POLL_SECONDS = 1.0
"""Idle, the worker looks for queued responses this often (a queue on this replica wakes it)."""

MAX_ATTEMPTS = 10
"""Runs of one response at most (a run cut short by a stop, a dead worker or a passing fault
counts): one run this often fails."""

TRANSIENT_DELAY = timedelta(seconds=2)
"""How long a run that met a passing fault (the database unavailable, a summarization of its
session under way) waits in the queue before it is run again."""


class BackgroundResponses:
    """Claims queued background responses and runs them, `concurrency` at once."""

    def __init__(self, responder: Responder, concurrency: int) -> None:
        self._responder = responder
        self._database = responder.database
        self._slots = asyncio.Semaphore(concurrency)
        self._wake = asyncio.Event()
        self._stopping = False
        self._loop_task: asyncio.Task[None] | None = None
        self._running: dict[Claim, asyncio.Task[None]] = {}
        self._claims: dict[Claim, BackgroundRow] = {}
        self._storing: set[Claim] = set()
        """Runs that took the right to store their turn: never cancelled."""
        self._retries = RetryPolicy(responder.settings.database_retry_seconds)
        self._version = 0
        self._changed = asyncio.Event()
        self._stored_bodies: dict[str, str] = {}
        """The responses runs here stored, as stored, until their runs end."""
        self.lease = LEASE

    @property
    def version(self) -> int:
        """Counts the responses a run on this replica claimed, stored or ended."""
        return self._version

    async def changed_since(self, version: int, seconds: float) -> None:
        """Once a run on this replica has claimed, stored or ended a response since `version` was
        read, or after `seconds`: a follower of a response then reads it again
        (`api.compat.background.follow`)."""
        if self._version == version:
            with suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), seconds)

    def stored_body(self, response_id: str) -> dict[str, Any] | None:
        """The response a run here stored, as `GET /v1/responses/{id}` answers it, while its
        run ends; None otherwise (read it from the database)."""
        stored = self._stored_bodies.get(response_id)
        return None if stored is None else json.loads(stored)

    def _told_stored(self, response_id: str, response: dict[str, Any]) -> None:
        self._stored_bodies[response_id] = json.dumps(response)
        self._announce()

    def _announce(self) -> None:
        self._version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    def start(self) -> None:
        self._stopping = False
        self._loop_task = asyncio.create_task(self._loop())

    def wake(self) -> None:
        """A response was queued and committed: look now instead of at the next poll."""
        self._wake.set()

    def stop_run(self, response_id: str) -> None:
        """The response was cancelled or deleted: stop its run here, if it runs here and has
        not begun storing (then it stores nothing; the heartbeat would stop it too)."""
        for claim, task in list(self._running.items()):
            if claim[0] == response_id and claim not in self._storing:
                task.cancel()

    async def stop(self) -> None:
        """Stop claiming; runs not yet storing go back to the queue, the others end."""
        self._stopping = True
        self._wake.set()
        running = list(self._running.items())
        for claim, task in running:
            if claim not in self._storing:
                task.cancel()
        await asyncio.gather(*(task for _, task in running), return_exceptions=True)
        for claim, task in running:
            if task.cancelled() and claim in self._claims:
                # cut short before its first step, its own release never ran (a second
                # release matches nothing)
                await self._settle(release_background, self._claims[claim])
        if self._loop_task is not None:
            await asyncio.gather(self._loop_task, return_exceptions=True)
            self._loop_task = None

    async def _loop(self) -> None:
        while True:
            await self._slots.acquire()
            if self._stopping:
                self._slots.release()
                return
            claim: BackgroundRow | None = None
            self._wake.clear()  # before the claim: a response queued during it wakes the wait
            try:
                with retry_budget(self._retries):
                    claim = await retrying(self._claim, "claiming a background response", "write")
            except Exception as exc:
                _log_failure("could not claim a background response", exc)
            if claim is None:
                self._slots.release()
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=POLL_SECONDS)
                continue
            if not await self.run_claimed(claim):
                return

    async def take_slot(self) -> bool:
        """Take a free run slot at once, if this replica runs background responses and one is
        free: the caller queues its response claimed for `lease` and runs it here
        (`run_claimed`), or gives the slot back (`give_back_slot`). Saves the worker's claim
        and the wait for it."""
        if self._loop_task is None or self._stopping or self._slots.locked():
            return False
        return await self._slots.acquire()  # free: taken without waiting

    def give_back_slot(self) -> None:
        self._slots.release()

    async def run_claimed(self, claim: BackgroundRow) -> bool:
        """Run `claim` in a slot already taken (by the worker's loop, or `take_slot`); False
        when the replica began to stop meanwhile: the response goes back to the queue and the
        slot is given back."""
        if self._stopping:
            await self._settle(release_background, claim)
            self._slots.release()
            return False
        self._announce()
        task = asyncio.create_task(self._run(claim))
        self._running[_key(claim)] = task
        self._claims[_key(claim)] = claim
        task.add_done_callback(partial(self._done, claim))
        return True

    def _done(self, claim: BackgroundRow, task: asyncio.Task[None]) -> None:
        if self._running.get(_key(claim)) is task:
            del self._running[_key(claim)]
            if not self._stopping:
                self._claims.pop(_key(claim), None)
        self._storing.discard(_key(claim))
        self._stored_bodies.pop(claim.id, None)
        self._slots.release()
        self._announce()

    async def _claim(self) -> BackgroundRow | None:
        async with self._database.transaction() as db:
            return await claim_background(db, LEASE)

    async def _run(self, claim: BackgroundRow) -> None:
        with retry_budget(self._retries):
            try:
                if claim.status == "storing":
                    # its worker stopped while storing: whether the turn landed is unknown
                    await self._fail(claim, 500, "stopped", STOPPED_WHILE_STORING)
                    return
                if claim.attempts > MAX_ATTEMPTS or claim.request is None:
                    await self._fail(claim, 500, "stopped", STOPPED_TOO_OFTEN)
                    await self._discard_branch(claim)
                    return
                await self._respond(claim)
            except asyncio.CancelledError:
                if self._stopping and _key(claim) not in self._storing:
                    await self._settle(release_background, claim)  # run again after a restart
                if _key(claim) not in self._storing:
                    await self._discard_branch(claim)  # only once no run of it can store
                raise
            except Exception as exc:  # a request that no longer reads: no run can answer it
                await self._fail(claim, *_described(exc))

    async def _respond(self, claim: BackgroundRow) -> None:
        assert claim.request is not None
        request = ResponseRequest.model_validate_json(claim.request)
        key = _key(claim)
        taken = False

        async def take_the_right_to_store() -> None:
            nonlocal taken
            self._storing.add(key)  # from here on, neither a stop nor a cancel cuts it short
            if not await start_storing(self._database, claim):
                self._storing.discard(key)
                raise StoringRefused(claim.id)
            taken = True

        queued_at = int(json.loads(claim.body).get("created_at") or time.time())
        told = partial(self._told_stored, claim.id)
        run = BackgroundRun(claim.id, queued_at, take_the_right_to_store, told)
        heartbeat = asyncio.create_task(self._heartbeat(claim, asyncio.current_task()))
        failure: Exception | None = None
        try:
            answer, _ = await self._responder.respond(claim.tenant, request, run)
        except Exception as exc:
            failure = exc
        finally:
            # stopped before the outcome is settled: a renewal meanwhile would read it as lost
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)
        if failure is None and taken:
            try:
                await finish_background(self._database, claim)
            except Exception as exc:  # the row stays `storing`: a later claim fails it
                _log_failure(f"could not end background response {claim.id}", exc)
        elif failure is None:  # the model failed it (`status: failed`): kept as answered
            await self._settle(partial(fail_background, body=answer), claim)
            await self._discard_branch(claim)
        elif taken and isinstance(failure, ConcurrentChange):
            # the append stored nothing and says so: run again (cancellable meanwhile)
            logger.warning(
                "background response %s met a concurrent change; queued again in %g s: %s",
                claim.id,
                TRANSIENT_DELAY.total_seconds(),
                failure,
            )
            self._storing.discard(key)
            release = partial(release_background, delay=TRANSIENT_DELAY, storing_too=True)
            await self._settle(release, claim)
        elif taken:
            logger.error("storing background response %s failed", claim.id, exc_info=failure)
            await self._fail(claim, 500, "storing_failed", STORING_FAILED)
        elif isinstance(failure, StoringRefused):
            await self._discard_branch(claim)  # cancelled or deleted: nothing stored
        elif _transient(failure):
            logger.warning(
                "background response %s met a passing fault; queued again in %g s: %s",
                claim.id,
                TRANSIENT_DELAY.total_seconds(),
                describe_fault(failure),
            )
            self._storing.discard(key)
            await self._settle(partial(release_background, delay=TRANSIENT_DELAY), claim)
        else:
            self._storing.discard(key)
            await self._fail(claim, *_described(failure))
            await self._discard_branch(claim)

    async def _discard_branch(self, claim: BackgroundRow) -> None:
        """Delete the fork the run's `previous_response_id` made, if it is left over
        (`api.compat.background.discard_branch` checks, in its transaction, that no run of
        the response can store in it any more)."""
        try:
            await background.discard_branch(self._database, claim.tenant, claim.id)
        except Exception as exc:
            _log_failure(f"could not delete the branch of background response {claim.id}", exc)

    async def _fail(self, claim: BackgroundRow, status: int, what: str, message: str) -> None:
        """Fail the response with the error a foreground request would have answered: its
        `code` one of OpenAI's response error codes, its message led by Precis's own code."""
        body: dict[str, Any] = json.loads(claim.body)
        code = FAILURE_CODES.get(status, "server_error")
        body.update(status="failed", error={"code": code, "message": f"{what}: {message}"})
        await self._settle(partial(fail_background, body=body), claim)

    async def _settle(self, step: Any, claim: BackgroundRow) -> None:
        """`step(db, claim)` (finish, release or fail the claim) in a transaction, run again
        while its connection is lost; if it cannot be, the lease runs out and the response is
        claimed again."""

        async def settle() -> None:
            async with self._database.transaction() as db:
                await step(db, claim)

        try:
            await retrying(settle, f"ending background response {claim.id}", "write")
        except Exception as exc:
            _log_failure(f"could not end background response {claim.id}", exc)

    async def _heartbeat(self, claim: BackgroundRow, run: asyncio.Task[Any] | None) -> None:
        """Renew the lease every HEARTBEAT_SECONDS; stop the run once the response is no
        longer this claim's (cancelled, deleted), unless it is storing its turn."""
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            try:
                async with self._database.transaction() as db:
                    held = await renew_background(db, claim, LEASE)
            except Exception as exc:
                _log_failure(f"could not renew background response {claim.id}", exc)
                continue
            if not held and run is not None and _key(claim) not in self._storing:
                run.cancel()
                return


Claim = tuple[str, int]
"""A claim of a response: its id and the attempt (a later claim of it is another)."""


def _key(claim: BackgroundRow) -> Claim:
    return (claim.id, claim.attempts)


def _transient(exc: Exception) -> bool:
    """A fault a foreground request would answer 503 or 409 for (a retry would do): the run
    goes back to the queue."""
    return connection_lost_or_commit_unknown(exc) or isinstance(
        exc,
        (
            PoolTimeout,
            OSError,
            OperationalError,
            InterfaceError,
            ServiceUnavailable,
            SummarizationInProgress,
            SummarizationDeferred,
        ),
    )


def _described(exc: Exception) -> tuple[int, str, str]:
    """The status, Precis's code and the message of the error a foreground request would
    have answered."""
    if isinstance(exc, OpenAIError):
        return exc.status_code, exc.code or exc.type, exc.message
    if isinstance(exc, PrecisError):
        return exc.status_code, snake_case(type(exc).__name__), exc.detail
    logger.error("background run failed", exc_info=exc)
    return 500, "internal_error", f"{type(exc).__name__}: {exc}"


FAILURE_CODES = {400: "invalid_prompt", 413: "invalid_prompt", 429: "rate_limit_exceeded"}
"""OpenAI's response error code for the status a foreground request would have answered;
any other is `server_error`."""

STOPPED_WHILE_STORING = (
    "the server stopped while storing this response's turn: the conversation may hold it"
)
STOPPED_TOO_OFTEN = f"the server stopped while running this response {MAX_ATTEMPTS} times"
STORING_FAILED = "storing this response's turn failed: the conversation may hold it"


def _log_failure(what: str, exc: BaseException) -> None:
    if connection_lost_or_commit_unknown(exc):
        logger.warning("%s: %s", what, describe_fault(exc))
    else:
        logger.error("%s", what, exc_info=exc)
