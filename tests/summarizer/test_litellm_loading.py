"""How litellm is loaded (`summarizer.llm.load_litellm`): offline, and without work nobody
reads."""

from __future__ import annotations

from summarizer.llm import load_litellm


async def test_litellm_copies_no_request_for_a_log_nobody_reads() -> None:
    litellm = await load_litellm()
    messages = [{"role": "user", "content": "data:image/png;base64," + "A" * 1_000}]
    logged = await litellm.litellm_core_utils.logging_utils.truncate_base64_in_messages_async(
        messages
    )
    assert logged is messages
