"""A request that does not validate, in words: one sentence per field, naming the field as the
request wrote it.

pydantic's errors name the branches of a union (`content.str`, `content.list[...]`) and the tags
of a discriminated one (`messages.0.user.content`): neither is a field of the request. Each
location is walked against the body as sent, and a segment the body does not hold is dropped;
the errors of one value that matched no branch of a union become one sentence (`must be a string
or a list of content parts`), and where one branch got further (the value was a list, one of its
parts was wrong) only that branch's errors are said.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from api.schemas import PATTERN_WORDS, ROLES

Location = tuple[str | int, ...]

TYPE_MISMATCHES = frozenset(
    {
        "string_type",
        "list_type",
        "dict_type",
        "int_type",
        "float_type",
        "bool_type",
        "model_type",
        "model_attributes_type",
        "none_required",
        "is_instance_of",
        "literal_error",
    }
)
"""Error types that say only "the value is not of this branch's type"."""

BRANCH_WORDS = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "none": "null",
}
"""What a value of a union branch is, in words, by pydantic's label of the branch."""


TYPE_WORDS = {
    "list_type": "a list",
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_parsing_size": "an integer of at most 64 bits",
    "float_type": "a number",
    "bool_type": "a boolean (true or false)",
}
"""What a value of the wrong type must be instead, in words, by pydantic's error type."""


BOUND_WORDS = {
    "greater_than_equal": ("must be at least", "ge"),
    "greater_than": ("must be more than", "gt"),
    "less_than_equal": ("must be at most", "le"),
    "less_than": ("must be less than", "lt"),
}
"""A number out of its bounds, in words, and the bound's name in pydantic's context."""

PLAIN_WORDS = {
    "missing": "is required",
    "extra_forbidden": "is not a field this request takes",
    "bool_parsing": "must be true or false",
    "datetime_parsing": "must be a date and time (ISO 8601, with a time zone)",
    "datetime_from_date_parsing": "must be a date and time (ISO 8601, with a time zone)",
    "datetime_type": "must be a date and time (ISO 8601, with a time zone)",
}
"""What pydantic says of these errors, in the words the API uses."""


def located_errors(errors: Sequence[Any], body: Any) -> list[tuple[Location, str]]:
    """Each field at fault (its location in the request, branch labels and tags dropped) with
    what is wrong with it, in the order pydantic found them."""
    walked = [(*_walk(error, body), error) for error in errors]
    said: list[tuple[Location, str]] = []
    unions: dict[Location, list[str]] = {}
    for location, label, error in walked:
        if label is not None and error.get("type") in TYPE_MISMATCHES:
            if any(
                other is not error and _further(location, other_location, other)
                for other_location, _, other in walked
            ):
                continue  # another branch got further: its errors say what is wrong
            if location not in unions:
                unions[location] = []
                said.append((location, ""))
            unions[location].append(_branch_words(label))
            continue
        said.append((location, _describe(error)))
    answer: list[tuple[Location, str]] = []
    for location, message in said:
        if not message:
            message = "must be " + " or ".join(dict.fromkeys(unions[location]))
        if (location, message) not in answer:
            answer.append((location, message))
    return answer


def as_text(location: Location, message: str) -> str:
    """`body.messages.0.content: must be ...`, as every validation detail of the API reads."""
    where = ".".join(str(part) for part in location)
    return f"{where}: {message}" if where else message


def _walk(error: Any, body: Any) -> tuple[Location, str | None]:
    """The location of `error` as the request holds it, and the label of the union branch the
    error is of (the last segment dropped, when the location ends with one)."""
    raw: Location = tuple(error.get("loc", ()))
    if error.get("type") == "json_invalid":
        return ("body",), None  # pydantic's last segment is a character position, not a field
    if not raw or raw[0] != "body":
        return raw, None
    kept: list[str | int] = ["body"]
    value, label = body, None
    for index, part in enumerate(raw[1:], start=1):
        last = index == len(raw) - 1
        if isinstance(value, dict) and _is_tag(value, part, raw[index + 1 :]):
            label = str(part)
        elif _holds(value, part):
            kept.append(part)
            value, label = value[part], None
        elif last and isinstance(value, dict) and error.get("type") == "missing":
            kept.append(part)
            label = None
        else:
            label = str(part)  # a union branch or a tag: not in the request
    return tuple(kept), label


def _further(location: Location, other_location: Location, other: Any) -> bool:
    """Whether `other` (another error) went further into the value at `location` than a type
    mismatch: deeper into it, or a branch whose type matched."""
    if other_location[: len(location)] != location:
        return False
    return len(other_location) > len(location) or other.get("type") not in TYPE_MISMATCHES


def _holds(value: Any, part: str | int) -> bool:
    """Whether `part` is a key of `value` (an object) or an index of it (an array)."""
    if isinstance(value, dict):
        return part in value
    return isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value)


def _is_tag(value: dict[Any, Any], part: str | int, rest: Location) -> bool:
    """Whether `part` is a discriminated union's tag (the first `text` of `text.text` in
    `{"type": "text", "text": 5}`) rather than a key: a value of the object, followed by one of
    its keys."""
    return isinstance(part, str) and part in value.values() and bool(rest) and rest[0] in value


def _branch_words(label: str) -> str:
    if label in BRANCH_WORDS:
        return BRANCH_WORDS[label]
    if label.startswith("list["):
        return "a list of content parts" if "Part" in label else "a list"
    return "an object"


def _describe(error: Any) -> str:
    loc = error.get("loc", ())
    kind = error.get("type")
    ctx = error.get("ctx") or {}
    if kind == "json_invalid":
        position = loc[-1] if loc else "?"
        return f"invalid JSON at character {position}: {ctx.get('error', 'JSON decode error')}"
    if kind == "none_required" and len(loc) >= 2 and loc[-2] in ROLES:
        return f"not allowed on a {loc[-2]} message"
    if kind == "string_pattern_mismatch":
        return PATTERN_WORDS.get(str(ctx.get("pattern")), str(error.get("msg", "invalid")))
    if kind == "union_tag_not_found":
        return f"{str(ctx.get('discriminator', 'a tag')).strip(chr(39))} is required"
    if kind == "union_tag_invalid":
        expected = ctx.get("expected_tags", "")
        return f"{ctx.get('discriminator')} must be one of {expected}, not {ctx.get('tag')!r}"
    if kind in ("model_attributes_type", "model_type", "dict_type"):
        return "must be an object"
    if kind in TYPE_WORDS:
        return f"must be {TYPE_WORDS[kind]}"
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])
    if kind in BOUND_WORDS:
        words, bound = BOUND_WORDS[kind]
        return f"{words} {ctx.get(bound)}"
    if kind in ("too_short", "too_long"):
        least = kind == "too_short"
        count = ctx.get("min_length" if least else "max_length")
        return f"must hold {'at least' if least else 'at most'} {count} item{'s' * (count != 1)}"
    if kind in ("string_too_short", "string_too_long"):
        least = kind == "string_too_short"
        count = ctx.get("min_length" if least else "max_length")
        unit = f"character{'s' * (count != 1)}"
        return f"must be {'at least' if least else 'at most'} {count} {unit}"
    if kind in PLAIN_WORDS:
        return PLAIN_WORDS[kind]
    if kind == "literal_error":
        return f"must be {ctx.get('expected', 'one of the values allowed')}"
    return str(error.get("msg", "invalid"))
