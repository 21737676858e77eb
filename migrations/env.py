"""Alembic environment: async engine, URL from DATABASE_URL (or a URL handed in by tests), read
by the server's own rule (`api.db.urls`)."""

from __future__ import annotations

import asyncio
from logging.config import fileConfig

from alembic import context
from alembic.util import CommandError
from sqlalchemy.engine import Connection

from api.db.engine import create_engine
from api.db.models import Base
from api.db.urls import async_database_url
from api.settings import InvalidSettings, get_settings

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _database_url() -> str:
    given: str | None = config.attributes.get("database_url")
    if given:
        return async_database_url(given)
    try:
        return get_settings().database_url
    except InvalidSettings as exc:
        # alembic's command line prints a CommandError as one FAILED line, not a traceback
        raise CommandError(f"invalid settings: {'; '.join(exc.problems)}") from None


def _run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async_migrations() -> None:
    engine = create_engine(_database_url())
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run_migrations)
            await connection.commit()
    finally:
        await engine.dispose()


def run_migrations_offline() -> None:
    context.configure(
        url=_database_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    asyncio.run(_run_async_migrations())
