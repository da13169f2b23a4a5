# areal-debug: set-up, tests and the demo on a CPU machine.
#   make setup   create .venv with torch (CPU), areal 1.0.4 and this package (idempotent)
#   make setup AREAL=2.0.0 VENV=.venv-a2   the same with AReaL 2.0.0, at .venv-a2
#   make test    set up if needed, then run the test suite (no system installs), all
#                but the lifecycle tests (marker lifecycle: signals, kills, crashes and
#                a full disk ending AReaL runs, a minute or more each) and the
#                rehearsal of make gpu-check on CPU (marker rehearsal, four minutes)
#                and the variants (marker variant: a check make test makes end to
#                end, made again another way AReaL runs, a minute or two each)
#   make test-lifecycle  the lifecycle tests and the rehearsal (make reliability)
#   make test-long  those and the variants: what make test leaves out (.ci/run)
#   make test-leg AREAL=2.0.0 VENV=.venv-a2   the tests every supported AReaL runs
#                (marker each_areal): contract, SPMD and single-controller
#                dump/replay, that release's own example scripts
#   make demo    set up if needed, then record and replay a real GRPO run on CPU
#   make lint    ruff over the package, tests and benchmarks; the import layers
#   make bench   every benchmark figure (docs/flight-recorder.md); make bench-gpu the
#                recorder at a real model's shape on a GPU (a small shape on CPU)
#   make reliability  the lifecycle tests, then the whole reliability suite (crashes,
#                hostile files, ...) and its table
#   make gpu-check-prepare  here: the wheels a lent GPU machine lacks (AReaL 1.0.4 and
#                its imports) into .whl/, and what one call would carry (<= 60 MiB)
#   make gpu-check  on that machine (python3 on PATH, no venv, no network): the demo
#                in bf16 on CUDA, selfcheck, dump_overhead and bench-gpu's script, each under a
#                time limit, one summary line each (benchmarks/gpu_check/run.sh)
PYTHON ?= python3
# The AReaL release to install (by name, from whatever index or --find-links
# folder pip is given) and the venv to install it in.
AREAL ?= 1.0.4
VENV ?= .venv
# What that release's code paths need beyond requirements/cpu.txt (may not exist).
AREAL_REQS := $(wildcard requirements/areal-$(AREAL).txt)
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.setup-done-areal-$(AREAL)

.PHONY: setup test test-lifecycle test-long test-leg demo lint bench bench-gpu reliability gpu-check-prepare gpu-check clean

setup: $(STAMP)

# The stamp depends on everything that defines the environment, so editing the
# requirements re-runs set-up; a finished set-up is not repeated.
$(STAMP): pyproject.toml requirements/cpu.txt requirements/constraints-cpu.txt $(AREAL_REQS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# The CPU build first: areal's own pins (torch<2.11) would pull CUDA wheels.
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet --no-deps areal==$(AREAL)
	# AReaL is installed without its GPU dependency set (sglang, vllm, flash-attn,
	# its torch pin): pip's conflict report would list each as missing, in red,
	# after every install below. Expected here, so not printed.
	@echo "areal $(AREAL) installed without its GPU dependencies (not needed on CPU): pip's conflict report is off for the installs below."
	$(PIP) install --quiet --no-warn-conflicts -c requirements/constraints-cpu.txt -r requirements/cpu.txt $(AREAL_REQS:%=-r %)
	$(PIP) install --quiet --no-warn-conflicts --no-deps -e .
	$(PY) -c "import areal, areal_debug, torch; print('areal', areal.__version__, 'torch', torch.__version__)"
	# One release per venv: another release's stamp no longer describes it.
	rm -f $(VENV)/.setup-done-areal-*
	touch $(STAMP)

# The tests never install anything on the system: those that need mkfs.xfs and
# root (tests/test_reflinks.py) or a headless chromium (tests/test_html_report.py)
# say so when skipped (and fail where CI=true); .ci/run installs xfsprogs and chromium.
# Three workers on two cores: every AReaL process spends ~12 s of CPU importing
# torch, transformers and AReaL, and a third worker runs while another waits for
# its processes to start (the whole suite on this host: 21:05 with three workers,
# 22:16 with two in the CI pre-check before).
PYTEST := OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 3 --dist loadgroup --no-loadscope-reorder --durations=15

test: setup
	$(PYTEST) -m "not lifecycle and not rehearsal and not variant" tests

test-lifecycle: setup
	$(PYTEST) -m "lifecycle or rehearsal" tests

test-long: setup
	$(PYTEST) -m "lifecycle or rehearsal or variant" tests

# One leg per supported AReaL: `make test-leg AREAL=2.0.0 VENV=.venv-a2`.
test-leg: setup
	$(PYTEST) -m each_areal tests

demo: setup
	$(VENV)/bin/areal-debug demo

lint: setup
	$(PY) -m ruff check areal_debug tests benchmarks examples reliability
	$(PY) -m ruff format --check areal_debug tests benchmarks examples reliability
	$(VENV)/bin/lint-imports

# Every script runs, whatever the one before printed, so that one MISS hides no
# other figure; the target fails at the end if any script printed a MISS or a
# SKIP or failed (each exits non-zero then: benchmarks/figures.py). The demo
# that replay_wait.py runs is read again by compression.py and stage_digest_cost.py.
bench: setup
	@d=$$(mktemp -d); failed=; \
	run() { n=$$1; shift; "$$@" || failed="$$failed $$n"; }; \
	one="env OMP_NUM_THREADS=1 $(PY)"; \
	run cli_startup $(PY) benchmarks/cli_startup.py; \
	run dump_overhead $(PY) benchmarks/dump_overhead.py; \
	run kept_checkpoint_disk $(PY) benchmarks/kept_checkpoint_disk.py; \
	run fetch_overhead $$one benchmarks/fetch_overhead.py; \
	run html_report $$one benchmarks/html_report.py; \
	run recording_diff $$one benchmarks/recording_diff.py; \
	run replay_wait $$one benchmarks/replay_wait.py --workdir $$d; \
	run compression $$one benchmarks/compression.py --workdir $$d --reuse; \
	run stage_digest_cost $$one benchmarks/stage_digest_cost.py --workdir $$d --reuse; \
	run blame_cost $$one benchmarks/blame_cost.py --workdir $$d --reuse; \
	run recorder_memory $$one benchmarks/recorder_memory.py; \
	run end_to_end $$one benchmarks/end_to_end.py; \
	run step_n $$one benchmarks/step_n.py; \
	rm -rf $$d; \
	if [ -n "$$failed" ]; then echo "make bench: a MISS, SKIP or error in:$$failed" >&2; exit 1; fi

# The recorder at a real model's shape (Qwen2.5-1.5B, 512 x 2048 tokens) on a GPU;
# a small shape on CPU. Needs only PyTorch and transformers where it runs.
# Run with the interpreter it is given, no set-up first: a GPU machine has its own
# torch (`make bench-gpu BENCH_PY=python3`); the venv's where one exists here.
BENCH_PY ?= $(if $(wildcard $(PY)),$(PY),$(PYTHON))
bench-gpu:
	$(BENCH_PY) benchmarks/gpu_step.py

reliability: test-lifecycle
	OMP_NUM_THREADS=1 $(PY) -m reliability.run

# The lent GPU machine's check in one call: prepare here, then run there with the
# device tool's `carry: [".whl"]` (benchmarks/gpu_check/run.sh says how). No
# dependency on setup: that machine has no venv, and its python3 holds torch.
gpu-check-prepare:
	bash benchmarks/gpu_check/prepare.sh

gpu-check:
	bash benchmarks/gpu_check/run.sh

clean:
	rm -rf $(VENV)
