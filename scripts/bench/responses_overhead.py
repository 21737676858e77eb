"""What `POST /v1/responses` with a conversation (or a `previous_response_id` chain) adds to a
model call, measured in one run.

    python -m scripts.bench.responses_overhead [--calls 200] [--backends sqlite,postgresql]
                                               [--model openai/gpt-4o-mini]

Part of `make bench` (`scripts.bench.run` prints its table). The loopback fake model
(Responses wire format, no latency) is called two ways with the same `openai` package, each
`--calls` times, one call at a time, by a chat app asking the next question of a ten-turn
conversation: directly (`base_url` the fake, the app sending the conversation itself: the
baseline), and through Precis served by uvicorn on a migrated database (`base_url` Precis,
`conversation=` a conversation holding those ten turns, made untimed before each call: the
history load, the model call through litellm and the turn's append); in the
"previous_response_id" rows, through Precis continuing a chain of stored responses (the ten
turns and the model's answer, made untimed before each call by one response); in the
"background" rows, the conversation's call made with `background=True` and polled until it
has completed (a server running the worker, no summaries); in the "background, streamed" rows,
made with `stream=True` too and read until its `response.completed` event. Both send the
model the same items. Per row: p50 and p95 of both, and what the second adds at p50, against the
target (TARGET_ADDED_MS).

Rows without a target explain the others. "litellm alone" measures `litellm.aresponses` the
same way, against the `openai` package, no Precis between. The "bare HTTP" rows make both calls
as bare `httpx` requests: the `openai` package encodes every item it sends (compare the direct
columns of the two kinds of rows), which the direct call pays and the call through Precis,
sending the question alone, does not; without it, the difference is what the Precis server
itself adds, and "litellm alone, bare HTTP" the share of it that is litellm's.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
from openai import AsyncOpenAI

from scripts.bench.lib import POSTGRES_ADMIN_URL
from tests.support import scratch_db
from tests.support.fake_llm import FakeLLM, running_fake_llm
from tests.support.live_server import served

MODEL = "openai/gpt-4o-mini"
"""A model name litellm knows, as a deployment names one (the fake answers any name). Behind an
unrecognised name litellm's own cost lookups take slower paths on every call, which is
litellm's time, not Precis's (`--model openai/fake` measures it)."""
CALLS = 200
WARMUP_CALLS = 2
"""Calls before each round of measured ones (connections opened, caches warm)."""
ROUND_CALLS = 10
WINDOW = 128_000
SEED_TURNS = 10
"""Turns of the conversation before the measured call (20 items: one conversations.create)."""
SEED_WORDS = 60
QUESTION = "How are you today?"
OUTPUT_TOKENS = 50
POLL_MS = 5.0
"""How often the background row's client polls a background response."""
TARGET_ADDED_MS = 3.0
"""The issue's bar: what Precis may add to a call at p50, the history load included."""
HEADERS = {"content-type": "application/json", "authorization": "Bearer bench"}
"""The bare HTTP requests' headers (the fake and a development-mode Precis take any key)."""


@dataclass
class OverheadRow:
    backend: str
    calls: int
    direct_p50_ms: float
    direct_p95_ms: float
    proxied_p50_ms: float
    proxied_p95_ms: float
    targeted: bool = True
    """False for the rows that explain the others (no target)."""

    @property
    def added_p50_ms(self) -> float:
        return self.proxied_p50_ms - self.direct_p50_ms

    def missed(self) -> bool:
        return self.targeted and self.added_p50_ms > TARGET_ADDED_MS


def _quantiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=20)
    return statistics.median(samples), cuts[18]


def seed_turns() -> list[Any]:
    """The conversation so far: SEED_TURNS questions and answers of some length."""
    items: list[Any] = []
    for turn in range(SEED_TURNS):
        text = " ".join(f"word{(turn * 11 + index) % 83}" for index in range(SEED_WORDS))
        items.append({"type": "message", "role": "user", "content": f"Question {turn}: {text}"})
        items.append({"type": "message", "role": "assistant", "content": f"Answer {turn}: {text}"})
    return items


async def _timed(calls: int, prepare: Any, call: Any) -> list[float]:
    """Milliseconds of `call(prepare())` after warming up; `prepare` is not timed."""
    samples = []
    for index in range(WARMUP_CALLS + calls):
        argument = await prepare()
        started = time.perf_counter()
        await call(argument)
        if index >= WARMUP_CALLS:
            samples.append((time.perf_counter() - started) * 1000)
    return samples


async def _nothing() -> None:
    return None


async def _alternated(
    label: str, calls: int, direct: Any, prepare: Any, other: Any, targeted: bool = True
) -> OverheadRow:
    """`direct()` against `other(prepare())`, alternated a few calls at a time so that drift
    of the machine hits both alike."""
    direct_samples: list[float] = []
    other_samples: list[float] = []
    for _ in range(calls // ROUND_CALLS):
        direct_samples += await _timed(ROUND_CALLS, _nothing, direct)
        other_samples += await _timed(ROUND_CALLS, prepare, other)
    return OverheadRow(
        label, calls, *_quantiles(direct_samples), *_quantiles(other_samples), targeted
    )


def _asked() -> list[Any]:
    """What the model is sent: the conversation so far and the next question."""
    return [*seed_turns(), {"type": "message", "role": "user", "content": QUESTION}]


def _bare_direct_call(client: httpx.AsyncClient, fake: FakeLLM) -> Any:
    """The direct call as a bare HTTP request, its body encoded once."""
    body = json.dumps(
        {"model": "fake", "input": _asked(), "max_output_tokens": OUTPUT_TOKENS}
    ).encode()

    async def call(_: None) -> None:
        answer = await client.post(f"{fake.base_url}/responses", content=body, headers=HEADERS)
        answer.raise_for_status()

    return call


async def measure(
    base_url: str,
    fake: FakeLLM,
    backend: str,
    calls: int,
    model: str = MODEL,
    background: Literal["polled", "streamed"] | None = None,
) -> OverheadRow:
    """The chat app's call with the `openai` package: to the fake directly, and through
    Precis. `background`: made with `background=True` and polled with `responses.retrieve`
    (every POLL_MS) until it has completed, or followed with `stream=True` until its last
    event: what a client waits for a background turn, the worker's claim included."""
    direct = AsyncOpenAI(base_url=fake.base_url, api_key="bench")
    proxied = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="bench")
    asked = _asked()

    async def call_direct(_: None) -> None:
        await direct.responses.create(model="fake", input=asked, max_output_tokens=OUTPUT_TOKENS)

    async def new_conversation() -> str:
        created = await proxied.conversations.create(items=seed_turns())
        return created.id

    async def call_proxied(conversation: str) -> None:
        if background == "streamed":
            events = await proxied.responses.create(
                model=model,
                input=QUESTION,
                conversation=conversation,
                max_output_tokens=OUTPUT_TOKENS,
                background=True,
                stream=True,
            )
            types = [event.type async for event in events]
            assert types[-1] == "response.completed", types
            return
        response = await proxied.responses.create(
            model=model,
            input=QUESTION,
            conversation=conversation,
            max_output_tokens=OUTPUT_TOKENS,
            background=background == "polled",
        )
        while response.status in ("queued", "in_progress"):
            await asyncio.sleep(POLL_MS / 1000)
            response = await proxied.responses.retrieve(response.id)
        assert response.status == "completed", (response.status, response.error)

    labels = {
        None: backend,
        "polled": f"{backend}, background",
        "streamed": f"{backend}, background, streamed",
    }
    label = labels[background]
    row = await _alternated(label, calls, call_direct, new_conversation, call_proxied)
    await direct.close()
    await proxied.close()
    return row


async def measure_chain(
    base_url: str, fake: FakeLLM, backend: str, calls: int, model: str = MODEL
) -> OverheadRow:
    """The same call continuing a `previous_response_id` chain instead of a conversation: the
    chain (the ten turns, then the model's answer) made by an untimed response before each
    call; the direct call sends the model those same items and the question."""
    direct = AsyncOpenAI(base_url=fake.base_url, api_key="bench")
    proxied = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="bench")

    async def new_chain() -> str:
        started = await proxied.responses.create(
            model=model, input=seed_turns(), max_output_tokens=OUTPUT_TOKENS
        )
        return started.id

    first = await proxied.responses.retrieve(await new_chain())
    answered = {"type": "message", "role": "assistant", "content": first.output_text}
    asked = [*seed_turns(), answered, {"type": "message", "role": "user", "content": QUESTION}]

    async def call_direct(_: None) -> None:
        await direct.responses.create(model="fake", input=asked, max_output_tokens=OUTPUT_TOKENS)

    async def call_proxied(previous: str) -> None:
        await proxied.responses.create(
            model=model,
            input=QUESTION,
            previous_response_id=previous,
            max_output_tokens=OUTPUT_TOKENS,
        )

    label = f"{backend}, previous_response_id"
    row = await _alternated(label, calls, call_direct, new_chain, call_proxied)
    await direct.close()
    await proxied.close()
    return row


async def measure_raw(
    base_url: str, fake: FakeLLM, backend: str, calls: int, model: str = MODEL
) -> OverheadRow:
    """The same two calls as bare HTTP requests of one `httpx` client, bodies encoded once:
    what the Precis server adds, without the `openai` package's request encoding, which costs
    the direct call more (it encodes every item of the conversation, where the call through
    Precis sends the question alone)."""
    async with httpx.AsyncClient(timeout=60) as client:

        async def new_conversation() -> bytes:
            created = await client.post(
                f"{base_url}/v1/conversations", json={"items": seed_turns()}, headers=HEADERS
            )
            created.raise_for_status()
            body = {
                "model": model,
                "input": QUESTION,
                "conversation": created.json()["id"],
                "max_output_tokens": OUTPUT_TOKENS,
            }
            return json.dumps(body).encode()

        async def call_proxied(body: bytes) -> None:
            answer = await client.post(f"{base_url}/v1/responses", content=body, headers=HEADERS)
            answer.raise_for_status()

        return await _alternated(
            f"{backend}, bare HTTP",
            calls,
            _bare_direct_call(client, fake),
            new_conversation,
            call_proxied,
            targeted=False,
        )


async def _litellm_call(fake: FakeLLM, model: str) -> Any:
    """`litellm.aresponses` of what the model is sent, no Precis between."""
    from summarizer.llm import load_litellm

    litellm = await load_litellm()
    asked = _asked()

    async def call(_: None) -> None:
        await litellm.aresponses(
            model=model,
            input=asked,
            max_output_tokens=OUTPUT_TOKENS,
            api_base=fake.base_url,
            api_key="bench",
            num_retries=0,
        )

    return call


async def litellm_floor(fake: FakeLLM, calls: int, model: str = MODEL) -> OverheadRow:
    """litellm against the `openai` package, both in this process, no Precis between."""
    direct = AsyncOpenAI(base_url=fake.base_url, api_key="bench")
    asked = _asked()

    async def call_direct(_: None) -> None:
        await direct.responses.create(model="fake", input=asked, max_output_tokens=OUTPUT_TOKENS)

    litellm_call = await _litellm_call(fake, model)
    row = await _alternated(
        "litellm alone", calls, call_direct, _nothing, litellm_call, targeted=False
    )
    await direct.close()
    return row


async def litellm_floor_raw(fake: FakeLLM, calls: int, model: str = MODEL) -> OverheadRow:
    """What litellm itself costs a call: against a bare HTTP request of the same body."""
    async with httpx.AsyncClient(timeout=60) as client:
        return await _alternated(
            "litellm alone, bare HTTP",
            calls,
            _bare_direct_call(client, fake),
            _nothing,
            await _litellm_call(fake, model),
            targeted=False,
        )


@asynccontextmanager
async def migrated_database(backend: str, postgres_admin_url: str) -> AsyncIterator[str]:
    """A fresh, migrated database of `backend` (`sqlite` or `postgresql`), dropped afterwards."""
    if backend == "postgresql":
        url = await scratch_db.create_postgres_database(postgres_admin_url, "precis_bench")
        try:
            await asyncio.to_thread(scratch_db.migrate, url)
            yield url
        finally:
            await scratch_db.drop_postgres_database(postgres_admin_url, url)
        return
    with tempfile.TemporaryDirectory(prefix="precis-bench-") as folder:
        url = f"sqlite+aiosqlite:///{Path(folder) / 'responses.db'}"
        await asyncio.to_thread(scratch_db.migrate, url)
        yield url


async def run(
    backends: tuple[str, ...],
    calls: int,
    postgres_admin_url: str = POSTGRES_ADMIN_URL,
    model: str = MODEL,
) -> list[OverheadRow]:
    rows = []
    with running_fake_llm() as fake:
        rows.append(await litellm_floor(fake, calls, model))
        rows.append(await litellm_floor_raw(fake, calls, model))
        serving = {
            "model_allowed": model,
            "model_api_base": fake.base_url,
            "model_api_key": "bench",
            "model_context_tokens": f"{model}={WINDOW}",
        }
        for backend in backends:
            async with migrated_database(backend, postgres_admin_url) as url:
                with served(url, **serving, summary_workers="0") as base_url:
                    rows.append(await measure(base_url, fake, backend, calls, model))
                    rows.append(await measure_chain(base_url, fake, backend, calls, model))
                    rows.append(await measure_raw(base_url, fake, backend, calls, model))
                with served(
                    url,
                    **serving,
                    summary_workers="1",  # the worker's replica runs background responses
                    dynamic_summary_enabled="false",
                ) as base_url:
                    for background in ("polled", "streamed"):
                        rows.append(
                            await measure(base_url, fake, backend, calls, model, background)
                        )
    return rows


def render(rows: list[OverheadRow]) -> str:
    lines = [
        "| responses overhead | calls | direct p50 ms | direct p95 ms | through Precis p50 ms "
        "| through Precis p95 ms | added p50 ms | target |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.backend} | {row.calls} | {row.direct_p50_ms:.2f} | {row.direct_p95_ms:.2f} "
            f"| {row.proxied_p50_ms:.2f} | {row.proxied_p95_ms:.2f} | {row.added_p50_ms:.2f} "
            f"| {_target(row)} |"
        )
    return "\n".join(lines)


def _target(row: OverheadRow) -> str:
    if not row.targeted:
        return ""
    return f"<= {TARGET_ADDED_MS:g}{'  MISSED' if row.missed() else ''}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=CALLS)
    parser.add_argument("--backends", default="sqlite,postgresql", help="comma-separated")
    parser.add_argument("--model", default=MODEL, help="the model name the calls give")
    args = parser.parse_args()
    rows = asyncio.run(
        run(tuple(args.backends.split(",")), args.calls, POSTGRES_ADMIN_URL, args.model)
    )
    print(render(rows))
    print(json.dumps([{**asdict(row), "added_p50_ms": row.added_p50_ms} for row in rows]))


if __name__ == "__main__":
    main()
