"""The seeded sessions of `tests/scripts/builders.py` as fixtures, for the operator tools' tests."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from tests.scripts.builders import Removed, Seeded, removal_session, seed_session


@pytest.fixture
async def seeded(db: AsyncSession) -> Seeded:
    """Ten messages, two level-0 summaries and their roll-up, written through the store."""
    return await seed_session(db)


@pytest.fixture
async def removed(client: httpx.AsyncClient, sid: str) -> Removed:
    """The session of `removal_session`, built through the HTTP API of `client`."""
    return await removal_session(client, sid)
