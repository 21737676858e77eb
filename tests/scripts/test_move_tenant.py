"""`scripts/move_tenant`: every session of one tenant, and no other's, ends up on the target,
the same as it was, checked, and gone from the source; a second run after a crash finishes
the move."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from api import store
from api.db.engine import create_database, create_engine, create_sessionmaker
from api.errors import SessionNotFound
from api.transfer.export import export_session
from api.transfer.importer import import_session
from scripts import move_tenant
from tests.conftest import migrated_database
from tests.helpers import append_batch, run_verify
from tests.scripts.builders import new_message, seed_session

PAIRS = pytest.mark.parametrize(
    ("source_backend", "target_backend"),
    [("sqlite", "postgresql"), ("postgresql", "sqlite"), ("sqlite", "sqlite")],
)


@pytest.fixture
async def urls(
    source_backend: str, target_backend: str, tmp_path: Path, postgres_available: bool
) -> AsyncIterator[tuple[str, str]]:
    """A migrated source and target database of the backends asked."""
    (tmp_path / "source").mkdir()
    (tmp_path / "target").mkdir()
    async with (
        migrated_database(source_backend, tmp_path / "source", postgres_available) as source,
        migrated_database(target_backend, tmp_path / "target", postgres_available) as target,
    ):
        yield source, target


async def seed(url: str) -> None:
    """Tenant `a`: a summarized session with a roll-up and two plain ones; tenant `b`: one."""
    engine = create_engine(url)
    try:
        async with create_sessionmaker(engine)() as db:
            await seed_session(db, "chat-1", "a")
            for tenant, external_id in (("a", "chat-2"), ("a", "chat-3"), ("b", "chat-1")):
                said = [new_message({"role": "user", "content": f"{tenant} {external_id}"})]
                await append_batch(db, tenant, external_id, said)
    finally:
        await engine.dispose()


async def moved(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await move_tenant.run(move_tenant.parse_args(list(args)), out, err)
    return code, out.getvalue() + err.getvalue()


async def sessions_of(url: str, tenant: str) -> set[str]:
    engine = create_engine(url)
    try:
        async with create_sessionmaker(engine)() as db:
            return {s.external_id for s in await store.list_sessions(db, tenant, 100, None)}
    finally:
        await engine.dispose()


async def digest(engine: AsyncEngine, tenant: str, external_id: str) -> str:
    return await move_tenant.digest_of(create_database(engine), tenant, external_id)


@PAIRS
async def test_every_session_of_the_tenant_moves_and_no_other_s(urls: tuple[str, str]) -> None:
    source, target = urls
    await seed(source)
    source_engine = create_engine(source)
    try:
        before = {sid: await digest(source_engine, "a", sid) for sid in ("chat-1", "chat-2")}
    finally:
        await source_engine.dispose()

    code, said = await moved("--tenant", "a", "--from", source, "--to", target)

    assert code == 0, said
    assert "3 of 3 sessions of 'a' moved." in said
    assert await sessions_of(target, "a") == {"chat-1", "chat-2", "chat-3"}
    assert await sessions_of(target, "b") == set()
    assert await sessions_of(source, "a") == set()
    assert await sessions_of(source, "b") == {"chat-1"}
    target_engine = create_engine(target)
    try:
        after = {sid: await digest(target_engine, "a", sid) for sid in ("chat-1", "chat-2")}
    finally:
        await target_engine.dispose()
    assert after == before
    assert (await run_verify(target))[0] == 0


@pytest.mark.parametrize(("source_backend", "target_backend"), [("sqlite", "sqlite")])
async def test_keep_source_copies_and_leaves_the_source_as_it_was(urls: tuple[str, str]) -> None:
    source, target = urls
    await seed(source)

    code, said = await moved("--tenant", "a", "--from", source, "--to", target, "--keep-source")

    assert code == 0, said
    assert await sessions_of(target, "a") == {"chat-1", "chat-2", "chat-3"}
    assert await sessions_of(source, "a") == {"chat-1", "chat-2", "chat-3"}


@PAIRS
async def test_a_session_naming_any_summary_model_moves(urls: tuple[str, str]) -> None:
    # the operator's own move takes the model as it is; POST /v1/sessions/import would refuse
    # one SUMMARY_ALLOWED_MODELS leaves out
    source, target = urls
    await seed(source)
    engine = create_engine(source)
    try:
        async with create_sessionmaker(engine)() as db:
            settings = {"model": "openai/not-on-any-allow-list"}
            await store.update_session(db, "a", "chat-2", {"settings": settings})
            await db.commit()
    finally:
        await engine.dispose()

    code, said = await moved("--tenant", "a", "--from", source, "--to", target)

    assert code == 0, said
    engine = create_engine(target)
    try:
        async with create_sessionmaker(engine)() as db:
            moved_session = await store.get_session(db, "a", "chat-2")
    finally:
        await engine.dispose()
    assert moved_session.settings == {"model": "openai/not-on-any-allow-list"}


@PAIRS
async def test_a_run_after_a_crash_between_copy_and_delete_finishes_the_move(
    urls: tuple[str, str],
) -> None:
    source, target = urls
    await seed(source)
    engines = [create_engine(source), create_engine(target)]
    try:
        # the first run copied chat-1 and died before deleting it from the source
        source_db, target_db = (create_database(engine) for engine in engines)
        exported = await export_session(source_db, "a", "chat-1")
        await import_session(target_db, "a", exported, 10**9, allowed_models=None)
    finally:
        for engine in engines:
            await engine.dispose()

    code, said = await moved("--tenant", "a", "--from", source, "--to", target)

    assert code == 0, said
    assert "a/chat-1  already on the target" in said
    assert await sessions_of(source, "a") == set()
    assert await sessions_of(target, "a") == {"chat-1", "chat-2", "chat-3"}


@pytest.mark.parametrize(("source_backend", "target_backend"), [("sqlite", "postgresql")])
async def test_a_different_session_of_the_same_id_on_the_target_is_left_and_reported(
    urls: tuple[str, str],
) -> None:
    source, target = urls
    await seed(source)
    engine = create_engine(target)
    try:
        async with create_sessionmaker(engine)() as db:
            other = [new_message({"role": "user", "content": "another conversation"})]
            await append_batch(db, "a", "chat-2", other)
    finally:
        await engine.dispose()

    code, said = await moved("--tenant", "a", "--from", source, "--to", target)

    assert code == 1, said
    assert "a/chat-2  DIFFERS on the target" in said
    assert "chat-2" in await sessions_of(source, "a")
    engine = create_engine(source)
    try:
        async with create_sessionmaker(engine)() as db:
            with pytest.raises(SessionNotFound):
                await store.get_session(db, "a", "chat-1")
    finally:
        await engine.dispose()
