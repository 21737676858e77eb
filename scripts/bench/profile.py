"""Where the hot paths spend their time: pyinstrument over the service's append and history
load, at the store (`store_batch`, `load_rows`) and through the app in process (FastAPI,
pydantic, no socket).

Run with `make profile` (the bench virtualenv, which has pyinstrument; PostgreSQL) or
`make profile PROFILE_ARGS="--database sqlite"`. A scratch database is created and dropped;
`PRECIS_BENCH_POSTGRES_URL` points the PostgreSQL one elsewhere. The profiler samples the
event loop's thread: time SQLite spends in aiosqlite's thread shows as waiting.

`make profile PROFILE_ARGS="--chat-backends"` profiles the real servers instead, under the
throughput row's load (`scripts/bench/throughput.py`: 16 chat backends at once, append,
history, append): Precis (`uvicorn api.main:app`) and then the minimal app, each in its own
process. For each it prints the CPU the server's process used per request (from /proc,
without the profiler, then under it), the profile's CPU by layer (sampled on the process's
CPU clock; each sample's own time, by the package of its frame; the event loop waiting for
I/O left out), and pyinstrument's call tree.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import FrameType

import httpx
from pyinstrument import Profiler
from pyinstrument.frame import Frame
from pyinstrument.stack_sampler import get_stack_sampler

from api import store
from api.append import store_batch
from api.db.engine import create_engine, create_read_sessionmaker, create_sessionmaker
from api.db.transactions import Database
from api.main import create_app
from api.settings import Settings
from scripts.bench.lib import POSTGRES_ADMIN_URL, REPO_ROOT, cpu_seconds
from scripts.bench.throughput import BACKENDS, NO_SUMMARIES, chat_turns, session_ids
from tests.support.live_server import free_port
from tests.support.scratch_db import create_postgres_database, drop_postgres_database, migrate

ADMIN_URL = POSTGRES_ADMIN_URL
TENANT = "default"
TEXT = "The shipment left Lyon on Monday and reached the depot two days later. " * 10


def message(i: int) -> store.NewMessage:
    return store.NewMessage("user", f"{i}: {TEXT}", None, None, None, None, None, None, 150)


async def profiled(title: str, calls: int, call: Callable[[int], Awaitable[object]]) -> None:
    for i in range(calls // 10):  # warm up: prepared statements, pool, caches
        await call(i)
    profiler = Profiler(interval=0.0002, async_mode="disabled")
    profiler.start()
    for i in range(calls):
        await call(i)
    profiler.stop()
    print(f"\n=== {title}: {calls} calls ===")
    print(profiler.output_text(unicode=False, color=False, show_all=False, short_mode=True))


async def main(calls: int, database: str, turns: int | None) -> None:
    run = profile_all if turns is None else partial(profile_servers, turns=turns)
    if database == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            await run(f"sqlite+aiosqlite:///{folder}/profile.db", calls)
        return
    url = await create_postgres_database(ADMIN_URL, "precis_profile")
    try:
        await run(url, calls)
    finally:
        await drop_postgres_database(ADMIN_URL, url)


async def profile_all(url: str, calls: int) -> None:
    """Profile the store and the app on the migrated database at `url`."""
    await asyncio.to_thread(migrate, url)
    settings = Settings(_env_file=None, database_url=url, summary_workers=0)
    engine = create_engine(url)
    read = create_read_sessionmaker(engine)
    write_lock = asyncio.Lock() if engine.dialect.name == "sqlite" else None
    database = Database(create_sessionmaker(engine), read, write_lock)
    for start in range(0, 1000, 100):
        batch = [message(i) for i in range(start, start + 100)]
        await store_batch(database, settings, TENANT, "profiled", batch)

    async def append(i: int) -> object:
        return await store_batch(database, settings, TENANT, "appended", [message(i)])

    async def load(_i: int) -> object:
        async with read() as db:
            start = await store.session_for_history(db, TENANT, "profiled")
            return await store.load_rows(db, start.session, 3, 7_500, summarized=start.summarized)

    await profiled("store append (store_batch), 1 message", calls, append)
    await profiled(
        "store history load (session_for_history, load_rows), 50 of 1,000 messages", calls, load
    )

    app = create_app(settings)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as http,
    ):

        async def http_append(i: int) -> object:
            body = {"messages": [{"role": "user", "content": f"{i}: {TEXT}"}]}
            return await http.post("/v1/sessions/over-http/messages", json=body)

        async def http_load(_i: int) -> object:
            return await http.get("/v1/sessions/profiled/history?max_tokens=7500")

        await profiled("HTTP append (in process)", calls, http_append)
        await profiled("HTTP history load (in process)", calls, http_load)
    await engine.dispose()


# --- the servers under the throughput row's load --------------------------------------------

SERVERS = {"Precis": "api.main:app", "minimal app": "scripts.bench.minimal_app:app"}

LAYERS = (
    ("api/", "ours: api"),
    ("summarizer/", "ours: summarizer"),
    ("scripts/bench/", "the minimal app"),
    ("fastapi/", "fastapi"),
    ("starlette/", "starlette"),
    ("pydantic/", "pydantic"),
    ("pydantic_core/", "pydantic"),
    ("sqlalchemy/", "sqlalchemy"),
    ("asyncpg/", "asyncpg"),
    ("aiosqlite/", "aiosqlite"),
    ("uvicorn/", "uvicorn"),
    ("h11/", "h11"),
    ("anyio/", "anyio"),
    ("prometheus_client/", "prometheus_client"),
    ("tiktoken/", "tiktoken"),
    ("asyncio/", "asyncio"),
    ("json/", "json"),
)
"""The layer of a file, by the first of these its path starts with, relative to where it is
installed (the repository, site-packages or the standard library)."""


BUILTIN_LAYERS = (
    ("Schema", "pydantic"),
    ("to_json", "pydantic"),
    ("from_json", "pydantic"),
    ("Protocol.", "asyncpg"),
    ("PreparedStatementState", "asyncpg"),
    ("Record", "asyncpg"),
    ("Encoding.", "tiktoken"),
    ("CoreBPE", "tiktoken"),
    ("greenlet", "sqlalchemy"),
    ("socket.", "sockets"),
)
"""The layer of a function written in C, by how its name starts; any other counts in the
layer of the Python code that called it."""


@dataclass(frozen=True)
class Code:
    """Where a sample's own time was spent: the Python function, and the C function it was
    in, if any."""

    file_path: str
    function: str
    builtin: str | None

    @property
    def layer(self) -> str:
        if self.builtin == "epoll.poll":
            return "idle"
        if self.builtin is not None:
            for prefix, name in BUILTIN_LAYERS:
                if self.builtin.startswith(prefix):
                    return name
        relative = self.short_path
        if relative.startswith("/"):
            relative = relative.rsplit("/lib/python3", 1)[-1].partition("/")[2]
        known = (name for prefix, name in LAYERS if relative.startswith(prefix))
        return next(known, "other: " + relative.partition("/")[0].removesuffix(".py"))

    @property
    def short_path(self) -> str:
        return self.file_path.removeprefix(str(REPO_ROOT) + "/").split("site-packages/")[-1]

    def __str__(self) -> str:
        where = f"{self.short_path}:{self.function}"
        return where if self.builtin is None else f"{where} > {self.builtin}"


def self_times(frame: Frame, caller: Code | None = None) -> Iterator[tuple[Code, float]]:
    """Every frame's own time (what no child accounts for), where it ran: a synthetic leaf
    (`[self]`, `[await]`) is time spent in its parent, a C function is named after the Python
    function that called it."""
    code = caller
    if not frame.is_synthetic:
        path = frame.file_path or ""
        if path.startswith("<"):
            if caller is not None:
                code = Code(caller.file_path, caller.function, frame.function)
        else:
            code = Code(path, frame.function, None)
    own = frame.time - sum(child.time for child in frame.children)
    if own > 0 and code is not None:
        yield code, own
    for child in frame.children:
        yield from self_times(child, code)


def by_layer(root: Frame, requests: int) -> str:
    """The sampled CPU by layer, per request and as a share (the idle loop left out)."""
    layers: defaultdict[str, float] = defaultdict(float)
    functions: defaultdict[str, float] = defaultdict(float)
    for code, own in self_times(root):
        layers[code.layer] += own
        if code.layer != "idle":
            functions[str(code)] += own
    busy = sum(t for name, t in layers.items() if name != "idle")
    lines = [f"busy {busy:.2f} s sampled, {busy / requests * 1e3:.3f} ms per request:"]
    for name, seconds in sorted(layers.items(), key=lambda item: -item[1]):
        if name != "idle":
            per = seconds / requests * 1e3
            lines.append(f"  {name:<20} {per:6.3f} ms/request  {seconds / busy:6.1%}")
    lines.append("top functions by own time (a C function under the Python one calling it):")
    for name, seconds in sorted(functions.items(), key=lambda item: -item[1])[:30]:
        lines.append(f"  {seconds / busy:6.1%}  {name}")
    return "\n".join(lines)


def serve_profiled(app: str, port: int, output: Path, requests: Path) -> None:
    """Serve `app` as `tests.support.live_server.served_app` does; SIGUSR1 starts the profiler,
    SIGUSR2 stops it and writes its report to `output` (the request count read from
    `requests`)."""
    import uvicorn

    profiler = Profiler(interval=0.0005, async_mode="disabled")
    # The server's own CPU, not the wall clock: on a busy machine the wall clock counts the
    # time the process waits for a core, mostly in `socket.send`, which wakes the client.
    get_stack_sampler().timer_func = time.thread_time

    def start(_signal: int, _frame: FrameType | None) -> None:
        profiler.start()

    def stop(_signal: int, _frame: FrameType | None) -> None:
        session = profiler.stop()
        count = int(requests.read_text())
        tree = profiler.output_text(unicode=False, color=False, short_mode=True)
        root = session.root_frame()
        table = by_layer(root, count) if root is not None else "(no samples)"
        partial_output = output.with_suffix(".partial")
        partial_output.write_text(f"{table}\n\n{tree}")
        partial_output.rename(output)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


async def profile_servers(url: str, _calls: int, turns: int) -> None:
    """Each server under the 16 chat backends' load: CPU per request, then the profile."""
    await asyncio.to_thread(migrate, url)
    engine = create_engine(url)
    sessionmaker = create_sessionmaker(engine)
    try:
        for label, app in SERVERS.items():
            sessions = session_ids(label.split()[0].lower())
            for session in sessions:
                async with sessionmaker() as db:
                    await store.create_session(db, TENANT, session, {}, NO_SUMMARIES)
                    await db.commit()
            await profile_server(label, app, url, sessions, turns)
    finally:
        await engine.dispose()


async def profile_server(label: str, app: str, url: str, sessions: list[str], turns: int) -> None:
    """`turns` turns of every backend unprofiled, then as many profiled; print both."""
    with tempfile.TemporaryDirectory() as folder:
        output, requests = Path(folder) / "profile.txt", Path(folder) / "requests"
        with profiled_server(app, url, output, requests) as (process, base_url):
            async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
                await wait_until_up(client, process)
                play = chat_turns(client, sessions)
                await play(1, -2)  # warm up: imports on first use, the pool, statements
                measured = []
                for offset in (0, turns):  # unprofiled, then profiled
                    if offset:
                        process.send_signal(signal.SIGUSR1)
                    cpu, started = cpu_seconds(process.pid), time.perf_counter()
                    count = len(await play(turns, offset))
                    cpu = cpu_seconds(process.pid) - cpu
                    measured.append((count, cpu, time.perf_counter() - started))
            requests.write_text(str(measured[1][0]))
            process.send_signal(signal.SIGUSR2)
            await asyncio.to_thread(wait_for, output)
        print(f"\n=== {label} ({app}) under {BACKENDS} chat backends, {turns} turns each ===")
        for what, (count, cpu, wall) in zip(("unprofiled", "profiled"), measured, strict=True):
            print(
                f"{what}: {count} requests in {wall:.1f} s ({count / wall:.0f} req/s), "
                f"server CPU {cpu * 1e3 / count:.3f} ms per request"
            )
        print(output.read_text())


@contextmanager
def profiled_server(
    app: str, url: str, output: Path, requests: Path
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`serve_profiled` in a subprocess, configured as `tests.support.live_server.served_app`
    does."""
    port = free_port()
    env = {**os.environ, "DATABASE_URL": url, "SUMMARY_WORKERS": "0"}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env.pop("API_KEYS", None)
    command = [sys.executable, "-m", "scripts.bench.profile", "--serve", app, "--port", str(port)]
    command += ["--output", str(output), "--requests", str(requests)]
    process = subprocess.Popen(command, cwd=REPO_ROOT, env=env)
    try:
        yield process, f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


def wait_for(path: Path, timeout_s: float = 60.0) -> None:
    """Until the profiled server has written its report."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the profiled server wrote no {path.name} in time")
        time.sleep(0.05)


async def wait_until_up(client: httpx.AsyncClient, process: subprocess.Popen[bytes]) -> None:
    """Until the server answers /healthz (its lifespan has run)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            if (await client.get("/healthz")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.05)
    raise RuntimeError("the server did not answer /healthz in time")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000, help="profiled calls per path")
    parser.add_argument("--database", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument(
        "--chat-backends",
        action="store_true",
        help=f"profile the servers under {BACKENDS} chat backends at once (the throughput row)",
    )
    parser.add_argument("--turns", type=int, default=40, help="--chat-backends: turns each")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--requests", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve_profiled(args.serve, args.port, args.output, args.requests)
    else:
        turns = args.turns if args.chat_backends else None
        asyncio.run(main(args.calls, args.database, turns))
