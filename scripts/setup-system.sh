#!/usr/bin/env bash
# Install the system packages tiletrain builds against (Debian/Ubuntu), or say exactly
# which are missing when this user cannot install them.  Quick when all are present.
set -euo pipefail

# OpenCL: headers and ICD loader for tiletrain's OpenCL kernels, and PoCL, an OpenCL device
# on the CPU that gives the tests a second memory node (tests/hetero/) without a GPU.
PKGS=(build-essential cmake pkg-config libopenblas-dev openmpi-bin libopenmpi-dev
      ocl-icd-opencl-dev opencl-headers pocl-opencl-icd)
# StarPU: tiletrain's own build (STARPU=own, the default; scripts/build-starpu.sh) needs hwloc
# and FxT to build against, and the archive keyring to check Debian's source package with;
# STARPU=system uses Debian's binary package instead.
if [ "${STARPU:-own}" = system ]; then
    PKGS+=(libstarpu-dev)
else
    PKGS+=(libhwloc-dev libfxt-dev debian-archive-keyring)
fi
# The simulation flavour (scripts/build-starpu.sh --sim, docs/simulation.md) builds StarPU
# against SimGrid.  Optional: installed with the rest where this user can, else setup says
# so and builds the real flavour only.
OPTIONAL=(libsimgrid-dev)
PYTHON=${PYTHON:-python3}

missing=()
if command -v dpkg-query >/dev/null 2>&1; then
    for p in "${PKGS[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
else
    # Not a Debian system: check for the tools and libraries themselves.
    command -v cmake >/dev/null || missing+=(cmake)
    command -v pkg-config >/dev/null || missing+=(pkg-config)
    if [ "${STARPU:-own}" = system ]; then
        pkg-config --exists starpu-1.3 2>/dev/null || pkg-config --exists starpu-1.4 2>/dev/null || missing+=("StarPU 1.3/1.4 (with StarPU-MPI)")
    else
        pkg-config --exists hwloc 2>/dev/null || missing+=(hwloc)
        pkg-config --exists fxt 2>/dev/null || missing+=("FxT (libfxt)")
    fi
    pkg-config --exists openblas 2>/dev/null || missing+=(OpenBLAS)
fi
if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    missing+=(python3-venv)
fi
if ! "$PYTHON" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' >/dev/null 2>&1; then
    missing+=(python3-dev)
fi

optional_missing=()
if command -v dpkg-query >/dev/null 2>&1; then
    for p in "${OPTIONAL[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || optional_missing+=("$p")
    done
elif ! pkg-config --exists simgrid 2>/dev/null; then
    optional_missing+=("SimGrid (libsimgrid)")
fi
can_install=0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then can_install=1; fi
if [ ${#optional_missing[@]} -gt 0 ]; then
    if [ "$can_install" = 1 ]; then
        missing+=("${optional_missing[@]}")
    else
        echo "tiletrain: ${optional_missing[*]} is not installed: no simulation flavour (tiletrain simulate); as root: apt-get install -y ${optional_missing[*]}" >&2
    fi
fi

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "tiletrain: missing system packages: ${missing[*]}" >&2
    if command -v apt-get >/dev/null 2>&1; then
        echo "tiletrain: install them as root with: apt-get update && apt-get install -y ${missing[*]}" >&2
    else
        echo "tiletrain: this system has no apt-get; install the equivalents with your package manager" >&2
    fi
    exit 1
fi

echo "tiletrain: installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"
