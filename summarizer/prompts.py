"""Every prompt the summarizer sends, versioned: change the text, bump `PROMPT_VERSION`.

`tests/summarizer/test_prompts.py` pins a hash of the requests built here together with
the version, so a prompt edited without a new version fails the tests.

The user message wraps its material in tags (`<transcript>`, `<previous_summary>`,
`<summary>`), which the models are told about. The offline model reads none of this text:
the summarizer hands it the same material as data (`summarizer.client.CompletionRequest`).
"""

from __future__ import annotations

PROMPT_VERSION = "2026-11.1"
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
You merge two summaries of consecutive parts of one chat (the first is older) into one \
summary that replaces both. Write at most {target_tokens} tokens of plain text, in the \
language of the summaries, without a preamble. Keep the chronology, every user request, \
decision, number, name, path, command and identifier (copied exactly), and the open \
questions; drop what the two repeat. Text marked […] was cut before it reached you."""

TRANSCRIPT_TAG = "transcript"
PREVIOUS_TAG = "previous_summary"
SUMMARY_TAG = "summary"


def _wrap(tag: str, body: str) -> str:
    return f"<{tag}>\n{body}\n</{tag}>"


def summary_request(
    transcript: str, target_tokens: int, previous_summary: str | None = None
) -> list[dict[str, str]]:
    """Chat messages asking for a summary of `transcript`, continuing `previous_summary`."""
    template = CONTINUE_PROMPT if previous_summary else SUMMARY_PROMPT
    # The material comes first, the reference after it: a model that runs out of answer
    # room then drops repeated old facts, not new ones.
    parts = [_wrap(TRANSCRIPT_TAG, transcript)]
    if previous_summary:
        parts.append(_wrap(PREVIOUS_TAG, previous_summary))
    return [
        {"role": "system", "content": template.format(target_tokens=target_tokens)},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def merge_request(first: str, second: str, target_tokens: int) -> list[dict[str, str]]:
    """Chat messages asking to merge two consecutive summaries into one."""
    return [
        {"role": "system", "content": MERGE_PROMPT.format(target_tokens=target_tokens)},
        {
            "role": "user",
            "content": _wrap(SUMMARY_TAG, first) + "\n\n" + _wrap(SUMMARY_TAG, second),
        },
    ]
