"""Real Precis servers for the client package's tests.

`uvicorn api.main:app` runs in a subprocess on a loopback port; a module changes its settings
by overriding `service_settings` (environment names, as the service reads them), and then gets
a server of its own on the run's migrated database of each backend (`database_url`). Starting
a server takes seconds, so the modules keeping `QUIET_SERVICE` share one (`quiet_service_url`)
and the SDK modules share `keyed_service` (`python -m api` with API keys and a fake model), for
the package's tests of each backend. Each shared server has a freshly migrated database of
that backend of its own: the background worker of a server outliving a module must never
claim the jobs of another module's server. Every test uses ids of its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from precis_client import AsyncPrecisClient, PrecisClient
from sqlalchemy.engine import make_url

from tests.client import keyed_server
from tests.conftest import migrated_database
from tests.support.live_server import served_app

QUIET_SERVICE = {"SUMMARY_WORKERS": "1", "DYNAMIC_SUMMARY_ENABLED": "false"}
"""No proactive summaries: what a test stores is what it reads back, until it calls `compact`."""


@pytest.fixture(scope="module")
def service_settings() -> dict[str, str]:
    """The module's server settings; override in a module to change them."""
    return dict(QUIET_SERVICE)


@pytest.fixture(scope="package")
async def quiet_service_url(
    database_url: str, tmp_path_factory: pytest.TempPathFactory, postgres_available: bool
) -> AsyncIterator[str]:
    """The base URL of a Precis server with `QUIET_SERVICE`, on a database of this backend of
    its own, shared by the modules that keep those settings."""
    backend = make_url(database_url).get_backend_name()
    folder = tmp_path_factory.mktemp("precis-quiet")
    async with migrated_database(backend, folder, postgres_available) as url:
        with served_app("api.main:app", url, **QUIET_SERVICE) as served:
            yield served


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


@pytest.fixture(scope="package")
async def keyed_service(
    database_url: str, tmp_path_factory: pytest.TempPathFactory, postgres_available: bool
) -> AsyncIterator[keyed_server.KeyedService]:
    """`python -m api` with API keys (`keyed_server.QUIET_KEYED_SERVICE`), on a database of this
    backend of its own, its model calls going to a fake on loopback; shared by the SDK
    modules, each of which starts from a reset fake (`KeyedService.fake_for_module`)."""
    backend = make_url(database_url).get_backend_name()
    folder = tmp_path_factory.mktemp("precis-keyed")
    async with migrated_database(backend, folder, postgres_available) as url:
        with keyed_server.keyed_service(url, folder / "server.log") as service:
            yield service


@pytest.fixture
def precis(service_url: str) -> Iterator[PrecisClient]:
    with PrecisClient(service_url) as client:
        yield client


@pytest.fixture
async def aprecis(service_url: str) -> AsyncIterator[AsyncPrecisClient]:
    async with AsyncPrecisClient(service_url) as client:
        yield client
