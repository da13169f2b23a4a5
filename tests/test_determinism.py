# SPDX-License-Identifier: Apache-2.0
"""The settings a bitwise replay needs (areal_debug/determinism.py): applied in
the process that trains, held strict after an engine asks for warn_only, and
recorded with the versions and the accelerator that choose the kernels."""

import json
import subprocess
import sys

from areal_debug import determinism

# What AReaL's Megatron and Archon engines do at initialisation
# (areal/engine/megatron_utils/deterministic.py, archon_utils.py).
ENGINE_INIT = "torch.use_deterministic_algorithms(True, warn_only=True)"


def settings_after(code: str, env: dict | None = None) -> dict:
    """current_settings() in a fresh process after ``code`` (torch's switches
    are process-wide: the test process keeps its own)."""
    script = (
        "import json, os, warnings, torch\n"
        "warnings.simplefilter('ignore')\n"
        "from areal_debug import determinism as d\n"
        f"{code}\n"
        "print(json.dumps(d.current_settings()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )
    return json.loads(out.stdout.splitlines()[-1])


def test_an_engine_asking_for_warn_only_gets_strict_and_is_recorded():
    s = settings_after(f"d.enable_determinism()\n{ENGINE_INIT}")
    assert s["torch_deterministic_algorithms"] is True
    assert s["torch_deterministic_warn_only"] is False
    assert s["warn_only_upgraded_at"] == ["<string>:5"]
    # Without areal-debug's settings, the engine's call stands: what is recorded.
    plain = settings_after(ENGINE_INIT)
    assert plain["torch_deterministic_warn_only"] is True
    assert plain["warn_only_upgraded_at"] == []


def test_the_environment_is_set_in_process_without_overriding_the_users():
    s = settings_after("d.enable_determinism()", {"NCCL_ALGO": "Tree"})
    assert s["FLASH_ATTENTION_DETERMINISTIC"] == "1"
    assert s["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert s["NCCL_ALGO"] == "Tree"  # the user's own choice stays, and is recorded
    assert s["fill_uninitialized_memory"] is True
    assert (
        s["versions.torch"].split("+")[0]
        == __import__("torch").__version__.split("+")[0]
    )
    assert "versions.transformers" in s and "versions.flash-attn" in s


def test_kernel_versions_and_the_gpu_count_only_where_a_gpu_replays():
    recorded = {
        "versions.torch": "2.11.0",
        "versions.cudnn": "91000",
        "gpu.name": "NVIDIA H100 80GB HBM3",
        "env.NCCL_PROTO": "Simple",
    }
    replay = {
        "versions.torch": "2.13.0",
        "versions.cudnn": "92000",
        "gpu.name": "NVIDIA H200",
        # Settings the recording does not hold (an earlier areal-debug) are not
        # compared, except the environment, which every recording held.
        "versions.transformers": "5.3.0",
        "FLASH_ATTENTION_DETERMINISTIC": "1",
    }
    assert determinism.differences(recorded, replay, on_gpu=False) == [
        "versions.torch: recorded '2.11.0', replay '2.13.0'"
    ]
    assert determinism.differences(recorded, replay, on_gpu=True) == [
        "FLASH_ATTENTION_DETERMINISTIC: recorded None, replay '1'",
        "env.NCCL_PROTO: recorded 'Simple', replay None",
        "gpu.name: recorded 'NVIDIA H100 80GB HBM3', replay 'NVIDIA H200'",
        "versions.cudnn: recorded '91000', replay '92000'",
        "versions.torch: recorded '2.11.0', replay '2.13.0'",
    ]


def test_the_version_of_a_checkout_that_was_never_installed(monkeypatch):
    """Run from a source checkout on PYTHONPATH (no distribution metadata, as on
    the GPU machine), a dump names the checkout's version: the metadata lookup
    alone had ended the first GPU dump run writing its manifest."""
    from importlib.metadata import PackageNotFoundError

    from areal_debug import version

    def not_installed(name):
        raise PackageNotFoundError(name)

    monkeypatch.setattr(version, "version", not_installed)
    assert version.areal_debug_version() == f"{version.source_version()}+source"
    assert version.source_version() == "0.1.0"
