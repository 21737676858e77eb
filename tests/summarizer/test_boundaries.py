"""The summarizer stays pure: importing it loads neither litellm nor the service."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_summarizer_loads_neither_litellm_nor_api() -> None:
    code = (
        "import sys, summarizer, summarizer.summarize, summarizer.llm; "
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('litellm', 'api')]; "
        "print(','.join(loaded))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == ""
