"""Optimizers as fused tile kernels (one task per parameter tile), gradient clipping with
tile tasks, and learning-rate schedules.  Nothing here waits for the tasks it submits."""
from __future__ import annotations

import math
import numbers
from typing import Iterable

import numpy as np

from ..distribution import Explicit
from ..ops.autograd import enable_grad, no_grad
from ..ops.basic import axpy_, copy, count_, count_value, new_count, scale, zero_grads
from ..ops.creation import zeros
from ..ops.elementwise import clamp
from ..ops.index import assign_
from ..ops.reduce import norm
from ..ops.shape import stack
from ..runtime import memory_limit, mpi
from ..runtime.kernels import run_map, run_span
from ..tensors import Tensor, TensorTraits, empty, from_numpy
from ..tensors.tensor import get_default_dtype, wont_use
from ..trace.tags import tag
from .line_search import strong_wolfe

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "Adadelta", "Adagrad", "Adamax", "LBFGS", "NAdam", "RAdam", "RMSprop", "clip_grad_norm_", "cosine_with_warmup", "spike_coefficients",
           "COMPENSATIONS"]


# per-parameter state that is a number, not a tensor of the parameter's shape (NAdam's product
# of its momentum coefficients)
_SCALAR_STATE = ("mu_product",)


def _scalar_dtype() -> np.dtype:
    """The dtype of torch's 0-d optimizer state (the step count, NAdam's mu_product):
    float64 when the default dtype is float64, else float32."""
    return np.dtype(np.float64) if get_default_dtype() == np.float64 else np.dtype(np.float32)


def _step_tensor(value) -> Tensor:
    """A new 0-d step count holding ``value`` (a 0-d tensor or array, as torch's state dicts
    have, or the int of older state dicts and checkpoints): it keeps a float32 or float64
    value's dtype, anything else becomes _scalar_dtype() (as torch's loading of an int step)."""
    a = np.asarray(value)
    if a.size != 1:
        raise ValueError(f"optimizer state 'step' must be a number or a 0-d tensor, got shape {a.shape}")
    keep = not isinstance(value, numbers.Number) and a.dtype in (np.float32, np.float64)
    return new_count(a.reshape(()), a.dtype if keep else _scalar_dtype())


def _check_param(p, i: int) -> Tensor:
    if not isinstance(p, Tensor):
        raise TypeError(f"parameter {i} is a {type(p).__name__}, not a tiletrain Tensor")
    if p.dtype not in (np.float32, np.float64):
        raise TypeError(f"parameter {i} has dtype {p.dtype}; optimizers update float32 and float64 tensors")
    return p


class Optimizer:
    """Base class: parameter groups, per-parameter state tensors, zero_grad, state_dict.

    The step count of a parameter is, as torch's, a 0-d tensor in its state ("step", float32;
    float64 when the default dtype is), counted by ops.basic.count_: the updates take its
    value from the host, nothing waits for the tensor.  Optimizers whose torch class keeps
    none (SGD) set ``counts_steps = False``."""

    counts_steps = True

    def __init__(self, params: Iterable, defaults: dict):
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        if isinstance(params[0], dict):
            groups = [dict(g) for g in params]
        else:
            groups = [{"params": params}]
        self.defaults = dict(defaults)
        self.param_groups: list[dict] = []
        seen: set[int] = set()
        for gi, g in enumerate(groups):
            ps = list(g.get("params", []))
            for i, p in enumerate(ps):
                _check_param(p, i)
                if id(p) in seen:
                    raise ValueError(f"parameter {i} of group {gi} appears in more than one place")
                seen.add(id(p))
            unknown = set(g) - set(defaults) - {"params"}
            if unknown:
                raise TypeError(f"unknown optimizer option(s) {sorted(unknown)} in group {gi}")
            self.param_groups.append({**defaults, **g, "params": ps})
        for g in self.param_groups:
            self._validate(g)
        self.state: dict[int, dict] = {}  # id(param) -> {"step": 0-d Tensor, name: Tensor}

    def add_param_group(self, param_group: dict) -> None:
        """torch's add_param_group: a new group, the defaults filling what it does not give."""
        ps = param_group.get("params")
        ps = [ps] if isinstance(ps, Tensor) else list(ps or [])
        seen = {id(p) for _, p in self._params()}
        for i, p in enumerate(ps):
            _check_param(p, i)
            if id(p) in seen:
                raise ValueError("some parameters appear in more than one parameter group")
        g = {**self.defaults, **param_group, "params": ps}
        self._validate(g)
        self.param_groups.append(g)

    def _validate(self, group: dict) -> None:
        if group["lr"] < 0:
            raise ValueError(f"lr must be >= 0, got {group['lr']}")
        if group.get("weight_decay", 0.0) < 0:
            raise ValueError(f"weight_decay must be >= 0, got {group['weight_decay']}")

    def _params(self):
        for g in self.param_groups:
            for p in g["params"]:
                yield g, p

    def zero_grad(self, set_to_none: bool = True) -> None:
        zero_grads((p for _, p in self._params()), set_to_none)

    @tag(phase="opt")
    def step(self, closure=None):
        """One update of every parameter that has a gradient.  closure: as torch's, a function
        that recomputes the loss (zero_grad, forward, backward) and returns it; it runs first,
        with gradients enabled, and step returns its loss (None without a closure)."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            for g, p in self._params():
                if p.grad is None:
                    continue
                st = self.state.get(id(p), {})
                if self.counts_steps:
                    self._advance(st)
                self._update(g, p, st)
                if st:   # as torch: no entry for a parameter without state (SGD without momentum)
                    self.state[id(p)] = st
        return loss

    @staticmethod
    def _advance(st: dict) -> None:
        """One more step in a parameter's state: its step tensor counted in place (as torch's
        ``step += 1``: a state dict taken before sees it); made on the first step, or from a
        number put in the state."""
        step = st.get("step")
        if not isinstance(step, Tensor):
            step = st["step"] = _step_tensor(0 if step is None else step)
        count_(step)

    @staticmethod
    def _count(st: dict) -> float:
        """The step count of a parameter's state (after this step's _advance), from the host."""
        return float(count_value(st["step"]))

    def _update(self, group: dict, p: Tensor, state: dict) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- state (PyTorch layout: parameters numbered in group order) ------------------
    def state_dict(self, copy: bool = False) -> dict:
        """torch's layout: {"state": {index: {"step": 0-d Tensor, name: Tensor}}, "param_groups": [...]},
        the state tensors themselves (as torch: no copy, nothing waits; later steps update
        them).  copy=True: NumPy copies instead (reading them waits for the state tensors)."""
        index = {}
        groups = []
        for g in self.param_groups:
            ids = []
            for p in g["params"]:
                index[id(p)] = len(index)
                ids.append(index[id(p)])
            groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": ids})
        state = {}
        # in parameter order and name order, whatever order the state was created or loaded
        # in: under MPI every .numpy() is collective and all ranks must read in the same order
        for pid in sorted(self.state, key=index.__getitem__):
            st = self.state[pid]
            state[index[pid]] = {k: (st[k].numpy(force=True) if copy and isinstance(st[k], Tensor) else st[k])
                                 for k in sorted(st)}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, sd: dict) -> None:
        groups = sd.get("param_groups")
        if not isinstance(groups, list) or len(groups) != len(self.param_groups):
            raise ValueError(f"optimizer state has {len(groups) if isinstance(groups, list) else 'no'} parameter "
                             f"groups, this optimizer has {len(self.param_groups)}")
        params = [p for _, p in self._params()]
        for gi, (mine, theirs) in enumerate(zip(self.param_groups, groups)):
            if len(theirs["params"]) != len(mine["params"]):
                raise ValueError(f"parameter group {gi}: state has {len(theirs['params'])} parameters, "
                                 f"this optimizer has {len(mine['params'])}")
        new_state: dict[int, dict] = {}
        for idx, st in sorted(sd.get("state", {}).items(), key=lambda kv: int(kv[0])):
            idx = int(idx)
            st = {k: st[k] for k in sorted(st)}  # the same order on every rank (MPI: collective writes)
            if not 0 <= idx < len(params):
                raise ValueError(f"optimizer state for parameter {idx}, but there are only {len(params)}")
            p = params[idx]
            entry = {}
            for k, v in st.items():
                if k == "step":   # SGD (torch's keeps no count) drops an older state's
                    if self.counts_steps:
                        entry[k] = _step_tensor(v)
                    continue
                if k in _SCALAR_STATE:
                    entry[k] = float(np.asarray(v))
                    continue
                if not hasattr(v, "copy_to_"):  # a checkpoint's StoredTensor streams from its file below
                    v = np.asarray(v)
                if tuple(v.shape) != tuple(p.shape):
                    raise ValueError(f"optimizer state {k!r} of parameter {idx} has shape {tuple(v.shape)}, "
                                     f"the parameter has {p.shape}")
                if hasattr(v, "copy_to_"):
                    entry[k] = empty(p.traits, dtype=p.dtype, dist=_dist_of(p))
                    v.copy_to_(entry[k])
                else:
                    entry[k] = from_numpy(np.ascontiguousarray(v, dtype=p.dtype), p.tiles, dist=_dist_of(p))
            new_state[id(p)] = entry
        for mine, theirs in zip(self.param_groups, groups):
            for k, v in theirs.items():
                if k != "params":
                    mine[k] = v
        self.state = new_state


def _dist_of(p: Tensor):
    """Under MPI, the parameter's own owners (optimizer state must live with the parameter:
    the update task writes both); None in one process."""
    if not mpi.enabled():
        return None
    return Explicit(p.owners())


def _state_tensor(p: Tensor) -> Tensor:
    return zeros(p.traits, dtype=p.dtype, dist=_dist_of(p))


COMPENSATIONS = (None, "sc", "lwp", "sc+lwp")


def _check_compensation(comp, delay) -> None:
    if comp not in COMPENSATIONS:
        raise ValueError(f"compensation must be one of None, 'sc', 'lwp', 'sc+lwp', got {comp!r}")
    if not isinstance(delay, int) or isinstance(delay, bool) or delay < 0:
        raise ValueError(f"delay must be an int >= 0 (weight updates between a forward and its update), got "
                         f"{delay!r}")


def spike_coefficients(momentum: float, delay: int) -> tuple[float, float]:
    """Spike Compensation's (a, b) for momentum m and delay D (Kosson et al. 2020):
    a = m^D, b = (1 - m^D) / (1 - m) (b = D when m = 1 is excluded: m < 1)."""
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"spike compensation needs 0 <= momentum < 1, got {momentum}")
    a = momentum ** delay
    return a, (1.0 - a) / (1.0 - momentum)


def _fused_adam(g: dict, p: Tensor, st: dict, grad: Tensor, decoupled_decay: float, t: float) -> None:
    """One fused Adam task per tile of ``p`` (kernels.def adamw) from ``grad``, with AdamW's
    decoupled decay ``decoupled_decay`` (0: Adam) at step ``t``; the moments made on the first
    step."""
    if "exp_avg" not in st:
        st["exp_avg"] = _state_tensor(p)
        st["exp_avg_sq"] = _state_tensor(p)
    b1, b2 = g["betas"]
    run_map("adamw", grad, p, st["exp_avg"], st["exp_avg_sq"], lr=float(g["lr"]), beta1=float(b1),
            beta2=float(b2), eps=float(g["eps"]), weight_decay=decoupled_decay, bc1=1.0 - b1 ** t,
            bc2=1.0 - b2 ** t)
    if memory_limit() >= 0:  # under a memory budget: the state is done until the next step
        wont_use(st["exp_avg"])
        wont_use(st["exp_avg_sq"])


def _composed_adam(g: dict, p: Tensor, st: dict, grad: Tensor, decoupled_decay: float, t: float) -> None:
    """Adam / AdamW in torch's single-tensor order of operations, with tensor ops: amsgrad (the
    running maximum of the second moment in the denominator), which the fused adamw kernel
    does not do."""
    from ..ops.elementwise import add, div, maximum, mul, sqrt
    from ..ops.index import assign_
    b1, b2 = (float(b) for b in g["betas"])
    lr = float(g["lr"])
    if decoupled_decay:
        assign_(p, mul(p, 1.0 - lr * decoupled_decay))
    m, v = _adam_moments(g, st, grad)
    second = v
    if g.get("amsgrad"):
        vmax = st.get("max_exp_avg_sq")
        second = v if vmax is None else maximum(vmax, v)
        st["max_exp_avg_sq"] = second
    denom = add(div(sqrt(second), (1 - b2 ** t) ** 0.5), float(g["eps"]))
    assign_(p, add(p, div(m, denom), alpha=-lr / (1 - b1 ** t)))


class _Compensated:
    """Delay compensation for pipelines without a flush (tiletrain.pipeline.noflush): a
    parameter group's ``compensation`` (None, "sc", "lwp", "sc+lwp") and ``delay`` D (the
    weight updates between a forward and the update its gradient lands in, supplied by the
    schedule: ``Schedule.delays()``).  SC changes ``step``; LWP adds ``predict()``, the
    weights the next forward should run with."""

    def predict(self) -> list:
        """Per parameter (group order): the weights a forward should read -- with "lwp" or
        "sc+lwp", the Linear Weight Prediction D updates ahead (``_predicted``); else the
        parameter itself.  Submits the prediction's tasks, no waiting."""
        out = []
        with no_grad():
            for g, p in self._params():
                if g["compensation"] in ("lwp", "sc+lwp") and g["delay"] > 0:
                    out.append(self._predicted(g, p, self.state.get(id(p), {})))
                else:
                    out.append(p)
        return out


class AdamW(_Compensated, Optimizer):
    """AdamW with PyTorch's semantics (decoupled weight decay, bias correction), one fused
    task per parameter tile.  ``compensation``/``delay``: the delay compensation of
    pipelined backpropagation (``_Compensated``; Adam's form: SC on the first moment, LWP
    along the last update)."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False, foreach=None,
                 capturable: bool = False, differentiable: bool = False, fused=None, compensation=None,
                 delay: int = 0):
        b1, b2 = betas
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        if eps <= 0:
            raise ValueError(f"eps must be > 0, got {eps}")
        _check_compensation(compensation, delay)
        super().__init__(params, dict(lr=lr, betas=(b1, b2), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable, fused=fused, compensation=compensation,
                                      delay=delay))

    def _validate(self, group: dict) -> None:
        super()._validate(group)
        _check_compensation(group.get("compensation"), group.get("delay", 0))
        if group.get("compensation") is not None and (group.get("amsgrad") or group.get("maximize")):
            raise ValueError("AdamW: compensation does not combine with amsgrad or maximize")

    def _update(self, g, p, st):
        if g["compensation"] is not None and g["delay"] > 0:   # at delay 0 SC and LWP change nothing
            self._update_compensated(g, p, st)
            return
        grad = scale(p.grad, -1.0) if g.get("maximize") else p.grad
        adam = _composed_adam if g.get("amsgrad") else _fused_adam
        adam(g, p, st, grad, float(g["weight_decay"]), self._count(st))

    def _update_compensated(self, g, p, st):
        """AdamW with delay compensation, one fused task per tile (kernels.def adamw_comp):
        m_t = b1 m + (1-b1) g, v_t = b2 v + (1-b2) g^2; with SC the first moment applied is
        a m_t + b (1-b1) g (a, b of spike_coefficients(b1, D)); u = lr ((first / bc1) /
        (sqrt(v / bc2) + eps) + wd w); w -= u, and u is kept for LWP (w_hat = w - D u)."""
        if "exp_avg" not in st:
            st["exp_avg"] = _state_tensor(p)
            st["exp_avg_sq"] = _state_tensor(p)
        if "last_update" not in st:
            st["last_update"] = _state_tensor(p)
        b1, b2 = g["betas"]
        t = self._count(st)
        a, b = spike_coefficients(b1, g["delay"]) if g["compensation"] in ("sc", "sc+lwp") else (1.0, 0.0)
        run_map("adamw_comp", p.grad, p, st["exp_avg"], st["exp_avg_sq"], st["last_update"], lr=float(g["lr"]),
                beta1=float(b1), beta2=float(b2), eps=float(g["eps"]), weight_decay=float(g["weight_decay"]),
                bc1=1.0 - b1 ** t, bc2=1.0 - b2 ** t, sc_a=float(a), sc_b=float(b))

    def _predicted(self, g, p, st):
        from ..ops.basic import copy
        if "last_update" not in st:
            return copy(p)
        w = copy(p)
        axpy_(w, st["last_update"], alpha=-float(g["delay"]))
        return w


class Adam(Optimizer):
    """torch.optim.Adam: weight decay as L2 (``weight_decay * p`` added to the gradient, not
    AdamW's decoupled decay), bias correction, ``maximize``; the same fused task per tile
    as AdamW (with no decoupled decay); ``amsgrad`` in tensor ops (``_composed_adam``).
    ``foreach``/``capturable``/``differentiable``/``fused`` are accepted and change nothing
    (one fused task per tile is what tiletrain runs)."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 amsgrad: bool = False, *, foreach=None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused=None):
        b1, b2 = betas
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        if eps <= 0:
            raise ValueError(f"eps must be > 0, got {eps}")
        super().__init__(params, dict(lr=lr, betas=(b1, b2), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                                      foreach=foreach, maximize=maximize, capturable=capturable,
                                      differentiable=differentiable, fused=fused))

    def _update(self, g, p, st):
        grad, wd = p.grad, float(g["weight_decay"])
        if g["maximize"] or wd:
            grad = scale(grad, -1.0) if g["maximize"] else copy(grad)
            if wd:
                axpy_(grad, p, alpha=wd)   # L2: the decay enters the moments
        (_composed_adam if g.get("amsgrad") else _fused_adam)(g, p, st, grad, 0.0, self._count(st))


class SGD(_Compensated, Optimizer):
    """SGD with PyTorch's semantics (momentum, dampening, Nesterov, weight decay).
    ``compensation``/``delay``: the delay compensation of pipelined backpropagation
    (Kosson et al. 2020; needs momentum, not Nesterov): with v the momentum buffer,
      SC   v_{t+1} = m v_t + (1 - dampening) g_t,  w_{t+1} = w_t - lr (a v_{t+1} + b (1 - dampening) g_t),
           a = m^D, b = (1 - m^D) / (1 - m)
      LWP  the forward runs with w_hat = w_t - lr D v_t (``predict()``)."""

    counts_steps = False   # torch's SGD keeps no step count

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, compensation=None, delay: int = 0):
        if momentum < 0:
            raise ValueError(f"momentum must be >= 0, got {momentum}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("nesterov needs momentum > 0 and dampening = 0")
        _check_compensation(compensation, delay)
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, compensation=compensation, delay=delay))

    def _validate(self, group: dict) -> None:
        super()._validate(group)
        comp = group.get("compensation")
        _check_compensation(comp, group.get("delay", 0))
        if comp is not None and (group["momentum"] <= 0 or group["nesterov"] or group["momentum"] >= 1):
            raise ValueError(f"compensation={comp!r} needs 0 < momentum < 1 and nesterov=False (SC and LWP are "
                             f"defined on the momentum), got momentum={group['momentum']}, "
                             f"nesterov={group['nesterov']}")

    def _predicted(self, g, p, st):
        from ..ops.basic import copy
        w = copy(p)
        if "momentum_buffer" in st:
            axpy_(w, st["momentum_buffer"], alpha=-float(g["lr"]) * g["delay"])
        return w

    def _update(self, g, p, st):
        if g["compensation"] in ("sc", "sc+lwp") and g["delay"] > 0:
            grad = p.grad
            if g["weight_decay"]:
                from ..ops.elementwise import add
                from ..ops.basic import scale
                grad = add(grad, scale(p, float(g["weight_decay"])))
            a, b = spike_coefficients(float(g["momentum"]), g["delay"])
            first = "momentum_buffer" not in st
            if first:
                st["momentum_buffer"] = _state_tensor(p)
            # v = m v + (1 - d) g; w -= lr a v (the kernel), then w -= lr b (1 - d) g
            run_map("sgd_momentum", grad, p, st["momentum_buffer"], first=int(first), nesterov=0,
                    lr=float(g["lr"]) * a, momentum=float(g["momentum"]), dampening=float(g["dampening"]),
                    weight_decay=0.0)
            axpy_(p, grad, alpha=-float(g["lr"]) * b * (1.0 - float(g["dampening"])))
            return
        if g["momentum"] == 0:
            run_map("sgd", p.grad, p, lr=float(g["lr"]), weight_decay=float(g["weight_decay"]))
            return
        first = "momentum_buffer" not in st
        if first:
            st["momentum_buffer"] = _state_tensor(p)  # overwritten by the first update (first=1)
        run_map("sgd_momentum", p.grad, p, st["momentum_buffer"], first=int(first),
                nesterov=int(bool(g["nesterov"])), lr=float(g["lr"]), momentum=float(g["momentum"]),
                dampening=float(g["dampening"]), weight_decay=float(g["weight_decay"]))


def _non_negative(**values) -> None:
    for name, v in values.items():
        if v < 0:
            raise ValueError(f"Invalid {name} value: {v}")


class _Elementwise(Optimizer):
    """Optimizers written with tensor ops (a few tasks per tile per step; torch's single-tensor
    formulas, in torch's order of operations).  ``maximize`` flips the gradient."""

    def _grad(self, g, p):
        from ..ops.elementwise import add, neg
        grad = neg(p.grad) if g.get("maximize") else p.grad
        return add(grad, p, alpha=g["weight_decay"]) if g["weight_decay"] else grad

    @staticmethod
    def _write(p, value):
        from ..ops.index import assign_
        assign_(p, value)


class RMSprop(_Elementwise):
    """torch.optim.RMSprop: square_avg = alpha sa + (1 - alpha) g^2, avg = sqrt(sa) + eps
    (centered: sqrt(sa - grad_avg^2) + eps), p -= lr g / avg (momentum: buf = m buf + g / avg,
    p -= lr buf)."""

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
                 momentum: float = 0.0, centered: bool = False, capturable: bool = False, foreach=None,
                 maximize: bool = False, differentiable: bool = False):
        _non_negative(epsilon=eps, momentum=momentum, alpha=alpha)
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                                      centered=centered, capturable=capturable, foreach=foreach, maximize=maximize,
                                      differentiable=differentiable))

    def _update(self, g, p, st):
        from ..ops.elementwise import add, div, mul, sqrt, sub
        grad, alpha, lr = self._grad(g, p), float(g["alpha"]), float(g["lr"])
        sa = st.get("square_avg")
        sa = mul(mul(grad, grad), 1 - alpha) if sa is None else add(mul(sa, alpha), mul(grad, grad), alpha=1 - alpha)
        st["square_avg"] = sa
        if g["centered"]:
            ga = st.get("grad_avg")
            ga = mul(grad, 1 - alpha) if ga is None else add(ga, mul(sub(grad, ga), 1 - alpha))
            st["grad_avg"] = ga
            avg = add(sqrt(add(sa, mul(ga, ga), alpha=-1)), float(g["eps"]))
        else:
            avg = add(sqrt(sa), float(g["eps"]))
        if g["momentum"] > 0:
            buf = st.get("momentum_buffer")
            buf = div(grad, avg) if buf is None else add(mul(buf, float(g["momentum"])), div(grad, avg))
            st["momentum_buffer"] = buf
            self._write(p, add(p, buf, alpha=-lr))
        else:
            self._write(p, add(p, div(grad, avg), alpha=-lr))


class Adagrad(_Elementwise):
    """torch.optim.Adagrad: sum += g^2, p -= clr g / (sqrt(sum) + eps), clr = lr / (1 + (step - 1)
    lr_decay)."""

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10, foreach=None, *, maximize: bool = False,
                 differentiable: bool = False, fused=None):
        _non_negative(lr_decay=lr_decay, initial_accumulator_value=initial_accumulator_value, epsilon=eps)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, eps=eps,
                                      initial_accumulator_value=initial_accumulator_value, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable, fused=fused))

    def _update(self, g, p, st):
        from ..ops.creation import full_like
        from ..ops.elementwise import add, div, mul, sqrt
        grad = self._grad(g, p)
        clr = float(g["lr"]) / (1 + (self._count(st) - 1) * float(g["lr_decay"]))
        acc = st.get("sum")
        if acc is None:
            acc = full_like(p, float(g["initial_accumulator_value"]))
        acc = add(acc, mul(grad, grad))
        st["sum"] = acc
        self._write(p, add(p, div(grad, add(sqrt(acc), float(g["eps"]))), alpha=-clr))


def _adam_moments(g: dict, st: dict, grad):
    """Adam's moments in torch's order: m = lerp(m, g, 1 - b1), v = b2 v + (1 - b2) g^2 (kept in
    ``st``; made on the first step)."""
    from ..ops.elementwise import add, mul
    b1, b2 = (float(b) for b in g["betas"])
    m, v = st.get("exp_avg"), st.get("exp_avg_sq")
    m = mul(grad, 1 - b1) if m is None else _lerp(m, grad, 1 - b1)
    v = mul(mul(grad, grad), 1 - b2) if v is None else add(mul(v, b2), mul(grad, grad), alpha=1 - b2)
    st["exp_avg"], st["exp_avg_sq"] = m, v
    return m, v


def _lerp(a, b, w: float):
    """a + w (b - a), as torch's lerp for w < 0.5 (the moment updates' weights)."""
    from ..ops.elementwise import add, sub
    return add(a, sub(b, a), alpha=w)


class _AdamFamily(_Elementwise):
    """Shared argument checks and the decoupled (AdamW-style) weight decay of NAdam and RAdam."""

    def __init__(self, params, defaults: dict):
        b1, b2 = defaults["betas"]
        _non_negative(learning_rate=defaults["lr"], epsilon=defaults["eps"], weight_decay=defaults["weight_decay"])
        if not 0.0 <= b1 < 1.0 or not 0.0 <= b2 < 1.0:
            raise ValueError(f"Invalid beta parameter: {(b1, b2)}")
        super().__init__(params, defaults)

    def _grad_decayed(self, g, p):
        """The gradient, with decoupled weight decay applied to p first when asked."""
        from ..ops.elementwise import mul
        if g.get("decoupled_weight_decay") and g["weight_decay"]:
            self._write(p, mul(p, 1 - float(g["lr"]) * float(g["weight_decay"])))
            return self._grad(dict(g, weight_decay=0.0), p)
        return self._grad(g, p)



class Adamax(_AdamFamily):
    """torch.optim.Adamax: m = lerp(m, g, 1 - b1), u = max(b2 u, |g| + eps),
    p -= lr / (1 - b1^t) m / u."""

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 foreach=None, *, maximize: bool = False, differentiable: bool = False, capturable: bool = False):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable, capturable=capturable))

    def _update(self, g, p, st):
        from ..ops.elementwise import abs as _abs, add, div, maximum, mul
        grad = self._grad(g, p)
        b1, b2 = (float(b) for b in g["betas"])
        m = st.get("exp_avg")
        m = mul(grad, 1 - b1) if m is None else _lerp(m, grad, 1 - b1)
        u = st.get("exp_inf")
        bound = add(_abs(grad), float(g["eps"]))
        u = bound if u is None else maximum(mul(u, b2), bound)
        st["exp_avg"], st["exp_inf"] = m, u
        clr = float(g["lr"]) / (1 - b1 ** self._count(st))
        self._write(p, add(p, div(m, u), alpha=-clr))


class NAdam(_AdamFamily):
    """torch.optim.NAdam (Nesterov momentum in Adam, with momentum_decay's schedule of mu)."""

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 momentum_decay: float = 4e-3, decoupled_weight_decay: bool = False, *, foreach=None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False):
        _non_negative(momentum_decay=momentum_decay)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
                                      foreach=foreach, maximize=maximize, capturable=capturable,
                                      differentiable=differentiable))

    def _update(self, g, p, st):
        from ..ops.elementwise import add, div, mul, sqrt
        grad = self._grad_decayed(g, p)
        t, lr, (b1, b2), md = self._count(st), float(g["lr"]), (float(b) for b in g["betas"]), float(g["momentum_decay"])
        mu = b1 * (1.0 - 0.5 * 0.96 ** (t * md))
        mu_next = b1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * md))
        # torch keeps the product in a 0-d tensor of its scalar dtype: float32 unless the default
        # dtype is float64 (then each product rounds to float32, mu first)
        scalar = _scalar_dtype().type
        st["mu_product"] = float(scalar(st.get("mu_product", 1.0)) * scalar(mu))
        m, v = _adam_moments(g, st, grad)
        denom = add(sqrt(div(v, 1 - b2 ** t)), float(g["eps"]))
        p1 = add(p, div(grad, denom), alpha=-lr * (1.0 - mu) / (1.0 - st["mu_product"]))
        self._write(p, add(p1, div(m, denom), alpha=-lr * mu_next / (1.0 - st["mu_product"] * mu_next)))


class RAdam(_AdamFamily):
    """torch.optim.RAdam: Adam with the variance rectification term (plain momentum SGD while
    the approximated SMA length is at most 5)."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 decoupled_weight_decay: bool = False, *, foreach=None, maximize: bool = False,
                 capturable: bool = False, differentiable: bool = False):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay, foreach=foreach,
                                      maximize=maximize, capturable=capturable, differentiable=differentiable))

    def _update(self, g, p, st):
        from ..ops.elementwise import add, div, mul, sqrt
        grad = self._grad_decayed(g, p)
        t, lr, (b1, b2) = self._count(st), float(g["lr"]), (float(b) for b in g["betas"])
        m, v = _adam_moments(g, st, grad)
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        m_hat = div(m, bc1)
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * t * (b2 ** t) / bc2
        if rho_t > 5.0:
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            adaptive = div(math.sqrt(bc2), add(sqrt(v), float(g["eps"])))
            self._write(p, add(p, mul(mul(mul(m_hat, lr), adaptive), rect), alpha=-1.0))
        else:
            self._write(p, add(p, mul(m_hat, lr), alpha=-1.0))


class Adadelta(_Elementwise):
    """torch.optim.Adadelta: sa = rho sa + (1 - rho) g^2, delta = sqrt(acc + eps) / sqrt(sa + eps) g,
    acc = rho acc + (1 - rho) delta^2, p -= lr delta."""

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0.0,
                 foreach=None, *, capturable: bool = False, maximize: bool = False, differentiable: bool = False):
        _non_negative(learning_rate=lr, epsilon=eps, weight_decay=weight_decay)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, foreach=foreach,
                                      capturable=capturable, maximize=maximize, differentiable=differentiable))

    def _update(self, g, p, st):
        from ..ops.elementwise import add, div, mul, sqrt
        grad, rho, eps = self._grad(g, p), float(g["rho"]), float(g["eps"])
        sa, acc = st.get("square_avg"), st.get("acc_delta")
        sa = mul(mul(grad, grad), 1 - rho) if sa is None else add(mul(sa, rho), mul(grad, grad), alpha=1 - rho)
        std = sqrt(add(sa, eps))
        delta = mul(div(sqrt(add(acc, eps)) if acc is not None else math.sqrt(eps), std), grad)
        acc = mul(mul(delta, delta), 1 - rho) if acc is None else add(mul(acc, rho), mul(delta, delta), alpha=1 - rho)
        st["square_avg"], st["acc_delta"] = sa, acc
        self._write(p, add(p, delta, alpha=-float(g["lr"])))


class LBFGS(Optimizer):
    """torch.optim.LBFGS(params, lr=1, max_iter=20, max_eval=None (max_iter * 5 // 4),
    tolerance_grad=1e-7, tolerance_change=1e-9, history_size=100, line_search_fn=None or
    "strong_wolfe"): torch's algorithm -- the two-loop recursion over the last history_size
    (s, y) pairs, a first step of min(1, 1/|g|_1) * lr, a fixed step or the strong-Wolfe line
    search, torch's stopping tests.  step(closure) needs the closure.  The flat direction and
    history live on the host as NumPy vectors (each step reads the loss and gradients)."""

    def __init__(self, params, lr: float = 1, max_iter: int = 20, max_eval=None, tolerance_grad: float = 1e-7,
                 tolerance_change: float = 1e-9, history_size: int = 100, line_search_fn=None):
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        if line_search_fn not in (None, "strong_wolfe"):
            raise RuntimeError("only 'strong_wolfe' is supported")
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval, tolerance_grad=tolerance_grad,
                                      tolerance_change=tolerance_change, history_size=history_size,
                                      line_search_fn=line_search_fn))
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._plist = self.param_groups[0]["params"]

    def _flat_grad(self) -> np.ndarray:
        return np.concatenate([np.zeros(p.numel()) if p.grad is None else p.grad.numpy(force=True).reshape(-1)
                               for p in self._plist]).astype(self._plist[0].dtype, copy=False)

    def _set_flat(self, flat: np.ndarray) -> None:
        offset = 0
        for p in self._plist:
            n = p.numel()
            assign_(p, from_numpy(np.ascontiguousarray(flat[offset:offset + n].reshape(p.shape), dtype=p.dtype)))
            offset += n

    def _evaluate(self, closure) -> tuple[float, np.ndarray]:
        with enable_grad():
            loss = float(closure())
        return loss, self._flat_grad()

    def _direction(self, st: dict, g: np.ndarray, history: int) -> np.ndarray:
        """The new (s, y) pair into the history if it has curvature, then the two-loop recursion."""
        if st["n_iter"] == 1:
            st.update(old_dirs=[], old_stps=[], ro=[], H_diag=1.0)
            return -g
        y, s = g - st["prev_flat_grad"], st["d"] * st["t"]
        ys = float(y @ s)
        if ys > 1e-10:
            if len(st["old_dirs"]) == history:
                for k in ("old_dirs", "old_stps", "ro"):
                    st[k].pop(0)
            st["old_dirs"].append(y)
            st["old_stps"].append(s)
            st["ro"].append(1.0 / ys)
            st["H_diag"] = ys / float(y @ y)
        dirs, stps, ro = st["old_dirs"], st["old_stps"], st["ro"]
        al = [0.0] * len(dirs)
        q = -g
        for i in range(len(dirs) - 1, -1, -1):
            al[i] = float(stps[i] @ q) * ro[i]
            q = q - al[i] * dirs[i]
        r = q * st["H_diag"]
        for i in range(len(dirs)):
            r = r + (al[i] - float(dirs[i] @ r) * ro[i]) * stps[i]
        return r

    @tag(phase="opt")
    def step(self, closure=None):
        """Up to max_iter L-BFGS iterations, calling the closure for the loss and gradients;
        returns the loss of the first call."""
        if closure is None:
            raise RuntimeError("LBFGS.step needs a closure that recomputes the loss (torch.optim.LBFGS)")
        group = self.param_groups[0]
        st = self.state.setdefault(id(self._plist[0]), {"func_evals": 0, "n_iter": 0})
        with enable_grad():
            orig_loss = closure()
        loss, g = float(orig_loss), self._flat_grad()
        st["func_evals"] += 1
        if np.abs(g).max() <= group["tolerance_grad"]:
            return orig_loss
        with no_grad():
            self._iterate(closure, group, st, loss, g)
        return orig_loss

    def _iterate(self, closure, group: dict, st: dict, loss: float, g: np.ndarray) -> None:
        lr, tol_change = float(group["lr"]), group["tolerance_change"]
        evals = 1
        for n_iter in range(1, group["max_iter"] + 1):
            st["n_iter"] += 1
            st["d"] = d = self._direction(st, g, group["history_size"])
            st["prev_flat_grad"], prev_loss = g.copy(), loss
            st["t"] = t = min(1.0, 1.0 / float(np.abs(g).sum())) * lr if st["n_iter"] == 1 else lr
            gtd = float(g @ d)
            if gtd > -tol_change:
                break
            x = np.concatenate([p.numpy(force=True).reshape(-1) for p in self._plist])
            if group["line_search_fn"] is not None:
                def along(step):
                    self._set_flat(x + step * d)
                    out = self._evaluate(closure)
                    self._set_flat(x)
                    return out
                loss, g, t, ls_evals = strong_wolfe(along, t, d, loss, g, gtd)
                st["t"] = t
                self._set_flat(x + t * d)
            else:
                self._set_flat(x + t * d)
                ls_evals = 0
                if n_iter != group["max_iter"]:
                    loss, g = self._evaluate(closure)
                    ls_evals = 1
            evals += ls_evals
            st["func_evals"] += ls_evals
            if n_iter == group["max_iter"] or evals >= group["max_eval"] or np.abs(g).max() <= group["tolerance_grad"]:
                break
            if np.abs(d * t).max() <= tol_change or abs(loss - prev_loss) < tol_change:
                break
        st["prev_loss"] = loss

    def state_dict(self, copy: bool = False) -> dict:
        """torch's layout: the state (counters, direction, step, history) under parameter 0, its
        vectors as tensors (copies; copy=True: NumPy copies)."""
        groups = [{**{k: v for k, v in self.param_groups[0].items() if k != "params"},
                   "params": list(range(len(self._plist)))}]
        st = self.state.get(id(self._plist[0]))

        def out(a):
            if not isinstance(a, np.ndarray) or not a.ndim:
                return a
            return np.copy(a) if copy else from_numpy(np.array(a, order="C"))
        state = {} if st is None else {0: {k: ([out(a) for a in v] if isinstance(v, list) else out(v))
                                           for k, v in st.items()}}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, sd: dict) -> None:
        super().load_state_dict({"param_groups": sd.get("param_groups"), "state": {}})
        st = dict(sd.get("state", {})).get(0)
        if st is not None:
            self.state[id(self._plist[0])] = {
                k: ([np.asarray(a) if np.ndim(a) else float(a) for a in v] if isinstance(v, (list, tuple)) else
                    np.asarray(v) if k in ("d", "prev_flat_grad") else v) for k, v in st.items()}


@no_grad()
def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach=None) -> Tensor:
    """torch.nn.utils.clip_grad_norm_: scale every gradient by min(1, max_norm / (total_norm +
    1e-6)), all in tile tasks (no waiting); returns the total norm as a 0-d tensor (0 when
    no parameter has a gradient).  norm_type: any p, inf or -inf (the norm of the
    gradients' norms, as torch); error_if_nonfinite=True reads the norm first (it waits) and
    raises torch's RuntimeError on a NaN or infinite norm, leaving the gradients alone."""
    if max_norm <= 0:
        raise ValueError(f"max_norm must be > 0, got {max_norm}")
    norm_type = float(norm_type)
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    grads = [p.grad for p in params if isinstance(p, Tensor) and p.grad is not None]
    if not grads:
        return zeros(())
    dtypes = {g.dtype for g in grads}
    if len(dtypes) != 1:
        raise TypeError(f"clip_grad_norm_: gradients have several dtypes {sorted(map(str, dtypes))}")
    if any(g.ndim == 0 for g in grads):
        raise ValueError("clip_grad_norm_: 0-d parameters are not supported")
    if norm_type != 2.0 or error_if_nonfinite:
        return _clip_by_norm(grads, float(max_norm), norm_type, error_if_nonfinite)
    sumsq = zeros((), dtype=grads[0].dtype)
    for g in grads:  # one accumulating task per gradient tile into the shared 0-d sum
        run_span("sumsq_acc", 0, g.ndim, [g], [sumsq], reduce=False)
    for g in grads:
        run_span("clip_scale", 0, g.ndim, [g], [sumsq], reduce=False, max_norm=float(max_norm))
    norm = Tensor(TensorTraits(()), grads[0].dtype)
    run_map("sqrt_scalar", sumsq, norm)
    return norm


def _clip_by_norm(grads: list, max_norm: float, norm_type: float, error_if_nonfinite: bool) -> Tensor:
    """clip_grad_norm_ for any norm, composed of ops: the norm of the gradients' norms, then
    every gradient times min(1, max_norm / (norm + 1e-6))."""
    total = norm(stack([norm(g, norm_type) for g in grads]), norm_type)
    if error_if_nonfinite and not math.isfinite(float(total)):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so "
                           "it cannot be clipped. To disable this error and scale the gradients by the non-finite "
                           "norm anyway, set `error_if_nonfinite=False`")
    coef = clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        assign_(g, g * coef)
    return total


def cosine_with_warmup(step: int, *, lr: float, warmup: int, total: int, min_lr: float = 0.0) -> float:
    """Linear warm-up over `warmup` steps, then cosine decay to `min_lr` at `total`."""
    if step < warmup:
        return lr * (step + 1) / warmup
    if step >= total:
        return min_lr
    progress = (step - warmup) / max(1, total - warmup)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


from . import lr_scheduler  # noqa: E402  (torch.optim.lr_scheduler)
