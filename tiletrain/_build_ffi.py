"""cffi (API mode) build script: the cdef is the CDEF section of csrc/include/tiletrain.h
plus the kernel ids and argument structs generated from csrc/kernels.def.

Two flavours of the same module (tiletrain/_ffi.py loads one per process):
  real  tiletrain._tiletrain_cffi      against libtiletrain.so      (setup.py's cffi_modules)
  sim   tiletrain._tiletrain_sim_cffi  against libtiletrain_sim.so  (StarPU built with SimGrid;
        `python tiletrain/_build_ffi.py --flavour sim --out tiletrain`, run by setup.py build_sim)"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

from cffi import FFI

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
GEN_DIR = ROOT / "build" / "ffi-gen"
CMAKE_DIR = ROOT / "build" / "cmake"
# flavour -> (module name, library name, CMake build directory)
FLAVOURS = {
    "real": ("tiletrain._tiletrain_cffi", "tiletrain", CMAKE_DIR),
    "sim": ("tiletrain._tiletrain_sim_cffi", "tiletrain_sim", ROOT / "build" / "cmake-sim"),
}


def _generator():
    spec = importlib.util.spec_from_file_location("tt_gen_kernels", CSRC / "gen_kernels.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up here
    spec.loader.exec_module(mod)
    return mod


def _strip_preprocessor(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def cdef_text() -> str:
    header = (CSRC / "include" / "tiletrain.h").read_text()
    m = re.search(r"/\* CDEF BEGIN \*/(.*)/\* CDEF END \*/", header, re.S)
    if not m:
        raise RuntimeError("tiletrain.h has no CDEF BEGIN/END section")
    gen = _generator()
    kernels = gen.parse((CSRC / "kernels.def").read_text())
    args_h = gen.args_header(kernels)
    GEN_DIR.mkdir(parents=True, exist_ok=True)
    target = GEN_DIR / "tt_kernels_args.h"
    if not target.exists() or target.read_text() != args_h:
        target.write_text(args_h)
    public = "\n".join(line for line in m.group(1).splitlines()
                       if not line.lstrip().startswith("#") or line.lstrip().startswith("#define"))
    return public + "\n" + _strip_preprocessor(args_h)


def builder(flavour: str = "real") -> FFI:
    module, library, cmake_dir = FLAVOURS[flavour]
    ffi = FFI()
    ffi.cdef(cdef_text())
    ffi.set_source(
        module,
        '#include "tiletrain.h"\n#include "tt_kernels_args.h"\n',
        include_dirs=[str(CSRC / "include"), str(GEN_DIR)],
        libraries=[library],
        library_dirs=[str(cmake_dir)],
        extra_link_args=["-Wl,-rpath,$ORIGIN"],
    )
    return ffi


ffibuilder = builder("real")

if __name__ == "__main__":
    import argparse
    import os
    import shutil

    ap = argparse.ArgumentParser(description="compile one flavour of tiletrain's cffi module")
    ap.add_argument("--flavour", choices=sorted(FLAVOURS), default="real")
    ap.add_argument("--out", help="copy the module (and its library) into this directory")
    a = ap.parse_args()
    tmp = ROOT / "build" / f"ffi-{a.flavour}"
    built = Path(builder(a.flavour).compile(tmpdir=str(tmp), verbose=False))
    if a.out:
        out = Path(a.out)
        _, library, cmake_dir = FLAVOURS[a.flavour]
        # renamed over the old files: a process running them keeps its mapping
        for src in (cmake_dir / f"lib{library}.so", built):
            part = out / f".{src.name}.tmp"
            shutil.copy2(src, part)
            os.replace(part, out / src.name)
    print(built)
