"""tt.shutdown() while another thread submits tasks, reads and frees tensors: the process must
exit 0, the thread's calls either completing or raising RuntimeError (never a crash).
argv[1]: seconds the thread runs before the shutdown (default 0.05)."""
import sys
import threading
import time

import numpy as np

import tiletrain as tt

delay = float(sys.argv[1]) if len(sys.argv) > 1 else 0.05
tt.init(ncpu=2)
x = tt.from_numpy(np.ones((64, 64)), (8, 8))
started = threading.Event()
outcome = []


def submitter():
    try:
        y = x
        while True:
            y = tt.add(y, x)          # a task per tile
            z = tt.mul(y, 0.5)
            started.set()
            z.numpy()  # reads (tile acquisitions) race with the shutdown too
    except RuntimeError as e:
        outcome.append(str(e))
    except Exception as e:  # any other exception type is a failure
        outcome.append(f"UNEXPECTED {type(e).__name__}: {e}")


t = threading.Thread(target=submitter)
t.start()
started.wait()
time.sleep(delay)
tt.shutdown()
t.join(30)
assert not t.is_alive(), "the submitting thread still runs after the shutdown"
assert outcome and not outcome[0].startswith("UNEXPECTED"), outcome
print("thread stopped with:", outcome[0])
