"""What the chat wires add to a model call, and what a long resend adds, measured in one run.

    python -m scripts.bench.wire_overhead [--calls 200] [--long-calls 60]
                                          [--backends sqlite,postgresql]

Part of `make bench` (`scripts.bench.run` prints its table). A chat app that resends its whole
conversation every turn asks the next question, with each wire's official client:
`chat.completions.create` of the `openai` package (`POST /v1/chat/completions`, model
`openai/gpt-4o-mini`) and `messages.create` of the `anthropic` package (`POST /v1/messages`,
model `anthropic/claude-sonnet-4-6`, which litellm calls on Anthropic's wire); the
conversation is SHORT (20) or LONG (2,000) earlier messages of WORDS words, then the question.

Method. Each call is made two ways against the loopback fake model (no latency, a constant
answer), one call at a time:

- directly: the same client, its `base_url` the fake, sending the same messages (the
  baseline: the client encodes every message, the fake reads and counts every one);
- through Precis served by uvicorn on a fresh migrated database, the session named by
  `X-Precis-Session`. Before each call, untimed, a new session is given the earlier messages
  by a turn of the same wire (the history without its last answer, which the model answers
  with that very answer), so the timed call is the common turn: the session's newest message
  is found among the resend's links, the question and the answer are appended. The window
  (WINDOW) holds the longest conversation, so nothing is summarized and the model receives
  the same messages as directly (checked after every round). The session is deleted after
  the call, untimed, so the database does not grow.

The four calls of a wire (each length, directly and through Precis) alternate in rounds, their
order rotating, so drift of the machine hits them alike; a round makes `--calls` / ROUNDS calls
of each short kind and `--long-calls` / ROUNDS of each long one. `added` = p50 through Precis
- p50 directly, at each length; targets: `added` at the short length within TARGET_ADDED_MS,
and `added(long) - added(short)` within TARGET_LONG_ADDED_MS. Subtracting each length's own
direct call takes out what the 1,980 more messages cost the client and the model either way
(the client's encoding, the transfer, the model reading and counting them); what is left is
what they cost Precis: reading and checking the request's messages, their links, the history
load and the model request litellm builds from it.

Rows without a target explain the others. The "bare HTTP" rows make the same calls as `httpx`
requests of bodies encoded once: the clients' own encoding, which both sides pay (the `openai`
package's costs hundreds of milliseconds at 2,000 messages, and varies as much), is gone, so
what the Precis server adds shows with less noise. "litellm alone, bare HTTP" is
`litellm.acompletion` of the same messages against the bare direct call: the share of the
added time that is litellm's.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

import httpx
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI

from scripts.bench.lib import POSTGRES_ADMIN_URL
from scripts.bench.responses_overhead import migrated_database
from summarizer.llm import load_litellm
from tests.support.fake_llm import FakeLLM, running_fake_llm
from tests.support.live_server import served

CHAT_MODEL = "openai/gpt-4o-mini"
MESSAGES_MODEL = "anthropic/claude-sonnet-4-6"
"""Model names litellm knows, as a deployment names them (the fake answers any name)."""
WIRES = ("chat_completions", "messages")
PATHS = {"chat_completions": "/v1/chat/completions", "messages": "/v1/messages"}
MODELS = {"chat_completions": CHAT_MODEL, "messages": MESSAGES_MODEL}
CALLS = 200
"""Timed calls of each short kind (directly and through Precis)."""
LONG_CALLS = 60
"""Timed calls of each long kind: each costs up to a second with the `openai` package."""
ROUNDS = 20
WARMUP_CALLS = 2
"""Calls of each kind before the timed ones (connections opened, caches warm)."""
SHORT = 20
LONG = 2_000
"""Earlier messages of the conversation, resent before the question."""
WORDS = 20
WINDOW = 1_000_000
"""MODEL_CONTEXT_TOKENS of both models: the longest conversation fits, nothing is summarized."""
ANSWER = "Noted, here is my answer."
QUESTION = "And what comes next?"
OUTPUT_TOKENS = 50
SESSION_HEADER = "X-Precis-Session"
BRANCHED_HEADER = "x-precis-branched-from"
HEADERS = {
    "content-type": "application/json",
    "authorization": "Bearer bench",
    "x-api-key": "bench",
    "anthropic-version": "2023-06-01",
}
"""The bare HTTP requests' headers (the fake and a development-mode Precis take any key)."""
TARGET_ADDED_MS = 3.0
"""What Precis may add to a call at p50, at the short length."""
TARGET_LONG_ADDED_MS = 2.0
"""What 2,000 earlier messages may add to that, at p50."""

Message = dict[str, Any]
Call = Callable[[list[Message], str | None], Awaitable[dict[str, str]]]
"""One call of a client: (messages, session or None) -> the answer's headers."""


@dataclass
class WireOverheadRow:
    label: str
    wire: str
    messages: int
    calls: int
    direct_p50_ms: float
    direct_p95_ms: float
    proxied_p50_ms: float
    proxied_p95_ms: float
    short_added_p50_ms: float | None = None
    """On a long row: the short row's `added_p50_ms` (the long target is against it)."""
    targeted: bool = True
    """False for the rows that explain the others (no target)."""

    @property
    def added_p50_ms(self) -> float:
        return self.proxied_p50_ms - self.direct_p50_ms

    @property
    def long_added_p50_ms(self) -> float | None:
        if self.short_added_p50_ms is None:
            return None
        return self.added_p50_ms - self.short_added_p50_ms

    def missed(self) -> bool:
        if not self.targeted:
            return False
        if self.long_added_p50_ms is not None:
            return self.long_added_p50_ms > TARGET_LONG_ADDED_MS
        return self.added_p50_ms > TARGET_ADDED_MS


def conversation(earlier: int) -> list[Message]:
    """`earlier` messages, a user's and the model's by turns, the last one the model's
    constant answer, then the question."""
    messages: list[Message] = []
    for index in range(earlier):
        words = " ".join(f"word{(index * 7 + k) % 89}" for k in range(WORDS))
        if index % 2 == 0:
            messages.append({"role": "user", "content": f"Question {index // 2}: {words}"})
        else:
            messages.append({"role": "assistant", "content": f"Answer {index // 2}: {words}"})
    if messages:
        messages[-1] = {"role": "assistant", "content": ANSWER}
    return [*messages, {"role": "user", "content": QUESTION}]


def answer_constantly(messages: list[Message]) -> str:
    """The fake's `responder`: the seed turn's answer is the conversation's last answer."""
    return ANSWER


def _session_headers(session: str | None) -> dict[str, str]:
    return {SESSION_HEADER: session} if session else {}


def openai_call(client: AsyncOpenAI, model: str) -> Call:
    async def call(messages: list[Message], session: str | None) -> dict[str, str]:
        raw = await client.chat.completions.with_raw_response.create(
            model=model,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=OUTPUT_TOKENS,
            extra_headers=_session_headers(session),
        )
        raw.parse()
        return dict(raw.headers)

    return call


def anthropic_call(client: AsyncAnthropic, model: str) -> Call:
    async def call(messages: list[Message], session: str | None) -> dict[str, str]:
        raw = await client.messages.with_raw_response.create(
            model=model,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=OUTPUT_TOKENS,
            extra_headers=_session_headers(session),
        )
        await raw.parse()
        return dict(raw.headers)

    return call


def _body(model: str, messages: list[Message]) -> bytes:
    return json.dumps({"model": model, "messages": messages, "max_tokens": OUTPUT_TOKENS}).encode()


def bare_call(client: httpx.AsyncClient, url: str, model: str) -> Call:
    """A bare HTTP request of the wire's body, encoded once per length."""
    encoded: dict[int, bytes] = {}

    async def call(messages: list[Message], session: str | None) -> dict[str, str]:
        if len(messages) not in encoded:
            encoded[len(messages)] = _body(model, messages)
        answer = await client.post(
            url, content=encoded[len(messages)], headers=HEADERS | _session_headers(session)
        )
        answer.raise_for_status()
        answer.json()
        return dict(answer.headers)

    return call


def litellm_call(litellm: Any, fake: FakeLLM, model: str) -> Call:
    """`litellm.acompletion` of the messages, as Precis calls the model."""

    async def call(messages: list[Message], session: str | None) -> dict[str, str]:
        await litellm.acompletion(
            model=model,
            messages=messages,
            max_tokens=OUTPUT_TOKENS,
            api_base=fake.base_url,
            api_key="bench",
            num_retries=0,
        )
        return {}

    return call


@dataclass
class Contestant:
    """One kind of call: its messages and calls per round; through Precis, the untimed seed
    turn before each call and the session's deletion after it."""

    call: Call
    messages: list[Message]
    per_round: int
    seed: Call | None = None
    delete: Callable[[str], Awaitable[None]] | None = None

    async def once(self) -> float:
        """Milliseconds of one call (the seed and the deletion untimed)."""
        session = None
        if self.seed is not None:
            session = f"bench-{uuid.uuid4().hex}"
            await self.seed(self.messages[:-2], session)
        started = time.perf_counter()
        headers = await self.call(self.messages, session)
        elapsed = (time.perf_counter() - started) * 1000
        if BRANCHED_HEADER in headers:
            raise RuntimeError("the resend branched the session: the seed turn did not match")
        if session is not None and self.delete is not None:
            await self.delete(session)
        return elapsed


async def alternated(fake: FakeLLM, contestants: dict[str, Contestant]) -> dict[str, list[float]]:
    """Every contestant's timed calls, in ROUNDS rounds whose order rotates; after each of its
    turns, the model must have received the contestant's messages as they are."""
    names = list(contestants)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for name in names:
        for _ in range(WARMUP_CALLS):
            await contestants[name].once()
    for turn in range(ROUNDS):
        order = names[turn % len(names) :] + names[: turn % len(names)]
        for name in order:
            contestant = contestants[name]
            for _ in range(contestant.per_round):
                samples[name].append(await contestant.once())
            received = len(fake.calls[-1].messages)
            if received != len(contestant.messages):
                raise RuntimeError(
                    f"{name}: the model received {received} messages, not "
                    f"{len(contestant.messages)}"
                )
            # the call log keeps every request's messages: keep it short
            fake.reset()
            fake.responder = answer_constantly
    return samples


def _quantiles(samples: list[float]) -> tuple[float, float]:
    return statistics.median(samples), statistics.quantiles(samples, n=20)[18]


def _rows(
    label: str, wire: str, samples: dict[str, list[float]], targeted: bool
) -> list[WireOverheadRow]:
    short = WireOverheadRow(
        label,
        wire,
        SHORT,
        len(samples["proxied short"]),
        *_quantiles(samples["direct short"]),
        *_quantiles(samples["proxied short"]),
        targeted=targeted,
    )
    long = WireOverheadRow(
        label,
        wire,
        LONG,
        len(samples["proxied long"]),
        *_quantiles(samples["direct long"]),
        *_quantiles(samples["proxied long"]),
        short_added_p50_ms=short.added_p50_ms,
        targeted=targeted,
    )
    return [short, long]


async def compare(
    fake: FakeLLM,
    label: str,
    calls: dict[str, tuple[Call, Call]],
    counts: tuple[int, int],
    precis: httpx.AsyncClient | None,
    targeted: bool,
) -> list[WireOverheadRow]:
    """Per wire, its direct call against the other (through Precis when `precis` is its
    client, seeding and deleting a session around each call), at both lengths."""

    async def delete(session: str) -> None:
        assert precis is not None
        answer = await precis.delete(f"/v1/sessions/{session}")
        answer.raise_for_status()

    rows: list[WireOverheadRow] = []
    for wire, (direct, other) in calls.items():
        seed = bare_call(precis, PATHS[wire], MODELS[wire]) if precis is not None else None
        contestants: dict[str, Contestant] = {}
        for size, earlier, count in (("short", SHORT, counts[0]), ("long", LONG, counts[1])):
            messages = conversation(earlier)
            per_round = max(1, count // ROUNDS)
            contestants[f"direct {size}"] = Contestant(direct, messages, per_round)
            contestants[f"proxied {size}"] = Contestant(
                other, messages, per_round, seed, delete if precis is not None else None
            )
        samples = await alternated(fake, contestants)
        rows += _rows(label, wire, samples, targeted)
    return rows


def _direct_urls(fake: FakeLLM) -> dict[str, str]:
    return {
        "chat_completions": f"{fake.base_url}/chat/completions",
        "messages": f"{fake.anthropic_base_url}/v1/messages",
    }


def _upstream(model: str) -> str:
    """The model's name as the upstream receives it (without litellm's provider prefix)."""
    return model.split("/", 1)[1]


async def litellm_rows(fake: FakeLLM, counts: tuple[int, int]) -> list[WireOverheadRow]:
    litellm = await load_litellm()
    urls = _direct_urls(fake)
    async with httpx.AsyncClient(timeout=120) as http:
        calls = {
            wire: (
                bare_call(http, urls[wire], _upstream(MODELS[wire])),
                litellm_call(litellm, fake, MODELS[wire]),
            )
            for wire in WIRES
        }
        return await compare(fake, "litellm alone, bare HTTP", calls, counts, None, False)


async def precis_rows(
    fake: FakeLLM, base_url: str, backend: str, counts: tuple[int, int]
) -> list[WireOverheadRow]:
    """Both wires with their clients, then as bare HTTP, directly and through Precis."""
    direct_openai = AsyncOpenAI(base_url=fake.base_url, api_key="bench", max_retries=0)
    direct_anthropic = AsyncAnthropic(
        base_url=fake.anthropic_base_url, api_key="bench", max_retries=0
    )
    proxied_openai = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="bench", max_retries=0)
    proxied_anthropic = AsyncAnthropic(base_url=base_url, api_key="bench", max_retries=0)
    urls = _direct_urls(fake)
    try:
        async with (
            httpx.AsyncClient(base_url=base_url, timeout=120) as precis,
            httpx.AsyncClient(timeout=120) as http,
        ):
            clients = {
                "chat_completions": (
                    openai_call(direct_openai, _upstream(CHAT_MODEL)),
                    openai_call(proxied_openai, CHAT_MODEL),
                ),
                "messages": (
                    anthropic_call(direct_anthropic, _upstream(MESSAGES_MODEL)),
                    anthropic_call(proxied_anthropic, MESSAGES_MODEL),
                ),
            }
            rows = await compare(fake, backend, clients, counts, precis, True)
            bare = {
                wire: (
                    bare_call(http, urls[wire], _upstream(MODELS[wire])),
                    bare_call(precis, PATHS[wire], MODELS[wire]),
                )
                for wire in WIRES
            }
            rows += await compare(fake, f"{backend}, bare HTTP", bare, counts, precis, False)
    finally:
        for client in (direct_openai, direct_anthropic, proxied_openai, proxied_anthropic):
            await client.close()
    return rows


async def run(
    backends: tuple[str, ...],
    calls: int = CALLS,
    long_calls: int = LONG_CALLS,
    postgres_admin_url: str = POSTGRES_ADMIN_URL,
) -> list[WireOverheadRow]:
    counts = (calls, long_calls)
    with running_fake_llm(responder=answer_constantly) as fake:
        rows = await litellm_rows(fake, counts)
        for backend in backends:
            async with migrated_database(backend, postgres_admin_url) as url:
                with served(
                    url,
                    model_allowed=f"{CHAT_MODEL},{MESSAGES_MODEL}",
                    model_api_base=fake.base_url,
                    model_api_key="bench",
                    model_context_tokens=f"{CHAT_MODEL}={WINDOW},{MESSAGES_MODEL}={WINDOW}",
                    summary_workers="0",
                ) as base_url:
                    rows += await precis_rows(fake, base_url, backend, counts)
    return rows


def render(rows: list[WireOverheadRow]) -> str:
    lines = [
        "| wire overhead | wire | earlier messages | calls | direct p50 ms | direct p95 ms "
        "| through Precis p50 ms | through Precis p95 ms | added p50 ms | added over 20 ms "
        "| target |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        over = f"{row.long_added_p50_ms:.2f}" if row.long_added_p50_ms is not None else ""
        lines.append(
            f"| {row.label} | {row.wire} | {row.messages:,} | {row.calls} "
            f"| {row.direct_p50_ms:.2f} | {row.direct_p95_ms:.2f} | {row.proxied_p50_ms:.2f} "
            f"| {row.proxied_p95_ms:.2f} | {row.added_p50_ms:.2f} | {over} | {_target(row)} |"
        )
    return "\n".join(lines)


def _target(row: WireOverheadRow) -> str:
    if not row.targeted:
        return ""
    bound = TARGET_LONG_ADDED_MS if row.long_added_p50_ms is not None else TARGET_ADDED_MS
    return f"<= {bound:g}{'  MISSED' if row.missed() else ''}"


def report(rows: list[WireOverheadRow]) -> list[dict[str, Any]]:
    return [
        {
            **asdict(row),
            "added_p50_ms": row.added_p50_ms,
            "long_added_p50_ms": row.long_added_p50_ms,
            "missed": row.missed(),
        }
        for row in rows
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=CALLS)
    parser.add_argument("--long-calls", type=int, default=LONG_CALLS)
    parser.add_argument("--backends", default="sqlite,postgresql", help="comma-separated")
    args = parser.parse_args()
    backends = tuple(args.backends.split(","))
    rows = asyncio.run(run(backends, args.calls, args.long_calls, POSTGRES_ADMIN_URL))
    print(render(rows))
    print(json.dumps(report(rows)))


if __name__ == "__main__":
    main()
