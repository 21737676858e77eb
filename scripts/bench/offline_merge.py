"""Measure the facts the offline `local` summarizer keeps through leaves and roll-up merges.

    python -m scripts.bench.offline_merge [--data PATH] [--output FILE] [--compare FILE]

Real conversations (`../shared/data/sharegpt_sample.jsonl`, else the repository's
`tests/fixtures/sharegpt_multilang.jsonl`), joined in order into sessions of
`SESSION_MESSAGES` messages, are summarized as the service does: leaves of `LEAF_MESSAGES`
messages by `summarize()` with the default settings (target 800 tokens), then the leaves merged
by `merge_summaries()` (target 1200) twice over: as a chain, the way roll-ups go (the previous
merge with the next leaf), and as a balanced tree (pairs of equal size, level by level).

- `markers-opening` / `markers-middle`: every message carries one unique `MARKER-...` token
  (the fake model's `MARKER_PATTERN`), at its start or at the word nearest its middle. Counted:
  the markers in the leaves, in the final merged text, and per merge the share of its inputs'
  markers its output keeps.
- `facts`: the same sessions unmarked. A fact token is a number of two characters or more, a
  name (a capitalized word not at a sentence's start), an identifier (snake_case, CamelCase, an
  acronym, a path or file name, a URL); each distinct one of a session's source is looked up
  (as a whole word) in the leaves and merged texts, their `#seq` and counts lines removed.

`--output` writes the figures as JSON; `--compare` reads such a file (a run of an earlier
commit) and prints each figure as before → after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from summarizer import SummarizerSettings, merge_summaries, summarize
from summarizer.tokens import count_text
from tests.support.fake_llm import MARKER_PATTERN

ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = ROOT.parent / "shared" / "data" / "sharegpt_sample.jsonl"
FIXTURE = ROOT / "tests" / "fixtures" / "sharegpt_multilang.jsonl"

LEAF_MESSAGES = 16
"""Messages per leaf summary: about what a proactive summary takes at the default limits."""

SESSION_MESSAGES = 288
"""Messages per session (18 leaves, 17 chained merges): a long session's roll-up."""

SETTINGS = SummarizerSettings()
"""The service's defaults: the `local` model, leaves of 800 tokens, merges of 1200."""

Message = dict[str, Any]
Found = Callable[[str], set[str]]
"""What a text holds of the facts counted (markers, or a session's fact tokens)."""

# the facts of a real conversation: numbers, names, identifiers (see the module docstring)
_FACT_TOKENS = re.compile(
    r"https?://[^\s)\]>'\"`]+"
    r"|(?:~|\.{1,2})?/[\w.@-]+(?:/[\w.@-]+)+"
    r"|\b[\w-]+\.(?:py|js|ts|json|ya?ml|toml|md|txt|csv|sql|html|css|sh|go|rs|java|cpp|h)\b"
    r"|\b[A-Za-z]\w*_\w+\b"
    r"|\b[a-z]+[A-Z]\w*\b|\b[A-Z][a-z]+[A-Z]\w*\b"
    r"|\b[A-Z]{2,}\d*\b"
    r"|\d+(?:[.,:/-]\d+)*"
)
_NAME = re.compile(r"(?<=[a-z0-9,;:] )[A-Z][a-z]{2,}")
_SCAFFOLD = re.compile(r"^Messages #.*$|^- #-?\d+ |^Tools used:.*$", re.MULTILINE)


def load_conversations(path: Path) -> list[list[Message]]:
    """The conversations of a ShareGPT-style JSON-lines file, roles and contents only."""
    conversations = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            messages = json.loads(line)["messages"]
            conversations.append([{"role": m["role"], "content": m["content"]} for m in messages])
    return conversations


def sessions_of(conversations: Sequence[list[Message]]) -> list[list[Message]]:
    """The conversations joined in order and cut into sessions of `SESSION_MESSAGES`."""
    joined = [message for conversation in conversations for message in conversation]
    return [
        [
            {**message, "seq": seq + 1}
            for seq, message in enumerate(joined[i : i + SESSION_MESSAGES])
        ]
        for i in range(0, len(joined), SESSION_MESSAGES)
    ]


def plant(message: Message, marker: str, middle: bool) -> Message:
    """`message` carrying `marker` at its start, or at the word nearest its middle."""
    content = str(message["content"])
    if not middle:
        return {**message, "content": f"{marker} {content}"}
    space = content.find(" ", len(content) // 2)
    at = space if space >= 0 else len(content)
    return {**message, "content": f"{content[:at]} {marker}{content[at:]}"}


def fact_tokens(text: str) -> set[str]:
    """The distinct fact tokens of source text."""
    found = {token for token in _FACT_TOKENS.findall(text) if len(token) >= 2}
    return found | set(_NAME.findall(text))


def holder(tokens: set[str]) -> Found:
    """What a summary holds of `tokens`, each as a whole word, the scaffolding aside."""
    patterns = [(token, re.compile(rf"(?<!\w){re.escape(token)}(?!\w)")) for token in tokens]

    def found(text: str) -> set[str]:
        body = _SCAFFOLD.sub("", text)
        return {token for token, pattern in patterns if token in body and pattern.search(body)}

    return found


def markers(text: str) -> set[str]:
    """The markers a text holds."""
    return set(MARKER_PATTERN.findall(text))


@dataclass
class Tally:
    """One scenario's figures, summed over its sessions."""

    source: int = 0
    leaves: int = 0
    chain_final: int = 0
    tree_final: int = 0
    chain_merges: list[float] = field(default_factory=list)
    """Per chained merge: the share of its inputs' facts its output keeps."""
    tree_merges: list[float] = field(default_factory=list)
    max_merge_tokens: int = 0

    def figures(self) -> dict[str, float]:
        """The figures printed and compared."""
        return {
            "source": self.source,
            "leaves": self.leaves,
            "chain final": self.chain_final,
            "chain per merge %": _mean(self.chain_merges),
            "chain worst merge %": round(100 * min(self.chain_merges, default=0.0), 1),
            "tree final": self.tree_final,
            "tree per merge %": _mean(self.tree_merges),
            "max merge tokens": self.max_merge_tokens,
        }


def _mean(shares: Sequence[float]) -> float:
    return round(100 * sum(shares) / len(shares), 1) if shares else 0.0


async def _merge(first: str, second: str, found: Found, tally: Tally, shares: list[float]) -> str:
    text = (await merge_summaries([first, second], SETTINGS)).summary_text
    held = found(first) | found(second)
    if held:
        shares.append(len(found(text) & held) / len(held))
    tally.max_merge_tokens = max(tally.max_merge_tokens, count_text(text))
    return text


async def measure(session: list[Message], source: set[str], found: Found, tally: Tally) -> None:
    """Leaves, chain and tree of one session, added to `tally`."""
    leaves = []
    for start in range(0, len(session), LEAF_MESSAGES):
        result = await summarize(session[start : start + LEAF_MESSAGES], SETTINGS)
        assert result is not None
        leaves.append(result.summary_text)
    tally.source += len(source)
    tally.leaves += len(set().union(*(found(leaf) for leaf in leaves)))
    chain = leaves[0]
    for leaf in leaves[1:]:
        chain = await _merge(chain, leaf, found, tally, tally.chain_merges)
    tally.chain_final += len(found(chain))
    level = leaves
    while len(level) > 1:
        merged = [
            await _merge(level[i], level[i + 1], found, tally, tally.tree_merges)
            for i in range(0, len(level) - 1, 2)
        ]
        level = merged + ([level[-1]] if len(level) % 2 else [])
    tally.tree_final += len(found(level[0]))


async def bench(conversations: Sequence[list[Message]]) -> dict[str, dict[str, float]]:
    """Every scenario's figures."""
    sessions = [s for s in sessions_of(conversations) if len(s) > LEAF_MESSAGES]
    results: dict[str, dict[str, float]] = {}
    for name, middle in (("markers-opening", False), ("markers-middle", True)):
        tally = Tally()
        for index, session in enumerate(sessions):
            planted = [
                plant(message, f"MARKER-s{index}m{message['seq']}", middle) for message in session
            ]
            await measure(planted, {f"MARKER-s{index}m{m['seq']}" for m in session}, markers, tally)
        results[name] = tally.figures()
    tally = Tally()
    for session in sessions:
        source = set().union(*(fact_tokens(str(message["content"])) for message in session))
        await measure(session, source, holder(source), tally)
    results["facts"] = tally.figures()
    return results


def render(results: dict[str, dict[str, float]], before: dict[str, dict[str, float]]) -> str:
    """A markdown table, one row per scenario; `before → after` where `before` has the figure."""
    names = list(next(iter(results.values())))
    lines = [
        "| scenario | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for scenario, figures in results.items():
        cells = []
        for name in names:
            now = f"{figures[name]:g}"
            old = before.get(scenario, {}).get(name)
            cells.append(f"{old:g} → {now}" if old is not None and old != figures[name] else now)
        lines.append(f"| {scenario} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@dataclass(frozen=True)
class Report:
    """What `--output` writes."""

    data: str
    sessions: int
    messages: int
    results: dict[str, dict[str, float]]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    default = SHARED_DATA if SHARED_DATA.is_file() else FIXTURE
    parser.add_argument("--data", type=Path, default=default, help="ShareGPT-style JSON lines")
    parser.add_argument("--output", type=Path, help="write the figures as JSON")
    parser.add_argument("--compare", type=Path, help="a JSON of an earlier run: before → after")
    args = parser.parse_args(argv)
    conversations = load_conversations(args.data)
    sessions = [s for s in sessions_of(conversations) if len(s) > LEAF_MESSAGES]
    started = time.perf_counter()
    results = asyncio.run(bench(conversations))
    before = json.loads(args.compare.read_text())["results"] if args.compare else {}
    print(
        f"offline `local` merges: {args.data.name}, {len(sessions)} sessions of up to "
        f"{SESSION_MESSAGES} messages, leaves of {LEAF_MESSAGES} (target "
        f"{SETTINGS.target_tokens}), merges to {SETTINGS.merge_target_tokens} tokens"
    )
    print(render(results, before))
    print(f"({time.perf_counter() - started:.0f} s)")
    if args.output:
        report = Report(args.data.name, len(sessions), sum(len(s) for s in sessions), results)
        args.output.write_text(json.dumps(asdict(report), indent=2) + "\n")


if __name__ == "__main__":
    main()
