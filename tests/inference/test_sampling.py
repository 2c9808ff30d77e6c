"""Sampling: the top-k / top-p filtering keeps the set transformers' warpers keep (same
probabilities), and the speculative accept/reject rule yields the model's distribution
(chi-square over many seeded draws; fixed seeds, so deterministic) while a naive rule
(keep the draft's tokens) would be detected."""
import numpy as np
import pytest

from tiletrain.inference import pick_next, sampling_probs
from tiletrain.inference.generate import _verify

import torch


def chi2_critical(df: int, z: float = 3.0902) -> float:
    """The 0.999 quantile of chi-square with df degrees of freedom (Wilson-Hilferty, within
    2% for df >= 3, slightly above)."""
    a = 2 / (9 * df)
    return df * (1 - a + z * np.sqrt(a)) ** 3


def chi2(counts: np.ndarray, p: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic of counts against probabilities p, cells with p > 0; degrees of freedom."""
    n, keep = counts.sum(), p > 0
    assert counts[~keep].sum() == 0, "a token of probability 0 was drawn"
    expected = n * p[keep]
    return float(((counts[keep] - expected) ** 2 / expected).sum()), int(keep.sum()) - 1


def test_chi2_critical_values():
    # scipy.stats.chi2.ppf(0.999, df) for df = 5, 10, 35
    for df, want in ((5, 20.515), (10, 29.588), (35, 66.619)):
        assert abs(chi2_critical(df) - want) / want < 0.02


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, None, 0.9), (0.7, None, 0.5), (1.3, 10, 0.8),
                                                     (1.0, 5, None), (0.5, 3, 0.999), (1.0, None, 1e-9),
                                                     (2.0, 25, 0.3), (1.0, None, 1.0)])
def test_filtering_keeps_transformers_set(temperature, top_k, top_p):
    from transformers.generation.logits_process import (LogitsProcessorList, TemperatureLogitsWarper,
                                                         TopKLogitsWarper, TopPLogitsWarper)
    logits = np.random.default_rng(0).standard_normal((6, 40)) * 3
    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)])  # transformers' order
    if top_k is not None:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p is not None and top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    scores = warpers(None, torch.tensor(logits))
    got = sampling_probs(logits, temperature, top_k, top_p)
    np.testing.assert_array_equal(got > 0, torch.isfinite(scores).numpy())
    np.testing.assert_allclose(got, torch.softmax(scores, -1).numpy(), rtol=1e-12, atol=1e-15)
    if top_p == 1e-9:
        assert ((got > 0).sum(-1) == 1).all() and (got.argmax(-1) == logits.argmax(-1)).all()


def test_pick_next_draws_from_the_filtered_distribution():
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))
    rng = np.random.default_rng(1)
    draws = np.concatenate([pick_next(logits, 1.0, None, rng, top_p=0.7) for _ in range(4000)])
    assert set(np.unique(draws)) == {0, 1}  # 0.5 + 0.3 reaches 0.7: the set {0, 1}
    stat, df = chi2(np.bincount(draws, minlength=4), np.array([0.625, 0.375, 0, 0]))
    assert stat < chi2_critical(df)
    np.testing.assert_array_equal(pick_next(np.array([[0.1, 3, 2]]), 0, None, None), [1])


def _distributions(rng, k, V, sharp=2.0):
    """Random target (k + 1, V) and draft (k, V) distributions, the draft's far from the target's."""
    e = [np.exp(sharp * rng.standard_normal((n, V))) for n in (k + 1, k)]
    return tuple(a / a.sum(-1, keepdims=True) for a in e)


def test_speculative_rule_gives_the_target_distribution():
    """One row, k = 3 drafted tokens: the first emitted token is distributed as p[0]; among
    rounds that accepted i tokens, token i + 1 as p[i] (this p does not depend on the tokens
    before it, a valid model).  The draft's own q is rejected by the same test."""
    rng, V, k, n = np.random.default_rng(5), 5, 3, 8000
    p, q = _distributions(rng, k, V)
    rngs = [np.random.default_rng(7)]
    tokens = [[] for _ in range(k + 1)]
    accepted = np.zeros(k + 1, dtype=int)
    for _ in range(n):
        drafts = np.array([[rngs[0].choice(V, p=q[i]) for i in range(k)]])
        c, y = _verify(p[None], q[None], drafts, rngs, np.zeros(1, bool))
        emitted = list(drafts[0, :c]) + [int(y[0])]
        for i, t in enumerate(emitted):
            tokens[i].append(t)
        accepted[c] += 1
    assert accepted.min() > 100  # every outcome (0..k accepted, bonus token) occurred often
    for i in range(k + 1):
        counts = np.bincount(tokens[i], minlength=V)
        stat, df = chi2(counts, p[i])
        assert stat < chi2_critical(df), (i, stat)
        assert chi2(counts, q[min(i, k - 1)])[0] > chi2_critical(df)  # the draft's distribution is far


def test_speculative_rule_batch_keeps_the_fewest_accepted():
    """Three rows with their own distributions and streams: the batch keeps c tokens (the
    fewest any row accepted) and each row's token after them still follows its p."""
    rng, V, k, B, n = np.random.default_rng(11), 4, 2, 3, 4000
    p, q = (np.stack(a) for a in zip(*[_distributions(rng, k, V, 1.5) for _ in range(B)]))
    rngs = [np.random.default_rng(s) for s in (1, 2, 3)]
    first = [[] for _ in range(B)]
    cs = []
    for _ in range(n):
        drafts = np.array([[r.choice(V, p=q[b, i]) for i in range(k)] for b, r in enumerate(rngs)])
        c, y = _verify(p, q, drafts, rngs, np.zeros(B, bool))
        cs.append(c)
        for b in range(B):
            first[b].append(drafts[b, 0] if c > 0 else y[b])
    assert set(cs) == {0, 1, 2}
    for b in range(B):
        stat, df = chi2(np.bincount(first[b], minlength=V), p[b, 0])
        assert stat < chi2_critical(df), (b, stat)
    # a finished row does not hold the others back
    drafts = np.array([[0, 0]] * B)
    pp = np.zeros((B, k + 1, V))
    pp[:, :, 0] = 1
    pp[2, 0] = [0, 1, 0, 0]  # row 2 rejects the first draft
    c, y = _verify(pp, np.full((B, k, V), 1 / V), drafts, rngs, np.array([False, False, True]))
    assert c == 2 and (y == 0).all()
