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

# Each release line the contract test (tests/test_areal_contract.py) has passed on,
# as [low, high): 1.0.4, tag v2.0.0 and main @cbff54d (which says 2.0.0).
SUPPORTED_AREAL = (
    ((1, 0, 4), (1, 1, 0)),
    ((2, 0, 0), (2, 1, 0)),
)
TESTED_AREAL = "1.0.4, 2.0.0 and main @cbff54d"
# Older releases lack hooks areal-debug needs (the one step clock, RPC tensors).
MINIMUM_AREAL = (1, 0, 4)
ALLOW_ANY_VERSION_ENV = "AREAL_DEBUG_ALLOW_ANY_AREAL"

# The AReaL symbols the hooks reach, (module, attribute path), by the process that
# needs them: on a release outside SUPPORTED_AREAL they are looked up at start, and
# a missing one refuses the run naming it (the contract test checks every symbol
# of the adapter on the tested releases). The trainer's modules are imported by
# then, so the look-up costs milliseconds.
TRAINER_HOOKS = (
    ("areal.trainer.rl_trainer", "PPOTrainer._init_rollout"),
    ("areal.trainer.rl_trainer", "PPOTrainer.train"),
    ("areal.trainer.rl_trainer", "PPOTrainer.close"),
    ("areal.api.cli_args", "BaseExperimentConfig"),
    ("areal.api.engine_api", "InferenceEngine"),
    ("areal.engine", "FSDPPPOActor"),
    ("areal.utils.data", "split_and_unpad_tensor"),
    ("areal.utils.recover", "RecoverHandler"),
    ("areal.utils.saver", "Saver"),
    ("areal.utils.stats_logger", "StatsLogger"),
    ("areal.utils.stats_tracker", "export"),
)
LAUNCHER_HOOKS = (
    ("areal.api.cli_args", "parse_cli_args"),
    ("areal.api.cli_args", "to_structured_cfg"),
    ("areal.infra.launcher.local", "local_main"),
)


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


def missing_hooks(hooks: tuple[tuple[str, str], ...]) -> list[str]:
    """``module.attribute`` of each hook the installed AReaL lacks."""
    import importlib

    missing = []
    for module, path in hooks:
        try:
            obj = importlib.import_module(module)
            for name in path.split("."):
                obj = getattr(obj, name)
        except (ImportError, AttributeError):
            missing.append(f"{module}.{path}")
    return missing


def untested_areal(installed: str | None = None) -> str | None:
    """``AReaL 2.1.0, a release areal-debug was not tested with (tested: ...)``
    where the installed release is outside ``SUPPORTED_AREAL``; else None."""
    installed = installed or installed_areal_version()
    parsed = _parse_version(installed)
    if any(low <= parsed < high for low, high in SUPPORTED_AREAL):
        return None
    return (
        f"AReaL {installed}, a release areal-debug was not tested with (tested: "
        f"{TESTED_AREAL})"
    )


_warned: set[str] = set()


def check_areal_version(
    installed: str | None = None, hooks: tuple[tuple[str, str], ...] = ()
) -> str:
    """Return the installed AReaL version; raise one clear error where it cannot
    work. A release the contract test passed on runs as it is; an older one than
    :data:`MINIMUM_AREAL` is refused; any other (2.1, 3.0, ...) runs with one
    warning naming the tested builds, unless one of ``hooks`` is missing, which
    refuses it naming the hook. ``AREAL_DEBUG_ALLOW_ANY_AREAL=1`` turns a refusal
    into a warning."""
    if installed is None:
        installed = installed_areal_version()
    parsed = _parse_version(installed)
    if any(low <= parsed < high for low, high in SUPPORTED_AREAL):
        return installed
    if parsed < MINIMUM_AREAL:
        problem = (
            f"AReaL {installed} is installed; areal-debug needs AReaL >= "
            f"{_dotted(MINIMUM_AREAL)} (tested: {TESTED_AREAL}). Install a newer "
            "AReaL (pip install 'areal>=1.0.4')"
        )
    else:
        missing = missing_hooks(hooks)
        if not missing:
            if installed not in _warned:
                _warned.add(installed)
                logger.warning(
                    f"AReaL {installed} is not a release areal-debug was tested with "
                    f"({TESTED_AREAL}); every hook it needs is there, so it runs. A "
                    "replay still compares every step bit for bit with its recording "
                    "and says where they part."
                )
            return installed
        problem = (
            f"AReaL {installed} lacks what areal-debug hooks into: "
            f"{', '.join(missing)} (tested: {TESTED_AREAL}). Install a tested AReaL "
            "(pip install areal==1.0.4, or 2.0.0 from its repository), or an "
            "areal-debug that supports this one"
        )
    if os.environ.get(ALLOW_ANY_VERSION_ENV) == "1":
        logger.warning(f"{problem}; trying anyway ({ALLOW_ANY_VERSION_ENV}=1).")
        return installed
    raise UnsupportedArealError(
        f"{problem}, or set {ALLOW_ANY_VERSION_ENV}=1 to try anyway."
    )
