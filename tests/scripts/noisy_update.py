# SPDX-License-Identifier: Apache-2.0
"""The demo's example script with a planted nondeterminism, for
``areal-debug selfcheck``'s test: after every optimizer step, noise drawn from the
operating system's entropy (not torch's RNG, which a replay restores) is added to
one weight, so two runs of the same replay part at the weights of their first
update. Run as the script it wraps is (``NOISY_TARGET``, default the shipped
example): ``torchrun noisy_update.py --config ... overrides``."""

import os
import runpy
import sys

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from areal_debug.testing import EXAMPLE_SCRIPT


def _noise(optimizer, args, kwargs) -> None:
    param = optimizer.param_groups[0]["params"][0]
    local = param.to_local() if hasattr(param, "to_local") else param  # FSDP2
    with torch.no_grad():
        local.view(-1)[0] += (1 + int.from_bytes(os.urandom(2), "little")) * 1e-6


if __name__ == "__main__":
    register_optimizer_step_post_hook(_noise)
    target = os.environ.get("NOISY_TARGET", str(EXAMPLE_SCRIPT))
    sys.argv = [target, *sys.argv[1:]]
    runpy.run_path(target, run_name="__main__")
