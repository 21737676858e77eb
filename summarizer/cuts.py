"""Where a list of chat messages may be cut.

A cut at position `i` splits `messages[:i]` from `messages[i:]`. A cut is illegal inside a
tool exchange: between an assistant message carrying `tool_calls` and the last tool
result answering one of those calls (parallel calls included). A call whose results
have not all arrived yet, at the end of the list (followed by nothing but results and further
calls, as parallel Responses `function_call` items are), is still open: the list may not be
cut after it either, because its results will be appended later.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from typing import Any

Message = Mapping[str, Any]


def _call_ids(message: Message) -> list[str]:
    ids: list[str] = []
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping) and call.get("id"):
            ids.append(str(call["id"]))
    return ids


def _is_call(message: Message) -> bool:
    return message.get("role") == "assistant" and bool(message.get("tool_calls"))


def _continues_exchange(message: Message) -> bool:
    """A tool result, or another call without text: parallel calls written one per message
    (Responses `function_call` items) continue the exchange the first call opened."""
    return message.get("role") == "tool" or (_is_call(message) and not message.get("content"))


def _first_after(indices: list[int], position: int) -> int | None:
    found = bisect.bisect_right(indices, position)
    return indices[found] if found < len(indices) else None


def tool_spans(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """`(call, last)` index pairs: no cut may fall after `call` and at or before `last`.

    `last` is `len(messages)` when the call still waits for results at the end of the list.
    """
    answers: dict[str, list[int]] = {}
    declared: dict[str, list[int]] = {}
    for index, message in enumerate(messages):
        if message.get("role") == "tool" and message.get("tool_call_id"):
            answers.setdefault(str(message["tool_call_id"]), []).append(index)
        if _is_call(message):
            for call_id in _call_ids(message):
                declared.setdefault(call_id, []).append(index)

    # exchange_only_after[i]: nothing but tool results and further calls follow message i
    exchange_only_after = [True] * len(messages)
    for index in range(len(messages) - 2, -1, -1):
        exchange_only_after[index] = exchange_only_after[index + 1] and _continues_exchange(
            messages[index + 1]
        )
    spans: list[tuple[int, int]] = []
    for index, message in enumerate(messages):
        if not _is_call(message):
            continue
        last = index
        run_end = index + 1
        while run_end < len(messages) and messages[run_end].get("role") == "tool":
            last = run_end
            run_end += 1
        pending = False
        for call_id in _call_ids(message):
            answer = _first_after(answers.get(call_id, []), index)
            redeclared = _first_after(declared.get(call_id, []), index)
            if answer is not None and (redeclared is None or answer < redeclared):
                last = max(last, answer)
            else:
                pending = True
        if pending and exchange_only_after[index]:
            last = len(messages)
        if last > index:
            spans.append((index, last))
    return spans


JOINS_NEXT = "joins_next"
"""A message marked so (a Responses `reasoning` item) belongs with the message after it: the
API refuses the one without the other, so no cut falls between them."""


def legal_cuts(messages: Sequence[Message]) -> list[int]:
    """Every legal cut position, ascending, from 0 to `len(messages)` (0 is always legal)."""
    size = len(messages)
    depth = [0] * (size + 2)
    joined = [(index, index + 1) for index, m in enumerate(messages) if m.get(JOINS_NEXT)]
    for call, last in [*tool_spans(messages), *joined]:
        depth[call + 1] += 1
        depth[last + 1] -= 1
    cuts: list[int] = []
    open_spans = 0
    for position in range(size + 1):
        open_spans += depth[position]
        if position == 0 or open_spans == 0:
            cuts.append(position)
    return cuts


def summarizable_count(messages: Sequence[Message], keep_last_n: int) -> int:
    """How many leading messages may be summarized while keeping the last `keep_last_n`.

    The boundary moves back to the nearest legal cut, so a tool call and its results
    always stay on the same side.
    """
    boundary = len(messages) - max(0, keep_last_n)
    if boundary <= 0:
        return 0
    cuts = legal_cuts(messages)
    return cuts[bisect.bisect_right(cuts, boundary) - 1]


def midpoint_cut(cuts: Sequence[int], prefix: Sequence[int], start: int, end: int) -> int | None:
    """The legal cut strictly inside `(start, end)` nearest the token midpoint, or None.

    `cuts` are legal positions (ascending); `prefix[i]` is the token count of the first `i`
    messages. Ties go to the earlier cut.
    """
    low = bisect.bisect_right(cuts, start)
    high = bisect.bisect_left(cuts, end)
    if low >= high:
        return None
    target = (prefix[start] + prefix[end]) / 2
    found = bisect.bisect_left(cuts, target, low, high, key=lambda cut: prefix[cut])
    candidates = [cuts[i] for i in (found - 1, found) if low <= i < high]
    return min(candidates, key=lambda cut: (abs(prefix[cut] - target), cut))


def _leaves(tokens: int, room: int) -> int:
    return max(1, math.ceil(tokens / room))


def balanced_cut(
    cuts: Sequence[int], prefix: Sequence[int], start: int, end: int, room: int | None
) -> int | None:
    """The bisect cut: nearest the token midpoint among the cuts needing the fewest leaves.

    With `room` (tokens one call can take) unknown, this is `midpoint_cut`. With it known,
    a cut just under a multiple of `room` can save a whole leaf on each side: splitting
    8.05 rooms at the midpoint needs 10 leaves, at 4 rooms only 9.
    """
    middle = midpoint_cut(cuts, prefix, start, end)
    if middle is None or room is None or room <= 0:
        return middle
    low = bisect.bisect_right(cuts, start)
    high = bisect.bisect_left(cuts, end)
    candidates = {middle}
    for share in range(1, _leaves(prefix[end] - prefix[start], room)):
        for boundary in (prefix[start] + share * room, prefix[end] - share * room):
            found = bisect.bisect_right(cuts, boundary, low, high, key=lambda cut: prefix[cut])
            candidates.update(cuts[i] for i in (found - 1, found) if low <= i < high)
    target = (prefix[start] + prefix[end]) / 2

    def cost(cut: int) -> tuple[int, float, int]:
        leaves = _leaves(prefix[cut] - prefix[start], room) + _leaves(
            prefix[end] - prefix[cut], room
        )
        return leaves, abs(prefix[cut] - target), cut

    return min(candidates, key=cost)
