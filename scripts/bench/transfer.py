"""Export and import of a 100,000-message session: `make bench` runs it (`run`), or
`python -m scripts.bench.transfer` alone.

A JSON Lines file of a chat session (the bench's real chat messages, a live summary per
thousand messages) is imported into a scratch SQLite database; then a clean process
(`probe`, so imports and earlier work do not hide the work measured) exports it to a file and
imports that file into a fresh SQLite database and a fresh PostgreSQL database, resetting the
kernel's peak-RSS mark before each step (`scripts/bench/rss.py`). A row per step: messages per
second, and the step's peak RSS above the process's idle RSS, which must stay within
`RSS_BUDGET_MIB` (MISSED otherwise); then `scripts.verify` must find every database clean and
the re-export must equal the export.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from api.db.engine import create_database, create_engine
from api.store.rows import UNBOUNDED
from api.transfer.export import export_session
from api.transfer.importer import import_session
from scripts.bench.lib import POSTGRES_ADMIN_URL, TENANT, Payloads
from scripts.bench.results import Results, RowOut
from scripts.bench.rss import reset_peak, status_kib
from scripts.move_tenant import digest_of
from tests.support.scratch_db import create_postgres_database, drop_postgres_database, migrate

MESSAGES = 100_000
"""The session's size: the issue's."""

SUMMARY_SPAN = 1000
"""Messages per summary of the generated file."""

RSS_BUDGET_MIB = 50
"""Most a step's peak RSS may rise above the process's idle RSS: the issue's bound."""

SESSION = "transfer-100k"
WARMUP = "transfer-warmup"
READ_BYTES = 1 << 16


# --- the file -------------------------------------------------------------------------------


def write_file(path: Path, session_id: str, messages: int, payloads: Payloads) -> None:
    """A session's export as the server would write it, generated line by line."""
    at = datetime(2026, 1, 1, tzinfo=UTC).isoformat().replace("+00:00", "Z")
    chats = [payloads.message(index) for index in range(messages)]
    pinned = next(
        (i for i, m in enumerate(chats) if m["role"] not in ("system", "developer")), messages
    )
    with path.open("w", encoding="utf-8") as file:
        line: dict[str, Any] = {
            "type": "session",
            "version": 1,
            "id": session_id,
            "metadata": {"bench": True},
            "settings": {},
            "format": "openai",
            "last_seq": messages,
            "pinned_seq": pinned,
            "removed_count": 0,
            "created_at": at,
            "updated_at": at,
            "forked_from": None,
            "fork_seq": None,
            "expires_at": None,
        }
        file.write(json.dumps(line, ensure_ascii=False) + "\n")
        for index, chat in enumerate(chats):
            line = {
                "type": "message",
                "seq": index + 1,
                "role": chat["role"],
                "content": chat["content"],
                "name": None,
                "tool_calls": None,
                "tool_call_id": None,
                "metadata": None,
                "client_id": f"c{index}",
                "token_count": payloads.tokens(index),
                "item": None,
                "created_at": at,
                "removed_at": None,
                "orphaned_at": None,
            }
            file.write(json.dumps(line, ensure_ascii=False) + "\n")
        starts = range(pinned + 1, messages + 1, SUMMARY_SPAN)
        ranges = [(first, min(first + SUMMARY_SPAN - 1, messages)) for first in starts]
        for ref, (first, last) in enumerate(reversed(ranges), start=1):
            line = {
                "type": "summary",
                "ref": ref,
                "first_seq": first,
                "last_seq": last,
                "covers": [[first, last]],
                "first_message_seq": first,
                "last_message_seq": last,
                "level": 0,
                "superseded_by": None,
                "summary_text": f"What was said in messages {first} to {last}.",
                "summary_prompt": "summarize",
                "model": "bench",
                "temperature": 0.0,
                "target_summary_tokens": 800,
                "keep_last_n": 0,
                "message_count": last - first + 1,
                "approx_tokens": 12,
                "first_message_at": at,
                "last_message_at": at,
                "metadata": {"algorithm": "bisect_v1"},
                "created_at": at,
                "erased_at": None,
            }
            file.write(json.dumps(line) + "\n")
        end = {"type": "end", "messages": messages, "summaries": len(ranges)}
        file.write(json.dumps(end) + "\n")


async def file_chunks(path: Path) -> AsyncIterator[bytes]:
    with path.open("rb") as file:
        while chunk := await asyncio.to_thread(file.read, READ_BYTES):
            yield chunk


async def import_file(url: str, path: Path) -> None:
    engine = create_engine(url)
    try:
        await import_session(
            create_database(engine), TENANT, file_chunks(path), UNBOUNDED, allowed_models=None
        )
    finally:
        await engine.dispose()


async def export_file(url: str, session_id: str, path: Path) -> None:
    engine = create_engine(url)
    try:
        with path.open("wb") as file:
            async for chunk in await export_session(create_database(engine), TENANT, session_id):
                await asyncio.to_thread(file.write, chunk)
    finally:
        await engine.dispose()


# --- the measured process -------------------------------------------------------------------


async def probe(source: str, targets: list[str], folder: Path) -> dict[str, Any]:
    """Export `SESSION` from `source`, then import the file into each of `targets`: per step
    its seconds and its peak RSS above the idle RSS, in KiB."""
    warm = folder / "warmup.jsonl"
    await export_file(source, WARMUP, warm)
    for target in targets:
        await import_file(target, warm)
    gc.collect()
    reset_peak()
    idle = status_kib("VmRSS")
    exported = folder / "export.jsonl"
    steps: list[dict[str, Any]] = []

    async def measured(name: str, work: Any) -> None:
        gc.collect()
        reset_peak()
        started = time.perf_counter()
        await work
        seconds = time.perf_counter() - started
        steps.append(
            {"step": name, "seconds": seconds, "peak_above_idle_kib": status_kib("VmHWM") - idle}
        )

    await measured("export", export_file(source, SESSION, exported))
    for target in targets:
        await measured(f"import:{target}", import_file(target, exported))
    return {"idle_rss_kib": idle, "steps": steps}


# --- the run --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    backend: str
    measure: str
    seconds: float
    peak_mib: float

    @property
    def met(self) -> bool:
        return self.peak_mib <= RSS_BUDGET_MIB


async def verified(url: str) -> bool:
    """`scripts.verify` over the whole database finds nothing."""
    command = [sys.executable, "-m", "scripts.verify", "--database-url", url]
    process = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE)
    output, _ = await process.communicate()
    print(f"  verify {url.split('://')[0]}: {output.decode().strip().splitlines()[-1]}")
    return process.returncode == 0


async def run(results: Results, backends: tuple[str, ...], admin_url: str, messages: int) -> None:
    """Measure, record a row per step into `results`, print MISSED for a step over budget."""
    with tempfile.TemporaryDirectory(prefix="precis-transfer-") as folder:
        work = Path(folder)
        source = f"sqlite+aiosqlite:///{work / 'source.db'}"
        targets: dict[str, str] = {}
        if "sqlite" in backends:
            targets["SQLite"] = f"sqlite+aiosqlite:///{work / 'target.db'}"
        if "postgresql" in backends:
            targets["PostgreSQL"] = await create_postgres_database(admin_url, "precis_bench")
        try:
            for url in (source, *targets.values()):
                await asyncio.to_thread(migrate, url)
            payloads = Payloads()
            await asyncio.to_thread(write_file, work / "warm.jsonl", WARMUP, 20, payloads)
            await asyncio.to_thread(write_file, work / "big.jsonl", SESSION, messages, payloads)
            await import_file(source, work / "warm.jsonl")
            await import_file(source, work / "big.jsonl")
            command = [sys.executable, "-m", "scripts.bench.transfer", "--probe", source]
            command += [*targets.values(), "--folder", folder]
            process = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE)
            output, _ = await process.communicate()
            if process.returncode != 0:
                raise RuntimeError("the transfer probe failed")
            measured = json.loads(output.decode().strip().splitlines()[-1])
            names = {url: name for name, url in targets.items()}
            steps = [
                Step(
                    "SQLite" if step["step"] == "export" else names[step["step"].split(":", 1)[1]],
                    step["step"].split(":", 1)[0],
                    step["seconds"],
                    step["peak_above_idle_kib"] / 1024,
                )
                for step in measured["steps"]
            ]
            clean = all([await verified(url) for url in (source, *targets.values())])
            sent = await _digest(source)
            same = all([await _digest(url) == sent for url in targets.values()])
        finally:
            if "PostgreSQL" in targets:
                await drop_postgres_database(admin_url, targets["PostgreSQL"])
    for step in steps:
        results.row(
            RowOut(
                backend=step.backend,
                section="transfer",
                measure=f"{step.measure} of a {messages:,}-message session",
                value=f"{messages / step.seconds:,.0f} msg/s ({step.seconds:.1f} s)",
                reference=f"peak RSS +{step.peak_mib:.1f} MiB over idle",
                ratio=None,
                target=f"peak <= idle + {RSS_BUDGET_MIB} MiB; verify clean",
                met=step.met and clean and same,
            )
        )
        if not step.met:
            print(
                f"MISSED: {step.measure} on {step.backend} peaked {step.peak_mib:.1f} MiB over idle"
            )
    results.measures["transfer"] = {
        "messages": messages,
        "idle_rss_kib": measured["idle_rss_kib"],
        "steps": measured["steps"],
        "verify_clean": clean,
        "reexport_equal": same,
    }
    if not clean:
        print("MISSED: scripts.verify found violations after the imports")
    if not same:
        print("MISSED: a re-export differs from the export")


async def _digest(url: str) -> str:
    engine = create_engine(url)
    try:
        return await digest_of(create_database(engine), TENANT, SESSION)
    finally:
        await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probe", nargs="+", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--backends", default="postgresql,sqlite")
    parser.add_argument("--messages", type=int, default=MESSAGES)
    parser.add_argument(
        "--postgres-admin-url",
        default=POSTGRES_ADMIN_URL,
    )
    args = parser.parse_args()
    if args.probe:
        source, *targets = args.probe
        print(json.dumps(asyncio.run(probe(source, targets, Path(args.folder)))))
        return
    results = Results()
    asyncio.run(
        run(results, tuple(args.backends.split(",")), args.postgres_admin_url, args.messages)
    )
    for row in results.rows:
        print(" | ".join(row.cells()))


if __name__ == "__main__":
    main()
