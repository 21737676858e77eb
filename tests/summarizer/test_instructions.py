"""Guided summaries: instructions reach every prompt (leaves and merges), the offline model
keeps what they name first, and every summary's metadata records them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from summarizer import (
    CompletionRequest,
    LocalSummarizer,
    MergeTask,
    SummarizerSettings,
    SummaryTask,
    merge_summaries,
    summarize,
)
from summarizer.fallback import fallback_summary
from summarizer.local import instruction_keywords, merge_texts, summarize_transcript
from summarizer.prompts import INSTRUCTIONS_PROMPT, merge_request, summary_request
from summarizer.transcript import TranscriptEntry, TranscriptOptions, transcript_entries
from tests.summarizer.builders import assistant, call, filler, result, user
from tests.support.fake_llm import FakeLLM

ASKED = "Keep every error message"
ERROR_LINE = "error: disk quota exceeded on the build host"


def busy_chat() -> list[dict[str, Any]]:
    """A chat whose error line sits in a tool result, after an opening the model keeps anyway,
    among more requests and facts than a small target holds."""
    messages = [
        user(1, "Please fix the deployment pipeline today."),
        call(2, "c1", name="run_shell"),
        result(3, "c1", f"Deployment finished in 42 seconds.\n{ERROR_LINE}"),
        assistant(4, "I looked at the logs. The quota on the shared volume is the likely cause."),
    ]
    for seq in range(5, 25, 2):
        request = f"Step {seq}: update the config of service-{seq} in /etc/app/{seq}.yaml. "
        messages.append(user(seq, request + filler(30)))
        messages.append(assistant(seq + 1, f"Done, service-{seq} uses port {8000 + seq} now."))
    return messages


def entries() -> list[TranscriptEntry]:
    return transcript_entries(busy_chat(), TranscriptOptions())


def test_instructions_follow_the_material_of_a_summary_request() -> None:
    system, asked = summary_request("[#1 user] hi", 100, "the story so far", ASKED)
    assert system["content"].endswith(INSTRUCTIONS_PROMPT)
    assert asked["content"].endswith(f"<instructions>\n{ASKED}\n</instructions>")
    assert asked["content"].index("<previous_summary>") < asked["content"].index("<instructions>")


def test_instructions_follow_the_summaries_of_a_merge_request() -> None:
    system, asked = merge_request(["first part", "second part"], 100, ASKED)
    assert system["content"].endswith(INSTRUCTIONS_PROMPT)
    assert asked["content"].endswith(f"<instructions>\n{ASKED}\n</instructions>")


def test_a_request_without_instructions_says_nothing_of_them() -> None:
    for request in (summary_request("[#1 user] hi", 100), merge_request(["a", "b"], 100)):
        assert "instructions" not in str(request)


def test_instruction_keywords_are_what_they_name_not_how_to_summarize() -> None:
    keywords = instruction_keywords("Keep every file path and error message, and all the URLs.")
    assert keywords == {"file", "path", "error", "message", "url"}
    assert instruction_keywords(None) == frozenset()


def test_the_offline_model_keeps_what_the_instructions_name() -> None:
    assert ERROR_LINE not in summarize_transcript(entries(), 150)
    assert ERROR_LINE in summarize_transcript(entries(), 150, instructions=ASKED)


async def test_the_offline_model_reads_the_instructions_from_its_task() -> None:
    """The task's instructions steer it; the prompt's text never does."""
    shown = entries()
    request = CompletionRequest(
        messages=summary_request("(not read)", 150),
        max_tokens=200,
        target_tokens=150,
        task=SummaryTask(tuple(shown), None, ASKED),
    )
    completion = await LocalSummarizer().complete(request)
    assert ERROR_LINE in completion.text


def test_an_offline_merge_keeps_what_the_instructions_name() -> None:
    first = summarize_transcript(entries(), 400, instructions=ASKED)
    second = "\n".join(f"- Port {8100 + i} is open on host-{i} at /srv/{i}." for i in range(30))
    assert ERROR_LINE in first
    assert ERROR_LINE not in merge_texts([first, second], 100)
    assert ERROR_LINE in merge_texts([first, second], 100, ASKED)


async def test_an_offline_merge_task_carries_the_instructions() -> None:
    first = summarize_transcript(entries(), 400, instructions=ASKED)
    second = "\n".join(f"- Port {8100 + i} is open on host-{i} at /srv/{i}." for i in range(30))
    request = CompletionRequest(
        messages=merge_request(["(not read)", "(not read)"], 100),
        max_tokens=120,
        target_tokens=100,
        task=MergeTask((first, second), ASKED),
    )
    assert ERROR_LINE in (await LocalSummarizer().complete(request)).text


def test_a_fallback_summary_follows_the_instructions() -> None:
    assert ERROR_LINE not in fallback_summary(entries(), 170, "llm_unavailable")
    assert ERROR_LINE in fallback_summary(entries(), 170, "llm_unavailable", None, ASKED)


async def test_every_summary_records_its_instructions_in_metadata() -> None:
    guided = SummarizerSettings(target_tokens=150, instructions=ASKED)
    made = await summarize(busy_chat(), guided)
    assert made is not None
    assert made.metadata["instructions"] == ASKED
    assert ERROR_LINE in made.summary_text
    plain = await summarize(busy_chat(), SummarizerSettings(target_tokens=150))
    assert plain is not None and plain.metadata["instructions"] is None
    merged = await merge_summaries(["one part", "another part"], guided)
    assert merged.metadata["instructions"] == ASKED


async def test_a_chat_model_gets_the_instructions_in_every_leaf_and_merge_call(
    fake_llm: FakeLLM, llm_settings: Callable[..., SummarizerSettings]
) -> None:
    """A window too small for the chat: leaves and merges, each told the instructions."""
    made = await summarize(
        busy_chat(), llm_settings(model_context_tokens=700, target_tokens=60, instructions=ASKED)
    )
    assert made is not None and made.metadata["chunk_count"] > 1
    prompts = [call.messages for call in fake_llm.calls]
    merges = [messages for messages in prompts if "<summary>" in messages[-1]["content"]]
    assert merges and len(merges) < len(prompts)
    for messages in prompts:
        assert messages[0]["content"].endswith(INSTRUCTIONS_PROMPT)
        assert messages[-1]["content"].endswith(f"<instructions>\n{ASKED}\n</instructions>")
