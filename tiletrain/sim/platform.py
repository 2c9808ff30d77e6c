"""SimGrid platform files for StarPU's simulation: ``sampling/bus/<host>.platform.v4.xml``
(and the ``.config`` StarPU writes beside it), generated for a machine's devices and links.

StarPU's simulation reads the devices from the host names: ``MAIN`` (the submitting
thread), ``CPU0``.. (one per CPU worker), ``CUDA0``.. (with a ``memsize`` property), ``RAM``,
and the links between RAM and each device's memory.  A task runs for its perf model's time
whatever a host's speed (StarPU converts the time to flops on that host), so speeds are
scaled in the models (tiletrain/sim/perfmodel.py), not here.
"""
from __future__ import annotations

HEADER = """<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM 'http://simgrid.gforge.inria.fr/simgrid/simgrid.dtd'>
 <platform version="4">
 <config id="General">
   <prop id="network/TCP-gamma" value="-1"></prop>
   <prop id="network/latency-factor" value="1"></prop>
   <prop id="network/bandwidth-factor" value="1"></prop>
   <prop id="network/crosstraffic" value="0"></prop>
   <prop id="network/weight-S" value="0.0"></prop>
 </config>
 <AS  id="AS0"  routing="Full">
"""


def platform_xml(cpus: int, gpus: int = 0, gpu_memory: int = 0, link_bandwidth: float = 0.0,
                 link_latency: float = 0.0, host_bandwidth: float = 0.0) -> str:
    """The platform: ``cpus`` CPU hosts and ``gpus`` CUDA hosts with ``gpu_memory`` bytes each,
    linked to RAM at ``link_bandwidth`` bytes/s and ``link_latency`` seconds each way, through
    the host's own memory bus (``host_bandwidth`` bytes/s)."""
    if cpus < 1:
        raise ValueError(f"a machine needs at least one CPU, got {cpus}")
    lines = [HEADER, '   <host id="MAIN" speed="1f"/>\n']
    lines += [f'   <host id="CPU{i}" speed="2000000000f"/>\n' for i in range(cpus)]
    for g in range(gpus):
        lines.append(f'   <host id="CUDA{g}" speed="2000000000f">\n     <prop id="memsize" value="{int(gpu_memory)}"/>\n'
                     f'   </host>\n')
    lines.append('\n   <host id="RAM" speed="1f"/>\n\n')
    if gpus:
        lines.append(f'   <link id="Host" bandwidth="{host_bandwidth or link_bandwidth:f}Bps" latency="0.000000s"/>\n\n')
        for g in range(gpus):
            for a, b in (("RAM", f"CUDA{g}"), (f"CUDA{g}", "RAM")):
                lines.append(f'   <link id="{a}-{b}" bandwidth="{link_bandwidth:f}Bps" latency="{link_latency:f}s"/>\n')
        for g in range(gpus):
            for a, b in (("RAM", f"CUDA{g}"), (f"CUDA{g}", "RAM")):
                lines.append(f'   <route src="{a}" dst="{b}" symmetrical="NO"><link_ctn id="{a}-{b}"/>'
                             f'<link_ctn id="Host"/></route>\n')
    lines.append(" </AS>\n </platform>\n")
    return "".join(lines)


def bus_matrices(gpus: int, link_bandwidth: float, link_latency: float) -> tuple[str, str]:
    """StarPU's ``<host>.bandwidth`` (MB/s) and ``<host>.latency`` (us) for the platform above:
    the transfer times its dm* policies predict between memory nodes (0: RAM, 1..gpus: the
    devices).  RAM and a device: their link; two devices: through RAM, both links (half the
    bandwidth, twice the latency), as the simulation routes them."""
    bw, lat = link_bandwidth / 1e6, link_latency * 1e6
    n = gpus + 1

    def matrix(direct: float, through: float) -> str:
        rows = ["# " + "".join(f"to {j}\t\t" for j in range(n))]
        for i in range(n):
            rows.append("".join(f"{0.0 if i == j else direct if 0 in (i, j) else through:e}\t" for j in range(n)))
        return "\n".join(rows) + "\n"

    return matrix(bw, bw / 2), matrix(lat, 2 * lat)


def config_text(cpus: int, gpus: int = 0) -> str:
    """StarPU's ``<host>.config`` (the device counts of the bus calibration)."""
    return (f"# Current configuration\n{cpus} # Number of CPUs\n1 # Number of NUMA nodes\n{gpus} # Number of CUDA "
            f"devices\n0 # Number of OpenCL devices\n0 # Number of MIC devices\n0 # Number of MPI devices\n")


__all__ = ["platform_xml", "config_text", "bus_matrices"]
