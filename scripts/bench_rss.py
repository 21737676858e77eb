"""Peak RSS of history loads in a clean process: `python -m scripts.bench_rss URL SESSION`.

Run by `scripts/bench.py` once per session size, so each number starts from the same imports.
Prints one JSON object: peak RSS before and after the loads, and the messages a load returned.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
from typing import Any

from api import service
from api.db.engine import create_engine, create_sessionmaker
from api.locks import SessionLocks
from api.settings import Settings
from api.summarization import Summarizer
from scripts.bench_lib import TENANT


def peak_rss_kib() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # KiB on Linux


async def probe(url: str, session: str, max_tokens: int | None, loads: int) -> dict[str, Any]:
    settings = Settings(_env_file=None, database_url=url, summary_workers=0)
    engine = create_engine(url)
    sessionmaker = create_sessionmaker(engine)
    summarizer = Summarizer(settings, sessionmaker, SessionLocks(engine))
    try:
        async with engine.connect():
            pass
        before = peak_rss_kib()
        returned = 0
        for _ in range(loads):
            async with sessionmaker() as db:
                history = await service.history(db, summarizer, TENANT, session, None, max_tokens)
                returned = len(history.messages)
        return {"peak_rss_kib_before": before, "peak_rss_kib": peak_rss_kib(), "messages": returned}
    finally:
        await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("session")
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument("--loads", type=int, default=20)
    args = parser.parse_args()
    result = asyncio.run(probe(args.url, args.session, args.max_tokens, args.loads))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
