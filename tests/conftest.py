"""Database fixtures: every database test runs on SQLite and on PostgreSQL, migrated by Alembic.

PostgreSQL is found through PRECIS_TEST_POSTGRES_URL (default: postgres on 127.0.0.1:5432,
trust auth). Each run creates its own database and drops it at the end. With CI=true an
unreachable server fails the run; elsewhere the PostgreSQL tests are skipped.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from alembic import command
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.db.engine import create_engine, create_sessionmaker
from api.db.models import Base
from api.main import create_app
from api.settings import Settings
from tests.support import scratch_db
from tests.support.fake_llm import FakeLLM, running_fake_llm
from tests.support.pgbouncer import pgbouncer_binary, running_pgbouncer

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# as `summarizer.llm` loads litellm: test modules that import it first load it the same way
os.environ.setdefault("MAX_BASE64_LENGTH_FOR_LOGGING", "0")

POSTGRES_ADMIN_URL = os.environ.get(
    "PRECIS_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
)
SKIP_POSTGRES_REASON = (
    f"PostgreSQL not reachable at {make_url(POSTGRES_ADMIN_URL).render_as_string()}: "
    "start it (or set PRECIS_TEST_POSTGRES_URL) to run the PostgreSQL tests"
)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

THROUGH_POOLER = frozenset(
    {
        "test_append",
        "test_history",
        "test_summarization_service",
        "test_jobs",
        "test_repair",
        "test_removal",
        "test_replicas",
        "test_races",
        "test_summarization_lease",
        "test_conversations",
        "test_responses_api",
        "test_fork",
        "test_transfer",
    }
)
"""Test modules whose PostgreSQL tests run a third time, through the run's own PgBouncer in
transaction mode (`tests/support/pgbouncer.py`): appends, history, summarization and its lease,
jobs, repair, removal, replicas racing, and the OpenAI-compatible conversations and responses."""

SKIP_POOLER_REASON = (
    "pgbouncer is not installed: `apt-get install pgbouncer` (as root) to run the tests "
    "through a transaction pooler"
)


def _postgres_reachable() -> bool:
    async def probe() -> bool:
        engine = create_engine(POSTGRES_ADMIN_URL)
        try:
            async with engine.connect() as connection:
                await connection.execute(text("SELECT 1"))
            return True
        except Exception:
            return False
        finally:
            await engine.dispose()

    return asyncio.run(probe())


def pytest_configure(config: pytest.Config) -> None:
    reachable = _postgres_reachable()
    if not reachable and IN_CI:
        raise pytest.UsageError(f"CI=true but {SKIP_POSTGRES_REASON}")
    if pgbouncer_binary() is None and IN_CI:
        raise pytest.UsageError(f"CI=true but {SKIP_POOLER_REASON}")
    config.stash[_PG_KEY] = reachable


_PG_KEY = pytest.StashKey[bool]()
_MISSING_PG_KEY = pytest.StashKey[int]()
_MISSING_POOLER_KEY = pytest.StashKey[int]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out (deselect, not skip) what cannot run here.

    Tests marked `postgresql_only` are not run for SQLite; the PgBouncer variants run only
    for the modules of `THROUGH_POOLER`; without a reachable PostgreSQL (or an installed
    PgBouncer) those variants are left out, and the run ends with one line saying so.
    """
    postgres_reachable = config.stash[_PG_KEY]
    pooler_installed = pgbouncer_binary() is not None
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    missing_postgres = missing_pooler = 0
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params.values() if callspec is not None else ()
        backends = {value for value in params if isinstance(value, str)}
        on_sqlite = "sqlite" in backends
        through_pooler = "pgbouncer" in backends
        not_for_this_backend = (on_sqlite and item.get_closest_marker("postgresql_only")) or (
            through_pooler and item.path.stem not in THROUGH_POOLER
        )
        if not_for_this_backend:
            dropped.append(item)
        elif ("postgresql" in backends or through_pooler) and not postgres_reachable:
            dropped.append(item)
            missing_postgres += 1
        elif through_pooler and not pooler_installed:
            dropped.append(item)
            missing_pooler += 1
        else:
            kept.append(item)
    config.stash[_MISSING_PG_KEY] = missing_postgres
    config.stash[_MISSING_POOLER_KEY] = missing_pooler
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """One line per kind of test left out. Under pytest-xdist the workers collect, so the
    controller knows only whether PostgreSQL and PgBouncer are there, not how many tests."""
    if not config.stash[_PG_KEY]:
        left_out = (_MISSING_PG_KEY, f"PostgreSQL tests not run: {SKIP_POSTGRES_REASON}")
    elif pgbouncer_binary() is None:
        left_out = (_MISSING_POOLER_KEY, f"tests through PgBouncer not run: {SKIP_POOLER_REASON}")
    else:
        return
    key, line = left_out
    count = config.stash.get(key, None)
    terminalreporter.write_line(line if count is None else f"{count} {line}")


async def create_postgres_database() -> str:
    return await scratch_db.create_postgres_database(POSTGRES_ADMIN_URL, "precis_test")


async def drop_postgres_database(url: str) -> None:
    await scratch_db.drop_postgres_database(POSTGRES_ADMIN_URL, url)


async def run_alembic(database_url: str, *args: Any, verb: str = "upgrade") -> None:
    """Run an Alembic command in a thread: env.py starts its own event loop."""
    await asyncio.to_thread(getattr(command, verb), scratch_db.alembic_config(database_url), *args)


@pytest.fixture(scope="session")
def postgres_available(pytestconfig: pytest.Config) -> bool:
    return pytestconfig.stash[_PG_KEY]


@pytest.fixture
async def empty_database_url(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_available: bool
) -> AsyncIterator[str]:
    """A brand-new, unmigrated database of the kind named by the `backend` parameter."""
    backend = request.param if hasattr(request, "param") else "sqlite"
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}"
        return
    if not postgres_available:
        pytest.skip(SKIP_POSTGRES_REASON)
    url = await create_postgres_database()
    try:
        yield url
    finally:
        await drop_postgres_database(url)


@asynccontextmanager
async def migrated_database(
    backend: str, folder: Path, postgres_available: bool
) -> AsyncIterator[str]:
    """A new database of `backend`, migrated to head; a PostgreSQL one is dropped afterwards."""
    if backend == "sqlite":
        url = f"sqlite+aiosqlite:///{folder / 'precis.db'}"
        await run_alembic(url, "head")
        yield url
        return
    if not postgres_available:
        pytest.skip(SKIP_POSTGRES_REASON)
    url = await create_postgres_database()
    try:
        await run_alembic(url, "head")
        yield url
    finally:
        await drop_postgres_database(url)


@pytest.fixture(scope="session")
def pgbouncer_port(postgres_available: bool) -> Iterator[int]:
    """The run's PgBouncer in transaction mode, in front of the test server (one per run)."""
    if not postgres_available:
        pytest.skip(SKIP_POSTGRES_REASON)
    upstream = make_url(POSTGRES_ADMIN_URL)
    with running_pgbouncer(
        upstream.host or "127.0.0.1", upstream.port or 5432, upstream.username or "postgres"
    ) as port:
        yield port


def through_pgbouncer(url: str, port: int) -> str:
    """`url`'s database reached through the run's PgBouncer, as Precis is told of a pooler."""
    pooled = make_url(url).set(host="127.0.0.1", port=port)
    return pooled.update_query_dict({"pooler": "transaction"}).render_as_string(hide_password=False)


@pytest.fixture(scope="session", params=["sqlite", "postgresql", "pgbouncer"])
async def database_url(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    postgres_available: bool,
) -> AsyncIterator[str]:
    """One migrated database per backend for the whole run; `pgbouncer`: a PostgreSQL
    database of its own, migrated directly, reached through the run's PgBouncer."""
    folder = tmp_path_factory.mktemp("sqlite")
    backend = "postgresql" if request.param == "pgbouncer" else request.param
    async with migrated_database(backend, folder, postgres_available) as url:
        if request.param == "pgbouncer":
            yield through_pgbouncer(url, request.getfixturevalue("pgbouncer_port"))
        else:
            yield url


@pytest.fixture
def backend(database_url: str) -> str:
    """`sqlite` or `postgresql`."""
    return make_url(database_url).get_backend_name()


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine on the shared test database; every table is emptied after the test."""
    engine = create_engine(database_url)
    try:
        yield engine
    finally:
        await _empty_tables(engine)
        await engine.dispose()


async def _empty_tables(engine: AsyncEngine) -> None:
    tables = [table.name for table in reversed(Base.metadata.sorted_tables)]
    async with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            await connection.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
        else:
            for table in tables:
                await connection.execute(text(f"DELETE FROM {table}"))


@pytest.fixture
def sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return create_sessionmaker(engine)


@pytest.fixture
async def db(sessionmaker: async_sessionmaker[AsyncSession]) -> AsyncIterator[AsyncSession]:
    """A store-level session; tests commit what they want others to see."""
    async with sessionmaker() as session:
        yield session


def make_settings(database_url: str, **overrides: Any) -> Settings:
    """Settings for a test app: no .env file, the test database, explicit overrides."""
    return Settings(_env_file=None, database_url=database_url, **overrides)


@pytest.fixture
def settings_overrides(request: pytest.FixtureRequest) -> dict[str, Any]:
    """App settings for `client`: parametrize indirectly, or override in a test module."""
    return dict(getattr(request, "param", {}))


QUIET: dict[str, Any] = {"dynamic_summary_enabled": False, "summary_workers": 0}
"""No background worker and no summarization: for tests of the service core."""


@pytest.fixture(scope="module")
def module_settings() -> dict[str, Any]:
    """Settings of the module's shared `app`; override in a module to change them."""
    return dict(QUIET)


@pytest.fixture(scope="module")
async def app(database_url: str, module_settings: dict[str, Any]) -> AsyncIterator[FastAPI]:
    """One app per test module and backend, shared by tests that each use their own ids.

    Cheaper than a fresh app, engine and table truncation per test; its sessions (and with
    them everything else) are deleted at the end of the module.
    """
    app = create_app(make_settings(database_url, **module_settings))
    async with app.router.lifespan_context(app):
        yield app
        async with app.state.engine.begin() as connection:
            await connection.execute(text("DELETE FROM sessions"))
            # a queued background response would run in the next module's app
            await connection.execute(text("DELETE FROM background_responses"))


@pytest.fixture(scope="module")
async def api(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of the module's shared `app`."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield http


@pytest.fixture
def app_sessionmaker(app: FastAPI) -> async_sessionmaker[AsyncSession]:
    """The shared app's sessionmaker, for store-level steps beside its HTTP calls."""
    maker: async_sessionmaker[AsyncSession] = app.state.sessionmaker
    return maker


@pytest.fixture
async def app_db(app_sessionmaker: async_sessionmaker[AsyncSession]) -> AsyncIterator[AsyncSession]:
    """A store-level session on the shared app's database."""
    async with app_sessionmaker() as session:
        yield session


@pytest.fixture
def sid() -> str:
    """This test's own session id."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    """A fresh fake OpenAI-compatible server on a free loopback port, stopped after the test."""
    with running_fake_llm() as server:
        yield server


@pytest.fixture
async def client(
    engine: AsyncEngine, database_url: str, settings_overrides: dict[str, Any]
) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client talking to the app through ASGI, with its lifespan running."""
    app = create_app(make_settings(database_url, **settings_overrides))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://localhost"
        ) as http,
    ):
        yield http
