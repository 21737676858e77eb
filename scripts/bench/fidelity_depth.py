"""Depth of the summaries: how many model passes a session's oldest facts go through, what that
costs them under a lossy model, and what removing one early message costs.

    python -m scripts.bench.fidelity_depth [--quick] [--output bench_fidelity_depth.json]
        [--baseline-commit SHA | --no-baseline]

Part of `make bench-fidelity` (`scripts.bench.fidelity` runs it and prints its rows). The app
runs in-process on a fresh, Alembic-migrated SQLite database, its summarizer pointed at the fake
of `tests/support/fake_llm.py` in `lossy_echo` mode: each call keeps each `MARKER-...` token it
reads with probability p (independently per call, by a hash of the marker and the call's
number, so runs repeat), so a fact that passed through d model calls survives with probability
p^d; p = 1 is the perfect-recall model. The service makes one model call at a time
(`summary_llm_concurrency` 1), so the calls are numbered alike and every run gives the same
figures (all but the times). The measurement reads only what the API shows (the loaded context, the
summaries and their links), whatever structure the summaries take.

A session of real chat messages (`scripts/bench/data/chat_messages.jsonl`, cycled by
`lib.Payloads`), each opening with its own marker, is appended `BATCH` messages at a time,
background summarization settling after each batch; the session's settings are
`message_limit` 20, `keep_last_n` 4, `summary_limit` 3, with `merge_target_tokens` raised so one
summary can hold every marker of the session (a fact is then lost by the model's passes, never by
its `max_tokens`). Rows: 600 and 3,000 messages at p 0.9, 0.95 and 1.0 (`--quick`: 600 messages
at 0.9 and 1.0). Per row:

- the share of the markers that the loaded context (`GET /history` without `max_tokens`) holds,
  by age quarter of the session's messages (oldest first);
- the deepest live summary: its `level`, its metadata `depth` when the service records one
  (else n/a), and the passes read from the links (a summary made from messages: 1 plus its
  bisect's depth; a roll-up: its merge's depth plus the most passes of what it absorbed);
- the leaf summaries (level 0, superseded ones included); the model calls and input tokens
  (prompt tokens as the fake counts them) in all and per leaf;
- the removal of the message at seq `REMOVED_SEQ` once the session is complete: the model calls
  and input tokens the background work it causes takes, the tokens also as a share of the
  session's raw message tokens (the sum of the messages' `token_count`), and the facts the
  loaded context keeps once it has settled (the mean of the quarters' shares, the removed
  message's marker not counted; informative, no target).

Targets are printed beside the figures (`MISSED` where one is missed): at p 0.9 and 600
messages, the oldest quarter keeps at least 45 %; in every row the deepest summary's depth (the
metadata's, else the passes) is at most ceil(log2(leaves)) + 2, and the removal takes at most
ceil(log2(leaves)) + `summary_limit` + 1 calls reading at most 40 % of the raw tokens; at p 1
every quarter keeps 100 %.

The same rows are measured in the same run on the service at an earlier commit
(`--baseline-commit`, by default the roll-up chain's; `scripts/bench/depth_baseline.py` runs that
commit's own copy of this script) and printed beside today's, a `structure` column naming each
(`--no-baseline`: today's rows only). The JSON holds them under `baseline`.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import json
import math
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from alembic import command

from scripts.bench.lib import Payloads, every_summary, in_process_app
from tests.support import scratch_db
from tests.support.fake_llm import MARKER_PATTERN, FakeLLM, running_fake_llm

ROWS: tuple[tuple[int, float], ...] = tuple(
    (messages, p) for messages in (600, 3_000) for p in (0.9, 0.95, 1.0)
)
"""(messages, keep probability) of each row."""
QUICK_ROWS: tuple[tuple[int, float], ...] = ((600, 0.9), (600, 1.0))

MESSAGE_LIMIT = 20
KEEP_LAST_N = 4
SUMMARY_LIMIT = 3
BATCH = 20
"""Messages appended at once; background summarization settles after each batch."""
REMOVED_SEQ = 30
"""The early message removed once the session is complete."""
MODEL_WINDOW = 128_000
"""The fake plays a 128k-token model, and the service knows its window (as litellm's model map
tells it for a real model): a large re-summarization is bisected as it would be in production."""
MARKER_LINE_TOKENS = 6
"""What one marker costs in an answer (`MARKER-d0042` and its newline, cl100k)."""
ANSWER_CAP_RATIO = 1.25
"""A summary's `max_tokens` over its target, as the summarizer asks (docs/summarization.md)."""
ROOM_MARGIN_TOKENS = 200
"""Tokens of `merge_target_tokens` beyond the markers (a `no markers` line, rounding)."""

QUARTERS = 4
TARGET_OLDEST_SHARE = 0.45
"""The oldest quarter's share at `TARGET_SHARE_AT` (messages, p)."""
TARGET_SHARE_AT = (600, 0.9)
TARGET_PERFECT_SHARE = 1.0
"""Every quarter's share at p 1."""
DEPTH_SLACK = 2
"""The deepest depth allowed over ceil(log2(leaves))."""
REMOVAL_CALLS_SLACK = 1
"""The removal's calls allowed over ceil(log2(leaves)) + `summary_limit`."""
TARGET_REMOVAL_SHARE = 0.40
"""The most of the session's raw tokens the removal's calls may read."""

POLL_SECONDS = 0.05
SETTLE_SECONDS = 600.0
"""Longest wait for background summarization to settle."""
QUIET_SECONDS = 0.3
"""A settled session must stay without pending work or model calls this long at the end."""

LOOPBACK_BASE_URL = "http://localhost"

BASE_SETTINGS: dict[str, Any] = {
    "summary_model": "openai/fake",
    "summary_api_key": "bench",
    "summary_model_context_tokens": MODEL_WINDOW,
    "summary_workers": 1,
    "summary_llm_max_attempts": 2,
    "summary_llm_backoff_seconds": 0.01,
    "summary_llm_timeout_seconds": 120.0,
    # One call at a time: `lossy_echo` numbers calls as they arrive, and a bisect's concurrent
    # halves would arrive in a different order from run to run.
    "summary_llm_concurrency": 1,
}


@dataclass
class DepthRow:
    """The figures of one session at one keep probability."""

    messages: int
    keep_probability: float
    quarter_shares: list[float]
    """The share of each age quarter's markers in the loaded context, oldest first."""
    deepest_level: int
    deepest_depth: int | None
    """The largest `depth` a live summary's metadata records (None when none records one)."""
    deepest_passes: int
    """The most model passes behind a live summary, read from the links."""
    leaves: int
    llm_calls: int
    """Calls the model received before the removal (failed ones included)."""
    failed_calls: int
    """Of every call received, removal included, those not answered 200."""
    input_tokens: int
    """Prompt tokens of the calls received before the removal, as the fake counts them."""
    raw_tokens: int
    removal_calls: int
    removal_input_tokens: int
    removal_quarter_shares: list[float]
    """`quarter_shares` once the removal has settled (the removed message's marker not
    counted): informative, no target."""
    unsettled_waits: int
    seconds: float
    """Appending the session and settling, measurement included."""
    removal_seconds: float
    summaries: int = 0
    """Summaries stored before the removal, superseded ones included."""

    @property
    def depth(self) -> int:
        """The depth the target reads: the metadata's, else the passes."""
        return self.deepest_depth if self.deepest_depth is not None else self.deepest_passes

    @property
    def depth_bound(self) -> int:
        return _log2_ceil(self.leaves) + DEPTH_SLACK

    @property
    def removal_calls_bound(self) -> int:
        return _log2_ceil(self.leaves) + SUMMARY_LIMIT + REMOVAL_CALLS_SLACK

    @property
    def kept_after_removal(self) -> float:
        """The mean of `removal_quarter_shares`."""
        return sum(self.removal_quarter_shares) / len(self.removal_quarter_shares)

    @property
    def removal_share(self) -> float:
        return self.removal_input_tokens / self.raw_tokens if self.raw_tokens else 0.0

    def missed(self) -> list[str]:
        misses = []
        at_target = (self.messages, self.keep_probability) == TARGET_SHARE_AT
        if at_target and self.quarter_shares[0] < TARGET_OLDEST_SHARE:
            misses.append("oldest quarter")
        if self.keep_probability == 1.0 and min(self.quarter_shares) < TARGET_PERFECT_SHARE:
            misses.append("perfect recall")
        if self.depth > self.depth_bound:
            misses.append("depth")
        if self.removal_calls > self.removal_calls_bound:
            misses.append("removal calls")
        if self.removal_share > TARGET_REMOVAL_SHARE:
            misses.append("removal tokens")
        return misses


def _log2_ceil(count: int) -> int:
    return math.ceil(math.log2(count)) if count > 1 else 0


# session ------------------------------------------------------------------------------------


def marker(index: int) -> str:
    return f"MARKER-d{index:04d}"


def session_messages(count: int) -> list[dict[str, str]]:
    """`count` real chat messages, each opening with its own marker (a fixed width, so no
    marker is the start of another, nor is one an answer clipped mid-marker)."""
    payloads = Payloads()
    messages = []
    for index in range(count):
        message = payloads.message(index)
        messages.append(
            {"role": message["role"], "content": f"{marker(index)} {message['content']}"}
        )
    return messages


def session_settings(count: int) -> dict[str, Any]:
    """The session's settings: room in one summary's answer for all its `count` markers."""
    return {
        "message_limit": MESSAGE_LIMIT,
        "keep_last_n": KEEP_LAST_N,
        "summary_limit": SUMMARY_LIMIT,
        "merge_target_tokens": math.ceil(count * MARKER_LINE_TOKENS / ANSWER_CAP_RATIO)
        + ROOM_MARGIN_TOKENS,
    }


def quarter_shares(
    context: list[Any], count: int, removed: frozenset[int] = frozenset()
) -> list[float]:
    """The share of each age quarter's markers that `context` holds, oldest first; the markers
    of the messages at indexes `removed` are not counted."""
    found = set(MARKER_PATTERN.findall(json.dumps(context, ensure_ascii=False)))
    shares = []
    for quarter in range(QUARTERS):
        indexes = [
            i
            for i in range(quarter * count // QUARTERS, (quarter + 1) * count // QUARTERS)
            if i not in removed
        ]
        shares.append(sum(marker(i) in found for i in indexes) / len(indexes) if indexes else 1.0)
    return shares


async def loaded_shares(
    http: httpx.AsyncClient, session: str, count: int, removed: frozenset[int] = frozenset()
) -> list[float]:
    """`quarter_shares` of the session's context loaded without `max_tokens`."""
    loaded = await http.get(f"/v1/sessions/{session}/history")
    loaded.raise_for_status()
    return quarter_shares(loaded.json()["context"], count, removed)


def passes(summaries: list[dict[str, Any]]) -> dict[int, int]:
    """The model passes behind each summary, from the links: one made from messages (a leaf, a
    repair, a re-make) took 1 plus its bisect's depth; a roll-up its merge's depth plus the most
    of what it absorbed (`superseded_by` it)."""
    absorbed: dict[int, list[int]] = {}
    for summary in summaries:
        if summary["superseded_by"] is not None:
            absorbed.setdefault(summary["superseded_by"], []).append(summary["id"])
    found: dict[int, int] = {}
    for summary in sorted(summaries, key=lambda s: s["id"]):  # what a roll-up absorbed is older
        metadata = summary["metadata"]
        own = int(metadata.get("max_depth") or 0)
        rollup = metadata.get("trigger_reason") == "rollup" and metadata.get("repair_of") is None
        inputs = absorbed.get(summary["id"], [])
        if rollup and inputs:
            found[summary["id"]] = own + max(found.get(i, 1) for i in inputs)
        else:
            found[summary["id"]] = 1 + own
    return found


# app ----------------------------------------------------------------------------------------


async def migrated_template(folder: Path) -> Path:
    """A migrated SQLite database in `folder`, copied for each run."""
    template = folder / "template.db"
    url = f"sqlite+aiosqlite:///{template}"
    await asyncio.to_thread(command.upgrade, scratch_db.alembic_config(url), "head")
    return template


async def pending(http: httpx.AsyncClient, session: str) -> bool:
    answer = await http.get(f"/v1/sessions/{session}/history")
    answer.raise_for_status()
    return bool(answer.json()["summarization_pending"])


async def settle(http: httpx.AsyncClient, session: str, fake: FakeLLM, quiet: float) -> bool:
    """Wait until no summarization is pending and, for `quiet` seconds, none has started and
    the model got no call; False when `SETTLE_SECONDS` ran out first."""
    deadline = time.monotonic() + SETTLE_SECONDS
    calm_since: float | None = None
    calls = len(fake.calls)
    while time.monotonic() < deadline:
        now = time.monotonic()
        if await pending(http, session) or len(fake.calls) != calls:
            calm_since, calls = None, len(fake.calls)
        elif calm_since is None:
            calm_since = now
        if calm_since is not None and now - calm_since >= quiet:
            return True
        await asyncio.sleep(POLL_SECONDS)
    return False


# runs ---------------------------------------------------------------------------------------


async def measure(count: int, probability: float, template: Path, folder: Path) -> DepthRow:
    """Append a `count`-message session batch by batch at keep probability `probability`,
    measure its loaded context and summaries, then remove the message at `REMOVED_SEQ`."""
    if count < REMOVED_SEQ:
        raise ValueError(f"a session of {count} messages has no seq {REMOVED_SEQ} to remove")
    started = time.perf_counter()
    session = f"depth-{count}-{probability}"
    messages = session_messages(count)
    unsettled = 0
    with running_fake_llm(
        mode="lossy_echo", keep_probability=probability, context_window=MODEL_WINDOW
    ) as fake:
        async with in_process_app(
            template, folder, summary_api_base=fake.base_url, **BASE_SETTINGS
        ) as http:
            # Development mode serves only requests addressed to loopback; `in_process_app`
            # names its host `bench`.
            http.base_url = httpx.URL(LOOPBACK_BASE_URL)
            created = await http.post(
                "/v1/sessions", json={"id": session, "settings": session_settings(count)}
            )
            if created.status_code != 201:
                raise RuntimeError(f"create {session}: {created.text}")
            ids: dict[int, int] = {}
            raw_tokens = 0
            for start in range(0, count, BATCH):
                answer = await http.post(
                    f"/v1/sessions/{session}/messages",
                    json={"messages": messages[start : start + BATCH]},
                )
                if answer.status_code != 201:
                    raise RuntimeError(f"append to {session}: {answer.text}")
                for stored in answer.json()["messages"]:
                    ids[stored["seq"]] = stored["id"]
                    raw_tokens += stored["token_count"]
                unsettled += not await settle(http, session, fake, 0.0)
            unsettled += not await settle(http, session, fake, QUIET_SECONDS)
            shares = await loaded_shares(http, session, count)
            stored_summaries = await every_summary(http, session)
            calls, tokens = len(fake.calls), fake.prompt_tokens_received()
            seconds = time.perf_counter() - started

            removal_started = time.perf_counter()
            removed = await http.delete(f"/v1/sessions/{session}/messages/{ids[REMOVED_SEQ]}")
            removed.raise_for_status()
            unsettled += not await settle(http, session, fake, QUIET_SECONDS)
            removal_seconds = time.perf_counter() - removal_started
            removal_calls = len(fake.calls) - calls
            removal_tokens = fake.prompt_tokens_received() - tokens
            # seq n holds the marker of index n - 1: the session has no pinned prefix
            after = await loaded_shares(http, session, count, frozenset({REMOVED_SEQ - 1}))
            failed = sum(call.status != 200 for call in fake.calls)
    live = [s for s in stored_summaries if s["superseded_by"] is None and s["erased_at"] is None]
    depths = [int(s["metadata"]["depth"]) for s in live if s["metadata"].get("depth") is not None]
    behind = passes(stored_summaries)
    return DepthRow(
        messages=count,
        keep_probability=probability,
        quarter_shares=shares,
        deepest_level=max((s["level"] for s in live), default=0),
        deepest_depth=max(depths) if depths else None,
        deepest_passes=max((behind[s["id"]] for s in live), default=0),
        leaves=sum(s["level"] == 0 for s in stored_summaries),
        llm_calls=calls,
        failed_calls=failed,
        input_tokens=tokens,
        raw_tokens=raw_tokens,
        removal_calls=removal_calls,
        removal_input_tokens=removal_tokens,
        removal_quarter_shares=after,
        unsettled_waits=unsettled,
        seconds=seconds,
        removal_seconds=removal_seconds,
        summaries=len(stored_summaries),
    )


async def run(rows: tuple[tuple[int, float], ...]) -> list[DepthRow]:
    """Measure each (messages, keep probability) of `rows`, each on a fresh database."""
    measured = []
    with tempfile.TemporaryDirectory(prefix="bench-depth-") as tmp:
        folder = Path(tmp)
        template = await migrated_template(folder)
        for count, probability in rows:
            row = await measure(count, probability, template, folder)
            print(
                f"depth {count} messages p={probability}: quarters "
                + " / ".join(f"{share:.1%}" for share in row.quarter_shares)
                + f", level {row.deepest_level}, {row.llm_calls} calls, "
                f"{row.seconds:.1f} s + removal {row.removal_seconds:.1f} s",
                flush=True,
            )
            measured.append(row)
    return measured


# report -------------------------------------------------------------------------------------


def render(rows: list[DepthRow], structures: list[str] | None = None) -> str:
    """The rows as a Markdown table; with `structures` (one per row), a `structure` column."""
    labels = structures or [""] * len(rows)
    column, align = ("structure | ", "---|") if structures else ("", "")
    lines = [
        f"| depth: messages | p | {column}oldest quarter | 2nd | 3rd | newest quarter "
        "| deepest live: level, depth, passes | leaves | llm calls (per leaf) "
        "| input tokens (per leaf) | removal: calls | removal: input tokens (% of raw) "
        "| after removal: facts kept | unsettled waits | s (removal) | missed |",
        f"|---:|---:|{align}---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for label, row in zip(labels, rows, strict=True):
        leaves = max(row.leaves, 1)
        depth = "n/a" if row.deepest_depth is None else str(row.deepest_depth)
        missed = ", ".join(row.missed())
        failed = f", {row.failed_calls} failed" if row.failed_calls else ""
        lines.append(
            f"| {row.messages:,} | {row.keep_probability:g} | {label + ' | ' if column else ''}"
            + " | ".join(f"{share:.1%}" for share in row.quarter_shares)
            + f" | {row.deepest_level}, {depth}, {row.deepest_passes} (<= {row.depth_bound}) "
            f"| {row.leaves} | {row.llm_calls:,} ({row.llm_calls / leaves:.2f}{failed}) "
            f"| {row.input_tokens:,} ({row.input_tokens / leaves:,.0f}) "
            f"| {row.removal_calls} (<= {row.removal_calls_bound}) "
            f"| {row.removal_input_tokens:,} ({row.removal_share:.1%}) "
            f"| {row.kept_after_removal:.1%} "
            f"| {row.unsettled_waits} | {row.seconds:.0f} ({row.removal_seconds:.0f}) "
            f"| {'MISSED: ' + missed if missed else ''} |"
        )
    lines.append(
        f"| targets | | {'| ' if column else ''}>= {TARGET_OLDEST_SHARE:.0%} at "
        f"{TARGET_SHARE_AT[0]:,} messages, p {TARGET_SHARE_AT[1]:g}; 100% at p 1 | 100% at p 1 "
        f"| 100% at p 1 | 100% at p 1 | depth <= ceil(log2(leaves)) + {DEPTH_SLACK} | | | "
        f"| <= ceil(log2(leaves)) + {SUMMARY_LIMIT} + {REMOVAL_CALLS_SLACK} "
        f"| <= {TARGET_REMOVAL_SHARE:.0%} | | | | |"
    )
    return "\n".join(lines)


def targets() -> dict[str, Any]:
    return {
        "oldest_quarter_share_min": TARGET_OLDEST_SHARE,
        "oldest_quarter_share_at": {"messages": TARGET_SHARE_AT[0], "p": TARGET_SHARE_AT[1]},
        "perfect_recall_share": TARGET_PERFECT_SHARE,
        "depth_max": f"ceil(log2(leaves)) + {DEPTH_SLACK}",
        "removal_calls_max": f"ceil(log2(leaves)) + {SUMMARY_LIMIT} + {REMOVAL_CALLS_SLACK}",
        "removal_raw_token_share_max": TARGET_REMOVAL_SHARE,
    }


def report(rows: list[DepthRow]) -> list[dict[str, Any]]:
    return [
        {
            **asdict(row),
            "depth_bound": row.depth_bound,
            "removal_calls_bound": row.removal_calls_bound,
            "removal_raw_token_share": row.removal_share,
            "kept_after_removal": row.kept_after_removal,
            "missed": row.missed(),
        }
        for row in rows
    ]


def main() -> None:
    # imported here: depth_baseline builds on this module
    from scripts.bench import depth_baseline

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="600 messages at p 0.9 and 1 only")
    parser.add_argument("--output", type=Path, default=Path("bench_fidelity_depth.json"))
    parser.add_argument(
        "--baseline-commit",
        default=depth_baseline.BASELINE_COMMIT,
        help="the commit whose rows are measured beside today's (default: the roll-up chain's)",
    )
    parser.add_argument("--no-baseline", action="store_true", help="today's rows only")
    args = parser.parse_args()
    rows = asyncio.run(run(QUICK_ROWS if args.quick else ROWS))
    body: dict[str, Any] = {"targets": targets(), "rows": report(rows)}
    print()
    if args.no_baseline:
        print(render(rows))
    else:
        baseline = depth_baseline.measure(args.baseline_commit, args.quick)
        print()
        print(depth_baseline.side_by_side(baseline, rows))
        body["baseline"] = depth_baseline.baseline_report(baseline)
    output: Path = args.output
    output.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {output}")


if __name__ == "__main__":
    main()
