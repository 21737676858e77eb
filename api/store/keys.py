"""Keys: the session key a session's name gives, and the row ids SQLite hands out.

Every table holding a session's data is keyed by the session key (docs/design.md section 6),
so Citus can distribute them all by it and route every statement about one session to one
shard. The key is a function of the session's name, `(tenant, external_id)`: a statement
finds a session by its key without a lookup, and no unique constraint leaves the key out (two
sessions of one name would have one key, which the primary key refuses).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sqlalchemy import ColumnElement, Table, func, select

KEY_BITS = 63
"""Keys are positive BIGINTs: the first 63 bits of the name's BLAKE2b digest."""


def session_key(tenant: str, external_id: str) -> int:
    """The session key of a tenant's session id. Never change it: every stored session is
    keyed by it (migration 0013 keyed the sessions stored before it).

    Two names share a key with a chance of about n^2 / 2^64 among n sessions (one in 18
    million with a million sessions); the second is then refused as if its id were taken (409
    on a create, an append, an import or a fork that would create it)."""
    name = json.dumps([tenant, external_id]).encode()
    digest = hashlib.blake2b(name, digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - KEY_BITS) or 1


def new_id(dialect_name: str, table: Table, nth: ColumnElement[int] | int = 1) -> dict[str, Any]:
    """The `id` value of a row an INSERT adds to `table` (messages, session_summaries): none on
    PostgreSQL, whose identity column hands ids out; on SQLite, which has no sequences, the
    `nth` after the largest id stored, read by the INSERT itself under the write lock it holds
    (an identity needs the whole primary key to be the id, and here it includes the session
    key). Ids grow with every insert on both, and are unique across sessions."""
    if dialect_name == "postgresql":
        return {}
    largest = select(func.coalesce(func.max(table.c.id), 0)).scalar_subquery()
    return {"id": largest + nth}
