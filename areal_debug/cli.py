# SPDX-License-Identifier: Apache-2.0
"""The ``areal-debug`` command: look into and check recordings and replays.

areal-debug ls [ROOT]          recordings under a fileroot and their replays
areal-debug inspect PATH       what a recording holds, step by step
areal-debug show PATH --step N one step, trajectory by trajectory
areal-debug diff A [B]         where two recordings or replays first differ
areal-debug plot A [B] -o PNG  per-step statistics of one or two runs, one picture
areal-debug mismatch PATH      the training-inference mismatch of each step
areal-debug extract PATH ...   one step as a self-contained reproducer with a test
areal-debug doctor PATH -- CMD pre-flight checks of a replay or resume command
areal-debug verify PATH        check every payload's checksum and safe loading
areal-debug report PATH -o F   one HTML page: charts, steps, trajectories, tokens
areal-debug demo               record a real GRPO run on CPU and replay it

The logic of each lives in ``areal_debug.inspect``; this module parses arguments
and writes the results (tables, or JSON with ``--json``) to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

from areal_debug.recording.format import STATS, RecordingError, step_dirname
from areal_debug.recording.lock import describe
from areal_debug.recording.reader import RecordingReader, format_ranges


def cmd_inspect(args) -> int:
    reader = RecordingReader(args.path)
    m = reader.manifest
    layout = m.layout
    print(f"recording   {reader.path}")
    print(
        f"format      v{m.format_version} (areal-debug {m.areal_debug_version or '?'}, "
        f"areal {m.areal_version or '?'}, torch {m.torch_version or '?'})"
    )
    print(f"run         {m.experiment_name}/{m.trial_name}, created {m.created}")
    print(
        f"layout      {layout.mode}, world size {layout.world_size or '?'}, "
        f"training data-parallel size {layout.training_dp_size}, "
        f"{reader.num_shards} shard(s) per step, {reader.steps_per_epoch} steps/epoch"
    )
    writer = reader.writer()
    if writer is not None:
        print(
            f"writing     a dump run is still recording ({describe(writer)}): "
            "only complete steps are listed"
        )
    steps = reader.available_steps()
    print(
        f"steps       {format_ranges(steps)} complete"
        + (
            f"; incomplete: {format_ranges(reader.incomplete_steps())}"
            if reader.incomplete_steps()
            else ""
        )
    )
    for stop in reader.stopped():
        print(
            f"stopped     shard {stop.get('shard')} stopped recording at step "
            f"{stop.get('step')}: {stop.get('error')} ({stop.get('time')}); "
            f"{reader.stop_consequence(stop)}"
        )
    print()
    print(
        f"{'step':>6} {'epoch':>5} {'trajs':>6} {'tokens':>9} {'versions':>9} {'MiB':>8}  stats"
    )
    for step in steps:
        meta = reader.step_meta(step)
        size = sum(s["bytes"] for s in meta["shards"]) / 2**20
        v = meta.get("policy_version")
        versions = f"{v[0]}-{v[1]}" if v else "-"
        has_stats = os.path.exists(os.path.join(reader.path, step_dirname(step), STATS))
        print(
            f"{step:>6} {meta['epoch']:>5} {meta['num_trajectories']:>6} {meta['num_tokens']:>9} "
            f"{versions:>9} {size:>8.2f}  {'yes' if has_stats else 'no'}"
        )
    return 0


def cmd_verify(args) -> int:
    from areal_debug.inspect.common import track

    reader = RecordingReader(args.path)
    writer = reader.writer()
    steps = reader.available_steps()
    checked, problems = 0, []
    for step in track(steps, "verifying", total=len(steps)):
        files, found = reader.verify_step(step)
        checked += files
        problems += found
    bad_files = len(problems)
    if writer is not None:
        # Steps after the last complete one are being written, not broken.
        print(
            f"NOTE a dump run is still recording ({describe(writer)}): "
            f"verified the {len(steps)} steps complete when verify started"
        )
    for step in reader.incomplete_steps():
        if writer is not None and step > max(steps, default=-1):
            print(f"NOTE step {step} is being written")
            continue
        problems.append(
            f"step {step} is incomplete (no step.json): a head did not finish "
            "writing it; replay cannot use it."
        )
    for stop in reader.stopped():
        # Not a defect of the recording: what was recorded before is whole.
        print(
            f"NOTE shard {stop.get('shard')} stopped recording at step "
            f"{stop.get('step')}: {stop.get('error')}; {reader.stop_consequence(stop)}"
        )
    for p in problems:
        print(f"FAIL {p}")
    print(
        f"{checked - bad_files}/{checked} files of {len(steps)} steps verified; "
        f"{len(problems)} problem(s)."
    )
    return 1 if problems else 0


def cmd_demo(args) -> int:
    from areal_debug.tooling.demo import DemoError, run_demo

    try:
        return run_demo(
            args.workdir,
            steps=args.steps,
            nproc=args.nproc,
            single_controller=args.single_controller,
            overrides=tuple(args.overrides),
            logprob_fault=args.logprob_fault,
        )
    except DemoError as e:
        print(f"areal-debug demo: {e}", file=sys.stderr)
        return 1


# -- the inspection commands ------------------------------------------------------------
def _emit(args, data, renderable=None) -> None:
    """Write a result: JSON with --json, else the rich view."""
    from areal_debug.inspect.common import to_jsonable

    if getattr(args, "json", False) or renderable is None:
        print(json.dumps(to_jsonable(data), indent=1, default=str))
        return
    from rich.console import Console

    # At a terminal rich fits its width; piped, 120 columns keep tables readable.
    # Not cropped: a line rendered wider (a path, never folded) stays whole.
    Console(width=None if sys.stdout.isatty() else 120).print(renderable, crop=False)


@contextlib.contextmanager
def _logs_to_stderr():
    """AReaL's loggers write to stdout; while a command computes, they go to stderr
    so that stdout holds only the command's output (clean --json)."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def cmd_ls(args) -> int:
    with _logs_to_stderr():
        from areal_debug.inspect import listing, render

        found = listing.list_recordings(args.root)
    _emit(args, found, render.listing(found))
    return 0


def cmd_show(args) -> int:
    from areal_debug.inspect.common import parse_int_list

    with _logs_to_stderr():
        from areal_debug.inspect import render, show

        view = show.view_step(
            args.path,
            args.step,
            shard=args.shard,
            trajectories=parse_int_list(args.traj, "--traj"),
            decode=args.decode or args.tokenizer is not None,
            tokenizer=args.tokenizer,
        )
    if args.json and not args.full:
        # Token ids are bulky; --full keeps them.
        for t in view.trajectories:
            for s in t.sequences:
                s.prompt_ids, s.completion_ids = [], []
    _emit(args, view, render.show(view, args.full))
    return 0


def cmd_diff(args) -> int:
    with _logs_to_stderr():
        from areal_debug.inspect import diff, render

        result = diff.diff(args.a, args.b)
    if isinstance(result, diff.RecordingDiff):
        _emit(args, result, render.recording_diff(result))
        return (
            0
            if result.first is None
            and not (result.steps_only_in_a or result.steps_only_in_b)
            else 3
        )
    _emit(args, result, render.run_diff(result, args.all, args.metric))
    return 0 if result.first_divergence is None else 3


def cmd_plot(args) -> int:
    with _logs_to_stderr():
        from areal_debug.inspect import plot, plot_recording, render
        from areal_debug.inspect.common import is_recording

        if args.b is None and is_recording(args.a):
            # One recording alone: its recorded run, pins and incomplete steps.
            result = plot_recording.plot_recording(
                args.a, args.output, args.metric, args.title
            )
        else:
            result = plot.plot(args.a, args.b, args.output, args.metric, args.title)
    if isinstance(result, plot_recording.RecordingPlotResult):
        from rich.text import Text

        _emit(args, result, Text(plot_recording.summary(result)))
    else:
        _emit(args, result, render.plot_result(result))
    return 0


def cmd_report(args) -> int:
    with _logs_to_stderr():
        from areal_debug.inspect import html_report

        result = html_report.build_report(
            args.recording,
            args.replay,
            args.output,
            steps=args.steps,
            max_per_step=args.max_per_step,
            max_tokens=args.max_tokens,
            tokenizer=args.tokenizer,
        )
    from rich.text import Text

    _emit(args, result, Text(html_report.summary(result)))
    return 0


def cmd_mismatch(args) -> int:
    from areal_debug.inspect.common import (
        InspectError,
        parse_steps,
        replay_report_at,
        require_path,
    )

    with _logs_to_stderr():
        from areal_debug.inspect import render
        from areal_debug.stages import mismatch

        reader = RecordingReader(require_path(args.recording, "The recording"))
        if args.top is not None:
            worst = _worst_tokens(args, reader)
        else:
            report = replay_report_at(args.replay)[1] if args.replay else None
            rows = mismatch.table(reader, parse_steps(args.steps), report)
    if args.top is not None:
        _emit(args, worst, render.worst_tokens(reader.path, worst))
        return 0 if worst.tokens else 4
    if not rows:
        raise InspectError(
            f"{reader.path} has no complete step"
            + (f" among --steps {args.steps}" if args.steps else "")
            + f" (complete: {format_ranges(reader.available_steps())})."
        )
    _emit(args, rows, render.mismatch(reader.path, rows))
    measured = any(r.recorded or r.replayed for r in rows)
    return 0 if measured else 4


def cmd_extract(args) -> int:
    from areal_debug.inspect.common import parse_int_list

    with _logs_to_stderr():
        from areal_debug.inspect import extract, render

        result = extract.extract(
            args.path,
            args.step,
            args.output,
            trajectories=parse_int_list(args.traj, "--traj"),
            use_checkpoint=not args.no_checkpoint,
            alone=args.alone,
        )
    _emit(args, result, render.extract_result(result))
    return 0


def _worst_tokens(args, reader):
    """``mismatch --top N``: the loss tokens furthest from the engine's log-probs."""
    from areal_debug.inspect.common import InspectError, parse_steps
    from areal_debug.inspect.show import tokenizer_path_of
    from areal_debug.inspect.tokens import worst_tokens

    if args.top < 1:
        raise InspectError(f"--top {args.top}: give how many tokens, 1 or more.")
    if args.replay:
        raise InspectError(
            "--top reads the recording's kept trainer log-probs; a replay's are not "
            "kept. Give the recording alone."
        )
    wanted = parse_steps(args.steps)
    steps = [s for s in reader.available_steps() if wanted is None or s in wanted]
    decode = _decoder_of(tokenizer_path_of(reader))
    return worst_tokens(reader, steps, args.top, decode)


def _decoder_of(path: str | None):
    """The run's tokenizer's decode, None where it cannot be loaded (ids shown)."""
    from areal_debug.inspect.common import InspectError
    from areal_debug.inspect.show import load_tokenizer

    try:
        tokenizer = load_tokenizer(path)
    except InspectError:
        return None
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=False)


def cmd_doctor(args) -> int:
    with _logs_to_stderr():
        from areal_debug.inspect import doctor, render

        report = doctor.doctor(args.path, args.cmd)
    _emit(args, report, render.doctor_report(report))
    return 1 if report.errors else 0


def _sub(sub, name: str, help: str, epilog: str) -> argparse.ArgumentParser:
    return sub.add_parser(
        name,
        help=help,
        description=help[0].upper() + help[1:] + ".",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def _add_inspection_commands(sub) -> None:
    p = _sub(
        sub,
        "ls",
        "list recordings under a fileroot (or one recording) and the replays run "
        "against them",
        """examples:
  areal-debug ls /storage/areal                  every recording under a fileroot
  areal-debug ls /storage/areal/exp/trial/areal_debug_recording
  areal-debug ls /storage/areal --json | jq '.[].replays'

Columns: steps complete (and incomplete or stopped ones), steps pinned against
retention (anomalies, debug.pin_steps), kept recover checkpoints, size on disk,
format version, and each replay_report.json whose "recording" is this one with
its verdict (replays write it into AReaL's log directory of the replay trial).""",
    )
    p.add_argument(
        "root", nargs="?", default=".", help="fileroot or recording (default .)"
    )
    _json_flag(p)
    p.set_defaults(func=cmd_ls)

    p = _sub(
        sub,
        "show",
        "show one recorded step trajectory by trajectory: texts, rewards, lengths, "
        "policy versions",
        """examples:
  areal-debug show REC --step 3                   lengths, rewards, versions per trajectory
  areal-debug show REC --step 3 --traj 0,2 --decode   with prompt and completion texts
  areal-debug show REC --step 3 --decode --tokenizer /models/qwen --full
  areal-debug show REC --step 3 --json

Texts are decoded with the run's tokenizer (tokenizer_path or actor.path of the
recorded config) or --tokenizer. "versions" are the policy versions that
generated each completion's tokens, "staleness" the step minus them.""",
    )
    p.add_argument("path", help="recording directory (holds manifest.json)")
    p.add_argument("--step", type=int, required=True, help="global step to show")
    p.add_argument("--shard", type=int, help="only this shard (data-parallel head)")
    p.add_argument(
        "--traj",
        help="trajectories to show, e.g. 0,3,5-7 (index in the step, or in --shard)",
    )
    p.add_argument(
        "--decode", action="store_true", help="decode prompts and completions"
    )
    p.add_argument("--tokenizer", help="tokenizer to decode with (implies --decode)")
    p.add_argument(
        "--full",
        action="store_true",
        help="do not truncate texts (JSON: keep token ids)",
    )
    _json_flag(p)
    p.set_defaults(func=cmd_show)

    p = _sub(
        sub,
        "diff",
        "compare two recordings (first differing element) or two runs' statistics "
        "(first divergent step and metric)",
        """examples:
  areal-debug diff REC_A REC_B                first step/shard/trajectory/key/element that differ
  areal-debug diff LOGS/t0_replay/replay_report.json     a replay against its recording
  areal-debug diff REPORT_A REPORT_B --all    two replays, every metric side by side
  areal-debug diff REPORT REC --metric ppo_actor/update/grad_norm --json

Exit code: 0 when identical, 3 when they differ, 1/2 on bad input.""",
    )
    p.add_argument(
        "a", help="recording, replay_report.json, or a replay's log directory"
    )
    p.add_argument(
        "b", nargs="?", help="the other one (omit for a report vs its recording)"
    )
    p.add_argument(
        "--all", action="store_true", help="show every metric, not only divergent ones"
    )
    p.add_argument(
        "--metric", action="append", help="show only this metric (repeatable)"
    )
    _json_flag(p)
    p.set_defaults(func=cmd_diff)

    p = _sub(
        sub,
        "plot",
        "plot per-step statistics (loss, grad norm, reward, importance weight...) of "
        "one recorded run, recorded vs replayed, or run A vs run B, into a PNG",
        """examples:
  areal-debug plot REC -o run.png                                   the recorded run
  areal-debug plot LOGS/t0_replay/replay_report.json -o replay.png   recorded vs replayed
  areal-debug plot REPORT_A REPORT_B -o ab.png                      two replays
  areal-debug plot REC_A REC_B -o runs.png --metric ppo_actor/update/grad_norm

One recording: its anomaly pins and incomplete steps are marked. Two runs: the
first divergent step is marked in every panel and named in the title.""",
    )
    p.add_argument(
        "a", help="recording, replay_report.json, or a replay's log directory"
    )
    p.add_argument(
        "b",
        nargs="?",
        help="the other run (omit for a report vs its recording, or one recording)",
    )
    p.add_argument("-o", "--output", required=True, help="PNG file to write")
    p.add_argument("--metric", action="append", help="metric to plot (repeatable)")
    p.add_argument("--title", help="figure title")
    _json_flag(p)
    p.set_defaults(func=cmd_plot)

    _add_report(sub)

    p = _sub(
        sub,
        "extract",
        "write one step as a minimal self-contained recording plus a pytest file "
        "that replays it on CPU",
        """examples:
  areal-debug extract REC --step 3 -o repro-step3        the whole step (faithful if it can be)
  areal-debug extract REC --step 3 --traj 0,5 -o repro   two trajectories only
  python -m pytest -q repro-step3                        replays it and checks the statistics

Faithful (every recorded statistic bitwise) when the step is whole: from the latest
kept recover checkpoint before it (recover.mode=on in the dump run) and the steps
after it, or, without one, from step 0 with every recorded step before it (the
size and the steps to train are said). With --alone, or when steps before it are
gone, the step is written as step 0 and trains the model at actor.path, not the
dump run's weights at that step, so only statistics of the batch itself are
compared; with --traj none of the recorded statistics applies and the test checks
that the step runs and stays finite. The generated test says which in its docstring.""",
    )
    p.add_argument("path", help="recording directory (holds manifest.json)")
    p.add_argument("--step", type=int, required=True, help="global step to extract")
    p.add_argument("--traj", help="only these trajectories, e.g. 0,3,5-7")
    p.add_argument("-o", "--output", required=True, help="new directory to write")
    p.add_argument(
        "--no-checkpoint",
        action="store_true",
        help="leave the recover checkpoint out: replay from step 0 instead",
    )
    p.add_argument(
        "--alone",
        action="store_true",
        help="the step by itself, as step 0 (smallest, quickest; not faithful)",
    )
    _json_flag(p)
    p.set_defaults(func=cmd_extract)

    p = _sub(
        sub,
        "doctor",
        "pre-flight checks of a replay or resume command against a recording",
        """examples:
  areal-debug doctor REC -- python -m areal_debug.launcher.local train.py \\
      --config my.yaml debug.replay_rollout_data=true debug.replay_start_step=3
  areal-debug doctor REC -- torchrun --nproc-per-node 2 train.py --config my.yaml \\
      debug.replay_rollout_data=true actor.optimizer.lr=1e-5
  areal-debug doctor REC -- my.yaml
  areal-debug doctor REC -- bash areal-debug-demo/run_replay.sh actor.optimizer.lr=1e-5

Checks: training config differences from the recording (model, sequence lengths,
sampling, optimizer, batch and group sizes, reward normalisation), missing or
incomplete steps, a whole recover checkpoint for the start step, determinism,
AReaL/torch/areal-debug versions, a trial or wandb run that would write into the
recorded run's, and free disk. Exit code 1 when any finding is an error.""",
    )
    p.add_argument("path", help="recording directory (holds manifest.json)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- and the command line")
    _json_flag(p)
    p.set_defaults(func=cmd_doctor)


# html_report's DEFAULT_MAX_PER_STEP and DEFAULT_MAX_TOKENS (a test keeps them
# equal): importing it here would load torch for every command's --help.
REPORT_MAX_PER_STEP, REPORT_MAX_TOKENS = 32, 1024


def _add_report(sub) -> None:
    p = _sub(
        sub,
        "report",
        "write one self-contained HTML page of a recorded run (and a replay of it) "
        "to click through: charts, steps, trajectories, tokens, stage report",
        """examples:
  areal-debug report REC -o run.html                               the recorded run
  areal-debug report REC LOGS/t0_replay -o replay.html             with a replay of it
  areal-debug report REC -o big.html --steps 40-60 --max-per-step 64
  areal-debug report REC -o run.html --tokenizer /models/qwen

Everything (data, script, style) is inside the one file: it opens from disk or an
attachment, with no network. Per-step charts with anomaly pins and incomplete
steps (and recorded vs replayed with the first divergence); click a step for its
trajectories (sortable, filterable, group mean/std), a trajectory for its tokens
coloured by log-probability. Large recordings: --steps, and at most
--max-per-step trajectories per step (the page says how many are left out).""",
    )
    p.add_argument("recording", help="recording directory (holds manifest.json)")
    p.add_argument(
        "replay",
        nargs="?",
        help="replay_report.json of a replay of it, or the replay's log directory",
    )
    p.add_argument("-o", "--output", required=True, help="HTML file to write")
    p.add_argument(
        "--steps",
        help="only these steps, e.g. 0-9,20,50- (50 to the last; default all)",
    )
    p.add_argument(
        "--max-per-step",
        type=int,
        default=REPORT_MAX_PER_STEP,
        help="trajectories kept per step, first in batch order (0: all; default "
        f"{REPORT_MAX_PER_STEP})",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=REPORT_MAX_TOKENS,
        help="completion tokens per trajectory in the token view (0: all; "
        f"default {REPORT_MAX_TOKENS})",
    )
    p.add_argument(
        "--tokenizer", help="tokenizer to decode with (default: the recorded run's)"
    )
    _json_flag(p)
    p.set_defaults(func=cmd_report)


def _add_mismatch(sub) -> None:
    p = _sub(
        sub,
        "mismatch",
        "the training-inference mismatch of each recorded step (and of a replay of "
        "it): how far the trainer's log-probs of the sampled tokens are from the "
        "inference engine's",
        """examples:
  areal-debug mismatch REC                         every recorded step
  areal-debug mismatch REC --steps 40-60 --json    as JSON
  areal-debug mismatch REC LOGS/t0_replay          recorded beside replayed (what-if:
                                                   replay with another actor.dtype)
  areal-debug mismatch REC --top 20                 the 20 loss tokens furthest from
                                                   the engine's log-probs, in context
  areal-debug plot REC --metric areal_debug/mismatch/abs_diff/max -o gap.png

Per loss token (never prompt or padding), d = trainer - engine log-prob of the same
token, measured where the actor recomputes log-probs (before the step's first
optimizer step; needs actor.recompute_logprob): mean and max |d|, the k1, k2, k3
estimates of KL(engine || trainer), the importance ratio exp(d) before any clamp,
and the share of tokens with |d| above log 2 and log 5. Exit code 4 when no step
has it (recompute off, or recorded before areal-debug measured it). --top N lists
the N loss tokens with the largest |d| (step, trajectory, position, both log-probs,
the tokens before it), from the trainer's per-token log-probs a dump keeps with
debug.record_stage_tensors=true.""",
    )
    p.add_argument("recording", help="recording directory (holds manifest.json)")
    p.add_argument(
        "replay",
        nargs="?",
        help="replay_report.json of a replay of it, or the replay's log directory",
    )
    p.add_argument(
        "--steps",
        help="only these steps, e.g. 0-9,20,50- (50 to the last; default all)",
    )
    p.add_argument(
        "--top",
        type=int,
        metavar="N",
        help="the N loss tokens furthest from the engine's log-probs, in context",
    )
    _json_flag(p)
    p.set_defaults(func=cmd_mismatch)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="areal-debug",
        description=__doc__.split("\n\n")[0],
        epilog="\n".join(__doc__.split("\n\n")[1].splitlines()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="command", required=True)
    _add_inspection_commands(sub)
    _add_mismatch(sub)
    p = sub.add_parser("inspect", help="show what a recording holds")
    p.add_argument("path", help="recording directory (holds manifest.json)")
    p.set_defaults(func=cmd_inspect)
    p = sub.add_parser("verify", help="check every payload's checksum and safe loading")
    p.add_argument("path", help="recording directory (holds manifest.json)")
    p.set_defaults(func=cmd_verify)
    p = sub.add_parser("demo", help="record a real GRPO run on CPU and replay it")
    p.add_argument(
        "--workdir", default="areal-debug-demo", help="where everything goes"
    )
    p.add_argument("--steps", type=int, default=4, help="training steps to record")
    p.add_argument(
        "--nproc",
        type=int,
        choices=(1, 2),
        default=1,
        help="trainer processes (data-parallel size)",
    )
    p.add_argument(
        "--single-controller",
        action="store_true",
        help="run both sides in AReaL's single-controller mode (scheduler.type=local)",
    )
    p.add_argument(
        "--logprob-fault",
        metavar="SPEC",
        help="the CPU server reports the log-probs of one step off, to see a "
        "training-inference mismatch spike: e.g. 'version=2,offset=4,share=0.25' "
        "(step 2: a quarter of the generated tokens +4 nats) or 'version=2,nan=true'",
    )
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="config overrides for both runs, as AReaL takes them "
        "(e.g. recover.mode=on ++recover.freq_steps=1); run_replay.sh repeats them",
    )
    p.set_defaults(func=cmd_demo)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "cmd", None) and args.cmd[0] == "--":
        args.cmd = args.cmd[1:]
    from areal_debug.inspect.common import InspectError, MissingPathError

    try:
        return args.func(args)
    except (RecordingError, MissingPathError) as e:
        print(f"areal-debug: {_one_line(e)}", file=sys.stderr)
        return 2
    except InspectError as e:
        print(f"areal-debug: {_one_line(e)}", file=sys.stderr)
        return 1


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


if __name__ == "__main__":
    sys.exit(main())
