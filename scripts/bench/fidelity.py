"""Benchmark the fidelity of the service's summaries with a perfect-recall fake model.

    python -m scripts.bench.fidelity [--quick] [--output bench_fidelity.json]

The app runs in-process (ASGI) on a fresh, Alembic-migrated SQLite database, its summarizer
pointed at the loopback fake LLM of `tests/support/fake_llm.py` in `marker_echo` mode: the model
repeats every `MARKER-...` token of its prompt, so a summary loses a fact only when the
service drops it (or the model's `max_tokens` clips it). Every message carries a unique
marker; the session is replayed one message at a time and, after every user message (once
background summarization has settled, or its job has made no call for a second: a job deferred
during an outage waits out a backoff), the share of the markers appended so far that
appear in the loaded `context` is measured.

Scenarios, at summarizer windows of 1.5k, 3k, 8k and 128k tokens (`--quick`: 1.5k and 128k
only), each with and without an outage (the model answers 503 for the middle third of the
turns, then comes back; the outage is replayed once more with summarization off, the floor its
lowest share during the outage must not go below):

- `sharegpt`: three conversations of `tests/fixtures/sharegpt_multilang.jsonl`, one session
  each, every message clipped to 600 characters;
- `tools`: a synthetic 60-message session of questions, tool calls, tool results and answers.

Per row: the lowest and the final fact share, the fallback summaries still live once the
model is back and background work has settled, the LLM calls made against a lower bound
(per stored summary, superseded ones included: one call per leaf chunk and one per merge;
none for a fallback) and their ratio. A last `hang` row times
`GET /history?max_tokens=1500` at window 8k while the model hangs, against the inline
deadline (2 s) plus one second. Then `tool-heavy` rows (`scripts/bench/fidelity_tools.py`:
an agent session with tool-result clearing off and on), then `responses` rows
(`scripts/bench/fidelity_responses.py`): a 200-turn conversation driven through
`POST /v1/responses` with `conversation` and as a `previous_response_id` chain, at model
windows of 4k and 16k (`--quick`: 4k), every fact checked in every request the model
receives, then `wires` rows (`scripts/bench/fidelity_wires.py`: the
same conversation resent whole every turn through `POST /v1/chat/completions` and
`POST /v1/messages` at a 16k window, also with a model counting 1.5x cl100k's tokens; `--quick`:
the window-bound rows only), then `depth` rows (`scripts/bench/fidelity_depth.py`: sessions
of 600 and 3,000 messages under a lossy model, the facts kept by age quarter, the deepest
summary and what removing an early message costs; `--quick`: 600 messages), each beside the
same row measured in the same run on the roll-up chain's commit
(`scripts/bench/depth_baseline.py`). Targets are printed beside the figures, with `MISSED` where
one is missed; the exit status is 0 unless the run itself fails. The results are also written as
JSON to `bench_fidelity.json` (or `--output`).
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import json
import tempfile
import threading
import time
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from alembic import command

from scripts.bench import (
    depth_baseline,
    fidelity_depth,
    fidelity_responses,
    fidelity_tools,
    fidelity_wires,
)
from scripts.bench.lib import in_process_app
from tests.support import scratch_db
from tests.support.fake_llm import FakeLLM, running_fake_llm

FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "sharegpt_multilang.jsonl"
WINDOWS = (1_500, 3_000, 8_000, 128_000)
QUICK_WINDOWS = (1_500, 128_000)
QUICK_RESPONSES_WINDOWS = (4_000,)
CONVERSATIONS = 3
MAX_CONTENT_CHARS = 600
TOOL_MESSAGES = 60
POLL_SECONDS = 0.05
SETTLE_SECONDS = 30.0
"""Longest wait for `summarization_pending` to clear before a measurement."""
QUIET_SECONDS = 1.0
"""A pending summarization that has not called the model for this long is waiting out a
backoff (deferred while the model is down): the measurement does not wait for it."""

HANG_WINDOW = 8_000
HANG_DEADLINE_SECONDS = 2.0
HANG_MESSAGES = 40
HANG_MAX_TOKENS = 1_500
HANG_SECONDS = 30.0

TARGET_SHARE = 1.0
TARGET_FALLBACKS = 0
TARGET_RATIO = 1.5
HANG_SLACK_SECONDS = 1.0

BASE_SETTINGS: dict[str, Any] = {
    "summary_model": "openai/fake",
    "summary_api_key": "test",
    "summary_message_limit": 12,
    "summary_keep_last_n": 4,
    "summary_workers": 1,
    "summary_llm_max_attempts": 2,
    "summary_llm_backoff_seconds": 0.01,
    "summary_llm_timeout_seconds": 5.0,
    "summary_repair_interval_seconds": 0.5,
}

Message = dict[str, Any]


@dataclass(frozen=True)
class Session:
    """One session to replay: its id, its messages and the marker each message carries."""

    id: str
    messages: list[Message]
    markers: list[str | None]


@dataclass
class Row:
    scenario: str
    window: int
    outage: bool
    min_share: float
    final_share: float
    fallbacks_live: int
    llm_calls: int
    """Calls the model answered; the ones it failed during the outage are `failed_calls`."""
    failed_calls: int
    lower_bound: int
    ratio: float | None
    unsettled_waits: int
    seconds: float
    outage_share: float | None = None
    """The lowest fact share measured while the model was down (None without an outage)."""
    off_outage_share: float | None = None
    """The same with summarization off (`dynamic_summary_enabled: false`): what doing nothing
    keeps, the floor an outage must not go below."""

    def missed(self) -> list[str]:
        misses = []
        if (
            self.outage_share is not None
            and self.off_outage_share is not None
            and self.outage_share < self.off_outage_share
        ):
            misses.append("outage below off")
        if self.min_share < TARGET_SHARE:
            misses.append("min share")
        if self.final_share < TARGET_SHARE:
            misses.append("final share")
        if self.fallbacks_live > TARGET_FALLBACKS:
            misses.append("fallbacks")
        if self.ratio is None or self.ratio > TARGET_RATIO:
            misses.append("ratio")
        return misses


@dataclass
class HangRow:
    window: int
    deadline_seconds: float
    load_seconds: float
    status: int
    token_estimate: int | None

    @property
    def target_seconds(self) -> float:
        return self.deadline_seconds + HANG_SLACK_SECONDS

    def missed(self) -> bool:
        return self.status != 200 or self.load_seconds >= self.target_seconds


# sessions -----------------------------------------------------------------------------------


def sharegpt_sessions() -> list[Session]:
    """The first conversations of the fixture, a marker at the start of every message."""
    sessions = []
    with FIXTURE.open(encoding="utf-8") as lines:
        for conv, line in enumerate(lines):
            if conv >= CONVERSATIONS:
                break
            messages: list[Message] = []
            markers: list[str | None] = []
            for i, source in enumerate(json.loads(line)["messages"]):
                marker = f"MARKER-c{conv}m{i}"
                content = f"{marker} {source['content']}"[:MAX_CONTENT_CHARS]
                messages.append({"role": source["role"], "content": content})
                markers.append(marker)
            sessions.append(Session(f"sharegpt-{conv}", messages, markers))
    return sessions


def tools_session() -> Session:
    """Question, tool call, tool result, answer, repeated; markers in questions and results."""
    messages: list[Message] = []
    markers: list[str | None] = []
    for turn in range(TOOL_MESSAGES // 4):
        call_id = f"call_{turn}"
        asked, found = f"MARKER-t{turn}q", f"MARKER-t{turn}r"
        messages += [
            {"role": "user", "content": f"{asked} Look up the status of order {turn}, please."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "lookup", "arguments": "{}"},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": f"{found} order {turn}: shipped, "
                + " ".join(f"field{k}=value{k}" for k in range(20)),
            },
            {"role": "assistant", "content": f"Order {turn} has shipped."},
        ]
        markers += [asked, None, found, None]
    return Session("tools", messages, markers)


# app ----------------------------------------------------------------------------------------


def running_app(
    template: Path, folder: Path, fake: FakeLLM, **overrides: Any
) -> AbstractAsyncContextManager[httpx.AsyncClient]:
    """An app on a fresh copy of the migrated database, summarizing with `fake`."""
    return in_process_app(
        template, folder, summary_api_base=fake.base_url, **{**BASE_SETTINGS, **overrides}
    )


async def history(http: httpx.AsyncClient, session: str) -> dict[str, Any]:
    answer = await http.get(f"/v1/sessions/{session}/history")
    answer.raise_for_status()
    body: dict[str, Any] = answer.json()
    return body


async def settled_history(
    http: httpx.AsyncClient, session: str, fake: FakeLLM
) -> tuple[dict[str, Any], bool]:
    """The history once `summarization_pending` is false, or the pending job has made no model
    call for `QUIET_SECONDS` (or the wait ran out): (body, settled)."""
    started = time.monotonic()
    calls, quiet_since = len(fake.calls), started
    while True:
        body = await history(http, session)
        if not body["summarization_pending"]:
            return body, True
        now = time.monotonic()
        if len(fake.calls) != calls:
            calls, quiet_since = len(fake.calls), now
        if now - quiet_since >= QUIET_SECONDS or now - started >= SETTLE_SECONDS:
            return body, False
        await asyncio.sleep(POLL_SECONDS)


async def summaries(http: httpx.AsyncClient, session: str, superseded: bool) -> list[Any]:
    found: list[Any] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"include_superseded": superseded, "limit": 1000}
        if cursor is not None:
            params["cursor"] = cursor
        answer = await http.get(f"/v1/sessions/{session}/summaries", params=params)
        answer.raise_for_status()
        body = answer.json()
        found += body["summaries"]
        cursor = body["next_cursor"]
        if cursor is None:
            return found


def least_calls(summary: dict[str, Any]) -> int:
    """Calls a summary needs at the least: one per leaf chunk and one per merge of two.

    A fallback needed none (the calls it made all failed). A repair summarizes the source
    messages again, whatever it repairs (a roll-up too): its chunks are leaves."""
    metadata = summary["metadata"]
    if metadata.get("fallback"):
        return 0
    chunks = int(metadata.get("chunk_count") or 1)
    merged = metadata.get("trigger_reason") == "rollup" and metadata.get("repair_of") is None
    return chunks - 1 if merged else 2 * chunks - 1


async def repaired(http: httpx.AsyncClient, session: str) -> list[Any]:
    """The live summaries once no fallback is left among them (or the wait ran out)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        live = await summaries(http, session, superseded=False)
        if all(s["model"] != "fallback" for s in live) or time.monotonic() >= deadline:
            return live
        await asyncio.sleep(POLL_SECONDS)


def share(context: list[Any], markers: list[str]) -> float:
    if not markers:
        return 1.0
    text = json.dumps(context, ensure_ascii=False)
    return sum(marker in text for marker in markers) / len(markers)


# runs ---------------------------------------------------------------------------------------


async def replay(
    scenario: str,
    sessions: list[Session],
    window: int,
    outage: bool,
    template: Path,
    folder: Path,
    summarize: bool = True,
) -> Row:
    """Replay `sessions` message by message, measuring the fact share after every user turn;
    with `summarize` false, on a server with summarization off."""
    started = time.perf_counter()
    users = sum(m["role"] == "user" for s in sessions for m in s.messages)
    outage_turns = range(users // 3, 2 * users // 3) if outage else range(0)
    shares: list[float] = []
    during_outage: list[float] = []
    unsettled = 0
    with running_fake_llm(mode="marker_echo", context_window=window) as fake:
        async with running_app(
            template,
            folder,
            fake,
            summary_model_context_tokens=window,
            dynamic_summary_enabled=summarize,
        ) as http:
            turn = 0
            for session in sessions:
                seen: list[str] = []
                for message, marker in zip(session.messages, session.markers, strict=True):
                    if message["role"] == "user":
                        fake.fail_always(503 if turn in outage_turns else None)
                    answer = await http.post(
                        f"/v1/sessions/{session.id}/messages", json={"messages": [message]}
                    )
                    if answer.status_code != 201:
                        raise RuntimeError(f"append to {session.id}: {answer.text}")
                    if marker is not None:
                        seen.append(marker)
                    if message["role"] == "user":
                        body, settled = await settled_history(http, session.id, fake)
                        unsettled += not settled
                        shares.append(share(body["context"], seen))
                        if turn in outage_turns:
                            during_outage.append(shares[-1])
                        turn += 1
            fake.fail_always(None)
            final_found = final_total = fallbacks = stored = 0
            for session in sessions:
                live = await repaired(http, session.id)
                fallbacks += sum(s["model"] == "fallback" for s in live)
                body, settled = await settled_history(http, session.id, fake)
                unsettled += not settled
                markers = [m for m in session.markers if m is not None]
                final_found += round(share(body["context"], markers) * len(markers))
                final_total += len(markers)
                every = await summaries(http, session.id, superseded=True)
                stored += sum(least_calls(summary) for summary in every)
            calls = sum(call.status == 200 for call in fake.calls)
            failed_calls = len(fake.calls) - calls
    return Row(
        scenario=scenario,
        window=window,
        outage=outage,
        min_share=min(shares, default=1.0),
        final_share=final_found / final_total if final_total else 1.0,
        fallbacks_live=fallbacks,
        llm_calls=calls,
        failed_calls=failed_calls,
        lower_bound=stored,
        ratio=calls / stored if stored else None,
        unsettled_waits=unsettled,
        seconds=time.perf_counter() - started,
        outage_share=min(during_outage) if during_outage else None,
    )


async def hang(template: Path, folder: Path) -> HangRow:
    """Time a budgeted history load at window 8k while every model call hangs."""
    release = threading.Event()

    def responder(messages: list[Message]) -> str:
        release.wait(HANG_SECONDS)
        return "A late summary."

    with running_fake_llm(context_window=HANG_WINDOW) as fake:
        async with running_app(
            template,
            folder,
            fake,
            summary_model_context_tokens=HANG_WINDOW,
            summary_message_limit=10_000,
            summary_inline_deadline_seconds=HANG_DEADLINE_SECONDS,
        ) as http:
            messages = [
                {
                    "role": "user" if i % 2 == 0 else "assistant",
                    "content": f"MARKER-h{i} " + " ".join(f"word{i}x{k}" for k in range(120)),
                }
                for i in range(HANG_MESSAGES)
            ]
            answer = await http.post("/v1/sessions/hang/messages", json={"messages": messages})
            if answer.status_code != 201:
                raise RuntimeError(f"append to hang: {answer.text}")
            fake.responder = responder
            try:
                started = time.perf_counter()
                loaded = await http.get(
                    "/v1/sessions/hang/history", params={"max_tokens": HANG_MAX_TOKENS}
                )
                elapsed = time.perf_counter() - started
            finally:
                release.set()
    estimate = loaded.json().get("token_estimate") if loaded.status_code == 200 else None
    return HangRow(HANG_WINDOW, HANG_DEADLINE_SECONDS, elapsed, loaded.status_code, estimate)


# report -------------------------------------------------------------------------------------


def percent(value: float) -> str:
    return f"{value:.1%}"


def render(rows: list[Row], hang_row: HangRow) -> str:
    lines = [
        "| scenario | window | outage | min fact share | final fact share | fallbacks live "
        "| llm calls | lower bound | ratio | outage min: on / off | unsettled waits | s | missed |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for row in rows:
        ratio = f"{row.ratio:.2f}" if row.ratio is not None else "—"
        versus = (
            f"{percent(row.outage_share)} / {percent(row.off_outage_share)}"
            if row.outage_share is not None and row.off_outage_share is not None
            else ""
        )
        missed = ", ".join(row.missed())
        lines.append(
            f"| {row.scenario} | {row.window:,} | {'yes' if row.outage else 'no'} "
            f"| {percent(row.min_share)} | {percent(row.final_share)} | {row.fallbacks_live} "
            f"| {row.llm_calls} ({row.failed_calls} failed) | {row.lower_bound} | {ratio} "
            f"| {versus} | {row.unsettled_waits} "
            f"| {row.seconds:.1f} | {'MISSED: ' + missed if missed else ''} |"
        )
    lines.append(
        f"| targets | | | {percent(TARGET_SHARE)} | {percent(TARGET_SHARE)} | {TARGET_FALLBACKS} "
        f"| | | <= {TARGET_RATIO} | on >= off | | | |"
    )
    lines += [
        "",
        f"hang: window {hang_row.window:,}, GET /history?max_tokens={HANG_MAX_TOKENS} while the "
        f"model hangs: {hang_row.load_seconds:.2f} s (status {hang_row.status}, "
        f"token_estimate {hang_row.token_estimate}); target < {hang_row.target_seconds:.1f} s "
        f"(inline deadline {hang_row.deadline_seconds:.1f} s + {HANG_SLACK_SECONDS:.0f} s)"
        + ("  MISSED" if hang_row.missed() else ""),
    ]
    return "\n".join(lines)


async def main_async(windows: tuple[int, ...]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-fidelity-") as tmp:
        folder = Path(tmp)
        template = folder / "template.db"
        url = f"sqlite+aiosqlite:///{template}"
        await asyncio.to_thread(command.upgrade, scratch_db.alembic_config(url), "head")
        scenarios = [("sharegpt", sharegpt_sessions()), ("tools", [tools_session()])]
        rows: list[Row] = []
        for name, sessions in scenarios:
            # Without summarization no model is called: the window changes nothing, one run
            # gives the floor of every outage row of the scenario.
            off = await replay(name, sessions, windows[0], True, template, folder, summarize=False)
            print(f"{name} summarization off: outage min {percent(off.outage_share or 0)}")
            for window in windows:
                for outage in (False, True):
                    row = await replay(name, sessions, window, outage, template, folder)
                    if outage:
                        row.off_outage_share = off.outage_share
                    print(
                        f"{name} window={window} outage={outage}: min {percent(row.min_share)}, "
                        f"final {percent(row.final_share)}, {row.seconds:.1f} s",
                        flush=True,
                    )
                    rows.append(row)
        hang_row = await hang(template, folder)
    quick = windows == QUICK_WINDOWS
    tools_rows = await fidelity_tools.run(
        fidelity_tools.QUICK_WINDOWS if quick else fidelity_tools.WINDOWS,
        fidelity_tools.QUICK_FORMATS if quick else fidelity_tools.FORMATS,
    )
    responses_rows = await fidelity_responses.run(
        QUICK_RESPONSES_WINDOWS if quick else fidelity_responses.WINDOWS,
        fidelity_responses.TURNS,
    )
    wire_rows = await fidelity_wires.run(
        limits=fidelity_wires.QUICK_LIMITS if quick else fidelity_wires.LIMITS
    )
    depth_rows = await fidelity_depth.run(
        fidelity_depth.QUICK_ROWS if quick else fidelity_depth.ROWS
    )
    baseline = await asyncio.to_thread(
        depth_baseline.measure, depth_baseline.BASELINE_COMMIT, quick
    )
    print()
    print(render(rows, hang_row))
    print()
    print(fidelity_tools.render(tools_rows))
    print()
    print(fidelity_responses.render(responses_rows))
    print()
    print(fidelity_wires.render(wire_rows))
    print()
    print(depth_baseline.side_by_side(baseline, depth_rows))
    report: dict[str, Any] = {
        "targets": {
            "fact_share": TARGET_SHARE,
            "fallbacks_live": TARGET_FALLBACKS,
            "calls_ratio_max": TARGET_RATIO,
            "hang_load_seconds_max": hang_row.target_seconds,
            "tool_heavy_saving_min": fidelity_tools.TARGET_SAVING,
        },
        "rows": [{**asdict(row), "missed": row.missed()} for row in rows],
        "hang": {**asdict(hang_row), "target_seconds": hang_row.target_seconds},
    }
    report["hang"]["missed"] = hang_row.missed()
    report["tool_heavy"] = fidelity_tools.report(tools_rows)
    report["responses"] = [{**asdict(row), "missed": row.missed()} for row in responses_rows]
    report["wires"] = fidelity_wires.report(wire_rows)
    report["depth"] = {
        "targets": fidelity_depth.targets(),
        "rows": fidelity_depth.report(depth_rows),
        "baseline": depth_baseline.baseline_report(baseline),
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="windows 1.5k and 128k only")
    parser.add_argument("--output", type=Path, default=Path("bench_fidelity.json"))
    args = parser.parse_args()
    report = asyncio.run(main_async(QUICK_WINDOWS if args.quick else WINDOWS))
    output: Path = args.output
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {output}")


if __name__ == "__main__":
    main()
