"""The simulation flavour's build inputs: scripts/build-starpu.sh --sim has its own cache key
(the real build's key unchanged), its sim-only patches, and says what is missing without
SimGrid; the flavour's library, when `make setup` built it, is the SimGrid one."""
import os
import subprocess
from pathlib import Path

import tiletrain

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build-starpu.sh"
PACKAGE = Path(tiletrain.__file__).resolve().parent


def key(*args, **env):
    r = subprocess.run(["bash", str(SCRIPT), *args, "--print-key"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "STARPU_CUDA": "no", **env})
    return r


def test_the_simulation_flavour_has_its_own_key():
    real, sim = key().stdout.strip(), key("--sim").stdout.strip()
    assert real.startswith("1.3.10-cpu-") and sim.startswith("1.3.10-sim-") and real[-12:] != sim[-12:]
    assert key("--sim").stdout.strip() == sim  # stable


def test_the_sim_only_patches_exist_and_say_why():
    patches = sorted((ROOT / "scripts" / "starpu-patches" / "simgrid").glob("*.patch"))
    assert [p.name for p in patches] == ["simgrid-eviction-wait-backoff.patch", "simgrid-gpu-workers-wait.patch",
                                         "simgrid-init-without-argv.patch", "simgrid-models-missing-variance-execute.patch"]
    for p in patches:
        assert p.read_text().startswith("Simulation flavour only")


def test_without_simgrid_the_build_says_what_to_install(tmp_path):
    r = key("--sim", PKG_CONFIG_LIBDIR=str(tmp_path), PKG_CONFIG_PATH="")
    assert r.returncode == 3, r.stderr
    assert "SimGrid is missing" in r.stderr and "apt-get install libsimgrid-dev" in r.stderr


def test_the_built_flavour_links_the_simgrid_starpu():
    lib = PACKAGE / "libtiletrain_sim.so"
    assert lib.exists(), "the simulation flavour is not built: `make setup` builds it where SimGrid is installed"
    out = subprocess.run(["ldd", str(lib)], capture_output=True, text=True).stdout
    starpu = next(line for line in out.splitlines() if "libstarpu-1.3" in line)
    assert "-sim-" in starpu, starpu  # the cache entry of scripts/build-starpu.sh --sim
    assert "libsimgrid" in out
