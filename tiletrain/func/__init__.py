"""tiletrain.func: torch.func's function transforms, with torch's names, signatures, defaults,
tree structures and errors, so a program written with torch.func runs with the import changed.

- ``functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *,
  tie_weights=True, strict=False)``: the module run with other tensors in place of its
  parameters and buffers (tiletrain/nn/utils/stateless.py).
- ``grad``, ``grad_and_value``, ``vjp``, ``jvp``, ``jacrev``, ``jacfwd``, ``hessian``: built on
  tiletrain.autograd (reverse mode; ``jvp`` by the double-vjp trick and ``jacfwd`` as jacrev's
  Jacobian, with torch's values; tiletrain/func/transforms.py).  They nest
  (``jacrev(grad(f))``, ``vmap(grad(f))``) and compose with ``backward()``.
- ``vmap``: a loop over the samples (no batching rules: B samples cost B calls of the
  function; tiletrain/func/vmap.py), gradients flowing through it.

Per-sample gradients, as in torch::

    params = {k: v.detach() for k, v in model.named_parameters()}
    def loss(p, x, y):
        return F.mse_loss(functional_call(model, p, (x.unsqueeze(0),)), y.unsqueeze(0))
    per_sample = vmap(grad(loss), in_dims=(None, 0, 0))(params, xs, ys)   # {name: (B, ...)}
"""
from ..nn.utils.stateless import functional_call
from .transforms import grad, grad_and_value, hessian, jacfwd, jacrev, jvp, vjp
from .vmap import vmap

__all__ = ["functional_call", "grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "vmap"]
