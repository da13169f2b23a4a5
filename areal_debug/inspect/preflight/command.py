# SPDX-License-Identifier: Apache-2.0
"""The command ``areal-debug doctor`` (and ``selfcheck``) is given: its script,
environment and config overrides, and the config it would run with.

The command line is parsed with AReaL's own config loading (``parse_cli_args``,
``to_structured_cfg``) and areal-debug's ``debug.*`` handling, without the side
effects of ``load_expr_config`` (it writes the config into the run's log
directory and reconfigures name resolution): a pre-flight writes nothing.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex

from areal_debug.inspect.common import (
    InspectError,
    first_line,
)

SHELLS = ("bash", "sh")


def script_command(command: list[str]) -> tuple[list[str], dict[str, str]]:
    """A shell script given as the command (``bash run_replay.sh ARGS``, or
    ``run_replay.sh ARGS``), as the demo writes it: the command of its ``exec``
    line, the script's arguments in place of ``"$@"``, and the variables it sets
    with ``env`` (the demo's YAML reads AREAL_DEBUG_WORKDIR). Any other command
    comes back as it is, with no variables."""
    if command and os.path.basename(command[0]) in SHELLS and len(command) > 1:
        script, args = command[1], command[2:]
    elif command and command[0].endswith(".sh"):
        script, args = command[0], command[1:]
    else:
        return command, {}
    try:
        with open(script, encoding="utf-8", errors="surrogateescape") as f:
            lines = [line.strip() for line in f]
    except OSError as e:
        raise InspectError(f"Cannot read the script {script}: {e.strerror}") from e
    execs = [line for line in lines if line.startswith("exec ")]
    if not execs:
        raise InspectError(
            f"{script} has no exec line, which doctor reads a script's command "
            "from (as in the demo's run_replay.sh); give the command itself after --."
        )
    words = shlex.split(execs[-1])[1:]
    env: dict[str, str] = {}
    if words and words[0] == "env":
        words = words[1:]
        while words and (words[0] == "-u" or re.match(r"[A-Za-z_]\w*=", words[0])):
            if words[0] == "-u":
                words = words[2:]
                continue
            name, _, value = words.pop(0).partition("=")
            env[name] = value
    out: list[str] = []
    for word in words:
        out.extend(args if word == "$@" else [word])
    return out, env


@contextlib.contextmanager
def environment(env: dict[str, str]):
    """``os.environ`` with ``env`` set while the command's config is composed."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def config_argv(command: list[str]) -> list[str]:
    """The ``--config X k=v ...`` part of a launcher / torchrun / python command line."""
    if not command:
        raise InspectError(
            "Give the command after '--', e.g. areal-debug doctor REC -- python -m "
            "areal_debug.launcher.local train.py --config my.yaml "
            "debug.replay_rollout_data=true"
        )
    if len(command) == 1 and command[0].endswith((".yaml", ".yml")):
        return ["--config", command[0]]
    for i, arg in enumerate(command):
        if arg == "--config" or arg.startswith("--config="):
            return command[i:]
    raise InspectError(
        f"No --config in the command {' '.join(command)!r}: doctor reads the config "
        "the run would load. Give the full command line, or just the YAML file."
    )


def load_command_config(command: list[str]):
    """The config the command would run with (AReaL's GRPOConfig + debug section)."""
    from areal.api.cli_args import GRPOConfig

    from areal_debug.allocation import AllocationError
    from areal_debug.areal_compat import compose_config
    from areal_debug.config import (
        DebugConfigError,
        _parsing_class,
        agree_argv_with_allocation,
        check_debug_keys,
        compose_with_debug_overrides,
    )

    try:
        # As the launcher does: a mistyped debug key named, with the closest ones.
        check_debug_keys(config_argv(command))
        # As the run will: every training engine's backend follows allocation_mode.
        argv = agree_argv_with_allocation(config_argv(command))
    except (AllocationError, DebugConfigError) as e:
        raise InspectError(str(e)) from e
    cls = _parsing_class(GRPOConfig)

    def compose(args):
        return compose_config(args, cls)

    try:
        config, _ = compose_with_debug_overrides(compose, argv, cls)
    except (AssertionError, ValueError, TypeError, KeyError) as e:
        raise InspectError(f"Cannot load the command's config: {e}") from e
    except Exception as e:  # noqa: BLE001 - hydra/omegaconf errors have many types
        first = first_line(e)
        raise InspectError(
            f"Cannot load the command's config ({type(e).__name__}): {first}. A config "
            "class of your own with extra keys cannot be loaded here; check the "
            "other findings by hand."
        ) from e
    return config
