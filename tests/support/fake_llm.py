"""A fake OpenAI-compatible model server on loopback, for tests, the benchmarks and the load test.

It serves `POST /v1/chat/completions`, `POST /v1/responses` (both with `stream: true` as
server-sent events) and `GET /v1/models` from a stdlib `ThreadingHTTPServer` in a daemon
thread, so litellm's real HTTP path runs against it. Point litellm at it with
`model="openai/<anything>"` (Responses requests go to `/responses`; `custom_openai/<anything>`
sends them as chat completions), `api_base=server.base_url`, `api_key="test"`.
A Responses request is read as the chat messages its items project to (`api.items.projection`,
the reading Precis counts tokens by), its `instructions` as a leading system message and its
`tools` as text: the window check and the answer modes see the same prompt either way.

Anthropic's Messages API (`tests/support/fake_anthropic.py` reads and writes its shapes):

- Base URL: `anthropic_base_url` (no `/v1`), as litellm's `api_base` for `anthropic/<anything>`
  and the `anthropic` client's `base_url`: both post to `{base}/v1/messages`. Any path ending
  in `/messages` is served, so `base_url` works too (`/v1/v1/messages`).
- `POST /v1/messages`, whole or streamed (`message_start`, `ping`, each block's start, word
  deltas and stop, `message_delta`, `message_stop`). The request is read as chat messages
  (system blocks first, `tool_use` as `tool_calls`, `tool_result` as `tool` messages, images
  as `image_url` parts; `thinking` and `cache_control` dropped), so every knob answers as on
  the chat path and `tools` are not counted. An answer clipped at `max_tokens` stops with
  `max_tokens`, `call_tool_next` answers a `tool_use` block (its arguments a JSON object).
- Errors in Anthropic's body (`{"type": "error", "error": {"type", "message"}}`): 529
  `overloaded_error`, 429 `rate_limit_error`, 500/503 `api_error`, ...; over the window a 400
  `prompt is too long: N tokens > M maximum` (or `input length and max_tokens exceed context
  limit: ...` when the prompt fits but not with `max_tokens` more): litellm maps both to
  `ContextWindowExceededError`.
- `POST /v1/messages/count_tokens` answers `{"input_tokens": N}` as the window check counts
  them; it is logged but takes no fault. Call paths are `/messages` and
  `/messages/count_tokens`; `Call.headers` holds every request's headers.

Knobs (plain attributes or methods, safe to change while it runs; `reset()` restores all):

- `context_window`: int or None. When `prompt tokens + max_tokens` exceed it, the server
  answers the exact 400 OpenAI returns (`code: context_length_exceeded`), which litellm
  maps to `ContextWindowExceededError`. Prompt tokens are counted with
  `summarizer.tokens.count_messages` plus `REPLY_PRIMING_TOKENS`.
- `mode`: how a successful call answers.
    - `"summary"` (default): a short deterministic summary of the last user message
      (its line count and first words), at most `summary_words` words and a quarter of
      the message's tokens as `summarizer.echo` counts them.
    - `"marker_echo"`: the perfect-recall model: every distinct token matching
      `MARKER-[A-Za-z0-9_-]+` found in the prompt, in order of first appearance, one per
      line (or `"no markers"`); like any model, it stops at `max_tokens`.
    - `"lossy_echo"`: `marker_echo` with a lossy memory: each call keeps each marker it reads
      with probability `keep_probability` (default 1: perfect recall), independently per call,
      decided by a hash of the marker and the call's number (the lossy answers counted from 0,
      in the order they are answered), so a fact that passes through d calls survives with
      probability p^d and a replay of the same calls, in the same order, answers the same.
    - `"echo"`: the last user message verbatim (a degenerate answer).
    - `"empty"`: an empty answer (a degenerate answer).
    - `"long"`: `long_words` words of filler (longer than small inputs).
- `responder`: optional `Callable[[list[dict]], str]`; when set it overrides `mode`.
- Streams: `stream_delay_seconds` sleeps between two events; `cut_next_stream(events)` makes
  the next streamed answer send that many events and then drop the connection;
  `streams_ended` counts the streamed answers that ended (sent whole, cut, or left by the
  client).
- `call_tool_next(name, arguments)`: the next successful answer is a call of that tool
  (`tool_calls` in chat, a `function_call` item in Responses) instead of text.
- `token_ratio`: this model counts `token_ratio` times the prompt tokens cl100k counts (the
  window check and the reported usage; default 1), as a model with another tokenizer does.
- `window_in_error`: True (default) puts the window and the prompt size in the 400 message,
  as OpenAI does; False sends a bare message, as some providers do.
- `latency_seconds`: sleep before every answer (the benchmark uses it).
- Failure injection, consumed one per request, before the window check:
    - `fail_next(status, times=1, retry_after=None)`: answer `status` (503, 500, 429, ...)
      `times` times; `retry_after` sets the `Retry-After` header (seconds).
    - `slow_next(seconds, times=1)`: sleep `seconds` before answering (past a client timeout).
    - `fail_always(status)` / `fail_always(None)`: every request fails until cleared.
- Connection refused: `stop()` closes the listening socket and every kept-alive connection;
  `start()` listens again on the same port. `closed_port_url()` gives a base URL on which
  nothing listens.
- Call log: `calls` is a list of `Call(messages, prompt_tokens, max_tokens, status, answer,
  request, path)`, one per request received (failed ones included; `request` is the body as
  received, `path` the endpoint); `prompts()` gives the user prompts,
  `statuses()` the statuses answered, `max_in_flight` the most concurrent requests seen,
  `prompt_tokens_received()` the prompt tokens of every request (as the window check counts
  them), of the answered ones only with `answered=True`.

In tests, the `fake_llm` fixture of `tests/conftest.py` gives a fresh server per test:

    async def test_something(fake_llm: FakeLLM) -> None:
        fake_llm.context_window = 4096
        ... SummarizerSettings(model="openai/fake", api_base=fake_llm.base_url, api_key="test") ...

Elsewhere: `with running_fake_llm() as server: ...`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from summarizer.echo import echo_tokens
from summarizer.prompts import PREVIOUS_TAG, SUMMARY_TAG, TRANSCRIPT_TAG
from summarizer.tokens import count_messages, count_text, encoding
from tests.support import fake_anthropic
from tests.support.fake_anthropic import COUNT_TOKENS_PATH, MESSAGES_PATH

REPLY_PRIMING_TOKENS = 3
"""Tokens OpenAI adds to every prompt to prime the reply (`<|start|>assistant<|message|>`)."""

MARKER_PATTERN = re.compile(r"MARKER-[A-Za-z0-9_-]+")
"""What `marker_echo` mode repeats back: the service tests plant these to prove nothing is lost."""

POLL_SECONDS = 0.02
"""How often the serving thread checks for shutdown: `stop()` waits up to this long."""

CHAT_PATH = "/chat/completions"
RESPONSES_PATH = "/responses"

SUMMARY_WORDS = 24
"""Default length of a `summary` mode answer, in words."""

_HASH_RANGE = 2**64
"""The values a marker's keep hash takes (`_kept`): 8 bytes of BLAKE2b."""

Responder = Callable[[list[dict[str, Any]]], str]


@dataclass
class Call:
    """One request the server received."""

    messages: list[dict[str, Any]]
    prompt_tokens: int
    max_tokens: int | None
    status: int
    answer: str | None = None
    request: dict[str, Any] = field(default_factory=dict)
    path: str = "/chat/completions"
    headers: dict[str, str] = field(default_factory=dict)
    """The request's headers, names in lower case."""


@dataclass
class _Fault:
    status: int | None = None
    retry_after: float | None = None
    delay: float = 0.0
    message: str | None = None
    """The error body's message, instead of the status's usual one."""
    param: str | None = None


@dataclass
class _State:
    context_window: int | None = None
    mode: str = "summary"
    responder: Responder | None = None
    latency_seconds: float = 0.0
    summary_words: int = SUMMARY_WORDS
    long_words: int = 400
    keep_probability: float = 1.0
    token_ratio: float = 1.0
    lossy_calls: int = 0
    """Answers `lossy_echo` has given: the number of the next one."""
    persistent_status: int | None = None
    window_in_error: bool = True
    in_flight: int = 0
    max_in_flight: int = 0
    faults: deque[_Fault] = field(default_factory=deque)
    tool_calls: deque[tuple[str, str]] = field(default_factory=deque)
    stream_delay_seconds: float = 0.0
    stream_cut_after: int | None = None
    streams_ended: int = 0
    """Streamed answers sent whole, cut, or left by their client."""
    calls: list[Call] = field(default_factory=list)


class FakeLLM:
    """An OpenAI-compatible chat-completions server on 127.0.0.1 with test knobs."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self._port = port
        self._lock = threading.Lock()
        self._state = _State()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # lifecycle ----------------------------------------------------------------------------

    def start(self) -> FakeLLM:
        """Listen (again) and serve in a daemon thread; keeps the port across restarts."""
        if self._server is not None:
            return self
        server = _Server((self.host, self._port), _Handler)
        server.fake = self
        self._port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": POLL_SECONDS}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close the listening socket: new connections are refused until `start()`."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            server.drop_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def reset(self) -> None:
        """Restore every knob to its default and clear the call log."""
        with self._lock:
            self._state = _State()

    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        """The `api_base` to give litellm for `openai/` models."""
        return f"http://{self.host}:{self._port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """The `api_base` for litellm's `anthropic/` models and the `base_url` for the
        `anthropic` client: both add `/v1/messages` to it."""
        return f"http://{self.host}:{self._port}"

    @staticmethod
    def closed_port_url() -> str:
        """A loopback base URL on which nothing listens (connection refused)."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    # knobs --------------------------------------------------------------------------------

    @property
    def context_window(self) -> int | None:
        return self._state.context_window

    @context_window.setter
    def context_window(self, tokens: int | None) -> None:
        self._state.context_window = tokens

    @property
    def mode(self) -> str:
        return self._state.mode

    @mode.setter
    def mode(self, mode: str) -> None:
        if mode not in _ANSWERS:
            raise ValueError(f"unknown mode {mode!r}; one of {sorted(_ANSWERS)}")
        self._state.mode = mode

    @property
    def responder(self) -> Responder | None:
        return self._state.responder

    @responder.setter
    def responder(self, responder: Responder | None) -> None:
        self._state.responder = responder

    @property
    def latency_seconds(self) -> float:
        return self._state.latency_seconds

    @latency_seconds.setter
    def latency_seconds(self, seconds: float) -> None:
        self._state.latency_seconds = seconds

    @property
    def summary_words(self) -> int:
        return self._state.summary_words

    @summary_words.setter
    def summary_words(self, words: int) -> None:
        self._state.summary_words = words

    @property
    def long_words(self) -> int:
        return self._state.long_words

    @long_words.setter
    def long_words(self, words: int) -> None:
        self._state.long_words = words

    @property
    def token_ratio(self) -> float:
        """How many tokens this model counts per token cl100k counts (default 1)."""
        return self._state.token_ratio

    @token_ratio.setter
    def token_ratio(self, ratio: float) -> None:
        self._state.token_ratio = ratio

    @property
    def keep_probability(self) -> float:
        """The chance that a `lossy_echo` call keeps one marker it reads (0 to 1)."""
        return self._state.keep_probability

    @keep_probability.setter
    def keep_probability(self, probability: float) -> None:
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"keep_probability must be within 0 and 1, not {probability}")
        self._state.keep_probability = probability

    @property
    def window_in_error(self) -> bool:
        return self._state.window_in_error

    @window_in_error.setter
    def window_in_error(self, included: bool) -> None:
        self._state.window_in_error = included

    @property
    def max_in_flight(self) -> int:
        """The most requests the server has handled at the same time."""
        return self._state.max_in_flight

    def fail_next(
        self,
        status: int,
        times: int = 1,
        retry_after: float | None = None,
        message: str | None = None,
        param: str | None = None,
    ) -> None:
        """Answer the next `times` requests with `status` (and `Retry-After` when given), the
        error body's `message` and `param` as given."""
        with self._lock:
            for _ in range(times):
                fault = _Fault(status, retry_after, message=message, param=param)
                self._state.faults.append(fault)

    def slow_next(self, seconds: float, times: int = 1) -> None:
        """Delay the next `times` answers by `seconds` (to go past a client timeout)."""
        with self._lock:
            for _ in range(times):
                self._state.faults.append(_Fault(delay=seconds))

    @property
    def stream_delay_seconds(self) -> float:
        return self._state.stream_delay_seconds

    @stream_delay_seconds.setter
    def stream_delay_seconds(self, seconds: float) -> None:
        self._state.stream_delay_seconds = seconds

    def cut_next_stream(self, events: int) -> None:
        """Send only `events` events of the next streamed answer, then drop the connection."""
        self._state.stream_cut_after = events

    def take_stream_cut(self) -> int | None:
        with self._lock:
            cut, self._state.stream_cut_after = self._state.stream_cut_after, None
            return cut

    @property
    def streams_ended(self) -> int:
        """How many streamed answers have ended: sent whole, cut, or left by their client (a
        write to a closed connection fails)."""
        return self._state.streams_ended

    def stream_ended(self) -> None:
        with self._lock:
            self._state.streams_ended += 1

    def call_tool_next(self, name: str, arguments: str) -> None:
        """Answer the next successful request with a call of tool `name` with `arguments`."""
        with self._lock:
            self._state.tool_calls.append((name, arguments))

    def fail_always(self, status: int | None) -> None:
        """Answer every request with `status` until called with None."""
        self._state.persistent_status = status

    # call log -----------------------------------------------------------------------------

    @property
    def calls(self) -> list[Call]:
        with self._lock:
            return list(self._state.calls)

    def statuses(self) -> list[int]:
        """The status answered to each request, in order."""
        return [call.status for call in self.calls]

    def prompts(self) -> list[str]:
        """The last user message of every request, in order."""
        return [_last_user_text(call.messages) for call in self.calls]

    def prompt_tokens_received(self, answered: bool = False) -> int:
        """The prompt tokens of every request received (of those answered 200 with
        `answered`), counted as the window check counts them."""
        return sum(call.prompt_tokens for call in self.calls if not answered or call.status == 200)

    def _next_lossy_call(self) -> int:
        with self._lock:
            number = self._state.lossy_calls
            self._state.lossy_calls += 1
            return number

    # request handling (server threads) ----------------------------------------------------

    def _next_fault(self, state: _State) -> _Fault | None:
        with self._lock:
            if state.persistent_status is not None:
                return _Fault(status=state.persistent_status)
            return state.faults.popleft() if state.faults else None

    def _log(self, call: Call, state: _State) -> None:
        """Record `call` in `state`: the state of the test the request arrived in, never the
        next test's (a slow answer may end after `reset`)."""
        with self._lock:
            state.calls.append(call)

    def handle(
        self,
        body: dict[str, Any],
        path: str = "/chat/completions",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        """Answer one request: (status, JSON body, extra headers)."""
        if path == COUNT_TOKENS_PATH:
            messages = fake_anthropic.chat_messages(body)
            tokens = _prompt_tokens(messages)
            call = Call(messages, tokens, None, 200, None, body, path, dict(headers or {}))
            self._log(call, self._state)
            return 200, {"input_tokens": tokens}, {}
        state = self._state
        with self._lock:
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            return self._answer(state, body, path, dict(headers or {}))
        finally:
            with self._lock:
                state.in_flight -= 1

    def _answer(
        self, state: _State, body: dict[str, Any], path: str, headers: dict[str, str]
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        responses = path == RESPONSES_PATH
        anthropic = path == MESSAGES_PATH
        if responses:
            messages = _responses_prompt(body)
            max_tokens = body.get("max_output_tokens")
        elif anthropic:
            messages = fake_anthropic.chat_messages(body)
            max_tokens = body.get("max_tokens")
        else:
            messages = list(body.get("messages") or [])
            max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        prompt_tokens = _prompt_tokens(messages)
        if responses and body.get("tools"):
            prompt_tokens += count_text(json.dumps(body["tools"]))
        prompt_tokens = math.ceil(prompt_tokens * state.token_ratio)

        def call(status: int, answer: str | None = None) -> Call:
            return Call(messages, prompt_tokens, max_tokens, status, answer, body, path, headers)

        fault = self._next_fault(state)
        if fault is not None and fault.delay:
            time.sleep(fault.delay)
        elif state.latency_seconds:
            time.sleep(state.latency_seconds)
        if fault is not None and fault.status is not None:
            self._log(call(fault.status), state)
            extra = {}
            if fault.retry_after is not None:
                extra["Retry-After"] = _seconds_header(fault.retry_after)
            if anthropic:
                return fault.status, fake_anthropic.error_body(fault.status, fault.message), extra
            return fault.status, _error_body(fault.status, fault.message, fault.param), extra
        window = state.context_window
        requested = prompt_tokens + int(max_tokens or 0)
        if window is not None and requested > window:
            self._log(call(400), state)
            overflow = fake_anthropic.context_error if anthropic else _context_error
            return 400, overflow(window, prompt_tokens, max_tokens, state.window_in_error), {}
        with self._lock:
            tool_call = state.tool_calls.popleft() if state.tool_calls else None
        if tool_call is not None:
            self._log(call(200, f"{tool_call[0]}({tool_call[1]})"), state)
            if responses:
                return 200, _response(body, None, tool_call, prompt_tokens), {}
            if anthropic:
                output_tokens = count_text(tool_call[1])
                reply = fake_anthropic.message(
                    body, None, tool_call, prompt_tokens, output_tokens, "tool_use"
                )
                return 200, reply, {}
            return 200, _completion(body, None, prompt_tokens, tool_call), {}
        whole = (
            state.responder(messages) if state.responder else _ANSWERS[state.mode](self, messages)
        )
        # a real model never exceeds max_tokens
        answer = _clip(whole, int(max_tokens)) if max_tokens else whole
        self._log(call(200, answer), state)
        if responses:
            return 200, _response(body, answer, None, prompt_tokens), {}
        if anthropic:
            stop = "end_turn" if answer == whole else "max_tokens"
            reply = fake_anthropic.message(
                body, answer, None, prompt_tokens, count_text(answer), stop
            )
            return 200, reply, {}
        return 200, _completion(body, answer, prompt_tokens), {}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    fake: FakeLLM

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self.open_connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()

    def drop_connections(self) -> None:
        """Close kept-alive client connections too, so a stopped server answers nothing."""
        with self.connections_lock:
            connections, self.open_connections = self.open_connections, set()
        for connection in connections:
            with suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.open_connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.open_connections.discard(self.connection)
        with suppress(OSError):
            super().finish()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        route = urlsplit(self.path).path.rstrip("/")
        paths = (CHAT_PATH, RESPONSES_PATH, MESSAGES_PATH, COUNT_TOKENS_PATH)
        path = next((p for p in paths if route.endswith(p)), None)
        if path is None:
            self._send(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            if path in (MESSAGES_PATH, COUNT_TOKENS_PATH):
                self._send(400, fake_anthropic.error_body(400, "bad JSON"))
            else:
                self._send(400, {"error": {"message": "bad JSON", "type": "invalid_request_error"}})
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        status, payload, extra = self.server.fake.handle(body, path, headers)
        if status == 200 and body.get("stream") and path != COUNT_TOKENS_PATH:
            if path == RESPONSES_PATH:
                events = _response_events(payload)
            elif path == MESSAGES_PATH:
                events = fake_anthropic.message_events(payload)
            else:
                events = _chat_chunks(payload)
            self._send_events(events)
        else:
            self._send(status, payload, extra)

    def _send_events(self, events: list[tuple[str | None, dict[str, Any] | str]]) -> None:
        """Server-sent events, one write each, as a streaming server sends them."""
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            fake = self.server.fake
            cut = fake.take_stream_cut()
            for index, (name, data) in enumerate(events):
                if cut is not None and index >= cut:
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if index and fake.stream_delay_seconds:
                    time.sleep(fake.stream_delay_seconds)
                text = data if isinstance(data, str) else json.dumps(data)
                prefix = f"event: {name}\n" if name else ""
                self.wfile.write(f"{prefix}data: {text}\n\n".encode())
                self.wfile.flush()
            self.close_connection = True
        except OSError:
            pass  # the client went away mid-stream
        finally:
            self.server.fake.stream_ended()

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def _send(
        self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test): nothing to answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


# answers ----------------------------------------------------------------------------------


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(str(part.get("text") or "") for part in content)
            return str(content or "")
    return ""


def _summary_answer(fake: FakeLLM, messages: list[dict[str, Any]]) -> str:
    text = _last_user_text(messages)
    lines = [line for line in text.splitlines() if line.strip()]
    # At most a quarter of the text, measured as the summarizer's echo check measures it (a
    # Chinese "word" between spaces is a whole clause of one-character tokens): a reply
    # copying more of its input is rightly rejected as an echo.
    budget = max(1, len(echo_tokens(text)) // 4)
    kept: list[str] = []
    used = 0
    for word in text.split()[: fake.summary_words]:
        used += len(echo_tokens(word))
        if used > budget:
            break
        kept.append(word)
    return f"Summary of {len(lines)} lines: " + " ".join(kept)


def _markers(messages: list[dict[str, Any]]) -> list[str]:
    """Every distinct marker of the prompt, in order of first appearance."""
    seen: dict[str, None] = {}
    for message in messages:
        content = message.get("content")
        text = json.dumps(content) if isinstance(content, list) else str(content or "")
        for marker in MARKER_PATTERN.findall(text):
            seen.setdefault(marker, None)
    return list(seen)


def _marker_answer(fake: FakeLLM, messages: list[dict[str, Any]]) -> str:
    return "\n".join(_markers(messages)) or "no markers"


def _kept(marker: str, call: int, probability: float) -> bool:
    """Whether call number `call` keeps `marker`: a hash of both, not a random draw, so a
    replay keeps the same ones, and each call decides apart from every other."""
    digest = hashlib.blake2b(f"{call}\0{marker}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < probability * _HASH_RANGE


def _lossy_answer(fake: FakeLLM, messages: list[dict[str, Any]]) -> str:
    call = fake._next_lossy_call()
    probability = fake.keep_probability
    kept = [marker for marker in _markers(messages) if _kept(marker, call, probability)]
    return "\n".join(kept) or "no markers"


def _echo_answer(fake: FakeLLM, messages: list[dict[str, Any]]) -> str:
    return _last_user_text(messages)


def _empty_answer(fake: FakeLLM, messages: list[dict[str, Any]]) -> str:
    return ""


def _long_answer(fake: FakeLLM, messages: list[dict[str, Any]]) -> str:
    return " ".join(f"filler{index % 10}" for index in range(fake.long_words))


ACKNOWLEDGEMENT = "Noted."
"""What `recall_in_summaries_only` answers a conversation turn."""


def recall_in_summaries_only(messages: list[dict[str, Any]]) -> str:
    """A `responder` for a fake that is both the summarizer and the conversation's model: a
    summarizer's prompt (its transcript or summaries, in the prompts' tags) gets perfect recall
    (every marker, as `marker_echo`), a conversation turn only `ACKNOWLEDGEMENT`, so a fact
    reaches the model's request only through the stored conversation or its summaries."""
    text = json.dumps(messages, ensure_ascii=False)
    if not any(f"<{tag}>" in text for tag in (TRANSCRIPT_TAG, PREVIOUS_TAG, SUMMARY_TAG)):
        return ACKNOWLEDGEMENT
    return "\n".join(dict.fromkeys(MARKER_PATTERN.findall(text))) or "no markers"


_ANSWERS: dict[str, Callable[[FakeLLM, list[dict[str, Any]]], str]] = {
    "summary": _summary_answer,
    "marker_echo": _marker_answer,
    "lossy_echo": _lossy_answer,
    "echo": _echo_answer,
    "empty": _empty_answer,
    "long": _long_answer,
}


def _completion(
    body: dict[str, Any],
    answer: str | None,
    prompt_tokens: int,
    tool_call: tuple[str, str] | None = None,
) -> dict[str, Any]:
    completion_tokens = count_text(answer or "")
    message: dict[str, Any] = {"role": "assistant", "content": answer}
    if tool_call is not None:
        message["tool_calls"] = [
            {
                "id": f"call_{_hex()}",
                "type": "function",
                "function": {"name": tool_call[0], "arguments": tool_call[1]},
            }
        ]
    return {
        "id": f"chatcmpl-fake-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model") or "fake"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_call is not None else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _hex() -> str:
    return uuid.uuid4().hex


def _prompt_tokens(messages: list[dict[str, Any]]) -> int:
    return count_messages(messages) + REPLY_PRIMING_TOKENS


def _responses_prompt(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A Responses request read as chat messages: instructions first, then each input item's
    projection (as Precis reads items)."""
    from api.items import projection  # the service's reading of items; test support only

    given = body.get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given or [])
    messages = (
        [{"role": "system", "content": body["instructions"]}] if body.get("instructions") else []
    )
    return messages + [projection(item) for item in items]


def _response(
    body: dict[str, Any],
    answer: str | None,
    tool_call: tuple[str, str] | None,
    prompt_tokens: int,
) -> dict[str, Any]:
    if tool_call is not None:
        output: dict[str, Any] = {
            "type": "function_call",
            "id": f"fc_{_hex()}",
            "call_id": f"call_{_hex()}",
            "name": tool_call[0],
            "arguments": tool_call[1],
            "status": "completed",
        }
        output_tokens = count_text(tool_call[1])
    else:
        output = {
            "type": "message",
            "id": f"msg_{_hex()}",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": answer or "", "annotations": []}],
        }
        output_tokens = count_text(answer or "")
    return {
        "id": f"resp_{_hex()}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": str(body.get("model") or "fake"),
        "output": [output],
        "parallel_tool_calls": True,
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": body.get("tools") or [],
        "usage": {
            "input_tokens": prompt_tokens,
            "output_tokens": output_tokens,
            "total_tokens": prompt_tokens + output_tokens,
        },
    }


def _response_events(response: dict[str, Any]) -> list[tuple[str | None, dict[str, Any] | str]]:
    """The Responses API's event stream of one answer: created, the text in word deltas,
    completed."""
    started = {**response, "status": "in_progress", "output": []}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": started},
        {"type": "response.in_progress", "response": started},
    ]
    for index, item in enumerate(response["output"]):
        if item["type"] != "message":
            events.append(
                {"type": "response.output_item.added", "output_index": index, "item": item}
            )
            events.append(
                {"type": "response.output_item.done", "output_index": index, "item": item}
            )
            continue
        text = item["content"][0]["text"]
        ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
        empty = {"type": "output_text", "text": "", "annotations": []}
        events.append(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**item, "status": "in_progress", "content": []},
            }
        )
        events.append({"type": "response.content_part.added", **ids, "part": empty})
        for word in re.findall(r"\S+\s*|\s+", text):
            events.append(
                {"type": "response.output_text.delta", **ids, "delta": word, "logprobs": []}
            )
        events.append({"type": "response.output_text.done", **ids, "text": text, "logprobs": []})
        events.append({"type": "response.content_part.done", **ids, "part": item["content"][0]})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": response})
    return [(event["type"], {**event, "sequence_number": n}) for n, event in enumerate(events)]


def _chat_chunks(completion: dict[str, Any]) -> list[tuple[str | None, dict[str, Any] | str]]:
    """A chat completion as the stream of chunks a streaming server sends, then `[DONE]`."""
    message = completion["choices"][0]["message"]
    base = {key: completion[key] for key in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks: list[tuple[str | None, dict[str, Any] | str]] = [(None, chunk({"role": "assistant"}))]
    if message.get("tool_calls"):
        calls = [{"index": 0, **message["tool_calls"][0]}]
        chunks.append((None, chunk({"tool_calls": calls})))
    for word in re.findall(r"\S+\s*|\s+", message.get("content") or ""):
        chunks.append((None, chunk({"content": word})))
    final = chunk({}, completion["choices"][0]["finish_reason"])
    final["usage"] = completion["usage"]
    chunks.append((None, final))
    chunks.append((None, "[DONE]"))
    return chunks


def _context_error(
    window: int, prompt_tokens: int, max_tokens: int | None, detailed: bool
) -> dict[str, Any]:
    if not detailed:
        message = "The prompt is too long for this model's context window."
    elif max_tokens:
        message = (
            f"This model's maximum context length is {window} tokens. However, you requested "
            f"{prompt_tokens + int(max_tokens)} tokens ({prompt_tokens} in the messages, "
            f"{max_tokens} in the completion). Please reduce the length of the messages or "
            "completion."
        )
    else:
        message = (
            f"This model's maximum context length is {window} tokens. However, your messages "
            f"resulted in {prompt_tokens} tokens. Please reduce the length of the messages."
        )
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


_ERROR_TYPES = {
    429: ("rate_limit_exceeded", "Rate limit reached for requests. Please try again later."),
    500: ("server_error", "The server had an error while processing your request."),
    502: ("bad_gateway", "Bad gateway."),
    503: ("service_unavailable", "The engine is currently overloaded, please try again later."),
}


def _error_body(
    status: int, message: str | None = None, param: str | None = None
) -> dict[str, Any]:
    kind, usual = _ERROR_TYPES.get(status, ("invalid_request_error", f"Injected error {status}."))
    return {"error": {"message": message or usual, "type": kind, "param": param, "code": kind}}


def _clip(text: str, max_tokens: int) -> str:
    tokens = encoding().encode_ordinary(text)
    if len(tokens) <= max_tokens:
        return text
    return encoding().decode_bytes(tokens[:max_tokens]).decode("utf-8", "ignore")


def _seconds_header(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"


@contextmanager
def running_fake_llm(**knobs: Any) -> Iterator[FakeLLM]:
    """Start a FakeLLM with the given knobs (attribute names) and stop it afterwards."""
    server = FakeLLM().start()
    for name, value in knobs.items():
        setattr(server, name, value)
    try:
        yield server
    finally:
        server.stop()
