"""The official `openai` npm package (and other npm packages), driven from Node by a test:
installed once per version into a cache directory outside the repository, then run as a list
of steps.

`openai_package_dir()` installs (or reuses) the pinned package and answers the directory that
holds `node_modules/openai`; `run_openai_steps()` runs `tests/client/node/openai_steps.mjs`
with the steps and answers what each step answered. The script's own header says what a step
is. `npm_package_dir()` installs any pinned package the same way; `run_sdk_steps()` runs
`tests/client/node/sdk_steps.mjs` with the client class of a `NodeSdk` (the `openai` package's
`OPENAI_SDK`, or `tests/support/node_anthropic.py`'s). `NodeUnavailable` says why Node cannot
be used here; `skip_or_fail()` skips a test for it, or fails it under CI=true when `node` is
installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.conftest import IN_CI
from tests.support.live_server import REPO_ROOT

OPENAI_NPM_VERSION = "6.49.0"
"""The pinned `openai` npm release: the newest whose engines accept Node 20 (7.x needs 22)."""

MIN_NODE_MAJOR = 20
"""The oldest Node major the pinned package is tested with (Node 20 is the oldest maintained
line)."""

CACHE_ENV = "PRECIS_TEST_CACHE_DIR"
"""Overrides the cache directory (default `~/.cache/precis-tests`, or under XDG_CACHE_HOME)."""

NPM_INSTALL_TIMEOUT_SECONDS = 300.0
"""A first install downloads a package and its few dependencies; slow mirrors get five
minutes."""

NPM_ERROR_LINES = 3
"""The first lines of npm's error output (its code and cause) that a skip or failure quotes."""

SCRIPT_TIMEOUT_SECONDS = 120.0
"""One run of the step script: a handful of HTTP calls to a loopback server."""

STEPS_SCRIPT = REPO_ROOT / "tests" / "client" / "node" / "openai_steps.mjs"
"""The committed script that runs the steps (its header documents them)."""

SDK_STEPS_SCRIPT = REPO_ROOT / "tests" / "client" / "node" / "sdk_steps.mjs"
"""The committed script that runs the steps of any `NodeSdk` (its header documents them)."""


@dataclass(frozen=True)
class NodeSdk:
    """An SDK npm package, pinned, and the client class it exports."""

    package: str
    version: str
    export: str
    """The client class: `new <export>({baseURL, apiKey, ...})`."""
    env_prefix: str
    """The package reads variables of this prefix (base URL, key) as defaults: a test's
    Node process runs without them."""

    def package_dir(self) -> Path:
        return npm_package_dir(self.package, self.version)


OPENAI_SDK = NodeSdk("openai", OPENAI_NPM_VERSION, "OpenAI", "OPENAI_")
"""The `openai` npm package as `run_sdk_steps` drives it."""


class NodeUnavailable(Exception):
    """Node (or the npm package) cannot be used on this machine; the message says why."""


class NodeStepsFailed(AssertionError):
    """The step script failed on a step not marked `expect_error`, or did not run."""


def skip_or_fail(problem: NodeUnavailable, module_level: bool) -> NoReturn:
    """Skip, but fail under CI=true when node is installed: there it must work."""
    if shutil.which("node") is not None and IN_CI:
        pytest.fail(f"CI=true and node is installed, but {problem}", pytrace=False)
    pytest.skip(str(problem), allow_module_level=module_level)


def cache_root() -> Path:
    """Where test downloads are kept across runs, outside the repository's tracked files."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "precis-tests"


def node_binary() -> str:
    """The `node` executable, at least `MIN_NODE_MAJOR`; `NodeUnavailable` otherwise."""
    node = shutil.which("node")
    if node is None:
        raise NodeUnavailable(
            "node not found on PATH: install Node.js "
            f"{MIN_NODE_MAJOR}+ to run the tests of the npm client packages"
        )
    version = _run([node, "--version"], timeout=30).stdout.strip()
    major = version.lstrip("v").split(".")[0]
    if not major.isdigit() or int(major) < MIN_NODE_MAJOR:
        raise NodeUnavailable(f"node {version} is older than {MIN_NODE_MAJOR}: upgrade Node.js")
    return node


def openai_package_dir(version: str = OPENAI_NPM_VERSION) -> Path:
    """The directory holding `node_modules/openai` at `version`, installed on first use."""
    return npm_package_dir("openai", version)


def npm_package_dir(package: str, version: str) -> Path:
    """The directory holding `node_modules/<package>` at `version`, installed on first use.

    The install goes to a scratch directory renamed into place once complete, so an
    interrupted install is never reused and two concurrent runs do not mix their files.
    """
    target = cache_root() / f"node-{package.lstrip('@').replace('/', '-')}" / version
    if _installed_version(target, package) == version:
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise NodeUnavailable(f"npm not found on PATH: it installs the {package} npm package")
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=target.parent))
    try:
        manifest = {"private": True, "dependencies": {package: version}}
        (scratch / "package.json").write_text(json.dumps(manifest))
        completed = _run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=scratch,
            timeout=NPM_INSTALL_TIMEOUT_SECONDS,
        )
        if completed.returncode != 0 or _installed_version(scratch, package) != version:
            lines = [line for line in completed.stderr.splitlines() if line.strip()]
            raise NodeUnavailable(
                f"npm install {package}@{version} failed: {'; '.join(lines[:NPM_ERROR_LINES])}"
            )
        if _installed_version(target, package) == version:
            return target  # another run (a second test worker) finished first
        shutil.rmtree(target, ignore_errors=True)
        try:
            scratch.rename(target)
        except OSError:  # another run put its complete install there first
            if _installed_version(target, package) != version:
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def run_openai_steps(
    base_url: str,
    api_key: str,
    steps: Sequence[Mapping[str, Any]],
    *,
    client_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run `steps` with `new OpenAI({baseURL: base_url, apiKey: api_key, ...})`; answers each
    step's answer by its name. `base_url` includes `/v1`, as an app would write it."""
    request = {
        "package_dir": str(openai_package_dir()),
        "client": {"baseURL": base_url, "apiKey": api_key, **(client_options or {})},
        "steps": list(steps),
    }
    return _run_steps(STEPS_SCRIPT, request, OPENAI_SDK.env_prefix)


def run_sdk_steps(
    sdk: NodeSdk,
    base_url: str,
    api_key: str,
    steps: Sequence[Mapping[str, Any]],
    *,
    client_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run `steps` (`tests/client/node/sdk_steps.mjs`) with `new <sdk.export>({baseURL:
    base_url, apiKey: api_key, ...})`; answers each step's answer by its name. `base_url` is
    what an app would write for that SDK (with `/v1` for `openai`, without for Anthropic's)."""
    request = {
        "package_dir": str(sdk.package_dir()),
        "package": sdk.package,
        "export": sdk.export,
        "client": {"baseURL": base_url, "apiKey": api_key, **(client_options or {})},
        "steps": list(steps),
    }
    return _run_steps(SDK_STEPS_SCRIPT, request, sdk.env_prefix)


def _run_steps(script: Path, request: Mapping[str, Any], env_prefix: str) -> dict[str, Any]:
    node = node_binary()
    env = {name: value for name, value in os.environ.items() if not name.startswith(env_prefix)}
    try:
        completed = _run(
            [node, str(script)],
            input=json.dumps(request),
            env=env,
            timeout=SCRIPT_TIMEOUT_SECONDS,
        )
    except NodeUnavailable as exc:  # Node ran, the steps hung: a failure, never a skip
        raise NodeStepsFailed(str(exc)) from exc
    try:
        answer: dict[str, Any] = json.loads(completed.stdout)
    except json.JSONDecodeError as exc:
        raise NodeStepsFailed(
            f"the step script exited with {completed.returncode}:\n"
            f"{completed.stdout[-2000:]}\n{completed.stderr[-2000:]}"
        ) from exc
    if completed.returncode != 0 or "failed" in answer:
        raise NodeStepsFailed(f"a step failed: {json.dumps(answer.get('failed'), indent=2)}")
    results: dict[str, Any] = answer["results"]
    return results


def _installed_version(folder: Path, package: str) -> str | None:
    manifest = folder / "node_modules" / package / "package.json"
    try:
        version = json.loads(manifest.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None
    return str(version)


def _run(
    command: list[str],
    *,
    timeout: float,
    cwd: Path | None = None,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `command`; a timeout raises `NodeUnavailable` (the machine cannot run it)."""
    try:
        return subprocess.run(
            command,
            cwd=cwd,
            input=input,
            env=dict(env) if env is not None else None,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise NodeUnavailable(f"{' '.join(command[:2])} did not finish in {timeout} s") from exc
