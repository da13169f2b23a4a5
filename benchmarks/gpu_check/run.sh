#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make gpu-check`: the lent GPU machine's check, in one call of the device tool
# (at most 8 minutes), run from the repository root. First, here:
#
#   make gpu-check-prepare        # the wheels, into .whl/ (about 28 MiB)
#
# then one call of the device tool's `run`, with carry [".whl"] and timeout_s 480:
#
#   bash benchmarks/gpu_check/run.sh
#
# The local rehearsal (a venv of the device's packages, the cp311 wheels) and the
# test suite's CPU run (tests/test_gpu_check.py) use the settings below.
#
# It installs the wheels `make gpu-check-prepare` put in .whl/ (AReaL 1.0.4 and what
# the device's image lacks) into /tmp/site, puts /tmp/site, the import-only
# stand-ins (benchmarks/gpu_check/standins.py: ray, wandb, swanlab, trackio) and the
# checkout on PYTHONPATH, prints the machine and the versions, then runs, each under
# its own time limit and whatever the one before did:
#
#   demo           areal-debug demo: a real GRPO run recorded through the CPU
#                  inference server, replayed with none; on CUDA in bfloat16
#   selfcheck      areal-debug selfcheck on the demo's run_replay.sh: the replay
#                  twice, compared with each other and the recording, stage by stage
#   gpu_step       benchmarks/gpu_step.py: the recorder at Qwen2.5-1.5B's shape (a
#                  small shape on CPU)
#   dump_overhead  benchmarks/dump_overhead.py: the recorder's cost to the training
#                  thread and loop, on this machine's cores
#
# and ends with one line per step (ok, MISS: ran but a figure missed its target,
# or FAILED; seconds). Exit status 0 only if every step was ok. With $OUT set (the
# device tool's), each step's log, the demo's replay report and, in
# demo-runs.tar.gz, its recording's step table and run logs land there (8 files).
#
# It needs no venv: `python3` as found on PATH (the device's holds torch). On a
# CPU-only machine it runs the same, as on CPU. Settings, from the environment:
#   PYTHON                 the interpreter (default python3)
#   GPU_CHECK_WHEELS       the wheel folder (default .whl); "none": install nothing,
#                          use the interpreter's own environment (the test suite)
#   GPU_CHECK_SITE         where the wheels are installed (default /tmp/site)
#   GPU_CHECK_WORK         scratch folder, emptied first (default /tmp/gpu-check)
#   GPU_CHECK_STEPS        the steps to run, in order (default "demo selfcheck
#                          gpu_step": what needs the GPU; dump_overhead, the
#                          recorder's cost on the machine's cores, on request: the
#                          four did not fit one call on the H200, 2026-11-28)
#   GPU_CHECK_DEMO_STEPS   the demo's training steps (default 3)
#   GPU_CHECK_DEMO_ARGS    overrides for both demo runs (default on CUDA:
#                          actor.dtype=bfloat16 debug.layer_digests=0; on CPU:
#                          debug.layer_digests=0: step 0's layers digested, on the
#                          device, and compared by the replay and selfcheck)
#   GPU_CHECK_GPU_STEP_ARGS       gpu_step.py's arguments (default --runs 1)
#   GPU_CHECK_DUMP_OVERHEAD_ARGS  dump_overhead.py's arguments (default --steps 12
#                          --loop-blocks 2 --gib-steps 2: half its default work, 80
#                          loop windows a path; 95 s on the 2-core CI host, 174 s in full)
#   GPU_CHECK_BUDGET_DEMO, GPU_CHECK_BUDGET_SELFCHECK, GPU_CHECK_BUDGET_GPU_STEP,
#   GPU_CHECK_BUDGET_DUMP_OVERHEAD
#                          each step's limit in seconds (default 150, 170, 170, 150)
#   GPU_CHECK_DEADLINE     seconds from the start by which every step has ended
#                          (default 450, inside the device call's 480): a step gets
#                          what is left if that is less than its own limit, and none
#                          under 15 s, so that the summary always comes
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
PYTHON=${PYTHON:-python3}
WHEELS=${GPU_CHECK_WHEELS:-.whl}
SITE=${GPU_CHECK_SITE:-/tmp/site}
WORK=${GPU_CHECK_WORK:-/tmp/gpu-check}
STEPS=${GPU_CHECK_STEPS:-demo selfcheck gpu_step}
STANDINS=$WORK/standins
T0=$(date +%s)

rm -rf "$WORK"
mkdir -p "$WORK/bin"
# The stand-ins are written here, not kept in the repository under the real
# libraries' names (benchmarks/gpu_check/standins.py).
"$PYTHON" "$ROOT/benchmarks/gpu_check/standins.py" "$STANDINS" || {
    echo "[gpu-check] could not write the stand-ins into $STANDINS"
    exit 1
}
LOGS=${OUT:-$WORK/logs}
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1

say() { echo "[gpu-check] $*"; }

# The carried wheels first (they replace the device's transformers and tokenizers),
# then the stand-ins, then this checkout's areal_debug. Every process the steps
# start inherits them.
if [ "$WHEELS" != none ]; then
    export PYTHONPATH=$SITE:$STANDINS:$ROOT${PYTHONPATH:+:$PYTHONPATH}
else
    export PYTHONPATH=$STANDINS:$ROOT${PYTHONPATH:+:$PYTHONPATH}
fi
# The demo's replay goes through AReaL's launcher, which starts a bare `torchrun`:
# the one on PATH or beside this Python, else one made for it here.
PYTHON_BIN=$(command -v "$PYTHON") || {
    say "no $PYTHON"
    exit 1
}
if ! command -v torchrun >/dev/null && [ ! -x "$(dirname "$PYTHON_BIN")/torchrun" ]; then
    printf '#!/bin/sh\nexec %q -m torch.distributed.run "$@"\n' "$PYTHON_BIN" >"$WORK/bin/torchrun"
    chmod +x "$WORK/bin/torchrun"
fi
export PATH=$WORK/bin:$PATH

{
    if [ "$WHEELS" != none ]; then
        shopt -s nullglob
        wheels=("$WHEELS"/*.whl)
        shopt -u nullglob
        if [ ${#wheels[@]} -eq 0 ]; then
            say "no wheels in $WHEELS: run 'make gpu-check-prepare' here first"
            exit 1
        fi
        say "installing ${#wheels[@]} wheels from $WHEELS into $SITE"
        "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --upgrade --target "$SITE" "${wheels[@]}" || exit 1
    fi
    say "PYTHONPATH=$PYTHONPATH"
    if command -v nvidia-smi >/dev/null; then nvidia-smi; else say "no nvidia-smi"; fi
    say "cores: $(nproc --all)"
    "$PYTHON" - <<'EOF' || exit 1
import platform
import sys
from importlib import metadata

import areal
import areal_debug
import ray
import tokenizers
import torch
import transformers

print("python", sys.version.split()[0], sys.executable, platform.machine())
cuda = torch.cuda.is_available()
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", cuda,
      torch.cuda.get_device_name(0) if cuda else "")
print("transformers", transformers.__version__, "tokenizers", tokenizers.__version__)
print("areal", areal.__version__, areal.__file__)
print("areal_debug", areal_debug.__file__)
print("ray", ray.__file__)
names = ("huggingface_hub", "accelerate", "peft", "safetensors", "numpy", "fsspec", "pyarrow",
         "anyio", "idna", "h11", "typing_extensions", "aiohttp", "uvloop", "psutil")
versions = []
for name in names:
    try:
        versions.append(f"{name} {metadata.version(name)}")
    except metadata.PackageNotFoundError:
        versions.append(f"{name} -")
print(", ".join(versions))
EOF
} 2>&1 | tee "$LOGS/setup.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || {
    say "set-up FAILED ($(($(date +%s) - T0)) s)"
    exit 1
}

if "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    CUDA=1
else
    CUDA=0
fi
if [ "$CUDA" = 1 ]; then
    DEMO_ARGS=${GPU_CHECK_DEMO_ARGS-actor.dtype=bfloat16 debug.layer_digests=0}
else
    DEMO_ARGS=${GPU_CHECK_DEMO_ARGS-debug.layer_digests=0}
fi
DEMO_STEPS=${GPU_CHECK_DEMO_STEPS:-3}
GPU_STEP_ARGS=${GPU_CHECK_GPU_STEP_ARGS---runs 1}
DUMP_OVERHEAD_ARGS=${GPU_CHECK_DUMP_OVERHEAD_ARGS---steps 12 --loop-blocks 2 --gib-steps 2}
DEADLINE=$((T0 + ${GPU_CHECK_DEADLINE:-450}))

# End what a step left behind: the demo's server and trainers run in sessions of
# their own, found by the workdir in their environment.
reap() {
    local pids=() p
    for p in /proc/[0-9]*; do
        grep -qsxzF "AREAL_DEBUG_WORKDIR=$WORK/demo" "$p/environ" && pids+=("${p#/proc/}")
    done
    [ ${#pids[@]} -eq 0 ] && return
    say "ending ${#pids[@]} processes the step left: ${pids[*]}"
    kill -TERM "${pids[@]}" 2>/dev/null
    sleep 5
    kill -KILL "${pids[@]}" 2>/dev/null
}

SUMMARY=()
FAILED=0
step() {
    local name=$1 budget=$2
    shift 2
    local t=$(date +%s) rc status
    # What the deadline leaves, less the 20 s a stopped step may take to end and
    # the 5 s the reaping after it takes.
    local left=$((DEADLINE - t - 25))
    if [ "$left" -lt 15 ]; then
        say "== $name: skipped, ${left} s left before the deadline"
        FAILED=1
        SUMMARY+=("$(printf '%-14s %-36s %5d s' "$name" "SKIPPED (deadline)" 0)")
        return
    fi
    [ "$budget" -gt "$left" ] && budget=$left
    say "== $name (limit ${budget} s): $*"
    # SIGINT first: the demo's finally blocks end its server and trainers.
    timeout -s INT -k 20 "$budget" "$@" 2>&1 | tee "$LOGS/$name.log"
    rc=${PIPESTATUS[0]}
    local secs=$(($(date +%s) - t))
    if [ "$rc" -eq 0 ]; then
        status=ok
    elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        status="FAILED (timed out at ${budget} s)"
    elif grep -qE '^[a-z_]+(\[[^]]*\])?: .* MISS$' "$LOGS/$name.log" && ! grep -q '^Traceback' "$LOGS/$name.log"; then
        status="MISS (a figure missed its target)"
    else
        status="FAILED (exit $rc)"
    fi
    [ "$status" = ok ] || FAILED=1
    reap
    SUMMARY+=("$(printf '%-14s %-36s %5d s' "$name" "$status" "$secs")")
}

for s in $STEPS; do
    case $s in
    demo)
        # shellcheck disable=SC2086
        step demo "${GPU_CHECK_BUDGET_DEMO:-150}" "$PYTHON" -m areal_debug.cli demo \
            --workdir "$WORK/demo" --steps "$DEMO_STEPS" $DEMO_ARGS
        d=$WORK/demo
        rep=$(find "$d/root/logs" -name replay_report.json -path '*trial0_replay*' 2>/dev/null | head -1)
        [ -n "$rep" ] && cp "$rep" "$LOGS/replay_report.json"
        rec=$d/root/tinydemo/trial0/areal_debug_recording
        if [ -d "$rec" ]; then
            timeout 20 "$PYTHON" -m areal_debug.cli inspect "$rec" >"$d/recording.txt" 2>&1
        fi
        # The demo's own run logs (server, dump, replay) and step table, compressed.
        logs=()
        for f in server.log dump.log replay.log run_replay.sh recording.txt; do
            [ -f "$d/$f" ] && logs+=("$f")
        done
        [ ${#logs[@]} -gt 0 ] && tar -czf "$LOGS/demo-runs.tar.gz" -C "$d" "${logs[@]}"
        ;;
    selfcheck)
        # Two replays of about 55 s each on the H200 (start-up, CUDA, compilation).
        step selfcheck "${GPU_CHECK_BUDGET_SELFCHECK:-170}" "$PYTHON" -m areal_debug.cli \
            selfcheck --logs "$WORK/selfcheck" -- bash "$WORK/demo/run_replay.sh"
        ;;
    gpu_step)
        # shellcheck disable=SC2086
        step gpu_step "${GPU_CHECK_BUDGET_GPU_STEP:-170}" "$PYTHON" benchmarks/gpu_step.py $GPU_STEP_ARGS
        ;;
    dump_overhead)
        # shellcheck disable=SC2086
        step dump_overhead "${GPU_CHECK_BUDGET_DUMP_OVERHEAD:-150}" "$PYTHON" benchmarks/dump_overhead.py $DUMP_OVERHEAD_ARGS
        ;;
    *)
        say "unknown step $s"
        SUMMARY+=("$(printf '%-14s %-36s %5d s' "$s" "FAILED (unknown step)" 0)")
        FAILED=1
        ;;
    esac
done

{
    echo "[gpu-check] summary ($(($(date +%s) - T0)) s in all, device $([ "$CUDA" = 1 ] && echo cuda || echo cpu)):"
    for line in "${SUMMARY[@]}"; do echo "[gpu-check] $line"; done
} | tee "$LOGS/summary.txt"
exit "$FAILED"
