"""How litellm is loaded (`summarizer.llm.load_litellm`): offline, and without work nobody
reads. Checked in a process of its own: the suite's own imports load litellm earlier."""

from __future__ import annotations

import os
import subprocess
import sys

LOADED_AS_THE_SERVICE_LOADS_IT = """
import asyncio
from summarizer.llm import load_litellm

async def main() -> None:
    litellm = await load_litellm()
    messages = [{"role": "user", "content": "data:image/png;base64," + "A" * 1_000}]
    logging_utils = litellm.litellm_core_utils.logging_utils
    logged = await logging_utils.truncate_base64_in_messages_async(messages)
    print("copied" if logged is not messages else "as given")

asyncio.run(main())
"""


def test_litellm_copies_no_request_for_a_log_nobody_reads() -> None:
    environment = {
        key: value for key, value in os.environ.items() if key != "MAX_BASE64_LENGTH_FOR_LOGGING"
    }
    answer = subprocess.run(
        [sys.executable, "-c", LOADED_AS_THE_SERVICE_LOADS_IT],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert answer.stdout.strip() == "as given", answer.stderr
