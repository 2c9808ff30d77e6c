"""torch's random numbers: after the same seed, tiletrain's random functions, initialisers,
layers, samplers and distributions give torch's values (tiletrain/tensors/rng.py).  float64
to the last bit or 1e-15 (NumPy's log/sin/cos/log1p can round differently from the C
library's by one unit in the last place); float32 normals to 1e-6 (torch evaluates them with
float32 vector maths)."""
import numpy as np
import pytest
import torch

import tiletrain as tt
from tiletrain.tensors.rng import Generator, NormalStream


def close(a, b, dtype):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    if a.dtype.kind in "iub":
        np.testing.assert_array_equal(a, b)
    else:
        tol = 1e-15 if a.dtype == np.float64 else 1e-6
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@pytest.fixture
def seeded():
    """Both default generators seeded alike; tiletrain's put back to its import-time seed."""
    def seed(s):
        tt.manual_seed(s)
        torch.manual_seed(s)
    yield seed
    tt.manual_seed(0)


@pytest.mark.parametrize("seed", [0, 1234, 2**40 + 7, -5])
def test_raw_stream_is_torchs_mersenne_twister(seed):
    g, t = Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    assert g.initial_seed() == t.initial_seed()
    np.testing.assert_array_equal(g.integers(50, 0, 2**27), torch.randint(0, 2**27, (50,), generator=t).numpy())
    np.testing.assert_array_equal(g.integers(20, -7, 2**40), torch.randint(-7, 2**40, (20,), generator=t).numpy())
    assert g.full_range() == torch.empty((), dtype=torch.int64).random_(generator=t).item()
    assert Generator().initial_seed() == torch.Generator().initial_seed()  # a new generator's seed


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [1, 3, 15, 16, 17, 33, 1000, 1037])
def test_normal_stream_in_any_blocks_is_torchs_normal(dtype, n):
    """Fewer than 16: float64 Box-Muller pairs with the cached half; 16 and more: torch's
    blocks of 16 with the last partial block redrawn -- taken whole or in pieces."""
    for blocks in ([n], [1] * n, [5] * (n // 5) + [n % 5], [17] * (n // 17) + [n % 17]):
        g, t = Generator().manual_seed(n), torch.Generator().manual_seed(n)
        s = NormalStream(g, n, dtype, 0.0, 2.0)
        ours = np.concatenate([s.take(b) for b in blocks if b])
        close(ours, torch.empty(n, dtype=getattr(torch, dtype)).normal_(0.0, 2.0, generator=t).numpy(), dtype)
        close(g.uniform(3, dtype), torch.rand(3, dtype=getattr(torch, dtype), generator=t).numpy(), dtype)


def test_the_cached_normal_carries_across_calls(seeded):
    seeded(3)
    for n in (3, 3, 5, 1, 20, 2):
        close(tt.randn(n, dtype=tt.float64).numpy(), torch.randn(n, dtype=torch.float64).numpy(), "float64")


@pytest.mark.parametrize("lo,hi", [(0.0, 1.0), (-1.0, 2.0), (-0.3, 0.5), (-1e-3, 5.0)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_uniform_is_torchs_bit_for_bit(lo, hi, dtype):
    """x * (to - from) + from rounded once, as torch's fused multiply-add."""
    g, t = Generator().manual_seed(4), torch.Generator().manual_seed(4)
    np.testing.assert_array_equal(g.uniform(20000, dtype, lo, hi),
                                  torch.empty(20000, dtype=getattr(torch, dtype)).uniform_(lo, hi, generator=t).numpy())


def test_creation_functions_and_in_place_draws(seeded):
    seeded(7)
    pairs = [
        (tt.rand(5, 7, tiles=3), torch.rand(5, 7)),
        (tt.randn(4, 9, dtype=tt.float64, tiles=2), torch.randn(4, 9, dtype=torch.float64)),
        (tt.randn(40, 3, tiles=(7, 2)), torch.randn(40, 3)),
        (tt.randint(2, 9, (6, 5)), torch.randint(2, 9, (6, 5))),
        (tt.randint(5, (3,)), torch.randint(5, (3,))),
        (tt.randperm(20), torch.randperm(20)),
        (tt.rand_like(tt.zeros(3, 4, dtype=tt.float64)), torch.rand_like(torch.zeros(3, 4, dtype=torch.float64))),
        (tt.randn_like(tt.zeros(17)), torch.randn_like(torch.zeros(17))),
        (tt.empty(4, 6, dtype=tt.float64).uniform_(-1, 2), torch.empty(4, 6, dtype=torch.float64).uniform_(-1, 2)),
        (tt.empty(30).normal_(1.0, 0.5), torch.empty(30).normal_(1.0, 0.5)),
        (tt.empty(40, dtype=tt.float64).exponential_(2.0), torch.empty(40, dtype=torch.float64).exponential_(2.0)),
        (tt.empty(40).bernoulli_(0.3), torch.empty(40).bernoulli_(0.3)),
        (tt.empty(9, dtype=tt.int64).random_(3, 50), torch.empty(9, dtype=torch.int64).random_(3, 50)),
        (tt.empty(9, dtype=tt.int64).random_(7), torch.empty(9, dtype=torch.int64).random_(7)),
    ]
    p = np.random.default_rng(1).random((3, 10))
    pairs.append((tt.bernoulli(tt.tensor(p)), torch.bernoulli(torch.tensor(p))))
    pairs.append((tt.rand(2, dtype=tt.float64), torch.rand(2, dtype=torch.float64)))  # the streams still agree
    for i, (a, b) in enumerate(pairs):
        close(a.numpy(), b.numpy(), str(a.dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_multinomial_is_torchs(seeded, dtype):
    seeded(2)
    p = np.random.default_rng(1).random((3, 10)).astype(dtype)
    p[1, 3] = 0.0
    for n, rep in ((1, False), (4, False), (6, True), (1, True), (25, True)):
        a = tt.multinomial(tt.tensor(p), n, replacement=rep).numpy()
        b = torch.multinomial(torch.tensor(p), n, replacement=rep).numpy()
        np.testing.assert_array_equal(a, b, err_msg=f"num_samples={n}, replacement={rep}")
    g, t = tt.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    np.testing.assert_array_equal(tt.multinomial(tt.tensor(p[0]), 3, generator=g).numpy(),
                                  torch.multinomial(torch.tensor(p[0]), 3, generator=t).numpy())


INITS = [("uniform_", dict(a=-0.3, b=0.5)), ("normal_", dict(mean=0.0, std=0.02)), ("normal_", dict(mean=1.0, std=2.0)),
         ("xavier_uniform_", {}), ("xavier_normal_", dict(gain=2.0)), ("kaiming_uniform_", dict(a=5 ** 0.5)),
         ("kaiming_normal_", dict(mode="fan_out", nonlinearity="relu")), ("trunc_normal_", dict(std=0.02)),
         ("trunc_normal_", dict(mean=0.0, std=1.0, a=2.0, b=3.0)), ("orthogonal_", {}), ("orthogonal_", dict(gain=0.5))]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,kw", INITS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(INITS)])
def test_nn_init_is_torchs(seeded, dtype, name, kw):
    for shape in ((17, 9), (6, 20)):
        seeded(3)
        a, b = tt.empty(*shape, dtype=getattr(tt, dtype)), torch.empty(*shape, dtype=getattr(torch, dtype))
        getattr(tt.nn.init, name)(a, **kw)
        getattr(torch.nn.init, name)(b, **kw)
        tol = 1e-5 if name == "orthogonal_" and dtype == "float32" else None  # a QR of its own
        if tol:
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=tol, atol=tol)
        else:
            close(a.numpy(), b.numpy(), dtype)


LAYERS = {
    "Linear": lambda M, d: M.nn.Linear(7, 5, dtype=d),
    "MLP": lambda M, d: M.nn.Sequential(M.nn.Linear(7, 5, dtype=d), M.nn.ReLU(), M.nn.Linear(5, 3, bias=False, dtype=d)),
    "Conv2d": lambda M, d: M.nn.Conv2d(3, 4, 3, dtype=d),
    "Conv1d-groups": lambda M, d: M.nn.Conv1d(3, 6, 5, groups=3, dtype=d),
    "ConvTranspose2d": lambda M, d: M.nn.ConvTranspose2d(4, 2, 3, dtype=d),
    "Embedding": lambda M, d: M.nn.Embedding(11, 6, padding_idx=0, dtype=d),
    "Embedding-small": lambda M, d: M.nn.Embedding(3, 4, dtype=d),
    "EmbeddingBag": lambda M, d: M.nn.EmbeddingBag(10, 3, dtype=d),
    "Bilinear": lambda M, d: M.nn.Bilinear(3, 4, 2, dtype=d),
    "LSTM": lambda M, d: M.nn.LSTM(4, 5, num_layers=2, bidirectional=True, dtype=d),
    "GRUCell": lambda M, d: M.nn.GRUCell(4, 5, dtype=d),
    "MultiheadAttention": lambda M, d: M.nn.MultiheadAttention(8, 2, dtype=d),
    "TransformerEncoder": lambda M, d: M.nn.TransformerEncoder(M.nn.TransformerEncoderLayer(8, 2, 16, dtype=d), 2),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layer", list(LAYERS))
def test_default_initialisation_is_torchs(seeded, dtype, layer):
    """torch.manual_seed(s); Module(...) gives torch's parameters, in torch's draw order."""
    seeded(5)
    ours = {k: np.asarray(v) for k, v in LAYERS[layer](tt, getattr(tt, dtype)).state_dict().items()}
    ref = {k: v.detach().numpy() for k, v in LAYERS[layer](torch, getattr(torch, dtype)).state_dict().items()}
    assert list(ours) == list(ref)
    for k in ours:
        close(ours[k], ref[k], dtype)
    close(tt.rand(3, dtype=tt.float64).numpy(), torch.rand(3, dtype=torch.float64).numpy(), "float64")


def _epochs(M, generator: bool):
    M.manual_seed(5)
    ds = M.utils.data.TensorDataset(M.arange(23))
    g = M.Generator().manual_seed(9) if generator else None
    loader = M.utils.data.DataLoader(ds, batch_size=4, shuffle=True, generator=g)
    out = []
    for _ in range(3):
        out += [b.tolist() for (b,) in loader]
        out.append(M.rand(2, dtype=M.float64).tolist())  # the default generator after an epoch
    out.append(list(M.utils.data.RandomSampler(ds, replacement=True, num_samples=40)))
    out.append(list(M.utils.data.RandomSampler(ds, num_samples=30)))
    out.append(list(M.utils.data.SubsetRandomSampler([3, 5, 7, 9])))
    out.append(list(M.utils.data.WeightedRandomSampler([0.1, 0.5, 0.2, 0.9], 7)))
    out.append([list(s) for s in M.utils.data.random_split(range(10), [0.3, 0.7])])
    out.append(M.rand(2, dtype=M.float64).tolist())
    return out


@pytest.mark.parametrize("generator", [False, True])
def test_data_loading_shuffles_as_torch(generator):
    try:
        assert _epochs(tt, generator) == _epochs(torch, generator)
    finally:
        tt.manual_seed(0)


def test_distribution_samples_are_torchs(seeded):
    def draws(M):
        D, T = M.distributions, (lambda a: M.tensor(np.asarray(a, dtype=np.float64)))
        return [D.Normal(T([0.0, 1.0]), T([1.0, 2.0])).sample((3,)), D.Normal(T([0.0]), T([2.0])).rsample((20,)),
                D.Uniform(T([0.0, -1.0]), T([1.0, 3.0])).sample((4,)), D.Bernoulli(probs=T([0.3, 0.8])).sample((5,)),
                D.Categorical(probs=T([0.2, 0.5, 0.3])).sample((6,)), D.Exponential(T([2.0])).sample((5,)),
                D.Laplace(T([0.0]), T([1.0])).sample((5,)), D.Geometric(probs=T([0.3])).sample((5,))]
    seeded(11)
    ours = draws(tt)
    torch.manual_seed(11)
    for a, b in zip(ours, draws(torch)):
        close(a.numpy(), b.numpy(), str(a.dtype))


def test_generator_state_and_bad_input():
    g = tt.Generator().manual_seed(3)
    tt.randn(5, generator=g)  # leaves a cached normal: part of the state
    state = g.get_state()
    a = tt.randn(7, dtype=tt.float64, generator=g).numpy()
    np.testing.assert_array_equal(tt.randn(7, dtype=tt.float64, generator=g.set_state(state)).numpy(), a)
    with pytest.raises(TypeError, match="manual_seed expected a long"):
        g.manual_seed(1.5)
    with pytest.raises(ValueError, match="not a state from Generator.get_state"):
        g.set_state({"key": [1, 2]})
    with pytest.raises(RuntimeError, match="uniform_ expects"):
        tt.empty(3).uniform_(2.0, 1.0)
    with pytest.raises(RuntimeError, match="normal expects std >= 0.0"):
        tt.empty(3).normal_(0.0, -1.0)
    with pytest.raises(TypeError, match="generator must be a tiletrain.Generator"):
        tt.rand(3, generator=torch.Generator())
    s = tt.seed()  # a non-deterministic seed, set and returned
    assert tt.initial_seed() == s
    tt.manual_seed(0)
