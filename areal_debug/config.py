# SPDX-License-Identifier: Apache-2.0
"""Configuration: the ``debug:`` section and AReaL experiment configs that carry it."""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field

from areal.api.cli_args import GRPOConfig, PPOConfig
from omegaconf import OmegaConf

from areal_debug import areal_compat
from areal_debug.allocation import override_key, plan_allocation
from areal_debug.logs import get_logger
from areal_debug.recording.anomaly import parse_threshold
from areal_debug.recording.format import (
    DEFAULT_ZSTD_LEVEL,
    DEFAULT_ZSTD_THREADS,
    MANIFEST,
    RECORDING_DIRNAME,
    REPLAY_REPORT_NAME,
    ZSTD_LEVELS,
    Codec,
    StepRanges,
    recording_below,
)
from areal_debug.recording.retention import parse_steps
from areal_debug.stages.names import TOKEN_STAGES

REPLAY_TRIAL_SUFFIX = "_replay"

logger = get_logger("DebugConfig")


@dataclass
class DebugConfig:
    """Record rollout batches (dump) or drive training from a recording (replay)."""

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


def default_recording_path(fileroot: str, experiment_name: str, trial_name: str) -> str:
    return os.path.join(fileroot, experiment_name, trial_name, RECORDING_DIRNAME)


def _rename_trial(obj, old: str, new: str, seen: set[int]) -> None:
    """Set every nested ``trial_name`` equal to ``old`` to ``new``.

    AReaL copies the trial name into each sub-config (stats_logger, saver,
    recover, engines...), usually through ``${trial_name}`` interpolation that
    is already resolved here, so all copies must move together.
    """
    if id(obj) in seen or not dataclasses.is_dataclass(obj):
        return
    seen.add(id(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name == "trial_name" and value == old:
            setattr(obj, f.name, new)
        elif dataclasses.is_dataclass(value):
            _rename_trial(value, old, new, seen)
        elif isinstance(value, (list, tuple)):
            for item in value:
                _rename_trial(item, old, new, seen)


def replay_trial(fileroot: str, experiment: str, trial: str) -> str:
    """The trial a replay of ``trial`` runs under when none is named:
    ``<trial>_replay``, or the first ``<trial>_replay<N>`` (N = 2, 3, ...) whose
    log directory holds no replay report, so a second replay (another setting,
    another AReaL) keeps the first one's report beside its own.

    Every process of a replay (launcher, torchrun ranks, controller) decides
    alike: the report is written after the first step, when all have started.
    """
    base = trial + REPLAY_TRIAL_SUFFIX
    n = 1
    while True:
        name = base if n == 1 else f"{base}{n}"
        log_dir = areal_compat.trial_log_dir(fileroot, experiment, name)
        if not os.path.exists(os.path.join(log_dir, REPLAY_REPORT_NAME)):
            return name
        n += 1


def recorded_trial_of(replay_trial: str) -> str:
    """The recorded run's trial a default replay trial name was made from
    (``<trial>_replay``, ``<trial>_replay2``, ...); any other name as it is."""
    base, suffix, rest = replay_trial.rpartition(REPLAY_TRIAL_SUFFIX)
    return base if suffix and (rest == "" or rest.isdigit()) else replay_trial


def earlier_replays_note(trial: str, replay_trial_name: str) -> str | None:
    """What a replay run under a fresh trial says (None under the first one)."""
    base = trial + REPLAY_TRIAL_SUFFIX
    rest = replay_trial_name[len(base) :]
    if not replay_trial_name.startswith(base) or not rest.isdigit():
        return None
    earlier = ", ".join([base] + [f"{base}{n}" for n in range(2, int(rest))])
    return (
        f"Replay: runs as trial {replay_trial_name}; the earlier replays' reports "
        f"({earlier}) are kept. debug.replay_trial_name=NAME names a replay."
    )


def replaced_report_note(replay_trial_name: str, report: str) -> str:
    """What a replay named onto an earlier replay's trial says: it replaces that
    replay's report (a person asked for it, but may not know)."""
    return (
        f"Replay: replaces the earlier replay's report {report}: "
        f"debug.replay_trial_name={replay_trial_name} names that replay's trial. "
        "Leave it unset for a trial of its own."
    )


def resolve_debug_config(cfg) -> None:
    """Fill in ``debug.path`` and move a replay to its own trial (in place)."""
    debug: DebugConfig = cfg.debug
    if not debug.enabled:
        return
    if debug.path is None:
        debug.path = default_recording_path(
            cfg.cluster.fileroot, cfg.experiment_name, cfg.trial_name
        )
    if not debug.replay_rollout_data:
        return
    if debug.replay_trial_name is None:
        debug.replay_trial_name = replay_trial(
            cfg.cluster.fileroot, cfg.experiment_name, cfg.trial_name
        )
    if debug.replay_trial_name != cfg.trial_name:
        _rename_trial(cfg, cfg.trial_name, debug.replay_trial_name, set())


@dataclass
class DebugSection:
    """Mixin giving any AReaL experiment config class a ``debug:`` section.

    Put it first: ``@dataclass class MyConfig(DebugSection, GRPOConfig): ...``,
    so its ``__post_init__`` runs AReaL's validation, then resolves the section.
    """

    debug: DebugConfig = field(
        default_factory=DebugConfig,
        metadata={"help": "Rollout recording and replay (areal-debug)."},
    )

    def __post_init__(self):
        post_init = getattr(super(), "__post_init__", None)
        if post_init is not None:
            post_init()
        resolve_debug_config(self)


@dataclass
class DebugPPOConfig(DebugSection, PPOConfig):
    """AReaL's ``PPOConfig`` with a ``debug:`` section."""


@dataclass
class DebugGRPOConfig(DebugSection, GRPOConfig):
    """AReaL's ``GRPOConfig`` with a ``debug:`` section."""


def has_debug_section(config_cls) -> bool:
    return any(f.name == "debug" for f in dataclasses.fields(config_cls))


_PARSING_CLASSES: dict[type, type] = {}


def _parsing_class(config_cls: type) -> type:
    """``config_cls`` with a ``debug:`` section added, to parse a config with.

    Made once per class. The loaded config is handed back as ``config_cls``
    itself (see ``_as_user_class``): this class never leaves the process.
    """
    if config_cls not in _PARSING_CLASSES:
        cls = dataclasses.make_dataclass(
            f"{config_cls.__name__}WithDebug", [], bases=(DebugSection, config_cls)
        )
        cls.__module__ = __name__
        _PARSING_CLASSES[config_cls] = cls
    return _PARSING_CLASSES[config_cls]


def _as_user_class(parsed, config_cls: type):
    """The parsed config as an instance of ``config_cls``, carrying ``debug`` as an
    attribute outside its fields: what AReaL serialises, saves or sends to RPC
    workers is then the user's own class, importable wherever the script's is."""
    config = config_cls.__new__(config_cls)
    config.__dict__.update({k: v for k, v in parsed.__dict__.items() if k != "debug"})
    object.__setattr__(config, "debug", parsed.debug)
    return config


def debug_config_of(config) -> DebugConfig:
    """The ``debug:`` section of a loaded config (all defaults when it has none)."""
    return getattr(config, "debug", None) or DebugConfig()


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
        appended = _append_debug_overrides(argv)
        try:
            if appended == argv:
                raise
            return compose(appended), appended
        except ConfigCompositionException:
            hint = unknown_key_hint(argv, config_cls) if config_cls else None
            if hint is not None:
                raise DebugConfigError(hint) from None
            raise first from None


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


# debug.layer_digests' words for every step and none.
_LAYER_DIGESTS_ALWAYS = {"true": True, "false": False}


class DebugConfigError(ValueError):
    """A ``debug.*`` key or value, or a config key, no run can use, found before
    any process starts."""


def check_debug_keys(argv: list[str]) -> None:
    """Every ``debug.*`` override names a debug key: a typo
    (``debug.replay_end_stpe``) is refused with the closest names and the list,
    not left to the config loader's ``ConfigKeyError`` after AReaL has loaded."""
    import difflib

    known = [f.name for f in dataclasses.fields(DebugConfig)]
    for arg in argv:
        key = override_key(arg)
        if key is None or not key.startswith("debug."):
            continue
        name = key.removeprefix("debug.").split(".", 1)[0]
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        hint = (
            "Did you mean " + " or ".join(f"debug.{c}" for c in close) + "? "
            if close
            else ""
        )
        raise DebugConfigError(
            f"{arg!r}: debug.{name} is not a debug key. {hint}The debug keys are: "
            + ", ".join(known)
            + "."
        )


def _field_type(cls, name: str):
    """The annotation of ``cls``'s field ``name``, or None where it cannot be
    resolved (a forward reference AReaL never imports)."""
    import typing

    try:
        return typing.get_type_hints(cls)[name]
    except Exception:  # noqa: BLE001 - any unresolvable annotation: stop walking
        return None


def _dataclass_in(hint):
    """The dataclass ``hint`` names (itself, or inside Optional/Union), else None."""
    import typing

    for t in (hint, *typing.get_args(hint)):
        if dataclasses.is_dataclass(t):
            return t
    return None


def _free_keys(hint) -> bool:
    """Whether a field of type ``hint`` takes keys of any name (a dict, Any)."""
    import typing

    return any(
        t is typing.Any or t is dict or typing.get_origin(t) is dict
        for t in (hint, *typing.get_args(hint))
    )


def _resolves(cls, parts: list[str]) -> bool:
    """Whether ``parts`` is a key of ``cls``: a field at each level, down to the
    last part or to a field whose keys are free (a dict, Any)."""
    for i, part in enumerate(parts):
        if part not in {f.name for f in dataclasses.fields(cls)}:
            return False
        hint = _field_type(cls, part)
        inner = _dataclass_in(hint)
        if inner is None:
            return i == len(parts) - 1 or _free_keys(hint)
        cls = inner
    return True


def unknown_key_hint(argv: list[str], config_cls) -> str | None:
    """The first override of ``argv`` whose key ``config_cls`` (AReaL's config
    dataclasses) does not have, with the closest keys that exist, in one line;
    None where every key walks. For after a composition failed: hydra's own
    message suggests ``+KEY`` (add it), which for a typo is the wrong fix.
    ``debug.*`` keys are ``check_debug_keys``'; ``+``/``~`` overrides add or
    delete keys on purpose."""
    import difflib

    for arg in argv:
        key = override_key(arg)
        if key is None or arg.startswith(("+", "~")) or key.startswith("debug."):
            continue
        parts, cls = key.split("."), config_cls
        for i, part in enumerate(parts):
            names = [f.name for f in dataclasses.fields(cls)]
            if part not in names:
                close = difflib.get_close_matches(part, names, n=5, cutoff=0.6)
                fixes = [
                    ".".join([*parts[:i], c, *parts[i + 1 :]])
                    for c in close
                    if _resolves(config_cls, [*parts[:i], c, *parts[i + 1 :]])
                ][:3]
                owner = ".".join(parts[:i]) or "the config"
                hint = f"; did you mean {' or '.join(fixes)}?" if fixes else "."
                return f"{arg!r}: {owner} has no key {part!r}{hint}"
            cls = _dataclass_in(_field_type(cls, part))
            if cls is None:
                break
    return None


def check_debug_section(cfg) -> str | None:
    """The composed config's ``debug:`` section checked as the trainer will
    check it (``DebugConfig``'s own validation), before any process starts.
    Returns the recording a replay reads (``check_recording`` it), else None."""
    section = OmegaConf.select(cfg, "debug", default=None)
    if section is None:
        return None
    values = OmegaConf.to_container(section, resolve=True) or {}
    try:
        debug = DebugConfig(**values)
    except (TypeError, ValueError) as e:
        raise DebugConfigError(str(e)) from None
    if not debug.replay_rollout_data:
        return None
    return debug.path or default_recording_path(
        str(OmegaConf.select(cfg, "cluster.fileroot")),
        str(OmegaConf.select(cfg, "experiment_name")),
        str(OmegaConf.select(cfg, "trial_name")),
    )


def refuse_controller_v2(cfg) -> None:
    """AReaL's v2 controllers (``rollout._version=v2``) are refused in dump and
    replay, before any process starts, with why and what to run instead."""
    from areal_debug import areal_compat

    keys = areal_compat.controller_v2_keys(cfg)
    if not keys:
        return
    raise DebugConfigError(
        f"{' and '.join(f'{k}=v2' for k in keys)}: AReaL's v2 controllers "
        "(RolloutControllerV2, the gateway and data-proxy inference service) are not "
        "supported by areal-debug: their trajectories come back from the data proxy, "
        "not through the rollout engine's prepare_batch that a dump records and a "
        "replay stands in for, so a replay could not run without the inference "
        "service. Record and replay with the v1 controllers (rollout._version=v1 "
        "actor._version=v1, AReaL's default), or turn debug.dump_rollout_data off "
        "for this run."
    )


def check_recording(path: str) -> None:
    """A replay's ``debug.path`` holds a recording, or says where one is."""
    if os.path.isfile(os.path.join(path, MANIFEST)):
        return
    below = recording_below(path)
    if below is not None:
        raise DebugConfigError(
            f"debug.path={path} is not a recording, but it holds one: "
            f"{below}. Set debug.path={below}."
        )
    what = "does not exist" if not os.path.exists(path) else "holds no manifest.json"
    raise DebugConfigError(
        f"No recording to replay at debug.path={path}: it {what}. Point debug.path "
        "at the directory a dump run wrote (areal-debug ls FILEROOT lists them), or "
        "record one first with debug.dump_rollout_data=true."
    )


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
