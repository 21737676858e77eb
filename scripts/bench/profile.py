"""Where the hot paths spend their time: pyinstrument over the service's append and history
load, at the store (`store_batch`, `load_rows`) and through the app in process (FastAPI,
pydantic, no socket).

Run with `make profile` (the bench virtualenv, which has pyinstrument; PostgreSQL) or
`make profile PROFILE_ARGS="--database sqlite"`. A scratch database is created and dropped;
`PRECIS_BENCH_POSTGRES_URL` points the PostgreSQL one elsewhere. The profiler samples the
event loop's thread: time SQLite spends in aiosqlite's thread shows as waiting.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from collections.abc import Awaitable, Callable

import httpx
from pyinstrument import Profiler

from api import store
from api.appending import store_batch
from api.db.engine import create_engine, create_read_sessionmaker, create_sessionmaker
from api.db.transactions import Database
from api.main import create_app
from api.settings import Settings
from scripts.bench.scratch_db import create_postgres_database, drop_postgres_database, migrate

ADMIN_URL = os.environ.get(
    "PRECIS_BENCH_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
)
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


async def main(calls: int, database: str) -> None:
    if database == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            await profile_all(f"sqlite+aiosqlite:///{folder}/profile.db", calls)
        return
    url = await create_postgres_database(ADMIN_URL, "precis_profile")
    try:
        await profile_all(url, calls)
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000, help="profiled calls per path")
    parser.add_argument("--database", choices=["postgresql", "sqlite"], default="postgresql")
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.database))
