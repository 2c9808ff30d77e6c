"""tiletrain's own StarPU: scripts/build-starpu.sh (the cache, its key, a build that fails or is
interrupted, bad input) on a fake StarPU tarball that builds in a second, and what the library
was built with (`tiletrain info`, the run path).  The real build is `make setup`'s."""
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

import tiletrain as tt
from tiletrain.runtime.hetero import build_info

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "build-starpu.sh"
ALTERNATIVES = ("make setup STARPU_TARBALL=", "make setup STARPU=system")

# A StarPU tarball in miniature: configure writes a Makefile whose install puts what the
# script checks (starpu_config.h with the options it asks for, starpu_fxt_tool) under
# DESTDIR; FAKE_FAIL=configure|make fails that step, FAKE_SLEEP=N makes `make` take N s.
CONFIGURE = r"""#!/bin/sh
[ "$FAKE_FAIL" = configure ] && { echo "configure: error: fake failure"; exit 1; }
for a in "$@"; do case "$a" in --prefix=*) prefix=${a#--prefix=} ;; esac; done
cat > Makefile <<EOF
all:
	@echo "  CC       fake.lo"
	@sleep \$\${FAKE_SLEEP:-0}
	@[ "\$(FAKE_FAIL)" != make ] || { echo "fake.c:1: error: fake failure"; exit 1; }
install:
	mkdir -p \$(DESTDIR)$prefix/include/starpu/1.3 \$(DESTDIR)$prefix/bin
	printf '#define STARPU_MAXCPUS 256\n#define STARPU_USE_FXT 1\n#define STARPU_USE_OPENCL 1\n#define STARPU_USE_MPI 1\n' > \$(DESTDIR)$prefix/include/starpu/1.3/starpu_config.h
	printf '#!/bin/sh\n' > \$(DESTDIR)$prefix/bin/starpu_fxt_tool
	chmod +x \$(DESTDIR)$prefix/bin/starpu_fxt_tool
EOF
echo "configure: done"
"""


@pytest.fixture
def fake(tmp_path):
    src = tmp_path / "starpu-9.9.9"
    src.mkdir()
    (src / "configure").write_text(CONFIGURE)
    (src / "configure").chmod(0o755)
    tarball = tmp_path / "starpu-9.9.9.tar.gz"
    with tarfile.open(tarball, "w:gz") as tf:
        tf.add(src, arcname="starpu-9.9.9")
    (tmp_path / "patches").mkdir()
    env = {**os.environ, "STARPU_TARBALL": str(tarball), "TILETRAIN_CACHE": str(tmp_path / "cache"),
           "STARPU_CUDA": "no", "STARPU_PATCH_DIR": str(tmp_path / "patches"), "STARPU": "own"}
    env.pop("STARPU_JOBS", None)
    return tmp_path, env


def build(env, *args, **extra):
    return subprocess.run(["bash", str(SCRIPT), *args], env={**env, **extra}, capture_output=True, text=True,
                          timeout=120)


def entries(cache: Path) -> list[str]:
    d = cache / "starpu"
    return sorted(p.name for p in d.iterdir() if p.name not in ("logs", "src") and not p.name.startswith(".lock"))


def test_a_build_enters_the_cache_whole_and_is_reused(fake):
    tmp, env = fake
    r = build(env, "--record", str(tmp / "starpu.env"))
    assert r.returncode == 0, r.stderr
    prefix = Path(r.stdout.strip().splitlines()[-1])
    assert prefix.parent == tmp / "cache" / "starpu" and prefix.name.startswith("9.9.9-cpu-")
    assert entries(tmp / "cache") == [prefix.name]  # no temporary directory left
    built = (prefix / "share" / "tiletrain" / "starpu-build.txt").read_text()
    assert "source=tarball" in built and "maxcpus=256" in built and "cuda=no" in built
    assert (tmp / "starpu.env").read_text().splitlines()[1:] == ["STARPU_MODE=own", f"STARPU_PREFIX={prefix}"]
    assert "configure done" in r.stderr and "installed StarPU" in r.stderr
    stamp = (tmp / "starpu.env").stat().st_mtime_ns
    t0 = time.monotonic()
    again = build(env, "--record", str(tmp / "starpu.env"))
    assert again.returncode == 0 and again.stdout.strip() == str(prefix), again.stderr
    assert "from the cache" in again.stderr and time.monotonic() - t0 < 10
    assert (tmp / "starpu.env").stat().st_mtime_ns == stamp  # unchanged: make rebuilds nothing


def test_the_key_follows_the_inputs(fake):
    tmp, env = fake
    key = build(env, "--print-key").stdout.strip()
    assert key == build(env, "--print-key").stdout.strip()
    (tmp / "patches" / "fix.patch").write_text("why: a test\n")
    assert build(env, "--print-key").stdout.strip() != key
    tarball = Path(env["STARPU_TARBALL"])
    tarball.write_bytes(tarball.read_bytes() + b"\0")
    assert build(env, "--print-key").stdout.strip() not in (key, "")


@pytest.mark.parametrize("step", ["configure", "make"])
def test_a_failed_build_adds_nothing_to_the_cache(fake, step):
    tmp, env = fake
    r = build(env, FAKE_FAIL=step)
    assert r.returncode != 0
    assert f"{step} failed" in r.stderr and "nothing was added to the cache" in r.stderr, r.stderr
    assert entries(tmp / "cache") == []
    logs = list((tmp / "cache" / "starpu" / "logs").iterdir())
    assert len(logs) == 1 and "fake failure" in logs[0].read_text()


def test_an_interrupted_build_adds_nothing_and_a_dead_ones_leftovers_are_removed(fake):
    tmp, env = fake
    p = subprocess.Popen(["bash", str(SCRIPT)], env={**env, "FAKE_SLEEP": "60"}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not list((tmp / "cache").glob("starpu/.tmp-*/starpu-9.9.9/Makefile")):  # in `make` now
        assert time.monotonic() < deadline and p.poll() is None, p.communicate()
        time.sleep(0.2)
    time.sleep(0.3)  # well inside `make` (its fake step sleeps 60 s)
    os.killpg(p.pid, signal.SIGTERM)
    p.communicate(timeout=30)
    assert entries(tmp / "cache") == []
    # a build killed outright (no cleanup ran) leaves its temporary directory: never taken
    # for an entry, and removed by the next run
    key = build(env, "--print-key").stdout.strip()
    dead = tmp / "cache" / "starpu" / f".tmp-{key}-999999"
    (dead / "stage").mkdir(parents=True)
    r = build(env)
    assert r.returncode == 0, r.stderr
    assert entries(tmp / "cache") == [key]


def test_missing_build_dependencies_stop_with_one_message(fake):
    tmp, env = fake
    r = build(env, PKG_CONFIG_LIBDIR=str(tmp / "none"), PKG_CONFIG_PATH="")
    assert r.returncode == 1
    assert r.stderr.count("tiletrain: cannot build StarPU") == 1, r.stderr
    assert "libhwloc-dev" in r.stderr and "libfxt-dev" in r.stderr
    assert all(a in r.stderr for a in ALTERNATIVES), r.stderr


def test_a_missing_tarball_stops_with_one_message(fake):
    tmp, env = fake
    r = build(env, STARPU_TARBALL=str(tmp / "nowhere.tar.gz"))
    assert r.returncode == 1 and "nowhere.tar.gz is not a file" in r.stderr
    assert all(a in r.stderr for a in ALTERNATIVES), r.stderr


def test_no_network_stops_with_one_message(fake):
    """Debian's source through a private deb-src list whose archive does not answer (a closed
    local port): the system's apt configuration is not read nor changed."""
    tmp, env = fake
    env = {k: v for k, v in env.items() if k != "STARPU_TARBALL"}
    r = build(env, STARPU_DEB_SRC_URI="http://127.0.0.1:9/debian")
    assert r.returncode == 1
    assert r.stderr.count("tiletrain: cannot build StarPU") == 1, r.stderr
    assert "no network?" in r.stderr and all(a in r.stderr for a in ALTERNATIVES), r.stderr
    sources = (tmp / "cache" / "starpu" / "src" / "apt" / "sources.sources").read_text()
    assert "Types: deb-src" in sources and "127.0.0.1:9" in sources


def test_no_source_package_stops_with_one_message(fake):
    """An apt that cannot give the source package (here a stand-in apt-get that answers as
    apt does when no deb-src entry has it)."""
    tmp, env = fake
    bindir = tmp / "bin"
    bindir.mkdir()
    (bindir / "apt-get").write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = source ] && '
                                    '{ echo "E: Unable to find a source package for starpu" >&2; exit 100; }; done\n'
                                    'exit 0\n')
    (bindir / "apt-get").chmod(0o755)
    env = {k: v for k, v in env.items() if k != "STARPU_TARBALL"}
    r = build(env, PATH=f"{bindir}:{env['PATH']}")
    assert r.returncode == 1
    assert "could not be downloaded" in r.stderr and "Unable to find a source package" in r.stderr, r.stderr
    assert all(a in r.stderr for a in ALTERNATIVES), r.stderr


def test_info_shows_the_starpu_it_was_built_with(capsys):
    from tiletrain.cli import main
    tt.shutdown()  # `tiletrain info` starts its own runtime (the next test gets the default one again)
    assert main(["info", "--json", "--ncpu", "2"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["starpu_version"].startswith("1.")
    assert info["starpu_source"] in ("debian-source", "tarball", "system")
    assert isinstance(info["starpu_maxcpus"], int) and isinstance(info["starpu_cuda"], bool)
    assert isinstance(info["starpu_fxt"], bool)
    assert info["cpu_workers"] == 2 and info["cuda_workers"] == 0  # no GPU on this machine
    assert main(["info", "--ncpu", "1"]) == 0
    text = capsys.readouterr().out
    for key in ("starpu_version", "starpu_source", "starpu_maxcpus", "starpu_cuda", "starpu_fxt", "cuda_workers",
                "cpu_workers"):
        assert key in text, text


@pytest.mark.skipif(build_info()["starpu_source"] == "system",
                    reason="built against Debian's StarPU (STARPU=system), not tiletrain's own")
def test_own_starpu_has_what_the_build_asks_for_and_is_found_through_the_run_path():
    b = build_info()
    assert b["starpu_maxcpus"] == 256 and b["starpu_fxt"] and b["starpu_mpi"] and b["starpu_opencl"]
    prefix = Path(b["starpu_prefix"])
    assert (prefix / "share" / "tiletrain" / "starpu-build.txt").exists()
    lib = Path(sys.modules["tiletrain"].__file__).parent / "libtiletrain.so"
    dyn = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
    assert str(prefix / "lib") in dyn, dyn
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    ldd = subprocess.run(["ldd", str(lib)], capture_output=True, text=True, env=env).stdout
    assert "not found" not in ldd and f"{prefix}/lib/libstarpu" in ldd, ldd
