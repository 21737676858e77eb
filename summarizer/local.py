"""The offline `local` model: a deterministic extractive summarizer behind `LLMClient`.

It reads a request's task, never its prompt text: the transcript's entries and the
previous summary, or the summaries to merge, the instructions and the token target. It
answers with the sentences that matter most, grouped and in order: user requests first, then
decisions, then facts carrying numbers, names, paths, commands or identifiers, then the tools
used, then the rest while the target allows. A merge keeps facts first (`_FactsFirst`): every
bullet stating a new one, shortened around its facts as far as the target needs, before any
bullet without one. Instructions steer the choice by their keywords
(`instruction_keywords`): sentences naming one are kept first, tool results and later
sentences of a reply included, within `GUIDED_SHARE` of the target. No network, no
randomness: the same input always gives the same summary. It is the quality level without
an API key; any litellm model string replaces it.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from enum import IntEnum

from summarizer.client import Completion, CompletionRequest, MergeTask
from summarizer.text import ELLIPSIS, OFFLOAD_CHARS, clip_tokens, text_chars
from summarizer.tokens import count_messages, count_text, encoding
from summarizer.transcript import TranscriptEntry

LOCAL_MODEL = "local"
"""The model name that selects this summarizer."""

UNIT_MAX_TOKENS = 40
"""A kept sentence is clipped to this length, so one long sentence cannot take the whole budget."""

SCORE_CAP = 3
"""Features counted per sentence at most: beyond it, earlier sentences win over denser ones."""

REQUEST_SENTENCES = 2
"""Sentences kept from the start of each user message as the request it makes."""

MAX_CHARS_PER_TOKEN = 12
"""More characters per token than any common text has: a cheap bound before counting tokens."""

MIN_BULLET_TOKENS = 6
"""Below this much room left, stop looking for another sentence that fits."""

TOOLS_MAX_TOKENS = 60
"""The "tools used" line is clipped to this: it counts calls, it does not list them."""

TOOLS_MAX_SHARE = 0.2
"""Under a tight target the tools line is dropped when it would take more than this share."""

FACT_WINDOWS = (4, 1, 0)
"""Words kept on each side of a bullet's fact words as a merge shortens it, step by step: the
words around a fact go before the fact does (0: the fact words alone)."""

NUMBER_REACH = 1
"""A number alone says little ("100"): even the shortest form keeps this many words on each side
of one ("100 words", "port 8080")."""

GUIDED_SHARE = 0.5
"""Share of the target that sentences naming an instruction's keyword take first: the rest
goes to the usual sections, so the user's requests keep room however much the keywords match."""

OFFLOAD_PROCESSES = min(4, os.cpu_count() or 1)
"""Processes that run large offline tasks (over `OFFLOAD_CHARS`): a thread would not do, since
pattern matching holds the GIL and a megabyte message would stall every other request."""

OFFLOAD_NICENESS = 10
"""How much lower those processes' scheduling priority is than the server's."""

MIN_KEYWORD_CHARS = 3
"""Shorter words of an instruction are never keywords (articles, prepositions, "of", "to")."""

_HOW_WORDS = """
    about above after all also always and any are around as at be before below both but by
    can copy copied could did does each either every exact exactly for from give given has
    have how include includes including into its just keep keeps kept list make mention
    mentioned mentions more most must not note only other our please preserve record retain
    same say says should state summaries summarize summary sure than that the their them then
    there these they this those too use very verbatim was what when where which while who
    why will with word words would you your
"""
INSTRUCTION_WORDS = frozenset(_HOW_WORDS.split())
"""Words of an instruction that say how to summarize, not what to keep: never keywords. The
offline model reads no negation: "drop greetings" makes greetings a keyword."""


class Kind(IntEnum):
    """Sections of a local summary, in priority order."""

    REQUEST = 0
    DECISION = 1
    FACT = 2
    OTHER = 3


KIND_SHARES = {Kind.REQUEST: 0.4, Kind.DECISION: 0.25, Kind.FACT: 0.25, Kind.OTHER: 0.1}
"""First-pass budget share per section, so requests cannot crowd out decisions and facts."""

_HEADINGS = {
    Kind.REQUEST: "Requests:",
    Kind.DECISION: "Decisions:",
    Kind.FACT: "Facts:",
    Kind.OTHER: "Other:",
}
_KIND_OF_HEADING = {heading: kind for kind, heading in _HEADINGS.items()}
_TOOLS = "Tools used:"

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)|(?<=[。！？；])")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)]|#+)\s+")
_KEPT_BULLET = re.compile(r"^- (?:#(-?\d+) )?(?:\(([^)]*)\) )?(.*)$")
_COUNTS = re.compile(
    r"^Messages #(-?\d+)–#(-?\d+): (\d+) \((\d+) user, (\d+) assistant, (\d+) tool\)\.$"
)
_DIGITS = re.compile(r"\d+")
_WORD = re.compile(r"\w+")
_SPACED = re.compile(r"\S+")
_DECISION = re.compile(
    r"\b(?:decid\w*|decision|agree[ds]?|chose|chosen|going with|we will|we'll|let's|settled"
    r"|conclu\w+|approved?|confirm\w*|plan(?:ned)? to|next steps?|todo|must|will use)\b"
    r"|决定|确定|采用|同意|结论|计划|決定|採用",
    re.IGNORECASE,
)
# Every pattern here reads client text, so each must take linear time (Python's `re`
# backtracks, and holds the GIL while it does): a run such as `[\w-]++` is tried only where
# the run starts (the lookbehind) and is never given back (possessive), where `\b[\w-]+\.`
# tried every word boundary inside `a-a-a-...` and scanned the rest of the run from each.
_FEATURES = (
    re.compile(r"\d"),
    re.compile(r"https?://\S+"),
    re.compile(r"(?:~|\.{1,2})?/[\w.@-]+/[\w./@-]*|[A-Za-z]:\\\S+|(?<![\w-])[\w-]++\.[a-z]{1,4}\b"),
    re.compile(r"`[^`]+`|^\s*\$ |\b(?:pip|npm|git|docker|make|python|curl|SELECT|CREATE)\b"),
    re.compile(r"\b[A-Za-z]*[A-Z][a-z]+[A-Z]\w*|\b[A-Z]{2,}\b|\b\w+_\w+\b|\b[A-Z][\w]*-[\w-]+"),
    re.compile(r"(?<=[a-z,;:] )[A-Z][a-z]{2,}"),
)


@dataclass(frozen=True)
class _Unit:
    kind: Kind
    score: int
    order: int
    seq: int | None
    who: str
    text: str
    guided: bool = False
    """It names a keyword of the instructions: kept first."""


@dataclass
class _Counts:
    first: int
    last: int
    total: int
    user: int
    assistant: int
    tool: int

    def render(self) -> str:
        return (
            f"Messages #{self.first}–#{self.last}: {self.total} ({self.user} user, "
            f"{self.assistant} assistant, {self.tool} tool)."
        )


def _score(text: str) -> int:
    return min(SCORE_CAP, sum(len(feature.findall(text)) for feature in _FEATURES))


def instruction_keywords(instructions: str | None) -> frozenset[str]:
    """What instructions name: their words of at least `MIN_KEYWORD_CHARS` characters,
    casefolded, a plural's final "s" dropped, but those of `INSTRUCTION_WORDS`."""
    keywords: set[str] = set()
    for word in _WORD.findall((instructions or "").casefold()):
        if len(word) < MIN_KEYWORD_CHARS or word in INSTRUCTION_WORDS or word.isdigit():
            continue
        stem = word[:-1] if len(word) > MIN_KEYWORD_CHARS and word.endswith("s") else word
        keywords.add(stem)
    return frozenset(keywords)


Guide = re.Pattern[str] | None
"""Finds a word beginning with a keyword of the instructions (None: no instructions)."""


def _guide(instructions: str | None) -> Guide:
    keywords = instruction_keywords(instructions)
    if not keywords:
        return None
    alternatives = "|".join(re.escape(keyword) for keyword in sorted(keywords))
    return re.compile(rf"\b(?:{alternatives})", re.IGNORECASE)


def _named(guide: Guide, text: str) -> bool:
    return guide is not None and guide.search(text) is not None


def _sentences(text: str) -> Iterable[str]:
    in_code = False
    for raw in text.split("\n"):
        line = raw.strip()
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            if line:
                yield f"`{line}`"
            continue
        line = _BULLET.sub("", line)
        for sentence in _SENTENCE_END.split(line):
            if sentence.strip():
                yield sentence.strip()


def _classify(text: str, *, is_request: bool) -> tuple[Kind, int]:
    score = _score(text)
    if is_request:
        return Kind.REQUEST, score
    if _DECISION.search(text):
        return Kind.DECISION, score
    return (Kind.FACT if score else Kind.OTHER), score


def _entry_units(entries: Sequence[TranscriptEntry], guide: Guide = None) -> list[_Unit]:
    units: list[_Unit] = []
    for entry in entries:
        sentences = list(_sentences(entry.text))
        if entry.role == "tool":
            # a result counts through what the assistant made of it, unless it states a fact
            # or names what the instructions ask for
            for position, sentence in enumerate(sentences):
                guided = _named(guide, sentence)
                if guided or (position == 0 and _score(sentence)):
                    unit = _Unit(
                        Kind.FACT, _score(sentence), len(units), entry.seq, entry.label, sentence
                    )
                    units.append(replace(unit, guided=guided))
            continue
        who = entry.label if entry.role == "user" else ""
        if entry.role == "user" and sentences:
            opening = " ".join(sentences[:REQUEST_SENTENCES])
            unit = _Unit(Kind.REQUEST, _score(opening), len(units), entry.seq, who, opening)
            units.append(replace(unit, guided=_named(guide, opening)))
            sentences = sentences[REQUEST_SENTENCES:]
        for position, sentence in enumerate(sentences):
            is_question = entry.role == "user" and sentence.endswith(("?", "？"))
            kind, score = _classify(sentence, is_request=is_question)
            guided = _named(guide, sentence)
            if entry.role != "user" and position > 0 and kind is Kind.OTHER and not guided:
                continue  # only a reply's opening sentence is kept without a reason to
            units.append(_Unit(kind, score, len(units), entry.seq, who, sentence, guided))
    return units


def _counts(entries: Sequence[TranscriptEntry]) -> _Counts | None:
    if not entries:
        return None
    roles = Counter(entry.role for entry in entries)
    return _Counts(
        entries[0].seq,
        entries[-1].seq,
        len(entries),
        roles["user"],
        roles["assistant"],
        roles["tool"],
    )


def _tool_counts(entries: Sequence[TranscriptEntry]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for entry in entries:
        if entry.role == "assistant":
            counts.update(entry.tool_names)
    return counts


def _render_tools(tools: Counter[str]) -> str:
    ranked = sorted(tools.items(), key=lambda item: (-item[1], item[0]))
    return _TOOLS + " " + ", ".join(f"{name} ×{count}" for name, count in ranked) + "."


def _normalized(text: str) -> str:
    return " ".join(text.casefold().split())


_EDGE_PUNCTUATION = "…,.;:!?()[]{}\"'`*"
"""Stripped from a fact word before it is compared: `KEY-7781,` and `(KEY-7781)` are one fact."""


def _fact_words(text: str) -> tuple[list[str], list[bool]]:
    """The words of `text` (runs of non-space) and whether each carries a fact: a number, a
    name, a path, a command or an identifier (any span a `_FEATURES` pattern matches)."""
    marks = bytearray(len(text))
    for feature in _FEATURES:
        # a pattern's matches never overlap: every character is marked at most once per pattern
        for match in feature.finditer(text):
            marks[match.start() : match.end()] = b"\x01" * (match.end() - match.start())
    words: list[str] = []
    facts: list[bool] = []
    for word in _SPACED.finditer(text):
        words.append(word.group())
        facts.append(marks.find(1, word.start(), word.end()) >= 0)
    return words, facts


def _fact_keys(text: str) -> frozenset[str]:
    """The facts `text` states, as comparable keys (casefolded, edge punctuation dropped)."""
    words, facts = _fact_words(text)
    keys = (
        word.strip(_EDGE_PUNCTUATION).casefold()
        for word, fact in zip(words, facts, strict=True)
        if fact
    )
    return frozenset(key for key in keys if key)


def _around(words: Sequence[str], facts: Sequence[bool], window: int) -> str:
    """The words within `window` words of a fact word (`NUMBER_REACH` more of a bare number),
    every cut marked `…` (at the ends too, unless only the fact words are kept)."""
    reach = [
        window + (0 if any(map(str.isalpha, word)) else NUMBER_REACH) if fact else -1
        for word, fact in zip(words, facts, strict=True)
    ]
    # a word is kept when a fact word reaches it from the left or from the right
    kept = [False] * len(words)
    furthest = -1
    for index, extent in enumerate(reach):
        furthest = max(furthest, index + extent) if extent >= 0 else furthest
        kept[index] = index <= furthest
    nearest = len(words)
    for index in range(len(words) - 1, -1, -1):
        extent = reach[index]
        nearest = min(nearest, index - extent) if extent >= 0 else nearest
        kept[index] = kept[index] or nearest <= index
    pieces: list[str] = []
    cut = False
    for word, keep in zip(words, kept, strict=True):
        if not keep:
            cut = True
            continue
        if cut and (pieces or window):
            pieces.append(ELLIPSIS)
        pieces.append(word)
        cut = False
    if cut and window:
        pieces.append(ELLIPSIS)
    return " ".join(pieces)


def _clip_words(text: str, max_tokens: int) -> str:
    """`text` within `max_tokens`, cut after a whole word where it has spaces: half a fact is
    none (`MARK…`)."""
    clipped = clip_tokens(text, max_tokens)
    if clipped == text or not clipped.endswith(ELLIPSIS):
        return clipped
    head = clipped[: -len(ELLIPSIS)]
    if text[len(head) : len(head) + 1].isspace():
        return clipped
    whole, space, _ = head.rpartition(" ")
    return f"{whole.rstrip()} {ELLIPSIS}" if space and whole.strip() else clipped


def _forms(text: str, most: int = len(FACT_WINDOWS) + 1) -> tuple[str, ...]:
    """At most `most` forms of a bullet's text, longest first, each within `UNIT_MAX_TOKENS`:
    whole, then cut around its fact words at each of `FACT_WINDOWS` (without facts: one form).

    A code line (in backticks) is cut inside its backticks, around the names and numbers it
    holds: as a whole it is one fact, which no cut could shorten.
    """
    forms = [text] if count_text(text) <= UNIT_MAX_TOKENS else []
    if len(forms) >= most:
        return tuple(forms)
    code = len(text) > 2 and text.startswith("`") and text.endswith("`")
    words, facts = _fact_words(text[1:-1] if code else text)
    for window in FACT_WINDOWS if any(facts) else ():
        cut = _around(words, facts, window)
        form = _clip_words(f"`{cut}`" if code else cut, UNIT_MAX_TOKENS)
        if not forms or len(form) < len(forms[-1]):
            forms.append(form)
        if len(forms) >= most:
            break
    return tuple(forms) or (_clip_words(text, UNIT_MAX_TOKENS),)


def _line(unit: _Unit, text: str) -> str:
    seq = f"#{unit.seq} " if unit.seq is not None else ""
    who = f"({unit.who}) " if unit.who else ""
    return f"- {seq}{who}{text}"


Chosen = dict[Kind, list[tuple[_Unit, str]]]
"""The units a summary keeps, by section, each with the text its bullet shows."""


def _frame(counts: _Counts | None, tools: Counter[str], target_tokens: int) -> tuple[str, str, int]:
    """The counts header, the tools line, and the tokens they leave for bullets."""
    header = counts.render() if counts else ""
    budget = target_tokens - (count_text(header + "\n") if header else 0)
    if budget < MIN_BULLET_TOKENS:
        header, budget = "", target_tokens
    tools_line = clip_tokens(_render_tools(tools), TOOLS_MAX_TOKENS) if tools else ""
    tools_cost = count_text(tools_line + "\n") if tools_line else 0
    if tools_cost > budget * TOOLS_MAX_SHARE:
        tools_line, tools_cost = "", 0
    return header, tools_line, budget - tools_cost


def _render(header: str, tools_line: str, chosen: Chosen, target_tokens: int) -> str:
    """The header, the sections in priority order (bullets in message order), the tools line
    before "Other:"; clipped to the target, which the costs counted line by line respect."""
    lines = [header] if header else []
    for kind in Kind:
        if kind is Kind.OTHER and tools_line:
            lines.append(tools_line)
        bullets = sorted(chosen[kind], key=lambda pair: pair[0].order)
        if bullets:
            lines.append(_HEADINGS[kind])
            lines.extend(_line(unit, text) for unit, text in bullets)
    return clip_tokens("\n".join(lines), target_tokens)


def _compose(
    units: Sequence[_Unit],
    counts: _Counts | None,
    tools: Counter[str],
    target_tokens: int,
    previous: str | None = None,
) -> str:
    """A leaf's text: the highest-priority units that fit, grouped and in order.

    Units the instructions name go first, within `GUIDED_SHARE` of the budget; then a pass
    gives each section its share of what is left (unused share moves on to the next section);
    a last pass fills what remains in priority order. A sentence too long for a bullet is cut
    around its facts.
    """
    header, tools_line, budget = _frame(counts, tools, target_tokens)
    seen = {_normalized(line) for line in (previous or "").splitlines()}
    known = _normalized(previous or "")
    chosen: Chosen = {kind: [] for kind in Kind}
    ranked = sorted(units, key=lambda unit: (unit.kind, -unit.score, unit.order))
    taken: set[int] = set()

    def take(unit: _Unit, allowance: int) -> int:
        key = _normalized(unit.text)
        if unit.order in taken or key in seen or (len(key) > 20 and key in known):
            return 0
        text = _forms(unit.text, 1)[0]
        cost = count_text(_line(unit, text) + "\n")
        if not chosen[unit.kind]:
            cost += count_text(_HEADINGS[unit.kind] + "\n")
        if cost > allowance:
            return 0
        seen.add(key)
        taken.add(unit.order)
        chosen[unit.kind].append((unit, text))
        return cost

    allowance = math.floor(budget * GUIDED_SHARE)
    for unit in ranked:
        if unit.guided and allowance >= MIN_BULLET_TOKENS:
            spent = take(unit, allowance)
            allowance -= spent
            budget -= spent
    total, carry = budget, 0
    for kind in Kind:
        allowance = math.floor(total * KIND_SHARES[kind]) + carry
        for unit in ranked:
            if unit.kind is kind and allowance >= MIN_BULLET_TOKENS:
                spent = take(unit, min(allowance, budget))
                allowance -= spent
                budget -= spent
        carry = max(0, allowance)
    for unit in ranked:
        if budget < MIN_BULLET_TOKENS:
            break
        budget -= take(unit, budget)
    return _render(header, tools_line, chosen, target_tokens)


class _FactsFirst:
    """A merge's choice of bullets, facts first.

    Every unit stating a fact not yet kept (a number, a name, an identifier, a path, a marker)
    is taken in its shortest form before any is lengthened, and all of them are lengthened,
    one step at a time, before any unit without a new fact is taken: the words around a fact
    go before the fact does. Units the instructions name come first, within `GUIDED_SHARE`.
    """

    def __init__(self, units: Sequence[_Unit], budget: int) -> None:
        self.budget = budget
        self.units: list[_Unit] = []
        seen: set[str] = set()
        for unit in units:
            key = _normalized(unit.text)
            if key not in seen:
                seen.add(key)
                self.units.append(unit)
        self.ranked = sorted(self.units, key=lambda unit: (unit.kind, -unit.score, unit.order))
        self.step: dict[int, int] = {}
        """The form each taken unit shows, by its order (0: whole)."""
        self._forms: dict[int, tuple[str, ...]] = {}
        self._headed: set[Kind] = set()

    def forms(self, unit: _Unit) -> tuple[str, ...]:
        """The forms of `unit`, longest first."""
        if unit.order not in self._forms:
            self._forms[unit.order] = _forms(unit.text)
        return self._forms[unit.order]

    def _cost(self, unit: _Unit, step: int) -> int:
        return count_text(_line(unit, self.forms(unit)[step]) + "\n")

    def take(self, unit: _Unit, steps: Iterable[int], allowance: int) -> int:
        """Take `unit` in the first of its forms `steps` that fits `allowance`; the cost."""
        heading = 0 if unit.kind in self._headed else count_text(_HEADINGS[unit.kind] + "\n")
        for step in steps:
            cost = self._cost(unit, step) + heading
            if cost <= min(allowance, self.budget):
                self._headed.add(unit.kind)
                self.step[unit.order] = step
                self.budget -= cost
                return cost
        return 0

    def _lengthen(self) -> None:
        for _ in FACT_WINDOWS:
            for unit in self.ranked:
                step = self.step.get(unit.order, 0)
                if step > 0:
                    extra = self._cost(unit, step - 1) - self._cost(unit, step)
                    if extra <= self.budget:
                        self.step[unit.order] = step - 1
                        self.budget -= extra

    def choose(self) -> Chosen:
        """The bullets, by section."""
        allowance = math.floor(self.budget * GUIDED_SHARE)
        for unit in self.ranked:
            if unit.guided:
                allowance -= self.take(unit, range(len(self.forms(unit))), allowance)
        kept: set[str] = set()
        for unit in self.units:
            if unit.order in self.step:
                kept |= _fact_keys(unit.text)
        rest: list[_Unit] = []
        for unit in self.ranked:
            if unit.order in self.step:
                continue
            keys = _fact_keys(unit.text) if unit.score else frozenset()
            if keys <= kept:
                rest.append(unit)  # no new fact: it waits with the units without one
            elif self.take(unit, (len(self.forms(unit)) - 1,), self.budget):
                kept |= keys
        self._lengthen()
        for unit in sorted(rest, key=lambda unit: (unit.kind, unit.order)):
            if self.budget < MIN_BULLET_TOKENS:
                break
            self.take(unit, range(len(self.forms(unit))), self.budget)
        chosen: Chosen = {kind: [] for kind in Kind}
        for unit in self.units:
            if unit.order in self.step:
                chosen[unit.kind].append((unit, self.forms(unit)[self.step[unit.order]]))
        return chosen

    def complete(self) -> bool:
        """Whether every unit is in, whole."""
        return all(self.step.get(unit.order) == 0 for unit in self.units)


def _verbatim(entries: Sequence[TranscriptEntry]) -> str:
    lines: list[str] = []
    for entry in entries:
        who = f"{entry.role} {entry.label}" if entry.label else entry.role
        names = entry.tool_names if entry.role == "assistant" else ()
        tools = f" → {', '.join(names)}" if names else ""
        text = " ".join(entry.text.split())
        lines.append(f"{who}: {text}{tools}" if text else f"{who}:{tools}")
    return "\n".join(lines)


def summarize_transcript(
    entries: Sequence[TranscriptEntry],
    target_tokens: int,
    previous: str | None = None,
    instructions: str | None = None,
) -> str:
    """An extractive summary of transcript entries in at most `target_tokens` tokens, what
    `instructions` name kept first.

    When the whole exchange, written compactly, is no longer than the extract, the
    compact form is the answer: nothing is lost and nothing grows.
    """
    units = _entry_units(entries, _guide(instructions))
    extract = _compose(units, _counts(entries), _tool_counts(entries), target_tokens, previous)
    compact = _verbatim(entries)
    if len(compact) <= MAX_CHARS_PER_TOKEN * target_tokens and count_text(compact) <= min(
        count_text(extract), target_tokens
    ):
        return compact
    return extract


def _parse_summary(
    text: str, offset: int, guide: Guide = None
) -> tuple[list[_Unit], _Counts | None, Counter[str]]:
    """The units, message counts and tool counts of a summary to merge.

    Summaries reach a merge as text (a stored one has no other form): this reads back the
    format `_compose` writes, and takes any other line as plain sentences.
    """
    units: list[_Unit] = []
    counts: _Counts | None = None
    tools: Counter[str] = Counter()
    kind: Kind | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or (line.startswith("[") and line.endswith("]")):
            continue
        if match := _COUNTS.match(line):
            counts = _Counts(*(int(group) for group in match.groups()))
        elif line in _KIND_OF_HEADING:
            kind = _KIND_OF_HEADING[line]
        elif line.startswith(_TOOLS):
            tools.update(_parse_tools(line[len(_TOOLS) :]))
        elif kind is not None and (bullet := _KEPT_BULLET.match(line)):
            seq = int(bullet.group(1)) if bullet.group(1) is not None else None
            text = bullet.group(3)
            who = bullet.group(2) or ""
            order = offset + len(units)
            units.append(_Unit(kind, _score(text), order, seq, who, text, _named(guide, text)))
        else:
            for sentence in _sentences(line):
                found, score = _classify(sentence, is_request=False)
                order = offset + len(units)
                guided = _named(guide, sentence)
                units.append(_Unit(found, score, order, None, "", sentence, guided))
    return units, counts, tools


def _parse_tools(line: str) -> Counter[str]:
    """The counts of a "Tools used:" line as `_render_tools` writes it (`name ×3, other ×1.`),
    read piece by piece: a pattern spanning the pieces would backtrack over the whole line."""
    counts: Counter[str] = Counter()
    for piece in line.split(","):
        name, sep, count = piece.rpartition(" ×")
        digits = _DIGITS.match(count)
        if sep and name.strip() and digits:
            counts[name.strip()] += int(digits.group())
    return counts


def _merge_counts(first: _Counts | None, second: _Counts | None) -> _Counts | None:
    if first is None or second is None:
        return first or second
    return _Counts(
        first.first,
        second.last,
        first.total + second.total,
        first.user + second.user,
        first.assistant + second.assistant,
        first.tool + second.tool,
    )


def merge_texts(texts: Sequence[str], target_tokens: int, instructions: str | None = None) -> str:
    """One extractive summary of consecutive summaries, at most `target_tokens` tokens, what
    `instructions` name kept first."""
    guide = _guide(instructions)
    units: list[_Unit] = []
    counts: _Counts | None = None
    tools: Counter[str] = Counter()
    every_counted = True
    for position, text in enumerate(texts):
        parsed, found, used = _parse_summary(text, len(units), guide)
        units.extend(parsed)
        every_counted = every_counted and found is not None
        counts = found if position == 0 else _merge_counts(counts, found)
        tools.update(used)
    header, tools_line, budget = _frame(counts if every_counted else None, tools, target_tokens)
    plan = _FactsFirst(units, budget)
    extract = _render(header, tools_line, plan.choose(), target_tokens)
    joined = "\n".join(text.strip() for text in texts)
    fits = len(joined) <= MAX_CHARS_PER_TOKEN * target_tokens
    if not (fits and count_text(joined) <= target_tokens):
        return extract
    if plan.complete() and count_text(extract) <= count_text(joined):
        return extract
    # the plain texts still fit: the extract would drop lines, or (its headings added) be
    # longer than what it merges, which a merge's answer may never be (`RunState.finish`)
    return joined


def complete_task(request: CompletionRequest) -> Completion:
    """Carry out `request.task` within its target (in this process)."""
    target = min(request.max_tokens, request.target_tokens)
    task = request.task
    if isinstance(task, MergeTask):
        text = merge_texts(task.summaries, target, task.instructions)
    else:
        text = summarize_transcript(
            task.transcript, target, task.previous_summary, task.instructions
        )
    return Completion(text, count_messages(request.messages), count_text(text))


class _Processes:
    """The offline model's worker processes, started at the first large task."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None

    async def run(self, request: CompletionRequest) -> Completion:
        """`complete_task(request)` in a worker process; a pool whose process died (killed,
        out of memory) is replaced, and the task run once more."""
        for attempt in (1, 2):
            pool = self._pool or self._start()
            try:
                return await asyncio.get_running_loop().run_in_executor(
                    pool, complete_task, request
                )
            except BrokenProcessPool:
                if self._pool is pool:
                    self._pool = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _start(self) -> ProcessPoolExecutor:
        # spawn, not fork: the server's threads and event loop must not be copied mid-flight
        context = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(
            OFFLOAD_PROCESSES, mp_context=context, initializer=_start_offload_process
        )
        self._pool = pool
        return pool


def _start_offload_process() -> None:
    """A worker process yields the CPU to the server's: on a busy machine the event loop
    answering requests runs first, the summaries (never awaited by a request's answer but
    an inline one's) wait."""
    os.nice(OFFLOAD_NICENESS)
    encoding()


_PROCESSES = _Processes()


class LocalSummarizer:
    """The `local` model as an `LLMClient`: carries out summary and merge tasks offline."""

    async def complete(self, request: CompletionRequest) -> Completion:
        """Summarize or merge what `request.task` asks for, within its target.

        The work is CPU-bound (seconds on a large transcript): over `OFFLOAD_CHARS` it runs in
        a worker process, so the caller's event loop keeps serving meanwhile (a thread would
        hold the GIL through each pattern match).
        """
        if text_chars(request.messages) > OFFLOAD_CHARS:
            return await _PROCESSES.run(request)
        return complete_task(request)
