"""Scratch databases for the tests, the benchmark and the load test: create, migrate, drop."""

from __future__ import annotations

import uuid
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.engine import make_url

from api.db.engine import create_engine

REPO_ROOT = Path(__file__).resolve().parents[2]


def alembic_config(database_url: str) -> Config:
    """The project's Alembic configuration, aimed at `database_url`."""
    config = Config(str(REPO_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(REPO_ROOT / "migrations"))
    config.attributes["database_url"] = database_url
    config.attributes["configure_logger"] = False
    return config


def migrate(database_url: str) -> None:
    """`alembic upgrade head`; call it outside a running event loop (env.py runs its own)."""
    command.upgrade(alembic_config(database_url), "head")


async def _admin(admin_url: str, statement: str) -> None:
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as connection:
            await connection.execute(text(statement))
    finally:
        await engine.dispose()


async def create_postgres_database(admin_url: str, prefix: str) -> str:
    """A new, empty database named `<prefix>_<random>` on the server of `admin_url`; its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    await _admin(admin_url, f'CREATE DATABASE "{name}"')
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


async def drop_postgres_database(admin_url: str, url: str) -> None:
    """Drop the database of `url`, closing any connection still open to it."""
    await _admin(admin_url, f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')
