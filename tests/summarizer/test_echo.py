"""Echo detection: copies of the input fail, however cut or dressed; real summaries pass."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from summarizer import DegenerateAnswerError, SummarizerSettings, merge_summaries, summarize
from summarizer.echo import ECHO_COPIED_SHARE, copied_share, echo_tokens
from summarizer.fallback import FALLBACK_PREFIX
from summarizer.prompts import TRANSCRIPT_TAG, summary_request
from summarizer.retry import check_answer
from summarizer.transcript import TranscriptOptions, join, render
from tests.summarizer.builders import sharegpt
from tests.support.fake_llm import FakeLLM

Settings = Callable[..., SummarizerSettings]

ENGLISH = 19
"""A WooCommerce tracking conversation: requests, PHP and C# code, explanations."""

CHINESE = 33
"""A short aerodynamics conversation (dynamic stall), almost all Chinese."""

ENGLISH_SUMMARY = (
    "The user builds Auto, a marketing automation app integrated with WooCommerce, and wants "
    "to attribute WooCommerce purchases to contacts who arrived from an Auto landing page. The "
    "assistant proposed adding a unique tracking parameter (contact ID, or email plus "
    "timestamp) to the product links. WooCommerce does not store it by itself, so the shop "
    "needs a plugin or custom code. The assistant gave PHP for step 2, "
    "extract_tracking_parameter() hooked on 'init', which reads the `tracking` query parameter "
    "into $GLOBALS['tracking_parameter'], and for step 3, "
    "save_tracking_parameter_in_order($order_id) hooked on "
    "woocommerce_checkout_update_order_meta, which calls update_post_meta($order_id, "
    "'_tracking_parameter', ...). It explained that update_post_meta is WordPress's metadata "
    "API and that the hook only decides when the save runs. Finally, for the Auto side in C# "
    "with WooCommerceNET, it showed retrieving an order through the REST API (wc/v3) with a "
    "consumer key and secret and looping over order.meta_data for the key "
    "_tracking_parameter. Open: where the tracking parameter is generated and how contacts "
    "are matched."
)
"""What a good model writes for the English conversation: it quotes names, paths and code."""

CHINESE_SUMMARY = (
    "用户询问空气动力学中的“动态时速”，助手解释为飞机相对空气的速度，受风影响，用于控制姿态和航迹；"
    "随后从二维翼型角度补充：翼型与气流作用产生升力和阻力，逆风或顺风会使其与实际飞行速度不同。"
    "用户接着问二维翼型的动态失速，助手称阻力超过升力导致速度下降，多见于低速或大迎角，"
    "飞行员应减小迎角，否则可能失速下坠。最后用户问风力发电机中的动态失速，助手说是风速变化快时"
    "风轮转速来不及调整、输出能量减少，通常靠变桨调速系统调节，回答在此中断。"
)
"""What a good model writes for the Chinese conversation: it reuses the terms of the chat."""

FIRST_HALF_SUMMARY = (
    "The user builds Auto, a marketing automation app integrated with WooCommerce, and wants "
    "to know which WooCommerce purchases come from contacts who signed up on an Auto landing "
    "page. The assistant proposed a unique tracking parameter (a contact ID, or email plus "
    "timestamp) on every product link. WooCommerce does not store it by itself: the shop "
    "needs a plugin or custom code that saves it as order meta. For step 2 it gave PHP: "
    "extract_tracking_parameter(), hooked on 'init', reads the `tracking` query parameter "
    "into $GLOBALS['tracking_parameter']."
)
SECOND_HALF_SUMMARY = (
    "For step 3 the assistant gave save_tracking_parameter_in_order($order_id), hooked on "
    "woocommerce_checkout_update_order_meta, which calls update_post_meta($order_id, "
    "'_tracking_parameter', $tracking_parameter). It explained that update_post_meta belongs "
    "to WordPress's metadata API and that the hook only decides when the save happens, after "
    "checkout. For the Auto side, in C# with WooCommerceNET, it showed fetching an order "
    "through the REST API (wc/v3) with a consumer key and secret and reading the "
    "_tracking_parameter entry of order.meta_data."
)
"""Summaries of the two halves of the English conversation, as a roll-up would merge them."""


def request_text(messages: list[dict[str, Any]]) -> str:
    """The user message the summarizer sends to summarize `messages`: the echo check's source."""
    transcript = join(render(messages, TranscriptOptions()))
    return summary_request(transcript, 800)[-1]["content"]


def transcript_of(source: str) -> str:
    """The transcript a summary request's user message wraps, as a model reading it sees it."""
    opening, closing = f"<{TRANSCRIPT_TAG}>\n", f"\n</{TRANSCRIPT_TAG}>"
    return source.split(opening, 1)[1].rsplit(closing, 1)[0]


def test_a_real_summary_quoting_names_and_code_is_not_an_echo() -> None:
    source = request_text(sharegpt(ENGLISH))
    assert "update_post_meta($order_id, '_tracking_parameter'" in ENGLISH_SUMMARY  # it quotes
    check_answer(ENGLISH_SUMMARY, source)
    assert copied_share(ENGLISH_SUMMARY, source) < ECHO_COPIED_SHARE / 2


def test_a_real_chinese_summary_is_not_an_echo() -> None:
    source = request_text(sharegpt(CHINESE))
    check_answer(CHINESE_SUMMARY, source)
    assert copied_share(CHINESE_SUMMARY, source) < ECHO_COPIED_SHARE / 2


def test_quoting_the_opening_request_in_full_is_not_an_echo() -> None:
    messages = sharegpt(ENGLISH)
    source = request_text(messages)
    answer = "The user asked: " + messages[0]["content"]
    assert copied_share(answer, source) > ECHO_COPIED_SHARE  # copied, but a small share
    check_answer(answer, source)


def test_prefixed_echo_is_degenerate() -> None:
    source = request_text(sharegpt(ENGLISH))
    with pytest.raises(DegenerateAnswerError, match="repeats its input"):
        check_answer("Summary: " + transcript_of(source), source)


def test_echo_without_headers_and_whitespace_is_degenerate() -> None:
    messages = sharegpt(ENGLISH)
    source = request_text(messages)
    flattened = " ".join(" ".join(m["content"].split()) for m in messages)
    with pytest.raises(DegenerateAnswerError):
        check_answer(flattened, source)


def test_echo_of_the_first_40_percent_is_degenerate() -> None:
    source = request_text(sharegpt(ENGLISH))
    transcript = transcript_of(source)
    with pytest.raises(DegenerateAnswerError):
        check_answer(transcript[: len(transcript) * 4 // 10], source)


def test_short_chinese_echo_is_degenerate() -> None:
    messages = sharegpt(CHINESE)[:2]
    source = request_text(messages)
    answer = messages[1]["content"][:60]
    assert len(answer) < 80  # too short for a check counting characters
    assert len(echo_tokens(answer)) == 57  # one token per character, punctuation dropped
    with pytest.raises(DegenerateAnswerError):
        check_answer(answer, source)


async def test_prefixed_echo_from_the_model_is_retried_then_falls_back(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.responder = lambda messages: "Summary: " + transcript_of(messages[-1]["content"])
    result = await summarize(sharegpt(ENGLISH), llm_settings(max_attempts=2))
    assert result is not None
    assert (result.metadata["llm_calls"], result.metadata["failed_llm_calls"]) == (2, 2)
    assert result.metadata["fallback"] and result.summary_text.startswith(FALLBACK_PREFIX)


async def test_real_summary_from_the_model_is_accepted(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.responder = lambda messages: CHINESE_SUMMARY
    result = await summarize(sharegpt(CHINESE), llm_settings())
    assert result is not None
    assert (result.metadata["llm_calls"], result.metadata["failed_llm_calls"]) == (1, 0)
    assert result.summary_text == CHINESE_SUMMARY


async def test_merge_returning_inputs_that_fit_its_target_is_accepted(
    fake_llm: FakeLLM, llm_settings: Settings
) -> None:
    fake_llm.responder = lambda messages: f"{FIRST_HALF_SUMMARY}\n{SECOND_HALF_SUMMARY}"
    texts = [FIRST_HALF_SUMMARY, SECOND_HALF_SUMMARY]
    merged = await merge_summaries(texts, llm_settings(merge_target_tokens=1200))
    assert (merged.metadata["llm_calls"], merged.metadata["failed_llm_calls"]) == (1, 0)
    assert not merged.metadata["fallback"]


async def test_the_extractive_local_model_is_not_checked_for_echoes() -> None:
    messages = sharegpt(ENGLISH)
    result = await summarize(messages, SummarizerSettings())
    assert result is not None
    assert copied_share(result.summary_text, request_text(messages)) > 0.5  # extractive
    assert result.metadata["failed_llm_calls"] == 0 and not result.metadata["fallback"]
