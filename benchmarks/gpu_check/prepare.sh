#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make gpu-check-prepare`: runs HERE, before any device time is spent.
#
# Downloads the wheels of benchmarks/gpu_check/device-requirements.txt for the lent
# GPU machine (CPython 3.12, manylinux x86-64; it can fetch nothing) into .whl/,
# which .gitignore and .git/info/exclude keep out of git (the device tool carries it
# with `carry: [".whl"]`), then prints what one call would carry (the working tree
# plus .whl/) and fails over 60 MiB (the tool's limit is 64 MiB).
#
#   GPU_CHECK_PY       the Python version to download for (default 3.12)
#   GPU_CHECK_WHEELS   where the wheels go (default <repo>/.whl); the local
#                      simulation uses GPU_CHECK_PY=3.11 GPU_CHECK_WHEELS=/work/devsim-whl
#   PYTHON             the pip that downloads (default python3)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT"
PY_VERSION=${GPU_CHECK_PY:-3.12}
DEST=${GPU_CHECK_WHEELS:-$ROOT/.whl}
PYTHON=${PYTHON:-python3}
LIMIT_MIB=60

if [ "$DEST" = "$ROOT/.whl" ] && [ -d .git ]; then
    mkdir -p .git/info
    grep -qxF /.whl/ .git/info/exclude 2>/dev/null || echo /.whl/ >>.git/info/exclude
fi

# The pins, comments and blank lines dropped.
mapfile -t PINS < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$HERE/device-requirements.txt" | grep -v '^$')

# Afresh each time: a wheel of an older pin left beside the new one stops the
# device's install (one version of each name). pip's cache keeps this quick.
rm -rf "$DEST"
mkdir -p "$DEST"
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version "$PY_VERSION" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
    -d "$DEST" "${PINS[@]}" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)

got=$(find "$DEST" -maxdepth 1 -type f -name '*.whl' | wc -l)
if [ "$got" -ne "${#PINS[@]}" ]; then
    echo "gpu-check-prepare: ${#PINS[@]} pins but $got wheels in $DEST" >&2
    exit 1
fi

wheels=$(du -cb "$DEST"/*.whl | tail -1 | cut -f1)
# What a call sends: tracked files and untracked ones git does not ignore.
tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
total=$((wheels + tree))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
echo "gpu-check-prepare: $got wheels for CPython $PY_VERSION in $DEST: $(mib "$wheels") MiB"
echo "gpu-check-prepare: working tree $(mib "$tree") MiB; carried in all $(mib "$total") MiB (limit $LIMIT_MIB MiB)"
if [ "$total" -gt $((LIMIT_MIB * 1048576)) ]; then
    echo "gpu-check-prepare: over $LIMIT_MIB MiB: the device tool would refuse the call" >&2
    exit 1
fi
