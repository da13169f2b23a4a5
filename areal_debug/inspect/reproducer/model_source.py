# SPDX-License-Identifier: Apache-2.0
"""Where a reproducer's models come from, and whether loading them runs code.

AReaL loads every model and tokenizer with ``trust_remote_code=True``. A recording
names its models as the dump run's config had them (``actor.path``,
``tokenizer_path``, ``ref.path``, ...), so a reproducer that loaded them as given
would run whatever Python a model directory's ``auto_map`` points at, or download
a hub repository and run its code: a recording would execute code, which the
format promises it never does (docs/format.md). So a reproducer loads, without
being asked, only local directories whose configs carry no custom code; a hub
name or custom code needs the user's explicit opt-in, and the refusal says which
and how.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

# Opt-ins, read from the environment of the person running the reproducer.
ALLOW_HUB_ENV = "AREAL_DEBUG_REPRO_ALLOW_HUB"
ALLOW_CODE_ENV = "AREAL_DEBUG_REPRO_ALLOW_CUSTOM_CODE"
# Config sections whose ``path`` is not a model: the recording itself, trackers.
NOT_MODELS = ("debug", "stats_logger", "cluster", "saver", "recover", "evaluator")
# transformers resolves custom classes through an ``auto_map`` in any of these
# (model, tokenizer, processor, generation and feature-extractor configs).
_CONFIG_SUFFIX = ".json"


class UntrustedModelError(RuntimeError):
    """A model the reproducer will not load without the user's opt-in."""


@dataclass(frozen=True)
class ModelSource:
    where: str  # the config key, e.g. "actor.path"
    value: str

    @property
    def local(self) -> bool:
        return os.path.isdir(self.value)


def model_sources(config: dict[str, Any]) -> list[ModelSource]:
    """Every model or tokenizer a run of ``config`` (a resolved, plain dict) would
    load: ``tokenizer_path`` and each section's ``path`` (at any depth, so a
    teacher's engines count), except the sections in :data:`NOT_MODELS`."""
    found: list[ModelSource] = []
    if isinstance(config.get("tokenizer_path"), str) and config["tokenizer_path"]:
        found.append(ModelSource("tokenizer_path", config["tokenizer_path"]))

    def walk(node: Any, where: str) -> None:
        if not isinstance(node, dict):
            return
        for key, value in node.items():
            here = f"{where}.{key}" if where else str(key)
            if key == "path" and where and isinstance(value, str) and value:
                found.append(ModelSource(here, value))
            elif isinstance(value, dict) and not (not where and key in NOT_MODELS):
                walk(value, here)

    walk(config, "")
    return found


def custom_code(directory: str) -> list[str]:
    """``file: auto_map`` for each top-level JSON config in ``directory`` that maps
    an Auto class to code (what ``trust_remote_code=True`` would import)."""
    hits = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not name.endswith(_CONFIG_SUFFIX) or not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue  # not a config transformers could read either
        if isinstance(data, dict) and data.get("auto_map"):
            hits.append(f"{name}: auto_map {json.dumps(data['auto_map'])[:200]}")
    return hits


def check(
    sources: list[ModelSource],
    allow_hub: bool | None = None,
    allow_code: bool | None = None,
) -> None:
    """Raise :class:`UntrustedModelError` naming every source that is a hub name
    (not a local directory) or carries custom code, unless opted into; the opt-ins
    default to the environment (:data:`ALLOW_HUB_ENV`, :data:`ALLOW_CODE_ENV`)."""
    if allow_hub is None:
        allow_hub = os.environ.get(ALLOW_HUB_ENV) == "1"
    if allow_code is None:
        allow_code = os.environ.get(ALLOW_CODE_ENV) == "1"
    problems = []
    for src in sources:
        if not src.local:
            if os.path.isabs(src.value) or src.value.startswith("."):
                continue  # a path not on this machine: the caller says so
            if not allow_hub:
                problems.append(
                    f"{src.where} = {src.value!r} is not a directory on this machine: "
                    "AReaL would download it from the Hugging Face hub and run any code "
                    f"it carries. Point it at a local copy, or set {ALLOW_HUB_ENV}=1 "
                    "to let it be downloaded."
                )
            continue
        code = custom_code(src.value)
        if code and not allow_code:
            problems.append(
                f"{src.where} = {src.value!r} carries custom code ({'; '.join(code)}): "
                "AReaL loads models with trust_remote_code=True, so loading it runs "
                f"that Python. Read the code, then set {ALLOW_CODE_ENV}=1 to run it, "
                "or use a copy of the model without auto_map."
            )
    if problems:
        raise UntrustedModelError(
            "The reproducer will not load these models without your say-so:\n- "
            + "\n- ".join(problems)
        )


def offline_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the Hugging Face hub off, unless the hub opt-in is set: a name
    that reaches the loader by a path this module did not see is not fetched."""
    if env.get(ALLOW_HUB_ENV) == "1":
        return env
    return {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
