#!/usr/bin/env bash
# Build StarPU from source into a prefix: with CUDA (for GPUs), more CPU workers per
# process than Debian's build allows (--enable-maxcpus) and FxT tracing when libfxt is
# installed.  Then build tiletrain against it:
#
#   scripts/build-starpu.sh --prefix "$PWD/build/starpu"          # prints the two lines below
#   export PKG_CONFIG_PATH=$PWD/build/starpu/lib/pkgconfig:$PKG_CONFIG_PATH
#   export LD_LIBRARY_PATH=$PWD/build/starpu/lib:$LD_LIBRARY_PATH
#   rm -rf build/cmake && .venv/bin/pip install -e '.[test]'      # CMake picks the new StarPU
#
# Source, first found: --tarball FILE (a StarPU release tarball, e.g. starpu-1.4.x.tar.gz;
# 1.4 is advised for recent CUDA), $STARPU_TARBALL, or Debian's source package
# (`apt-get source starpu`; a deb-src entry mirroring the deb entries is added when
# missing and this user is root).  --fetch-only stops after putting the source tarball in
# build/starpu-src/ (to carry to a machine without network, see scripts/gpu_check.sh);
# --env-only prints the exports for a StarPU already installed in --prefix.
#
# Options: --prefix DIR (default build/starpu), --jobs N (default: all cores),
#          --no-cuda, --cuda-dir DIR (default: from nvcc's location or $CUDA_HOME),
#          --cublas-dir DIR (cuBLAS, and cuSPARSE that StarPU 1.3 also includes, outside the
#          toolkit, with include/ and lib/: e.g. the nvidia-cublas and nvidia-cusparse
#          wheels' site-packages/nvidia/cu13; found there by default),
#          --maxcpus N (default: the cores of this machine, at least 64),
#          any other argument is passed to ./configure.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=$ROOT/build/starpu
SRC_DIR=$ROOT/build/starpu-src
TARBALL=${STARPU_TARBALL:-}
JOBS=$(nproc 2>/dev/null || echo 2)
CUDA=auto
CUDA_DIR=${CUDA_HOME:-}
CUBLAS_DIR=${CUBLAS_DIR:-}
MAXCPUS=$(( $(nproc 2>/dev/null || echo 2) > 64 ? $(nproc) : 64 ))
FETCH_ONLY=0
ENV_ONLY=0
EXTRA=()

while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) PREFIX=$2; shift 2 ;;
        --tarball) TARBALL=$2; shift 2 ;;
        --jobs) JOBS=$2; shift 2 ;;
        --no-cuda) CUDA=no; shift ;;
        --cuda-dir) CUDA_DIR=$2; CUDA=yes; shift 2 ;;
        --cublas-dir) CUBLAS_DIR=$2; shift 2 ;;
        --maxcpus) MAXCPUS=$2; shift 2 ;;
        --fetch-only) FETCH_ONLY=1; shift ;;
        --env-only) ENV_ONLY=1; shift ;;
        -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
        *) EXTRA+=("$1"); shift ;;
    esac
done

say() { echo "build-starpu: $*" >&2; }
die() { say "error: $*"; exit 1; }

find_cublas() {
    # StarPU's CUDA support needs cuBLAS; pip-installed CUDA (nvidia-cublas wheel) keeps
    # it apart from the toolkit, with versioned library names only.
    if [ -z "$CUBLAS_DIR" ] && ! ls "$CUDA_DIR"/lib*/libcublas.so >/dev/null 2>&1; then
        for py in python3 "$ROOT/.venv/bin/python"; do
            command -v "$py" >/dev/null 2>&1 || continue
            CUBLAS_DIR=$("$py" - <<'PY' 2>/dev/null || true
import glob, os, site, sysconfig
dirs = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
for d in sorted(dirs):
    for c in sorted(glob.glob(os.path.join(d, "nvidia", "*")), reverse=True):
        if os.path.exists(os.path.join(c, "include", "cublas_v2.h")) and glob.glob(os.path.join(c, "lib", "libcublas.so*")):
            print(c)
            raise SystemExit
PY
)
            if [ -n "$CUBLAS_DIR" ]; then break; fi
        done
    fi
    return 0
}

print_env() {
    local pc
    pc=$(ls -d "$PREFIX"/lib*/pkgconfig 2>/dev/null | head -1)
    [ -n "$pc" ] || die "no StarPU installed in $PREFIX"
    echo "export PKG_CONFIG_PATH=$pc\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
    echo "export LD_LIBRARY_PATH=$(dirname "$pc")${CUBLAS_DIR:+:$CUBLAS_DIR/lib}\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    if [ -n "$CUBLAS_DIR" ]; then echo "export CUBLAS_DIR=$CUBLAS_DIR"; fi
}

# ---- the source ------------------------------------------------------------------
debian_source() {
    mkdir -p "$SRC_DIR"
    if ! apt-cache showsrc starpu >/dev/null 2>&1 || [ -z "$(apt-cache showsrc starpu 2>/dev/null)" ]; then
        [ "$(id -u)" -eq 0 ] || die "no deb-src entry for apt; add one (or pass --tarball FILE) and rerun"
        say "adding deb-src entries that mirror this system's deb entries"
        if ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then
            for f in /etc/apt/sources.list.d/*.sources; do
                case "$f" in *tiletrain-deb-src*) continue ;; esac
                sed -n 's/^Types: deb$/Types: deb-src/; p' "$f"
                echo
            done > /etc/apt/sources.list.d/tiletrain-deb-src.sources
        fi
        if [ -f /etc/apt/sources.list ]; then
            grep -E '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' > /etc/apt/sources.list.d/tiletrain-deb-src.list || true
        fi
        apt-get update -qq
    fi
    (cd "$SRC_DIR" && apt-get source --download-only starpu >&2) || die "apt-get source starpu failed"
    ls "$SRC_DIR"/starpu_*.orig.tar.* | head -1
}

if [ "$ENV_ONLY" = 1 ]; then
    if [ "$CUDA" != no ] && grep -q '^#define STARPU_USE_CUDA 1' "$PREFIX"/include/starpu/*/starpu_config.h 2>/dev/null; then
        CUDA_DIR=${CUDA_DIR:-/nonexistent}
        find_cublas
    fi
    print_env
    exit 0
fi

if [ -z "$TARBALL" ]; then
    TARBALL=$(ls "$SRC_DIR"/starpu_*.orig.tar.* "$SRC_DIR"/starpu-*.tar.gz 2>/dev/null | head -1 || true)
fi
if [ -z "$TARBALL" ]; then
    TARBALL=$(debian_source)
fi
[ -f "$TARBALL" ] || die "source tarball $TARBALL not found"
TARBALL=$(cd "$(dirname "$TARBALL")" && pwd)/$(basename "$TARBALL")
say "source: $TARBALL"
if [ "$FETCH_ONLY" = 1 ]; then
    echo "$TARBALL"
    exit 0
fi

# ---- configure options -------------------------------------------------------------
OPTS=(--prefix="$PREFIX" --enable-maxcpus="$MAXCPUS" --disable-build-examples --disable-build-tests
      --disable-build-doc --disable-starpupy --disable-socl)
if [ "$CUDA" != no ]; then
    if [ -z "$CUDA_DIR" ] && command -v nvcc >/dev/null 2>&1; then
        # nvcc may be a wrapper script: ask it where its toolkit is
        top=$(cd /tmp && echo > tt_probe_$$.cu && nvcc --dryrun -c tt_probe_$$.cu 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)
        rm -f /tmp/tt_probe_$$.cu
        [ -n "$top" ] && CUDA_DIR=$(cd "$top" && pwd)
    fi
    if [ -n "$CUDA_DIR" ] && [ -e "$CUDA_DIR/include/cuda_runtime.h" ]; then
        OPTS+=(--enable-cuda --with-cuda-dir="$CUDA_DIR")
        [ -d "$CUDA_DIR/lib64" ] && OPTS+=(--with-cuda-lib-dir="$CUDA_DIR/lib64")
        say "CUDA: $CUDA_DIR"
        find_cublas
        if [ -n "$CUBLAS_DIR" ]; then
            shim=$ROOT/build/starpu-cublas-shim
            mkdir -p "$shim"
            for real in "$CUBLAS_DIR"/lib/lib*.so.*; do  # libcublas.so.13 -> libcublas.so, cusparse too
                [ -e "$real" ] || continue
                base=$(basename "$real")
                ln -sf "$real" "$shim/${base%%.so.*}.so"
            done
            export CPPFLAGS="${CPPFLAGS:-} -I$CUBLAS_DIR/include"
            export LDFLAGS="${LDFLAGS:-} -L$shim -Wl,-rpath,$CUBLAS_DIR/lib"
            say "cuBLAS: $CUBLAS_DIR"
        fi
    elif [ "$CUDA" = yes ]; then
        die "no CUDA toolkit at '$CUDA_DIR' (cuda_runtime.h missing)"
    else
        say "no CUDA toolkit found (nvcc not on PATH, CUDA_HOME unset): building without CUDA"
        OPTS+=(--disable-cuda)
    fi
else
    OPTS+=(--disable-cuda)
fi
if pkg-config --exists fxt 2>/dev/null; then
    OPTS+=(--with-fxt)
    say "FxT: $(pkg-config --modversion fxt)"
else
    say "libfxt not found (Debian: libfxt-dev): building without FxT traces"
fi
command -v mpicc >/dev/null 2>&1 || OPTS+=(--disable-mpi)

# ---- build -------------------------------------------------------------------------
WORK=$ROOT/build/starpu-build
rm -rf "$WORK"
mkdir -p "$WORK"
tar -xf "$TARBALL" -C "$WORK"
SRC=$(find "$WORK" -mindepth 1 -maxdepth 1 -type d | head -1)
[ -x "$SRC/configure" ] || die "$SRC has no configure script (a release tarball is needed)"

# CUDA 13 removed cudaDeviceProp::computeMode, and recent cuBLAS refuses cublas.h next to
# cublas_v2.h: small source fixes for StarPU 1.3 (each applied only where its pattern is;
# seen building 1.3.10 against CUDA 13.0).
patch_cuda_compat() {
    local f=$SRC/src/drivers/cuda/driver_cuda.c
    if [ -f "$f" ] && grep -q 'props\[devid\]\.computeMode' "$f"; then
        sed -i 's/if (props\[devid\]\.computeMode == cudaComputeModeExclusive)/int tt_compute_mode = 0; cudaDeviceGetAttribute(\&tt_compute_mode, cudaDevAttrComputeMode, devid); if (tt_compute_mode == cudaComputeModeExclusive)/' "$f"
        say "patched $f (computeMode)"
    fi
    f=$SRC/src/drivers/cuda/driver_cuda.h
    if [ -f "$f" ] && grep -q '^#include <cublas.h>$' "$f"; then
        sed -i 's|^#include <cublas.h>$|#include <cublas_v2.h>|' "$f"
        say "patched $f (cublas_v2.h)"
    fi
    f=$SRC/src/drivers/cuda/starpu_cublas.c
    if [ -f "$f" ] && grep -q '^#include <cublas.h>$' "$f"; then
        sed -i -e 's|^#include <starpu_cublas_v2.h>$||' \
            -e 's|^#include <cublas.h>$|#include <starpu_cublas_v2.h>\n/* the legacy API, declared here: recent cuBLAS refuses cublas.h next to cublas_v2.h */\ncublasStatus_t cublasInit(void);\ncublasStatus_t cublasShutdown(void);\ncublasStatus_t cublasSetKernelStream(cudaStream_t stream);\ntypedef cublasStatus_t cublasStatus;|' "$f"
        say "patched $f (legacy cuBLAS declarations)"
    fi
}
case " ${OPTS[*]} " in *" --enable-cuda "*) patch_cuda_compat ;; esac
say "configure ${OPTS[*]} ${EXTRA[*]:-}"
(cd "$SRC" && ./configure "${OPTS[@]}" "${EXTRA[@]}" > "$WORK/configure.log" 2>&1) \
    || { tail -30 "$WORK/configure.log" >&2; die "configure failed (log: $WORK/configure.log)"; }
grep -E "^ *(CUDA|OpenCL|MPI|FxT|Maximum number of CPUs)" "$WORK/configure.log" >&2 || true
(cd "$SRC" && make -j"$JOBS" > "$WORK/make.log" 2>&1 && make install > "$WORK/install.log" 2>&1) \
    || { tail -30 "$WORK/make.log" >&2; die "build failed (log: $WORK/make.log)"; }

say "installed StarPU into $PREFIX"
print_env
