"""Tool-heavy agent sessions with tool-result clearing off and on: context size, summarization
cost and the facts kept.

    python -m scripts.bench.fidelity_tools [--windows 4000,128000] [--formats openai,responses]

Part of `make bench-fidelity` (`scripts.bench.fidelity` runs it and prints its rows). The app
runs in-process on a fresh SQLite database, its summarizer pointed at the perfect-recall
`marker_echo` fake (it repeats every `MARKER-...` token of its prompt). A synthetic agent
session (seeded, so every run replays the same one) of user requests, assistant tool calls
(four tools), tool results of a few hundred to a few thousand tokens (file views, search hits,
test logs, web pages, written from the prose of `tests/fixtures/sharegpt_multilang.jsonl`) and
assistant answers is appended one step at a time. Every user and assistant message and every
tool result carries a unique marker, a tool result's at its start (a summary reads the first
`SUMMARY_TOOL_RESULT_PREVIEW_CHARS` characters of a result). Summarization is by tokens: the
session's `max_context_tokens` is set and its `message_limit` is out of reach.

After every user request and every tool result (where an agent calls its model) the history is
loaded without a budget, once background summarization has settled. Per row (format, summarizer
window, clearing off / on / on with a tool excluded and the inputs cleared): the tokens of the
loaded context (mean and largest), the entries `cleared` named at most, the summaries stored
(superseded ones included) with the LLM calls and tokens (input and output) their metadata
records, and the lowest share, over the loads, of the markers appended so far that the context
holds: of user and assistant messages (target 100 %), of the newest `CLEAR_KEEP` tool results
(target 100 %) and of every tool result (informative: a cleared result's marker is back once a
summary covers it). Target: clearing on spends at least 40 % fewer summarization tokens than
off, in the same format at the same window.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import json
import random
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
from alembic import command

from scripts.bench.lib import every_summary, in_process_app
from summarizer.tokens import count_text
from tests.support import scratch_db
from tests.support.fake_llm import MARKER_PATTERN, FakeLLM, running_fake_llm

FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "sharegpt_multilang.jsonl"
SEED = 29
REQUESTS = 40
"""User requests of the session; each takes one to three tool calls, then an answer."""
RESULT_TOKENS = (300, 2_500)
"""Smallest and largest tool result, in tokens."""
TOOLS = ("read_file", "search_docs", "run_tests", "fetch_page")
EXCLUDED_TOOL = "run_tests"
"""The tool whose results the `excluding` variant never clears."""
MODULES = ("billing", "search", "export", "auth", "webhooks", "reports", "sync", "invoices")

WINDOWS = (8_000, 128_000)
QUICK_WINDOWS = (8_000,)
FORMATS: tuple[str, ...] = ("openai", "responses")
QUICK_FORMATS: tuple[str, ...] = ("openai",)

MAX_CONTEXT_TOKENS = 16_000
"""The session's proactive trigger, in tokens: it decides when a summary is made."""
MESSAGE_LIMIT = 10_000
"""Out of reach, so only tokens trigger a summary."""
KEEP_LAST_N = 6
SUMMARY_TOKENS = 2_500
"""The session's `target_tokens` and `merge_target_tokens`: room for every marker of the session
(about 250, of about 7 tokens each) in one summary, so only Precis can lose a fact, never the
model's `max_tokens`."""
CLEAR_TRIGGER_TOKENS = 4_000
CLEAR_KEEP = 3
CLEAR_AT_LEAST_TOKENS = 1_000

Clearing = Literal["off", "on", "excluding"]
CLEARINGS: tuple[Clearing, ...] = ("off", "on", "excluding")
CLEARING_SETTINGS: dict[Clearing, dict[str, Any]] = {
    "off": {},
    "on": {
        "clear_tool_results_trigger_tokens": CLEAR_TRIGGER_TOKENS,
        "clear_tool_results_keep": CLEAR_KEEP,
        "clear_tool_results_at_least_tokens": CLEAR_AT_LEAST_TOKENS,
    },
    "excluding": {
        "clear_tool_results_trigger_tokens": CLEAR_TRIGGER_TOKENS,
        "clear_tool_results_keep": CLEAR_KEEP,
        "clear_tool_results_at_least_tokens": CLEAR_AT_LEAST_TOKENS,
        "clear_tool_results_exclude_tools": [EXCLUDED_TOOL],
        "clear_tool_inputs": True,
    },
}
CLEARING_LABELS: dict[Clearing, str] = {
    "off": "off",
    "on": "on",
    "excluding": f"on, {EXCLUDED_TOOL} excluded, inputs cleared",
}

POLL_SECONDS = 0.05
SETTLE_SECONDS = 30.0
"""Longest wait for `summarization_pending` to clear before a load is measured."""

TARGET_SHARE = 1.0
TARGET_SAVING = 0.4
"""Summarization tokens clearing saves, at the least, against clearing off."""

Message = dict[str, Any]
Kind = Literal["user", "assistant", "tool"]


@dataclass(frozen=True)
class Step:
    """One append of the agent session: its messages, the marker they carry, and whether the
    agent calls its model after it (a load is measured)."""

    kind: Kind
    marker: str
    chat: Message
    loads: bool
    tool: str | None = None
    ends_request: bool = False
    """The assistant's answer: the request is done, its summarization cost is read."""


@dataclass
class ToolsRow:
    message_format: str
    window: int
    clearing: Clearing
    loads: int
    mean_tokens: float
    max_tokens: int
    most_cleared: int
    """The longest `cleared` list of any load: 0 when nothing was ever cleared."""
    summaries: int
    llm_calls: int
    summary_tokens: int
    """Input and output tokens of every summary's LLM calls, superseded summaries included."""
    conversation_share: float
    newest_tools_share: float
    tools_share: float
    final_tools_share: float
    unsettled_waits: int
    seconds: float
    spent_by_request: list[int] = field(default_factory=list)
    """Summarization tokens spent so far, read after each user request."""
    saving: float | None = None
    """Summarization tokens saved against clearing off (same format and window)."""
    mean_saving: float | None = None
    """The saving had the session stopped after any one of its requests, all equally likely:
    1 - (sum of `spent_by_request`) / (the same of clearing off)."""

    def missed(self) -> list[str]:
        missed = []
        if self.conversation_share < TARGET_SHARE:
            missed.append("conversation facts")
        if self.newest_tools_share < TARGET_SHARE:
            missed.append("newest tool results")
        if self.clearing != "off" and (self.saving is None or self.saving < TARGET_SAVING):
            missed.append("saving")
        return missed


# the session --------------------------------------------------------------------------------


def prose() -> list[str]:
    """The fixture's sentences and lines, the raw text of every tool result and answer."""
    pieces: list[str] = []
    with FIXTURE.open(encoding="utf-8") as lines:
        for line in lines:
            for message in json.loads(line)["messages"]:
                for piece in (
                    message["content"].replace("。", "。\n").replace(". ", ".\n").split("\n")
                ):
                    piece = piece.strip()
                    if len(piece) >= 20:
                        pieces.append(piece)
    return pieces


def _filled(head: str, lines: Iterator[str], tokens: int) -> str:
    """`head`, then lines until the text holds about `tokens` tokens."""
    parts = [head]
    total = count_text(head)
    while total < tokens:
        line = next(lines)
        parts.append(line)
        total += count_text(line) + 1
    return "\n".join(parts)


def tool_result(rng: random.Random, pool: list[str], tool: str, argument: str, marker: str) -> str:
    """A realistic result of `tool`, its marker on the first line."""
    tokens = rng.randint(*RESULT_TOKENS)

    def sentences() -> Iterator[str]:
        while True:
            yield rng.choice(pool)

    if tool == "read_file":
        numbered = (f"{n:5d}  {text}" for n, text in enumerate(sentences(), start=1))
        return _filled(f"{marker} {argument}", numbered, tokens)
    if tool == "search_docs":
        hits = (
            f"[{n}] docs/{rng.choice(MODULES)}/{rng.choice(MODULES)}.md\n    {text}"
            for n, text in enumerate(sentences(), start=1)
        )
        return _filled(f'{marker} results for "{argument}"', hits, tokens)
    if tool == "run_tests":

        def log() -> Iterator[str]:
            for n, text in enumerate(sentences()):
                test = f"tests/{argument}/test_{rng.choice(MODULES)}.py::test_case_{n}"
                if rng.random() < 0.15:
                    yield f"{test} FAILED\nE   AssertionError: {text}"
                else:
                    yield f"{test} PASSED"

        return _filled(f"{marker} pytest tests/{argument}", log(), tokens)
    return _filled(f"{marker} {argument}\n", sentences(), tokens)


def _argument(rng: random.Random, tool: str) -> tuple[str, str]:
    """The call's argument (name, value) for `tool`."""
    module = rng.choice(MODULES)
    if tool == "read_file":
        return "path", f"src/{module}/{rng.choice(MODULES)}.py"
    if tool == "search_docs":
        return "query", f"{module} {rng.choice(MODULES)} settings"
    if tool == "run_tests":
        return "target", module
    return "url", f"https://docs.example.com/{module}/{rng.choice(MODULES)}"


def agent_session() -> list[Step]:
    """The seeded agent session, in chat messages: requests, tool calls, results, answers."""
    rng = random.Random(SEED)
    pool = prose()
    steps: list[Step] = []
    for request in range(REQUESTS):
        module = rng.choice(MODULES)
        asked = f"MARKER-a{request:02d}u"
        steps.append(
            Step(
                "user",
                asked,
                {
                    "role": "user",
                    "content": f"{asked} Look into the {module} module for me: {rng.choice(pool)}",
                },
                loads=True,
            )
        )
        for call in range(rng.randint(1, 3)):
            tool = rng.choice(TOOLS)
            name, value = _argument(rng, tool)
            call_id = f"call_{request:02d}_{call}"
            calling, found = f"MARKER-a{request:02d}c{call}", f"MARKER-a{request:02d}r{call}"
            steps.append(
                Step(
                    "assistant",
                    calling,
                    {
                        "role": "assistant",
                        "content": f"{calling} Calling {tool} on {value}.",
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {"name": tool, "arguments": json.dumps({name: value})},
                            }
                        ],
                    },
                    loads=False,
                    tool=tool,
                )
            )
            steps.append(
                Step(
                    "tool",
                    found,
                    {
                        "role": "tool",
                        "tool_call_id": call_id,
                        "content": tool_result(rng, pool, tool, value, found),
                    },
                    loads=True,
                    tool=tool,
                )
            )
        answered = f"MARKER-a{request:02d}a"
        answer = " ".join(rng.choice(pool) for _ in range(rng.randint(2, 4)))
        steps.append(
            Step(
                "assistant",
                answered,
                {"role": "assistant", "content": f"{answered} {answer}"},
                loads=False,
                ends_request=True,
            )
        )
    return steps


def as_items(message: Message) -> list[Message]:
    """A chat message as the Responses items a `responses` session stores for it."""
    role = message["role"]
    if role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message["tool_call_id"],
                "output": message["content"],
            }
        ]
    if role == "user":
        return [{"type": "message", "role": "user", "content": message["content"]}]
    items: list[Message] = [
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": message["content"]}],
        }
    ]
    for call in message.get("tool_calls", []):
        items.append(
            {
                "type": "function_call",
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
            }
        )
    return items


def found_share(found: set[str], markers: list[str]) -> float:
    """The share of `markers` in `found` (1 when there are none)."""
    return sum(marker in found for marker in markers) / len(markers) if markers else 1.0


# runs ---------------------------------------------------------------------------------------


def running_app(
    template: Path, folder: Path, fake: FakeLLM, window: int
) -> AbstractAsyncContextManager[httpx.AsyncClient]:
    """An app on a fresh copy of the migrated database, summarizing with `fake`."""
    return in_process_app(
        template,
        folder,
        summary_model="openai/fake",
        summary_api_key="bench",
        summary_api_base=fake.base_url,
        summary_model_context_tokens=window,
        summary_workers=1,
        summary_llm_max_attempts=2,
        summary_llm_backoff_seconds=0.01,
        summary_llm_timeout_seconds=5.0,
    )


async def settled_history(http: httpx.AsyncClient, session: str) -> tuple[dict[str, Any], bool]:
    """The history once `summarization_pending` is false (or the wait ran out): (body, settled)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        answer = await http.get(f"/v1/sessions/{session}/history")
        answer.raise_for_status()
        body: dict[str, Any] = answer.json()
        if not body["summarization_pending"] or time.monotonic() >= deadline:
            return body, not body["summarization_pending"]
        await asyncio.sleep(POLL_SECONDS)


def spent(summaries: list[dict[str, Any]]) -> int:
    """Input and output tokens of the summaries' LLM calls, as their metadata records them."""
    return sum(
        int(s["metadata"].get("input_tokens") or 0) + int(s["metadata"].get("output_tokens") or 0)
        for s in summaries
    )


async def replay(
    steps: list[Step],
    message_format: str,
    window: int,
    clearing: Clearing,
    template: Path,
    folder: Path,
) -> ToolsRow:
    """Append the session step by step, measuring every load; then read the summaries' cost."""
    started = time.perf_counter()
    session = f"tools-{message_format}-{clearing}"
    tokens: list[int] = []
    conversation: list[float] = []
    newest: list[float] = []
    tools: list[float] = []
    spent_by_request: list[int] = []
    most_cleared = unsettled = 0
    with running_fake_llm(mode="marker_echo", context_window=window) as fake:
        async with running_app(template, folder, fake, window) as http:
            settings = {
                "max_context_tokens": MAX_CONTEXT_TOKENS,
                "message_limit": MESSAGE_LIMIT,
                "keep_last_n": KEEP_LAST_N,
                "target_tokens": SUMMARY_TOKENS,
                "merge_target_tokens": SUMMARY_TOKENS,
                **CLEARING_SETTINGS[clearing],
            }
            created = await http.post(
                "/v1/sessions",
                json={"id": session, "format": message_format, "settings": settings},
            )
            if created.status_code != 201:
                raise RuntimeError(f"create {session}: {created.text}")
            said: list[str] = []
            results: list[str] = []
            for step in steps:
                body = (
                    {"messages": [step.chat]}
                    if message_format == "openai"
                    else {"items": [{"item": item} for item in as_items(step.chat)]}
                )
                answer = await http.post(f"/v1/sessions/{session}/messages", json=body)
                if answer.status_code != 201:
                    raise RuntimeError(f"append to {session}: {answer.text}")
                (results if step.kind == "tool" else said).append(step.marker)
                if step.ends_request:
                    unsettled += not (await settled_history(http, session))[1]
                    spent_by_request.append(spent(await every_summary(http, session)))
                if not step.loads:
                    continue
                loaded, settled = await settled_history(http, session)
                unsettled += not settled
                found = set(MARKER_PATTERN.findall(json.dumps(loaded["context"])))
                tokens.append(loaded["token_estimate"])
                most_cleared = max(most_cleared, len(loaded.get("cleared", [])))
                conversation.append(found_share(found, said))
                newest.append(found_share(found, results[-CLEAR_KEEP:]))
                tools.append(found_share(found, results))
            stored = await every_summary(http, session)
    return ToolsRow(
        message_format=message_format,
        window=window,
        clearing=clearing,
        loads=len(tokens),
        mean_tokens=sum(tokens) / len(tokens),
        max_tokens=max(tokens),
        most_cleared=most_cleared,
        summaries=len(stored),
        llm_calls=sum(int(summary["metadata"].get("llm_calls") or 0) for summary in stored),
        summary_tokens=spent(stored),
        conversation_share=min(conversation),
        newest_tools_share=min(newest),
        tools_share=min(tools),
        final_tools_share=tools[-1],
        unsettled_waits=unsettled,
        seconds=time.perf_counter() - started,
        spent_by_request=spent_by_request,
    )


def with_savings(rows: list[ToolsRow]) -> list[ToolsRow]:
    """Set each clearing row's saving against the `off` row of its format and window."""
    off = {(r.message_format, r.window): r for r in rows if r.clearing == "off"}
    for row in rows:
        baseline = off.get((row.message_format, row.window))
        if row.clearing == "off" or baseline is None:
            continue
        if baseline.summary_tokens:
            row.saving = 1 - row.summary_tokens / baseline.summary_tokens
        if sum(baseline.spent_by_request):
            row.mean_saving = 1 - sum(row.spent_by_request) / sum(baseline.spent_by_request)
    return rows


async def run(windows: tuple[int, ...], formats: tuple[str, ...]) -> list[ToolsRow]:
    steps = agent_session()
    with tempfile.TemporaryDirectory(prefix="bench-tools-") as tmp:
        folder = Path(tmp)
        template = folder / "template.db"
        url = f"sqlite+aiosqlite:///{template}"
        await asyncio.to_thread(command.upgrade, scratch_db.alembic_config(url), "head")
        rows = []
        for message_format in formats:
            for window in windows:
                for clearing in CLEARINGS:
                    row = await replay(steps, message_format, window, clearing, template, folder)
                    print(
                        f"tools {message_format} window={window} clearing={clearing}: mean "
                        f"{row.mean_tokens:,.0f} tokens, {row.summary_tokens:,} summarization "
                        f"tokens, {row.seconds:.1f} s",
                        flush=True,
                    )
                    rows.append(row)
    return with_savings(rows)


# report -------------------------------------------------------------------------------------


def render(rows: list[ToolsRow]) -> str:
    lines = [
        "| tool-heavy: format | window | clearing | loads | tokens mean | tokens max "
        "| cleared at most | summaries | llm calls | summarization tokens "
        "| saving: at the end, mean over stops "
        "| user+assistant facts | newest tool facts | tool facts (min, final) "
        "| unsettled waits | s | missed |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        saving = ", ".join(
            f"{value:.1%}" if value is not None else "—" for value in (row.saving, row.mean_saving)
        )
        missed = ", ".join(row.missed())
        lines.append(
            f"| {row.message_format} | {row.window:,} | {CLEARING_LABELS[row.clearing]} "
            f"| {row.loads} | {row.mean_tokens:,.0f} | {row.max_tokens:,} | {row.most_cleared} "
            f"| {row.summaries} | {row.llm_calls} | {row.summary_tokens:,} | {saving} "
            f"| {row.conversation_share:.1%} | {row.newest_tools_share:.1%} "
            f"| {row.tools_share:.1%}, {row.final_tools_share:.1%} | {row.unsettled_waits} "
            f"| {row.seconds:.1f} | {'MISSED: ' + missed if missed else ''} |"
        )
    lines.append(
        f"| targets | | | | | | | | | | >= {TARGET_SAVING:.0%} at the end (clearing on) "
        f"| {TARGET_SHARE:.0%} | {TARGET_SHARE:.0%} | | | | |"
    )
    return "\n".join(lines)


def report(rows: list[ToolsRow]) -> list[dict[str, Any]]:
    return [{**asdict(row), "missed": row.missed()} for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--windows", default=",".join(str(window) for window in WINDOWS), help="comma-separated"
    )
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma-separated")
    args = parser.parse_args()
    windows = tuple(int(window) for window in args.windows.split(","))
    formats = tuple(args.formats.split(","))
    rows = asyncio.run(run(windows, formats))
    print()
    print(render(rows))
    print(json.dumps(report(rows), indent=2))


if __name__ == "__main__":
    main()
