"""The fidelity of a resent conversation through the chat wires, as the model receives it.

    python -m scripts.bench.fidelity_wires [--turns 200] [--window 16000]
                                           [--wires chat_completions,messages] [--ratios 1,1.5]
                                           [--limits proactive,window]

Part of `make bench-fidelity` (`scripts.bench.fidelity` runs it and prints its rows). The
app runs in-process on a fresh SQLite database per row. A client that resends its whole
history every turn, as Open WebUI does (the system prompt, every earlier user and assistant
message, the new user message), drives a conversation of `--turns` turns through each wire
with its official client: `POST /v1/chat/completions` with the `openai` package
(`chat.completions.create`, model `openai/...`) and `POST /v1/messages` with the `anthropic`
package (`messages.create`, model `anthropic/...`, so litellm calls the model on Anthropic's
own wire), the session named by `X-Precis-Session`. Each user message is a new
`MARKER-factNNN` and 60 words of filler, so the resend outgrows the model's window. One
loopback fake serves the model, which acknowledges without repeating any fact (a fact reaches
a request only through the stored session or its summaries), and the summarizer (the
perfect-recall `marker_echo` reading), under another model name, so the log tells them apart.

Rows per wire, per LIMITS (what keeps the context small: the session's proactive limits as
`fidelity_responses` sets them, or the window alone) and per ratio of the model's token count
to cl100k's (`token_ratio`: 1.5 is a model whose tokenizer counts half as many tokens again as
Precis does). Per row: the lowest share of the facts given so far that a model request held
(every request of every turn) and the share in the last one, the largest request against the
window (the model's own prompt count plus `max_tokens`), the model requests refused for their
size and the turns they came in, the turns the client saw fail, the turns retried after an
`overflow_retry` summary, whether the session stores exactly the messages the client holds
(each once, in order), and then a regenerated last answer (the history resent without it):
the turn must branch the session (`x-precis-branched-from`), the earlier branch keep every
message and the regenerated request hold every fact. Targets: every fact in every request, no
request over the window, no refusal for size (with another tokenizer: none after the first
SETTLING_TURNS turns, the turns Precis may take to learn the model's count from the usage it
reports).
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
from alembic import command
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI

from api.main import create_app
from api.settings import Settings
from tests.support import scratch_db
from tests.support.fake_llm import (
    ACKNOWLEDGEMENT,
    Call,
    FakeLLM,
    recall_in_summaries_only,
    running_fake_llm,
)

CHAT_MODEL = "openai/fake"
MESSAGES_MODEL = "anthropic/claude-sonnet-4-6"
SUMMARY_MODEL = "openai/fake-summarizer"
"""The summarizer's model: the fake logs the name it is sent, which tells its calls apart."""
WIRES = ("chat_completions", "messages")
RATIOS = (1.0, 1.5)
LIMITS = ("proactive", "window")
"""What keeps the session's context small: `proactive`, the session's own limits as
`scripts.bench.fidelity_responses` sets them (SUMMARY_MAX_CONTEXT_TOKENS half the window, the
default SUMMARY_MESSAGE_LIMIT), which summarize in the background long before the window is
near; `window`, none of them (both UNBOUNDED), so only the turn's fit to the window summarizes
and every request comes close to the window (the rows that test the fit)."""
QUICK_LIMITS = ("window",)
UNBOUNDED = 1_000_000
TURNS = 200
WINDOW = 16_000
OUTPUT_TOKENS = 100
"""`max_tokens` of every turn: the room the fitted context leaves for the answer."""
FILLER_WORDS = 60
MERGE_TARGET_TOKENS = 2_000
"""SUMMARY_MERGE_TARGET_TOKENS, as `scripts.bench.fidelity_responses` sets it: a roll-up of
all 200 facts must fit the summary's cap."""
SYSTEM_PROMPT = "Be brief."
SESSION_HEADER = "X-Precis-Session"
BRANCHED_HEADER = "x-precis-branched-from"
OVERFLOW_HEADER = "x-precis-overflow-retry"
TARGET_SHARE = 1.0
SETTLING_TURNS = 10
"""Turns in which a model with another tokenizer may still be refused for size."""

Message = dict[str, Any]


@dataclass
class Answer:
    text: str
    headers: dict[str, str]


TurnCall = Callable[[str, list[Message]], Awaitable[Answer]]
"""One resend through a wire: (session, the history with the new user message) -> answer."""


@dataclass
class WireRow:
    wire: str
    limits: str
    ratio: float
    window: int
    turns: int
    min_share: float
    final_share: float
    largest_request: int
    refused_for_size: int
    refused_turns: list[int]
    failed_turns: list[int]
    overflow_retries: int
    summaries: int
    stored: int
    expected_stored: int
    stored_as_sent: bool
    branched: bool
    earlier_branch_kept: bool
    regenerated_share: float
    seconds: float
    summarizer_refused: int = 0
    failures: list[str] = field(default_factory=list)
    """The first errors the client saw (status and message)."""

    @property
    def late_refusals(self) -> int:
        """Refusals for size after the turns a ratio may take to learn."""
        settling = SETTLING_TURNS if self.ratio != 1.0 else 0
        return sum(turn >= settling for turn in self.refused_turns)

    def missed(self) -> list[str]:
        missed = []
        if min(self.min_share, self.regenerated_share) < TARGET_SHARE:
            missed.append("min share")
        if self.late_refusals or self.failed_turns:
            missed.append("refused")
        if self.ratio == 1.0 and self.largest_request > self.window:
            missed.append("window")
        if not self.stored_as_sent:
            missed.append("stored")
        if not (self.branched and self.earlier_branch_kept):
            missed.append("branch")
        return missed


def user_message(turn: int) -> str:
    filler = " ".join(f"word{(turn * 7 + index) % 97}" for index in range(FILLER_WORDS))
    return f"Remember MARKER-fact{turn:03d}. {filler}"


def share(messages: list[Message], facts: list[str]) -> float:
    text = json.dumps(messages, ensure_ascii=False)
    return sum(fact in text for fact in facts) / len(facts) if facts else 1.0


def upstream_model(wire: str) -> str:
    """The model name as the fake receives it (without litellm's provider prefix)."""
    return (CHAT_MODEL if wire == "chat_completions" else MESSAGES_MODEL).split("/", 1)[1]


def model_calls(calls: list[Call], wire: str) -> list[Call]:
    """The turn's calls of the model (not of the summarizer)."""
    name = upstream_model(wire)
    return [call for call in calls if call.request.get("model") == name]


def chat_turn(client: AsyncOpenAI) -> TurnCall:
    async def call(session: str, history: list[Message]) -> Answer:
        raw = await client.chat.completions.with_raw_response.create(
            model=CHAT_MODEL,
            messages=[{"role": "system", "content": SYSTEM_PROMPT}, *history],  # type: ignore[list-item]
            max_tokens=OUTPUT_TOKENS,
            extra_headers={SESSION_HEADER: session},
        )
        completion = raw.parse()
        return Answer(completion.choices[0].message.content or "", dict(raw.headers))

    return call


def messages_turn(client: AsyncAnthropic) -> TurnCall:
    async def call(session: str, history: list[Message]) -> Answer:
        raw = await client.messages.with_raw_response.create(
            model=MESSAGES_MODEL,
            system=SYSTEM_PROMPT,
            messages=history,  # type: ignore[arg-type]
            max_tokens=OUTPUT_TOKENS,
            extra_headers={SESSION_HEADER: session},
        )
        message = await raw.parse()
        text = "".join(block.text for block in message.content if block.type == "text")
        return Answer(text, dict(raw.headers))

    return call


async def stored_messages(http: httpx2.AsyncClient, session: str) -> list[Message]:
    """Every stored message of the session, page by page."""
    found: list[Message] = []
    after = 0
    while True:
        answer = await http.get(
            f"/v1/sessions/{session}/messages", params={"after_seq": after, "limit": 1000}
        )
        answer.raise_for_status()
        body = answer.json()
        found += body["messages"]
        if body["next_cursor"] is None:
            return found
        after = int(body["next_cursor"])


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text") or "") for part in content)
    return str(content or "")


def as_sent(stored: list[Message], history: list[Message]) -> bool:
    """The session holds the client's messages, each once, in order."""
    sent = [("system", SYSTEM_PROMPT), *((m["role"], m["content"]) for m in history)]
    return [(m["role"], _text(m["content"])) for m in stored] == sent


async def run_row(
    wire: str, limits: str, ratio: float, window: int, turns: int, folder: Path
) -> WireRow:
    database = folder / f"wires-{wire}-{limits}-{ratio:g}.db"
    url = f"sqlite+aiosqlite:///{database}"
    await asyncio.to_thread(command.upgrade, scratch_db.alembic_config(url), "head")
    started = time.perf_counter()
    session = f"wire-{wire}"
    with running_fake_llm(context_window=window, token_ratio=ratio) as fake:
        fake.responder = recall_in_summaries_only
        app = create_app(_settings(url, fake, window, limits))
        transport = httpx2.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx2.AsyncClient(
                transport=transport, base_url="http://localhost", timeout=120
            ) as http,
        ):
            if wire == "chat_completions":
                send = chat_turn(
                    AsyncOpenAI(
                        base_url="http://localhost/v1",
                        api_key="dev",
                        http_client=http,
                        max_retries=0,
                    )
                )
            else:
                send = messages_turn(
                    AsyncAnthropic(
                        base_url="http://localhost", api_key="dev", http_client=http, max_retries=0
                    )
                )
            facts: list[str] = []
            history: list[Message] = []
            shares: list[float] = []
            refused_turns: list[int] = []
            failed_turns: list[int] = []
            failures: list[str] = []
            overflow_retries = 0
            for turn in range(turns):
                facts.append(f"MARKER-fact{turn:03d}")
                history.append({"role": "user", "content": user_message(turn)})
                before = len(fake.calls)
                try:
                    answer = await send(session, history)
                except (openai.APIStatusError, anthropic.APIStatusError) as exc:
                    # the client keeps its message and resends it with the next one
                    failed_turns.append(turn)
                    if len(failures) < 3:
                        failures.append(f"turn {turn}: {exc.status_code} {exc.message}")
                    answer = None
                calls = model_calls(fake.calls[before:], wire)
                shares += [share(call.messages, facts) for call in calls]
                if any(call.status == 400 for call in calls):
                    refused_turns.append(turn)
                if answer is None:
                    continue
                if answer.text != ACKNOWLEDGEMENT:
                    raise RuntimeError(f"turn {turn}: the model repeated {answer.text!r}")
                overflow_retries += OVERFLOW_HEADER in answer.headers
                history.append({"role": "assistant", "content": answer.text})
            stored = await stored_messages(http, session)
            listed = await http.get(f"/v1/sessions/{session}/summaries")
            summaries = len(listed.json()["summaries"])
            # the client regenerates the last answer: the history resent without it
            before = len(fake.calls)
            regenerated = await send(session, history[:-1])
            regenerated_share = min(
                (share(call.messages, facts) for call in model_calls(fake.calls[before:], wire)),
                default=0.0,
            )
            earlier = regenerated.headers.get(BRANCHED_HEADER)
            kept = await stored_messages(http, earlier) if earlier else []
        every = model_calls(fake.calls, wire)
        summarizer = SUMMARY_MODEL.split("/", 1)[1]
        summarizer_refused = sum(
            call.status == 400 and call.request.get("model") == summarizer for call in fake.calls
        )
    return WireRow(
        wire=wire,
        limits=limits,
        ratio=ratio,
        window=window,
        turns=turns,
        min_share=min(shares, default=1.0),
        final_share=shares[-1] if shares else 1.0,
        largest_request=max((call.prompt_tokens + OUTPUT_TOKENS for call in every), default=0),
        refused_for_size=sum(call.status == 400 for call in every),
        refused_turns=refused_turns,
        failed_turns=failed_turns,
        overflow_retries=overflow_retries,
        summaries=summaries,
        stored=len(stored),
        expected_stored=1 + len(history),
        stored_as_sent=as_sent(stored, history),
        branched=earlier is not None,
        earlier_branch_kept=as_sent(kept, history),
        regenerated_share=regenerated_share,
        seconds=time.perf_counter() - started,
        summarizer_refused=summarizer_refused,
        failures=failures,
    )


def _settings(url: str, fake: FakeLLM, window: int, limits: str) -> Settings:
    proactive = limits == "proactive"
    return Settings(
        _env_file=None,
        database_url=url,
        model_allowed=f"{CHAT_MODEL},{MESSAGES_MODEL}",
        model_api_base=fake.base_url,
        model_api_key="bench",
        model_context_tokens=f"{CHAT_MODEL}={window},{MESSAGES_MODEL}={window}",
        summary_model=SUMMARY_MODEL,
        summary_api_base=fake.base_url,
        summary_api_key="bench",
        summary_model_context_tokens=window,
        summary_keep_last_n=4,
        summary_merge_target_tokens=MERGE_TARGET_TOKENS,
        summary_workers=1,
        summary_max_context_tokens=max(500, window // 2) if proactive else UNBOUNDED,
        summary_message_limit=(
            Settings.model_fields["summary_message_limit"].default if proactive else UNBOUNDED
        ),
    )


def _turns(turns: list[int]) -> str:
    if not turns:
        return "none"
    shown = ", ".join(str(turn) for turn in turns[:8])
    return shown + (f", ... ({len(turns)})" if len(turns) > 8 else "")


def render(rows: list[WireRow]) -> str:
    lines = [
        "| wire | limits | token ratio | turns | min fact share | final fact share "
        "| largest request | refused for size | refused at turns | failed turns "
        "| overflow retries | summaries | stored / expected "
        "| regenerated: branched, earlier kept, share | s | missed |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---|---:|---|",
    ]
    for row in rows:
        missed = ", ".join(row.missed())
        stored = f"{row.stored} / {row.expected_stored}" + ("" if row.stored_as_sent else " (!)")
        branch = (
            f"{'yes' if row.branched else 'no'}, {'yes' if row.earlier_branch_kept else 'no'}, "
            f"{row.regenerated_share:.1%}"
        )
        lines.append(
            f"| {row.wire} | {row.limits} | {row.ratio:g} | {row.turns} | {row.min_share:.1%} "
            f"| {row.final_share:.1%} | {row.largest_request:,} / {row.window:,} "
            f"| {row.refused_for_size} | {_turns(row.refused_turns)} | {len(row.failed_turns)} "
            f"| {row.overflow_retries} | {row.summaries} | {stored} | {branch} "
            f"| {row.seconds:.1f} | {'MISSED: ' + missed if missed else ''} |"
        )
    lines.append(
        f"| targets | | | | {TARGET_SHARE:.0%} | | <= window (ratio 1) | 0 (ratio 1) "
        f"| none after turn {SETTLING_TURNS - 1} | 0 | | | equal | yes, yes, 100% | | |"
    )
    return "\n".join(lines)


def report(rows: list[WireRow]) -> list[dict[str, Any]]:
    return [
        {**asdict(row), "late_refusals": row.late_refusals, "missed": row.missed()} for row in rows
    ]


async def run(
    wires: tuple[str, ...] = WIRES,
    ratios: tuple[float, ...] = RATIOS,
    limits: tuple[str, ...] = LIMITS,
    window: int = WINDOW,
    turns: int = TURNS,
) -> list[WireRow]:
    with tempfile.TemporaryDirectory(prefix="bench-wires-") as tmp:
        rows = []
        for kept_small_by in limits:
            for ratio in ratios:
                for wire in wires:
                    row = await run_row(wire, kept_small_by, ratio, window, turns, Path(tmp))
                    print(
                        f"{wire} limits={kept_small_by} ratio={ratio:g}: min "
                        f"{row.min_share:.1%}, final {row.final_share:.1%}, largest "
                        f"{row.largest_request}, refused at {_turns(row.refused_turns)}, "
                        f"{row.seconds:.1f} s",
                        flush=True,
                    )
                    rows.append(row)
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument("--window", type=int, default=WINDOW)
    parser.add_argument("--wires", default=",".join(WIRES), help="comma-separated")
    parser.add_argument(
        "--ratios", default=",".join(f"{ratio:g}" for ratio in RATIOS), help="comma-separated"
    )
    parser.add_argument("--limits", default=",".join(LIMITS), help="comma-separated")
    args = parser.parse_args()
    wires = tuple(args.wires.split(","))
    ratios = tuple(float(ratio) for ratio in args.ratios.split(","))
    limits = tuple(args.limits.split(","))
    rows = asyncio.run(run(wires, ratios, limits, args.window, args.turns))
    print()
    print(render(rows))
    print(json.dumps(report(rows), indent=2))


if __name__ == "__main__":
    main()
