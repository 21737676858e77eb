"""Move every session of a tenant from one database to another, through the export format.

    python -m scripts.move_tenant --tenant T --from SOURCE_URL --to TARGET_URL [--keep-source]

Each session is exported from the source (`api.transfer.export.export_session`, one
snapshot) and imported into the target (`api.transfer.importer.import_session`, one
transaction), the functions the export and import routes call; then it is exported again from
the target and compared with what was sent, line by line with every object's keys sorted
(PostgreSQL's JSONB keeps keys in an order of its own), and checked by `scripts.verify`; only
then is it deleted from the source (unless `--keep-source`).

Safe to run again after a crash: an import stores all of a session or nothing, and a session
already on the target is compared with the source's instead of copied; when they are the same,
the source's copy is deleted (unless `--keep-source`), and when they differ both are left as
they are and reported. Writes to the tenant's sessions on the source while it runs are not
carried over: stop them first.

Prints a line per session and a total; exit status 0 when every session is on the target,
1 when any differs or failed its check, 2 when the tool could not run.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as `python scripts/move_tenant.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import hashlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TextIO

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from api import store
from api.db.engine import create_database, create_engine
from api.db.transactions import Database
from api.errors import PrecisError, SessionExists, SessionNotFound
from api.store.rows import UNBOUNDED
from api.transfer.export import export_session
from api.transfer.importer import import_session
from scripts import verify
from scripts.cli import run_command

PROG = "move_tenant"

PAGE = 100
"""Session ids read per page of the source's listing."""


class Outcome(StrEnum):
    MOVED = "moved"
    COPIED = "copied"
    """Copied, the source's kept (`--keep-source`)."""
    ALREADY_THERE = "already on the target"
    DIFFERS = "DIFFERS on the target"
    BROKEN = "FAILED its check on the target"
    REFUSED = "REFUSED by the target"


class Digest:
    """A hash of a stream of JSON Lines, each line's keys sorted: equal for the same session
    read from either database."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._pending = b""

    def update(self, chunk: bytes) -> None:
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        for line in lines:
            canonical = json.dumps(json.loads(line), sort_keys=True, ensure_ascii=False)
            self._hash.update(canonical.encode() + b"\n")

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


async def hashed(chunks: AsyncIterator[bytes], digest: Digest) -> AsyncIterator[bytes]:
    """`chunks`, passed on as they are hashed."""
    async for chunk in chunks:
        digest.update(chunk)
        yield chunk


async def digest_of(database: Database, tenant: str, external_id: str) -> str:
    digest = Digest()
    async for chunk in await export_session(database, tenant, external_id):
        digest.update(chunk)
    return digest.hexdigest()


async def exists(database: Database, tenant: str, external_id: str) -> bool:
    async with database.reading() as db:
        try:
            await store.get_session(db, tenant, external_id)
        except SessionNotFound:
            return False
    return True


async def move_session(
    source: Database, target: Database, tenant: str, external_id: str, keep_source: bool
) -> Outcome:
    """Copy one session, compare and check it on the target, then delete it from the source."""
    if await exists(target, tenant, external_id):
        sent = await digest_of(source, tenant, external_id)
        outcome = Outcome.ALREADY_THERE
    else:
        digest = Digest()
        try:
            chunks = hashed(await export_session(source, tenant, external_id), digest)
            # the operator's own move: any summary model (the target replaces one it does
            # not allow by SUMMARY_MODEL when it summarizes)
            await import_session(target, tenant, chunks, UNBOUNDED, allowed_models=None)
        except SessionExists:  # it arrived meanwhile: compare it
            return await move_session(source, target, tenant, external_id, keep_source)
        sent = digest.hexdigest()
        outcome = Outcome.COPIED if keep_source else Outcome.MOVED
    if await digest_of(target, tenant, external_id) != sent:
        return Outcome.DIFFERS
    async with target.reading() as db:
        session_key = (await store.get_session(db, tenant, external_id)).id
    check = await verify.verify_session(target.sessionmaker, session_key)
    if check is None or check.violations:
        return Outcome.BROKEN
    if not keep_source:
        async with source.transaction() as db:
            await store.delete_session(db, tenant, external_id)
    return outcome


async def tenant_sessions(database: Database, tenant: str) -> AsyncIterator[str]:
    """The tenant's session ids, newest first, a page at a time."""
    before: store.SessionPosition | None = None
    while True:
        async with database.reading() as db:
            page = await store.list_sessions(db, tenant, PAGE, before)
        for session in page:
            yield session.external_id
        if len(page) < PAGE:
            return
        before = store.SessionPosition(page[-1].created_at, page[-1].id)


@dataclass(frozen=True)
class Options:
    tenant: str
    source_url: str
    target_url: str
    keep_source: bool = False


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog=f"python -m scripts.{PROG}",
        description="Move every session of a tenant to another database (DATABASE_URL).",
    )
    parser.add_argument("--tenant", required=True, help="whose sessions (`default` without keys)")
    parser.add_argument("--from", dest="source_url", required=True, help="the source's URL")
    parser.add_argument("--to", dest="target_url", required=True, help="the target's URL")
    parser.add_argument(
        "--keep-source", action="store_true", help="copy: leave the sessions on the source"
    )
    args = parser.parse_args(argv)
    return Options(args.tenant, args.source_url, args.target_url, args.keep_source)


async def run(options: Options, out: TextIO, err: TextIO) -> int:
    """The command without the event loop: tests await it with their own streams."""
    engines = [create_engine(options.source_url), create_engine(options.target_url)]
    source, target = (create_database(engine) for engine in engines)
    failed = done = 0
    try:
        async for external_id in tenant_sessions(source, options.tenant):
            try:
                outcome = await move_session(
                    source, target, options.tenant, external_id, options.keep_source
                )
                said = outcome.value
            except PrecisError as exc:  # the target refused what the source holds
                outcome, said = Outcome.REFUSED, f"{Outcome.REFUSED.value}: {exc.detail}"
            out.write(f"{options.tenant}/{external_id}  {said}\n")
            out.flush()
            failed += outcome in (Outcome.DIFFERS, Outcome.BROKEN, Outcome.REFUSED)
            done += 1
    except (SQLAlchemyError, OSError) as exc:
        shown = make_url(options.target_url).render_as_string(hide_password=True)
        err.write(f"{PROG}: stopped ({shown}): {' '.join(str(exc).split())[:300]}\n")
        return 2
    finally:
        for engine in engines:
            await engine.dispose()
    verb = "copied" if options.keep_source else "moved"
    out.write(f"{done - failed} of {done} sessions of {options.tenant!r} {verb}.\n")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(run, parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
