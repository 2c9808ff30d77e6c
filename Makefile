# tiletrain: `make train` and `make test` each set everything up first (system packages,
# .venv, the C library), and are quick when that is already done.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The CPU BLAS: openblas (Debian's, the default) or mkl (Intel MKL from the mkl-devel wheel,
# installed into .venv): `make setup BLAS=mkl` rebuilds with it.
BLAS   ?= openblas
STAMP  := $(VENV)/.tiletrain-installed-$(BLAS)
# Changes to these rebuild the C library and the cffi module.
BUILD_INPUTS := $(shell find csrc -type f 2>/dev/null) CMakeLists.txt setup.py pyproject.toml \
                tiletrain/_build_ffi.py tiletrain/_version.py
# Tests keep their StarPU perf models out of the user's ~/.starpu.
TEST_ENV := STARPU_HOME=$(CURDIR)/build/starpu-home-test

.PHONY: setup system test train generate bench info clean

setup: system $(STAMP)

system:
	@PYTHON=$(PYTHON) bash scripts/setup-system.sh

$(STAMP): $(BUILD_INPUTS) | system
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@test "$(BLAS)" = openblas || test "$(BLAS)" = mkl || { echo "BLAS must be openblas or mkl, got '$(BLAS)'" >&2; exit 2; }
	@test "$(BLAS)" != mkl || $(PY) -m pip install --quiet --disable-pip-version-check mkl-devel
	rm -f $(VENV)/.tiletrain-installed*
	TILETRAIN_BLAS=$(BLAS) TILETRAIN_MKL_PREFIX=$(CURDIR)/$(VENV) \
	  $(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $@

# Prints the skipped tests with their reasons and the 15 slowest tests at the end.
test: setup
	$(TEST_ENV) $(PY) -m pytest -q --durations=15 tests

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

info: setup
	$(PY) -m tiletrain info

clean:
	rm -rf build $(VENV) tiletrain/*.so *.egg-info
