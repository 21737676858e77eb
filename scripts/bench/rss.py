"""Peak RSS of history loads in a clean process: `python -m scripts.bench.rss URL SESSION`.

Run by `scripts/bench/load_rows.py` once per session size, so each number starts from the same
imports.
After a warm-up load of another (small) session, since the tokenizer and the statement
caches load lazily, the kernel's peak-RSS mark is reset (`/proc/self/clear_refs`), so the
peak is that of the measured session's loads alone, the first one included;
`ru_maxrss` cannot be used, since a child starts with its parent's peak. Prints one JSON
object: resident memory before the loads, the peak during them, the messages a load returned.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from api import history_load
from api.db.engine import create_database, create_engine, create_sessionmaker
from api.locks import SessionLocks
from api.settings import Settings
from api.summarization import Summarization
from scripts.bench.lib import TENANT


def status_kib(field: str) -> int:
    """A memory line of /proc/self/status (`VmRSS`, `VmHWM`), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak() -> None:
    """Reset the peak-RSS mark (VmHWM) to the current RSS (Linux 4.0+)."""
    Path("/proc/self/clear_refs").write_text("5")


async def probe(
    url: str, session: str, warmup: str, max_tokens: int | None, loads: int
) -> dict[str, Any]:
    settings = Settings(_env_file=None, database_url=url, summary_workers=0)
    engine = create_engine(url)
    sessionmaker = create_sessionmaker(engine)
    database = create_database(engine)
    summarization = Summarization(settings, database, SessionLocks(database))
    try:
        async with sessionmaker() as db:
            await history_load.fitted_context(db, summarization, TENANT, warmup, None, max_tokens)
        reset_peak()
        before = status_kib("VmRSS")
        returned = 0
        for _ in range(loads):
            async with sessionmaker() as db:
                loaded = await history_load.fitted_context(
                    db, summarization, TENANT, session, None, max_tokens
                )
                history = loaded.history()
                returned = len(history.messages)
                del history
        return {"rss_kib_before": before, "peak_rss_kib": status_kib("VmHWM"), "messages": returned}
    finally:
        await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("session")
    parser.add_argument("--warmup", required=True, help="a small session to load first")
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument("--loads", type=int, default=20)
    args = parser.parse_args()
    result = asyncio.run(probe(args.url, args.session, args.warmup, args.max_tokens, args.loads))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
