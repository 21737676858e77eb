"""What the operator tools share: running their async core as a command."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine
from typing import TextIO, TypeVar

Options = TypeVar("Options")


def run_command(
    run: Callable[[Options, TextIO, TextIO], Coroutine[object, object, int]], options: Options
) -> int:
    """Run a tool's async core on stdout and stderr; its exit status."""
    try:
        return asyncio.run(run(options, sys.stdout, sys.stderr))
    except BrokenPipeError:
        # The reader left early (`| head`): stop quietly, and keep Python's exit flush quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
