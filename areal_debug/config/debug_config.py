# SPDX-License-Identifier: Apache-2.0
"""The ``debug:`` section: its keys, their help, and the checks of their values."""

from __future__ import annotations

from dataclasses import dataclass, field

from areal_debug.recording.anomaly import parse_threshold
from areal_debug.recording.format import (
    DEFAULT_ZSTD_LEVEL,
    DEFAULT_ZSTD_THREADS,
    RECORDING_DIRNAME,
    ZSTD_LEVELS,
    Codec,
    StepRanges,
)
from areal_debug.recording.retention import parse_steps
from areal_debug.stages.names import TOKEN_STAGES

REPLAY_TRIAL_SUFFIX = "_replay"


# debug.layer_digests' words for every step and none.
_LAYER_DIGESTS_ALWAYS = {"true": True, "false": False}


class DebugConfigError(ValueError):
    """A ``debug.*`` key or value, or a config key, no run can use, found before
    any process starts."""


@dataclass
class RunKeys:
    """The ``debug:`` keys of what a run is and what it keeps: the mode, where the
    recording goes, the writer, compression, which steps are kept, pins and
    anomalies (``DebugConfig`` holds them with ``CompareKeys``'s, flat)."""

    dump_rollout_data: bool = field(
        default=False,
        metadata={
            "help": "Record every step's rollout batch, as the inference engine's "
            "prepare_batch returned it on each data-parallel head, to `debug.path`."
        },
    )
    replay_rollout_data: bool = field(
        default=False,
        metadata={
            "help": "Train from a recording instead of an inference engine: no "
            "engine is built or contacted, no weights are sent, no eval rollouts."
        },
    )
    path: str | None = field(
        default=None,
        metadata={
            "help": "Directory of the recording. Default: "
            f"<cluster.fileroot>/<experiment_name>/<trial_name>/{RECORDING_DIRNAME}, "
            "resolved from the recorded run's trial name."
        },
    )
    replay_trial_name: str | None = field(
        default=None,
        metadata={
            "help": "Trial name a replay runs (and logs) under. Default: "
            f"'<trial_name>{REPLAY_TRIAL_SUFFIX}', or '<trial_name>"
            f"{REPLAY_TRIAL_SUFFIX}2', '...3' and so on when that one holds an "
            "earlier replay's report: a replay never writes into the recorded "
            "run's logs, checkpoints or trackers, nor over another replay's "
            "report unless named to."
        },
    )
    max_pending_steps: int = field(
        default=2,
        metadata={
            "help": "Dump mode: steps that may wait in memory for the background "
            "writer. When the writer falls this far behind, training waits for it."
        },
    )
    writer_process: bool = field(
        default=True,
        metadata={
            "help": "Dump mode: serialise, compress, hash and write each step's "
            "payload in a process of its own, so the recorder does not take the GIL "
            "from a Python-heavy training loop (the batch reaches it through shared "
            "memory). false: on a thread of the training process."
        },
    )
    compression: str = field(
        default="zstd",
        metadata={
            "help": "Dump mode: how payloads are stored. 'zstd' compresses each "
            "payload losslessly (a padded RLVR batch shrinks to ~0.1-0.15 of its "
            "torch.save size; `make bench` measures it); 'none' stores torch.save "
            "output as is.",
            "choices": Codec.names(),
        },
    )
    compression_level: int = field(
        default=DEFAULT_ZSTD_LEVEL,
        metadata={
            "help": "Dump mode: zstd level, -7 to 22 except 0 (negative: zstd's fast "
            "levels). Level 1 was chosen by measurement (benchmarks/compression.py): "
            "on a padded RLVR batch -1 is no faster and stores ~10% more (it is ~3x "
            "faster on token ids with no redundancy); levels 3-10 save only 3-7% "
            "more space, at 1.1-6x the CPU time of the writer."
        },
    )
    compression_threads: int = field(
        default=DEFAULT_ZSTD_THREADS,
        metadata={
            "help": "Dump mode: zstd's own worker threads per payload (0: compress "
            "on the writer's thread; the bytes stored differ, the data does not). 2 "
            "by measurement (benchmarks/dump_overhead.py): a 17 MiB step written "
            "~1.2x faster on 2 cores, with the Python loop beside the writer no "
            "slower (the writer process runs at the lowest CPU priority)."
        },
    )
    record_steps: str | None = field(
        default=None,
        metadata={
            "help": "Dump mode: the steps to record, as steps and ranges, e.g. "
            "'0-9,50,100-' (an open range runs to the end). Default: every step."
        },
    )
    record_every: int = field(
        default=1,
        metadata={"help": "Dump mode: record only every n-th step (step % n == 0)."},
    )
    keep_last_steps: int | None = field(
        default=None,
        metadata={
            "help": "Dump mode: keep at most this many recent steps (a ring buffer; "
            "at least debug.anomaly_context_steps + 1 while anomaly pins are on); "
            "older ones are deleted, except pinned steps and what replaying them "
            "needs. Default: keep everything."
        },
    )
    max_disk_gb: float | None = field(
        default=None,
        metadata={
            "help": "Dump mode: keep the recording (steps and kept recover "
            "checkpoints) under this size, deleting the oldest unpinned steps first."
        },
    )
    pin_steps: list[int] = field(
        default_factory=list,
        metadata={
            "help": "Dump mode: steps never deleted, with the latest kept recover "
            "checkpoint before each and the steps between, so "
            "debug.replay_start_step=N replays a pinned step N."
        },
    )
    pin_on_anomaly: bool = field(
        default=True,
        metadata={
            "help": "Dump mode: pin a step (and debug.anomaly_context_steps before "
            "it) when its statistics show a NaN/inf loss or grad norm, a loss or "
            "grad norm above debug.anomaly_median_factor x its running median, or "
            "one of debug.anomaly_thresholds. Pinned steps are never deleted."
        },
    )
    anomaly_median_factor: float | None = field(
        default=10.0,
        metadata={
            "help": "Dump mode: a loss, grad norm or training-inference mismatch "
            "(areal_debug/mismatch/abs_diff/avg) this many times its running "
            "median (over the last 50 steps, from the 6th step on) pins the step. "
            "null turns this trigger off."
        },
    )
    anomaly_thresholds: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Dump mode: metric thresholds that pin a step, as 'METRIC OP "
            "NUMBER', e.g. ['ppo_actor/task_reward/avg < 0.05']."
        },
    )
    anomaly_context_steps: int = field(
        default=2,
        metadata={"help": "Dump mode: steps before an anomalous step pinned with it."},
    )
    fail_on_write_error: bool = field(
        default=False,
        metadata={
            "help": "Dump mode: stop training when the recording cannot be written "
            "(disk full, permission lost). By default the recording stops, says in "
            "the log and in the recording from which step and why, and training "
            "goes on."
        },
    )


@dataclass
class CompareKeys:
    """The ``debug:`` keys of what is compared and how: determinism, stage and
    layer digests, the log-probs kept, seams, resumes, the replayed range and the
    tolerance."""

    deterministic: bool = field(
        default=False,
        metadata={
            "help": "Use deterministic kernels (torch.use_deterministic_algorithms, "
            "cudnn deterministic, no cudnn benchmark) so a replay can match bitwise."
        },
    )
    restore_rng: bool = field(
        default=True,
        metadata={
            "help": "Replay: restore each rank's RNG states (python, numpy, torch, "
            "CUDA) recorded at the dump point of each step, so training-side "
            "randomness such as dropout replays identically. SPMD mode only: in "
            "single-controller mode the RPC workers seed themselves identically."
        },
    )
    stage_digests: bool = field(
        default=True,
        metadata={
            "help": "Dump and replay: digest each stage of every PPO step as it runs "
            "(recomputed log-probs, reference log-probs, values, advantages, each "
            "micro-batch's loss, each parameter's gradient before clipping, the "
            "weights after every mini-batch's optimizer step): exact 16-byte digests computed on the "
            "device. The replay then reports the first stage, and where in it, "
            "that differs from the recording, and calls a step bitwise only if "
            "the weights match too. SPMD and single-controller mode (FSDP engines)."
        },
    )
    record_stage_tensors: bool = field(
        default=False,
        metadata={
            "help": "Dump and replay: also keep the full per-token stage tensors "
            "(log-probs, reference log-probs, values, advantages, returns) of each "
            "step, so a divergence says by how much and at which token. Costs "
            "about a recorded batch's size again per step."
        },
    )
    layer_digests: str = field(
        default="pinned",
        metadata={
            "help": "Dump and replay: below the log-probs stage, digest each decoder "
            "layer's output (and its norms', attention's and MLP's), the final "
            "norm's and the logits', per sample, in the forward pass that "
            "computes the step's log-probs, so a replay whose log-probs differ "
            "names the first layer, sample and token that does. true, false, "
            "pinned (the steps of debug.pin_steps) or steps ('0-9,50'). A replay "
            "also digests every step whose recording has them. SPMD and "
            "single-controller mode (FSDP engines). Needs debug.stage_digests."
        },
    )
    blame_steps: str = field(
        default="",
        metadata={
            "help": "Dump and replay (SPMD and single-controller): each sample's "
            "part in these steps' update ('0-9,50', or empty for none), in "
            "AReaL's own arithmetic: before each mini-batch trains, its train_batch runs again without its "
            "optimizer step, once whole and once per sample with the other "
            "samples' loss tokens masked out (same micro-batches, packing and "
            "dropout masks): each sample's loss contribution, gradient norm and "
            "projection on the mini-batch's gradient, clipped and capped tokens. "
            "The step itself trains as without it, bit for bit. Written to "
            "blame/step-N.json in the run's log folder; read it with "
            "`areal-debug blame`. Costs one forward and backward pass of the "
            "mini-batch per sample."
        },
    )
    drop_samples: str = field(
        default="",
        metadata={
            "help": "Replay: leave these samples out of their steps' batches, the "
            "rest of each batch as recorded: 'STEP:GROUP/SAMPLE' or "
            "'STEP:GROUP/*' (the whole group), comma-separated, in the recording's "
            "numbering (areal-debug show, areal-debug blame). What the step's update "
            "would have been without them: the story names them, and "
            "`areal-debug diff` of this replay against another shows the update's "
            "difference. A sample alone cannot leave a group whose rewards AReaL "
            "normalises in groups (actor.reward_norm at group level): drop its "
            "whole group there."
        },
    )
    record_trainer_logp: bool = field(
        default=True,
        metadata={
            "help": "Dump and replay: keep the log-probs the actor recomputes for the "
            "sampled tokens (before the step's first optimizer step), with each "
            "row's tokens to pair them with the recorded rows, compressed in "
            "step-N/stage_tensors.pt (about 8 bytes per token before compression). "
            "The training-inference mismatch per token (areal-debug mismatch --top, "
            "the ratio's percentiles, the report's token view) is read from them; "
            "a replay says at which token its log-probs first differ. Needs "
            "debug.stage_digests and actor.recompute_logprob."
        },
    )
    record_ref_logp: bool = field(
        default=False,
        metadata={
            "help": "Dump: also keep the reference model's log-probs of every "
            "trajectory (4 bytes per token, in step-N/stage_tensors.pt), so a "
            "replay can use them instead of running the reference model "
            "(debug.replay_recorded_ref_logp). Needs debug.stage_digests."
        },
    )
    replay_recorded_ref_logp: bool = field(
        default=False,
        metadata={
            "help": "Replay: take the reference log-probs from the recording "
            "(recorded with debug.record_ref_logp or debug.record_stage_tensors) "
            "instead of running the reference model's forward pass: cheaper when "
            "debugging the actor's loss, and identical to the dump's by "
            "construction, which the report says. Needs the recording's "
            "data-parallel layout."
        },
    )
    require_all_seams: bool = field(
        default=False,
        metadata={
            "help": "Refuse to start where the installed AReaL lacks or has changed "
            "any private name areal-debug hooks into (areal_compat.seams: trainer "
            "hooks, patched engine methods), instead of going on without what it "
            "feeds and saying so. A missing seam the run itself needs is always "
            "refused."
        },
    )
    lossless_resume: bool = field(
        default=False,
        metadata={
            "help": "Keep, in each recover checkpoint, the inputs AReaL had drawn "
            "from the train dataloader and not trained (its rollout dispatcher draws "
            "the next batch ahead whenever a step's rollouts take over 1 s, and a "
            "plain resume skips them), and serve them first when the run resumes: "
            "it trains the prompts the uninterrupted run would have. Rollouts that "
            "were running are generated again from their prompts. With or without "
            "recording, SPMD and single-controller; a replay ignores it."
        },
    )
    fail_on_divergence: bool = field(
        default=False,
        metadata={
            "help": "Replay: stop with a non-zero exit at the first step whose "
            "statistics differ from the recording (after writing the report)."
        },
    )
    replay_start_step: int | None = field(
        default=None,
        metadata={
            "help": "Replay: the step to reproduce. Without a recover checkpoint of "
            "the dump run the replay runs from the first recorded step up to it."
        },
    )
    replay_end_step: int | None = field(
        default=None,
        metadata={"help": "Replay: the last step to run (inclusive)."},
    )
    verify_rtol: float = field(
        default=0.0,
        metadata={
            "help": "Replay: relative tolerance when comparing replayed statistics "
            "with the recorded ones. 0 means bitwise."
        },
    )
    verify_atol: float = field(
        default=0.0,
        metadata={
            "help": "Replay: absolute tolerance when comparing replayed statistics "
            "with the recorded ones. 0 means bitwise."
        },
    )


@dataclass
class DebugConfig(CompareKeys, RunKeys):
    """Record rollout batches (dump) or drive training from a recording (replay).
    Its keys are ``RunKeys``' then ``CompareKeys``' (one flat ``debug:`` section)."""

    def _layer_digests_spec(self) -> str:
        # YAML's true reaches this str field as "True".
        return str(self.layer_digests).strip().lower()

    def layer_digests_at(self, step: int) -> bool:
        """Whether debug.layer_digests asks for step ``step``'s layers."""
        spec = self._layer_digests_spec()
        if spec in _LAYER_DIGESTS_ALWAYS:
            return _LAYER_DIGESTS_ALWAYS[spec]
        if spec == "pinned":
            return step in set(self.pin_steps or ())
        return step in StepRanges.parse(spec, "debug.layer_digests=")

    def dropped_samples(self) -> dict[int, dict[int, frozenset[int] | None]]:
        """debug.drop_samples as {step: {group: its samples, or None for all}}."""
        return parse_drops(str(self.drop_samples or ""))

    @property
    def blames(self) -> bool:
        """Whether debug.blame_steps names any step."""
        return bool(str(self.blame_steps or "").strip())

    def blame_at(self, step: int) -> bool:
        """Whether debug.blame_steps asks for step ``step``'s sample parts."""
        return self.blames and step in StepRanges.parse(
            str(self.blame_steps).strip(), "debug.blame_steps="
        )

    def kept_stage_tensors(self) -> frozenset[str]:
        """The stages whose full per-token tensors a run keeps."""
        if self.record_stage_tensors:
            return frozenset(TOKEN_STAGES)
        kept = set()
        if self.record_trainer_logp:
            kept.add("logp")
        if self.record_ref_logp:
            kept.add("ref_logp")
        return frozenset(kept)

    def __post_init__(self):
        if self.dump_rollout_data and self.replay_rollout_data:
            raise DebugConfigError(
                "debug.dump_rollout_data=true and debug.replay_rollout_data=true "
                "cannot be combined: a run either records rollouts or replays a "
                "recording. Set debug.dump_rollout_data=true to record, or "
                "debug.replay_rollout_data=true (with debug.path naming the "
                "recording) to replay."
            )
        if self.compression not in Codec.names():
            raise DebugConfigError(
                f"debug.compression={self.compression!r} is not one of {Codec.names()}."
            )
        low, high = ZSTD_LEVELS
        if not low <= self.compression_level <= high or self.compression_level == 0:
            raise DebugConfigError(
                f"debug.compression_level must be a zstd level from {low} to {high} "
                f"other than 0, got {self.compression_level}."
            )
        if self.compression_threads < 0:
            raise DebugConfigError(
                f"debug.compression_threads must be >= 0 (0: no worker threads), "
                f"got {self.compression_threads}."
            )
        if self.record_every < 1:
            raise DebugConfigError(
                f"debug.record_every must be >= 1, got {self.record_every}."
            )
        if self.keep_last_steps is not None and self.keep_last_steps < 1:
            raise DebugConfigError(
                f"debug.keep_last_steps must be >= 1 (or null to keep every step), "
                f"got {self.keep_last_steps}."
            )
        if self.max_disk_gb is not None and self.max_disk_gb <= 0:
            raise DebugConfigError(
                f"debug.max_disk_gb must be > 0 (or null), got {self.max_disk_gb}."
            )
        parse_steps(self.record_steps)  # raises ValueError naming the bad part
        spec = self._layer_digests_spec()
        if spec not in (*_LAYER_DIGESTS_ALWAYS, "pinned"):
            try:
                StepRanges.parse(spec or "-", "debug.layer_digests=")
            except ValueError as e:
                raise DebugConfigError(
                    f"{e} debug.layer_digests is true, false, pinned or steps."
                ) from None
        if str(self.drop_samples or "").strip():
            if self.dump_rollout_data:
                raise DebugConfigError(
                    f"debug.drop_samples={self.drop_samples!r} is a replay's what-if "
                    "(the step without those samples); a dump records what the "
                    "rollout made. Drop it from the dump, and replay with it."
                )
            self.dropped_samples()  # raises naming the bad part
        if self.blames:
            try:
                StepRanges.parse(str(self.blame_steps).strip(), "debug.blame_steps=")
            except ValueError as e:
                raise DebugConfigError(
                    f"{e} debug.blame_steps is steps ('3', '0-9,50') or empty."
                ) from None
        for text in self.anomaly_thresholds:
            parse_threshold(text)
        if self.anomaly_context_steps < 0:
            raise DebugConfigError(
                "debug.anomaly_context_steps must be >= 0, got "
                f"{self.anomaly_context_steps}."
            )
        if self.anomaly_median_factor is not None and self.anomaly_median_factor <= 1:
            raise DebugConfigError(
                "debug.anomaly_median_factor must be > 1 (or null to turn it off), "
                f"got {self.anomaly_median_factor}."
            )
        if spec not in ("false", "pinned") and not self.stage_digests:
            raise DebugConfigError(
                f"debug.layer_digests={self.layer_digests!r} needs "
                "debug.stage_digests=true: the layers are digested beside the "
                "stages, into the same step log. Drop debug.stage_digests=false."
            )
        for name in ("record_ref_logp", "replay_recorded_ref_logp"):
            if getattr(self, name) and not self.stage_digests:
                raise DebugConfigError(
                    f"debug.{name}=true needs debug.stage_digests=true: the "
                    "reference log-probs are taken and checked where the stages "
                    "are digested. Drop debug.stage_digests=false."
                )
        if self.max_pending_steps < 1:
            raise DebugConfigError(
                f"debug.max_pending_steps must be >= 1, got {self.max_pending_steps}."
            )
        for name in ("replay_start_step", "replay_end_step"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise DebugConfigError(f"debug.{name} must be >= 0, got {value}.")
        if (
            self.replay_start_step is not None
            and self.replay_end_step is not None
            and self.replay_end_step < self.replay_start_step
        ):
            raise DebugConfigError(
                f"debug.replay_end_step={self.replay_end_step} is before "
                f"debug.replay_start_step={self.replay_start_step}; the range is "
                "inclusive, so set replay_end_step >= replay_start_step."
            )
        for name in ("verify_rtol", "verify_atol"):
            if getattr(self, name) < 0:
                raise DebugConfigError(
                    f"debug.{name} must be >= 0, got {getattr(self, name)}."
                )

    @property
    def enabled(self) -> bool:
        return self.dump_rollout_data or self.replay_rollout_data


def parse_drops(spec: str) -> dict[int, dict[int, frozenset[int] | None]]:
    """'STEP:GROUP/SAMPLE' or 'STEP:GROUP/*', comma-separated, as {step: {group:
    samples or None}}; a DebugConfigError naming the bad part."""
    out: dict[int, dict[int, frozenset[int] | None]] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        try:
            step_text, place = part.split(":", 1)
            group_text, sample_text = place.split("/", 1)
            step, group = int(step_text), int(group_text)
            sample = None if sample_text.strip() == "*" else int(sample_text)
            if step < 0 or group < 0 or (sample is not None and sample < 0):
                raise ValueError
        except ValueError:
            raise DebugConfigError(
                f"debug.drop_samples={spec!r}: {part!r} is not STEP:GROUP/SAMPLE or "
                "STEP:GROUP/* (e.g. '3:2/1,3:5/*': step 3's group 2 sample 1 and "
                "all of group 5)."
            ) from None
        groups = out.setdefault(step, {})
        if sample is None or groups.get(group, frozenset()) is None:
            groups[group] = None
        else:
            groups[group] = groups.get(group, frozenset()) | {sample}
    return out
