#!/usr/bin/env bash
# The prepared device check: on a machine with an NVIDIA GPU and no network, build StarPU
# with CUDA from a carried source tarball, build tiletrain against it, run the `cuda`
# tests, and print a table: tiled gemm TFLOP/s against cuBLAS (through cupy) on the same
# sizes, and a GPT training step's tokens/s against PyTorch on the same GPU.
#
#   scripts/gpu_check.sh --prepare    # on a machine WITH network: fills .gpu-bundle/
#   scripts/gpu_check.sh              # on the GPU machine (carry .gpu-bundle/ there)
#
# The bundle (under 64 MiB): StarPU's source tarball (scripts/build-starpu.sh --fetch-only:
# Debian's 1.3.10, the one `make setup` builds), Debian packages of OpenBLAS and hwloc
# (unpacked into a private sysroot when the GPU machine lacks them) and wheels of the Python
# packages `import tiletrain` needs beyond numpy (cffi, ml_dtypes, ...) for its python3.  The
# GPU machine is expected to have nvcc, cupy and PyTorch (the `cuda` image does); cuBLAS and
# cuSPARSE come from its toolkit, from tiletrain's cache (`make setup` there) or from its
# python3's nvidia-cublas / nvidia-cusparse wheels (arranged as a CUDA root here).  StarPU is
# built by scripts/build-starpu.sh with CUDA only (STARPU_FEATURES="": no FxT, MPI or OpenCL
# there), into a cache under TT_GPU_WORK, and tiletrain against it -- in place, in this
# checkout (`TT_GPU_DRYRUN=1` on a development checkout: run `make setup` afterwards).
#
# The GPT step is `python benchmarks/gpt_step.py --device cuda` (GPT-2 small's shape, vocab
# 8,192, B=8, T=1024, float32; tiletrain under dmdas with 1 CUDA worker + 2 CPU workers
# against PyTorch eager on the same GPU); it ends with `tokens_per_s tiletrain=<x> torch=<y>`.
#
# Environment: TT_GPU_BUNDLE (default .gpu-bundle), TT_GPU_WORK (default /tmp/tt-gpu),
# JOBS (default: all cores), TT_GPU_DRYRUN=1 (no GPU: check the build steps only).
# Everything it builds goes under TT_GPU_WORK (a StarPU found there is reused).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
BUNDLE=${TT_GPU_BUNDLE:-$ROOT/.gpu-bundle}
WORK=${TT_GPU_WORK:-/tmp/tt-gpu}
JOBS=${JOBS:-$(nproc)}
PYVER=${TT_GPU_PYVER:-3.12}
T0=$(date +%s)
say() { echo "gpu_check [$(( $(date +%s) - T0 ))s]: $*" >&2; }

# ---------------------------------------------------------------------------------------
if [ "${1:-}" = "--prepare" ]; then
    mkdir -p "$BUNDLE"
    tarball=$(scripts/build-starpu.sh --fetch-only | tail -1)
    cp -f "$tarball" "$BUNDLE/"
    (cd "$BUNDLE" && apt-get download libopenblas-dev libopenblas0-pthread libopenblas-pthread-dev \
        libopenblas0 libhwloc-dev libhwloc15 libgfortran5 libquadmath0 >/dev/null)
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$BUNDLE" cffi pycparser "ml_dtypes>=0.4,<0.7" threadpoolctl safetensors tqdm
    du -sh "$BUNDLE"
    say "bundle ready: carry .gpu-bundle to the GPU machine and run scripts/gpu_check.sh there"
    exit 0
fi

mkdir -p "$WORK"
if [ "${TT_GPU_DRYRUN:-0}" = 1 ]; then
    say "dry run: no GPU needed, stops after building tiletrain"
else
    nvidia-smi -L || { echo "gpu_check: no NVIDIA GPU (nvidia-smi failed)" >&2; exit 1; }
fi
command -v nvcc >/dev/null || { echo "gpu_check: nvcc not found" >&2; exit 1; }
nvcc --version | tail -1

# 1. Python packages the image may lack (cffi builds tiletrain's module; the others are imported
#    by `import tiletrain`), from the bundle's wheels.
missing=$(python3 -c 'import importlib.util as u; print(" ".join(m for m in ("cffi", "pycparser", "ml_dtypes",
    "threadpoolctl", "safetensors", "tqdm") if u.find_spec(m) is None))')
if [ -n "$missing" ]; then
    python3 -m pip install -q --no-index --find-links "$BUNDLE" --no-deps --no-compile --target "$WORK/site" $missing \
        || { echo "gpu_check: python3 lacks $missing and $BUNDLE has no wheel of them (run --prepare)" >&2; exit 1; }
    export PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH}
fi

# 2. OpenBLAS and hwloc from the carried Debian packages when the system has none.
if ! pkg-config --exists openblas 2>/dev/null || ! pkg-config --exists hwloc 2>/dev/null; then
    SYSROOT=$WORK/sysroot
    for deb in "$BUNDLE"/*.deb; do dpkg -x "$deb" "$SYSROOT"; done
    ML=$SYSROOT/usr/lib/x86_64-linux-gnu
    mkdir -p "$WORK/pc"
    sed -e "s|^libdir=.*|libdir=$ML/openblas-pthread|" \
        -e "s|^includedir=.*|includedir=$SYSROOT/usr/include/x86_64-linux-gnu/openblas-pthread|" \
        "$ML/openblas-pthread/pkgconfig/openblas.pc" > "$WORK/pc/openblas.pc"
    sed -e "s|^prefix=.*|prefix=$SYSROOT/usr|" "$ML/pkgconfig/hwloc.pc" > "$WORK/pc/hwloc.pc"
    export PKG_CONFIG_PATH=$WORK/pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    export PKG_CONFIG_ALLOW_SYSTEM_LIBS=1  # keep -L for dirs in LIBRARY_PATH (CMake needs them)
    export CPATH=$SYSROOT/usr/include${CPATH:+:$CPATH}
    export LIBRARY_PATH=$ML:$ML/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}
    export LD_LIBRARY_PATH=$ML:$ML/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    say "OpenBLAS/hwloc from the bundle: $(pkg-config --libs openblas) $(pkg-config --libs hwloc)"
fi

# 3. StarPU with CUDA, into a cache in $WORK (a second run on the same machine reuses it).
top=$(cd /tmp && : > tt_probe_$$.cu && nvcc --dryrun -c tt_probe_$$.cu 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)
rm -f /tmp/tt_probe_$$.cu
cached=$(ls -d "${TILETRAIN_CACHE:-$HOME/.cache/tiletrain}"/cuda/*/root 2>/dev/null | head -1 || true)
has_blas() { [ -e "$1/include/cublas_v2.h" ] && [ -e "$1/include/cusparse.h" ] \
             && { [ -e "$1/lib64/libcublas.so" ] || [ -e "$1/lib/libcublas.so" ]; }; }
link_new() {  # link $1/* into $2 where $2 has no such name yet (earlier sources win)
    [ -d "$1" ] || return 0
    for f in "$1"/*; do [ -e "$f" ] && [ ! -e "$2/$(basename "$f")" ] && ln -s "$f" "$2/"; done; return 0
}
if has_blas "$top"; then
    :  # the toolkit has cuBLAS and cuSPARSE, headers and unversioned libraries (what build-starpu.sh asks)
elif [ -n "$cached" ] && [ -e "$cached/include/cublas_v2.h" ]; then
    export STARPU_CUDA_ROOT=$cached  # the CUDA root `make setup` arranged from the pinned wheels
else
    # A CUDA root of the toolkit and, for what it lacks, python3's nvidia wheels: headers and
    # libraries linked side by side, unversioned names added (the toolkit's own may lack them).
    wheels=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))' 2>/dev/null || true)
    root=$WORK/cuda-root
    rm -rf "$root" && mkdir -p "$root/include" "$root/lib64" "$root/bin"
    for d in "$top/include" "$top/targets/x86_64-linux/include" ${wheels:+"$wheels/include"}; do link_new "$d" "$root/include"; done
    for d in "$top/lib64" "$top/lib" "$top/targets/x86_64-linux/lib" ${wheels:+"$wheels/lib"}; do link_new "$d" "$root/lib64"; done
    (cd "$root/lib64" && for real in lib*.so.*; do [ -e "${real%%.so.*}.so" ] || ln -s "$real" "${real%%.so.*}.so"; done)
    ln -sf "$top/bin/nvcc" "$root/bin/nvcc"
    if ! has_blas "$root"; then
        echo "gpu_check: no cuBLAS/cuSPARSE in the toolkit ($top) nor in python3's nvidia wheels (${wheels:-none});" \
             "found: $(find / -xdev \( -name 'libcublas.so*' -o -name cublas_v2.h \) 2>/dev/null | head -8 | tr '\n' ' ')" >&2
        exit 1
    fi
    export STARPU_CUDA_ROOT=$root
fi
say "CUDA root: ${STARPU_CUDA_ROOT:-$top} (cuBLAS $(ls ${STARPU_CUDA_ROOT:-$top}/lib64/libcublas.so* ${STARPU_CUDA_ROOT:-$top}/lib/libcublas.so* 2>/dev/null | head -1))"
say "building StarPU with CUDA (or finding it in $WORK/cache)"
tarball=$(ls "$BUNDLE"/starpu*.tar.* | head -1)
prefix=$(STARPU_TARBALL=$tarball TILETRAIN_CACHE=$WORK/cache STARPU_FEATURES="" STARPU_CUDA=yes STARPU_JOBS=$JOBS \
         PYTHON=python3 scripts/build-starpu.sh | tail -1)

# 4. tiletrain against it, built in place (the image's python3 keeps its torch and cupy).
say "building tiletrain"
rm -rf build/cmake build/ffi-gen
TILETRAIN_STARPU_PREFIX=$prefix python3 setup.py -q build_ext --inplace > "$WORK/build.log" 2>&1 \
    || { tail -40 "$WORK/build.log" >&2; exit 1; }
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
PY=python3
if [ "${TT_GPU_DRYRUN:-0}" = 1 ]; then
    "$PY" -m tiletrain info --ncpu 1 --ncuda 0 | grep -v '^kernels'
    say "dry run done"
    exit 0
fi
"$PY" -m tiletrain info --ncpu 1 --ncuda 1 | grep -v '^kernels'

# 5. The cuda tests.
say "running the cuda tests"
set +e
"$PY" -m pytest -q -p no:cacheprovider tests/hetero/test_cuda.py tests/hetero/test_cuda_build.py -k "not no_gpu and not without_a_gpu" 2>&1 | tail -15
tests_rc=${PIPESTATUS[0]}
set -e

# 6. The table.
say "benchmarks"
# Every figure must come out: a benchmark that fails or prints nothing fails the check (no n/a).
fail() { echo "gpu_check: FAILED: $*" >&2; failed=1; }
failed=0
set +e
"$PY" benchmarks/gpu_gemm.py --n 4096 8192 --tiles 2048 4096 --reps 5 > "$WORK/gemm.txt" 2>&1
gemm_rc=$?
"$PY" benchmarks/gpt_step.py --device cuda --reps 3 > "$WORK/gpt.txt" 2>&1
gpt_rc=$?
set -e
cat "$WORK/gemm.txt"
gemm=$(grep -E "cuBLAS|tiletrain tiles" "$WORK/gemm.txt" || true)
gpt=$(grep -E '^tokens_per_s' "$WORK/gpt.txt" | tail -1 || true)
[ "$gemm_rc" = 0 ] && [ -n "$gemm" ] || fail "benchmarks/gpu_gemm.py (rc $gemm_rc): see $WORK/gemm.txt"
[ "$gpt_rc" = 0 ] && [ -n "$gpt" ] || { tail -20 "$WORK/gpt.txt" >&2; fail "benchmarks/gpt_step.py --device cuda (rc $gpt_rc): see $WORK/gpt.txt"; }
[ "$tests_rc" = 0 ] || fail "the cuda tests (rc $tests_rc)"
echo
echo "== tiletrain GPU check ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)) =="
echo "$gemm" | sed 's/^/gemm  /'
echo "GPT step float32: ${gpt:-FAILED}"
echo "cuda tests: $([ "$tests_rc" = 0 ] && echo passed || echo "FAILED (rc $tests_rc)")"
[ "$failed" = 0 ] || { say "FAILED (see above)"; exit 1; }
say "done"
exit 0
