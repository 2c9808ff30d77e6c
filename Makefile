# tiletrain: `make train` and `make test` each set everything up first (system packages,
# .venv, the C library), and are quick when that is already done.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The CPU BLAS: openblas (Debian's, the default) or mkl (Intel MKL from the mkl-devel wheel,
# installed into .venv): `make setup BLAS=mkl` rebuilds with it.
BLAS   ?= openblas
STAMP  := $(VENV)/.tiletrain-installed-$(BLAS)
# StarPU: `own` (the default) builds tiletrain's StarPU 1.3.10 from Debian's source package
# (or STARPU_TARBALL=file) once into ~/.cache/tiletrain/starpu/<key>/ ($TILETRAIN_CACHE), with
# 256 CPU workers per process, FxT, OpenCL, MPI, and CUDA where nvcc is found
# (scripts/build-starpu.sh); `system` uses Debian's binary libstarpu-dev (4 CPU workers per
# process, no CUDA, no FxT).  build/starpu.env records the choice.
STARPU ?= own
export STARPU STARPU_TARBALL
STARPU_ENV := build/starpu.env
# Changes to these rebuild the C library and the cffi module.
BUILD_INPUTS := $(shell find csrc -type f 2>/dev/null) CMakeLists.txt setup.py pyproject.toml \
                tiletrain/_build_ffi.py tiletrain/_version.py $(STARPU_ENV)
# Tests keep their StarPU perf models out of the user's ~/.starpu.
TEST_ENV := STARPU_HOME=$(CURDIR)/build/starpu-home-test

.PHONY: setup system sim bytecode test test-fast train generate bench info clean docs FORCE

setup: system $(STAMP) sim bytecode

system:
	@PYTHON=$(PYTHON) bash scripts/setup-system.sh

$(PY): | system
	$(PYTHON) -m venv $(VENV)

# Quick when the cache has the build (the script only computes its key); rewrites
# $(STARPU_ENV) only when the StarPU changes, so the C library is rebuilt only then.
$(STARPU_ENV): FORCE | system $(PY)
	@PYTHON=$(PY) bash scripts/build-starpu.sh --record $@ >/dev/null

$(STAMP): $(BUILD_INPUTS) | system $(PY)
	@test "$(BLAS)" = openblas || test "$(BLAS)" = mkl || { echo "BLAS must be openblas or mkl, got '$(BLAS)'" >&2; exit 2; }
	@test "$(BLAS)" != mkl || $(PY) -m pip install --quiet --disable-pip-version-check mkl-devel
	rm -f $(VENV)/.tiletrain-installed*
	TILETRAIN_BLAS=$(BLAS) TILETRAIN_MKL_PREFIX=$(CURDIR)/$(VENV) \
	  $(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,docs]'
	@touch $@

# The simulation flavour (docs/simulation.md): StarPU built with SimGrid from the same source
# and patches, once per machine into its own cache entry (scripts/build-starpu.sh --sim), then
# libtiletrain_sim.so and tiletrain._tiletrain_sim_cffi against it (setup.py build_sim).
# Optional: where SimGrid is missing setup says so and everything else works.
SIM_ENV   := build/starpu-sim.env
SIM_STAMP := build/.tiletrain-sim-built
sim: $(STAMP)
	@if PYTHON=$(PY) bash scripts/build-starpu.sh --sim --record $(SIM_ENV) >/dev/null; then \
	  $(MAKE) --no-print-directory $(SIM_STAMP); \
	else \
	  echo "tiletrain: the simulation flavour is not built (see above); the real one is" >&2; \
	fi

$(SIM_STAMP): $(BUILD_INPUTS) $(SIM_ENV)
	$(PY) setup.py -q build_sim
	@touch $@

# Bytecode of the package and of the tests' helper modules, written here once: where the
# environment sets PYTHONDONTWRITEBYTECODE (some machines do), every `tiletrain` command and
# every test subprocess would otherwise compile ~120 modules from source at each start (1.3 s
# of a 2.2 s start, measured).  Quick when up to date; a changed source is recompiled.
bytecode: $(STAMP)
	@$(PY) -m compileall -q -j 0 tiletrain tests

# Prints the skipped tests with their reasons and the 15 slowest tests at the end.
# test-fast: the inner loop -- everything but the tests that launch mpirun.
test: setup
	$(TEST_ENV) $(PY) -m pytest -q --durations=15 tests

test-fast: setup
	$(TEST_ENV) $(PY) -m pytest -q --durations=15 -m "not mpi" tests

# The main job: a 4-layer GPT on the Python standard library's sources, ~2 minutes on 2
# cores; the checkpoint goes to runs/default (sample again with `make generate`).  A second
# `make train` resumes that run (an interrupted one continues; a finished one says so and
# stops); start over with `make train TRAIN_FLAGS=--overwrite`.
RUN := runs/default
TRAIN_FLAGS ?= $(if $(wildcard $(RUN)/checkpoint.safetensors),--resume)
train: setup
	$(PY) -m tiletrain train --ckpt-dir $(RUN) $(TRAIN_FLAGS)

# A sample from the model `make train` wrote, e.g. make generate GENERATE_FLAGS="--prompt 'class ' --tokens 400"
# (every option: .venv/bin/tiletrain generate --help).
generate: setup
	$(PY) -m tiletrain generate --ckpt-dir $(RUN) $(GENERATE_FLAGS)

bench: setup
	@$(PY) -c 'import torch' 2>/dev/null || $(PY) -m pip install --quiet --disable-pip-version-check 'torch==2.13.0'
	$(PY) benchmarks/matmul.py
	$(PY) benchmarks/task_overhead.py
	$(PY) benchmarks/block.py
	$(PY) benchmarks/gpt_step.py
	$(PY) benchmarks/llama_step.py
	$(PY) benchmarks/ops.py
	$(PY) benchmarks/cnn_step.py
	$(PY) benchmarks/retile.py

# Fuzz every file parser (tests/fuzz: safetensors headers and shard index, checkpoints, config.json,
# tokenizer.json, schedule CSV, trace JSON) for FUZZ_SECONDS each, e.g. make fuzz FUZZ_SECONDS=300, and
# print the runs and crashes per target; fuzz-ci: 20 s per target (CI).  Exit status 1 on a crash.
.PHONY: fuzz fuzz-ci
FUZZ_SECONDS ?= 60
fuzz: setup
	$(PY) tests/fuzz/run.py --seconds $(FUZZ_SECONDS)

fuzz-ci: setup
	$(PY) tests/fuzz/run.py --seconds 20

# The documentation site (docs/, mkdocs.yml) into build/site, with the pinned mkdocs of the
# `docs` extra (installed by setup); --strict: a broken link or anchor fails the build.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict -d build/site

info: setup
	$(PY) -m tiletrain info

clean:
	rm -rf build $(VENV) tiletrain/*.so *.egg-info
