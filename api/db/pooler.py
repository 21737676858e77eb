"""PostgreSQL behind a transaction pooler (PgBouncer's `pool_mode = transaction`, Supavisor):
`DATABASE_URL=postgresql+asyncpg://...?pooler=transaction`.

Such a pooler lends a server connection for one transaction at a time, so nothing may live on
a server connection from one transaction to the next:
- no named prepared statements (a name taken on one server connection, then asked for, or
  taken again, on another): asyncpg's statement cache is off, and SQLAlchemy's dialect
  prepares unnamed statements;
- every statement runs inside a transaction, even a read (asyncpg prepares a statement and
  binds it in two exchanges, and between them the pooler may hand the client another server
  connection, which never saw the unnamed statement);
- no session state: the summarization lock is a lease on a row (`api.store.leases`), not an
  advisory lock held by a connection.
"""

from __future__ import annotations

import weakref
from typing import Any

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import Pool

POOLER_OPTION = "pooler"
"""The query option of `DATABASE_URL` naming the pooler in front of PostgreSQL."""

TRANSACTION = "transaction"
"""Its one value: a pooler that lends server connections per transaction."""

_POOLED: weakref.WeakSet[Pool] = weakref.WeakSet()
"""The connection pools of engines whose URL named a transaction pooler."""


def split_pooler(url: URL) -> tuple[URL, bool]:
    """`url` without the pooler option, and whether it named a transaction pooler.

    Raises ValueError for another value, or for the option on a database other than
    PostgreSQL."""
    value = url.query.get(POOLER_OPTION)
    if value is None:
        return url, False
    if value != TRANSACTION or url.get_backend_name() != "postgresql":
        raise ValueError(
            f"DATABASE_URL: {POOLER_OPTION}={value!r} is not supported; "
            f"{POOLER_OPTION}={TRANSACTION} names a transaction pooler in front of PostgreSQL"
        )
    return url.difference_update_query([POOLER_OPTION]), True


def pooler_connect_args() -> dict[str, Any]:
    """asyncpg's connection options behind a transaction pooler: no named statements."""
    return {
        "statement_cache_size": 0,  # asyncpg's own cache: the driver's hot path
        "prepared_statement_cache_size": 0,  # SQLAlchemy's adapter
        "prepared_statement_name_func": _unnamed,
    }


def _unnamed() -> str:
    """The unnamed statement: replaced by the next one, never left behind on a server."""
    return ""


def mark_pooled(engine: AsyncEngine) -> None:
    _POOLED.add(engine.sync_engine.pool)


def transaction_pooled(engine: AsyncEngine) -> bool:
    """Whether `engine` reaches PostgreSQL through a transaction pooler."""
    return engine.sync_engine.pool in _POOLED
