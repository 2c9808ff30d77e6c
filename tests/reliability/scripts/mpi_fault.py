"""MPI fault scenarios (run under `mpirun -np 2`): one rank fails along some path while the
other waits for it in a collective read; the job must end within seconds, non-zero, with the
failing rank's message.  argv[1]: the scenario (see SCENARIOS)."""
import os
import sys
import tempfile
import time

import numpy as np

import tiletrain as tt
from tiletrain.distribution import BlockCyclic

MESSAGE = "deliberate failure on rank"


def mark():
    """When the failure happens (the test measures the time from here to the job's exit)."""
    print(f"FAULT-AT {time.time():.3f}", file=sys.stderr, flush=True)


def flow(fail_rank: int, fail):
    """Tensors on both ranks; `fail_rank` calls fail(), the others read B collectively."""
    A = tt.from_numpy(np.ones((6, 4)), (2, 2), dist=BlockCyclic())
    B = tt.add(A, A)
    if tt.rank() == fail_rank:
        mark()
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
    flow(0, lambda: sys.exit(code))  # the other rank goes on to read B
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


def _train_args(**kw):
    from tiletrain.train import TrainArgs
    data = os.path.join(tempfile.gettempdir(), "tiletrain-fault-corpus.txt")  # the same path on every rank
    tmp = f"{data}.{os.getpid()}"
    with open(tmp, "w") as f:  # a small corpus: loads in no time
        f.write("def f(x):\n    return x + 1\n" * 400)
    os.replace(tmp, data)
    return TrainArgs(**{**TRAIN, "data": [data], **kw})


TRAIN = dict(n_layer=1, n_head=2, n_embd=16, seq_len=8, batch=4, steps=3, warmup=1, eval_every=0, sample_tokens=0,
             progress=False, val_fraction=0.1, lr=3e-3, tiles=(2, 8, 8), seed=5, dist="data")


def train_bad_ckpt_dir():
    """rank 0's --ckpt-dir is a regular file (rank 1's is fine): an up-front check."""
    from tiletrain.train import train
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "ckpt")
    if tt.rank() == 0:
        open(path, "w").close()
    mark()
    train(_train_args(ckpt_dir=path))


def train_disk_full():
    """rank 0's checkpoint write fails (a full disk) in the middle of training."""
    import errno

    import tiletrain.train.loop as tr  # the loop's own name for it
    tmp = tempfile.mkdtemp()
    real = tr.save_training_state

    def full_disk(*a, **k):
        if tt.rank() == 0:
            mark()
            raise OSError(errno.ENOSPC, f"No space left on device ({MESSAGE} 0)")
        return real(*a, **k)

    tr.save_training_state = full_disk
    tr.train(_train_args(eval_every=1, ckpt_dir=tmp))


def train_options_differ():
    """the ranks get different options (a launcher mistake): every rank stops before any step."""
    from tiletrain.train import train
    mark()
    train(_train_args(lr=1e-3 * (1 + tt.rank()), run_dir=tempfile.mkdtemp()))


SCENARIOS = {
    "train_options_differ": train_options_differ,
    "train_bad_ckpt_dir": train_bad_ckpt_dir,
    "train_disk_full": train_disk_full,
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
