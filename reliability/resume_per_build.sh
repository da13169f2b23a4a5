#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# What AReaL does on a resume, measured (issues 58 and 65, docs/reproducing.md): for
# each AReaL build (a venv with it and areal-debug installed), a 4-step demo whose
# dump run is SIGKILLed once step 3 is recorded and resumed by AReaL's recovery
# from the recover checkpoint of step 2 (one every step), with
# rollout.max_head_offpolicyness 0 and 2, plain and with debug.lossless_resume=true,
# the CPU server's answers held back $SLOW seconds (default 1.5: rollouts slower
# than AReaL's 1 s wait, as on a GPU cluster); prints the demo's resume check and
# verdict per combination.
#
#   bash reliability/resume_per_build.sh [VENV ...]     (default: .venv)
#   SLOW=0 bash reliability/resume_per_build.sh ...      (the server's own speed)
#
# About 2 minutes a combination on 2 cores; the work directories stay in $OUT
# (default /tmp/areal-debug-resume) for `areal-debug resume` or `diff`.
set -u
out=${OUT:-/tmp/areal-debug-resume}
slow=${SLOW:-1.5}
mkdir -p "$out"
for venv in "${@:-.venv}"; do
  version=$("$venv/bin/python" -c "import areal; print(areal.__version__)")
  for off in 0 2; do
    for lossless in false true; do
      wd="$out/$(basename "$venv")-off$off-lossless-$lossless"
      rm -rf "$wd"
      OMP_NUM_THREADS=1 timeout 900 "$venv/bin/python" -m areal_debug.cli demo \
        --workdir "$wd" --steps 4 --interrupt-after 2 --slow-rollouts "$slow" \
        rollout.max_head_offpolicyness=$off debug.lossless_resume=$lossless \
        > "$wd.log" 2>&1
      echo "== $venv (AReaL $version) max_head_offpolicyness=$off lossless_resume=$lossless slow=$slow: exit $?"
      grep -E "resume check|^OK|^DIFFERENT" "$wd.log"
    done
  done
done
