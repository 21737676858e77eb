"""A real agent CLI against Precis's Messages wire, offline: Claude Code
(`@anthropic-ai/claude-code` from npm, its native binary from the package's own platform
dependency) run as `claude -p` with Precis as its base URL, the model behind Precis the fake on
loopback (`mode="marker_echo"`: it repeats every `MARKER-...` token of the prompt it gets),
configured as docs/api.md tells a user ("Claude Code").

Claude Code names its session in `metadata.user_id`, so without any header each of its sessions
is a Precis session. One session, on each database: a prompt the model answers by reading a file
with the CLI's own `Read` tool, then the session resumed (`--resume`) with another prompt, the
CLI resending everything. The answers must carry every marker (the model got the stored context
each time) and Precis must hold the session's messages once each, in order, in one session.

Skipped or failed as the Node SDK tests are: without `node` in one line; with `node` and
CI=true, a failed install fails.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.client.keyed_server import AGENT_MODEL, TENANT_KEY, KeyedService, read_all
from tests.support.fake_llm import FakeLLM
from tests.support.node_openai import NodeUnavailable, node_binary, npm_package_dir, skip_or_fail

CLAUDE_CODE = "@anthropic-ai/claude-code"
CLAUDE_CODE_VERSION = "2.1.332"
"""The pinned release; its native binary needs no Node at run time, npm installs it."""

CLI_MODEL = AGENT_MODEL.removeprefix("anthropic/")
"""The model as the CLI names it (`ANTHROPIC_MODEL`): without litellm's provider, which
Precis adds back (the one allowed model of that name)."""

CLI_OUTPUT_TOKENS = "2000"
CLI_TIMEOUT_SECONDS = 120.0
"""One `claude -p` run: a few model calls to loopback; generous for a loaded CI machine."""

ANTHROPIC_BREAKPOINTS = 4
"""The most `cache_control` marks Anthropic takes in one request."""

FILE_TEXT = "MARKER-filed The launch code is 4711."
FIRST_PROMPT = "MARKER-alpha Read notes.txt and tell me what it says."
SECOND_PROMPT = "MARKER-beta And what did I ask first?"

try:  # at collection, so a machine without node skips the module in one line
    node_binary()
except NodeUnavailable as problem:
    skip_or_fail(problem, module_level=True)


@pytest.fixture(scope="module")
def claude() -> Path:
    """The `claude` executable of the pinned package, installed on first use."""
    try:
        folder = npm_package_dir(CLAUDE_CODE, CLAUDE_CODE_VERSION)
    except NodeUnavailable as problem:
        skip_or_fail(problem, module_level=False)
    return folder / "node_modules" / ".bin" / "claude"


@pytest.fixture(scope="module")
def fake(keyed_service: KeyedService) -> FakeLLM:
    return keyed_service.fake_for_module(mode="marker_echo")


@dataclass(frozen=True)
class Cli:
    """`claude -p` in a project folder of its own, with a home of its own (no user's
    configuration or sessions), pointed at Precis."""

    binary: Path
    project: Path
    home: Path
    precis_url: str

    def run(self, *arguments: str) -> dict[str, Any]:
        """The CLI's JSON result of `claude -p <arguments>`."""
        environment = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.home),
            "ANTHROPIC_BASE_URL": self.precis_url,
            "ANTHROPIC_API_KEY": TENANT_KEY,
            "ANTHROPIC_MODEL": CLI_MODEL,
            "ANTHROPIC_SMALL_FAST_MODEL": CLI_MODEL,
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS": CLI_OUTPUT_TOKENS,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
        completed = subprocess.run(
            [str(self.binary), "-p", *arguments, "--output-format", "json"],
            cwd=self.project,
            env=environment,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_SECONDS,
            check=False,
        )
        try:
            result: dict[str, Any] = json.loads(completed.stdout)
        except json.JSONDecodeError:
            pytest.fail(
                f"claude exited with {completed.returncode}:\n"
                f"{completed.stdout[-2000:]}\n{completed.stderr[-2000:]}"
            )
        assert result.get("is_error") is False, result
        return result


@pytest.fixture
def cli(claude: Path, keyed_service: KeyedService, tmp_path: Path) -> Cli:
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text(FILE_TEXT + "\n")
    home = tmp_path / "home"
    home.mkdir()
    return Cli(claude, project, home, keyed_service.url_allowing(AGENT_MODEL))


def session_ids(precis_url: str) -> set[str]:
    return {session["id"] for session in read_all(precis_url, "/v1/sessions")["sessions"]}


def stored(precis_url: str, session: str) -> list[dict[str, Any]]:
    """The session's messages: role, text, the tools called, the tool result answered."""
    messages = read_all(precis_url, f"/v1/sessions/{session}/messages")["messages"]
    return [
        {
            "role": message["role"],
            "text": json.dumps(message["content"]),
            "tools": [call["function"]["name"] for call in message.get("tool_calls") or []],
            "answers": message.get("tool_call_id"),
        }
        for message in messages
    ]


def test_a_claude_code_session_is_kept_once_and_resumed_from_precis(
    cli: Cli, fake: FakeLLM
) -> None:
    before = session_ids(cli.precis_url)
    fake.call_tool_next("Read", json.dumps({"file_path": str(cli.project / "notes.txt")}))

    first = cli.run(FIRST_PROMPT, "--allowedTools", "Read")

    assert first["result"].split() == ["MARKER-alpha", "MARKER-filed"]
    [session] = session_ids(cli.precis_url) - before
    messages = stored(cli.precis_url, session)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert "MARKER-alpha" in messages[1]["text"]
    assert messages[2]["tools"] == ["Read"]
    assert messages[3]["answers"] is not None and "MARKER-filed" in messages[3]["text"]

    calls_before = len(fake.calls)
    second = cli.run("--resume", first["session_id"], SECOND_PROMPT)

    assert second["result"].split() == ["MARKER-alpha", "MARKER-filed", "MARKER-beta"]
    [call] = fake.calls[calls_before:]
    assert [m["role"] for m in call.messages][-3:] == ["tool", "assistant", "user"]
    # its system prompt and tools are cached, with no more breakpoints than Anthropic takes
    assert call.request["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert json.dumps(call.request).count('"cache_control"') <= ANTHROPIC_BREAKPOINTS
    assert session_ids(cli.precis_url) - before == {session}, "the resend forked the session"
    resumed = stored(cli.precis_url, session)
    assert resumed[: len(messages)] == messages
    assert [m["role"] for m in resumed[len(messages) :]] == ["user", "assistant"]
    assert "MARKER-beta" in resumed[-2]["text"]


def test_two_claude_code_sessions_are_two_precis_sessions(cli: Cli, fake: FakeLLM) -> None:
    """The same first prompt in two sessions of the CLI: Precis keeps them apart, and neither
    answer carries the other's later turn."""
    before = session_ids(cli.precis_url)
    one = cli.run(SECOND_PROMPT)
    other = cli.run(SECOND_PROMPT)
    cli.run("--resume", one["session_id"], FIRST_PROMPT.replace("Read notes.txt and tell", "Tell"))

    again = cli.run("--resume", other["session_id"], "MARKER-gamma Anything else?")

    assert one["session_id"] != other["session_id"]
    assert again["result"].split() == ["MARKER-beta", "MARKER-gamma"]
    sessions = session_ids(cli.precis_url) - before
    assert len(sessions) == 2
    texts = {session: json.dumps(stored(cli.precis_url, session)) for session in sessions}
    assert sorted("MARKER-alpha" in text for text in texts.values()) == [False, True]
