# SPDX-License-Identifier: Apache-2.0
"""``areal-debug extract``: the smallest reproducer of one recorded step.

``DIR/recording`` is a valid recording of just what a replay of step N needs;
``DIR/test_replay_step_N.py`` replays it on CPU through AReaL's real actor and
asserts what can honestly be asserted:

- *faithful* (the whole step, and either step 0 or a kept recover checkpoint
  before it, with the steps between): the replay of step N starts from the same
  weights, optimizer state, RNG states and batch as the dump run, so every
  recorded statistic must come back bitwise (docs/reproducing.md, "Replay to
  step N, or from it");
- without a checkpoint the step is renumbered to step 0 and trains the model at
  ``actor.path`` as it is on disk, not the weights the dump run had at step N:
  only statistics of the batch itself (counts, lengths, rewards) are compared;
- with a subset of trajectories no recorded statistic applies: the test
  asserts the step runs and its statistics are finite.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from areal_debug.inspect.common import (
    InspectError,
    track,
)
from areal_debug.inspect.reproducer import model_source
from areal_debug.inspect.reproducer.recording_copy import (
    _copy_checkpoint,
    _copy_step,
    _write_manifest,
    _write_renumbered,
    _write_subset,
    batch_statistics,
)
from areal_debug.inspect.show import check_step
from areal_debug.logs import get_logger
from areal_debug.recording.atomic import atomic_write_bytes, atomic_write_json
from areal_debug.recording.checkpoints import latest_before
from areal_debug.recording.format import step_dirname
from areal_debug.recording.manifest import SINGLE_CONTROLLER
from areal_debug.recording.reader import RecordingReader, format_ranges
from areal_debug.testing import config_literal
from areal_debug.version import areal_debug_version

RECORDING = "recording"
CONFIG = "config.yaml"
SCRIPT = "replay.py"
# The fixed test (package data), written as test_replay_step_N.py.
TEST = "test_replay.py"
# Everything recorded that the test needs, as data (JSON), and the same in words.
SPEC = "reproducer.json"
README = "README.md"
REPRODUCER_FORMAT = 1
REPRODUCER_FILES = Path(__file__).resolve().parent / "files"
MODEL_ENV = "AREAL_DEBUG_REPRO_MODEL"
# Config keys the generated test sets in its own copy of config.yaml.
SET_BY_TEST = ("cluster.fileroot", "actor.path", "debug.path")
# The reproducer's own run names (the recorded ones are in reproducer.json).
REPRO_EXPERIMENT = "areal-debug-repro"
# Recorded text in README.md: a path that is not valid UTF-8 stays readable.
TEXT = ("utf-8", "backslashreplace")

HEADLINE = (
    "update/grad_norm",
    "update/actor_loss/avg",
    "task_reward/avg",
    "update/importance_weight/avg",
    "update/entropy/avg",
)

logger = get_logger("DebugInspect")


@dataclass
class ExtractResult:
    out: str
    recording: str
    test_file: str
    source: str
    source_step: int
    # The step as numbered in the extracted recording (0 when renumbered).
    step: int
    trajectories: list[int] | None
    checkpoint: int | None
    steps_written: list[int]
    faithful: bool
    asserts: str
    notes: list[str] = field(default_factory=list)
    size_bytes: int = 0


def extract(
    path: str,
    step: int,
    out: str,
    trajectories: list[int] | None = None,
    use_checkpoint: bool = True,
    alone: bool = False,
) -> ExtractResult:
    """Write the reproducer of ``step`` of the recording at ``path`` into ``out``.
    ``use_checkpoint``: start from the latest kept checkpoint before it, if any;
    else from step 0 through the recorded steps before it. ``alone``: the step
    by itself, renumbered to step 0 (smallest; not faithful)."""
    reader = RecordingReader(path)
    check_step(reader, step)
    if os.path.exists(out) and os.listdir(out):
        raise InspectError(
            f"{out} exists and is not empty; extract writes a fresh directory. "
            "Choose another -o or remove it."
        )
    total = reader.step_meta(step).num_trajectories
    if trajectories is not None:
        bad = [t for t in trajectories if t >= total]
        if bad:
            raise InspectError(
                f"Step {step} has {total} trajectories (0-{total - 1}); "
                f"{format_ranges(bad)} do not exist."
            )
        if sorted(trajectories) == list(range(total)):
            trajectories = None  # all of them: the whole step
    plan = _plan(reader, step, use_checkpoint and not alone, not alone)
    # Said once, in the result and in the reproducer's notes alike.
    plan.notes.extend(_model_notes(reader.manifest.config))
    rec = os.path.join(out, RECORDING)
    os.makedirs(rec, exist_ok=True)
    subset = trajectories is not None
    single = subset and reader.num_shards > 1
    notes = list(plan.notes)
    if single:
        notes.append(
            f"The recording has {reader.num_shards} shards per step; a subset is "
            "written as one shard and replays on one process (the recorded RNG "
            "states of several processes are then not restored)."
        )
    _write_manifest(reader, rec, step, plan, trajectories, single)
    written = []
    todo = [*plan.between, step]
    for s in track(todo, "Extracting steps", len(todo)):
        target = plan.renumber.get(s, s)
        if s == step and subset:
            _write_subset(reader, rec, s, target, trajectories)
        elif single:
            _write_subset(reader, rec, s, target, None)
        elif target != s:
            _write_renumbered(reader, rec, s, target)
        else:
            _copy_step(reader, rec, s)
        written.append(target)
    if plan.checkpoint is not None:
        _copy_checkpoint(reader.path, rec, plan.checkpoint)
    target_step = plan.renumber.get(step, step)
    faithful = plan.faithful and not subset
    asserts, exact, close = _what_to_assert(reader, step, plan, subset)
    if plan.renumber:
        notes.append(
            f"Step {step} is written as step {target_step}: without a checkpoint, a "
            f"replay can only start at step 0, from the weights at actor.path."
        )
    test_file = _write_reproducer(
        out,
        reader,
        step,
        target_step,
        plan,
        trajectories,
        faithful,
        asserts,
        exact,
        close,
        single,
    )
    size = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs
    )
    logger.info(f"Extracted step {step} of {reader.path} into {out}.")
    return ExtractResult(
        out=os.path.abspath(out),
        recording=os.path.abspath(rec),
        test_file=test_file,
        source=os.path.abspath(reader.path),
        source_step=step,
        step=target_step,
        trajectories=trajectories,
        checkpoint=plan.checkpoint,
        steps_written=written,
        faithful=faithful,
        asserts=asserts,
        notes=notes,
        size_bytes=size,
    )


@dataclass
class _Plan:
    checkpoint: int | None
    between: list[int]  # whole steps after the checkpoint, before the target
    renumber: dict[int, int]
    faithful: bool
    notes: list[str]


def _plan(
    reader: RecordingReader, step: int, use_checkpoint: bool, from_start: bool
) -> _Plan:
    """Which checkpoint and steps a faithful replay of ``step`` needs: the latest
    kept checkpoint before it and the steps after that one, else (``from_start``)
    every step from 0, trained from the initial model; else the step alone,
    renumbered to step 0 (not faithful)."""
    if step == 0:
        # Step 0 trains the initial model at actor.path: no checkpoint needed.
        return _Plan(None, [], {}, True, [])
    ckpt = latest_before(reader.path, step) if use_checkpoint else None
    if ckpt is not None:
        between = list(range(ckpt + 1, step))
        missing = [s for s in between if not reader.has_step(s)]
        if not missing:
            notes = []
            if between:
                notes.append(
                    f"The latest kept checkpoint before step {step} is that of step "
                    f"{ckpt}: steps {format_ranges(between)} are extracted too, to "
                    f"train the policy from there to step {step}."
                )
            return _Plan(ckpt, between, {}, True, notes)
        why = (
            f"the kept checkpoint of step {ckpt} needs steps "
            f"{format_ranges(missing)}, which are not in the recording"
        )
    elif use_checkpoint:
        why = "the recording keeps no recover checkpoint before it (recover.mode=on)"
    elif from_start:
        why = "--no-checkpoint was given"
    else:
        why = "--alone was given"
    before = list(range(step))
    missing = [s for s in before if not reader.has_step(s)]
    if from_start and not missing:
        return _Plan(None, before, {}, True, [_from_start_note(reader, step, why)])
    if from_start:
        why += (
            f", and steps {format_ranges(missing)} before it are not in the "
            "recording (a flight recorder deletes old steps; pin the ones to keep)"
        )
    note = (
        f"NOT A FAITHFUL REPLAY of step {step}: {why}. The extracted step trains "
        "the weights at actor.path, not the ones the dump run had at step "
        f"{step}; only statistics of the batch itself (counts, lengths, rewards) "
        "are compared with the recording."
    )
    return _Plan(None, [], {step: 0}, False, [note])


def _from_start_note(reader: RecordingReader, step: int, why: str) -> str:
    """What replaying from step 0 costs, said where it is chosen."""
    size = sum(
        os.path.getsize(os.path.join(d, f))
        for s in range(step)
        for d, _, fs in os.walk(os.path.join(reader.path, step_dirname(s)))
        for f in fs
    )
    return (
        f"No kept checkpoint to start step {step} from ({why}): steps "
        f"{format_ranges(list(range(step)))} are extracted too ({size / 2**20:.1f} "
        f"MiB more) and the test trains all {step + 1} steps from the initial model "
        "at actor.path, so step "
        f"{step} comes back faithfully. --alone writes the step by itself instead "
        "(as step 0: smaller and quicker, not faithful)."
    )


def _what_to_assert(reader, step, plan, subset) -> tuple[str, dict, dict]:
    stats = reader.recorded_stats(step) or {}
    if subset:
        return (
            "A subset of the step's trajectories: the recorded statistics describe "
            "the whole batch, so none of them applies. The test asserts that the "
            "step trains and that every statistic that was finite in the recording "
            "is finite in the replay.",
            {},
            {},
        )
    if plan.faithful:
        # Pinned in the test itself too: the report compares with stats.json,
        # which sits next to the payload and could be edited with it.
        headline = {
            k: v
            for k, v in stats.items()
            if k.endswith(HEADLINE) and isinstance(v, float) and v == v
        }
        how = (
            "the initial model at actor.path (step 0)"
            if plan.checkpoint is None
            else f"the dump run's recover checkpoint of step {plan.checkpoint}"
        )
        return (
            f"Faithful: the whole step, its RNG states and {how}. The replay starts "
            "from the same weights, optimizer state and batch as the dump run, so "
            "every recorded statistic must come back bitwise (the replay's report "
            "says 'identical').",
            headline,
            {},
        )
    exact, close = batch_statistics(stats)
    return (
        "Not faithful: the weights differ from the dump run's at this step, so "
        "losses, gradient norms, importance weights and log-probs are not "
        "compared. Only statistics of the batch itself are: counts and extremes "
        "exactly, averages to 1e-6.",
        exact,
        close,
    )


def _finite_names(stats: dict[str, float]) -> list[str]:
    import math

    return sorted(k for k, v in stats.items() if math.isfinite(v))


def _replay_yaml(
    reader: RecordingReader, plan, target: int
) -> tuple[str, list[str], list[str]]:
    """The dump run's config as a replay config for AReaL's GRPOConfig.

    Paths under the recorded fileroot become ``${cluster.fileroot}``, copies of
    the model path ``${actor.path}``, so the test moves both with one override.
    """
    from areal.api.cli_args import GRPOConfig

    cfg = json.loads(json.dumps(reader.manifest.config))
    import dataclasses

    known = {f.name for f in dataclasses.fields(GRPOConfig)} | {"debug"}
    dropped = sorted(k for k in cfg if k not in known)
    for k in dropped:
        del cfg[k]
    fileroot = (cfg.get("cluster") or {}).get("fileroot")
    model = (cfg.get("actor") or {}).get("path")

    def rewrite(obj, where: str):
        if isinstance(obj, dict):
            return {
                k: rewrite(v, f"{where}.{k}" if where else k) for k, v in obj.items()
            }
        if isinstance(obj, list):
            return [rewrite(v, where) for v in obj]
        if isinstance(obj, str):
            # Recorded text stays text: OmegaConf would read a recorded "${...}"
            # as an interpolation. Only the two references below are ours.
            if model and obj == model and where != "actor.path":
                return "${actor.path}"
            if (
                fileroot
                and where != "cluster.fileroot"
                and (obj == fileroot or obj.startswith(fileroot.rstrip("/") + "/"))
            ):
                rest = obj[len(fileroot.rstrip("/")) :]
                return "${cluster.fileroot}" + config_literal(_utf8(rest, where, notes))
            return config_literal(_utf8(obj, where, notes))
        return obj

    notes: list[str] = []
    cfg = rewrite(cfg, "")
    debug = dict(cfg.get("debug") or {})
    debug.update(
        dump_rollout_data=False,
        replay_rollout_data=True,
        path=None,
        replay_trial_name=None,
        replay_start_step=target if plan.checkpoint is not None else None,
        replay_end_step=target,
        restore_rng=True,
        fail_on_divergence=False,
        verify_rtol=0.0,
        verify_atol=0.0,
        keep_last_steps=None,
        max_disk_gb=None,
        pin_steps=[],
        # Its step replays as recorded; blame it with debug.blame_steps=N.
        blame_steps="",
    )
    cfg["debug"] = debug
    cfg["total_train_steps"] = target + 1
    # A reproducer never writes to the recorded run's trackers, nor saves.
    logger_cfg = cfg.get("stats_logger") or {}
    for tracker in ("wandb", "swanlab", "trackio"):
        if isinstance(logger_cfg.get(tracker), dict):
            logger_cfg[tracker]["mode"] = "disabled"
    if isinstance(logger_cfg.get("tensorboard"), dict):
        logger_cfg["tensorboard"]["path"] = None
    for section in ("recover", "saver", "evaluator"):
        if isinstance(cfg.get(section), dict):
            for key in ("freq_epochs", "freq_steps", "freq_secs"):
                if key in cfg[section]:
                    cfg[section][key] = None
    # The replay is a run of its own: names of its own, so no recorded name
    # becomes a directory of the replay (a name may hold "/" or ".."). Every
    # section's copy of a name (saver, recover, stats_logger, ...) follows.
    _rename(cfg, "experiment_name", reader.manifest.experiment_name, REPRO_EXPERIMENT)
    _rename(cfg, "trial_name", reader.manifest.trial_name, f"step-{target}")
    cfg["experiment_name"], cfg["trial_name"] = REPRO_EXPERIMENT, f"step-{target}"
    # No recorded text in the comment: a recorded newline would end it.
    header = (
        "# The recorded run's config (reproducer.json names the run) made a replay\n"
        "# by areal-debug extract. The test sets cluster.fileroot, actor.path and\n"
        "# debug.path in a copy of its own; read it with yaml.safe_load.\n"
    )
    return header + yaml.safe_dump(cfg, sort_keys=True), dropped, notes


def _rename(cfg: Any, key: str, old: str, new: str) -> None:
    """Set ``key`` to ``new`` wherever in ``cfg`` it holds ``old`` (as recorded,
    or as ``config_literal`` escaped it)."""
    if isinstance(cfg, dict):
        for k, v in cfg.items():
            if k == key and (v == old or v == config_literal(old)):
                cfg[k] = new
            else:
                _rename(v, key, old, new)
    elif isinstance(cfg, list):
        for v in cfg:
            _rename(v, key, old, new)


def _utf8(text: str, where: str, notes: list[str]) -> str:
    """``text``, or where it is not valid UTF-8 (a file name read as the OS gives
    it) its bytes as backslash escapes, with a note: AReaL's config loading reads
    no YAML form of such text."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "surrogateescape").decode(
            "utf-8", "backslashreplace"
        )
        notes.append(
            f"{where} is not valid UTF-8; config.yaml holds it as {shown!r}"
            + (" (the test sets it)" if where in SET_BY_TEST else "")
        )
        return shown


def _payload_hashes(rec: str) -> dict[str, str]:
    """{'step-N/file': sha256} of every payload in the extracted recording."""
    reader = RecordingReader(rec)
    return {
        f"{step_dirname(step)}/{entry.file}": entry.sha256
        for step in reader.available_steps()
        for entry in reader.step_meta(step).payloads
    }


def _write_reproducer(
    out,
    reader,
    step,
    target,
    plan,
    trajectories,
    faithful,
    asserts,
    exact,
    close,
    single,
) -> str:
    """The reproducer's files: the fixed test and replay script (package data,
    the same for every extract), and what was recorded as data beside them:
    ``reproducer.json`` (read by the test), ``config.yaml`` (a YAML emitter's,
    read with ``safe_load``) and ``README.md`` (words for a person)."""
    rec = os.path.join(out, RECORDING)
    config_text, dropped, config_notes = _replay_yaml(reader, plan, target)
    atomic_write_bytes(os.path.join(out, CONFIG), config_text.encode())
    with open(REPRODUCER_FILES / SCRIPT, "rb") as f:
        atomic_write_bytes(os.path.join(out, SCRIPT), f.read())
    m = reader.manifest
    layout = m.layout
    stats = reader.recorded_stats(step) or {}
    from areal_debug.compare.statistics import training_stats

    notes = list(plan.notes) + config_notes
    if dropped:
        notes.append(
            f"Config keys of the recorded run's own config class, not AReaL's "
            f"GRPOConfig, were dropped: {dropped}. If your trainer reads them, "
            "replay with your own script instead of replay.py."
        )
    spec = {
        "reproducer_format": REPRODUCER_FORMAT,
        "extracted_by": f"areal-debug {areal_debug_version()}",
        "extracted_at": datetime.datetime.now(datetime.UTC).isoformat(),
        "source": {
            "recording": os.path.abspath(reader.path),
            "experiment": m.experiment_name,
            "trial": m.trial_name,
            "step": step,
            "trajectories": trajectories,
        },
        "step": target,
        "nproc": 1
        if single or layout.mode == SINGLE_CONTROLLER
        else (layout.world_size or 1),
        "mode": layout.mode,
        "faithful": faithful,
        "subset": trajectories is not None,
        "checkpoint": plan.checkpoint,
        "model": (m.config.get("actor") or {}).get("path") or "",
        "model_env": MODEL_ENV,
        "asserts": asserts,
        "notes": notes,
        "payloads": _payload_hashes(rec),
        "exact": exact,
        "close": close,
        "finite": _finite_names(training_stats(stats)),
    }
    atomic_write_json(os.path.join(out, SPEC), spec)
    atomic_write_bytes(os.path.join(out, README), _readme(spec, out).encode(*TEXT))
    path = os.path.abspath(os.path.join(out, f"test_replay_step_{int(step)}.py"))
    with open(REPRODUCER_FILES / TEST, "rb") as f:
        atomic_write_bytes(path, f.read())
    return path


def _model_notes(config: dict) -> list[str]:
    """What the reproducer will refuse to load unasked (model_source.check), said
    at extract time: a hub name, or a local model carrying custom code."""
    try:
        model_source.check(model_source.model_sources(config), False, False)
    except model_source.UntrustedModelError as e:
        return [
            " ".join(str(e).split("\n- ", 1)[1].split("\n- "))
            + " (The generated test stops before starting any process.)"
        ]
    return []


def _readme(spec: dict, out: str) -> str:
    """What the reproducer asserts and why, in words (a text file: nothing here
    is ever run, so recorded text may stand in it as it is)."""
    src = spec["source"]
    what = (
        "the whole step"
        if src["trajectories"] is None
        else f"trajectories {format_ranges(src['trajectories'])}"
    )
    lines = [
        f"# Reproducer of step {src['step']} ({what})",
        "",
        f"- run: {src['experiment']}/{src['trial']}",
        f"- recording: {src['recording']}",
        f"- extracted by {spec['extracted_by']} at {spec['extracted_at']}",
        f"- the step is numbered {spec['step']} in ./recording",
        f"- model: {spec['model']} (the dump run's actor.path; set "
        f"{spec['model_env']}=/path/to/the/same/model to use another copy)",
        "",
        "Run it:",
        "",
        f"    python -m pytest -q {shlex.quote(os.path.abspath(out))}",
        "",
        "## What it asserts, and why",
        "",
        _wrap(spec["asserts"]),
        *(f"\n{_wrap('NOTE: ' + n)}" for n in spec["notes"]),
        "",
        "The test and replay.py are the same for every extract; everything recorded",
        "is read from reproducer.json.",
        "",
    ]
    return "\n".join(lines)


def _wrap(text: str, width: int = 84) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))
