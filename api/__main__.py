"""`python -m api --host H --port P`: check the settings and the database, then serve the app
with uvicorn.

A check that fails stops the start with a few lines on stderr (no traceback) and exit status
1: invalid settings, one line each, named by their environment variable; a database that
answers with its schema at another revision than this build's, or that refuses the connection
(no such database, a refused user), one line. A database that does not answer does not stop
the start (docs/operating.md, "Starting the server").
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

import uvicorn
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from api.db.engine import create_engine
from api.db.faults import describe_fault
from api.settings import InvalidSettings, get_settings
from api.store.readiness import database_state, schema_mismatch

LOG_FORMAT = "%(levelname)s:%(name)s: %(message)s"
"""The service's own log lines (warnings and errors) name their level and logger, like
uvicorn's: without a handler, Python's last resort prints the bare message."""

SCHEMA_CHECK_SECONDS = 5.0
"""How long the start waits for the database to tell its schema revision. One that has not
answered by then (down, restarting, unreachable) does not stop the start: requests wait for it
as for any restart, and /readyz answers 503 until it answers."""

INVALID_CATALOG_NAME = "3D000"
"""PostgreSQL's "database ... does not exist"."""

INVALID_AUTHORIZATION_CLASS = "28"
"""SQLSTATE class 28: the user, its password or pg_hba.conf refused the connection."""

logger = logging.getLogger("precis")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m api", description="Serve Precis.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(format=LOG_FORMAT, level=logging.WARNING)
    try:
        settings = get_settings()
    except InvalidSettings as exc:
        lines = "".join(f"\n  {problem}" for problem in exc.problems)
        sys.exit(f"python -m api: not started, invalid settings:{lines}")
    refusal = database_refusal(settings.database_url)
    if refusal is not None:
        sys.exit(f"python -m api: not started: {refusal}")
    # the workers of --workers read the same environment: the checks above hold for them too
    uvicorn.run("api.main:app", host=args.host, port=args.port, workers=args.workers)


def database_refusal(database_url: str) -> str | None:
    """Why this build cannot serve the database of `database_url`, in one line: its schema is
    at another revision (as /readyz would say), or it refused the connection. None: it can,
    or it did not answer."""
    url = make_url(database_url)
    missing_file = (
        url.get_backend_name() == "sqlite"
        and url.database not in (None, "", ":memory:")
        and not Path(str(url.database)).exists()
    )
    if missing_file:
        # connecting would create an empty file: leave that to the migration
        return f"{_with_how_to_start(schema_mismatch(None))} (no file {url.database} yet)"
    return asyncio.run(_answered_refusal(database_url))


async def _answered_refusal(database_url: str) -> str | None:
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        state = await asyncio.wait_for(database_state(engine), SCHEMA_CHECK_SECONDS)
    except Exception as exc:
        if _refused(exc):
            return f"the database refused the connection ({_first_line(exc)}): check DATABASE_URL"
        reason = "no answer" if isinstance(exc, TimeoutError) else describe_fault(exc)
        logger.warning(
            "the database did not answer (%s): serving anyway; /readyz answers 503 until it does",
            reason,
        )
        return None
    finally:
        await engine.dispose()
    mismatch = schema_mismatch(state.revision)
    return None if mismatch is None else _with_how_to_start(mismatch)


def _refused(exc: BaseException) -> bool:
    """The server answered, and refused for a reason a retry does not change: no such
    database, or the user or password refused."""
    for cause in (exc, getattr(exc, "orig", None), exc.__cause__):
        sqlstate = getattr(cause, "sqlstate", None)
        if isinstance(sqlstate, str) and (
            sqlstate == INVALID_CATALOG_NAME or sqlstate.startswith(INVALID_AUTHORIZATION_CLASS)
        ):
            return True
    return False


def _first_line(exc: BaseException) -> str:
    said = str(getattr(exc, "orig", None) or exc).strip()
    return said.splitlines()[0] if said else type(exc).__name__


def _with_how_to_start(mismatch: str | None) -> str:
    return f"{mismatch} (`make migrate`) with the same DATABASE_URL, then start again"


if __name__ == "__main__":
    main()
