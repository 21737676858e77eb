"""Real Precis servers for the client package's tests, one per database for the modules
that share its settings (starting one takes seconds).

`uvicorn api.main:app` runs in a subprocess on a loopback port against the run's migrated
database of each backend (`database_url`); a module changes its settings by overriding
`service_settings` (environment names, as the service reads them), and then gets a server of
its own. The SDK modules share `keyed_service`: `python -m api` with API keys and a fake model.
Every test uses ids of its own, and the database is the run's either way, so a test sees the
same data on a shared server as on one of its module's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from precis_client import AsyncPrecisClient, PrecisClient

from tests.client import keyed_server
from tests.support.live_server import served_app

QUIET_SERVICE = {"SUMMARY_WORKERS": "1", "DYNAMIC_SUMMARY_ENABLED": "false"}
"""No proactive summaries: what a test stores is what it reads back, until it calls `compact`."""


@pytest.fixture(scope="module")
def service_settings() -> dict[str, str]:
    """The module's server settings; override in a module to change them."""
    return dict(QUIET_SERVICE)


@pytest.fixture(scope="session")
def quiet_service_url(database_url: str) -> Iterator[str]:
    """The base URL of a Precis server with `QUIET_SERVICE` on this backend's database, shared
    by the modules that keep those settings."""
    with served_app("api.main:app", database_url, **QUIET_SERVICE) as url:
        yield url


@pytest.fixture(scope="module")
def service_url(
    request: pytest.FixtureRequest, database_url: str, service_settings: dict[str, str]
) -> Iterator[str]:
    """The base URL of a Precis server on this backend's database with the module's settings:
    the shared one when they are `QUIET_SERVICE`, else the module's own."""
    if service_settings == QUIET_SERVICE:
        yield request.getfixturevalue("quiet_service_url")
        return
    with served_app("api.main:app", database_url, **service_settings) as url:
        yield url


@pytest.fixture(scope="session")
def keyed_service(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[keyed_server.KeyedService]:
    """`python -m api` with API keys (`keyed_server.QUIET_KEYED_SERVICE`) on this backend's
    database, its model calls going to a fake on loopback; shared by the SDK modules, each
    of which starts from a reset fake (`KeyedService.fake_for_module`)."""
    log_path = tmp_path_factory.mktemp("precis-keyed") / "server.log"
    with keyed_server.keyed_service(database_url, log_path) as service:
        yield service


@pytest.fixture
def precis(service_url: str) -> Iterator[PrecisClient]:
    with PrecisClient(service_url) as client:
        yield client


@pytest.fixture
async def aprecis(service_url: str) -> AsyncIterator[AsyncPrecisClient]:
    async with AsyncPrecisClient(service_url) as client:
        yield client
