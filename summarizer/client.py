"""The one interface every summarizer model implements: litellm, the local model, test doubles."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Completion:
    """One model answer and the tokens it cost."""

    text: str
    input_tokens: int
    output_tokens: int


class LLMClient(Protocol):
    """A chat model the engine can ask for one completion.

    `complete` makes ONE attempt (the engine owns retries) and raises only
    `summarizer.errors` exceptions: `ContextWindowError` when the prompt does not fit,
    `TransientLLMError` for what a retry may fix, `LLMRequestError` for the rest.
    """

    async def complete(self, messages: list[dict[str, Any]], *, max_tokens: int) -> Completion:
        """Answer `messages` in at most `max_tokens` tokens."""
        ...
