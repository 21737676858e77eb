"""The fidelity of a conversation driven through `POST /v1/responses`, as the model receives it.

    python -m scripts.bench.fidelity_responses [--turns 200] [--windows 3000,16000]

Part of `make bench-fidelity` (`scripts.bench.fidelity` runs it and prints its rows). The
app runs in-process on a fresh SQLite database; the `openai` package drives a conversation
of `--turns` turns, each input carrying a new `MARKER-...` fact and some filler, so the
conversation outgrows the model's window many times. It is driven twice per window: with
`responses.create(conversation=...)`, and as a chain, each turn naming the previous
response's `previous_response_id` (no conversation; the chain's first input carries the
conversation's developer item). One loopback fake serves both the model (Responses wire
format; it answers a short acknowledgement that repeats no fact, so a fact reaches a request
only through the stored conversation or its summaries) and the summarizer (chat completions,
in the perfect-recall `marker_echo` reading: it repeats every marker of its transcript). Per
window and chain: the lowest share of the facts given so far that the model's request held
(over every turn), the share in the last request, the largest request against the window
(its prompt plus `max_output_tokens`), requests refused for their size, the turns retried
after an `overflow_retry` summary and the sessions the run made. Targets: every fact in every
request, no request over the window, one session (a chain that always names its newest
response is never branched).
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx2
from alembic import command
from openai import AsyncOpenAI

from api.main import create_app
from api.settings import Settings
from tests.support import scratch_db
from tests.support.fake_llm import (
    RESPONSES_PATH,
    FakeLLM,
    recall_in_summaries_only,
    running_fake_llm,
)

MODEL = "openai/fake"
TURNS = 200
WINDOWS = (4_000, 16_000)
CHAINS = ("conversation", "previous_response_id")
"""How the turns are tied together: a conversation, or a chain of stored responses."""
DEVELOPER_ITEM = {"type": "message", "role": "developer", "content": "Be brief."}
OUTPUT_TOKENS = 100
"""`max_output_tokens` of every turn: the room the fitted context leaves for the answer."""
FILLER_WORDS = 60
"""Words of filler around each turn's fact: 200 turns make about 20k tokens of conversation."""
MERGE_TARGET_TOKENS = 2_000
"""SUMMARY_MERGE_TARGET_TOKENS of the run: a roll-up of all 200 facts (about 1,200 tokens of
markers) must fit the summary's cap, or the model's `max_tokens` clips facts off."""
TARGET_SHARE = 1.0


@dataclass
class ResponsesRow:
    chain: str
    window: int
    turns: int
    min_share: float
    final_share: float
    largest_request: int
    refused_for_size: int
    overflow_retries: int
    summaries: int
    sessions: int
    seconds: float

    def missed(self) -> list[str]:
        missed = []
        if self.min_share < TARGET_SHARE:
            missed.append("min share")
        if self.largest_request > self.window or self.refused_for_size:
            missed.append("window")
        if self.sessions != 1:
            missed.append("sessions")
        return missed


def _turn_input(turn: int) -> str:
    filler = " ".join(f"word{(turn * 7 + index) % 97}" for index in range(FILLER_WORDS))
    return f"Remember MARKER-fact{turn:03d}. {filler}"


def _share(request: dict[str, Any], facts: list[str]) -> float:
    text = json.dumps(request.get("input"), ensure_ascii=False)
    return sum(fact in text for fact in facts) / len(facts) if facts else 1.0


async def run_window(window: int, turns: int, folder: Path, chain: str) -> ResponsesRow:
    database = folder / f"responses-{chain}-{window}.db"
    url = f"sqlite+aiosqlite:///{database}"
    await asyncio.to_thread(command.upgrade, scratch_db.alembic_config(url), "head")
    started = time.perf_counter()
    with running_fake_llm(context_window=window) as fake:
        fake.responder = recall_in_summaries_only
        settings = _settings(url, fake, window)
        app = create_app(settings)
        transport = httpx2.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx2.AsyncClient(
                transport=transport, base_url="http://localhost", timeout=120
            ) as http,
        ):
            client = AsyncOpenAI(base_url="http://localhost/v1", api_key="dev", http_client=http)
            turn_shares, overflow_retries, session_id = await _drive(client, fake, turns, chain)
            answer = await http.get(f"/v1/sessions/{session_id}/summaries")
            summaries = len(answer.json()["summaries"])
            listed = await http.get("/v1/sessions", params={"limit": 100})
            sessions = len(listed.json()["sessions"])
        model_calls = [call for call in fake.calls if call.path == RESPONSES_PATH]
    return ResponsesRow(
        chain=chain,
        window=window,
        turns=turns,
        min_share=min(turn_shares, default=1.0),
        final_share=turn_shares[-1] if turn_shares else 1.0,
        largest_request=max(
            (call.prompt_tokens + OUTPUT_TOKENS for call in model_calls), default=0
        ),
        refused_for_size=sum(call.status == 400 for call in model_calls),
        overflow_retries=overflow_retries,
        summaries=summaries,
        sessions=sessions,
        seconds=time.perf_counter() - started,
    )


async def _drive(
    client: AsyncOpenAI, fake: FakeLLM, turns: int, chain: str
) -> tuple[list[float], int, str]:
    """The turns, tied as `chain` says: each request's fact share, the turns retried after an
    overflow, and the session the turns ran in (the conversation, or the chain's first
    response)."""
    session_id = ""
    previous_id: str | None = None
    if chain == "conversation":
        conversation = await client.conversations.create(items=[DEVELOPER_ITEM])  # type: ignore[list-item]
        session_id = conversation.id
    facts: list[str] = []
    shares: list[float] = []
    overflow_retries = 0
    for turn in range(turns):
        facts.append(f"MARKER-fact{turn:03d}")
        given: Any = _turn_input(turn)
        tied: dict[str, Any] = {}
        if chain == "conversation":
            tied["conversation"] = session_id
        elif previous_id is not None:
            tied["previous_response_id"] = previous_id
        else:
            given = [DEVELOPER_ITEM, {"type": "message", "role": "user", "content": given}]
        raw = await client.responses.with_raw_response.create(
            model=MODEL, input=given, max_output_tokens=OUTPUT_TOKENS, **tied
        )
        response = raw.parse()
        previous_id = response.id
        session_id = session_id or response.id
        overflow_retries += "x-precis-overflow-retry" in raw.headers
        requests = [call for call in fake.calls if call.path == RESPONSES_PATH]
        shares.append(_share(requests[-1].request, facts))
    return shares, overflow_retries, session_id


def _settings(url: str, fake: FakeLLM, window: int) -> Settings:
    return Settings(
        _env_file=None,
        database_url=url,
        model_allowed=MODEL,
        model_api_base=fake.base_url,
        model_api_key="bench",
        model_context_tokens=f"{MODEL}={window}",
        summary_model=MODEL,
        summary_api_base=fake.base_url,
        summary_api_key="bench",
        summary_model_context_tokens=window,
        # the conversation's own proactive limits, well inside the window
        summary_max_context_tokens=max(500, window // 2),
        summary_keep_last_n=4,
        # room for every fact in a roll-up: 200 facts of about 6 tokens each
        summary_merge_target_tokens=MERGE_TARGET_TOKENS,
        summary_workers=1,
    )


def render(rows: list[ResponsesRow]) -> str:
    lines = [
        "| responses: chain | window | turns | min fact share | final fact share "
        "| largest request | refused for size | overflow retries | summaries | sessions | s "
        "| missed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        missed = ", ".join(row.missed())
        lines.append(
            f"| {row.chain} | {row.window:,} | {row.turns} | {row.min_share:.1%} "
            f"| {row.final_share:.1%} | {row.largest_request:,} | {row.refused_for_size} "
            f"| {row.overflow_retries} | {row.summaries} | {row.sessions} | {row.seconds:.1f} "
            f"| {'MISSED: ' + missed if missed else ''} |"
        )
    lines.append(f"| targets | | | {TARGET_SHARE:.0%} | | <= window | 0 | | | 1 | | |")
    return "\n".join(lines)


async def run(windows: tuple[int, ...], turns: int) -> list[ResponsesRow]:
    with tempfile.TemporaryDirectory(prefix="bench-responses-") as tmp:
        rows = []
        for chain in CHAINS:
            for window in windows:
                row = await run_window(window, turns, Path(tmp), chain)
                print(
                    f"responses chain={chain} window={window}: min {row.min_share:.1%}, final "
                    f"{row.final_share:.1%}, largest {row.largest_request}, {row.seconds:.1f} s",
                    flush=True,
                )
                rows.append(row)
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument(
        "--windows", default=",".join(str(window) for window in WINDOWS), help="comma-separated"
    )
    args = parser.parse_args()
    windows = tuple(int(window) for window in args.windows.split(","))
    rows = asyncio.run(run(windows, args.turns))
    print()
    print(render(rows))
    print(json.dumps([{**asdict(row), "missed": row.missed()} for row in rows], indent=2))


if __name__ == "__main__":
    main()
