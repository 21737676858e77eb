"""Every prompt the summarizer sends, versioned: change the text, bump `PROMPT_VERSION`.

`tests/summarizer/test_prompts.py` pins a hash of the requests built here together with
the version, so a prompt edited without a new version fails the tests.

The user message wraps its material in tags (`<transcript>`, `<previous_summary>`,
`<summary>`, `<instructions>`), which the models are told about. Instructions (what the
summary must keep, from the session or the caller) come last, in the user message rather
than the system prompt: they steer what is kept, never the task. The offline model reads
none of this text: the summarizer hands it the same material as data
(`summarizer.client.CompletionRequest`).
"""

from __future__ import annotations

from collections.abc import Sequence

PROMPT_VERSION = "2026-11.3"
"""Version of the prompt texts below; stored in every summary's metadata."""

SUMMARY_PROMPT = """\
You summarize part of a chat between a user and an AI assistant (with its tool calls). \
Your summary replaces these messages in the assistant's context, so keep what the \
conversation needs to go on.

Write at most {target_tokens} tokens of plain text, in the language of the conversation, \
without a preamble. Keep first: what the user asked for and their constraints; decisions \
made and why; facts, numbers, names, file paths, commands, URLs and identifiers (copied \
exactly); tool calls that mattered and what they returned; open questions and next steps. \
Drop greetings, repetition and filler. Entries are marked [#seq role]; text marked […] \
was cut before it reached you."""

CONTINUE_PROMPT = (
    SUMMARY_PROMPT
    + """

A summary of the earlier conversation already exists and stays in the context: it is \
given after the transcript, in <previous_summary>, for reference only. Continue it: \
summarize only the new messages in <transcript>, do not repeat or rewrite what the \
previous summary says."""
)

MERGE_PROMPT = """\
You merge summaries of consecutive parts of one chat (oldest first) into one summary \
that replaces them. Write at most {target_tokens} tokens of plain text, in the \
language of the summaries, without a preamble. Keep the chronology, every user request, \
decision, number, name, path, command and identifier (copied exactly), and the open \
questions; drop what they repeat. Text marked […] was cut before it reached you."""

INSTRUCTIONS_PROMPT = """

Whoever reads the summary says what it must keep, in <instructions> after the material. \
Follow them as far as the material allows, within the same length: they say what to keep, \
they do not change this task."""
"""Added to the system prompt of a summary or a merge that is given instructions."""

TRANSCRIPT_TAG = "transcript"
PREVIOUS_TAG = "previous_summary"
SUMMARY_TAG = "summary"
INSTRUCTIONS_TAG = "instructions"


def _wrap(tag: str, body: str) -> str:
    return f"<{tag}>\n{body}\n</{tag}>"


def _request(
    template: str, target_tokens: int, parts: list[str], instructions: str | None
) -> list[dict[str, str]]:
    system = template.format(target_tokens=target_tokens)
    if instructions:
        system += INSTRUCTIONS_PROMPT
        parts = [*parts, _wrap(INSTRUCTIONS_TAG, instructions)]
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def summary_request(
    transcript: str,
    target_tokens: int,
    previous_summary: str | None = None,
    instructions: str | None = None,
) -> list[dict[str, str]]:
    """Chat messages asking for a summary of `transcript`, continuing `previous_summary`, as
    `instructions` ask."""
    template = CONTINUE_PROMPT if previous_summary else SUMMARY_PROMPT
    # The material comes first, the reference after it: a model that runs out of answer
    # room then drops repeated old facts, not new ones.
    parts = [_wrap(TRANSCRIPT_TAG, transcript)]
    if previous_summary:
        parts.append(_wrap(PREVIOUS_TAG, previous_summary))
    return _request(template, target_tokens, parts, instructions)


def merge_request(
    texts: Sequence[str], target_tokens: int, instructions: str | None = None
) -> list[dict[str, str]]:
    """Chat messages asking to merge consecutive summaries (oldest first) into one, as
    `instructions` ask."""
    parts = [_wrap(SUMMARY_TAG, text) for text in texts]
    return _request(MERGE_PROMPT, target_tokens, parts, instructions)
