"""torch's CPU random numbers: a Mersenne Twister (MT19937) seeded as torch seeds it and
drawn the way torch's CPU kernels draw, so a program seeded with ``manual_seed(s)`` gets
torch's numbers from rand, randn, randint, randperm, normal_, uniform_, exponential_,
bernoulli, multinomial, the samplers of tiletrain.utils.data and the layers' default
initialisation.

The rules (measured against torch; tests/test_torch_rng.py checks each):
- ``random()`` is MT19937's 32-bit output; ``random64()`` two of them, the first the high word.
- uniform on [from, to): float32 takes the low 24 bits of random() times 2^-24, float64 the
  low 53 bits of random64() times 2^-53, then ``x * (to - from) + from`` in that dtype,
  rounded once (torch's kernels are compiled with fused multiply-add; a value equal to ``to``
  becomes ``from``).
- normal, 16 values or more: every uniform is drawn first, then each block of 16 becomes 8
  Box-Muller pairs (u1 = 1 - d[j], u2 = d[j + 8]); a last partial block is replaced by 16
  fresh uniforms written over the last 16 places.  Fewer than 16: one Box-Muller pair per
  two values in float64 (u1, u2 from random64, r = sqrt(-2 log1p(-u2)), the sine half kept
  on the generator for the next value, also across calls).
- integers in [low, high): ``random() % range + low``, random64() from a range of 2^28 up.
- randperm(n): n - 1 swaps, ``i <-> i + random() % (n - i)``.
- exponential: ``-log1p(-u) / lambda`` with u uniform in float64.

float64 results are torch's bit for bit (normals with a mean other than 0: the last bit can
differ, torch rounds v * std + mean once); float32 normals can differ in the last bit (torch
evaluates log/sin/cos in float32 with its vectorised kernels).  Dropout masks are drawn by
tasks from a per-call seed (one random64 of this stream), not by torch's CPU loop."""
from __future__ import annotations

import math
import os
import numbers

import numpy as np

DEFAULT_SEED = 67280421310721  # a new torch.Generator's seed
_M64 = (1 << 64) - 1
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def _mt_key(seed: int) -> np.ndarray:
    """MT19937's initial state for a seed: torch keeps the low 32 bits (init_genrand)."""
    key = np.empty(624, np.uint32)
    x = seed & 0xFFFFFFFF
    key[0] = x
    for j in range(1, 624):
        x = (1812433253 * (x ^ (x >> 30)) + j) & 0xFFFFFFFF
        key[j] = x
    return key


class Generator:
    """torch.Generator for the CPU: ``Generator(device='cpu')``, manual_seed, seed,
    initial_seed, get_state/set_state (a JSON-able dict: checkpoints keep it)."""

    def __init__(self, device="cpu"):
        if str(getattr(device, "type", device)) not in ("cpu", "cuda"):
            raise RuntimeError(f"Generator: device must be 'cpu', got {device!r}")
        self.device = device
        self.manual_seed(DEFAULT_SEED)

    def manual_seed(self, seed: int) -> "Generator":
        if not isinstance(seed, numbers.Integral) or isinstance(seed, bool):
            raise TypeError(f"manual_seed expected a long, but got {type(seed).__name__}")
        seed = int(seed)
        if not -(1 << 63) <= seed <= _M64:
            raise RuntimeError(f"Overflow when unpacking long: seed {seed} is outside [-2**63, 2**64)")
        self._initial = seed & _M64
        self._bg = np.random.MT19937()
        self._bg.state = {"bit_generator": "MT19937", "state": {"key": _mt_key(self._initial), "pos": 624}}
        self._normal = None  # the cached second value of a float64 Box-Muller pair
        return self

    def seed(self) -> int:
        """A non-deterministic seed, set and returned (torch.Generator.seed)."""
        s = int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        return self._initial

    def get_state(self) -> dict:
        st = self._bg.state["state"]
        return {"seed": self._initial, "key": [int(k) for k in st["key"]], "pos": int(st["pos"]),
                "normal": self._normal}

    def set_state(self, state: dict) -> "Generator":
        try:
            key = np.asarray(state["key"], dtype=np.uint32)
            if key.shape != (624,) or not 0 <= int(state["pos"]) <= 624:
                raise ValueError
            bg = np.random.MT19937()
            bg.state = {"bit_generator": "MT19937", "state": {"key": key, "pos": int(state["pos"])}}
        except (KeyError, TypeError, ValueError):
            raise ValueError("Generator.set_state: not a state from Generator.get_state()") from None
        self._bg, self._initial, self._normal = bg, int(state["seed"]), state.get("normal")
        return self

    # -- raw draws ---------------------------------------------------------------------
    def random(self, n: int) -> np.ndarray:
        """n 32-bit outputs (uint64)."""
        return self._bg.random_raw(int(n)).astype(np.uint64)

    def random64(self, n: int) -> np.ndarray:
        r = self.random(2 * int(n))
        return (r[0::2] << np.uint64(32)) | r[1::2]

    def next_seed(self) -> int:
        """A 63-bit seed for the tasks that draw their own numbers (dropout)."""
        return int(self.random64(1)[0] >> np.uint64(1))

    # -- torch's distributions -----------------------------------------------------------
    def unit(self, n: int, dtype) -> np.ndarray:
        """n uniforms on [0, 1) in dtype (float32: 24 bits of random(); float64: 53 of random64())."""
        if np.dtype(dtype) == F32:
            return (self.random(n) & np.uint64(0xFFFFFF)).astype(np.float32) * np.float32(2.0 ** -24)
        return (self.random64(n) & np.uint64((1 << 53) - 1)).astype(np.float64) * 2.0 ** -53

    def uniform(self, n: int, dtype, low: float = 0.0, high: float = 1.0) -> np.ndarray:
        dt = _float(dtype)
        lo, hi = dt.type(low), dt.type(high)
        x = _fma(self.unit(n, dt), hi - lo, lo)
        x[x == hi] = lo
        return x

    def normal(self, n: int, dtype, mean: float = 0.0, std: float = 1.0) -> np.ndarray:
        return NormalStream(self, n, dtype, mean, std).take(n)

    def integers(self, n: int, low: int, high: int) -> np.ndarray:
        """n int64 in [low, high) (torch's random_(from, to))."""
        rng = int(high) - int(low)
        raw = self.random64(n) if rng >= 1 << 28 else self.random(n)
        return ((raw % np.uint64(rng)).astype(np.int64) + np.int64(low)) if n else np.zeros(0, np.int64)

    def full_range(self) -> int:
        """torch.empty((), dtype=torch.int64).random_(): random64() % 2^63."""
        return int(self.random64(1)[0] & np.uint64((1 << 63) - 1))

    def permutation(self, n: int) -> np.ndarray:
        """torch.randperm(n) (n below 2^32 / 20, torch's small-n rule)."""
        if n >= 0xFFFFFFFF // 20:
            raise NotImplementedError(f"randperm: n = {n} is above tiletrain's torch-compatible range (2**32 / 20)")
        r = np.arange(n, dtype=np.int64)
        z = self.random(max(n - 1, 0)).astype(np.int64) % (n - np.arange(max(n - 1, 0)))
        for i, j in enumerate(z.tolist()):  # sequential swaps: each reads the last ones' result
            r[i], r[i + j] = r[i + j], r[i]
        return r

    def exponential(self, n: int, dtype, lambd: float = 1.0) -> np.ndarray:
        return (-1.0 / lambd * np.log1p(-self.unit(n, F64))).astype(dtype)

    def bernoulli(self, p: np.ndarray) -> np.ndarray:
        """0/1 per element of the probability array p (p's dtype picks 24- or 53-bit uniforms)."""
        p = np.asarray(p)
        dt = F64 if p.dtype == F64 else F32
        return (self.unit(p.size, dt).reshape(p.shape) < p).astype(p.dtype)

    def _box_muller_one(self) -> float:
        if self._normal is not None:
            v, self._normal = self._normal, None
            return v
        u1, u2 = self.unit(2, F64).tolist()
        r = math.sqrt(-2.0 * math.log1p(-u2))
        theta = 2.0 * math.pi * u1
        self._normal = r * math.sin(theta)
        return r * math.cos(theta)


def _fma(a: np.ndarray, b, c) -> np.ndarray:
    """a * b + c rounded once, as torch's compiled kernels compute it (float32 through float64,
    float64 by Dekker's exact product and a compensated sum)."""
    if a.dtype == F32:
        return (a.astype(np.float64) * np.float64(b) + np.float64(c)).astype(np.float32)
    b, c = np.float64(b), np.float64(c)
    p = a * b
    split = 134217729.0  # 2^27 + 1: Veltkamp's splitting of each factor into two halves
    ta, tb = split * a, split * b
    ah = ta - (ta - a)
    bh = tb - (tb - b)
    al, bl = a - ah, b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl  # p + e == a * b exactly
    s = p + c
    v = s - p
    t = (p - (s - v)) + (c - v)  # s + t == p + c exactly
    return s + (t + e)


def _float(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in (F32, F64):
        raise TypeError(f"random floats are float32 or float64, got {dt}")
    return dt


def _fill16(u: np.ndarray, mean: float, std: float) -> np.ndarray:
    """torch's NormalFill16 over whole blocks of 16 uniforms (float32 or float64)."""
    dt = u.dtype.type
    d = u.reshape(-1, 16)
    r = np.sqrt(dt(-2.0) * np.log(dt(1.0) - d[:, :8]))
    theta = dt(2.0 * math.pi) * d[:, 8:]
    out = np.concatenate([r * np.cos(theta), r * np.sin(theta)], axis=1).ravel()
    if mean == 0.0:  # fma(v, std, 0) is one rounded product
        return out if std == 1.0 else out * dt(std)
    wide = np.longdouble if u.dtype == F64 else np.float64  # fma(v, std, mean): one rounding
    return (out.astype(wide) * wide(dt(std)) + wide(dt(mean))).astype(u.dtype)


class NormalStream:
    """torch's normal_ over n values, handed out in order ``take(k)`` at a time, so a tensor
    written block by block gets the values of one whole draw (the generator's draws happen
    in torch's order: every uniform of the tensor, then the 16 of a partial last block)."""

    def __init__(self, gen: Generator, n: int, dtype, mean: float = 0.0, std: float = 1.0):
        self.g, self.n, self.dt, self.mean, self.std = gen, int(n), _float(dtype), float(mean), float(std)
        self.pos = 0                           # values handed out
        self.done = 0                          # positions whose block values are in self.vals
        self.vals = np.zeros(0, self.dt)       # values of positions [self.pos, self.done)
        self.tail = None                       # the last 16 values (n % 16 != 0)
        self.cut = self.n - 16 if self.n % 16 else self.n  # from here on, the tail's values

    def take(self, k: int) -> np.ndarray:
        k = int(k)
        if self.pos + k > self.n:
            raise ValueError(f"NormalStream: {self.pos + k} values asked of {self.n}")
        if self.n < 16:
            out = np.array([self.g._box_muller_one() * self.std + self.mean for _ in range(k)])
            self.pos += k
            return out.astype(self.dt)
        end = self.pos + k
        need = min(end, self.cut)
        if need > self.done:
            upto = -(-need // 16) * 16
            self._blocks(upto)
        if end > self.cut and self.tail is None:
            self._blocks(self.n // 16 * 16)
            self.g.unit(self.n - self.n // 16 * 16, self.dt)  # the partial block's uniforms: drawn, unused
            self.tail = _fill16(self.g.unit(16, self.dt), self.mean, self.std)
        out = np.empty(k, self.dt)
        m = max(0, min(end, self.cut) - self.pos)
        out[:m] = self.vals[:m]
        if m < k:
            out[m:] = self.tail[self.pos + m - self.cut:end - self.cut]
        self.vals = self.vals[m:]
        self.pos = end
        return out

    def _blocks(self, upto: int) -> None:
        if upto > self.done:
            new = _fill16(self.g.unit(upto - self.done, self.dt), self.mean, self.std)
            self.vals = np.concatenate([self.vals, new])
            self.done = upto
