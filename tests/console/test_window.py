"""The console's page window over a range of seqs (`api.console.html.window`)."""

from __future__ import annotations

import pytest

from api.console.html import Window, window


@pytest.mark.parametrize(
    ("first_seq", "last_seq", "page", "expected"),
    [
        (1, 250, None, Window(2, 2, 201, 250)),  # no page: the newest
        (1, 250, 1, Window(1, 2, 1, 200)),
        (1, 250, 9, Window(2, 2, 201, 250)),  # past the end: the last page
        (51, 300, 1, Window(1, 2, 51, 250)),  # a summary's range starts where it starts
        (51, 300, 2, Window(2, 2, 251, 300)),
        (5, 405, 3, Window(3, 3, 405, 405)),
        (1, 0, None, Window(1, 1, 1, 1)),  # an empty session still has one page
    ],
)
def test_a_window_holds_page_size_seqs_from_the_ranges_start(
    first_seq: int, last_seq: int, page: int | None, expected: Window
) -> None:
    assert window(first_seq, last_seq, 200, page) == expected
