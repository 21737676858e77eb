"""Replay a shipped sample conversation against a running Precis server, then show the result.

    python -m scripts.demo [--base-url http://127.0.0.1:8000] [--api-key KEY] [--session ID]

The conversation (`demo_conversation.json`: a real chat with tool calls and some Chinese
and German) goes in batches into a new session whose settings make the summarizer work
early. The demo waits for the background summaries, then prints the history a chat
backend would load and the trace of the newest summary back to its source messages.
HTTP only: it needs nothing but the server's URL (and a key when API_KEYS is set).
Exit status: 0 when done, 2 when the server cannot be reached or refuses a request.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as `python scripts/demo.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from typing import Any, TextIO

import httpx

from scripts.cli import run_command
from scripts.trace_summary import (
    describe_content,
    format_table,
    line_width,
    metadata_line,
    metadata_value,
    wrapped,
)

PROG = "demo"

CONVERSATION = Path(__file__).with_name("demo_conversation.json")
"""The shipped sample conversation."""

DEFAULT_BASE_URL = "http://127.0.0.1:8000"

DEMO_SETTINGS: dict[str, Any] = {"message_limit": 12, "keep_last_n": 4, "summary_limit": 2}
"""Session settings small enough that a 41-message chat gets summaries and a roll-up."""

BATCH_SIZE = 6
"""Messages per append, like a chat backend storing a few turns at a time."""

HISTORY_MAX_TOKENS = 4000
"""Budget of the history the demo loads, as a chat backend would before an LLM call."""

WAIT_SECONDS = 120.0
"""Longest wait for the background summarization to finish."""

POLL_SECONDS = 0.2
"""Delay between two looks at `summarization_pending`."""

HTTP_TIMEOUT_SECONDS = 120.0
"""Per request: a `compact` answers only when its summary is written."""

PAGE_SIZE = 1000
"""Largest page of messages the API returns."""


class DemoError(Exception):
    """The server could not be reached or refused a request; the message says which."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Options:
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = None
    session: str | None = None
    conversation: Path = CONVERSATION


# --- HTTP -----------------------------------------------------------------------------------


async def call(
    client: httpx.AsyncClient,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One request; a transport error or a non-2xx answer becomes a DemoError."""
    try:
        response = await client.request(method, path, json=body, params=params)
    except httpx.HTTPError as exc:
        raise DemoError(
            f"cannot reach {client.base_url}: {exc or type(exc).__name__}; "
            "is the server running (make run)?"
        ) from exc
    if response.is_error:
        raise DemoError(
            f"{method} {path} answered {response.status_code}: {error_detail(response)}",
            response.status_code,
        )
    answer: dict[str, Any] = response.json()
    return answer


def error_detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", response.text))
    except ValueError:
        return response.text[:200]


async def wait_until_idle(client: httpx.AsyncClient, session_id: str) -> None:
    """Poll the history until no summarization of the session is pending or running."""
    deadline = time.monotonic() + WAIT_SECONDS
    path = f"/v1/sessions/{session_id}/history"
    while (await call(client, "GET", path, params={"summary_limit": 1}))["summarization_pending"]:
        if time.monotonic() > deadline:
            raise DemoError(f"summarization still pending after {WAIT_SECONDS:.0f} s")
        await asyncio.sleep(POLL_SECONDS)


async def messages_between(
    client: httpx.AsyncClient, session_id: str, first_seq: int, last_seq: int
) -> list[dict[str, Any]]:
    """Raw messages first_seq..last_seq, page by page."""
    found: list[dict[str, Any]] = []
    after = first_seq - 1
    while after < last_seq:
        page = await call(
            client,
            "GET",
            f"/v1/sessions/{session_id}/messages",
            params={"after_seq": after, "limit": min(PAGE_SIZE, last_seq - after)},
        )
        found.extend(page["messages"])
        if not page["messages"] or page["next_cursor"] is None:
            break
        after = page["messages"][-1]["seq"]
    return [message for message in found if message["seq"] <= last_seq]


# --- the demo -------------------------------------------------------------------------------


def load_conversation(path: Path) -> tuple[str, list[dict[str, Any]]]:
    document = json.loads(path.read_text(encoding="utf-8"))
    return str(document.get("title", path.stem)), list(document["messages"])


async def replay(
    client: httpx.AsyncClient, session_id: str, messages: Sequence[dict[str, Any]], out: TextIO
) -> None:
    """Append in batches; after a batch that scheduled summarization, wait for it."""
    for start in range(0, len(messages), BATCH_SIZE):
        batch = [
            {**message, "client_id": f"demo-{index}"}
            for index, message in enumerate(messages[start : start + BATCH_SIZE], start + 1)
        ]
        answer = await call(
            client, "POST", f"/v1/sessions/{session_id}/messages", {"messages": batch}
        )
        seqs = [message["seq"] for message in answer["messages"]]
        line = f"  appended seqs {seqs[0]}..{seqs[-1]}"
        if answer["summarization"]["scheduled"]:
            line += f"  -> summarization scheduled ({answer['summarization']['reason']})"
        out.write(line + "\n")
        if answer["summarization"]["scheduled"]:
            await wait_until_idle(client, session_id)


async def load_history(client: httpx.AsyncClient, session_id: str) -> dict[str, Any]:
    """The history under the demo's budget; compacts by hand if no summary was made."""
    path = f"/v1/sessions/{session_id}/history"
    history = await call(client, "GET", path, params={"max_tokens": HISTORY_MAX_TOKENS})
    if history["summaries"]:
        return history
    await call(client, "POST", f"/v1/sessions/{session_id}/compact", {"trigger": "manual"})
    return await call(client, "GET", path, params={"max_tokens": HISTORY_MAX_TOKENS})


async def create_session(client: httpx.AsyncClient, session_id: str) -> None:
    body = {"id": session_id, "metadata": {"source": "precis demo"}, "settings": DEMO_SETTINGS}
    try:
        await call(client, "POST", "/v1/sessions", body)
    except DemoError as exc:
        if exc.status == HTTPStatus.CONFLICT:
            raise DemoError(f"{exc}; name another with --session", exc.status) from exc
        raise


async def run_demo(client: httpx.AsyncClient, options: Options, out: TextIO) -> str:
    """Replay, then print the history and the newest summary's trace; returns the session id."""
    title, messages = load_conversation(options.conversation)
    session_id = options.session or f"demo-{uuid.uuid4().hex[:8]}"
    await call(client, "GET", "/readyz")
    await create_session(client, session_id)
    out.write(
        f"Replaying {len(messages)} messages of “{title}” into session {session_id}\n"
        f"  session settings: {json.dumps(DEMO_SETTINGS)}\n"
    )
    await replay(client, session_id, messages, out)
    await wait_until_idle(client, session_id)
    history = await load_history(client, session_id)
    width = line_width(out)
    out.write("\n" + "\n".join(history_lines(session_id, history, width)) + "\n")
    if not history["summaries"]:
        raise DemoError("no summary was made: is summarization enabled on the server?")
    newest = history["summaries"][-1]
    out.write("\n" + "\n".join(await trace_lines(client, session_id, newest["id"], width)) + "\n")
    # The tools find the session in whichever tenant has it: no --tenant needed with API keys.
    out.write(
        "\nOn the server's machine, operators can go further (read-only, from DATABASE_URL):\n"
        f"  python -m scripts.trace_summary --session {session_id}\n"
        f"  python -m scripts.verify --session {session_id}\n"
    )
    return session_id


# --- printing -------------------------------------------------------------------------------


def summary_rows(summaries: Sequence[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            str(s["id"]),
            str(s["level"]),
            f"{s['first_seq']}..{s['last_seq']}",
            str(s["message_count"]),
            metadata_value(s["metadata"], "trigger_reason"),
            metadata_value(s["metadata"], "compression_ratio"),
            s["summary_text"],
        ]
        for s in summaries
    ]


def history_lines(session_id: str, history: dict[str, Any], width: int) -> list[str]:
    summaries, messages, context = history["summaries"], history["messages"], history["context"]
    lines = [
        f"History of {session_id} (GET /v1/sessions/{session_id}/history"
        f"?max_tokens={HISTORY_MAX_TOKENS}):",
        f"  {len(summaries)} summaries + {len(messages)} newest messages -> "
        f"{len(context)} context messages, about {history['token_estimate']} tokens",
        "",
        "  Summaries loaded (oldest first):",
    ]
    headers = ("id", "level", "seqs", "messages", "reason", "ratio", "text")
    lines += [f"    {line}" for line in format_table(headers, summary_rows(summaries), width - 4)]
    lines += ["", "  Context, ready for an OpenAI-compatible chat API:"]
    rows = [[str(index), item["role"], context_text(item)] for index, item in enumerate(context, 1)]
    lines += [f"    {line}" for line in format_table(("#", "role", "content"), rows, width - 4)]
    return lines


def context_text(item: dict[str, Any]) -> str:
    return describe_content(item.get("content"), item.get("tool_calls"), item.get("tool_call_id"))


async def trace_lines(
    client: httpx.AsyncClient, session_id: str, summary_id: int, width: int
) -> list[str]:
    """The newest summary, its metadata, what it absorbed and its source messages."""
    summary = await call(client, "GET", f"/v1/summaries/{summary_id}")
    first, last = summary["first_seq"], summary["last_seq"]
    lines = [
        f"Trace of the newest summary (GET /v1/summaries/{summary_id}):",
        f"  summary {summary_id} · level {summary['level']} · seqs {first}..{last} · "
        f"{summary['message_count']} messages · model {summary['model']}",
        *wrapped("metadata: ", metadata_line(summary["metadata"]), "  ", width),
        "  text:",
        *(f"    {line}".rstrip() for line in summary["summary_text"].splitlines()),
    ]
    if summary["level"] > 0:
        lines += await absorbed_lines(client, session_id, summary_id)
    messages = await messages_between(client, session_id, first, last)
    found = {message["id"] for message in messages}
    lines += [
        "",
        f"  Source messages (GET /v1/sessions/{session_id}/messages?after_seq={first - 1}), "
        f"{len(found & set(summary['message_ids']))} of {len(summary['message_ids'])} linked:",
    ]
    rows = [[str(m["seq"]), m["role"], short(m["created_at"]), context_text(m)] for m in messages]
    headers = ("seq", "role", "created_at", "content")
    lines += [f"    {line}" for line in format_table(headers, rows, width - 4)]
    return lines


async def absorbed_lines(client: httpx.AsyncClient, session_id: str, summary_id: int) -> list[str]:
    page = await call(
        client,
        "GET",
        f"/v1/sessions/{session_id}/summaries",
        params={"include_superseded": "true", "limit": PAGE_SIZE},
    )
    absorbed = [s for s in page["summaries"] if s["superseded_by"] == summary_id]
    parts = ", ".join(
        f"{s['id']} (seqs {s['first_seq']}..{s['last_seq']})"
        for s in sorted(absorbed, key=lambda s: s["first_seq"])
    )
    return [f"  a roll-up: it absorbed summaries {parts or '(none found)'}"]


def short(created_at: str) -> str:
    return datetime.fromisoformat(created_at).strftime("%Y-%m-%d %H:%M:%S")


# --- command line ---------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog=f"python -m scripts.{PROG}",
        description="Replay a sample conversation into a running Precis server and show it.",
    )
    parser.add_argument("--base-url", default=DEFAULT_BASE_URL, help=f"default: {DEFAULT_BASE_URL}")
    parser.add_argument("--api-key", help="bearer key (needed when the server has API_KEYS)")
    parser.add_argument("--session", metavar="ID", help="session id (default: demo-<random>)")
    args = parser.parse_args(argv)
    return Options(base_url=args.base_url, api_key=args.api_key, session=args.session)


def http_client(options: Options) -> httpx.AsyncClient:
    headers = {"authorization": f"Bearer {options.api_key}"} if options.api_key else {}
    return httpx.AsyncClient(
        base_url=options.base_url, headers=headers, timeout=HTTP_TIMEOUT_SECONDS
    )


async def run(options: Options, out: TextIO, err: TextIO) -> int:
    """The command without the event loop: tests await it with their own streams."""
    async with http_client(options) as client:
        try:
            await run_demo(client, options, out)
        except DemoError as exc:
            err.write(f"{PROG}: {exc}\n")
            return 2
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(run, parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
