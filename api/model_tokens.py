"""Tokens as the model at hand counts them.

Precis counts every stored message once, with cl100k (`summarizer.tokens`), and fits contexts
by those counts. A model with another tokenizer counts the same text differently, so a context
fitted by cl100k may not fit its window. Each model's ratio (its tokens per cl100k token) is
learned from the usage its answers report (`TokenRatios.learn`), kept in the database so every
replica and restart shares it, and a turn fits the context into `window / (ratio * (1 +
MODEL_TOKEN_MARGIN))`. A ratio only rises at once; it falls slowly (`FALL_WEIGHT`), so one
short answer's usage does not undo what a long one taught. Counting for a client
(`count_for_model`) uses the model's own encoding where one ships offline (o200k for the
GPT-4o and later families, cl100k for older OpenAI models), else cl100k times the ratio.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import tiktoken
from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from api.db.faults import describe_fault
from api.db.models import MODEL_TOKEN_RATIOS, utcnow
from api.db.transactions import Database
from summarizer.tokens import encoding, o200k_encoding

_O200K_MODELS = re.compile(r"(?:^|/)(?:gpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|o1|o3|o4|chatgpt-4o|gpt-oss)")
"""Model names (a provider prefix allowed) whose encoding is o200k."""

_CL100K_MODELS = re.compile(r"(?:^|/)(?:gpt-4|gpt-3\.5|text-embedding-3)")
"""Older OpenAI models: cl100k, what Precis counts with."""

FALL_WEIGHT = 0.1
"""How far one lower sample pulls the ratio down (a higher one sets it)."""

SAMPLES_KEPT = 1_000
"""Samples counted at most (the count says how settled the ratio is)."""

WRITE_CHANGE = 0.0005
"""A learned ratio is written back when it moved by more than this share (or is new): a
falling one settles at most WRITE_CHANGE / FALL_WEIGHT (0.5 %) above the true ratio, well
within MODEL_TOKEN_MARGIN."""

CACHE_SECONDS = 30.0
"""How long a replica trusts the ratio it read: another replica's learning reaches it then."""

logger = logging.getLogger("precis.model_tokens")

MIN_SAMPLE_TOKENS = 1_000
"""Requests smaller than this teach nothing: what a provider adds to every request (a tool
prompt, framing) would dominate their count."""


def model_encoding(model: str) -> tiktoken.Encoding | None:
    """The model's own encoding when one ships offline, else None."""
    if _O200K_MODELS.search(model):
        return o200k_encoding()
    if _CL100K_MODELS.search(model):
        return encoding()
    return None


@dataclass
class TokenRatios:
    """The learned ratios, read through a per-replica cache."""

    database: Database
    clock: Callable[[], float] = time.monotonic
    _cached: dict[str, tuple[float | None, float]] = field(default_factory=dict)
    """By model: the stored ratio as last read or written (None: none stored), and when."""

    async def ratio(self, model: str) -> float:
        """The model's tokens per cl100k token (1 until learned)."""
        stored = await self._stored(model)
        return 1.0 if stored is None else stored

    async def _stored(self, model: str) -> float | None:
        cached = self._cached.get(model)
        if cached is not None and self.clock() - cached[1] < CACHE_SECONDS:
            return cached[0]
        async with self.database.reading() as db:
            stored = await _stored_ratio(db, model)
        ratio = stored[0] if stored else None
        self._cached[model] = (ratio, self.clock())
        return ratio

    async def learn(self, model: str, counted: int, reported: int) -> None:
        """Learn from one answer: Precis counted `counted` tokens in the request, the model
        reported `reported`."""
        if counted < MIN_SAMPLE_TOKENS or reported <= 0:
            return
        sample = reported / counted
        cached = self._cached.get(model)
        if (
            cached is not None
            and cached[0] is not None
            and self.clock() - cached[1] < CACHE_SECONDS
            and sample <= cached[0]
            and _learned(cached[0], sample) is None
        ):
            # a fall too small to write from the ratio this replica read: no statement. Had
            # other replicas lowered the stored ratio below the sample since, this replica
            # writes the rise once its cache expires: within CACHE_SECONDS, the delay with
            # which every replica sees another's learning anyway
            return

        async def update(db: AsyncSession) -> float:
            stored = await _stored_ratio(db, model, for_update=True)
            if stored is None:
                await _upsert(db, model, sample, 1)
                return sample
            old, samples = stored
            new = _learned(old, sample)
            if new is None:
                return old
            await _upsert(db, model, new, min(samples + 1, SAMPLES_KEPT))
            return new

        try:
            self._cached[model] = (await self.database.write(update), self.clock())
        except Exception as exc:  # the answer is the client's: a ratio not learned costs less
            logger.warning("the token ratio of %r was not learned: %s", model, describe_fault(exc))


def _learned(old: float, sample: float) -> float | None:
    """The ratio after one more `sample`, or None when it moves too little to be written."""
    new = sample if sample > old else old + FALL_WEIGHT * (sample - old)
    return new if abs(new - old) > WRITE_CHANGE * old else None


def fitted_window(window: int, ratio: float, margin: float) -> int:
    """The window in cl100k tokens: what fits the model's `window` by its own count."""
    return math.floor(window / (max(ratio, 0.0) * (1 + margin) or 1))


def count_for_model(model: str, text_tokens: int, texts: list[str], ratio: float) -> int:
    """Tokens of `texts` (whose cl100k count, framing included, is `text_tokens`) as the
    model counts them: its own encoding when it ships, else the cl100k count times the ratio."""
    own = model_encoding(model)
    if own is None:
        return math.ceil(text_tokens * ratio)
    cl100k = sum(len(encoding().encode_ordinary(text)) for text in texts)
    mine = sum(len(own.encode_ordinary(text)) for text in texts)
    return text_tokens - cl100k + mine


async def _stored_ratio(
    db: AsyncSession, model: str, for_update: bool = False
) -> tuple[float, int] | None:
    columns = MODEL_TOKEN_RATIOS.c
    query = select(columns.ratio, columns.samples).where(columns.model == model)
    row = (await db.execute(query.with_for_update() if for_update else query)).first()
    return None if row is None else (float(row.ratio), int(row.samples))


async def _upsert(db: AsyncSession, model: str, ratio: float, samples: int) -> None:
    dialect = postgresql if db.get_bind().dialect.name == "postgresql" else sqlite
    values = {"model": model, "ratio": ratio, "samples": samples, "updated_at": utcnow()}
    insert = dialect.insert(MODEL_TOKEN_RATIOS).values(**values)
    await db.execute(
        insert.on_conflict_do_update(
            index_elements=["model"],
            set_={"ratio": ratio, "samples": samples, "updated_at": values["updated_at"]},
        )
    )
