"""`tiletrain train --dist pipeline --stages 2 --schedule pb|local` in one process (stages on
groups of workers): the stages' own optimizers update during the step (the loop steps none),
a pb run resumes exactly from its checkpoint (the per-stage optimizers' state), local's
heads are not in the checkpoint (--resume refused)."""
import numpy as np
import pytest
from train_helpers import tiny_args

from tiletrain import checkpoint as ck
from tiletrain.train import train


def _args(corpus, **kw):
    base = dict(n_layer=2, ncpu=2, dist="pipeline", stages=2, micro_batches=4, batch=2, steps=4, eval_every=2,
                dtype="float64")
    return tiny_args(corpus, **{**base, **kw})


def test_pb_trains_and_resumes_exactly(corpus, tmp_path):
    full = train(_args(corpus, schedule="pb", ckpt_dir=str(tmp_path / "a")))
    assert full.step == 4 and all(np.isfinite(full.train_losses))
    first = train(_args(corpus, schedule="pb", ckpt_dir=str(tmp_path / "b"), stop_after=2))
    assert first.step == 2
    second = train(_args(corpus, schedule="pb", ckpt_dir=str(tmp_path / "b"), resume=True))
    assert second.train_losses == full.train_losses[2:]
    a, ma = ck.load(tmp_path / "a" / ck.CHECKPOINT_NAME)
    b, _ = ck.load(tmp_path / "b" / ck.CHECKPOINT_NAME)
    assert sorted(a) == sorted(b) and any(k.startswith("optimizer.") for k in a)
    assert [g["delay"] for g in ma["optimizer"]["param_groups"]] == [2, 0]     # one group per stage
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_local_trains_and_refuses_resume(corpus, tmp_path):
    res = train(_args(corpus, schedule="local", steps=2, eval_every=0, ckpt_dir=str(tmp_path / "c")))
    assert res.step == 2 and all(np.isfinite(res.train_losses))
    with pytest.raises(ValueError, match="heads of the stage boundaries are not in the checkpoint"):
        train(_args(corpus, schedule="local", steps=4, ckpt_dir=str(tmp_path / "c"), resume=True))
