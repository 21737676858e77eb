"""A real Precis server per test module and database, for the client package's tests.

`uvicorn api.main:app` runs in a subprocess on a loopback port against the run's migrated
database of each backend (`database_url`); a module changes its settings by overriding
`service_settings` (environment names, as the service reads them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from precis_client import AsyncPrecisClient, PrecisClient

from tests.support.live_server import served_app

QUIET_SERVICE = {"SUMMARY_WORKERS": "1", "DYNAMIC_SUMMARY_ENABLED": "false"}
"""No proactive summaries: what a test stores is what it reads back, until it calls `compact`."""


@pytest.fixture(scope="module")
def service_settings() -> dict[str, str]:
    """The module's server settings; override in a module to change them."""
    return dict(QUIET_SERVICE)


@pytest.fixture(scope="module")
def service_url(database_url: str, service_settings: dict[str, str]) -> Iterator[str]:
    """The base URL of a Precis server on this backend's database, for the whole module."""
    with served_app("api.main:app", database_url, **service_settings) as url:
        yield url


@pytest.fixture
def precis(service_url: str) -> Iterator[PrecisClient]:
    with PrecisClient(service_url) as client:
        yield client


@pytest.fixture
async def aprecis(service_url: str) -> AsyncIterator[AsyncPrecisClient]:
    async with AsyncPrecisClient(service_url) as client:
        yield client
