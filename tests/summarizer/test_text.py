"""Clipping keeps whole characters and honours its token limit."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from summarizer.text import MIDDLE_MARKER, clip_chars, clip_middle, clip_tokens, safe_boundary
from summarizer.tokens import count_text

SURROGATE_PAIR = "\ud83d\ude00"  # 😀 as a UTF-16 pair, as `surrogatepass` decoding leaves it


def test_clip_chars_never_splits_a_surrogate_pair() -> None:
    text = "ab" + SURROGATE_PAIR + "cd"
    assert clip_chars(text, 3, marker="") == "ab"
    assert clip_chars(text, 4, marker="") == text[:4]


def test_clip_chars_keeps_a_combining_mark_with_its_letter() -> None:
    text = "cafe\u0301 au lait"
    assert safe_boundary(text, 4) == 3
    assert clip_chars(text, 5, marker="…") == "caf…"


@given(st.text(min_size=1, max_size=300), st.integers(1, 60))
def test_clip_tokens_respects_the_limit_and_keeps_a_prefix(text: str, limit: int) -> None:
    clipped = clip_tokens(text, limit, marker="…")
    assert count_text(clipped) <= limit
    assert text.startswith(clipped.removesuffix("…").rstrip())


def test_clip_tokens_on_chinese_cuts_between_characters() -> None:
    text = "龙珠剧场版是以著名的漫画和动画作品《龙珠》为基础，制作的一系列电影。" * 5
    clipped = clip_tokens(text, 20, marker="")
    assert clipped and text.startswith(clipped)
    assert "\ufffd" not in clipped


def test_clip_middle_keeps_head_and_tail_around_the_marker() -> None:
    text = "HEAD " + "middle " * 500 + "TAIL"
    clipped = clip_middle(text, 40)
    assert clipped.startswith("HEAD") and clipped.endswith("TAIL")
    assert MIDDLE_MARKER in clipped
    assert count_text(clipped) <= 40


def test_short_text_is_returned_unchanged() -> None:
    assert clip_middle("short", 40) == "short"
    assert clip_tokens("short", 40) == "short"
