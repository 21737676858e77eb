"""The service, or another app, served in a subprocess on a free loopback port.

`served` and `served_app` run `uvicorn <app>` for a `with` block (the benchmarks, the client
tests); `LiveServer` runs `python -m api` (or a module taking the same flags) with its log in a
file and stops it with SIGTERM (the load test, the fault tests).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]

START_TIMEOUT_SECONDS = 60.0
"""How long a server subprocess may take to answer /healthz (imports, then the lifespan)."""

STOP_TIMEOUT_SECONDS = 60.0
"""How long SIGTERM may take (in-flight requests finish first) before the process is killed."""

SERVER_PIDS: dict[str, int] = {}
"""The process of each server `served_app` is running, by its base URL."""


PORTS = range(20_000, 32_000)
"""Where `free_port` looks: below the kernel's ephemeral ports (32768 up), which `bind(0)` and
every outgoing connection draw from, so no connection takes a port between the probe and the
server's own bind."""

_next_port = PORTS.start + (os.getpid() * 97) % len(PORTS)
"""Where this process looks next: processes (test workers, runs side by side) start apart."""


def free_port() -> int:
    """A loopback port nothing listens on right now, that no other process is handed."""
    global _next_port
    while True:
        port = _next_port
        _next_port = PORTS.start + (port + 1 - PORTS.start) % len(PORTS)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


@contextmanager
def served(database_url: str, **settings: str) -> Iterator[str]:
    """`uvicorn api.main:app` in a subprocess on a loopback port; yields its base URL."""
    with served_app("api.main:app", database_url, **settings) as url:
        yield url


@contextmanager
def served_app(app: str, database_url: str, **settings: str) -> Iterator[str]:
    """`uvicorn <app>` in a subprocess on a loopback port, configured by environment like the
    service; yields its base URL."""
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        **{key.upper(): value for key, value in settings.items()},
    }
    env.pop("API_KEYS", None)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            app,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
        ],
        cwd=REPO_ROOT,
        env=env,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        _wait_for_port(port, process)
        SERVER_PIDS[base_url] = process.pid
        yield base_url
    finally:
        SERVER_PIDS.pop(base_url, None)
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError("the server did not start listening in time")


def settings_env(settings: Mapping[str, Any]) -> dict[str, str]:
    """Settings names (as in api.settings) as environment variables for a server process."""
    return {name.upper(): _env_value(value) for name, value in settings.items()}


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class LiveServer:
    """`python -m api` (or another `module` taking the same flags) in a subprocess on a free
    loopback port; SIGTERM stops it gracefully.

    The database must be migrated already. `settings` are api.settings names (lower case).
    """

    def __init__(
        self,
        database_url: str,
        log_path: Path,
        settings: Mapping[str, Any] | None = None,
        module: str = "api",
    ) -> None:
        self.database_url = database_url
        self.log_path = log_path
        self.settings = dict(settings or {})
        self.module = module
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = START_TIMEOUT_SECONDS) -> LiveServer:
        """Spawn the server and wait until /healthz answers; raise with its log if it cannot."""
        env = {
            **os.environ,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no network fetch at import
            "DATABASE_URL": self.database_url,
            **settings_env(self.settings),
        }
        command = [sys.executable, "-m", self.module, "--host", "127.0.0.1"]
        command += ["--port", str(self.port)]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited at start:\n{self.log_tail()}")
            with suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/healthz", timeout=1.0).status_code == 200:
                    return self
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"the server did not answer within {timeout} s:\n{self.log_tail()}")

    def terminate(self) -> None:
        """Send SIGTERM: uvicorn stops listening, finishes in-flight requests, then exits."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float = STOP_TIMEOUT_SECONDS) -> int:
        """Wait for the process to exit; kill it past `timeout`. Returns its exit status."""
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> int:
        self.terminate()
        return self.wait(timeout)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if self.process is not None and self.process.poll() is None:
                self.stop()
        finally:
            self.kill()
