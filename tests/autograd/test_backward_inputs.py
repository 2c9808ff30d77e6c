"""Tensor.backward(inputs=...) and tiletrain.autograd.backward(..., inputs=...) against
torch: only the listed tensors' .grad accumulates (leaves or not, an input given twice once,
one the outputs do not reach left alone), with and without create_graph; torch's errors."""
import numpy as np
import pytest
import torch

import tiletrain as tt
import tiletrain.autograd


def _pair(values, tiles=None):
    a = np.asarray(values, dtype=np.float64)
    return tt.from_numpy(a, tiles).requires_grad_(), torch.tensor(a, requires_grad=True)


def _model(m, x, w, b):
    h = x * w
    return h, (m.sin(h) * h).sum() + (w * b).sum()


def _grads(ts):
    return [None if t.grad is None else t.grad.detach().numpy() for t in ts]


def _same(got, want):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert (g is None) == (w is None), f"tensor {i}: .grad {g} against torch's {w}"
        if w is not None:
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14, err_msg=f"tensor {i}")


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
@pytest.mark.parametrize("pick", ["x", "w_b", "h_and_x", "twice", "tensor", "unreached"])
@pytest.mark.parametrize("create_graph", [False, True])
def test_backward_inputs_against_torch(pick, create_graph):
    (x, xt), (w, wt), (b, bt) = _pair([0.5, -1.0, 2.0], (2,)), _pair([1.5, 0.3, -0.7], (2,)), _pair([2.0, 1.0, 0.5])
    (z, zt) = _pair([4.0])
    h, y = _model(tt, x, w, b)
    ht, yt = _model(torch, xt, wt, bt)
    if pick != "h_and_x":
        h, ht = None, None
    choose = {"x": lambda x, w, b, z, h: [x], "w_b": lambda x, w, b, z, h: (w, b),
              "h_and_x": lambda x, w, b, z, h: [h, x], "twice": lambda x, w, b, z, h: [w, w, x],
              "tensor": lambda x, w, b, z, h: b, "unreached": lambda x, w, b, z, h: [z, x]}[pick]
    for _ in range(2):   # the second pass accumulates
        y.backward(inputs=choose(x, w, b, z, h), retain_graph=True, create_graph=create_graph)
        yt.backward(inputs=choose(xt, wt, bt, zt, ht), retain_graph=True, create_graph=create_graph)
    _same(_grads([x, w, b, z]), _grads([xt, wt, bt, zt]))
    if h is not None:
        _same(_grads([h]), _grads([ht]))
    if create_graph and pick == "x":   # .grad has a graph
        (gg,) = tt.autograd.grad(x.grad.sum(), w)
        (ggt,) = torch.autograd.grad(xt.grad.sum(), wt)
        _same([gg.numpy()], [ggt.numpy()])


def test_autograd_backward_several_outputs_inputs():
    (x, xt), (w, wt) = _pair([1.0, 2.0]), _pair([3.0, 4.0])
    tt.autograd.backward([(x * x).sum(), (x * w).sum()], inputs=[w])
    torch.autograd.backward([(xt * xt).sum(), (xt * wt).sum()], inputs=[wt])
    _same(_grads([x, w]), _grads([xt, wt]))
    tt.autograd.backward((x * w * 2.0).sum(), inputs=x)   # one output, one tensor
    torch.autograd.backward((xt * wt * 2.0).sum(), inputs=xt)
    _same(_grads([x, w]), _grads([xt, wt]))


def test_backward_inputs_leaf_root_and_seed():
    """A leaf's own backward with itself as the input: .grad is the seed (as torch), a copy."""
    (x, _) = _pair([1.0, -2.0])
    seed = tt.from_numpy(np.array([0.5, 3.0]))
    x.backward(seed, inputs=[x])
    np.testing.assert_array_equal(x.grad.numpy(), [0.5, 3.0])
    seed += 1.0   # .grad does not alias the seed
    np.testing.assert_array_equal(x.grad.numpy(), [0.5, 3.0])


def test_backward_inputs_errors_as_torch():
    x = tt.from_numpy(np.array([1.0, 2.0])).requires_grad_()
    c = tt.from_numpy(np.array([1.0, 2.0]))
    y = (x * x).sum()
    with pytest.raises(RuntimeError, match=r"`inputs` argument to `backward\(\)` cannot be empty"):
        y.backward(inputs=[], retain_graph=True)
    with pytest.raises(RuntimeError, match=r"`inputs` argument to `backward\(\)` cannot be empty"):
        tt.autograd.backward([y], inputs=(), retain_graph=True)
    with pytest.raises(RuntimeError, match="can't retain_grad on Tensor that has requires_grad=False"):
        y.backward(inputs=[c], retain_graph=True)
    with pytest.raises(RuntimeError, match="all inputs have to be Tensors, but got int"):
        y.backward(inputs=[x, 3], retain_graph=True)
    with pytest.raises(TypeError, match="inputs must be a Tensor or a sequence"):
        y.backward(inputs=3, retain_graph=True)
    assert x.grad is None   # nothing ran
    y.backward(inputs=[x])
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])
    with pytest.raises(RuntimeError, match="already released"):   # retain_graph defaults to False
        y.backward(inputs=[x])
