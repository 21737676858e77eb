"""Two session ids with one session key: the second is refused as taken, nothing stored.

The session key is a hash of the tenant and session id (`api.store.keys`), so two names can
share one (about n^2 / 2^64 among n sessions). A real collision cannot be found for a test, so
a session holding the key under another name is planted straight in the database; then every
way of creating the name answers 409 and stores nothing, and the planted session is intact.
"""

from __future__ import annotations

import httpx
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from api import store
from api.db.models import SESSIONS, Message
from api.store.keys import session_key
from tests.helpers import user


async def plant(db: AsyncSession, holder: str, wanted: str) -> int:
    """A session named `holder` under the key that `wanted` would have; its key."""
    key = session_key("default", wanted)
    session = await store.create_session(db, "default", holder, {}, {})
    await db.execute(SESSIONS.update().where(SESSIONS.c.id == session.id).values(id=key))
    await db.commit()
    return key


async def test_a_session_id_whose_key_is_taken_is_refused_everywhere(
    api: httpx.AsyncClient, app_db: AsyncSession, sid: str
) -> None:
    key = await plant(app_db, f"{sid}-holder", sid)
    parent = await api.post(f"/v1/sessions/{sid}-parent/messages", json={"messages": [user("a")]})
    assert parent.status_code == 201, parent.text

    appended = await api.post(f"/v1/sessions/{sid}/messages", json={"messages": [user("lost?")]})
    created = await api.post("/v1/sessions", json={"id": sid})
    forked = await api.post(f"/v1/sessions/{sid}-parent/fork", json={"seq": 1, "id": sid})

    assert (appended.status_code, created.status_code, forked.status_code) == (409, 409, 409)
    assert "taken" in appended.json()["detail"]
    assert (await api.get(f"/v1/sessions/{sid}")).status_code == 404
    holder = (await app_db.execute(select(SESSIONS).where(SESSIONS.c.id == key))).one()
    assert (holder.external_id, holder.last_seq) == (f"{sid}-holder", 0)
    stored = await app_db.scalar(
        select(func.count()).select_from(Message).where(Message.session_id == key)
    )
    named = await app_db.scalar(
        select(func.count()).select_from(SESSIONS).where(SESSIONS.c.external_id == sid)
    )
    assert (stored, named) == (0, 0)
