#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# What AReaL does on a resume, measured (issue 58, docs/reproducing.md): for each
# AReaL build (a venv with it and areal-debug installed), a 4-step demo whose dump
# run is SIGKILLed once step 3 is recorded and resumed by AReaL's recovery, with
# rollout.max_head_offpolicyness 0 and 2 and a recover checkpoint every step and
# every 2 steps; prints the demo's resume check and verdict per combination.
#
#   bash reliability/resume_per_build.sh [VENV ...]     (default: .venv)
#
# About 75 s a combination on 2 cores; the work directories stay in $OUT
# (default /tmp/areal-debug-resume) for `areal-debug resume` or `diff`.
set -u
out=${OUT:-/tmp/areal-debug-resume}
mkdir -p "$out"
for venv in "${@:-.venv}"; do
  version=$("$venv/bin/python" -c "import areal; print(areal.__version__)")
  for off in 0 2; do
    for freq in 1 2; do
      wd="$out/$(basename "$venv")-off$off-freq$freq"
      rm -rf "$wd"
      OMP_NUM_THREADS=1 timeout 600 "$venv/bin/python" -m areal_debug.cli demo \
        --workdir "$wd" --steps 4 --interrupt-after 2 \
        rollout.max_head_offpolicyness=$off recover.mode=on ++recover.freq_steps=$freq \
        > "$wd.log" 2>&1
      echo "== $venv (AReaL $version) max_head_offpolicyness=$off freq_steps=$freq: exit $?"
      grep -E "resume check|^OK|^DIFFERENT" "$wd.log"
    done
  done
done
