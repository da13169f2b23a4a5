# SPDX-License-Identifier: Apache-2.0
"""AReaL experiment configs that carry the ``debug:`` section."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from areal.api.cli_args import GRPOConfig, PPOConfig

from areal_debug.config.debug_config import DebugConfig
from areal_debug.config.trials import resolve_debug_config


@dataclass
class DebugSection:
    """Mixin giving any AReaL experiment config class a ``debug:`` section.

    Put it first: ``@dataclass class MyConfig(DebugSection, GRPOConfig): ...``,
    so its ``__post_init__`` runs AReaL's validation, then resolves the section.
    """

    debug: DebugConfig = field(
        default_factory=DebugConfig,
        metadata={"help": "Rollout recording and replay (areal-debug)."},
    )

    def __post_init__(self):
        post_init = getattr(super(), "__post_init__", None)
        if post_init is not None:
            post_init()
        resolve_debug_config(self)


@dataclass
class DebugPPOConfig(DebugSection, PPOConfig):
    """AReaL's ``PPOConfig`` with a ``debug:`` section."""


@dataclass
class DebugGRPOConfig(DebugSection, GRPOConfig):
    """AReaL's ``GRPOConfig`` with a ``debug:`` section."""


def has_debug_section(config_cls) -> bool:
    return any(f.name == "debug" for f in dataclasses.fields(config_cls))


_PARSING_CLASSES: dict[type, type] = {}


def _parsing_class(config_cls: type) -> type:
    """``config_cls`` with a ``debug:`` section added, to parse a config with.

    Made once per class. The loaded config is handed back as ``config_cls``
    itself (see ``_as_user_class``): this class never leaves the process.
    """
    if config_cls not in _PARSING_CLASSES:
        cls = dataclasses.make_dataclass(
            f"{config_cls.__name__}WithDebug", [], bases=(DebugSection, config_cls)
        )
        cls.__module__ = __name__
        _PARSING_CLASSES[config_cls] = cls
    return _PARSING_CLASSES[config_cls]


def _as_user_class(parsed, config_cls: type):
    """The parsed config as an instance of ``config_cls``, carrying ``debug`` as an
    attribute outside its fields: what AReaL serialises, saves or sends to RPC
    workers is then the user's own class, importable wherever the script's is."""
    config = config_cls.__new__(config_cls)
    config.__dict__.update({k: v for k, v in parsed.__dict__.items() if k != "debug"})
    object.__setattr__(config, "debug", parsed.debug)
    return config


def debug_config_of(config) -> DebugConfig:
    """The ``debug:`` section of a loaded config (all defaults when it has none)."""
    return getattr(config, "debug", None) or DebugConfig()
