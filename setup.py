"""Build: CMake compiles csrc/ into libtiletrain.so, then cffi builds the API-mode module
tiletrain._tiletrain_cffi against it; both land in the tiletrain package directory.

`python setup.py build_sim` (make setup runs it when the SimGrid StarPU is built) does the same
for the simulation flavour: libtiletrain_sim.so and tiletrain._tiletrain_sim_cffi against
build/starpu-sim.env's StarPU (docs/simulation.md)."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Command, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
VERSION = re.search(r'__version__ = "([^"]+)"', (ROOT / "tiletrain" / "_version.py").read_text()).group(1)
CMAKE_DIR = ROOT / "build" / "cmake"
STARPU_ENV = ROOT / "build" / "starpu.env"  # written by `make setup` (scripts/build-starpu.sh --record)
SIM_ENV = ROOT / "build" / "starpu-sim.env"  # scripts/build-starpu.sh --sim --record (make sim)
SIM_CMAKE_DIR = ROOT / "build" / "cmake-sim"


def _recorded_prefix(path: Path) -> str:
    if path.exists():
        for line in path.read_text().splitlines():
            if line.startswith("STARPU_PREFIX="):
                return line.split("=", 1)[1].strip()
    return ""


def starpu_prefix() -> str:
    """The StarPU to build against: $TILETRAIN_STARPU_PREFIX, else the one `make setup` chose
    (build/starpu.env: tiletrain's own build in the cache, or empty for Debian's package),
    else empty (pkg-config's default)."""
    if "TILETRAIN_STARPU_PREFIX" in os.environ:
        return os.environ["TILETRAIN_STARPU_PREFIX"]
    return _recorded_prefix(STARPU_ENV)


def cmake_args(build_dir: Path, prefix: str, flavour: str) -> list[str]:
    # TILETRAIN_BLAS=openblas|mkl (and TILETRAIN_MKL_PREFIX, where the mkl-devel wheel is
    # installed) choose the CPU BLAS; `make setup BLAS=mkl` sets both.
    blas = os.environ.get("TILETRAIN_BLAS", "openblas")
    return ["cmake", "-S", str(ROOT), "-B", str(build_dir),
            f"-DTT_VERSION={VERSION}", "-DCMAKE_BUILD_TYPE=Release", f"-DTT_BLAS={blas}",
            f"-DTT_MKL_PREFIX={os.environ.get('TILETRAIN_MKL_PREFIX', '')}",
            f"-DTT_STARPU_PREFIX={prefix}", f"-DTT_FLAVOUR={flavour}"]


class BuildSim(Command):
    """The simulation flavour: libtiletrain_sim.so and tiletrain._tiletrain_sim_cffi, built
    against the StarPU of build/starpu-sim.env (scripts/build-starpu.sh --sim)."""
    description = "build the simulation flavour of libtiletrain and its cffi module"
    user_options = []

    def initialize_options(self):
        pass

    def finalize_options(self):
        pass

    def run(self):
        prefix = os.environ.get("TILETRAIN_STARPU_SIM_PREFIX") or _recorded_prefix(SIM_ENV)
        if not prefix:
            raise SystemExit("tiletrain build_sim: no SimGrid StarPU recorded in build/starpu-sim.env: "
                             "run `make sim` (scripts/build-starpu.sh --sim --record build/starpu-sim.env)")
        subprocess.check_call(cmake_args(SIM_CMAKE_DIR, prefix, "sim"))
        subprocess.check_call(["cmake", "--build", str(SIM_CMAKE_DIR), "-j", str(os.cpu_count() or 2)])
        subprocess.check_call([sys.executable, str(ROOT / "tiletrain" / "_build_ffi.py"), "--flavour", "sim",
                               "--out", str(ROOT / "tiletrain")])


class CMakeThenCffi(build_ext):
    def run(self):
        for tool in ("cmake", "pkg-config"):
            if shutil.which(tool) is None:
                raise SystemExit(f"tiletrain build: '{tool}' not found; run `make setup` (installs system packages)")
        subprocess.check_call(cmake_args(CMAKE_DIR, starpu_prefix(), "real"))
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
    cmdclass={"build_ext": CMakeThenCffi, "build_sim": BuildSim},
)
