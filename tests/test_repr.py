"""Printing like torch (same layout, ``tiletrain.`` dtypes, ``tiles=`` when more than one tile),
tolist, len and iteration."""
import ml_dtypes
import numpy as np
import pytest
import torch

import tiletrain as tt

rng = np.random.default_rng(3)
VALUES = [
    np.array([[0.1, 0.2], [3, 4]]), np.array([1.0, 2.0]), np.array([1.5e10, 1.0]), np.array([1e-5, 1.0]),
    np.array([np.inf, -1.0, np.nan]), np.zeros((2, 2)), np.array(1.5), np.array(-2.0),
    np.arange(24.0).reshape(2, 3, 4),
    rng.standard_normal((5, 6, 7)), rng.standard_normal((50, 60)) * 1e3, np.arange(2000.0).reshape(40, 50),
    rng.standard_normal((20, 30, 40)), rng.standard_normal(1500), np.arange(-7, 33, dtype=np.float64) / 8,
]


def as_tiletrain(t: torch.Tensor) -> str:
    return repr(t).replace("torch.", "tiletrain.")


@pytest.mark.parametrize("i", range(len(VALUES)))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.float16, ml_dtypes.bfloat16, np.bool_])
def test_repr_matches_torch_on_one_tile(i, dtype):
    a = VALUES[i]
    if np.dtype(dtype) == np.bool_:
        a = np.nan_to_num(a) > 0.5
    elif np.dtype(dtype).kind == "i":
        a = np.nan_to_num(a, nan=0, posinf=9, neginf=-9).clip(-1e15, 1e15)
    with np.errstate(over="ignore"):  # 1.5e10 is inf in float16, as in torch
        a = np.asarray(a).astype(dtype)
    ref = torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16) if dtype is ml_dtypes.bfloat16 \
        else torch.from_numpy(a)
    x = tt.from_numpy(a, tiles=a.shape or None)
    assert x.traits.ntiles == 1
    assert repr(x) == as_tiletrain(ref)


def test_repr_requires_grad_and_grad_fn():
    a = np.array([[0.1, 0.2], [3, 4]])
    x = tt.tensor(a.tolist(), requires_grad=True)
    assert repr(x) == as_tiletrain(torch.tensor(a.tolist(), requires_grad=True))
    x64 = tt.tensor(a, dtype=tt.float64, requires_grad=True)
    assert repr(x64) == ("tensor([[0.1000, 0.2000],\n        [3.0000, 4.0000]], dtype=tiletrain.float64, "
                         "requires_grad=True)")
    y64 = tt.tensor([1.0, -2.5], dtype=tt.float64, requires_grad=True)
    t64 = torch.tensor([1.0, -2.5], dtype=torch.float64, requires_grad=True)
    assert repr(y64 * y64) == as_tiletrain(t64 * t64)
    assert repr(x64 * x64).endswith("grad_fn=<MulBackward0>)")
    assert repr(tt.tensor(2.5, requires_grad=True)) == "tensor(2.5000, requires_grad=True)"


def test_repr_shows_tiles_when_more_than_one():
    assert repr(tt.tensor([1.0, 2.0, 3.0], tiles=2)) == "tensor([1., 2., 3.], tiles=(2,))"
    assert repr(tt.arange(10, tiles=3)) == "tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], tiles=(3,))"
    assert repr(tt.linspace(-3, 10, 8, tiles=3)) == (
        "tensor([-3.0000, -1.1429,  0.7143,  2.5714,  4.4286,  6.2857,  8.1429, 10.0000],\n"
        "       tiles=(3,))")
    a = rng.standard_normal((300, 5)).astype(np.float32)  # summarised; the suffix fits on the last line
    assert repr(tt.tensor(a, tiles=(7, 2))) == as_tiletrain(torch.from_numpy(a))[:-1] + ", tiles=(7, 2))"


def test_repr_of_tensors_without_values():
    e = tt.empty(2, 2, tiles=1)
    assert repr(e) == "tensor(<not written yet>, shape=(2, 2), tiles=(1, 1))"
    assert repr(tt.empty(3, dtype=tt.float64)) == \
        "tensor(<not written yet>, shape=(3,), dtype=tiletrain.float64)"


@pytest.mark.parametrize("shape,tiles", [((), None), ((5,), (2,)), ((5, 4, 3), (2, 3, 2))])
def test_tolist_len_iter(shape, tiles):
    a = rng.standard_normal(shape)
    x = tt.tensor(a, tiles=tiles)
    assert x.tolist() == torch.tensor(a).tolist()
    assert tt.tensor(np.arange(6).reshape(2, 3)).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert tt.tensor(a, dtype=tt.bfloat16).tolist() == torch.tensor(a, dtype=torch.bfloat16).tolist()
    if not shape:
        assert isinstance(x.tolist(), float)
        with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
            len(x)
        with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
            iter(x)
        return
    assert len(x) == shape[0]
    rows = list(x)
    assert len(rows) == shape[0]
    for i, r in enumerate(rows):
        assert isinstance(r, tt.Tensor) and r.shape == shape[1:] and r.tiles == tuple(tiles[1:])
        np.testing.assert_array_equal(r.numpy(), a[i])


def test_grad_fn_names_the_op_as_torch_does():
    x = tt.tensor([1.0, -2.5], requires_grad=True)
    t = torch.tensor([1.0, -2.5], requires_grad=True)
    assert x.grad_fn is None and t.grad_fn is None
    for f in (lambda a: a * a, lambda a: a + a, lambda a: a.exp(), lambda a: a.sum()):
        assert f(x).grad_fn.name() == f(t).grad_fn.name()
