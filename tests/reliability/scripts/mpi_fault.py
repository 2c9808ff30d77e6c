"""MPI fault scenarios (run under `mpirun -np 2`): one rank fails along some path while the
other waits for it in a collective read; the job must end within seconds, non-zero, with the
failing rank's message.  argv[1]: the scenario (see SCENARIOS)."""
import sys

import numpy as np

import tiletrain as tt
from tiletrain.distribution import BlockCyclic

MESSAGE = "deliberate failure on rank"


def flow(fail_rank: int, fail):
    """Tensors on both ranks; `fail_rank` calls fail(), the others read B collectively."""
    A = tt.from_numpy(np.ones((6, 4)), (2, 2), dist=BlockCyclic())
    B = tt.add(A, A)
    if tt.rank() == fail_rank:
        fail()
    print("sum", B.numpy().sum(), flush=True)  # the other rank waits here for the failed one
    return B


def boom():
    raise ValueError(f"{MESSAGE} {tt.rank()}")


def with_raise(rank=0):
    with tt.init():
        flow(rank, boom)


def finally_raise():
    tt.init()
    try:
        flow(0, boom)
    finally:
        tt.shutdown()


def except_shutdown():
    tt.init()
    try:
        flow(0, boom)
    except ValueError:
        tt.shutdown()  # the error is handled, but the ranks diverged: still an error path
        raise


def uncaught():
    tt.init()
    flow(0, boom)


def exit_one(code):
    tt.init()
    flow(0, lambda: sys.exit(code))
    tt.shutdown()


def exit_all(code):
    tt.init()
    flow(-1, None)
    sys.exit(code)  # every rank at the same point: a clean collective shutdown at exit


def exit_all_with(code):
    with tt.init():
        flow(-1, None)
        sys.exit(code)


def clean():
    with tt.init():
        flow(-1, None)


SCENARIOS = {
    "with_raise": with_raise,
    "with_raise_rank1": lambda: with_raise(1),
    "finally_raise": finally_raise,
    "except_shutdown": except_shutdown,
    "uncaught": uncaught,
    "exit0_one_rank": lambda: exit_one(0),
    "exit1_one_rank": lambda: exit_one(1),
    "exit0_all_ranks": lambda: exit_all(0),
    "exit3_all_ranks": lambda: exit_all(3),
    "exit0_all_ranks_with": lambda: exit_all_with(0),
    "clean": clean,
}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]]()
