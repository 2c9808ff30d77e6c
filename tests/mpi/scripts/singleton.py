"""init(mpi=True) without mpirun (an MPI singleton): one rank, tags from the process-wide
counter, and a second session in the same process."""
import numpy as np

import tiletrain as tt
from tiletrain._ffi import lib
from tiletrain.distribution import BlockCyclic

for session in range(2):
    rt = tt.init(mpi=True)
    assert lib.tt_mpi_enabled() == 1 and tt.rank() == 0 and tt.world_size() == 1
    assert rt.config.pause_when_idle is False
    t0 = lib.tt_mpi_next_tag()
    a = tt.from_numpy(np.arange(12.0).reshape(3, 4), (2, 3), dist=BlockCyclic((2, 2)))
    assert lib.tt_mpi_next_tag() == t0 + 4, (t0, lib.tt_mpi_next_tag())  # one tag per tile
    del a
    b = tt.ones((3, 4), tiles=(2, 2))
    assert lib.tt_mpi_next_tag() == t0 + 4 + 4  # never reused, even after a tensor is freed
    assert float(tt.sum(b)) == 12.0
    assert (b.owners() == 0).all()
    tt.shutdown()
    assert not lib.tt_mpi_enabled()
    print(f"session {session}: tags {t0}..{lib.tt_mpi_next_tag()}", flush=True)
print("ok", flush=True)
