"""Build: CMake compiles csrc/ into libtiletrain.so, then cffi builds the API-mode module
tiletrain._tiletrain_cffi against it; both land in the tiletrain package directory."""
import os
import re
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
VERSION = re.search(r'__version__ = "([^"]+)"', (ROOT / "tiletrain" / "_version.py").read_text()).group(1)
CMAKE_DIR = ROOT / "build" / "cmake"
STARPU_ENV = ROOT / "build" / "starpu.env"  # written by `make setup` (scripts/build-starpu.sh --record)


def starpu_prefix() -> str:
    """The StarPU to build against: $TILETRAIN_STARPU_PREFIX, else the one `make setup` chose
    (build/starpu.env: tiletrain's own build in the cache, or empty for Debian's package),
    else empty (pkg-config's default)."""
    if "TILETRAIN_STARPU_PREFIX" in os.environ:
        return os.environ["TILETRAIN_STARPU_PREFIX"]
    if STARPU_ENV.exists():
        for line in STARPU_ENV.read_text().splitlines():
            if line.startswith("STARPU_PREFIX="):
                return line.split("=", 1)[1].strip()
    return ""


class CMakeThenCffi(build_ext):
    def run(self):
        for tool in ("cmake", "pkg-config"):
            if shutil.which(tool) is None:
                raise SystemExit(f"tiletrain build: '{tool}' not found; run `make setup` (installs system packages)")
        # TILETRAIN_BLAS=openblas|mkl (and TILETRAIN_MKL_PREFIX, where the mkl-devel wheel is
        # installed) choose the CPU BLAS; `make setup BLAS=mkl` sets both.
        blas = os.environ.get("TILETRAIN_BLAS", "openblas")
        subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(CMAKE_DIR),
                               f"-DTT_VERSION={VERSION}", "-DCMAKE_BUILD_TYPE=Release", f"-DTT_BLAS={blas}",
                               f"-DTT_MKL_PREFIX={os.environ.get('TILETRAIN_MKL_PREFIX', '')}",
                               f"-DTT_STARPU_PREFIX={starpu_prefix()}"])
        subprocess.check_call(["cmake", "--build", str(CMAKE_DIR), "-j", str(os.cpu_count() or 2)])
        super().run()
        lib = CMAKE_DIR / "libtiletrain.so"
        for ext in self.extensions:
            dest = Path(self.get_ext_fullpath(ext.name)).parent
            dest.mkdir(parents=True, exist_ok=True)
            # a new file renamed over the old one: a process running the old library keeps
            # its mapping (copying over it in place would crash that process)
            tmp = dest / ".libtiletrain.so.tmp"
            shutil.copy2(lib, tmp)
            os.replace(tmp, dest / "libtiletrain.so")


setup(
    version=VERSION,
    cffi_modules=["tiletrain/_build_ffi.py:ffibuilder"],
    cmdclass={"build_ext": CMakeThenCffi},
)
