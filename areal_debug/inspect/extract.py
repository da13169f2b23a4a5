# SPDX-License-Identifier: Apache-2.0
"""``areal-debug extract``: the smallest reproducer of one recorded step.

``DIR/recording`` is a valid recording of just what a replay of step N needs;
``DIR/test_replay_step_N.py`` replays it on CPU through AReaL's real actor and
asserts what can honestly be asserted:

- *faithful* (the whole step, and either step 0 or a kept recover checkpoint
  before it, with the steps between): the replay of step N starts from the same
  weights, optimizer state, RNG states and batch as the dump run, so every
  recorded statistic must come back bitwise (README, "Reproducing a failing
  step N");
- without a checkpoint the step is renumbered to step 0 and trains the model at
  ``actor.path`` as it is on disk, not the weights the dump run had at step N:
  only statistics of the batch itself (counts, lengths, rewards) are compared;
- with a subset of trajectories no recorded statistic applies: the test
  asserts the step runs and its statistics are finite.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from typing import Any

import yaml

from areal_debug.inspect.common import (
    InspectError,
    package_version,
    track,
)
from areal_debug.inspect.show import check_step
from areal_debug.logs import get_logger
from areal_debug.recording.atomic import (
    atomic_write_bytes,
    atomic_write_json,
    read_json,
)
from areal_debug.recording.checkpoints import KEPT, _TreeCopy, latest_before
from areal_debug.recording.format import MANIFEST, STEP_META, step_dirname
from areal_debug.recording.manifest import SINGLE_CONTROLLER, Manifest
from areal_debug.recording.reader import RecordingReader, format_ranges
from areal_debug.recording.writer import RecordingWriter

RECORDING = "recording"
CONFIG = "config.yaml"
SCRIPT = "replay.py"
MODEL_ENV = "AREAL_DEBUG_REPRO_MODEL"

# Statistics fixed by the batch alone (AReaL computes them before any forward
# pass): they must match whatever weights the replay starts from. Counts and
# extremes exactly; averages up to summation order.
BATCH_EXACT_SUFFIXES = ("n_seqs", "n_tokens", "n_valid_tokens", "/min", "/max")
HEADLINE = (
    "update/grad_norm",
    "update/actor_loss/avg",
    "task_reward/avg",
    "update/importance_weight/avg",
    "update/entropy/avg",
)
BATCH_PREFIXES = (
    "ppo_actor/n_seqs",
    "ppo_actor/n_tokens",
    "ppo_actor/n_valid_tokens",
    "ppo_actor/task_reward/",
    "ppo_actor/seq_len/",
    "ppo_actor/prompt_len/",
    "ppo_actor/correct_n_seqs",
    "ppo_actor/incorrect_n_seqs",
    "ppo_actor/correct_seq_len/",
    "ppo_actor/incorrect_seq_len/",
    "ppo_actor/no_eos_ratios/",
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


def batch_statistics(stats: dict[str, float]) -> tuple[dict, dict]:
    """(exact, close) statistics of ``stats`` that depend on the batch only."""
    exact, close = {}, {}
    for name, value in stats.items():
        if not name.startswith(BATCH_PREFIXES):
            continue
        (exact if name.endswith(BATCH_EXACT_SUFFIXES) else close)[name] = value
    return exact, close


def extract(
    path: str,
    step: int,
    out: str,
    trajectories: list[int] | None = None,
    use_checkpoint: bool = True,
) -> ExtractResult:
    """Write the reproducer of ``step`` of the recording at ``path`` into ``out``."""
    reader = RecordingReader(path)
    check_step(reader, step)
    if os.path.exists(out) and os.listdir(out):
        raise InspectError(
            f"{out} exists and is not empty; extract writes a fresh directory. "
            "Choose another -o or remove it."
        )
    total = reader.step_meta(step)["num_trajectories"]
    if trajectories is not None:
        bad = [t for t in trajectories if t >= total]
        if bad:
            raise InspectError(
                f"Step {step} has {total} trajectories (0-{total - 1}); "
                f"{format_ranges(bad)} do not exist."
            )
        if sorted(trajectories) == list(range(total)):
            trajectories = None  # all of them: the whole step
    plan = _plan(reader, step, use_checkpoint)
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


def _plan(reader: RecordingReader, step: int, use_checkpoint: bool) -> _Plan:
    """Which checkpoint and steps a faithful replay of ``step`` needs, if any."""
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
    else:
        why = "--no-checkpoint was given"
    note = (
        f"NOT A FAITHFUL REPLAY of step {step}: {why}. The extracted step trains "
        "the weights at actor.path, not the ones the dump run had at step "
        f"{step}; only statistics of the batch itself (counts, lengths, rewards) "
        "are compared with the recording."
    )
    return _Plan(None, [], {step: 0}, False, [note])


def _write_manifest(reader, rec, step, plan, trajectories, single) -> None:
    with open(os.path.join(reader.path, MANIFEST)) as f:
        raw = json.load(f)
    if single:
        raw["layout"] = {
            **raw["layout"],
            "num_shards": 1,
            "train_dp_size": 1,
            "world_size": 1,
        }
    raw["extracted_from"] = {
        "recording": os.path.abspath(reader.path),
        "step": step,
        "as_step": plan.renumber.get(step, step),
        "trajectories": trajectories,
        "checkpoint": plan.checkpoint,
        "faithful": plan.faithful and trajectories is None,
        "areal_debug_version": package_version("areal-debug"),
        "time": datetime.datetime.now(datetime.UTC).isoformat(),
    }
    Manifest.from_json(raw)  # what a reader will check
    # The raw dict, not Manifest.to_json: it keeps `extracted_from` (readers
    # ignore keys they do not know).
    atomic_write_json(os.path.join(rec, MANIFEST), raw)


def _copy_step(reader: RecordingReader, rec: str, step: int) -> None:
    """The step's files byte for byte (checksums checked first); step.json last."""
    for shard in range(reader.step_meta(step)["num_shards"]):
        reader.load_shard(step, shard)  # verifies checksum and safe loading
    reader.recorded_rng(step)
    if reader.manifest.recorded_teacher_logp:
        reader.recorded_teacher_logp(step)
    src = os.path.join(reader.path, step_dirname(step))
    dst = os.path.join(rec, step_dirname(step))
    names = sorted(n for n in os.listdir(src) if not n.startswith("."))
    for name in [n for n in names if n != STEP_META] + [STEP_META]:
        with open(os.path.join(src, name), "rb") as f:
            atomic_write_bytes(os.path.join(dst, name), f.read())


def _write_with_writer(
    reader, rec, step, target, shards: list[list], stats: dict | None, codec: str
) -> None:
    """Shards, RNG states and statistics as a dump run writes them (same writer)."""
    writers = [
        RecordingWriter(
            rec,
            shard=i,
            num_shards=len(shards),
            steps_per_epoch=reader.steps_per_epoch,
            compression=codec,
            writer_process=False,  # no training loop here to keep the GIL for
        )
        for i in range(len(shards))
    ]
    try:
        rng = reader.recorded_rng(step)
        if rng is not None:
            writers[0].submit_rng(target, rng["ranks"])
        if stats is not None:
            writers[0].submit_stats(target, stats["stats"], {}, {})
        for w, batch in zip(writers, shards):
            w.submit_batch(target, batch)
    finally:
        for w in writers:
            w.close()


def _codec(reader, step) -> str:
    return reader.step_meta(step)["shards"][0].get("codec", "none")


def _write_renumbered(reader: RecordingReader, rec: str, step: int, target: int):
    """The whole step as ``target``; only its batch statistics kept as recorded."""
    shards = [reader.load_shard(step, s) for s in range(reader.num_shards)]
    exact, close = batch_statistics(reader.recorded_stats(step) or {})
    _write_with_writer(
        reader,
        rec,
        step,
        target,
        shards,
        {"stats": {**exact, **close}},
        _codec(reader, step),
    )


def _write_subset(reader, rec, step, target, trajectories: list[int] | None):
    """Chosen trajectories of the global batch (all: ``None``) as one shard."""
    whole = [t for s in range(reader.num_shards) for t in reader.load_shard(step, s)]
    batch = whole if trajectories is None else [whole[i] for i in trajectories]
    stats = (
        None
        if trajectories is not None
        else {"stats": reader.recorded_stats(step) or {}}
    )
    # A subset keeps no recorded statistic: none of them describe this batch.
    _write_with_writer(
        reader, rec, step, target, [batch], stats or {"stats": {}}, _codec(reader, step)
    )


def _copy_checkpoint(src_recording: str, rec: str, ckpt: int) -> None:
    """The kept recover checkpoint, whole or not at all (as the dump keeps it)."""
    src = os.path.join(src_recording, KEPT, step_dirname(ckpt))
    info = os.path.join(src, "recover_info", "step_info.json")
    if not os.path.exists(info):
        raise InspectError(
            f"The kept checkpoint {src} has no recover_info/step_info.json: it is not "
            "whole. Extract with --no-checkpoint, or choose another step."
        )
    dst = os.path.join(rec, KEPT, step_dirname(ckpt))
    tmp = dst + ".partial"
    try:
        _TreeCopy().tree(src, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    os.replace(tmp, dst)


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


def _replay_yaml(reader: RecordingReader, plan, target: int) -> tuple[str, list[str]]:
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
            if model and obj == model and where != "actor.path":
                return "${actor.path}"
            if (
                fileroot
                and where != "cluster.fileroot"
                and (obj == fileroot or obj.startswith(fileroot.rstrip("/") + "/"))
            ):
                return "${cluster.fileroot}" + obj[len(fileroot.rstrip("/")) :]
        return obj

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
    header = (
        f"# The config of {reader.manifest.experiment_name}/"
        f"{reader.manifest.trial_name} as its manifest records it, made a replay of "
        f"step {target}\n# by areal-debug extract. The test sets cluster.fileroot, "
        "actor.path and debug.path.\n"
    )
    return header + yaml.safe_dump(cfg, sort_keys=True), dropped


_REPLAY_SCRIPT = '''\
# SPDX-License-Identifier: Apache-2.0
"""Replays the extracted recording: AReaL's PPO trainer, no dataset, no inference.

Written by areal-debug extract. Usage (the test runs it):
    torchrun --nproc-per-node N replay.py --config config.yaml [key=value ...]
"""

import sys

from areal.api.cli_args import GRPOConfig

from areal_debug import DebugPPOTrainer, load_expr_config

if __name__ == "__main__":
    config, _ = load_expr_config(sys.argv[1:], GRPOConfig)
    # Replay mode reads no dataset and runs no workflow: the recording stands in.
    with DebugPPOTrainer(config, train_dataset=None) as trainer:
        trainer.train(None)
'''


def _payload_hashes(rec: str) -> dict[str, str]:
    """{'step-N/file': sha256} of every payload in the extracted recording."""
    out = {}
    for name in sorted(os.listdir(rec)):
        meta = os.path.join(rec, name, STEP_META)
        if not os.path.exists(meta):
            continue
        data = read_json(meta, "step metadata")
        entries = list(data["shards"]) + (
            [data["teacher_logp"]] if data.get("teacher_logp") else []
        )
        for e in entries:
            out[f"{name}/{e['file']}"] = e["sha256"]
    return out


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
    rec = os.path.join(out, RECORDING)
    config_text, dropped = _replay_yaml(reader, plan, target)
    atomic_write_bytes(os.path.join(out, CONFIG), config_text.encode())
    atomic_write_bytes(os.path.join(out, SCRIPT), _REPLAY_SCRIPT.encode())
    m = reader.manifest
    model = (m.config.get("actor") or {}).get("path") or ""
    layout = m.layout
    nproc = (
        1 if single or layout.mode == SINGLE_CONTROLLER else (layout.world_size or 1)
    )
    stats = reader.recorded_stats(step) or {}
    from areal_debug.compare.statistics import training_stats

    finite = _finite_names(training_stats(stats))
    notes = []
    if dropped:
        notes.append(
            f"Config keys of the recorded run's own config class, not AReaL's "
            f"GRPOConfig, were dropped: {dropped}. If your trainer reads them, "
            "replay with your own script instead of replay.py."
        )
    what = "the whole step" if trajectories is None else f"trajectories {trajectories}"
    text = _TEST_TEMPLATE.format(
        step=step,
        target=target,
        experiment=m.experiment_name,
        trial=m.trial_name,
        source=os.path.abspath(reader.path),
        version=package_version("areal-debug"),
        what=what,
        when=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        asserts=_wrap(asserts),
        notes="".join(f"\n{_wrap('NOTE: ' + n)}\n" for n in notes + plan.notes),
        model=model,
        env=MODEL_ENV,
        nproc=nproc,
        mode=layout.mode,
        faithful=faithful,
        subset=trajectories is not None,
        checkpoint=plan.checkpoint,
        payloads=_pyrepr(_payload_hashes(rec)),
        exact=_pyrepr(exact),
        close=_pyrepr(close),
        finite=_pyrepr(finite),
        dirname_hint=os.path.abspath(out),
    )
    path = os.path.abspath(os.path.join(out, f"test_replay_step_{step}.py"))
    atomic_write_bytes(path, text.encode())
    return path


def _wrap(text: str, width: int = 84) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def _pyrepr(obj: Any) -> str:
    """A Python literal of plain JSON values, one entry a line for dicts/lists."""
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        return "{\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in obj.items()) + "}"
    if isinstance(obj, list):
        if not obj:
            return "[]"
        return "[\n" + "".join(f"    {v!r},\n" for v in obj) + "]"
    return repr(obj)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


_TEST_TEMPLATE = '''\
# SPDX-License-Identifier: Apache-2.0
"""Reproducer: step {step} of {experiment}/{trial} ({what}), replayed on CPU.

Extracted by areal-debug {version} on {when} from
{source}
The step is numbered {target} in ./recording. Run it from anywhere:

    python -m pytest -q {dirname_hint}

It replays ./recording with ./replay.py (AReaL's PPO trainer, no inference engine)
under torchrun, in a temporary directory, and checks the replay's report.

What it asserts, and why:
{asserts}
{notes}
Model: {model}
(the dump run's actor.path; set {env}=/path/to/the/same/model to use another copy).
"""

import glob
import json
import math
import os
import subprocess
import sys

import pytest

from areal_debug.testing import end_process, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDING = os.path.join(HERE, "recording")
CONFIG = os.path.join(HERE, "config.yaml")
SCRIPT = os.path.join(HERE, "replay.py")
MODEL = os.environ.get("{env}", {model!r})
STEP = {target}  # as numbered in ./recording
NPROC = {nproc}
MODE = {mode!r}
FAITHFUL = {faithful}
SUBSET = {subset}
TIMEOUT = 1200

# sha256 of every payload as extracted: the recorded statistics below belong to
# exactly these batches, so a changed payload (even with fixed checksums) fails.
PAYLOADS = {payloads}

# Recorded statistics the replay must reproduce exactly.
EXACT = {exact}

# Averages over the same batch, as recorded: compared to 1e-6 (summation order).
CLOSE = {close}

# Statistics that were finite in the recording.
FINITE = {finite}


def _check_payloads():
    """Checksums, safe loading, and the payloads being the extracted ones."""
    from areal_debug.recording.reader import RecordingReader

    reader = RecordingReader(RECORDING)
    assert STEP in reader.available_steps(), reader.available_steps()
    found = {{}}
    for step in reader.available_steps():
        meta = reader.step_meta(step)
        for shard, entry in enumerate(meta["shards"]):
            reader.load_shard(step, shard)  # raises on a checksum mismatch
            found[f"step-{{step:06d}}/{{entry['file']}}"] = entry["sha256"]
    changed = {{k: v for k, v in found.items() if PAYLOADS.get(k) != v}}
    assert not changed and set(found) == set(PAYLOADS), (
        f"the payloads are not the ones extracted (changed: {{sorted(changed)}}); "
        "the recorded statistics this test checks belong to the extracted batches"
    )


def test_extracted_payloads_are_intact():
    _check_payloads()


def _replay(tmp_path):
    root = tmp_path / "root"
    os.makedirs(root / "name_resolve", exist_ok=True)
    overrides = [
        f"cluster.fileroot={{root}}",
        f"actor.path={{MODEL}}",
        f"debug.path={{RECORDING}}",
    ]
    env = {{**os.environ, "OMP_NUM_THREADS": "1"}}
    env.pop("AREAL_LLM_SERVER_ADDRS", None)
    if MODE == "spmd":
        env["AREAL_SPMD_MODE"] = "1"
        launch = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={{NPROC}}",
            f"--master-port={{free_port()}}",
        ]
    else:
        env.pop("AREAL_SPMD_MODE", None)
        launch = [sys.executable]
    cmd = [*launch, SCRIPT, "--config", CONFIG, *overrides]
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
    tail = "\\n".join(log.read_text(errors="replace").splitlines()[-40:])
    assert rc == 0, f"the replay failed (exit {{rc}}); {{log}} ends with:\\n{{tail}}"
    reports = glob.glob(str(root / "logs" / "*" / "*" / "*" / "replay_report.json"))
    assert len(reports) == 1, f"expected one replay report, found {{reports}}\\n{{tail}}"
    with open(reports[0]) as f:
        return json.load(f)


def test_replay_of_step_{target}(tmp_path):
    _check_payloads()  # before starting any process
    if os.path.isabs(MODEL) and not os.path.isdir(MODEL):
        pytest.fail(
            f"The model {{MODEL}} is not on this machine. Set {env} to a copy of "
            "the dump run's model (same architecture and tokenizer)."
        )
    report = _replay(tmp_path)
    steps = {{e["global_step"]: e for e in report["steps"]}}
    assert STEP in steps, f"step {{STEP}} was not replayed: {{sorted(steps)}}"
    entry = steps[STEP]
    metrics = entry["metrics"]
    if FAITHFUL:
        first = report["summary"]["first_divergence"]
        assert entry["status"] == "identical", (
            f"step {{STEP}} diverged from the recording: {{first}}"
        )
    for name, value in EXACT.items():
        assert metrics[name]["replayed"] == value, (name, metrics[name], value)
    for name, value in CLOSE.items():
        got = metrics[name]["replayed"]
        assert math.isclose(got, value, rel_tol=1e-6, abs_tol=1e-9), (name, got, value)
    for name in FINITE:
        if name in metrics and "replayed" in metrics[name]:
            assert math.isfinite(metrics[name]["replayed"]), (name, metrics[name])
'''
