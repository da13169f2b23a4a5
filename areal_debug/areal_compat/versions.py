# SPDX-License-Identifier: Apache-2.0
"""Which AReaL is installed: the supported releases, the installed build (version,
commit, files) and how it differs from a recording's.

Imports no AReaL at import time (the CLI reads a manifest's build with it).
"""

from __future__ import annotations

import os
import subprocess
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as pkg_version
from typing import Any

from areal_debug.logs import get_logger

logger = get_logger("DebugArealCompat")

# Each supported release line as [low, high): the contract test
# (tests/test_areal_contract.py) has passed on the release each line names.
SUPPORTED_AREAL = (
    ((1, 0, 4), (1, 1, 0)),
    ((2, 0, 0), (2, 1, 0)),
)
ALLOW_ANY_VERSION_ENV = "AREAL_DEBUG_ALLOW_ANY_AREAL"


class UnsupportedArealError(RuntimeError):
    """The installed AReaL is outside the ranges this areal-debug was checked against."""


def _parse_version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts + [0] * (3 - len(parts)))


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def installed_areal_version() -> str:
    """The installed AReaL's version string (its distribution, else ``__version__``)."""
    try:
        return pkg_version("areal")
    except PackageNotFoundError:  # an editable or vendored AReaL
        import areal

        return getattr(areal, "__version__", "0")


def installed_areal_build() -> dict[str, str]:
    """Which AReaL is installed, beyond its version: AReaL main and tag v2.0.0
    both say 2.0.0. ``version``; ``commit`` where the installation says which
    (pip's direct_url.json, PEP 610, for ``pip install git+...``; the git
    checkout of an editable install); ``files``, a digest of the installed
    files' hashes as the wheel's RECORD lists them, which tells two builds of
    one version apart wherever AReaL came from a wheel."""
    import hashlib
    import json
    from importlib.metadata import distribution

    build = {"version": installed_areal_version()}
    try:
        dist = distribution("areal")
    except PackageNotFoundError:
        return build
    origin = json.loads(dist.read_text("direct_url.json") or "{}")
    commit = (origin.get("vcs_info") or {}).get("commit_id")
    url = origin.get("url", "")
    if commit is None and url.startswith("file://") and origin.get("dir_info"):
        commit = _git_head(url[len("file://") :])
    if commit:
        build["commit"] = commit
    # Sources only: byte-compiled files and the metadata differ between
    # installations of one wheel.
    sources = sorted(
        line
        for line in (dist.read_text("RECORD") or "").splitlines()
        if line.startswith("areal/") and not line.split(",")[0].endswith(".pyc")
    )
    if sources:
        digest = hashlib.sha256("\n".join(sources).encode()).hexdigest()
        build["files"] = digest[:16]
    return build


def _git_head(path: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", path, "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def describe_areal_build(build: dict[str, Any]) -> str:
    """``2.0.0 (commit cbff54d, files 1a2b...)``: one line for people."""
    extra = []
    if build.get("commit"):
        extra.append(f"commit {build['commit'][:12]}")
    if build.get("files"):
        extra.append(f"files {build['files']}")
    version = build.get("version") or "?"
    return f"{version} ({', '.join(extra)})" if extra else version


# What a different AReaL can move in a replay: its training code, not the
# recorded rollout batch, which is replayed as it was.
AREAL_CHANGE_MOVES = (
    "the stages computed by AReaL's training code can move (recomputed "
    "log-probs, advantages, loss, gradients, weights); the rollout batches are "
    "replayed as recorded"
)


def areal_build_change(
    recorded: dict[str, Any] | None, recorded_version: str | None
) -> str | None:
    """How the installed AReaL differs from the one a recording was made with
    (its manifest's ``areal_build``, else only ``areal_version``), or ``None``.
    Builds are compared by what both say: the version, then the commit, then
    the files' digest."""
    current = installed_areal_build()
    recorded = dict(recorded or {})
    recorded.setdefault("version", recorded_version)
    if not recorded.get("version"):
        return None
    differs = any(
        recorded.get(key) and current.get(key) and recorded[key] != current[key]
        for key in ("version", "commit", "files")
    )
    if not differs:
        return None
    return (
        f"AReaL {describe_areal_build(current)} is installed, the recording was "
        f"made with AReaL {describe_areal_build(recorded)}"
    )


def areal_release(installed: str | None = None) -> tuple[int, int]:
    """(major, minor) of the installed AReaL: which form of a differing entry applies."""
    return _parse_version(installed or installed_areal_version())[:2]


def check_areal_version(installed: str | None = None) -> str:
    """Return the installed AReaL version; raise one clear error if unsupported.

    Setting ``AREAL_DEBUG_ALLOW_ANY_AREAL=1`` turns the error into a warning, for
    trying a new AReaL before ``tests/test_areal_contract.py`` has passed on it.
    """
    if installed is None:
        installed = installed_areal_version()
    parsed = _parse_version(installed)
    if any(low <= parsed < high for low, high in SUPPORTED_AREAL):
        return installed
    ranges = " or ".join(
        f">= {_dotted(low)}, < {_dotted(high)}" for low, high in SUPPORTED_AREAL
    )
    releases = " or ".join(
        f"areal=={_dotted(low)}" for low, _ in reversed(SUPPORTED_AREAL)
    )
    msg = (
        f"areal-debug supports AReaL {ranges}, but AReaL {installed} is installed. "
        "areal-debug reaches into AReaL's trainer, launchers and single-controller "
        "internals, which change between releases. Install a supported AReaL "
        f"(pip install {releases}), or set "
        f"{ALLOW_ANY_VERSION_ENV}=1 to try anyway after running "
        "tests/test_areal_contract.py against it."
    )
    if os.environ.get(ALLOW_ANY_VERSION_ENV) == "1":
        logger.warning(msg)
        return installed
    raise UnsupportedArealError(msg)
