#!/usr/bin/env bash
# tiletrain's own StarPU: 1.3.10 built from source into a cache, once per set of build
# inputs, with more CPU workers per process than Debian's binary package allows
# (--enable-maxcpus=256), FxT tracing, OpenCL and StarPU-MPI, and CUDA where nvcc is found.
# `make setup` runs it; a second checkout (or a rebuilt .venv) finds the build in the cache
# and goes on in about a second.
#
#   scripts/build-starpu.sh [--record FILE]   # build if missing; print the prefix (or write FILE)
#   scripts/build-starpu.sh --fetch-only      # only download the source; print its path
#   scripts/build-starpu.sh --print-key       # the cache entry's name for these inputs
#   scripts/build-starpu.sh --sim [...]       # the simulation flavour (below), same actions
#
# The simulation flavour (--sim): the same source, cache and patches, configured
# --enable-simgrid (SimGrid 3.32: Debian's libsimgrid-dev), plus the patches in
# scripts/starpu-patches/simgrid/.  Its own cache key (<version>-sim-<hash>).  Kernels are
# not run there: StarPU plays the task graph on a simulated platform with calibrated perf
# models (docs/simulation.md).  It has no StarPU-MPI (SimGrid's SMPI needs a static build),
# no FxT, no OpenCL; simulated CUDA devices need no CUDA toolkit (--enable-maxcudadev=16).
# Without SimGrid it stops with exit status 3 and says what is missing; the real flavour
# does not depend on it.
#
# Where the source comes from (the first that applies):
#   STARPU_TARBALL=FILE   a StarPU release tarball you downloaded (any distribution)
#   (default)             Debian's source package `starpu` (1.3.10+dfsg-2), fetched with
#                         `apt-get source` through a private deb-src list under the cache:
#                         the system's apt configuration is not touched, root is not needed.
#   STARPU=system         no build: Debian's binary libstarpu-dev (4 CPU workers per process,
#                         no CUDA, no FxT); `--record` writes that choice.
#
# The cache: $TILETRAIN_CACHE/starpu/<key>/ (default ~/.cache/tiletrain/starpu/<key>/), the
# key a hash of the StarPU version and source, the configure options, the patches in
# scripts/starpu-patches/ (each says why it exists), the CUDA inputs and the versions of the
# system libraries StarPU links.  A build runs in a temporary directory beside it and is
# renamed into place only once installed and checked, so an interrupted or failed build never
# leaves a half-finished entry (its logs stay in $TILETRAIN_CACHE/starpu/logs/).
#
# CUDA (STARPU_CUDA=auto, the default: when nvcc is on PATH; =no to skip; =yes to require
# it): StarPU 1.3 needs cuBLAS and cuSPARSE besides nvcc.  When nvcc's toolkit lacks them,
# the CUDA 13.0 wheels pinned in pyproject.toml's `cuda` extra (cuBLAS, cuSPARSE, runtime,
# crt, cccl: ~575 MB to download) are installed with pip into $TILETRAIN_CACHE/cuda/<key>/
# and arranged as a CUDA root there; StarPU and libtiletrain find them through their rpath
# (no LD_LIBRARY_PATH).  PYTHON names the interpreter whose pip installs them (default
# python3; `make setup` passes .venv's).
#
# Other settings: STARPU_JOBS (default: the number of cores), STARPU_DEB_SRC_URI (default
# http://deb.debian.org/debian), STARPU_DEB_SUITE (default bookworm), STARPU_PATCH_DIR (default
# scripts/starpu-patches: another StarPU version may need other patches, or none),
# STARPU_FEATURES (default "fxt mpi opencl": fewer for a machine without their packages),
# STARPU_CUDA_ROOT (a CUDA root to use as it is: include/ with cuBLAS and cuSPARSE, lib64/).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PATCH_DIR=${STARPU_PATCH_DIR:-$ROOT/scripts/starpu-patches}
CACHE=${TILETRAIN_CACHE:-${HOME:-/root}/.cache/tiletrain}
STARPU_CACHE=$CACHE/starpu
MODE=${STARPU:-own}
TARBALL=${STARPU_TARBALL:-}
CUDA=${STARPU_CUDA:-auto}
JOBS=${STARPU_JOBS:-$(nproc 2>/dev/null || echo 2)}
PYTHON=${PYTHON:-python3}
VERSION=1.3.10
DEB_VERSION=1.3.10+dfsg-2
DEB_URI=${STARPU_DEB_SRC_URI:-http://deb.debian.org/debian}
DEB_SUITE=${STARPU_DEB_SUITE:-bookworm}
MAXCPUS=256
# StarPU's optional parts tiletrain builds (each needs its system package); a machine
# that cannot have one (scripts/gpu_check.sh's GPU machine) names fewer
FEATURES=" ${STARPU_FEATURES-fxt mpi opencl} "
has() { case "$FEATURES" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
# Bump when the way this script builds changes (what the key cannot see otherwise).
RECIPE=3

RECORD=
ACTION=build
FLAVOUR=real
while [ $# -gt 0 ]; do
    case "$1" in
        --record) RECORD=$2; shift 2 ;;
        --fetch-only) ACTION=fetch; shift ;;
        --print-key) ACTION=key; shift ;;
        --sim) FLAVOUR=sim; shift ;;
        -h|--help) sed -n '2,51p' "$0"; exit 0 ;;
        *) echo "build-starpu: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

if [ "$FLAVOUR" = sim ]; then
    # the simulation flavour: always tiletrain's own build (Debian's binary has no SimGrid),
    # without StarPU-MPI, FxT, OpenCL and a real CUDA (simulated devices need none)
    MODE=own
    CUDA=no
    FEATURES=" "
fi

T0=$(date +%s)
say() { echo "build-starpu [$(( $(date +%s) - T0 ))s]: $*" >&2; }

# The one message for every reason setup cannot build StarPU: what is missing, then the two
# ways around it.
stop() {
    {
        echo
        echo "tiletrain: cannot build StarPU $VERSION: $1"
        if [ -n "${2:-}" ]; then echo "  $2"; fi
        echo "  Either give setup a StarPU source tarball you downloaded:"
        echo "      make setup STARPU_TARBALL=/path/to/starpu-$VERSION.tar.gz"
        echo "  or use Debian's binary StarPU (libstarpu-dev: at most 4 CPU workers per process, no CUDA, no FxT):"
        echo "      make setup STARPU=system"
        echo
    } >&2
    exit 1
}

case "$MODE" in own|system) ;; *) echo "build-starpu: STARPU must be 'own' or 'system', got '$MODE'" >&2; exit 2 ;; esac
case "$CUDA" in auto|yes|no) ;; *) echo "build-starpu: STARPU_CUDA must be auto, yes or no, got '$CUDA'" >&2; exit 2 ;; esac

# `--record FILE`: FILE names the StarPU this checkout builds against; rewritten only when it
# changes, so that make rebuilds the C library only then.
record() {
    local text
    text=$(printf '# scripts/build-starpu.sh: the StarPU this checkout builds against (make setup)\nSTARPU_MODE=%s\nSTARPU_PREFIX=%s\n' "$1" "$2")
    if [ -n "$RECORD" ]; then
        mkdir -p "$(dirname "$RECORD")"
        if [ ! -f "$RECORD" ] || [ "$(cat "$RECORD")" != "$text" ]; then
            printf '%s\n' "$text" > "$RECORD"
        fi
    fi
    if [ -n "$2" ]; then echo "$2"; fi
}

if [ "$MODE" = system ]; then
    pkg-config --exists starpu-1.3 2>/dev/null || pkg-config --exists starpu-1.4 2>/dev/null || {
        echo "tiletrain: STARPU=system needs Debian's StarPU: apt-get install libstarpu-dev (make setup STARPU=system does, as root)" >&2
        exit 1
    }
    record system ""
    exit 0
fi

# ---- build dependencies --------------------------------------------------------------------
missing=()
command -v cc >/dev/null 2>&1 || missing+=("a C compiler (build-essential)")
command -v make >/dev/null 2>&1 || missing+=("make (build-essential)")
command -v patch >/dev/null 2>&1 || missing+=("patch")
command -v pkg-config >/dev/null 2>&1 || missing+=("pkg-config")
if command -v pkg-config >/dev/null 2>&1; then
    pkg-config --exists hwloc 2>/dev/null || missing+=("libhwloc-dev (hwloc)")
    if has fxt; then pkg-config --exists fxt 2>/dev/null || missing+=("libfxt-dev (FxT)"); fi
fi
if has mpi; then command -v mpicc >/dev/null 2>&1 || missing+=("libopenmpi-dev (mpicc, for StarPU-MPI)"); fi
if has opencl; then
    if ! echo '#include <CL/cl.h>' | cc -E -x c - >/dev/null 2>&1; then missing+=("opencl-headers (CL/cl.h)"); fi
    if ! echo 'int main(void) { return 0; }' | cc -x c - -lOpenCL -o /dev/null >/dev/null 2>&1; then
        missing+=("ocl-icd-opencl-dev (libOpenCL.so)")
    fi
fi
if [ "$FLAVOUR" = sim ] && command -v pkg-config >/dev/null 2>&1 && ! pkg-config --exists simgrid 2>/dev/null; then
    {
        echo
        echo "tiletrain: the simulation flavour of StarPU cannot be built: SimGrid is missing (pkg-config simgrid)."
        echo "  As root: apt-get install libsimgrid-dev (scripts/setup-system.sh installs it), then make setup."
        echo "  The real flavour does not need it; \`tiletrain simulate\` says so until it is built."
        echo
    } >&2
    exit 3
fi
if [ ${#missing[@]} -gt 0 ]; then
    list=$(IFS=,; echo "${missing[*]}" | sed 's/,/, /g')
    stop "missing build dependencies: $list." \
         "As root, 'make setup' installs them (scripts/setup-system.sh), or: apt-get install build-essential pkg-config libhwloc-dev libfxt-dev libopenmpi-dev opencl-headers ocl-icd-opencl-dev"
fi

# ---- CUDA ----------------------------------------------------------------------------------
NVCC=
NVCC_RELEASE=
TOOLKIT=
CUDA_PINS=
CUDA_ROOT_GIVEN=
if [ "$CUDA" != no ]; then
    NVCC=$(command -v nvcc || true)
    if [ -z "$NVCC" ] && [ "$CUDA" = yes ]; then
        echo "build-starpu: STARPU_CUDA=yes but nvcc is not on PATH" >&2
        exit 1
    fi
fi
if [ -n "$NVCC" ]; then
    NVCC_RELEASE=$("$NVCC" --version | sed -n 's/.*release \([0-9][0-9.]*\),.*/\1/p' | head -1)
    # nvcc may be a wrapper script: ask it where its toolkit is
    probe=$(mktemp -d)
    TOOLKIT=$(cd "$probe" && : > p.cu && "$NVCC" --dryrun -c p.cu 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)
    rm -rf "$probe"
    [ -n "$TOOLKIT" ] && TOOLKIT=$(cd "$TOOLKIT" && pwd -P)
    if [ -z "$TOOLKIT" ] || [ ! -e "$TOOLKIT/include/cuda_runtime.h" ]; then
        echo "build-starpu: cannot find nvcc's CUDA toolkit (nvcc --dryrun gave TOP='$TOOLKIT'); STARPU_CUDA=no builds without CUDA" >&2
        exit 1
    fi
    if [ -n "${STARPU_CUDA_ROOT:-}" ]; then
        CUDA_ROOT=$STARPU_CUDA_ROOT  # given: include/ (cuBLAS, cuSPARSE) and lib64/ with unversioned names
        CUDA_ROOT_GIVEN="root $CUDA_ROOT"
    elif [ -e "$TOOLKIT/include/cublas_v2.h" ] && [ -e "$TOOLKIT/include/cusparse.h" ] \
            && { [ -e "$TOOLKIT/lib64/libcublas.so" ] || [ -e "$TOOLKIT/lib/libcublas.so" ]; }; then
        CUDA_ROOT=$TOOLKIT  # a full toolkit: cuBLAS and cuSPARSE included
    else
        case "$NVCC_RELEASE" in
            13.*) ;;
            *) echo "build-starpu: nvcc is CUDA $NVCC_RELEASE and its toolkit ($TOOLKIT) has no cuBLAS/cuSPARSE; the wheels pinned in pyproject.toml's 'cuda' extra are CUDA 13's. Install cuBLAS and cuSPARSE into that toolkit, or build without CUDA: STARPU_CUDA=no" >&2
               exit 1 ;;
        esac
        CUDA_PINS=$("$PYTHON" - "$ROOT/pyproject.toml" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
try:
    import tomllib
    pins = tomllib.loads(text)["project"]["optional-dependencies"]["cuda"]
except ImportError:  # Python < 3.11
    pins = re.findall(r'"([^"]+)"', re.search(r'^cuda\s*=\s*\[(.*?)\]', text, re.S | re.M).group(1))
print(" ".join(sorted(pins)))
PY
)
        [ -n "$CUDA_PINS" ] || { echo "build-starpu: pyproject.toml has no 'cuda' extra" >&2; exit 1; }
        CUDA_PINS="$CUDA_PINS lazy-cublas $(sha256sum < "$ROOT/scripts/cublas-lazy.c" | cut -c1-16)"
        CUDA_KEY=$(printf '%s\n' "$CUDA_PINS" | sha256sum | cut -c1-12)
        CUDA_ROOT=$CACHE/cuda/cu13-$CUDA_KEY/root
    fi
fi

# ---- configure options, patches, key -----------------------------------------------------------
OPTS=(--enable-maxcpus=$MAXCPUS $(has fxt && echo --with-fxt || echo --without-fxt) --disable-static
      --disable-build-doc --disable-build-examples --disable-build-tests
      --disable-fortran --disable-starpufft --disable-glpk --disable-socl)
has mpi || OPTS+=(--disable-mpi)
has opencl || OPTS+=(--disable-opencl)
if [ "$FLAVOUR" = sim ]; then
    OPTS+=(--enable-simgrid --enable-maxcudadev=16 --disable-cuda)
elif [ -n "$NVCC" ]; then
    OPTS+=(--enable-cuda --with-cuda-dir="$CUDA_ROOT" --with-cuda-lib-dir="$CUDA_ROOT/lib64")
else
    OPTS+=(--disable-cuda)
fi
PATCHES=("$PATCH_DIR"/*.patch)
[ -e "${PATCHES[0]}" ] || PATCHES=()
if [ "$FLAVOUR" = sim ]; then
    for p in "$PATCH_DIR"/simgrid/*.patch; do [ -e "$p" ] && PATCHES+=("$p"); done
fi

if [ -n "$TARBALL" ]; then
    [ -f "$TARBALL" ] || stop "STARPU_TARBALL=$TARBALL is not a file." ""
    TARBALL=$(cd "$(dirname "$TARBALL")" && pwd)/$(basename "$TARBALL")
    SOURCE=tarball
    SOURCE_ID="tarball sha256 $(sha256sum "$TARBALL" | cut -d' ' -f1)"
    VERSION=$(basename "$TARBALL" | sed -n 's/^starpu[-_]\([0-9][0-9.]*[0-9]\).*/\1/p')
    VERSION=${VERSION:-unknown}
else
    SOURCE=debian-source
    SOURCE_ID="debian $DEB_VERSION"
fi
deps="hwloc $(pkg-config --modversion hwloc) fxt $(pkg-config --modversion fxt 2>/dev/null || echo none) cc $(cc -dumpfullversion 2>/dev/null || cc -dumpversion)"
deps="$deps mpi $( (mpicc --showme:version 2>/dev/null || mpicc --version 2>/dev/null || echo none) | head -1)"
if [ "$FLAVOUR" = sim ]; then deps="$deps simgrid $(pkg-config --modversion simgrid 2>/dev/null || echo none)"; fi
KEY_TEXT=$(
    echo "recipe $RECIPE"
    if [ "$FLAVOUR" = sim ]; then echo "flavour sim"; fi
    echo "source $SOURCE_ID"
    echo "configure ${OPTS[*]}"
    echo "cuda ${NVCC_RELEASE:-none} ${CUDA_PINS:-${CUDA_ROOT_GIVEN:-${TOOLKIT:-}}}"
    echo "deps $deps"
    for p in "${PATCHES[@]}"; do echo "patch ${p#"$PATCH_DIR"/} $(sha256sum < "$p" | cut -c1-64)"; done
)
KEY=$VERSION-$([ "$FLAVOUR" = sim ] && echo sim || { [ -n "$NVCC" ] && echo cuda || echo cpu; })-$(printf '%s\n' "$KEY_TEXT" | sha256sum | cut -c1-12)
PREFIX=$STARPU_CACHE/$KEY
if [ "$ACTION" = key ]; then echo "$KEY"; exit 0; fi

# ---- the source --------------------------------------------------------------------------------
fetch_debian_source() {
    local dir=$STARPU_CACHE/src
    local orig=$dir/starpu_${DEB_VERSION%-*}.orig.tar.gz
    if [ -f "$orig" ] && [ -f "$dir/starpu_$DEB_VERSION.dsc" ]; then
        echo "$orig"
        return
    fi
    command -v apt-get >/dev/null 2>&1 || stop "Debian's source package cannot be fetched here: this system has no apt-get." ""
    local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    [ -f "$keyring" ] || stop "Debian's source package cannot be fetched here: no Debian archive keyring ($keyring; package debian-archive-keyring) to check it with." ""
    mkdir -p "$dir/apt/lists/partial"
    # A private deb-src list: apt reads only this file and keeps its index under the cache.
    cat > "$dir/apt/sources.sources" <<EOF
Types: deb-src
URIs: $DEB_URI
Suites: $DEB_SUITE
Components: main
Signed-By: $keyring
EOF
    local opts=(-o Dir::Etc::SourceList="$dir/apt/sources.sources" -o Dir::Etc::SourceParts=/dev/null
                -o Dir::State::Lists="$dir/apt/lists" -o Dir::Cache="$dir/apt/cache"
                -o APT::Sandbox::User="$(id -un)" -o Acquire::Retries=1 -o Acquire::http::Timeout=20)
    mkdir -p "$dir/apt/cache/archives/partial"
    say "fetching Debian's source package starpu $DEB_VERSION ($DEB_URI $DEB_SUITE, a private deb-src list)"
    local log=$dir/apt/fetch.log
    if ! apt-get "${opts[@]}" -q update > "$log" 2>&1 || grep -qE '^(Err|W: Failed to fetch)' "$log"; then
        stop "could not download the index of Debian's source packages from $DEB_URI (no network?)." \
             "apt-get update said: $(grep -E '^(Err|E:|W:)' "$log" | head -2 | tr '\n' ' ')"
    fi
    if ! (cd "$dir" && apt-get "${opts[@]}" -q source --download-only "starpu=$DEB_VERSION" >> "$log" 2>&1); then
        stop "Debian's source package starpu $DEB_VERSION could not be downloaded from $DEB_URI $DEB_SUITE." \
             "apt-get source said: $(grep -E '^(E:|W:|Err)' "$log" | head -2 | tr '\n' ' ')"
    fi
    [ -f "$orig" ] || stop "apt-get source gave no $orig." ""
    echo "$orig"
}

# ---- the cache hit: seconds, no network ------------------------------------------------------------
if [ "$ACTION" = build ] && [ -d "$PREFIX" ]; then
    say "StarPU $VERSION ($SOURCE$([ -n "$NVCC" ] && echo ", CUDA $NVCC_RELEASE")) from the cache: $PREFIX"
    record own "$PREFIX"
    exit 0
fi
if [ -z "$TARBALL" ]; then TARBALL=$(fetch_debian_source); fi
if [ "$ACTION" = fetch ]; then echo "$TARBALL"; exit 0; fi

mkdir -p "$STARPU_CACHE/logs"
exec 9> "$STARPU_CACHE/.lock-$KEY"
if ! flock -n 9; then
    say "another setup is building $KEY: waiting for it"
    flock 9
    if [ -d "$PREFIX" ]; then record own "$PREFIX"; exit 0; fi
fi
# temporary directories of builds that died (their process is gone)
for d in "$STARPU_CACHE"/.tmp-* "$CACHE"/cuda/.tmp-*; do
    [ -d "$d" ] || continue
    pid=${d##*-}
    kill -0 "$pid" 2>/dev/null || rm -rf "$d"
done

TMP=$STARPU_CACHE/.tmp-$KEY-$$
LOG=$STARPU_CACHE/logs/$KEY.log
ok=0
cleanup() {
    if [ "$ok" != 1 ]; then
        [ -d "$TMP" ] && say "build failed: nothing was added to the cache (log: $LOG)"
        rm -rf "$TMP"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$TMP"
: > "$LOG"

# ---- the CUDA root from the pinned wheels (once per set of pins) ---------------------------------
if [ -n "$CUDA_PINS" ] && [ ! -d "$CUDA_ROOT" ]; then
    say "installing the CUDA wheels of the 'cuda' extra (${CUDA_PINS% lazy-cublas *}) into $(dirname "$CUDA_ROOT")"
    ctmp=$CACHE/cuda/.tmp-cu13-$CUDA_KEY-$$
    mkdir -p "$ctmp"
    # shellcheck disable=SC2086
    if ! "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps --no-compile \
            --target "$ctmp/site" ${CUDA_PINS% lazy-cublas *} >> "$LOG" 2>&1; then
        rm -rf "$ctmp"
        tail -5 "$LOG" >&2
        stop "could not install the CUDA wheels ($CUDA_PINS) with $PYTHON -m pip (no network?)." \
             "Or build without CUDA: STARPU_CUDA=no"
    fi
    cu=$ctmp/site/nvidia/cu13
    [ -e "$cu/include/cublas_v2.h" ] || { rm -rf "$ctmp"; echo "build-starpu: the wheels have no nvidia/cu13/include/cublas_v2.h" >&2; exit 1; }
    # A CUDA root as StarPU's configure expects it: include/, lib64/ with unversioned
    # library names, bin/nvcc (relative links inside, so the directory can be renamed).
    (cd "$cu/lib" && for real in lib*.so.*; do ln -sf "$real" "${real%%.so.*}.so"; done)
    ln -s lib "$cu/lib64"
    # what links "-lcublas" gets scripts/cublas-lazy.c: cuBLAS is loaded on its first call
    # (with a CUDA worker), not by every process (1.5 s and 220 MB each)
    cc -shared -fPIC -O2 -o "$cu/lib/libtt_cublas_lazy.so.13" -Wl,-soname,libtt_cublas_lazy.so.13 \
        -Wl,--no-undefined "$ROOT/scripts/cublas-lazy.c" -I"$cu/include" -ldl -lpthread >> "$LOG" 2>&1 \
        || { rm -rf "$ctmp"; tail -5 "$LOG" >&2; echo "build-starpu: scripts/cublas-lazy.c does not compile" >&2; exit 1; }
    ln -sf libtt_cublas_lazy.so.13 "$cu/lib/libcublas.so"
    mkdir -p "$cu/bin"
    ln -s "$TOOLKIT/bin/nvcc" "$cu/bin/nvcc"
    ln -s site/nvidia/cu13 "$ctmp/root"
    printf '%s\n' "$CUDA_PINS" > "$ctmp/PINS"
    mv -T "$ctmp" "$(dirname "$CUDA_ROOT")"
fi

# ---- build ---------------------------------------------------------------------------------------
say "building StarPU $VERSION ($SOURCE$([ -n "$NVCC" ] && echo ", CUDA $NVCC_RELEASE")$([ "$FLAVOUR" = sim ] && echo ", SimGrid $(pkg-config --modversion simgrid)")$(for f in $FEATURES; do printf ', %s' "$f"; done), maxcpus $MAXCPUS) into $PREFIX"
say "a few minutes (2.5 with CUDA on 2 idle cores); log: $LOG"
tar -xf "$TARBALL" -C "$TMP"
SRC=$(find "$TMP" -mindepth 1 -maxdepth 1 -type d | head -1)
[ -x "$SRC/configure" ] || stop "$TARBALL has no configure script (a StarPU release tarball is needed, not a git snapshot)." ""
for p in "${PATCHES[@]}"; do
    (cd "$SRC" && patch -p1 --forward --quiet < "$p") >> "$LOG" 2>&1 \
        || { tail -5 "$LOG" >&2; echo "build-starpu: patch $(basename "$p") does not apply to this source" >&2; exit 1; }
    say "applied ${p#"$PATCH_DIR"/}"
done

env_cuda=()
if [ -n "$NVCC" ]; then
    # the CUDA libraries are found through libstarpu's run path, not LD_LIBRARY_PATH
    env_cuda=(LDFLAGS="${LDFLAGS:-} -Wl,-rpath,$CUDA_ROOT/lib64" LD_LIBRARY_PATH="$CUDA_ROOT/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
              PATH="$(dirname "$NVCC"):$PATH")
fi

# Progress: one line every 30 s while a step runs (make: files compiled of the total).
NFILES=$( (find "$SRC/src" "$SRC/mpi/src" "$SRC/tools" "$SRC/sc_hypervisor/src" -name '*.c' 2>/dev/null || true) | wc -l)
run_step() {  # run_step NAME COMMAND...
    local name=$1; shift
    local t=$(date +%s) last
    echo "== $name: $*" >> "$LOG"
    ( cd "$SRC" && env "${env_cuda[@]}" "$@" ) >> "$LOG" 2>&1 &
    local pid=$!
    last=$t
    while kill -0 "$pid" 2>/dev/null; do
        sleep 1
        if [ $(( $(date +%s) - last )) -ge 30 ]; then
            last=$(date +%s)
            if [ "$name" = make ]; then
                say "make: $(grep -cE '^ *(CC|CXX|NVCC|CCLD|CXXLD) ' "$LOG" || true) of ~$NFILES files compiled"
            else
                say "$name: $(tail -1 "$LOG" | cut -c1-100)"
            fi
        fi
    done
    if ! wait "$pid"; then
        grep -E 'error|Error|ERROR' "$LOG" | tail -8 >&2 || true
        echo "build-starpu: $name failed after $(( $(date +%s) - t ))s (log: $LOG)" >&2
        exit 1
    fi
    say "$name done in $(( $(date +%s) - t ))s"
}

run_step configure ./configure --prefix="$PREFIX" "${OPTS[@]}" --enable-silent-rules
grep -E "^[[:space:]]*(CUDA +enabled|OpenCL enabled|StarPU MPI enabled|FxT trace enabled|Maximum number of CPUs)" "$LOG" | sed -E "s/^[[:space:]]+/    /" >&2 || true
run_step make make -j"$JOBS"
run_step install make install DESTDIR="$TMP/stage"

STAGED=$TMP/stage$PREFIX
CONFIG_H=$(ls "$STAGED"/include/starpu/*/starpu_config.h)
need() { grep -q "^#define $1\$" "$CONFIG_H" || { echo "build-starpu: the build lacks '#define $1' ($2; log: $LOG)" >&2; exit 1; }; }
need "STARPU_MAXCPUS $MAXCPUS" "--enable-maxcpus"
if has fxt; then need "STARPU_USE_FXT 1" "FxT"; fi
if has opencl; then need "STARPU_USE_OPENCL 1" "OpenCL: headers and ICD loader"; fi
if has mpi; then need "STARPU_USE_MPI 1" "StarPU-MPI: mpicc"; fi
if [ -n "$NVCC" ]; then need "STARPU_USE_CUDA 1" "CUDA"; fi
if [ "$FLAVOUR" = sim ]; then need "STARPU_SIMGRID 1" "SimGrid: libsimgrid-dev"; fi
if has fxt && [ ! -x "$STAGED/bin/starpu_fxt_tool" ]; then
    echo "build-starpu: starpu_fxt_tool was not built (log: $LOG)" >&2
    exit 1
fi

mkdir -p "$STAGED/share/tiletrain"
{
    echo "# written by scripts/build-starpu.sh; read by CMakeLists.txt (tiletrain info shows it)"
    echo "version=$VERSION"
    echo "flavour=$FLAVOUR"
    echo "source=$SOURCE"
    echo "source_id=$SOURCE_ID"
    echo "key=$KEY"
    echo "maxcpus=$MAXCPUS"
    echo "fxt=$(has fxt && echo yes || echo no)"
    echo "cuda=$([ -n "$NVCC" ] && echo yes || echo no)"
    echo "cuda_root=${CUDA_ROOT:-}"
    echo "cuda_pins=${CUDA_PINS:-}"
    echo "configure=${OPTS[*]}"
    echo "patches=$(for p in "${PATCHES[@]}"; do printf '%s ' "${p#"$PATCH_DIR"/}"; done)"
    echo "build_seconds=$(( $(date +%s) - T0 ))"
} > "$STAGED/share/tiletrain/starpu-build.txt"
printf '%s\n' "$KEY_TEXT" > "$STAGED/share/tiletrain/starpu-key.txt"

mv -T "$STAGED" "$PREFIX"   # the commit point: the entry appears whole
ok=1
rm -rf "$TMP"
say "installed StarPU $VERSION into $PREFIX in $(( $(date +%s) - T0 ))s"
record own "$PREFIX"
