# SPDX-License-Identifier: Apache-2.0
"""A reproducer written by ``areal-debug extract``: one recorded step, replayed on CPU.

This file is the same for every extract (areal-debug's package data): it holds no
recorded text. Everything recorded (names, paths, the step, what to expect) is read
from ``reproducer.json`` beside it, as data; README.md beside it says in words what
is asserted and why. Run it from anywhere:

    python -m pytest -q DIRECTORY_OF_THIS_FILE

It replays ./recording with ./replay.py (AReaL's PPO trainer, no inference engine)
under torchrun, in a temporary directory, and checks the replay's report. Set
AREAL_DEBUG_REPRO_MODEL=/path/to/the/same/model to use another copy of the model.

It loads, unasked, only models that are local directories without custom code:
AReaL loads models with trust_remote_code=True, so a hub name (downloaded) or a
config's auto_map (imported) would run code the recording chose. Each needs an
opt-in (AREAL_DEBUG_REPRO_ALLOW_HUB=1, AREAL_DEBUG_REPRO_ALLOW_CUSTOM_CODE=1);
the refusal names the model and the key.
"""

import glob
import json
import math
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from areal_debug.inspect.reproducer import model_source
from areal_debug.testing import config_literal, end_process, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDING = os.path.join(HERE, "recording")
CONFIG = os.path.join(HERE, "config.yaml")
SCRIPT = os.path.join(HERE, "replay.py")
TIMEOUT = 1200

with open(os.path.join(HERE, "reproducer.json"), encoding="utf-8") as _f:
    SPEC = json.load(_f)

MODEL = os.environ.get(SPEC["model_env"], SPEC["model"])
STEP = SPEC["step"]  # as numbered in ./recording


def _check_payloads():
    """Checksums, safe loading, and the payloads being the extracted ones: the
    recorded statistics checked below belong to exactly these batches, so a
    changed payload (even with fixed checksums) fails."""
    from areal_debug.recording.reader import RecordingReader

    expected = SPEC["payloads"]
    reader = RecordingReader(RECORDING)
    assert STEP in reader.available_steps(), reader.available_steps()
    found = {}
    for step in reader.available_steps():
        meta = reader.step_meta(step)
        for shard in range(meta.num_shards):
            reader.load_shard(step, shard)  # raises on a checksum mismatch
        if meta.teacher_logp is not None:
            reader.recorded_teacher_logp(step)
        for entry in meta.payloads:
            found[f"step-{step:06d}/{entry.file}"] = entry.sha256
    changed = {k: v for k, v in found.items() if expected.get(k) != v}
    assert not changed and set(found) == set(expected), (
        f"the payloads are not the ones extracted (changed: {sorted(changed)}); "
        "the recorded statistics this test checks belong to the extracted batches"
    )


def test_extracted_payloads_are_intact():
    _check_payloads()


def _run_config(tmp_path, root) -> str:
    """config.yaml with this machine's paths, as a file of its own: the paths go
    through YAML, never through a command line's override syntax. The model and
    the recording are reached through links of plain names: a path that is not
    valid UTF-8 has no form in YAML that AReaL's config loading reads."""
    model, recording = MODEL, tmp_path / "recording"
    os.symlink(RECORDING, recording)
    if os.path.exists(MODEL):  # else a name for the hub, left as it is
        model = tmp_path / "model"
        os.symlink(os.path.abspath(MODEL), model)
    with open(CONFIG, encoding="utf-8") as f:
        config = yaml.safe_load(f)
    config.setdefault("cluster", {})["fileroot"] = config_literal(str(root))
    config.setdefault("actor", {})["path"] = config_literal(str(model))
    config.setdefault("debug", {})["path"] = config_literal(str(recording))
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=True), encoding="utf-8")
    return str(path)


def _check_models() -> None:
    """Refuse, before any process starts, a model that is a hub name or carries
    custom code (model_source.check), unless the person running this opted in.
    Read from config.yaml with the model this test uses, so the refusal names
    the model as the recording (or AREAL_DEBUG_REPRO_MODEL) gave it."""
    from omegaconf import OmegaConf

    with open(CONFIG, encoding="utf-8") as f:
        config = yaml.safe_load(f)
    config.setdefault("actor", {})["path"] = config_literal(MODEL)
    config = OmegaConf.to_container(OmegaConf.create(config), resolve=True)
    try:
        model_source.check(model_source.model_sources(config))
    except model_source.UntrustedModelError as e:
        pytest.fail(str(e), pytrace=False)


def _replay(tmp_path):
    root = tmp_path / "root"
    os.makedirs(root / "name_resolve", exist_ok=True)
    _check_models()
    config = _run_config(tmp_path, root)
    # The hub off unless opted into: no name reaches a download by another path.
    env = model_source.offline_env({**os.environ, "OMP_NUM_THREADS": "1"})
    env.pop("AREAL_LLM_SERVER_ADDRS", None)
    if SPEC["mode"] == "spmd":
        env["AREAL_SPMD_MODE"] = "1"
        launch = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={SPEC['nproc']}",
            f"--master-port={free_port()}",
        ]
    else:
        env.pop("AREAL_SPMD_MODE", None)
        launch = [sys.executable]
    # A copy under a plain name: torch.compile cannot format a traceback through
    # a file whose path is not valid UTF-8.
    script = tmp_path / "replay.py"
    shutil.copyfile(SCRIPT, script)
    cmd = [*launch, str(script), "--config", config]
    log = tmp_path / "replay.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(
            cmd,
            cwd=tmp_path,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        rc = proc.wait(timeout=TIMEOUT)
    finally:
        end_process(proc)  # the replay and all it started
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
    assert rc == 0, f"the replay failed (exit {rc}); {log} ends with:\n{tail}"
    reports = glob.glob(str(root / "logs" / "*" / "*" / "*" / "replay_report.json"))
    assert len(reports) == 1, f"expected one replay report, found {reports}\n{tail}"
    with open(reports[0]) as f:
        return json.load(f)


def test_replay_of_the_extracted_step(tmp_path):
    _check_payloads()  # before starting any process
    if os.path.isabs(MODEL) and not os.path.isdir(MODEL):
        pytest.fail(
            f"The model {MODEL!r} is not on this machine. Set {SPEC['model_env']} "
            "to a copy of the dump run's model (same architecture and tokenizer)."
        )
    report = _replay(tmp_path)
    steps = {e["global_step"]: e for e in report["steps"]}
    assert STEP in steps, f"step {STEP} was not replayed: {sorted(steps)}"
    entry = steps[STEP]
    metrics = entry["metrics"]
    if SPEC["faithful"]:
        first = report["summary"]["first_divergence"]
        assert entry["status"] == "identical", (
            f"step {STEP} diverged from the recording: {first}"
        )
    for name, value in SPEC["exact"].items():
        assert metrics[name]["replayed"] == value, (name, metrics[name], value)
    for name, value in SPEC["close"].items():
        got = metrics[name]["replayed"]
        assert math.isclose(got, value, rel_tol=1e-6, abs_tol=1e-9), (name, got, value)
    for name in SPEC["finite"]:
        if name in metrics and "replayed" in metrics[name]:
            assert math.isfinite(metrics[name]["replayed"]), (name, metrics[name])
