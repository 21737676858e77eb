"""Lost connections: which database errors mean the connection was lost, not that the
statement failed (`connection_lost` is the predicate the rest of the service asks).

PostgreSQL connections die in production (failovers, poolers recycling, `idle_session_timeout`,
an operator's `pg_terminate_backend`). Such an error says nothing about the statement: the
same statement on a fresh connection would succeed. SQLAlchemy's asyncpg dialect only calls
an error a disconnect once the socket is closed, which lags the server's "terminating
connection" message; `mark_lost_connections` makes every such error a disconnect, so the
pool throws the connection (and its stale siblings) away instead of handing it out again.

A failover adds one more: a connection that reached a server that does not take writes (a
standby still in recovery, the old writer a DNS name still points at, a multi-host URL with
`target_session_attrs=any`) has its writes refused as read-only. The statement is not wrong
either: on the primary it would succeed. It counts as a lost connection too, so the pool
drops the connection and the work runs again on a fresh one, which finds the promoted
primary once there is one (`docs/reliability.md`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import event
from sqlalchemy.exc import DBAPIError, InvalidRequestError
from sqlalchemy.ext.asyncio import AsyncEngine

SHUTDOWN_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})
"""admin_shutdown (pg_terminate_backend, smart shutdown), crash_shutdown, cannot_connect_now."""

CONNECTION_SQLSTATE_CLASS = "08"
"""SQLSTATE class 08, connection exception (08003: the connection does not exist, ...)."""

READ_ONLY_SQLSTATE = "25006"
"""read_only_sql_transaction: "cannot execute INSERT in a read-only transaction", as a standby
(or a primary demoted to one) answers a write."""

ASYNCPG_CLOSED_PHRASES = ("connection is closed", "another operation is in progress")
"""asyncpg `InterfaceError`s about the connection's state, not the statement."""


def _causes(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        # `raise ... from None` says the exception it was raised under is not its cause (a
        # model call's refused connection is not the database's)
        context = None if current.__suppress_context__ else current.__context__
        current = current.__cause__ or context


def driver_error_means_connection_lost(error: BaseException) -> bool:
    """`error` (a driver error, or anything wrapping one) says the connection was lost: what
    the driver's own error says, before SQLAlchemy marks it (`connection_lost` asks both)."""
    for cause in _causes(error):
        sqlstate = getattr(cause, "sqlstate", None)
        if isinstance(sqlstate, str) and (
            sqlstate.startswith(CONNECTION_SQLSTATE_CLASS)
            or sqlstate in SHUTDOWN_SQLSTATES
            or sqlstate == READ_ONLY_SQLSTATE
        ):
            return True
        if isinstance(cause, ConnectionError):  # reset, refused, aborted, broken pipe
            return True
        if type(cause).__module__.startswith("asyncpg") and _asyncpg_state_error(cause):
            return True
    return False


def refused_as_read_only(error: BaseException) -> bool:
    """The server refused the statement because it takes no writes: it never ran."""
    return any(getattr(cause, "sqlstate", None) == READ_ONLY_SQLSTATE for cause in _causes(error))


def _asyncpg_state_error(cause: BaseException) -> bool:
    """A protocol-state error: the connection received the server's goodbye while idle and
    cannot run anything any more ("cannot switch to state 12; another operation (2) ...")."""
    from asyncpg.exceptions import InterfaceError, InternalClientError

    if isinstance(cause, InternalClientError):
        return True
    return isinstance(cause, InterfaceError) and any(
        phrase in str(cause) for phrase in ASYNCPG_CLOSED_PHRASES
    )


POOL_GAVE_UP = "This connection is closed"
"""What SQLAlchemy's pool raises when the connections it tried at one checkout were all dead
(a stale one, then a fresh one lost at once): no statement ran."""


def connection_lost(exc: BaseException) -> bool:
    """An error raised because the connection died (or none could be made): SQLAlchemy's, or
    the driver's own on the hot reads' fast path (`api.db.driver`)."""
    if isinstance(exc, DBAPIError):
        return exc.connection_invalidated or driver_error_means_connection_lost(exc)
    if isinstance(exc, InvalidRequestError):
        return str(exc).startswith(POOL_GAVE_UP)
    # the driver could not even connect, or a statement run on the driver itself lost it
    return isinstance(exc, OSError) or driver_error_means_connection_lost(exc)


def mark_lost_connections(engine: AsyncEngine) -> None:
    """Treat every lost connection as a disconnect: the connection is invalidated (with the
    pool's other connections of the same age), and the error says `connection_invalidated`."""

    @event.listens_for(engine.sync_engine, "handle_error")
    def _lost_connection(context: Any) -> None:
        if not context.is_disconnect and driver_error_means_connection_lost(
            context.original_exception
        ):
            context.is_disconnect = True


def describe_fault(exc: BaseException) -> str:
    """One line naming the driver's error, without SQLAlchemy's SQL and link lines (and so
    without any statement parameter)."""
    cause = getattr(exc, "orig", None) or exc
    first_line = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
    return f"{type(cause).__name__}: {first_line}"
