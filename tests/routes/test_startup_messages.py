"""`python -m api` refuses to start, in a few lines on stderr and with exit status 1, when it
could not serve: invalid settings (one line each, named by their environment variable), a
DATABASE_URL of a driver Precis does not speak, a database whose schema is not at this build's
revision, or one that refused the connection. The plain URL forms (`postgresql://`,
`postgres://`, `sqlite:///`) serve as asyncpg and aiosqlite, their options kept.

Each test runs the real server process (docs/operating.md, "Starting the server").
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from api.db.models import SCHEMA_REVISION
from api.settings import Settings
from tests.conftest import (
    POSTGRES_ADMIN_URL,
    SKIP_POSTGRES_REASON,
    run_alembic,
    through_pgbouncer,
)
from tests.helpers import user
from tests.support.live_server import REPO_ROOT, START_TIMEOUT_SECONDS, LiveServer, free_port

both_backends = pytest.mark.parametrize(
    "empty_database_url", ["sqlite", "postgresql"], indirect=True
)


@dataclass(frozen=True)
class Refusal:
    status: int
    lines: list[str]
    """What the process wrote to stderr, line by line."""

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def refused_start(folder: Path, database_url: str, **env: str) -> Refusal:
    """Run `python -m api` with `env` until it exits; fail the test if it serves instead."""
    log = folder / f"refused-{uuid.uuid4().hex[:8]}.log"
    port = free_port()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "api", "--host", "127.0.0.1", "--port", str(port)],
            cwd=folder,  # no .env of the repository's is read
            env=server_env(database_url, env),
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while process.poll() is None:
            assert time.monotonic() < deadline, "the server neither served nor exited"
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=0.5)
            except httpx.HTTPError:
                time.sleep(0.1)
                continue
            pytest.fail(f"the server started instead of refusing:\n{log.read_text()[-3000:]}")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return Refusal(process.returncode, log.read_text().splitlines())


def server_env(database_url: str, env: Mapping[str, str]) -> dict[str, str]:
    """The test's environment without any setting of the shell's, then the test's own."""
    inherited = {
        name: value
        for name, value in os.environ.items()
        if name.lower() not in Settings.model_fields
    }
    return {
        **inherited,
        "PYTHONPATH": str(REPO_ROOT),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "DATABASE_URL": database_url,
        **env,
    }


def assert_short(refusal: Refusal, lines: int) -> None:
    """Exit status 1, `lines` lines, no traceback and none of pydantic's codes or links."""
    assert refusal.status == 1, refusal.text
    assert len(refusal.lines) == lines, refusal.text
    assert "Traceback" not in refusal.text
    assert "pydantic" not in refusal.text and "type=" not in refusal.text


def plain(database_url: str, scheme: str) -> str:
    """`database_url` (an asyncpg or aiosqlite URL) written with the plain `scheme`."""
    return f"{scheme}://{database_url.partition('://')[2]}"


def serves(database_url: str, folder: Path) -> None:
    """`python -m api` on `database_url` is ready, stores a message and reads it back."""
    with LiveServer(database_url, folder / f"server-{uuid.uuid4().hex[:8]}.log") as server:
        assert httpx.get(f"{server.base_url}/readyz").status_code == 200
        sent = {"messages": [user("hello")]}
        stored = httpx.post(f"{server.base_url}/v1/sessions/s/messages", json=sent)
        assert stored.status_code == 201, stored.text
        read = httpx.get(f"{server.base_url}/v1/sessions/s/messages").json()["messages"]
        assert [message["content"] for message in read] == ["hello"]
        log = server.log_path.read_text()
    assert "Traceback" not in log, log[-3000:]


# --- settings --------------------------------------------------------------------------------


def test_an_invalid_setting_stops_the_start_with_one_line_naming_it(tmp_path: Path) -> None:
    database = f"sqlite+aiosqlite:///{tmp_path / 'unused.db'}"
    refusal = refused_start(tmp_path, database, SUMMARY_MESSAGE_LIMIT="abc")
    assert_short(refusal, 2)
    assert refusal.lines[1].strip() == "SUMMARY_MESSAGE_LIMIT: must be a whole number, not 'abc'"


def test_each_invalid_setting_gets_a_line_of_its_own(tmp_path: Path) -> None:
    database = f"sqlite+aiosqlite:///{tmp_path / 'unused.db'}"
    refusal = refused_start(
        tmp_path,
        database,
        SUMMARY_MESSAGE_LIMIT="abc",
        DATABASE_RETRY_SECONDS="0",
        MEMORY_IDENTIFY="everything",
    )
    assert_short(refusal, 4)
    named = sorted(line.strip().partition(":")[0] for line in refusal.lines[1:])
    assert named == ["DATABASE_RETRY_SECONDS", "MEMORY_IDENTIFY", "SUMMARY_MESSAGE_LIMIT"]


def test_a_malformed_secret_setting_is_named_but_never_quoted(tmp_path: Path) -> None:
    database = f"sqlite+aiosqlite:///{tmp_path / 'unused.db'}"
    refusal = refused_start(tmp_path, database, API_KEYS="tenant-a-s3cr3t-without-a-colon")
    assert_short(refusal, 2)
    assert refusal.lines[1].strip() == "API_KEYS entries must look like tenant:key"
    assert "s3cr3t" not in refusal.text


# --- DATABASE_URL ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "database", ["mysql://app:hunter2@db/precis", "postgresql+psycopg://app:hunter2@db/precis"]
)
def test_a_database_url_of_another_driver_stops_the_start_naming_the_accepted_forms(
    tmp_path: Path, database: str
) -> None:
    refusal = refused_start(tmp_path, database)
    assert_short(refusal, 2)
    line = refusal.lines[1]
    assert line.strip().startswith("DATABASE_URL:")
    assert "postgresql+asyncpg://" in line and "sqlite+aiosqlite:///" in line
    assert "hunter2" not in refusal.text


def test_a_database_url_that_does_not_parse_never_quotes_its_password(tmp_path: Path) -> None:
    """An `@` left unencoded in the password: the parser's words would quote the rest of it."""
    refusal = refused_start(tmp_path, "postgresql://app:pa@ss:Secret99@db/precis")
    assert_short(refusal, 2)
    assert "percent-encode" in refusal.text
    assert "Secret99" not in refusal.text


@pytest.mark.parametrize(
    ("empty_database_url", "scheme"),
    [("sqlite", "sqlite"), ("postgresql", "postgresql"), ("postgresql", "postgres")],
    indirect=["empty_database_url"],
)
async def test_a_plain_url_is_migrated_and_served_by_the_async_driver(
    empty_database_url: str, scheme: str, tmp_path: Path
) -> None:
    database = plain(empty_database_url, scheme)
    await run_alembic(database, "head")  # Alembic reads it by the same rule
    serves(database, tmp_path)


@pytest.mark.parametrize("empty_database_url", ["postgresql"], indirect=True)
async def test_a_plain_url_keeps_its_pooler_option(
    empty_database_url: str, pgbouncer_port: int, tmp_path: Path
) -> None:
    await run_alembic(empty_database_url, "head")
    pooled = plain(through_pgbouncer(empty_database_url, pgbouncer_port), "postgresql")
    assert pooled.endswith("?pooler=transaction")
    serves(pooled, tmp_path)


@pytest.mark.parametrize("empty_database_url", ["postgresql"], indirect=True)
async def test_a_plain_url_keeps_its_hosts_and_target_session_attrs(
    empty_database_url: str, tmp_path: Path
) -> None:
    await run_alembic(empty_database_url, "head")
    url = make_url(empty_database_url)
    # nothing listens on port 1: the connection goes on to the next host, the primary
    hosts = f"host=127.0.0.1:1&host={url.host}:{url.port or 5432}&target_session_attrs=primary"
    serves(f"postgres://{url.username}@/{url.database}?{hosts}", tmp_path)


# --- the database's schema -------------------------------------------------------------------


@both_backends
def test_a_start_on_an_unmigrated_database_is_refused_naming_the_migration(
    empty_database_url: str, tmp_path: Path
) -> None:
    if empty_database_url.startswith("sqlite"):
        Path(empty_database_url.partition(":///")[2]).touch()  # an empty SQLite database
    refusal = refused_start(tmp_path, empty_database_url)
    assert_short(refusal, 1)
    assert f"schema is at revision none, this build needs {SCHEMA_REVISION}" in refusal.text
    assert "run `alembic upgrade head`" in refusal.text


@both_backends
async def test_a_start_on_a_database_at_an_older_revision_is_refused_naming_it(
    empty_database_url: str, tmp_path: Path
) -> None:
    await run_alembic(empty_database_url, "0001")
    refusal = refused_start(tmp_path, empty_database_url)
    assert_short(refusal, 1)
    assert f"schema is at revision 0001, this build needs {SCHEMA_REVISION}" in refusal.text


def test_a_start_on_a_missing_sqlite_file_is_refused_without_creating_it(tmp_path: Path) -> None:
    missing = tmp_path / "data" / "precis.db"
    refusal = refused_start(tmp_path, f"sqlite+aiosqlite:///{missing}")
    assert_short(refusal, 1)
    assert "revision none" in refusal.text and f"(no file {missing} yet)" in refusal.text
    assert not missing.parent.exists()


def test_a_start_on_a_database_that_does_not_exist_is_refused(
    postgres_available: bool, tmp_path: Path
) -> None:
    """The server answered (a reachable PostgreSQL), so waiting would not help."""
    if not postgres_available:
        pytest.skip(SKIP_POSTGRES_REASON)
    missing = make_url(POSTGRES_ADMIN_URL).set(database=f"precis_none_{uuid.uuid4().hex[:12]}")
    refusal = refused_start(tmp_path, missing.render_as_string(hide_password=False))
    assert_short(refusal, 1)
    assert "the database refused the connection" in refusal.text
    assert "does not exist" in refusal.text


def test_a_database_that_does_not_answer_does_not_stop_the_start(tmp_path: Path) -> None:
    """As after a restart: the server waits for it, and /readyz says it is not ready."""
    unreachable = "postgresql+asyncpg://postgres@127.0.0.1:1/precis"  # nothing listens on 1
    with LiveServer(unreachable, tmp_path / "server.log", {"summary_workers": 0}) as server:
        assert httpx.get(f"{server.base_url}/readyz").status_code == 503
    assert "the database did not answer" in server.log_path.read_text()
