"""A PostgreSQL cluster of one's own in a temporary folder, to stop and start at will.

`initdb` and `pg_ctl` from the installed server binaries (PRECIS_PG_BINDIR, else the newest
/usr/lib/postgresql/*/bin, else the PATH), trust auth, listening on a free loopback port only,
its socket in the folder. The binaries refuse to run as root: as root they run as the
`postgres` user (`runuser`), who owns the folder. The cluster is stopped and the folder
removed however the block ends. Used by the load test's `--restart` and the restart test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tests.support.live_server import free_port

BINDIR_ENV = "PRECIS_PG_BINDIR"
"""Where the server binaries are, when not in the usual places."""

DEBIAN_BINDIRS = "/usr/lib/postgresql/*/bin"
"""Where Debian and Ubuntu install each major version's server binaries."""

CLUSTER_OWNER = "postgres"
"""Who runs the binaries when we are root (they refuse root)."""

PG_CTL_WAIT_SECONDS = 60
"""How long `pg_ctl start` and `stop` wait for the server to be up, or gone."""

SERVER_OPTIONS = (
    "-c listen_addresses=127.0.0.1",
    # a scratch cluster: durability across a power loss is not what is tested
    "-c fsync=off",
    "-c full_page_writes=off",
)
"""The server's options besides its port and socket folder."""

MISSING = (
    "PostgreSQL server binaries (initdb, pg_ctl) not found: install the server package "
    "(Debian: postgresql) or set PRECIS_PG_BINDIR to their folder"
)
"""What to tell someone whose machine lacks them."""


def server_bindir() -> Path | None:
    """The folder holding `initdb` and `pg_ctl`, or None if this machine has none."""
    candidates: list[Path] = []
    if os.environ.get(BINDIR_ENV):
        candidates.append(Path(os.environ[BINDIR_ENV]))
    versions = Path("/").glob(DEBIAN_BINDIRS.lstrip("/"))
    candidates += sorted(versions, key=lambda path: _major(path.parent.name), reverse=True)
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).parent)
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    return None


def _major(name: str) -> int:
    return int(name) if name.isdigit() else -1


class PgCluster:
    """One initialized cluster in `folder`, on `port`; `start` and `stop` it."""

    def __init__(self, bindir: Path, folder: Path) -> None:
        self.bindir = bindir
        self.folder = folder
        self.data = folder / "data"
        self.log = folder / "server.log"
        self.port = free_port()

    @property
    def admin_url(self) -> str:
        """The `postgres` database as the `postgres` superuser (trust auth)."""
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync")

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = " ".join((f"-p {self.port}", f"-k {self.folder}", *SERVER_OPTIONS))
        self._pg_ctl("start", "-l", str(self.log), "-o", options)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server and wait until it is gone; `fast` rolls back the transactions
        under way and cuts every connection, as a failover or an upgrade's restart does."""
        self._pg_ctl("stop", "-m", mode)

    def running(self) -> bool:
        status = subprocess.run(
            self._as_owner(str(self.bindir / "pg_ctl"), "status", "-D", str(self.data)),
            cwd=self.folder,
            capture_output=True,
            check=False,
        )
        return status.returncode == 0

    def log_tail(self, lines: int = 20) -> str:
        with suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return "(no server log)"

    def _pg_ctl(self, action: str, *options: str) -> None:
        wait = ("-w", "-t", str(PG_CTL_WAIT_SECONDS))
        self._run("pg_ctl", action, "-D", str(self.data), *wait, *options)

    def _run(self, binary: str, *arguments: str) -> None:
        command = self._as_owner(str(self.bindir / binary), *arguments)
        done = subprocess.run(command, cwd=self.folder, capture_output=True, check=False)
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace").strip()
            raise RuntimeError(f"{binary} {arguments[0]} failed: {output}\n{self.log_tail()}")

    @staticmethod
    def _as_owner(*command: str) -> list[str]:
        if os.geteuid() == 0:
            return ["runuser", "-u", CLUSTER_OWNER, "--", *command]
        return list(command)


@contextmanager
def temporary_cluster(bindir: Path | None = None) -> Iterator[PgCluster]:
    """A fresh cluster, started; stopped and removed when the block ends, however it ends."""
    found = bindir or server_bindir()
    if found is None:
        raise RuntimeError(MISSING)
    with tempfile.TemporaryDirectory(prefix="precis-pg-") as folder:
        path = Path(folder)
        if os.geteuid() == 0:
            shutil.chown(path, CLUSTER_OWNER, CLUSTER_OWNER)
        cluster = PgCluster(found, path)
        cluster.init()
        try:
            cluster.start()
            yield cluster
        finally:
            if cluster.running():
                cluster.stop("immediate")  # nothing of a scratch cluster is kept
