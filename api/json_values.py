"""What JSON values the databases store faithfully: the checks every request body passes."""

from __future__ import annotations

import math
from typing import Any

MAX_JSON_DEPTH = 16
"""Deepest nesting accepted in metadata and content: enough for real data, bounded for safety."""

MAX_JSON_INT = 2**63 - 1
"""Largest integer accepted in JSON, so every database stores it exactly."""


def check_json_value(value: Any, where: str, depth: int = 0) -> None:
    """Reject what the databases cannot store faithfully: NUL, lone surrogates, NaN, huge ints."""
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"{where}: nested deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(value, str):
        check_text(value, where)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int):
        if abs(value) > MAX_JSON_INT:
            raise ValueError(f"{where}: integer out of the 64-bit range")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: numbers must be finite")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(str(key), where)
            check_json_value(item, f"{where}.{key}", depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_json_value(item, f"{where}[{index}]", depth + 1)


def check_text(text: str, where: str) -> None:
    """Text must be valid Unicode without NUL: PostgreSQL stores neither NUL nor lone surrogates."""
    if "\x00" in text:
        raise ValueError(f"{where}: NUL characters are not accepted")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{where}: lone surrogate characters are not accepted") from exc


def check_finite(value: Any, where: str) -> None:
    """Reject NaN and Infinity anywhere in `value`: JSON has neither, so a body holding one
    could not be answered or read back."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: numbers must be finite (no NaN or Infinity)")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_finite(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_finite(item, f"{where}[{index}]")
