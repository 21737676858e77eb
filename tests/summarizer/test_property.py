"""Property: for random chats with tool exchanges, leaf chunks partition the input legally.

The model here is an in-process `LLMClient` with a context window (the summarizer's own
Protocol, no litellm), so hypothesis can run many examples quickly.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from summarizer import Completion, CompletionRequest, SummarizerSettings, summarize
from summarizer.cuts import summarizable_count
from summarizer.errors import ContextWindowError
from summarizer.tokens import count_messages
from tests.summarizer.builders import assistant, call, filler, result, separates_a_call, user


class WindowedModel:
    """Answers briefly, or raises `ContextWindowError` like a provider would."""

    def __init__(self, window: int) -> None:
        self.window = window

    async def complete(self, request: CompletionRequest) -> Completion:
        prompt = count_messages(request.messages) + 3
        if prompt + request.max_tokens > self.window:
            raise ContextWindowError("too long", window_tokens=self.window, prompt_tokens=prompt)
        return Completion("a short summary of the part", prompt, 6)


@st.composite
def chats(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for step in range(draw(st.integers(1, 30))):
        seq = len(messages) + 1
        size = draw(st.integers(5, 900))
        kind = draw(st.sampled_from(["user", "assistant", "tools"]))
        if kind == "user":
            messages.append(user(seq, filler(size)))
        elif kind == "assistant":
            messages.append(assistant(seq, filler(size)))
        else:
            ids = [f"s{step}c{i}" for i in range(draw(st.integers(1, 3)))]
            messages.append(call(seq, *ids))
            for call_id in ids:
                messages.append(result(len(messages) + 1, call_id, filler(size)))
    return messages


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chats(), st.booleans(), st.integers(0, 4))
def test_leaf_chunks_are_contiguous_legal_slices_partitioning_the_input(
    messages: list[dict[str, Any]], known: bool, keep_last_n: int
) -> None:
    window = 3000
    summarizer_settings = SummarizerSettings(
        model="in-process",
        target_tokens=100,
        merge_target_tokens=150,
        model_context_tokens=window if known else None,
        bisect_max_depth=10,
        keep_last_n=keep_last_n,
        max_attempts=1,
    )
    summary = asyncio.run(summarize(messages, summarizer_settings, client=WindowedModel(window)))
    count = summarizable_count(messages, keep_last_n)
    if count == 0:
        assert summary is None
        return
    assert summary is not None
    seqs = [message["seq"] for message in messages[:count]]
    leaves = summary.leaf_ranges
    assert leaves[0][0] == seqs[0] and leaves[-1][1] == seqs[-1]
    position = {seq: index for index, seq in enumerate(seqs)}
    for (_, last), (first, _) in itertools.pairwise(leaves):
        assert position[first] == position[last] + 1  # contiguous, no overlap, no gap
        assert not separates_a_call(messages, position[first])
    assert summary.metadata["chunk_count"] == len(leaves)
    if known:
        assert summary.metadata["failed_llm_calls"] == 0
    else:
        assert summary.metadata["failed_llm_calls"] <= max(1, summary.metadata["max_depth"])
