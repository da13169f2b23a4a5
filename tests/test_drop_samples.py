# SPDX-License-Identifier: Apache-2.0
"""debug.drop_samples: the replay's batches less the samples asked for, in the
recording's numbering, on the real reader and a recording its writer made (the
replay of a step without a NaN reward's group is tests/test_blame.py's)."""

from __future__ import annotations

import pytest
import torch

from areal_debug.config.debug_config import DebugConfig, DebugConfigError, parse_drops
from areal_debug.modes.replay_loader import ReplayDataLoader
from areal_debug.recording.reader import RecordingReader
from areal_debug.replay_plan import check_drops
from reliability import recording


@pytest.fixture
def reader(tmp_path) -> RecordingReader:
    # Two heads, each step two groups of two samples: groups 0-1 on head 0, 2-3
    # on head 1.
    path = str(tmp_path / "rec")
    recording.write(path)
    return RecordingReader(path)


def _rows(batch: list) -> list[torch.Tensor]:
    return [row for traj in batch for row in traj["input_ids"]]


def _served(reader, drops, rank: int, size: int) -> list:
    loader = ReplayDataLoader(reader, rank, size, drops)
    try:
        return next(iter(loader))
    finally:
        loader.close()


def test_a_dropped_group_and_sample_leave_each_heads_batch(reader):
    drops = parse_drops("0:1/*,0:2/0")
    recorded = reader.load_batch(0)
    # The recorded heads: head 0 loses group 1, head 1 keeps group 2's sample 1.
    head0 = _served(reader, drops, 0, 2)
    head1 = _served(reader, drops, 1, 2)
    assert len(head0) == 1 and torch.equal(
        head0[0]["input_ids"], recorded[0]["input_ids"]
    )
    assert [t["input_ids"].shape[0] for t in head1] == [1, 2]
    assert torch.equal(head1[0]["input_ids"][0], recorded[2]["input_ids"][1])
    assert torch.equal(head1[0]["rewards"], recorded[2]["rewards"][1:])
    assert torch.equal(head1[0]["logprobs"], recorded[2]["logprobs"][1:])
    # One head: the step less the same samples, in the recorded order.
    alone = _served(reader, drops, 0, 1)
    expected = [recorded[0]["input_ids"][0], recorded[0]["input_ids"][1]]
    expected += [recorded[2]["input_ids"][1], *recorded[3]["input_ids"]]
    assert all(torch.equal(a, b) for a, b in zip(_rows(alone), expected, strict=True))
    # A step without drops is the recorded shard itself.
    loader = ReplayDataLoader(reader, 0, 2, drops)
    try:
        batches = iter(loader)
        next(batches)
        step1 = next(batches)
    finally:
        loader.close()
    assert all(
        torch.equal(a, b)
        for a, b in zip(_rows(step1), _rows(reader.load_shard(1, 0)), strict=True)
    )


def test_drops_the_recording_cannot_replay_are_each_named(reader):
    drops = parse_drops("5:0/0,0:9/*,0:0/3,1:2/1")
    problems = check_drops(reader, drops, group_normalised=True)
    assert problems == [
        "step 0 group 0 has samples 0-1, not 3",
        "step 0 has groups 0-3, not group 9",
        "step 1 group 2: AReaL normalises rewards in groups of 2 here "
        "(actor.reward_norm at group level), so a sample cannot leave its group "
        "alone; drop the whole group (1:2/*)",
        "step 5 is not in the recording",
    ]
    # Without group normalisation a sample may leave its group.
    assert check_drops(reader, parse_drops("1:2/1,0:1/*"), group_normalised=False) == []


def test_drop_samples_is_a_replays_and_written_as_steps_groups_and_samples():
    assert parse_drops("3:2/1, 3:2/0,3:5/*,4:0/*,3:5/2") == {
        3: {2: frozenset({0, 1}), 5: None},
        4: {0: None},
    }
    with pytest.raises(DebugConfigError, match=r"'3:x/1' is not STEP:GROUP/SAMPLE"):
        parse_drops("3:x/1")
    with pytest.raises(DebugConfigError, match="is a replay's what-if"):
        DebugConfig(dump_rollout_data=True, drop_samples="0:1/*")
