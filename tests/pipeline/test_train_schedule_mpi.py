"""`tiletrain train --dist pipeline --schedule ...` under mpirun -np 2 gives the single-process
losses (float64, dropout on): a built-in schedule other than the default (gpipe) and a CSV
schedule of one's own, with the backward split into input and weight gradients on one stage;
pb (per-stage updates during the step) gives the losses of its one-process run on two
worker groups (--stages 2).
Each launch has a timeout (tests/mpi/mpi_launch.py)."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mpi"))
from mpi_launch import requires_mpi, run_mpi, run_single  # noqa: E402

pytestmark = [requires_mpi, pytest.mark.mpi]

SCRIPT = str(Path(__file__).resolve().parent / "scripts" / "train_schedule.py")
TEXT = "def add(a, b):\n    return a + b\n\nclass Tile:\n    pass\n" * 400
# 2 stages x 4 micro-batches: stage 0 runs three forwards ahead, stage 1 splits each backward
# into its input gradient (I, what stage 0 waits for) and its weight gradient (W, later)
CSV = ("0F0,0F1,0F2,0B0,0F3,0B1,0B2,0B3\n"
       "1F0,1I0,1F1,1I1,1W0,1F2,1I2,1W1,1F3,1I3,1W2,1W3\n")


def test_gpipe_a_csv_schedule_and_pb_give_the_one_process_losses(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    csv = tmp_path / "mine.csv"
    csv.write_text(CSV)
    run_single(SCRIPT, tmp_path, "single", corpus)
    ref = np.load(tmp_path / "single-rank0.npz")["losses"]
    assert len(ref) == 2 and np.isfinite(ref).all()
    for tag, schedule in (("gpipe", "gpipe"), ("csv", str(csv))):
        run_mpi(SCRIPT, 2, tmp_path, tag, corpus, "dist=pipeline", f"schedule={schedule}", timeout=120)
        for r in range(2):
            got = np.load(tmp_path / f"{tag}-rank{r}.npz")["losses"]
            np.testing.assert_allclose(got, ref, rtol=1e-9, atol=0, err_msg=f"{tag} rank {r}")
    run_single(SCRIPT, tmp_path, "pb-one", corpus, "dist=pipeline", "stages=2", "schedule=pb", "ncpu=2")
    run_mpi(SCRIPT, 2, tmp_path, "pb", corpus, "dist=pipeline", "schedule=pb", timeout=120)
    ref = np.load(tmp_path / "pb-one-rank0.npz")["losses"]
    for r in range(2):
        np.testing.assert_allclose(np.load(tmp_path / f"pb-rank{r}.npz")["losses"], ref, rtol=1e-9, atol=0,
                                   err_msg=f"pb rank {r}")
