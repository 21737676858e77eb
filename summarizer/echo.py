"""Echo detection: does a model's answer repeat its input instead of summarizing it?

Both texts are normalized first: transcript headers (`[#seq role]`), the request's
section tags, punctuation, whitespace and case are dropped. What remains is cut into
tokens: one per run of letters or digits, and one per CJK ideograph or kana, since
those scripts do not separate words with spaces. The answer is an echo when most of
its n-grams of tokens occur in the source, it is long enough to matter, and it repeats
a large enough share of the source. Whitespace, a preamble ("Summary: ..."), dropped
headers or a cut at any point do not hide a copy; a summary that quotes a few names,
paths or phrases keeps most of its n-grams its own.
"""

from __future__ import annotations

import re

from summarizer.prompts import PREVIOUS_TAG, SUMMARY_TAG, TRANSCRIPT_TAG

ECHO_NGRAM = 4
"""Tokens per compared n-gram: four words (or CJK characters) seldom recur by chance, yet a
copy cut anywhere still shares almost all of them."""

ECHO_COPIED_SHARE = 0.8
"""An answer with at least this share of its n-grams found in the source is a copy: a genuine
summary, even one quoting phrases, paraphrases most of what it says."""

ECHO_MIN_TOKENS = 16
"""Answers with fewer tokens are never echoes: quoting a short request is a fair summary."""

ECHO_MIN_SOURCE_SHARE = 0.3
"""A copy is an echo only when it is at least this share of its source (in tokens): copying
less is an extractive lead summary, poor perhaps but shorter than its input, and rejecting
it would cost retries and end in the cruder deterministic fallback."""

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")
# unanchored, unlike the transcript's own: an echo may have its lines run together
_HEADER = re.compile(r"\[#-?\d+ (?:system|user|assistant|tool|developer)(?: [^\]\n]*)?\]")
_TAGS = re.compile(rf"</?(?:{TRANSCRIPT_TAG}|{PREVIOUS_TAG}|{SUMMARY_TAG})>")


def echo_tokens(text: str) -> list[str]:
    """The tokens compared: words, and single characters of CJK text, case-folded."""
    return _TOKEN.findall(_TAGS.sub(" ", _HEADER.sub(" ", text)).casefold())


def _ngrams(tokens: list[str]) -> list[tuple[str, ...]]:
    return [tuple(tokens[i : i + ECHO_NGRAM]) for i in range(len(tokens) - ECHO_NGRAM + 1)]


def _copied(answer: list[str], source: list[str]) -> float:
    grams = _ngrams(answer)
    if not grams:
        return 0.0
    known = set(_ngrams(source))
    return sum(gram in known for gram in grams) / len(grams)


def copied_share(answer: str, source: str) -> float:
    """The share of the answer's n-grams that occur in the source (0 for a tiny answer)."""
    return _copied(echo_tokens(answer), echo_tokens(source))


def is_echo(answer: str, source: str) -> bool:
    """Whether `answer` repeats `source` (or a large part of it) instead of summarizing it."""
    answer_tokens = echo_tokens(answer)
    if len(answer_tokens) < ECHO_MIN_TOKENS:
        return False
    source_tokens = echo_tokens(source)
    if len(answer_tokens) < ECHO_MIN_SOURCE_SHARE * len(source_tokens):
        return False
    return _copied(answer_tokens, source_tokens) >= ECHO_COPIED_SHARE


def drop_repeated_lines(answer: str, previous: str) -> str:
    """`answer` without the lines `previous` already says (compared as echo tokens).

    A continuation that repeats the previous summary duplicates it in the context; the
    repeated lines go, the new ones stay. An answer that would be left empty is kept whole.
    """
    said = {tuple(echo_tokens(line)) for line in previous.splitlines()}
    said.discard(())
    kept = [line for line in answer.splitlines() if tuple(echo_tokens(line)) not in said]
    trimmed = "\n".join(kept).strip()
    return trimmed if echo_tokens(trimmed) else answer
