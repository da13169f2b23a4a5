# SPDX-License-Identifier: Apache-2.0
"""Loading a config: the YAML and overrides composed, ``debug.*`` keys anywhere."""

from __future__ import annotations

import sys

from areal_debug.allocation import plan_allocation
from areal_debug.config.checks import check_debug_keys, unknown_key_hint
from areal_debug.config.debug_config import DebugConfigError
from areal_debug.config.sections import (
    DebugPPOConfig,
    _as_user_class,
    _parsing_class,
    has_debug_section,
)
from areal_debug.logs import get_logger

logger = get_logger("DebugConfig")


def _append_debug_overrides(argv: list[str]) -> list[str]:
    """Turn ``debug.k=v`` into hydra's ``++debug.k=v`` (set the key, present or not)."""
    return ["++" + a if a.startswith("debug.") and "=" in a else a for a in argv]


def compose_with_debug_overrides(compose, argv: list[str], config_cls=None):
    """``(compose(argv), argv)``, retrying ``debug.*`` overrides as hydra's ``++``.

    Hydra composes overrides against the YAML alone, so ``debug.x=...`` fails
    ("not in struct") unless the file declares the key. Retrying the debug
    overrides as add-or-override lets users set any debug key on any existing
    YAML, with or without a (partial) ``debug:`` section. The argv returned is
    the form that composed, so processes started later can be given the same.
    If the retry fails too: a ``DebugConfigError`` naming a key ``config_cls``
    (AReaL's config class, where the caller knows it) does not have, with the
    closest ones; else the original error.
    """
    from hydra.errors import ConfigCompositionException

    try:
        return compose(argv), argv
    except ConfigCompositionException as first:
        failed = first
    appended = _append_debug_overrides(argv)
    if appended != argv:
        try:
            return compose(appended), appended
        except ConfigCompositionException:
            pass
    hint = unknown_key_hint(argv, config_cls) if config_cls else None
    if hint is not None:
        raise DebugConfigError(hint) from None
    raise failed


def agree_argv_with_allocation(argv: list[str]) -> list[str]:
    """``argv`` with the overrides that make the training engines' backends agree
    with allocation_mode (``allocation.plan_allocation``, each change logged);
    AllocationError where they cannot. For load_expr_config: single-controller
    runs, and SPMD runs not started by areal-debug's launchers (which have done
    this already)."""
    from areal.api.cli_args import parse_cli_args

    try:
        cfg, composed = compose_with_debug_overrides(
            lambda args: parse_cli_args(args)[0], argv
        )
    except Exception:  # noqa: BLE001 - AReaL's own load then says what is wrong
        return argv
    allocation = plan_allocation(cfg, composed, "run")
    for note in allocation.notes:
        logger.info(note)
    return allocation.argv(argv)


def load_expr_config(argv: list[str], config_cls=DebugPPOConfig):
    """AReaL's ``load_expr_config`` for any experiment config class, with a ``debug:``
    section and ``debug.*`` overrides whether or not the YAML declares them.

    Returns ``(config, config_file)`` as AReaL's does. ``config`` is an instance
    of ``config_cls`` (``GRPOConfig``, the script's own subclass...) with the
    section at ``config.debug``; a class that declares ``debug`` (the
    ``DebugSection`` mixin, ``DebugPPOConfig``) is loaded as it is. A given
    ``allocation_mode`` sets every training engine's backend
    (``agree_argv_with_allocation``).
    """
    try:
        return _load_expr_config(argv, config_cls)
    except DebugConfigError as e:
        # A mistake in the debug section: the message alone, as the launchers
        # say it (and their exit status), not a traceback through AReaL's loading.
        print(f"areal-debug: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def _load_expr_config(argv: list[str], config_cls):
    from areal.api.cli_args import load_expr_config as areal_load_expr_config

    check_debug_keys(list(argv))
    parse_cls = (
        config_cls if has_debug_section(config_cls) else _parsing_class(config_cls)
    )
    argv = agree_argv_with_allocation(list(argv))
    (parsed, config_file), _ = compose_with_debug_overrides(
        lambda args: areal_load_expr_config(args, parse_cls), argv, config_cls
    )
    if parse_cls is not config_cls:
        parsed = _as_user_class(parsed, config_cls)
    return parsed, config_file
