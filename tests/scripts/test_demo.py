"""scripts.demo against a real server started by the test, on both databases."""

from __future__ import annotations

import asyncio
import io
import json
import re
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator

import pytest
import uvicorn
from sqlalchemy.ext.asyncio import AsyncEngine

from api.main import create_app
from scripts import demo, trace_summary, verify
from tests.conftest import make_settings
from tests.support.scratch_db import REPO_ROOT

API_KEY = "demo-key"
TENANT = "demo"
STARTUP_SECONDS = 20.0


@pytest.fixture
async def server_url(engine: AsyncEngine, database_url: str) -> AsyncIterator[str]:
    """The app served by uvicorn on a free loopback port, in a thread with its own loop."""
    app = create_app(make_settings(database_url, api_keys=f"{TENANT}:{API_KEY}"))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_SECONDS
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        await asyncio.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.to_thread(thread.join, STARTUP_SECONDS)
        listener.close()


def test_the_shipped_conversation_has_tool_pairs_and_non_english_text() -> None:
    document = json.loads(demo.CONVERSATION.read_text(encoding="utf-8"))
    messages = document["messages"]

    calls = {c["id"] for m in messages for c in m.get("tool_calls") or ()}
    results = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
    assert calls and calls == results
    assert any("\u4e00" <= char <= "\u9fff" for m in messages for char in m["content"] or "")
    assert len(messages) > demo.DEMO_SETTINGS["message_limit"] * 3
    assert demo.CONVERSATION.stat().st_size <= 60_000


async def test_demo_replays_the_conversation_and_shows_history_and_trace(
    server_url: str, database_url: str
) -> None:
    command = [sys.executable, "-m", "scripts.demo", "--base-url", server_url]
    process = await asyncio.create_subprocess_exec(
        *command,
        "--api-key",
        API_KEY,
        "--session",
        "demo-test",
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    raw_out, raw_err = await process.communicate()
    out = raw_out.decode()

    assert process.returncode == 0, raw_err.decode()
    assert "Replaying 41 messages" in out
    assert "summarization scheduled (message_limit)" in out
    assert "History of demo-test (GET /v1/sessions/demo-test/history?max_tokens=4000)" in out
    assert "Summary of earlier conversation" in out
    assert "[result of call_answers_1]" in out
    assert "请用中文简要总结这次访谈的三个要点。" in out
    assert "Trace of the newest summary (GET /v1/summaries/" in out
    assert "metadata: algorithm=bisect_v1" in out
    linked = re.search(r"Source messages .*, (\d+) of (\d+) linked:", out)
    assert linked is not None and linked[1] == linked[2]

    await assert_verified_and_rolled_up(database_url, operator_commands(out))


def operator_commands(out: str) -> dict[str, list[str]]:
    """The operator tools the demo tells people to run: module name -> arguments."""
    commands: dict[str, list[str]] = {}
    for line in out.splitlines():
        words = line.split()
        if words[:2] == ["python", "-m"]:
            commands[words[2]] = words[3:]
    return commands


async def assert_verified_and_rolled_up(database_url: str, commands: dict[str, list[str]]) -> None:
    """The tool commands the demo printed work as shown: verify passes, the tree has a roll-up.

    The session is in tenant `demo`, not `default`: the commands need no --tenant.
    """
    assert commands == {
        "scripts.trace_summary": ["--session", "demo-test"],
        "scripts.verify": ["--session", "demo-test"],
    }
    where = ["--database-url", database_url]
    out, err = io.StringIO(), io.StringIO()
    options = verify.parse_args([*commands["scripts.verify"], *where])
    assert await verify.run(options, out, err) == 0, out.getvalue() + err.getvalue()
    assert out.getvalue().startswith("Checked 1 session ")

    trace_out = io.StringIO()
    options_trace = trace_summary.parse_args([*commands["scripts.trace_summary"], *where])
    assert await trace_summary.run(options_trace, trace_out, err) == 0, err.getvalue()
    assert f"(tenant {TENANT}," in trace_out.getvalue()
    assert "└─ leaf " in trace_out.getvalue(), "a node over the leaves it was made from"


async def test_a_wrong_api_key_stops_the_demo_with_exit_2(server_url: str) -> None:
    out, err = io.StringIO(), io.StringIO()

    code = await demo.run(demo.Options(base_url=server_url, api_key="wrong"), out, err)

    assert code == 2
    assert err.getvalue() == "demo: POST /v1/sessions answered 401: invalid API key\n"


async def test_an_unreachable_server_stops_the_demo_with_exit_2() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{unused.getsockname()[1]}"
    out, err = io.StringIO(), io.StringIO()

    code = await demo.run(demo.Options(base_url=url), out, err)

    assert code == 2
    assert err.getvalue().startswith(f"demo: cannot reach {url}")
