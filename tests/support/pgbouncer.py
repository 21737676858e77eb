"""A PgBouncer of the test run's own, in transaction mode, in front of the test server.

The Debian package's binary, started on a free loopback port with a configuration in a
temporary folder: every database of the upstream server is reachable through it, trust auth,
`pool_mode = transaction` (what Supabase, Heroku and most managed PostgreSQL offerings put in
front). PgBouncer refuses to run as root: as root it is started with `-u postgres`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.live_server import free_port

START_SECONDS = 10.0
"""Longest wait for PgBouncer to accept connections."""

SERVER_CONNECTIONS = 40
"""Server connections per database and user: fewer than the clients the tests open, so the
pooler really shares them between transactions."""


def pgbouncer_binary() -> str | None:
    """The installed `pgbouncer` (Debian puts it in /usr/sbin, off a user's PATH)."""
    found = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    return found if os.access(found, os.X_OK) else None


def _config(folder: Path, port: int, upstream_host: str, upstream_port: int, user: str) -> Path:
    (folder / "userlist.txt").write_text(f'"{user}" ""\n')
    ini = folder / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"* = host={upstream_host} port={upstream_port}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'userlist.txt'}\n"
        "pool_mode = transaction\n"
        f"max_client_conn = 2000\ndefault_pool_size = {SERVER_CONNECTIONS}\n"
        "log_connections = 0\nlog_disconnections = 0\n"
    )
    return ini


def _accepting(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def running_pgbouncer(upstream_host: str, upstream_port: int, user: str) -> Iterator[int]:
    """A PgBouncer in transaction mode in front of `upstream_host:upstream_port`; its port."""
    binary = pgbouncer_binary()
    if binary is None:
        raise RuntimeError("pgbouncer is not installed (apt-get install pgbouncer)")
    folder = Path(tempfile.mkdtemp(prefix="precis-pgbouncer-"))
    port = free_port()
    ini = _config(folder, port, upstream_host, upstream_port, user)
    command = [binary, str(ini)]
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        for path in folder.iterdir():
            shutil.chown(path, "postgres")
        command = [binary, "-u", "postgres", str(ini)]
    log = folder / "pgbouncer.log"
    # its log goes to a file: a pipe nobody reads would fill up and stall PgBouncer
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=output)
    try:
        deadline = time.monotonic() + START_SECONDS
        while not _accepting(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not start: {log.read_text(errors='replace')}")
            time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)
