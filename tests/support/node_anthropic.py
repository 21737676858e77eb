"""The official `@anthropic-ai/sdk` npm package, driven from Node by a test
(`tests/support/node_openai.py`'s `run_sdk_steps` with `ANTHROPIC_SDK`).

`anthropic_package_dir()` installs (or reuses) the pinned package in the same cache as the
`openai` package; `NodeUnavailable` says when it cannot be.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.node_openai import NodeSdk

ANTHROPIC_NPM_VERSION = "1.14.0"
"""The pinned `@anthropic-ai/sdk` release: it declares no engines and supports Node 20 LTS and
later (its README), so it runs on the oldest Node the tests take."""

ANTHROPIC_SDK = NodeSdk("@anthropic-ai/sdk", ANTHROPIC_NPM_VERSION, "Anthropic", "ANTHROPIC_")
"""The package as `run_sdk_steps` drives it: `new Anthropic({baseURL, apiKey, ...})`, its
ANTHROPIC_* defaults (base URL, key, auth token) left out of the Node process."""


def anthropic_package_dir() -> Path:
    """The directory holding `node_modules/@anthropic-ai/sdk`, installed on first use."""
    return ANTHROPIC_SDK.package_dir()
