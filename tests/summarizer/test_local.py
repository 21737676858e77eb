"""The offline `local` model: deterministic, within target, important lines first, no network."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from summarizer import EngineSettings, summarize
from summarizer.local import LocalSummarizer, merge_texts, summarize_transcript
from summarizer.prompts import summary_request
from summarizer.tokens import count_text
from summarizer.transcript import TranscriptOptions, join, render
from tests.summarizer.builders import assistant, call, filler, result, user


def project_chat() -> list[dict[str, Any]]:
    chatter = "That sounds like a lovely idea and I am happy to help with it in every way."
    messages: list[dict[str, Any]] = [
        user(1, "Please migrate the billing service to PostgreSQL 15 before Friday."),
        assistant(2, chatter + " " + filler(300)),
        user(3, "Keep the backups in /var/backups/billing and run `make migrate` first."),
        assistant(4, "We decided to use pg_dump with 4 parallel jobs. " + filler(300)),
        call(5, "c1", name="run_shell"),
        result(6, "c1", "migration 0042 applied"),
        assistant(7, chatter + " The weather is nice."),
    ]
    for seq in range(8, 30, 2):
        messages.append(user(seq, "ok " + filler(40)))
        messages.append(assistant(seq + 1, chatter))
    return messages


def transcript_of(messages: list[dict[str, Any]]) -> str:
    return join(render(messages, TranscriptOptions()))


def test_local_summary_is_deterministic() -> None:
    transcript = transcript_of(project_chat())
    assert summarize_transcript(transcript, 200) == summarize_transcript(transcript, 200)


@pytest.mark.parametrize("target", [40, 120, 400])
def test_local_summary_honours_the_target(target: int) -> None:
    summary = summarize_transcript(transcript_of(project_chat()), target)
    assert 0 < count_text(summary) <= target


def test_requests_numbers_paths_and_commands_come_first() -> None:
    summary = summarize_transcript(transcript_of(project_chat()), 150)
    for kept in ("PostgreSQL 15", "/var/backups/billing", "`make migrate`", "4 parallel jobs"):
        assert kept in summary
    assert "weather" not in summary
    assert "Tools used: run_shell ×1." in summary


def test_a_tiny_exchange_is_kept_verbatim_not_inflated() -> None:
    summary = summarize_transcript(transcript_of([user(1, "hi"), assistant(2, "hello")]), 100)
    assert summary == "user: hi\nassistant: hello"


def test_previous_summary_lines_are_not_repeated() -> None:
    transcript = transcript_of(project_chat())
    first = summarize_transcript(transcript, 150)
    continued = summarize_transcript(transcript, 150, previous=first)
    repeated = set(first.splitlines()[1:]) & set(continued.splitlines())
    assert not {line for line in repeated if line.startswith("- ")}


def test_merge_keeps_the_requests_of_both_summaries() -> None:
    first = summarize_transcript(transcript_of(project_chat()[:4]), 120)
    second = summarize_transcript(
        transcript_of([user(40, "Also rotate the API key KEY-7781 on the staging box.")]), 120
    )
    merged = merge_texts([first, second], 120)
    assert "PostgreSQL 15" in merged and "KEY-7781" in merged
    assert count_text(merged) <= 120


async def test_local_client_reads_the_target_from_the_prompt() -> None:
    request = summary_request(transcript_of(project_chat()), target_tokens=60)
    completion = await LocalSummarizer().complete(request, max_tokens=1000)
    assert count_text(completion.text) <= 60
    assert completion.input_tokens > completion.output_tokens


async def test_local_model_needs_no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the local model opened a connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    result_ = await summarize(project_chat(), EngineSettings(target_tokens=120))
    assert result_ is not None
    assert result_.metadata["llm_calls"] == 1 and not result_.metadata["truncated"]
    assert result_.summary_tokens <= 120
