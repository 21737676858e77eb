"""Tokens as the model at hand counts them (`api.model_tokens`): the encodings that ship
offline, and each model's learned ratio, shared through the database by every replica."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, select
from sqlalchemy.ext.asyncio import AsyncEngine

from api.db.engine import create_database
from api.db.models import MODEL_TOKEN_RATIOS
from api.model_tokens import (
    CACHE_SECONDS,
    TokenRatios,
    count_for_model,
    fitted_window,
    model_encoding,
)
from summarizer.tokens import count_text

MODEL = "openai/some-model"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_models_with_an_offline_encoding_are_counted_with_it() -> None:
    assert model_encoding("openai/gpt-4o-mini").name == "o200k_base"  # type: ignore[union-attr]
    assert model_encoding("gpt-5").name == "o200k_base"  # type: ignore[union-attr]
    assert model_encoding("azure/gpt-4-turbo").name == "cl100k_base"  # type: ignore[union-attr]
    assert model_encoding("anthropic/claude-sonnet-4-5") is None
    text = "東京の天気は晴れです。明日は雨が降るでしょう。" * 20
    cl100k = count_text(text)
    # o200k counts Japanese in far fewer tokens than cl100k
    assert count_for_model("openai/gpt-4o", cl100k + 3, [text], 1.0) < cl100k * 0.8
    assert count_for_model("gpt-4", cl100k + 3, [text], 1.0) == cl100k + 3
    assert count_for_model(MODEL, 1000, [text], 1.5) == 1500


def test_the_fitted_window_leaves_the_margin() -> None:
    assert fitted_window(16_000, 1.0, 0.0) == 16_000
    assert fitted_window(16_000, 1.5, 0.05) == 10_158
    assert fitted_window(16_000, 0.5, 0.0) == 32_000


async def test_a_ratio_rises_at_once_falls_slowly_and_is_shared(engine: AsyncEngine) -> None:
    clock = Clock()
    replica = TokenRatios(create_database(engine), clock)
    other = TokenRatios(create_database(engine), clock)
    assert await replica.ratio(MODEL) == 1.0
    await replica.learn(MODEL, 1_000, 1_500)
    assert await replica.ratio(MODEL) == 1.5
    assert await other.ratio(MODEL) == 1.5  # read from the database: another replica's
    await replica.learn(MODEL, 1_000, 1_000)
    lowered = await replica.ratio(MODEL)
    assert 1.4 < lowered < 1.5  # one short sample does not undo what was learned
    await replica.learn(MODEL, 100, 1_000)  # too small to teach anything
    assert await replica.ratio(MODEL) == lowered
    assert await other.ratio(MODEL) == 1.5  # its cache holds until it expires
    clock.now += CACHE_SECONDS + 1
    assert await other.ratio(MODEL) == lowered
    for _ in range(100):
        await replica.learn(MODEL, 1_000, 1_000)
    assert await replica.ratio(MODEL) < 1.01, "it falls all the way to what the model counts"


async def test_a_sample_that_moves_a_fresh_ratio_too_little_costs_no_statement(
    engine: AsyncEngine,
) -> None:
    clock = Clock()
    replica = TokenRatios(create_database(engine), clock)
    await replica.learn(MODEL, 1_000, 1_500)
    statements: list[str] = []

    def record(*args: Any) -> None:
        statements.append(args[2])

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        await replica.learn(MODEL, 2_000, 3_000)  # the same ratio: 1.5
        assert statements == []
        clock.now += CACHE_SECONDS + 1
        await replica.learn(MODEL, 2_000, 3_000)  # no longer sure what the database holds
        assert statements, "an expired cache reads the stored ratio"
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)
    await replica.learn(MODEL, 1_000, 2_000)  # a rise is written at once
    assert await TokenRatios(create_database(engine), clock).ratio(MODEL) == 2.0


async def test_a_first_sample_is_stored_even_when_it_matches_the_default(
    engine: AsyncEngine,
) -> None:
    clock = Clock()
    replica = TokenRatios(create_database(engine), clock)
    assert await replica.ratio(MODEL) == 1.0  # nothing stored: the default, cached
    await replica.learn(MODEL, 2_000, 2_000)
    async with engine.connect() as connection:
        stored = (await connection.execute(select(MODEL_TOKEN_RATIOS.c.ratio))).scalars().all()
    assert stored == [1.0]
