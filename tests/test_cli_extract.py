# SPDX-License-Identifier: Apache-2.0
"""areal-debug extract: a step of the session's ``spmd_d1`` recording as a
self-contained reproducer whose generated test replays it through AReaL's real
actor (the one replay this module starts) and fails on an altered payload."""

import json
import os
import shutil

import pytest
from support.harness import run_logged
from test_cli_inspect import flip_reward, rewrite_payload, run_json

from areal_debug.cli import main
from areal_debug.inspect.reproducer import extract
from areal_debug.recording.format import MANIFEST, step_dirname
from areal_debug.recording.reader import RecordingReader
from reliability.hostile_names import PYTEST, HostileCase

pytestmark = pytest.mark.areal

STEP = 2


def run_generated_tests(directory, cwd, name: str) -> tuple[int, str]:
    """``python -m pytest DIR`` from a fresh directory; every process it starts
    is ended (its own session), also on failure or timeout."""
    os.makedirs(cwd, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # What a person running the reproducer has: no test-suite paths.
    env.pop("PYTHONPATH", None)
    # Its own --basetemp: a numbered one would make pytest prune older numbered
    # directories, this session's (and its recordings) among them.
    cmd = [*PYTEST, f"--basetemp={cwd}/basetemp", str(directory)]
    return run_logged(cmd, str(cwd), name, env, timeout=600)


# The suite's recording under hostile names (reliability/hostile_names.py): its
# directory, the run's names and its model path hold shell, Python, HTML and
# template text with probes that would leave a file in MARKERS if they ran, and
# bytes that are not UTF-8; the one replay below runs through all of them.
HOSTILE = HostileCase.everything()


def rename(obj, key: str, old: str, new: str) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key and v == old:
                obj[k] = new
            else:
                rename(v, key, old, new)


@pytest.fixture(scope="module")
def hostile_source(spmd_d1, tmp_path_factory):
    """A copy of ``spmd_d1`` named and configured with HOSTILE's text; its model
    path a link to the tiny model under a hostile name."""
    root = tmp_path_factory.mktemp("hostile")
    rec = root / ("rec-" + HOSTILE.dirname)
    shutil.copytree(spmd_d1.path, rec)
    model = root / ("model-" + HOSTILE.dirname)
    os.symlink(spmd_d1.workdir / "model", model)
    with open(rec / MANIFEST) as f:
        manifest = json.load(f)
    # As a run so named records them: every section's copy of the names too.
    rename(manifest, "experiment_name", manifest["experiment_name"], HOSTILE.experiment)
    rename(manifest, "trial_name", manifest["trial_name"], HOSTILE.trial)
    manifest["config"]["actor"]["path"] = str(model)
    with open(rec / MANIFEST, "w") as f:
        json.dump(manifest, f)
    return rec, str(model)


@pytest.fixture(scope="module")
def extracted(hostile_source, tmp_path_factory):
    rec, _ = hostile_source
    out = tmp_path_factory.mktemp("extract") / ("repro-" + HOSTILE.dirname)
    # Without the kept checkpoint: every step from 0, trained from the initial
    # model (the checkpoint's form is checked below, without a replay).
    argv = ["extract", str(rec), "--step", str(STEP), "--no-checkpoint", "-o", str(out)]
    assert main(argv) == 0
    return out


def test_extract_writes_a_faithful_valid_recording(
    extracted, hostile_source, spmd_d1, capsys
):
    rec = extracted / "recording"
    reader = RecordingReader(str(rec))
    # No checkpoint: the steps before it, trained from the initial model.
    assert reader.available_steps() == list(range(STEP + 1))
    assert not os.path.exists(rec / "recover")
    assert main(["verify", str(rec)]) == 0
    assert "0 problem(s)" in capsys.readouterr().out
    # Byte for byte the recorded step: same payload checksum as the source.
    source = RecordingReader(spmd_d1.path).step_meta(STEP).shards[0].entry.sha256
    assert reader.step_meta(STEP).shards[0].entry.sha256 == source
    with open(rec / MANIFEST) as f:
        origin = json.load(f)["extracted_from"]
    assert origin["faithful"] is True and origin["checkpoint"] is None
    # The test is the package's fixed file; what was recorded is data beside it.
    test_file = (extracted / f"test_replay_step_{STEP}.py").read_bytes()
    assert test_file == (extract.REPRODUCER_FILES / extract.TEST).read_bytes()
    spec = json.loads((extracted / extract.SPEC).read_text())
    assert spec["faithful"] is True and spec["step"] == STEP
    assert spec["model"] == hostile_source[1]  # the recorded actor.path
    assert spec["source"]["experiment"] == HOSTILE.experiment
    assert spec["model_env"] == "AREAL_DEBUG_REPRO_MODEL"
    assert "Faithful" in (extracted / extract.README).read_text(errors="replace")


def test_generated_test_replays_the_step_and_fails_on_altered_payloads(
    extracted, tmp_path
):
    # Collected and run from a directory of its own: a probe of the hostile names
    # that ran would leave a file there.
    rc, log = run_generated_tests(extracted, tmp_path / "fresh", "repro")
    assert rc == 0 and "2 passed" in log, log[-4000:]
    assert sorted(os.listdir(tmp_path / "fresh")) == ["basetemp", "repro.log"]

    # A flipped byte: the checksum check fails, before any replay starts.
    flipped = tmp_path / "flipped"
    shutil.copytree(extracted, flipped)
    payload = next((flipped / "recording" / step_dirname(STEP)).glob("shard-00000.pt*"))
    data = bytearray(payload.read_bytes())
    data[len(data) // 2] ^= 0xFF
    payload.write_bytes(bytes(data))
    rc, log = run_generated_tests(flipped, tmp_path / "fresh-flipped", "flipped")
    assert rc != 0 and "Checksum mismatch" in log, log[-4000:]

    # A changed reward with every checksum fixed: still not the extracted batch.
    edited = tmp_path / "edited"
    shutil.copytree(extracted, edited)
    rewrite_payload(str(edited / "recording"), STEP, 0, flip_reward)
    assert main(["verify", str(edited / "recording")]) == 0
    rc, log = run_generated_tests(edited, tmp_path / "fresh-edited", "edited")
    assert rc != 0 and "not the ones extracted" in log, log[-4000:]
    assert "2 failed" in log


def test_subset_and_checkpointless_extracts_say_what_they_can_assert(
    spmd_d1, tmp_path, capsys
):
    out = tmp_path / "subset"
    argv = ["extract", spmd_d1.path, "--step", "3", "--traj", "0,5", "-o", str(out)]
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["faithful"] is False and result["trajectories"] == [0, 5]
    reader = RecordingReader(str(out / "recording"))
    assert reader.step_meta(3).num_trajectories == 2
    whole = RecordingReader(spmd_d1.path).load_shard(3, 0)
    subset = reader.load_shard(3, 0)
    assert subset[1]["input_ids"].equal(whole[5]["input_ids"])
    assert reader.recorded_stats(3) == {}  # none of the recorded ones applies
    spec = json.loads((out / extract.SPEC).read_text())
    assert "none of them applies" in spec["asserts"] and spec["faithful"] is False

    # With a kept checkpoint before it: that one and the steps after it.
    out = tmp_path / "ckpt"
    assert main(["extract", spmd_d1.path, "--step", "3", "-o", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["faithful"] is True and result["checkpoint"] == 2
    assert RecordingReader(str(out / "recording")).available_steps() == [3]
    assert os.path.isdir(out / "recording" / "recover" / step_dirname(2))

    # Without the checkpoint: from step 0, and what that costs, said.
    out = tmp_path / "fromstart"
    argv = ["extract", spmd_d1.path, "--step", "3", "--no-checkpoint", "-o", str(out)]
    assert main(argv) == 0
    shown = capsys.readouterr().out
    assert "steps 0-2 are extracted too (" in shown and "MiB more)" in shown
    assert "trains all 4 steps from the initial model" in shown
    assert RecordingReader(str(out / "recording")).available_steps() == [0, 1, 2, 3]

    # Steps before it gone (a flight recorder's ring buffer): not faithful, why.
    gone = tmp_path / "ring"
    shutil.copytree(spmd_d1.path, gone, ignore=shutil.ignore_patterns("recover"))
    shutil.rmtree(gone / step_dirname(0))
    out = tmp_path / "ringout"
    rc, result = run_json(capsys, "extract", str(gone), "--step", "3", "-o", str(out))
    assert rc == 0 and result["faithful"] is False
    (note,) = [n for n in result["notes"] if "NOT A FAITHFUL REPLAY" in n]
    assert "steps 0 before it are not in the recording" in note

    out = tmp_path / "alone"
    assert (
        main(["extract", spmd_d1.path, "--step", "3", "--alone", "-o", str(out)]) == 0
    )
    shown = capsys.readouterr().out
    assert "NOT A FAITHFUL REPLAY of step 3: --alone was given" in shown
    reader = RecordingReader(str(out / "recording"))
    # Renumbered: without a checkpoint a replay can only start at step 0.
    assert reader.available_steps() == [0]
    kept = reader.recorded_stats(0)
    assert kept["ppo_actor/n_seqs"] == 32 and "ppo_actor/update/grad_norm" not in kept
    assert main(["verify", str(out / "recording")]) == 0
    capsys.readouterr()
    compile((out / "test_replay_step_3.py").read_text(), "generated", "exec")
    # An existing, non-empty directory is refused.
    assert main([*argv]) == 1
    assert "is not empty" in capsys.readouterr().err


def test_generated_test_runs_no_model_code_and_fetches_no_hub_name(
    spmd_d1, tmp_path, capsys
):
    """A recording naming a model whose config maps an Auto class to Python (AReaL
    loads with trust_remote_code=True), or a hub repository: extract says so, and
    the generated test refuses before starting any process; the code never runs."""
    marker = tmp_path / "PWNED-model-code"
    coded = tmp_path / "coded-model"
    shutil.copytree(spmd_d1.workdir / "model", coded)
    config = json.loads((coded / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "probe.Model"}
    (coded / "config.json").write_text(json.dumps(config))
    (coded / "probe.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    for name, model, opt_in in (
        ("coded", str(coded), "AREAL_DEBUG_REPRO_ALLOW_CUSTOM_CODE"),
        ("hub", "someorg/some-model", "AREAL_DEBUG_REPRO_ALLOW_HUB"),
    ):
        rec = tmp_path / f"rec-{name}"
        shutil.copytree(spmd_d1.path, rec)
        manifest = json.loads((rec / MANIFEST).read_text())
        manifest["config"]["actor"]["path"] = model
        (rec / MANIFEST).write_text(json.dumps(manifest))
        out = tmp_path / f"repro-{name}"
        argv = ["extract", str(rec), "--step", "0", "--no-checkpoint", "-o", str(out)]
        assert main(argv) == 0
        assert opt_in in capsys.readouterr().out
        spec = json.loads((out / extract.SPEC).read_text())
        assert any(opt_in in note for note in spec["notes"]), spec["notes"]
        rc, log = run_generated_tests(out, tmp_path / f"fresh-{name}", name)
        assert rc != 0 and "1 failed, 1 passed" in log, log[-4000:]
        assert opt_in in log and "will not load these models" in log, log[-4000:]
        # Refused before any process: no replay log, and the code never ran.
        assert not list((tmp_path / f"fresh-{name}").rglob("replay.log"))
        assert not marker.exists()
