"""Machines as data (tiletrain/sim/machine.py, perfmodel.py, platform.py) and the checks that
keep bad input away from StarPU: malformed machine.json, unknown machines, what a derived
machine cannot have, simulate= in a process of the real flavour.  No simulation runs here
(tests/sim/test_simulate.py runs them)."""
import json
import os

import pytest

from tiletrain import config
from tiletrain.config import RuntimeConfig
from tiletrain.sim import machine as machines
from tiletrain.sim import perfmodel
from tiletrain.sim.machine import MachineError
from tiletrain.sim.platform import platform_xml
from tiletrain.sim.run import command_for, summarise

# A StarPU 1.3 history model (format 45) of one CPU implementation with two tile shapes.
MODEL = """##################
# Performance Model Version
45

####################
# COMBs
# number of combinations
1
####################
# COMB_0
# number of types devices
1
####################
# DEV_0
# device type (CPU - 0, CUDA - 1, OPENCL - 2, MIC - 3, MPI_MS - 5)
0
####################
# DEV_0
# device id 
0
####################
# DEV_0
# number of cores 
1
##########
# number of implementations
1
#####
# Model for cpu0_impl0 (Comb0)
# number of entries
2
# sumlnx	sumlnx2		sumlny		sumlnxlny	alpha		beta		n	minx		maxx
0.000000e+00   	0.000000e+00   	0.000000e+00   	0.000000e+00   	nan            	nan            	0	0              	0              
# a		b		c
nan            	nan            	nan            
# not multiple-regression-base
0
# hash		size		flops		mean (us)	dev (us)	sum		sum2		n
c43f364b	589824         	1.677722e+07   	4.000000e+02   	2.000000e+01   	4.000000e+03   	1.604000e+06   	10
30b8bbe0	2883584        	1.342177e+08   	2.000000e+04   	0.000000e+00   	2.000000e+04   	4.000000e+08   	1
"""


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty machines folder, and a calibrated machine `base` in it (two CPUs, one kernel)."""
    monkeypatch.setenv("TILETRAIN_MACHINES", str(tmp_path))
    folder = tmp_path / "base"
    (folder / "sampling" / "codelets" / "45").mkdir(parents=True)
    (folder / "sampling" / "bus").mkdir()
    (folder / "sampling" / "codelets" / "45" / "tiletrain_gemm.base").write_text(MODEL)
    (folder / "sampling" / "bus" / "base.platform.v4.xml").write_text(platform_xml(2))
    for ext in machines.BUS_FILES:
        (folder / "sampling" / "bus" / f"base.{ext}").write_text(f"# {ext}\n")
    machines.save(machines.Machine(name="base", kind="calibrated", cpus=2, submit_us_per_task=8.0))
    return tmp_path


def test_a_model_scaled_by_a_speed_keeps_its_shapes_and_samples():
    fast = perfmodel.scale(MODEL, {"cpu": 2.0})
    before, after = perfmodel.entries(MODEL), perfmodel.entries(fast)
    assert [(e.footprint, e.size, e.n) for e in after] == [(e.footprint, e.size, e.n) for e in before]
    assert [e.mean_us for e in after] == pytest.approx([200.0, 10000.0])
    row = next(line.split() for line in fast.splitlines() if line.startswith("c43f364b"))
    assert float(row[4]) == pytest.approx(10.0) and float(row[5]) == pytest.approx(2000.0)
    assert float(row[6]) == pytest.approx(1.604e6 / 4)  # sum2 / speed**2: mean and dev stay consistent
    assert perfmodel.scale(MODEL, {"cuda": 3.0}) == MODEL  # another device type: untouched


def test_a_malformed_model_row_is_named():
    with pytest.raises(perfmodel.ModelFileError, match="m:39: a history row has 8 fields"):
        perfmodel.entries(MODEL.replace("\t10\n", "\n"), "m")


def test_the_platform_has_one_host_per_cpu():
    xml = platform_xml(64)
    assert xml.count('<host id="CPU') == 64 and '<host id="MAIN"' in xml and '<host id="RAM"' in xml
    with pytest.raises(ValueError, match="at least one CPU"):
        platform_xml(0)


def test_list_show_and_an_unknown_machine(home):
    assert machines.list_machines() == ["base"]
    text = machines.describe(machines.load("base"))
    assert "CPUs: 2" in text and "gemm: cpu: 1/2 shapes with >= 10 samples" in text
    with pytest.raises(MachineError, match=r"unknown machine 'nope'.*machines: base.*tiletrain machine calibrate"):
        machines.load("nope")


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "a machine is a JSON object"),
    ('{"format": 1, "name": "base", "kind": "calibrated"}', "'cpus' is missing"),
    ('{"format": 1, "name": "base", "kind": "calibrated", "cpus": "two"}', "'cpus' must be an integer > 0"),
    ('{"format": 1, "name": "base", "kind": "calibrated", "cpus": 0}', "'cpus' must be an integer > 0"),
    ('{"format": 1, "name": "base", "kind": "guessed", "cpus": 2}', "'kind' must be one of calibrated, derived"),
    ('{"format": 2, "name": "base", "kind": "calibrated", "cpus": 2}', "'format' must be 1"),
    ('{"format": 1, "name": "other", "kind": "calibrated", "cpus": 2}', "'name' is 'other' but the folder is 'base'"),
    ('{"format": 1, "name": "base", "kind": "calibrated", "cpus": 2, "gpu": 1}', r"unknown field\(s\) gpu"),
    ('{"format": 1, "name": "base", "kind": "calibrated", "cpus": 2, "cpu_speed": -1}', "'cpu_speed' must be"),
])
def test_a_malformed_machine_json_is_a_clear_error(home, content, message):
    (home / "base" / "machine.json").write_text(content)
    with pytest.raises(MachineError, match=message) as e:
        machines.load("base")
    assert str(home / "base" / "machine.json") in str(e.value)


def test_a_machine_without_its_platform_says_how_to_remake_it(home):
    (home / "base" / "sampling" / "bus" / "base.platform.v4.xml").unlink()
    with pytest.raises(MachineError, match="no platform file .*tiletrain machine calibrate --name base"):
        machines.load("base")


def test_derive_generates_the_platform_and_scales_the_models(home):
    m = machines.derive("big", "base", cpus=32, cpu_speed=2.0)
    assert (m.kind, m.cpus, m.cpu_speed, m.derived_from) == ("derived", 32, 2.0, "base")
    assert m.submit_us_per_task == pytest.approx(4.0)  # the submitting thread is a CPU too
    assert machines.load("big") == m
    assert list(m.kernels()) == ["tiletrain_gemm"]
    assert [e.mean_us for e in perfmodel.entries(open(m.kernels()["tiletrain_gemm"]).read())] == \
        pytest.approx([200.0, 10000.0])
    xml = (home / "big" / "sampling" / "bus" / "big.platform.v4.xml").read_text()
    assert xml.count('<host id="CPU') == 32
    # derived from a derived machine: speeds multiply
    assert machines.derive("bigger", "big", cpu_speed=1.5).cpu_speed == pytest.approx(3.0)
    assert sorted(machines.list_machines()) == ["base", "big", "bigger"]


def test_a_model_with_cuda_devices_divides_the_cpu_times_by_the_gpu_speed():
    text = perfmodel.with_cuda(MODEL, 2.0, 3, 20.0, "m")
    ents = perfmodel.entries(text)
    assert [e.device for e in ents] == ["cpu"] * 2 + ["cuda"] * 6
    assert [e.mean_us for e in ents] == pytest.approx([200.0, 10000.0] + [20.0, 1000.0] * 3)
    assert "# number of combinations\n4\n" in text and "# COMB_3" in text
    ids = [text.splitlines()[i + 1] for i, line in enumerate(text.splitlines()) if line.startswith("# device id")]
    assert ids == ["0", "0", "1", "2"]
    # derived again: the CUDA combinations are replaced, not added
    assert perfmodel.with_cuda(text, 1.0, 1, 10.0).count("# COMB_") == 2
    with pytest.raises(perfmodel.ModelFileError, match="no '# COMB_' section"):
        perfmodel.with_cuda("45\n", 1.0, 1, 1.0, "m")


@pytest.fixture
def cuda_flavour(monkeypatch):
    """The simulation flavour's CUDA support, without asking a fresh process each time."""
    monkeypatch.setattr(machines, "cuda_simulation", lambda: None)


def test_derive_gpus_writes_cuda_hosts_links_and_models(home, cuda_flavour):
    m = machines.derive("g2", "base", cpus=4, gpus=2, gpu_speed=20.0, gpu_memory=2**30, link_bandwidth_gbs=25.0,
                        link_latency_us=5.0)
    assert (m.cpus, m.gpus, m.gpu_speed, m.gpu_memory, m.link_bandwidth_gbs) == (4, 2, 20.0, 2**30, 25.0)
    bus = home / "g2" / "sampling" / "bus"
    xml = (bus / "g2.platform.v4.xml").read_text()
    assert xml.count('<host id="CPU') == 6  # a core drives each GPU: 4 CPU workers
    assert xml.count('<host id="CUDA') == 2 and f'value="{2**30}"' in xml
    assert 'id="RAM-CUDA1" bandwidth="25000000000.000000Bps" latency="0.000005s"' in xml
    assert "2 # Number of CUDA devices" in (bus / "g2.config").read_text()
    ents = perfmodel.entries(open(m.kernels()["tiletrain_gemm"]).read())
    assert [e.mean_us for e in ents if e.device == "cuda"] == pytest.approx([20.0, 1000.0] * 2)
    assert "GPUs: 2 (speed x20" in machines.describe(machines.load("g2"))
    # derived from it: the GPUs stay; faster CPUs do not make the GPUs faster
    m2 = machines.derive("g2fast", "g2", cpu_speed=2.0)
    assert (m2.gpus, m2.gpu_speed, m2.cpus) == (2, 20.0, 4)
    ents = perfmodel.entries(open(m2.kernels()["tiletrain_gemm"]).read())
    assert [e.mean_us for e in ents] == pytest.approx([200.0, 10000.0] + [20.0, 1000.0] * 2)
    # the runtime check: no more CUDA workers than the machine has, no more CPU workers than its cores
    with pytest.raises(ValueError, match=r"ncuda=3 but machine 'g2' has 2 GPUs"):
        RuntimeConfig.resolve(simulate="g2", ncuda=3)
    with pytest.raises(ValueError, match=r"ncpu=5 but machine 'g2' has 4 CPUs"):
        RuntimeConfig.resolve(simulate="g2", ncpu=5)


def test_derive_chiplets_writes_one_device_per_chiplet_linked_to_the_package_memory(home, cuda_flavour):
    m = machines.derive("c4", "base", cpus=2, chiplets=4, chiplet_link_gbs=8.0, gpu_speed=5.0, gpu_memory=2**28)
    assert (m.gpus, m.chiplets, m.chiplet_link_gbs, m.link_bandwidth_gbs, m.gpu_speed) == (4, 4, 8.0, 8.0, 5.0)
    xml = (home / "c4" / "sampling" / "bus" / "c4.platform.v4.xml").read_text()
    assert xml.count('<host id="CUDA') == 4 and f'value="{2**28}"' in xml
    for c in range(4):   # each chiplet its own link to the package's memory, both ways
        assert f'id="RAM-CUDA{c}" bandwidth="8000000000.000000Bps"' in xml
        assert f'id="CUDA{c}-RAM" bandwidth="8000000000.000000Bps"' in xml
    # the package's memory serves every chiplet at once
    assert 'id="Host" bandwidth="32000000000.000000Bps"' in xml
    # the transfer times StarPU's dm* policies predict are these links' (MB/s, us): a chiplet to
    # another crosses two of them
    bus = home / "c4" / "sampling" / "bus"
    bw = [line.split("\t")[:-1] for line in (bus / "c4.bandwidth").read_text().splitlines()[1:]]
    lat = [line.split("\t")[:-1] for line in (bus / "c4.latency").read_text().splitlines()[1:]]
    assert [float(v) for v in bw[0]] == [0.0, 8000.0, 8000.0, 8000.0, 8000.0]
    assert [float(v) for v in bw[2]] == [8000.0, 4000.0, 0.0, 4000.0, 4000.0]
    assert [float(v) for v in lat[3]] == [0.1, 0.2, 0.2, 0.0, 0.2]   # on-package links: 0.1 us by default
    text = machines.describe(machines.load("c4"))
    assert "chiplets: 4 (simulated as CUDA devices; speed x5" in text and "8 GB/s" in text
    assert "GPUs:" not in text
    # derived from it, the chiplets stay
    m2 = machines.derive("c4fast", "c4", cpu_speed=2.0)
    assert (m2.gpus, m2.chiplets, m2.chiplet_link_gbs) == (4, 4, 8.0)


def test_gpus_on_a_flavour_without_cuda_simulation_is_a_clear_error(home, monkeypatch):
    monkeypatch.setattr(machines, "cuda_simulation", lambda: "this build's simulation flavour has no CUDA codelets")
    with pytest.raises(MachineError, match="--gpus 2: simulated GPUs need CUDA codelets in the simulation flavour, "
                                           "and this build's simulation flavour has no CUDA codelets"):
        machines.derive("g2", "base", gpus=2)
    assert not (home / "g2").exists()
    with pytest.raises(MachineError, match="--chiplets 4: simulated chiplets need CUDA codelets"):
        machines.derive("c4", "base", chiplets=4, chiplet_link_gbs=10.0)


def test_this_builds_simulation_flavour_simulates_cuda():
    from tiletrain.sim.flavour import cuda_simulation
    assert cuda_simulation() is None


@pytest.mark.parametrize("kwargs, message", [
    (dict(chiplets=8), "--chiplets needs --chiplet-link"),
    (dict(chiplet_link_gbs=25.0), "--chiplet-link describes simulated chiplets: give their number with --chiplets"),
    (dict(chiplets=17, chiplet_link_gbs=25.0), r"--chiplets must be an integer in \[1, 16\]"),
    (dict(chiplets=4, chiplet_link_gbs=0.0), "--chiplet-link must be a positive number"),
    (dict(chiplets=4, chiplet_link_gbs=25.0, gpus=2), "--chiplets and --gpus both describe"),
    (dict(chiplets=4, chiplet_link_gbs=25.0, link_bandwidth_gbs=25.0), "a chiplet's link .* is --chiplet-link"),
    (dict(gpu_speed=20.0), "--gpu-speed describe simulated GPUs: give their number with --gpus N"),
    (dict(gpus=17), r"--gpus must be an integer in \[0, 16\]"),
    (dict(gpus=2, gpu_speed=0.0), "--gpu-speed must be a positive number"),
    (dict(gpus=2, link_bandwidth_gbs=float("inf")), "--link-bandwidth must be a positive number"),
    (dict(gpus=2, gpu_memory=1000), "--gpu-memory must be at least 1 MiB"),
    (dict(cpus=0), r"--cpus must be an integer in \[1, 256\]"),
    (dict(cpus=1000), r"--cpus must be an integer in \[1, 256\]"),
    (dict(cpu_speed=0.0), "--cpu-speed must be a positive number"),
    (dict(cpu_speed=float("nan")), "--cpu-speed must be a positive number"),
])
def test_derive_refuses_what_it_cannot_simulate(home, cuda_flavour, kwargs, message):
    with pytest.raises(MachineError, match=message):
        machines.derive("what-if", "base", **kwargs)
    assert not (home / "what-if").exists()  # nothing half-written


def test_derive_refuses_itself_an_existing_name_and_a_bad_name(home):
    with pytest.raises(MachineError, match="from itself"):
        machines.derive("base", "base")
    machines.derive("twin", "base")
    with pytest.raises(MachineError, match="exists .* --overwrite"):
        machines.derive("twin", "base")
    machines.derive("twin", "base", cpus=4, overwrite=True)
    with pytest.raises(ValueError, match="a machine name is"):
        machines.derive("../evil", "base")


def test_simulate_in_a_process_of_the_real_flavour_says_how(home, monkeypatch):
    monkeypatch.delenv("TILETRAIN_SIMULATE", raising=False)
    with pytest.raises(RuntimeError, match="loaded tiletrain's real flavour.*TILETRAIN_SIMULATE=base.*tiletrain "
                                           "simulate --machine base"):
        RuntimeConfig.resolve(simulate="base")
    with pytest.raises(ValueError, match="unknown machine 'nope'"):
        RuntimeConfig.resolve(simulate="nope")
    with pytest.raises(ValueError, match="a machine name is"):
        RuntimeConfig.resolve(simulate="a b")
    assert config.simulated_machine() is None and RuntimeConfig.resolve().simulate is None


def test_simulation_env_points_starpu_at_the_machine(home):
    env = config.simulation_env("base")
    assert env["STARPU_PERF_MODEL_DIR"] == str(home / "base" / "sampling")
    assert env["STARPU_HOSTNAME"] == "base" and env["TILETRAIN_SIM_SUBMIT_US"] == "8"


WORKER_STATS = ("simulated_us\t1000000.000\n"
                "worker\t0\tcpu\tCPU 0\t120\t900000.000\t0.000\n"
                "worker\t1\tcpu\tCPU 1\t80\t500000.000\t100000.000\n")
BUS_STATS = """
#---------------------
Data transfer stats:
\tNUMA 0 -> CUDA 0\t0.5000 GB\t512.0000 MB/s\t(transfers : 10 - avg 51.2000 MB)
\tCUDA 0 -> NUMA 0\t0.0000 GB\t0.0000 MB/s\t(transfers : 0 - avg -nan MB)
Total transfers: 0.5000 GB
#---------------------
"""


def test_the_summary_reads_starpus_statistics():
    s = summarise("m", 0, WORKER_STATS, BUS_STATS, "tiletrain_gemm\tcpu0_impl0 (Comb0)\t50986c89\t196608\tmissing\n" * 2
                  + "tiletrain_add\tcpu0_impl0 (Comb0)\t00000001\t4096\testimated\n")
    assert (s.simulated_s, s.tasks) == (1.0, 200)
    assert s.workers == {"cpu": {"count": 2, "tasks": 200, "busy_fraction": 0.7}}
    assert s.idle_fraction == pytest.approx(0.3)
    assert s.bytes_moved == {"NUMA 0 -> CUDA 0": 2**29}
    assert s.missing == [("tiletrain_gemm", "cpu0_impl0 (Comb0)", "50986c89", 196608)]  # once
    assert s.estimated == [("tiletrain_add", "cpu0_impl0 (Comb0)", "00000001", 4096)]
    assert "1 tile shape(s) not calibrated on this machine were timed from" in s.format()
    line = json.loads(json.dumps(s.to_json()))
    assert set(line) == {"machine", "simulated_s", "tasks", "workers", "idle_fraction", "bytes_moved"}
    assert "busy 90.0 %" not in s.format() and "cpu: 2 workers, 200 tasks, busy 70.0 %" in s.format()


def test_the_program_to_simulate(tmp_path):
    import sys
    assert command_for(["train.py", "-x"]) == [sys.executable, "train.py", "-x"]
    assert command_for(["tiletrain", "train"]) == [sys.executable, "-m", "tiletrain", "train"]
    assert command_for(["python", "-c", "1"]) == [sys.executable, "-c", "1"]
    with pytest.raises(ValueError, match="no program to simulate"):
        command_for([])
    with pytest.raises(ValueError, match="program 'no-such-program' not found"):
        command_for(["no-such-program"])


def test_the_cli_reports_bad_machines(home, capsys):
    from tiletrain.cli import main
    assert main(["machine", "show", "nope"]) == 2
    assert "unknown machine 'nope'" in capsys.readouterr().err
    (home / "base" / "machine.json").write_text("{")
    assert main(["simulate", "--machine", "base", "--", "python", "-c", "pass"]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    (home / "base" / "machine.json").unlink()
    machines.save(machines.Machine(name="base", kind="calibrated", cpus=2))
    assert main(["machine", "derive", "g", "--link-bandwidth", "25"]) == 2
    assert "give their number with --gpus N" in capsys.readouterr().err
    assert os.listdir(home) == ["base"]


def test_what_starpu_would_abort_on_is_refused_first(home):
    with pytest.raises(ValueError, match=r"ncpu=8 but machine 'base' has 2 CPUs: .*--cpus 8"):
        RuntimeConfig.resolve(simulate="base", ncpu=8)
    with pytest.raises(ValueError, match=r"ncuda=1 but machine 'base' has 0 GPUs: .*--gpus 1"):
        RuntimeConfig.resolve(simulate="base", ncuda=1)
    with pytest.raises(ValueError, match="MPI cannot be simulated"):
        RuntimeConfig.resolve(simulate="base", mpi=True)
    with pytest.raises(ValueError, match="calibrate=1 under simulation"):
        RuntimeConfig.resolve(simulate="base", calibrate=1)
    (home / "base" / "sampling" / "bus" / "base.latency").unlink()
    with pytest.raises(ValueError, match=r"machine 'base' has no .*base\.latency"):
        RuntimeConfig.resolve(simulate="base")
