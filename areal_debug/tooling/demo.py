# SPDX-License-Identifier: Apache-2.0
"""``areal-debug demo``: record a real GRPO run on CPU, replay it with no inference
engine, and show that every step's statistics come back bit for bit.

The dump run is AReaL's real client side (RemoteSGLangEngine, WorkflowExecutor,
RLVRWorkflow, rewards, weight updates from disk) against the CPU server; the
replay starts no server at all. It runs the example script and configs
shipped with the package (``areal_debug.testing`` names them), so it works
from an installed wheel as well as from a source checkout.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from areal_debug import areal_compat, testing
from areal_debug.compare.report import ReplayReport, read_report
from areal_debug.inspect.common import cli_command
from areal_debug.recording.format import RECORDING_DIRNAME, STEP_META, step_dirname
from areal_debug.recording.reader import RecordingReader, format_ranges
from areal_debug.testing import (
    end_process,
    example_command,
    kill_run,
    run_env,
    tail,
)
from areal_debug.tooling.logprob_fault import FaultError
from areal_debug.tooling.logprob_fault import parse as parse_fault
from areal_debug.tooling.tiny_task import build_tiny_model, write_dataset

EXPERIMENT, TRIAL = "tinydemo", "trial0"
# Where the demo finds its recording and report: not for the user to move.
OWN_KEYS = ("experiment_name", "trial_name", "cluster.fileroot")
SHOWN_METRICS = [
    "ppo_actor/update/actor_loss/avg",
    "ppo_actor/update/grad_norm",
    "ppo_actor/update/importance_weight/avg",
    "ppo_actor/advantages/max",
    "ppo_actor/task_reward/avg",
    # The training-inference mismatch (mean and max |trainer - engine log-prob|).
    "areal_debug/mismatch/abs_diff/avg",
    "areal_debug/mismatch/abs_diff/max",
]
_STEP_DONE = re.compile(r"Train step (\d+)/(\d+) done")


class DemoError(RuntimeError):
    pass


def say(msg: str) -> None:
    print(f"[areal-debug demo] {msg}", flush=True)


def start_server(
    workdir: Path,
    env: dict,
    logprob_fault: str | None = None,
    slow_rollouts: float = 0.0,
) -> tuple[subprocess.Popen, str]:
    """The CPU server on ``workdir/model``, healthy; see ``testing.start_server``."""
    try:
        return testing.start_server(
            workdir, env, logprob_fault=logprob_fault, slow_rollouts=slow_rollouts
        )
    except testing.ServerError as e:
        raise DemoError(str(e)) from None


def mode_command(
    mode: str, nproc: int, steps: int, sc: bool = False, overrides=()
) -> list[str]:
    """The full command line of the example in ``mode`` ("dump" or "replay").

    SPMD: the dump runs under torchrun next to the server; the replay goes
    through areal-debug's launcher, which starts no inference server.
    Single-controller (``sc``): the script itself is the controller.
    ``overrides`` (the user's, given to both runs) come last, so they win."""
    args = [
        *common_overrides(nproc, steps),
        f"debug.{mode}_rollout_data=true",
        *overrides,
    ]
    return example_command(mode, nproc, sc, args)


def run_trainer(
    workdir: Path,
    name: str,
    cmd: list[str],
    env: dict,
    steps: int,
    kill_once: Callable[[], bool] | None = None,
) -> bool:
    """Run ``cmd``, log to DIR/<name>.log, show step progress. With
    ``kill_once``, SIGKILL the run and every process it started (as a crashed
    node ends) once it returns True, checked at each line the run logs; whether
    it was killed."""
    log_path = workdir / f"{name}.log"
    killed = False
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            for line in proc.stdout:
                log.write(line)
                m = _STEP_DONE.search(line)
                if m:
                    say(f"{name}: step {m.group(1)} of {steps} done")
                if kill_once is not None and kill_once():
                    kill_run(proc)
                    killed = True
                    break
            proc.wait()
        finally:
            end_process(proc)
    if not killed and proc.returncode != 0:
        raise DemoError(
            f"the {name} run failed (exit {proc.returncode}); last lines of "
            f"{log_path}:\n{tail(log_path)}"
        )
    return killed


def timed_run(wd: Path, name: str, cmd: list[str], env: dict, steps: int) -> float:
    """Run ``cmd`` as ``name``; return its wall time."""
    t0 = time.monotonic()
    run_trainer(wd, name, cmd, env, steps)
    return time.monotonic() - t0


# What an interrupted demo adds to both runs' overrides (unless the user's name
# recover.*): AReaL's recovery, a recover checkpoint after every step.
RECOVER = ("recover.mode=on", "++recover.freq_steps=1")


def interrupted_dump(
    wd: Path, cmd: list[str], env: dict, steps: int, after: int
) -> float:
    """The dump run SIGKILLed once step ``after + 1`` is recorded (its batch is
    recorded as the step starts, after the recover checkpoint of ``after``),
    then run again: AReaL's recovery resumes it and the recording continues,
    the killed attempt's steps from the resumed step on kept under
    superseded/. Its wall time, both runs."""
    killed_at = after + 1
    done = _recording(wd) / step_dirname(killed_at) / STEP_META
    t0 = time.monotonic()
    if not run_trainer(wd, "dump", cmd, env, steps, kill_once=done.exists):
        raise DemoError(
            f"the dump run ended before step {killed_at} was recorded: nothing to "
            f"interrupt (see {wd / 'dump.log'})"
        )
    say(
        f"[2/4] record: killed the dump run (SIGKILL, as a crashed node) once step "
        f"{killed_at} was recorded, after the recover checkpoint of step {after}"
    )
    # A killed run leaves its name-resolve entries; AReaL's launchers clear
    # them before a run, torchrun and the local scheduler's script do not.
    shutil.rmtree(wd / "root" / "name_resolve", ignore_errors=True)
    say("[2/4] record: resuming it with AReaL's own recovery (recover.mode=on)")
    run_trainer(wd, "dump-resumed", cmd, env, steps)
    return time.monotonic() - t0


def _recording(wd: Path) -> Path:
    return wd / "root" / EXPERIMENT / TRIAL / RECORDING_DIRNAME


def say_resume_check(reader: RecordingReader) -> bool:
    """The recording's resume check, in a line per resume; whether it was
    lossless."""
    from areal_debug.inspect.resume import check_resumes

    check = check_resumes(reader)
    for r in check.resumes:
        if not r.compared_steps:
            redone = "no redone step to compare"
        elif r.different_prompts:
            redone = (
                f"redone steps {format_ranges(r.different_prompts)} on OTHER prompts"
            )
        else:
            redone = (
                f"redone steps {format_ranges(r.compared_steps)} on the same prompts"
            )
            if r.reordered:
                redone += f" ({format_ranges(r.reordered)} in another order)"
        say(
            f"[2/4] resume check: resumed at step {r.step}: starting weights "
            f"{str(r.weights).replace('_', ' ')}, optimizer step count "
            f"{str(r.optimizer).replace('_', ' ')} (against the killed run's after "
            f"step {r.step - 1}); {redone}"
        )
        say(f"[2/4] resume check: dataloader: {r.dataloader_detail}")
    lost, repeated = len(check.lost), len(check.repeated)
    ahead = sum(1 for p in check.lost if p.get("drawn_ahead_by") is not None)
    said = f" ({ahead} drawn ahead by AReaL before the recover checkpoint)"
    say(
        "[2/4] resume check: "
        + (
            "lossless (nothing lost or repeated)"
            if check.lossless
            else f"NOT lossless: {lost} prompt(s) lost{said if ahead else ''}, "
            f"{repeated} repeated (areal-debug resume {shlex.quote(reader.path)})"
        )
    )
    return check.lossless


def script_env() -> dict:
    """The environment a user's shell gives ``run_replay.sh``: this one, without
    a server to attach to (the script sets what the run needs)."""
    env = dict(os.environ)
    env.pop("AREAL_LLM_SERVER_ADDRS", None)
    return env


def replay_command(
    workdir: Path, nproc: int, steps: int, sc: bool = False, overrides=()
) -> str:
    env = f"AREAL_DEBUG_WORKDIR={shlex.quote(str(workdir))} OMP_NUM_THREADS=1"
    if sc:
        # A leftover AREAL_SPMD_MODE=1 in the shell would switch modes.
        env = f"-u AREAL_SPMD_MODE {env}"
    args = mode_command("replay", nproc, steps, sc, overrides)
    return f"{env} {' '.join(shlex.quote(a) for a in args)}"


def common_overrides(nproc: int, steps: int) -> list[str]:
    return [
        f"total_train_steps={steps}",
        f"actor.backend=fsdp:d{nproc}",
        "rollout.backend=sglang:d1",
        f"allocation_mode=sglang:d1+fsdp:d{nproc}",
    ]


def write_replay_script(
    workdir: Path, nproc: int, steps: int, sc: bool = False, overrides=()
) -> Path:
    path = workdir / "run_replay.sh"
    text = (
        "#!/usr/bin/env bash\n"
        "# Replay the demo's recording with no inference engine. Extra arguments are\n"
        "# config overrides, e.g.: bash run_replay.sh actor.optimizer.lr=1e-5\n"
        "# Every path in it is absolute: it runs from any directory.\n"
        "set -euo pipefail\n"
        f'exec env {replay_command(workdir, nproc, steps, sc, overrides)} "$@"\n'
    )
    # A path that is not valid UTF-8 is written back as the bytes it was read as.
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    path.chmod(0o755)
    return path


def report_path(workdir: Path) -> str:
    paths = glob.glob(
        str(
            workdir
            / "root"
            / "logs"
            / "*"
            / EXPERIMENT
            / f"{TRIAL}_replay"
            / "replay_report.json"
        )
    )
    if not paths:
        raise DemoError("the replay wrote no replay_report.json")
    return paths[0]


def load_report(workdir: Path) -> ReplayReport:
    return read_report(report_path(workdir))


def print_table(
    reader: RecordingReader, report: ReplayReport
) -> tuple[bool, str | None]:
    """Per-step table; returns (all identical and non-zero grads, first problem)."""
    problem = None
    print()
    print(f"{'step':>4}  {'metric':<40} {'recorded':>24} {'replayed':>24}  identical")
    for entry in report.steps:
        step, metrics = entry.global_step, entry.metrics
        for name in SHOWN_METRICS:
            m = metrics.get(name, {})
            print(
                f"{step:>4}  {name:<40} {m.get('recorded', float('nan')):>24.17g} "
                f"{m.get('replayed', float('nan')):>24.17g}  {m.get('identical', False)}"
            )
        same = sum(m.get("identical", False) for m in metrics.values())
        print(
            f"{step:>4}  {'(all metrics)':<40} {same:>24} of {len(metrics):<21} "
            f"{same == len(metrics)}"
        )
        if problem is None and same != len(metrics):
            bad = next(k for k, m in metrics.items() if not m.get("identical", False))
            problem = f"step {step}, metric {bad}: {metrics[bad]}"
        grad = metrics.get("ppo_actor/update/grad_norm", {}).get("recorded", 0.0)
        if problem is None and not grad > 0:
            problem = (
                f"step {step} has a zero grad norm: the comparison would prove nothing"
            )
    print()
    # Like with like: each run's whole step (AReaL's timeperf/* phases summed), and
    # of it the rollout phase: generation in the dump, reading the recording in
    # the replay.
    print(
        f"{'step':>4}  {'dump: step (s)':>15} {'of it rollout':>14}  "
        f"{'replay: step (s)':>17} {'of it rollout':>14}"
    )
    for entry in report.steps:
        step = entry.global_step
        dump, replay = reader.recorded_timings(step), entry.timings
        print(
            f"{step:>4}  {_phases(dump):>15.3f} "
            f"{dump.get('timeperf/rollout', float('nan')):>14.3f}  "
            f"{_phases(replay):>17.3f} "
            f"{replay.get('timeperf/rollout', float('nan')):>14.3f}"
        )
    print()
    return problem is None, problem


def run_times(reader, report, dump_time: float, replay_time: float) -> str:
    """The two runs' wall times, each split into its steps (AReaL's phases) and
    the rest (start-up: importing torch and AReaL, building the engines, the
    first step's compilation; and closing): a replay's steps are faster, its run
    can still be slower where starting up dominates, and this says which."""
    dump_steps = sum(
        _phases(reader.recorded_timings(e.global_step)) for e in report.steps
    )
    replay_steps = sum(_phases(e.timings) for e in report.steps)
    return (
        f"dump run {dump_time:.1f} s (with inference: {dump_steps:.1f} s of steps, "
        f"{max(dump_time - dump_steps, 0.0):.1f} s starting and closing), replay run "
        f"{replay_time:.1f} s (no inference: {replay_steps:.1f} s of steps, "
        f"{max(replay_time - replay_steps, 0.0):.1f} s starting and closing)"
    )


def _phases(timings: dict[str, float]) -> float:
    """A step's wall time as AReaL times it: its timeperf/* phases summed."""
    return sum(v for k, v in timings.items() if k.startswith("timeperf/"))


def run_demo(
    workdir: str,
    steps: int = 4,
    nproc: int = 1,
    single_controller: bool = False,
    overrides: tuple[str, ...] = (),
    logprob_fault: str | None = None,
    interrupt_after: int | None = None,
    slow_rollouts: float = 0.0,
) -> int:
    """Record, replay and compare; ``overrides`` go to both runs;
    ``logprob_fault`` is the CPU server's ``--logprob-fault`` and
    ``slow_rollouts`` its ``--slow-rollouts``; with
    ``interrupt_after`` N, the dump run is killed once step N + 1 is recorded and
    resumed with AReaL's recovery, and the resume checked."""
    named = [o for o in overrides if o.lstrip("+").split("=")[0] in OWN_KEYS]
    if named:
        raise DemoError(
            f"{', '.join(named)}: the demo names its own run ({EXPERIMENT}/{TRIAL}) "
            "and writes under --workdir; leave these keys out or use --workdir"
        )
    if logprob_fault:
        try:
            parse_fault(logprob_fault)
        except FaultError as e:
            raise DemoError(str(e)) from None
    if not 0 <= slow_rollouts <= 600:
        raise DemoError(f"--slow-rollouts {slow_rollouts:g}: give 0 to 600 seconds")
    if interrupt_after is not None:
        if not 0 <= interrupt_after <= steps - 2:
            raise DemoError(
                f"--interrupt-after {interrupt_after}: give a step from 0 to "
                f"{steps - 2} (with --steps {steps}): the run is killed during the "
                "step after it, which must be one it records"
            )
        if not any(o.lstrip("+").startswith("recover.") for o in overrides):
            overrides = (*RECOVER, *overrides)
    sc = single_controller
    wd = Path(workdir).resolve()
    wd.mkdir(parents=True, exist_ok=True)
    # Each demo records afresh: the recording and logs of an earlier demo go.
    shutil.rmtree(wd / "root", ignore_errors=True)
    say(f"[1/4] set-up: tiny model and arithmetic dataset in {wd}")
    build_tiny_model(str(wd / "model"))
    write_dataset(str(wd / "data.jsonl"), n=64)
    base_env = run_env(wd, sc)
    how = "single-controller mode" if sc else "SPMD mode"

    say("[2/4] record: starting the CPU inference server (SGLang HTTP protocol)")
    if logprob_fault:
        say(f"[2/4] record: the server reports log-probs off: {logprob_fault}")
    if slow_rollouts:
        say(
            f"[2/4] record: the server holds each answer back {slow_rollouts:g} s "
            "(rollouts as slow as a GPU cluster's)"
        )
    server, addr = start_server(wd, base_env, logprob_fault, slow_rollouts)
    try:
        say(
            f"[2/4] record: dump in {how}: {steps} GRPO steps on {nproc} trainer "
            f"process(es), rollouts from the server at {addr}"
        )
        dump_env = run_env(wd, sc, server_addr=addr)
        dump_cmd = mode_command("dump", nproc, steps, sc, overrides)
        if interrupt_after is None:
            dump_time = timed_run(wd, "dump", dump_cmd, dump_env, steps)
        else:
            dump_time = interrupted_dump(wd, dump_cmd, dump_env, steps, interrupt_after)
    finally:
        end_process(server)
        say("[2/4] record: CPU server stopped")
    reader = RecordingReader(str(_recording(wd)))
    lossless = say_resume_check(reader) if interrupt_after is not None else True

    # The replay is the script the user re-runs, so the demo shows it works.
    script = write_replay_script(wd, nproc, steps, sc, overrides)
    if sc:
        say("[3/4] replay: the controller starts only the actor's workers, no server")
    else:
        say("[3/4] replay through areal_debug.launcher.local: no inference server")
    say(f"[3/4] bash {shlex.quote(str(script))}")
    replay_time = timed_run(wd, "replay", ["bash", str(script)], script_env(), steps)

    say("[4/4] compare")
    report = load_report(wd)
    ok, problem = print_table(reader, report)
    print(run_times(reader, report, dump_time, replay_time))
    print(f"recording: {reader.path}")
    print(f"logs:      {wd}/dump.log, {wd}/replay.log, {wd}/server.log")
    print(f"re-run:    bash {shlex.quote(str(script))} [overrides...]")
    print(f"report:    {report_path(wd)}")
    rec = shlex.quote(reader.path)
    # As typed in the shell the demo ran from (a venv not activated included).
    cli = cli_command()
    print(
        f"next:      {cli} report {rec} -o "
        f"{shlex.quote(str(wd / 'report.html'))}   # every step, trajectory, token\n"
        f"           {cli} show {rec} --step 0 --decode\n"
        f"           {cli} mismatch {rec}"
    )
    untested = areal_compat.untested_areal()
    on = f" (on {untested})" if untested else ""
    if ok and lossless and report.not_compared:
        print(
            f"PARTLY: all {len(reader.available_steps())} steps replayed bit for bit "
            f"in what was compared{on}; NOT compared: {'; '.join(report.not_compared)}."
        )
        return 1
    if ok and lossless:
        print(
            f"OK: all {len(reader.available_steps())} steps replayed bit for bit{on}."
        )
        return 0
    if ok:
        print("DIFFERENT: the resume lost or repeated prompts (the resume check above)")
        return 1
    print(f"DIFFERENT: first difference at {problem}")
    return 1
