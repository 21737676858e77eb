"""The fake model's `lossy_echo` mode: each call keeps each marker it reads with probability p,
by a hash of the marker and the call's number, so a fact passing through d calls survives with
probability p^d and a replay answers the same.

The mode is pure, so these tests call `FakeLLM.handle` directly, without a server.
"""

from __future__ import annotations

import pytest

from tests.support.fake_llm import MARKER_PATTERN, FakeLLM

MARKERS = 2_000
"""Enough markers that a survival share lies within a few points of its expectation."""

TOLERANCE = 0.035
"""Five standard deviations of a share of 2,000 draws at p = 0.9 (about 0.007 each)."""


def _prompt(markers: list[str]) -> str:
    return "Summarize:\n" + "\n".join(f"{marker} some words around it" for marker in markers)


def _ask(fake: FakeLLM, prompt: str) -> str:
    status, body, _ = fake.handle({"messages": [{"role": "user", "content": prompt}]})
    assert status == 200
    answer: str = body["choices"][0]["message"]["content"]
    return answer


def _lossy(probability: float) -> FakeLLM:
    fake = FakeLLM()
    fake.mode = "lossy_echo"
    fake.keep_probability = probability
    return fake


def _markers(count: int) -> list[str]:
    return [f"MARKER-f{index:04d}" for index in range(count)]


def test_the_same_calls_keep_the_same_markers() -> None:
    prompts = [_prompt(_markers(200)), _prompt(_markers(300)[100:])]
    first, second = _lossy(0.5), _lossy(0.5)
    assert [_ask(first, p) for p in prompts] == [_ask(second, p) for p in prompts]


def test_each_call_decides_apart_from_the_others() -> None:
    fake = _lossy(0.5)
    prompt = _prompt(_markers(200))
    assert _ask(fake, prompt) != _ask(fake, prompt)


def test_a_fact_passing_through_d_calls_survives_with_p_to_the_d() -> None:
    fake = _lossy(0.9)
    text = _prompt(_markers(MARKERS))
    for depth in range(1, 6):
        text = _ask(fake, text)
        survived = len(set(MARKER_PATTERN.findall(text))) / MARKERS
        assert survived == pytest.approx(0.9**depth, abs=TOLERANCE), depth


def test_keeping_with_probability_1_is_perfect_recall() -> None:
    lossy, perfect = _lossy(1.0), FakeLLM()
    perfect.mode = "marker_echo"
    for count in (0, 1, 50, 500):
        prompt = _prompt(_markers(count))
        assert _ask(lossy, prompt) == _ask(perfect, prompt)


def test_keeping_with_probability_0_keeps_nothing() -> None:
    assert _ask(_lossy(0.0), _prompt(_markers(50))) == "no markers"


def test_a_probability_outside_0_to_1_is_refused() -> None:
    fake = FakeLLM()
    with pytest.raises(ValueError, match="keep_probability"):
        fake.keep_probability = 1.5


def test_reset_restores_perfect_recall_and_the_call_numbers() -> None:
    fake = _lossy(0.5)
    prompt = _prompt(_markers(100))
    first = _ask(fake, prompt)
    fake.reset()
    assert fake.keep_probability == 1.0
    fake.mode = "lossy_echo"
    fake.keep_probability = 0.5
    assert _ask(fake, prompt) == first


def test_the_prompt_tokens_received_are_counted() -> None:
    fake = _lossy(0.9)
    fake.fail_next(503)
    for _ in range(3):
        fake.handle({"messages": [{"role": "user", "content": _prompt(_markers(10))}]})
    calls = fake.calls
    assert [call.status for call in calls] == [503, 200, 200]
    assert fake.prompt_tokens_received() == sum(call.prompt_tokens for call in calls)
    assert fake.prompt_tokens_received(answered=True) == 2 * calls[0].prompt_tokens
