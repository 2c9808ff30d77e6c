"""Other ranks' tiles are registered with StarPU only when this rank needs them: a flow
that runs entirely on rank 0 registers nothing of it on rank 1, until a collective read.
argv: out tag."""
import sys

import numpy as np

import tiletrain as tt
from tiletrain._ffi import ffi, lib
from tiletrain.distribution import SingleRank, use

out, tag = sys.argv[1:3]
tt.init()


def counts():
    c = ffi.new("int64_t[2]")
    lib.tt_mpi_lazy_counts(c)
    return int(c[0]), int(c[1])


a = np.arange(24.0).reshape(4, 6)
with use(SingleRank(0)):
    x = tt.from_numpy(a, (2, 3))          # 4 tiles on rank 0
    y = tt.ops.elementwise.BINARY_OPS["add"](tt.mul(x, x), x, alpha=2.0, beta=1.0)  # every task on rank 0
    tt.wait()
before = counts()
got = y.numpy()                            # collective: every rank gets every tile
after = counts()
np.savez(f"{out}/{tag}-rank{tt.rank()}.npz", before=before, after=after, err=np.abs(got - (2 * a * a + a)).max())
tt.shutdown()
