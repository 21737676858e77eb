"""A primary and a streaming standby of one's own, to fail over at will, as managed PostgreSQL
does (RDS and Cloud SQL high availability, Patroni): the primary is lost, the standby promoted.

The primary is a `PgCluster` (`tests/support/pg_cluster.py`); the standby is copied from it
with `pg_basebackup -R` (which writes its `primary_conninfo` and `standby.signal`) and started
on a free loopback port of its own. With `synchronous=True` the primary waits for the standby
to have flushed every commit before acknowledging it (`synchronous_standby_names = '*'`, set
once the standby streams, so it is not copied to the standby and the promoted server waits
for nobody); otherwise the standby streams asynchronously and may lag.

`failover_url` is the multi-host `DATABASE_URL` a client of such a deployment uses: both
servers, the primary first, and `target_session_attrs` to pick the one that takes writes.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg

from tests.support.pg_cluster import MISSING, PgCluster, server_bindir

STREAMING_WAIT_SECONDS = 30.0
"""How long the standby may take to stream (and, if synchronous, to be the sync standby)."""

TargetSessionAttrs = str
"""libpq's `target_session_attrs` as asyncpg knows it: primary, read-write, any, ..."""


class ReplicatedPair:
    """A running primary and its streaming standby."""

    def __init__(self, primary: PgCluster, standby: PgCluster, synchronous: bool) -> None:
        self.primary = primary
        self.standby = standby
        self.synchronous = synchronous

    def failover_url(self, database: str, target: TargetSessionAttrs = "primary") -> str:
        """SQLAlchemy's asyncpg URL naming both servers, the primary first."""
        hosts = "&".join(
            f"host=127.0.0.1:{cluster.port}" for cluster in (self.primary, self.standby)
        )
        return f"postgresql+asyncpg://postgres@/{database}?{hosts}&target_session_attrs={target}"

    def stop_streaming(self) -> None:
        """Cut the standby off from the primary's WAL (its `primary_conninfo` emptied), as a
        lagging asynchronous standby is: what the primary commits from now on, the standby
        never has."""
        query(self.standby, "ALTER SYSTEM SET primary_conninfo = ''")
        query(self.standby, "SELECT pg_reload_conf()")
        _wait_for(
            self.primary,
            "SELECT count(*) = 0 FROM pg_stat_replication",
            (),
            "the standby to stop streaming",
        )

    def lose_primary(self) -> None:
        """The primary's processes die at once (`pg_ctl stop -m immediate`: no checkpoint, no
        goodbye to clients), as when its machine is lost."""
        self.primary.stop("immediate")

    def promote(self) -> None:
        """Promote the standby and wait until it takes writes."""
        self.standby._run("pg_ctl", "promote", "-D", str(self.standby.data), "-w")

    def wait_until_replayed(self) -> None:
        """Wait until the standby has replayed everything the primary has written."""
        target = query(self.primary, "SELECT pg_current_wal_lsn()::text")
        _wait_for(
            self.standby,
            "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
            (target,),
            "the standby to replay the primary's WAL",
        )


def query(cluster: PgCluster, sql: str, *params: object) -> object:
    """The first column of the first row of `sql` on `cluster`'s `postgres` database (not to be
    called from a running event loop: it runs one of its own)."""

    async def run() -> object:
        connection = await asyncpg.connect(
            host="127.0.0.1", port=cluster.port, user="postgres", database="postgres"
        )
        try:
            return await connection.fetchval(sql, *params)
        finally:
            await connection.close()

    return asyncio.run(run())


def _wait_for(cluster: PgCluster, sql: str, params: tuple[object, ...], what: str) -> None:
    deadline = time.monotonic() + STREAMING_WAIT_SECONDS
    while True:
        if query(cluster, sql, *params):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}\n{cluster.log_tail()}")
        time.sleep(0.1)


def _owned_folder(prefix: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    return folder


@contextmanager
def replicated_pair(*, synchronous: bool) -> Iterator[ReplicatedPair]:
    """A fresh primary and a standby streaming from it, started; both stopped and removed when
    the block ends, however it ends."""
    bindir = server_bindir()
    if bindir is None:
        raise RuntimeError(MISSING)
    folders = [_owned_folder("precis-primary-"), _owned_folder("precis-standby-")]
    primary, standby = PgCluster(bindir, folders[0]), PgCluster(bindir, folders[1])
    try:
        primary.init()
        primary.start()
        standby._run(
            "pg_basebackup",
            *("-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres"),
            *("-D", str(standby.data), "-R", "-X", "stream", "--no-sync"),
        )
        standby.start()
        _wait_for(
            primary,
            "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'",
            (),
            "the standby to stream",
        )
        if synchronous:
            query(primary, "ALTER SYSTEM SET synchronous_standby_names = '*'")
            query(primary, "SELECT pg_reload_conf()")
            _wait_for(
                primary,
                "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
                (),
                "the standby to be synchronous",
            )
        yield ReplicatedPair(primary, standby, synchronous)
    finally:
        for cluster in (primary, standby):
            if cluster.data.exists() and cluster.running():
                cluster.stop("immediate")
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
