# SPDX-License-Identifier: Apache-2.0
"""``areal-debug diff REC_A REC_B``: two recordings' batches by what each sample
holds (prompts in order, completions, rewards, versions) and the weights each
step started from, read from the steps' metadata.

Small recordings go through the real writer (so the metadata is what a dump run
writes); the weights are compared on the session's real ``spmd_d1`` recording.
"""

from __future__ import annotations

import glob
import json
import os
import shutil

import torch
from test_cli_inspect import run_json
from test_store import record

from areal_debug.cli import main
from areal_debug.compare.batches import compare_step
from areal_debug.recording.atomic import atomic_write_json
from areal_debug.recording.contents import BatchContents
from areal_debug.recording.reader import RecordingReader


def sample(prompt: int, completion: int, reward: float, version: int = 0) -> dict:
    """One sample (AReaL's one-row trajectory dict): prompt ``prompt``'s four
    tokens, then completion ``completion``'s three."""
    ids = [prompt] * 4 + [completion, completion + 1, completion + 2]
    loss = [0] * 4 + [1] * 3
    return {
        "input_ids": torch.tensor([ids], dtype=torch.int32),
        "loss_mask": torch.tensor([loss], dtype=torch.int32),
        "logprobs": -torch.ones(1, 7),
        "versions": torch.tensor([[-1] * 4 + [version] * 3], dtype=torch.int32),
        "attention_mask": torch.ones(1, 7, dtype=torch.bool),
        "rewards": torch.tensor([reward]),
    }


def run(prompts_by_step: dict[int, list[int]]) -> dict[int, list[list[dict]]]:
    """Steps of one shard: two samples per prompt, completions and rewards a
    function of the prompt (the same prompt gives the same samples)."""
    return {
        step: [[sample(p, 100 + 10 * p + k, float(k)) for p in prompts for k in (0, 1)]]
        for step, prompts in prompts_by_step.items()
    }


# A's epoch: prompts 1..8, two a step. B lost prompt 6 at step 2 (consumed 1
# again in its place, as a resume that re-read the epoch's start would).
A = {0: [1, 2], 1: [3, 4], 2: [5, 6], 3: [7, 8]}
B = {0: [1, 2], 1: [3, 4], 2: [5, 1], 3: [7, 8]}


def test_a_skipped_and_a_repeated_prompt_are_named_with_their_steps(tmp_path, capsys):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    record(a, run(A))
    record(b, run(B))
    rc, d = run_json(capsys, "diff", a, b)
    assert rc == 3
    batches = d["batches"]
    assert (batches["first_step"], batches["first_parts"]) == (2, ["prompts"])
    step2 = batches["steps"][2]
    assert step2["prompts_only_in_a"] == step2["prompts_only_in_b"] == 2
    # The first sample that differs: a's prompt 6 (group 2, sample 0 of a's
    # batch of one-sample dicts), which b lacks.
    assert (step2["first_in_a"], step2["first_in_b"]) == ([2, 0], None)
    assert [not s["differ"] for s in batches["steps"]] == [True, True, False, True]
    prompt6 = RecordingReader(a).step_contents(2).prompt[2]
    prompt1 = RecordingReader(a).step_contents(0).prompt[0]
    (only_a,) = batches["only_in_a"]
    assert only_a == {
        "prompt": prompt6,
        "a": 2,
        "b": 0,
        "steps_a": [2],
        "steps_b": [],
    }
    assert batches["only_in_b"] == []
    (more_b,) = batches["more_in_b"]
    assert (more_b["prompt"], more_b["a"], more_b["b"]) == (prompt1, 2, 4)
    assert more_b["steps_b"] == [0, 2]
    # The payloads first differ at the same step; the table says it in words.
    assert d["first"]["step"] == 2
    assert main(["diff", a, b]) == 3
    out = capsys.readouterr().out
    assert "the runs part at step 2: prompts, first at a group 2 sample 0" in out
    assert (
        f"only in a: prompt {prompt6}: 2 sample(s) in a (steps 2), 0 sample(s) in b\n"
        in out
    )
    assert f"more often in b: prompt {prompt1}: 2 sample(s) in a (steps 0)" in out


def test_the_same_prompts_in_another_order_pair_by_prompt(tmp_path, capsys):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    record(a, run({0: [1, 2, 3]}))
    swapped = run({0: [3, 1, 2]})
    # And one completion of prompt 2 is another: found in its pair, not at its
    # place in the batch.
    swapped[0][0][5]["input_ids"][0, 5] = 7
    record(b, swapped)
    rc, d = run_json(capsys, "diff", a, b)
    (step,) = d["batches"]["steps"]
    assert rc == 3
    assert step["differ"] == ["prompt order", "completions"]
    assert step["completions_differ"] == 1 and step["rewards_differ"] == 0
    assert (step["first_in_a"], step["first_in_b"]) == ([3, 0], [5, 0])


def test_rewards_and_versions_are_compared_per_sample():
    a = BatchContents.of_batch([sample(1, 10, 0.5, version=3), sample(2, 20, 1.0)])
    b = BatchContents.of_batch([sample(1, 10, 0.25, version=4), sample(2, 20, 1.0)])
    result = compare_step(0, a, b)
    assert result.differ == ["rewards", "versions"]
    assert (result.rewards_differ, result.versions_differ) == (1, 1)
    assert (a.first_version, a.last_version) == ((3, 0), (3, 0))
    # A NaN reward equals a NaN reward (kept by name: JSON has no NaN).
    nan = BatchContents.of_batch([sample(1, 10, float("nan"))])
    assert nan.reward == ("nan",) and compare_step(0, nan, nan).same


def test_a_recording_without_digests_in_its_metadata_compares_the_same(
    tmp_path, capsys
):
    """Recordings made before the metadata held ``contents``: computed from
    their payloads, to the same digests."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    record(a, run(A))
    record(b, run(B))
    old = str(tmp_path / "old")
    shutil.copytree(b, old)
    for path in glob.glob(os.path.join(old, "*", "*.json")):
        with open(path) as f:
            meta = json.load(f)
        for shard in meta.get("shards", [meta]):
            if isinstance(shard, dict):
                shard.pop("contents", None)
        atomic_write_json(path, meta)
    reader = RecordingReader(old)
    assert reader.step_meta(2).shards[0].contents is None
    assert reader.step_contents(2) == RecordingReader(b).step_contents(2)
    _, new = run_json(capsys, "diff", a, b)
    _, from_payloads = run_json(capsys, "diff", a, old)
    assert from_payloads["batches"] == new["batches"]


def test_two_copies_of_a_real_recording_compare_equal_weights_and_all(
    spmd_d1, tmp_path, capsys
):
    copy = str(tmp_path / "copy")
    shutil.copytree(spmd_d1.path, copy)
    rc, d = run_json(capsys, "diff", spmd_d1.path, copy)
    assert rc == 0 and d["batches"]["first_step"] is None
    steps = d["batches"]["steps"]
    # Every step after the first starts from the weights after the step
    # before (the dump run's digests); step 0 from the run's own.
    assert [s["weights"] for s in steps] == ["identical"] * len(steps)
    # The copy's weights after step 1 changed: step 2 starts from others.
    stages = os.path.join(copy, "step-000001", "stages.json")
    with open(stages) as f:
        log = json.load(f)
    weights = log["global"]["weights"]
    name = sorted(weights)[-1]
    weights[name][0] = "0" * len(weights[name][0])
    atomic_write_json(stages, log)
    rc, d = run_json(capsys, "diff", spmd_d1.path, copy)
    assert rc == 3
    assert (d["batches"]["first_step"], d["batches"]["first_parts"]) == (2, ["weights"])
    assert "differ, first" in d["batches"]["steps"][2]["weights_detail"]


def test_a_long_list_of_prompts_says_how_many_more_it_leaves_out(tmp_path, capsys):
    """Issue 69, point 6: the counts line names every prompt; the list under it
    shows five of each kind and says how many more there are."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    record(a, run({0: [1, 2, 3, 4, 5, 6, 7]}))
    record(b, run({0: [11, 12, 13, 14, 15, 16, 17]}))
    assert main(["diff", a, b]) == 3
    out = capsys.readouterr().out
    assert "7 only in a, 7 only in b" in out
    assert out.count("  only in a: prompt ") == 5
    assert "  ... and 2 more only in a (--json)" in out
    assert "  ... and 2 more only in b (--json)" in out


def test_resume_of_a_recording_without_one_says_there_is_none(tmp_path, capsys):
    rec = str(tmp_path / "a")
    record(rec, run(A))
    assert main(["resume", rec]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "No resume in this recording: nothing to check" in out
    assert "every resume" not in out
