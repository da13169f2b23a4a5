# SPDX-License-Identifier: Apache-2.0
"""``areal-debug doctor``: pre-flight checks of a replay or resume against a recording.

The command is read as the run would read it, and nothing is written
(``preflight/command.py``); each check here compares it with the recording.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
from dataclasses import dataclass

import torch

from areal_debug import areal_compat
from areal_debug.compare.config_changes import training_changes
from areal_debug.inspect.common import (
    human_bytes,
    override_word,
)
from areal_debug.inspect.preflight.command import (  # noqa: F401 - doctor.X for callers
    config_argv,
    environment,
    load_command_config,
    script_command,
)
from areal_debug.inspect.preflight.findings import ERROR, INFO, WARNING, Finding
from areal_debug.inspect.preflight.silent_configs import silent_configurations
from areal_debug.recording.format import KEPT, dir_bytes, kept_steps, step_dirname
from areal_debug.recording.reader import RecordingReader, format_ranges
from areal_debug.replay_plan import (
    ADAPTIVE_TREE_WHY,
    ReplayPlan,
    drop_problems,
    needs_teacher_servers,
    uses_adaptive_tree,
)
from areal_debug.version import areal_debug_version


@dataclass
class DoctorReport:
    recording: str
    command: list[str]
    kind: str  # "replay" or "resume"
    start_step: int
    end_step: int | None
    findings: list[Finding]

    @property
    def errors(self) -> int:
        return sum(f.severity == ERROR for f in self.findings)


# -- comparing ---------------------------------------------------------------------------
def config_differences(recorded: dict, current: dict) -> list[Finding]:
    """Training-relevant config keys that differ from the dump run's."""
    findings = []
    for change in training_changes(recorded, current):
        if change.grouping:
            findings.append(
                Finding(
                    ERROR,
                    change.describe(),
                    "the recorded batches hold groups of that many samples per "
                    "prompt; group reward normalisation would mix groups",
                    f"set {override_word(change.key, change.recorded)}",
                )
            )
            continue
        findings.append(
            Finding(
                WARNING,
                change.describe(),
                (
                    "the micro-batch layout and kernels decide the rounding: on a GPU "
                    "a row's result depends on the batch's shape (cuBLAS picks kernels "
                    "by it), so the replay is not expected to be bitwise"
                    if change.layout
                    else "training then differs from the dump run: the replay diverges "
                    "from the recorded statistics"
                )
                + " (expected only if this is the change you are testing)",
                f"set {override_word(change.key, change.recorded)} to reproduce "
                "the recording exactly",
            )
        )
    return findings


def _versions(reader: RecordingReader) -> list[Finding]:
    m = reader.manifest
    out = []
    areal_change = areal_compat.areal_build_change(m.areal_build, m.areal_version)
    if areal_change is not None:
        out.append(
            Finding(
                WARNING,
                areal_change,
                f"{areal_compat.AREAL_CHANGE_MOVES}, so a replay may not be bitwise",
                "install the AReaL the recording names to reproduce exactly "
                "(expected only if comparing AReaL builds is what you test)",
            )
        )
    for name, recorded, current, severity in (
        ("torch", m.torch_version, torch.__version__, WARNING),
        ("areal-debug", m.areal_debug_version, areal_debug_version(), INFO),
    ):
        if recorded and current and recorded != current:
            out.append(
                Finding(
                    severity,
                    f"{name} {current} is installed, the recording was made with "
                    f"{recorded}",
                    "kernels and training code may differ between versions, so a "
                    "replay may not be bitwise",
                    f"install {shlex.quote(f'{name}=={recorded}')} to reproduce exactly",
                )
            )
    return out


def _determinism(reader: RecordingReader, config) -> list[Finding]:
    recorded = bool(reader.manifest.determinism.get("torch_deterministic_algorithms"))
    current = bool(config.debug.deterministic)
    if recorded == current:
        return []
    return [
        Finding(
            WARNING,
            f"debug.deterministic={str(current).lower()}, the dump run had "
            f"deterministic algorithms {'on' if recorded else 'off'}",
            "different kernels give different rounding: the replay may not be bitwise",
            f"set debug.deterministic={str(recorded).lower()}",
        )
    ]


def _steps(reader: RecordingReader, start: int, end: int) -> list[Finding]:
    have = reader.available_steps()
    wanted = list(range(start, end + 1))
    missing = [s for s in wanted if s not in have]
    out = []
    if missing:
        out.append(
            Finding(
                ERROR,
                f"steps {format_ranges(missing)} of {format_ranges(wanted)} are not "
                f"complete in the recording (complete: {format_ranges(have)})",
                "the replay checks before training and stops at the first one",
                "replay fewer steps (debug.replay_end_step / total_train_steps) or "
                "point debug.path at a recording that has them",
            )
        )
    incomplete = [s for s in reader.incomplete_steps() if start <= s <= end]
    if incomplete:
        out.append(
            Finding(
                WARNING,
                f"steps {format_ranges(incomplete)} are incomplete (no step.json)",
                "a head did not finish writing them; they cannot be replayed",
                "run `areal-debug verify` and see the dump run's log",
            )
        )
    for stop in reader.stopped():
        out.append(
            Finding(
                INFO,
                f"shard {stop.get('shard')} stopped recording at step "
                f"{stop.get('step')}: {stop.get('error')}",
                reader.stop_consequence(stop),
                "replay only the complete steps",
            )
        )
    return out


def checkpoint_problem(recording: str, step: int) -> str | None:
    """Why the kept checkpoint of ``step`` is not whole, or None if it is."""
    d = os.path.join(recording, KEPT, step_dirname(step))
    if os.path.exists(d + ".partial"):
        return f"{d}.partial exists (a copy was interrupted)"
    info = areal_compat.kept_step_info(d)
    if not os.path.isfile(info):
        return f"{info} is missing"
    # The actor's checkpoint, under the name AReaL saves it by.
    actor = areal_compat.recover_model_names(with_critic=False)[0]
    ckpt = areal_compat.kept_model_dir(d, actor)
    if not os.path.isdir(ckpt) or not os.listdir(ckpt):
        return f"{ckpt} is missing or empty"
    return None


def _checkpoint(reader: RecordingReader, plan: ReplayPlan) -> list[Finding]:
    start, base = plan.start_step, plan.checkpoint
    if start == 0:
        return []
    if base is None:
        first = min(reader.available_steps(), default=None)
        if first not in (0, None) and first <= start:
            return [
                Finding(
                    ERROR,
                    f"no kept recover checkpoint before step {start}, and the "
                    f"recording starts at step {first}",
                    "without a checkpoint the replay rebuilds the policy from step 0, "
                    "which is not recorded",
                    "record with recover.mode=on (debug.pin_steps keeps what a step "
                    "needs), or replay from the first recorded step",
                )
            ]
        return [
            Finding(
                INFO,
                f"no kept recover checkpoint before step {start} "
                f"(kept: {format_ranges(kept_steps(reader.path))})",
                "the replay runs from step 0 up to it to rebuild the policy (no "
                "inference, so cheap, but every step before it runs)",
                "record with recover.mode=on to start right at a step",
            )
        ]
    problem = checkpoint_problem(reader.path, base)
    if problem:
        return [
            Finding(
                ERROR,
                f"the kept checkpoint of step {base} is not whole: {problem}",
                f"the replay would restore it to start at step {base + 1}",
                "restore the recording's recover/ directory from a copy",
            )
        ]
    between = [s for s in plan.rebuilt_steps if not reader.has_step(s)]
    info = Finding(
        INFO,
        f"starts from the kept recover checkpoint of step {base}"
        + (f", then replays steps {base + 1}-{start - 1}" if base + 1 < start else ""),
        "that is the policy and optimizer state of the dump run before the step",
        "nothing to do",
    )
    if between:
        return [
            info,
            Finding(
                ERROR,
                f"steps {format_ranges(between)} between the checkpoint and step "
                f"{start} are missing",
                "they must be replayed to reach the step",
                "pin the step when recording (debug.pin_steps)",
            ),
        ]
    return [info]


def _trial_and_trackers(reader: RecordingReader, config, kind: str) -> list[Finding]:
    m = reader.manifest
    out = []
    same = (
        config.experiment_name == m.experiment_name
        and config.trial_name == m.trial_name
    )
    if kind == "replay" and same:
        out.append(
            Finding(
                ERROR,
                f"the replay runs as {config.experiment_name}/{config.trial_name}, the "
                "recorded run's own experiment and trial",
                "its logs, checkpoints and trackers would be written into the "
                "recorded run's (AReaL derives all of them from the two names)",
                "leave debug.replay_trial_name unset (default <trial>_replay, or "
                "<trial>_replay2 and on when that holds a report) or give it "
                "another name",
            )
        )
    if kind == "resume" and same:
        out.append(
            Finding(
                INFO,
                f"resumes {m.experiment_name}/{m.trial_name} into the same recording",
                "a resumed dump moves the steps it records again to superseded/",
                "nothing to do if this is a resume",
            )
        )
    rec_wandb = ((m.config.get("stats_logger") or {}).get("wandb")) or {}
    wandb = config.stats_logger.wandb
    if kind == "replay" and wandb.mode != "disabled":
        rec_id = rec_wandb.get("id") or rec_wandb.get("name")
        cur_id = getattr(wandb, "id", None) or wandb.name
        if rec_id and cur_id == rec_id:
            out.append(
                Finding(
                    ERROR,
                    f"wandb run {cur_id!r} is the recorded run's",
                    "the replay's metrics would be logged into the recorded run",
                    "set stats_logger.wandb.mode=disabled or another name/id",
                )
            )
        else:
            out.append(
                Finding(
                    INFO,
                    f"wandb logging is on (mode {wandb.mode})",
                    "the replay logs a new run",
                    "set stats_logger.wandb.mode=disabled for a quiet replay",
                )
            )
    return out


def _disk(reader: RecordingReader, config, kind: str, start: int, end) -> list[Finding]:
    root = config.cluster.fileroot
    probe = root
    while probe and not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not probe:
        return []
    free = shutil.disk_usage(probe).free
    kept = kept_steps(reader.path)
    ckpt = (
        dir_bytes(os.path.join(reader.path, KEPT, step_dirname(kept[-1])))
        if kept
        else 0
    )
    steps = reader.available_steps()
    per_step = (
        sum(dir_bytes(os.path.join(reader.path, step_dirname(s))) for s in steps[-3:])
        / len(steps[-3:])
        if steps
        else 0
    )
    if kind == "replay":
        # A checkpoint installed into the replay trial, and AReaL's own saves.
        need = 2 * ckpt
        what = "an installed recover checkpoint and AReaL's own recover save"
    else:
        n = (end or config.total_train_steps or len(steps)) - start
        need = int(max(n, 1) * per_step) + 2 * ckpt
        what = f"{max(n, 1)} recorded steps of ~{human_bytes(per_step)} and checkpoints"
    if need == 0:
        return []  # nothing to write that the recording knows the size of
    severity = ERROR if free < need else (WARNING if free < 2 * need else INFO)
    return [
        Finding(
            severity,
            f"{human_bytes(free)} free under {probe}; the run needs about "
            f"{human_bytes(need)} ({what})",
            "a full disk stops the recording (or the run) midway"
            if severity != INFO
            else "enough room",
            "free disk space or point cluster.fileroot elsewhere"
            if severity != INFO
            else "nothing to do",
        )
    ]


def _paths(reader: RecordingReader, config, kind: str) -> list[Finding]:
    out = []
    target = config.debug.path
    if target and os.path.realpath(target) != os.path.realpath(reader.path):
        out.append(
            Finding(
                ERROR,
                f"the command's recording is {target}, not {reader.path}",
                "doctor checked this recording, but the run would "
                + ("replay" if kind == "replay" else "write")
                + " the other one",
                f"add {override_word('debug.path', reader.path)} to the command",
            )
        )
    model = config.actor.path
    if model and os.path.isabs(model) and not os.path.isdir(model):
        out.append(
            Finding(
                ERROR,
                f"actor.path {model} does not exist on this machine",
                "the actor is built from it (architecture, tokenizer, and the "
                "weights of step 0)",
                "copy the model here or point actor.path at a copy",
            )
        )
    return out


def _topology(reader: RecordingReader, config) -> list[Finding]:
    from areal_debug.allocation import plan_allocation

    try:
        dp = plan_allocation(config, [], "replay").train_dp_size
    except Exception:  # noqa: BLE001 - an allocation doctor cannot read is no finding
        return []
    recorded = reader.manifest.layout.training_dp_size
    if dp == recorded:
        return []
    return [
        Finding(
            WARNING,
            f"the training data-parallel size is {dp}, the dump run's was {recorded}",
            "each step's batch is re-split for the new layout and the recorded RNG "
            "states cannot be restored: statistics may differ from the recording",
            f"replay with the recorded size ({recorded}) for a bitwise replay",
        )
    ]


def _unreplayable(reader: RecordingReader, config) -> list[Finding]:
    """What the replay refuses (modes/replay_setup.refuse_unsupported), each."""
    found = []
    if needs_teacher_servers(config, reader.manifest):
        found.append(
            Finding(
                ERROR,
                "the run has a teacher served as an inference engine, the recording "
                "holds no teacher log-probs",
                "the replay refuses to start the teacher's servers",
                "replay without the teacher (teacher=null) or record in "
                "single-controller mode with it",
            )
        )
    if uses_adaptive_tree(config):
        found.append(
            Finding(
                ERROR,
                "the run sets actor.adaptive_tree",
                f"the replay refuses it: {ADAPTIVE_TREE_WHY}",
                "replay with actor.adaptive_tree=null",
            )
        )
    for problem in drop_problems(config, reader, config.debug):
        found.append(
            Finding(
                ERROR,
                f"debug.drop_samples: {problem}",
                "the replay refuses it before it starts",
                "name samples the recording has (areal-debug show REC --step N)",
            )
        )
    return found


def _last_step(
    reader: RecordingReader, config, plan: ReplayPlan, kind: str
) -> int | None:
    """The last step the run reaches: a replay's training loop ends at the plan's
    last step or after its epochs of recorded steps; a resume at the configured one."""
    if kind != "replay":
        return plan.last_step
    return plan.stop(config.total_train_epochs, reader.steps_per_epoch) - 1


def _range(
    reader: RecordingReader, config, plan: ReplayPlan, end: int | None
) -> list[Finding]:
    start = plan.start_step
    if end is None or end >= start:
        return []
    if plan.last_step is not None:
        limit = (
            f"total_train_steps={config.total_train_steps}, debug.replay_end_step="
            f"{config.debug.replay_end_step}"
        )
        fix = f"set total_train_steps={start + 1} or more"
    else:
        per_epoch = reader.steps_per_epoch
        limit = (
            f"total_train_epochs={config.total_train_epochs} of {per_epoch} "
            "recorded steps"
        )
        fix = f"set total_train_epochs={start // per_epoch + 1} or more"
    return [
        Finding(
            ERROR,
            f"the run ends at step {end} ({limit}) before its start step {start}",
            "nothing would be replayed",
            fix,
        )
    ]


def doctor(path: str, command: list[str]) -> DoctorReport:
    """Every finding about running ``command`` against the recording at ``path``."""
    reader = RecordingReader(path)
    run, env = script_command(command)
    with environment(env), areal_compat.held_config_warnings() as areal_said:
        config = load_command_config(run)
    debug = config.debug
    kind = "replay" if debug.replay_rollout_data else "resume"
    # AReaL's own notes on the config, in doctor's table instead of above it.
    findings: list[Finding] = [
        Finding(
            INFO,
            f"AReaL's config check: {said.splitlines()[0]}",
            "AReaL's own warning when it loads this config (the run logs it whole)",
            "nothing for areal-debug; read AReaL's note if the setting is new to you",
        )
        for said in areal_said
    ]
    if not debug.replay_rollout_data and not debug.dump_rollout_data:
        findings.append(
            Finding(
                WARNING,
                "the command neither replays nor records (no "
                "debug.replay_rollout_data=true or debug.dump_rollout_data=true)",
                "it would run a plain AReaL run; checked as a resume",
                "add debug.replay_rollout_data=true to replay",
            )
        )
    plan = ReplayPlan.of(
        reader.path,
        debug.replay_start_step,
        debug.replay_end_step,
        config.total_train_steps,
    )
    start, end = plan.start_step, _last_step(reader, config, plan, kind)
    findings += _range(reader, config, plan, end)
    current = {"debug": dataclasses.asdict(debug), **dataclasses.asdict(config)}
    findings += _paths(reader, config, kind)
    findings += config_differences(reader.manifest.config, current)
    if kind == "replay":
        findings += _steps(reader, start, end)
        findings += _checkpoint(reader, plan)
        findings += _topology(reader, config)
        findings += _unreplayable(reader, config)
    findings += _determinism(reader, config)
    findings += silent_configurations(reader, current, {**os.environ, **env})
    findings += _versions(reader)
    findings += _trial_and_trackers(reader, config, kind)
    findings += _disk(reader, config, kind, start, end)
    order = {ERROR: 0, WARNING: 1, INFO: 2}
    findings.sort(key=lambda f: order[f.severity])
    return DoctorReport(
        os.path.abspath(path), list(command), kind, start, end, findings
    )
