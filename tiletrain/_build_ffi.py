"""cffi (API mode) build script: the cdef is the CDEF section of csrc/include/tiletrain.h
plus the kernel ids and argument structs generated from csrc/kernels.def."""
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


ffibuilder = FFI()
ffibuilder.cdef(cdef_text())
ffibuilder.set_source(
    "tiletrain._tiletrain_cffi",
    '#include "tiletrain.h"\n#include "tt_kernels_args.h"\n',
    include_dirs=[str(CSRC / "include"), str(GEN_DIR)],
    libraries=["tiletrain"],
    library_dirs=[str(CMAKE_DIR)],
    extra_link_args=["-Wl,-rpath,$ORIGIN"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
