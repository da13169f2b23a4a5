# areal-debug: set-up, tests and the demo on a CPU machine.
#   make setup   create .venv with torch (CPU), areal 1.0.4 and this package (idempotent)
#   make test    set up if needed (and xfsprogs, as root), then run the whole test suite
#   make demo    set up if needed, then record and replay a real GRPO run on CPU
#   make lint    ruff over the package, tests and benchmarks
#   make reliability  the whole reliability suite (crashes, hostile files, ...) and its table
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.setup-done

.PHONY: setup test-tools test demo lint bench reliability clean

setup: $(STAMP)

# The stamp depends on everything that defines the environment, so editing the
# requirements re-runs set-up; a finished set-up is not repeated.
$(STAMP): pyproject.toml requirements/cpu.txt requirements/constraints-cpu.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# The CPU build first: areal's own pins (torch<2.11) would pull CUDA wheels.
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet --no-deps areal==1.0.4
	$(PIP) install --quiet -c requirements/constraints-cpu.txt -r requirements/cpu.txt
	$(PIP) install --quiet --no-deps -e .
	$(PY) -c "import areal, areal_debug, torch; print('areal', areal.__version__, 'torch', torch.__version__)"
	touch $(STAMP)

# mkfs.xfs, for the reflink test and benchmark (a loop-mounted XFS): installed
# where make runs as root with apt; elsewhere those say why they do not run.
test-tools:
	@if [ "$$(id -u)" = 0 ] && ! command -v mkfs.xfs >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then \
		export DEBIAN_FRONTEND=noninteractive; \
		(apt-get install -y -qq xfsprogs || (apt-get update -qq && apt-get install -y -qq xfsprogs)) >/dev/null 2>&1 \
			|| echo "xfsprogs could not be installed: tests/test_reflinks.py will be skipped"; \
	fi

test: setup test-tools
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --dist loadgroup --durations=15 tests

demo: setup
	$(VENV)/bin/areal-debug demo

lint: setup
	$(PY) -m ruff check areal_debug tests benchmarks examples reliability
	$(PY) -m ruff format --check areal_debug tests benchmarks examples reliability

bench: setup test-tools
	$(PY) benchmarks/dump_overhead.py
	$(PY) benchmarks/kept_checkpoint_disk.py
	OMP_NUM_THREADS=1 $(PY) benchmarks/compression.py
	OMP_NUM_THREADS=1 $(PY) benchmarks/fetch_overhead.py
	d=$$(mktemp -d) && OMP_NUM_THREADS=1 $(PY) benchmarks/replay_wait.py --workdir $$d && OMP_NUM_THREADS=1 $(PY) benchmarks/stage_digest_cost.py --workdir $$d --reuse; s=$$?; rm -rf $$d; exit $$s

reliability: setup
	OMP_NUM_THREADS=1 $(PY) -m reliability.run

clean:
	rm -rf $(VENV)
