# SPDX-License-Identifier: Apache-2.0
"""An AReaL that renamed one of PPOTrainer's private hooks, its version unchanged:
the method moves to the new name and ``train`` calls it there, so an override of
the old name is dead code (what areal-debug must notice at start).

The test scripts apply it where ``AREAL_DEBUG_TEST_RENAME_HOOK=old:new`` is set."""

from __future__ import annotations

import inspect
import os
import textwrap

RENAME_ENV = "AREAL_DEBUG_TEST_RENAME_HOOK"


def rename_trainer_hook(old: str, new: str) -> None:
    from areal.trainer import rl_trainer

    cls = rl_trainer.PPOTrainer
    setattr(cls, new, cls.__dict__[old])
    delattr(cls, old)
    train = cls.__dict__["train"]
    source = textwrap.dedent(inspect.getsource(train))
    assert f"self.{old}(" in source, f"PPOTrainer.train never calls {old}"
    namespace: dict = {}
    code = compile(
        source.replace(f"self.{old}(", f"self.{new}("),
        inspect.getsourcefile(train),
        "exec",
    )
    exec(code, vars(rl_trainer), namespace)
    cls.train = namespace["train"]


def apply_from_env() -> None:
    spec = os.environ.get(RENAME_ENV)
    if spec:
        old, _, new = spec.partition(":")
        rename_trainer_hook(old, new)
