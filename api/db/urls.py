"""DATABASE_URL: the one rule for which URLs Precis takes, shared by the server, Alembic and the
operator tools (each builds its engine with `api.db.engine.create_engine`).

Precis speaks to PostgreSQL through asyncpg and to SQLite through aiosqlite only. The plain
forms people copy from elsewhere (`postgresql://`, Heroku's `postgres://`, `sqlite:///path`)
name the same databases, so they are read as those drivers; any other scheme would fail later
on a driver that is not installed (`No module named 'psycopg'`), so it is refused here.
"""

from __future__ import annotations

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from api.db.pooler import split_pooler

ASYNC_DRIVERS = {
    "postgresql+asyncpg": "postgresql+asyncpg",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "sqlite": "sqlite+aiosqlite",
}
"""Each accepted scheme and the SQLAlchemy driver it is served by."""

ACCEPTED_FORMS = (
    "postgresql+asyncpg://user@host/db (postgresql:// and postgres:// are read as it) or "
    "sqlite+aiosqlite:///path (sqlite:///path)"
)


def async_database_url(database_url: str) -> str:
    """`database_url` with its scheme named as the async driver Precis uses; the rest (user,
    hosts, query options such as `pooler=` or `host=a:p&host=b:p`) is kept as written.

    Raises ValueError, in one line naming DATABASE_URL and the accepted forms, for any other
    scheme. The URL itself is never quoted back: it may hold a password.
    """
    scheme, separator, rest = database_url.strip().partition("://")
    driver = ASYNC_DRIVERS.get(scheme.lower()) if separator else None
    if driver is None:
        said = f"the scheme {scheme + '://'!r}" if separator else "the value"
        raise ValueError(f"DATABASE_URL: {said} is not supported; use {ACCEPTED_FORMS}")
    return f"{driver}://{rest}"


def checked_database_url(database_url: str) -> str:
    """`async_database_url`, after checking that the rest reads as a URL and that its `pooler`
    option is one Precis knows (`api.db.pooler`); ValueError naming DATABASE_URL if not."""
    url = async_database_url(database_url)
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        # the parser's words may quote a piece of the password: never shown
        raise ValueError(
            "DATABASE_URL could not be read as a URL: check the host and port, and "
            "percent-encode `@ : / ? #` in the user name and password"
        ) from None
    split_pooler(parsed)
    return url
