"""tiletrain's GPT against a plain-PyTorch GPT-2 with the same weights (HF names): logits,
loss, every named gradient, and 5 AdamW steps, for several tilings (one tile; smaller last
tiles along time, hidden and vocab; the width split into several tiles), in float64 and
float32."""
import numpy as np
import pytest

import tiletrain as tt
from tiletrain.nn import GPT, GPTConfig, Tiling
from tiletrain.optim import AdamW

import torch
from torch_gpt2_ref import random_hf_state_dict, torch_model  # noqa: E402

CFG = GPTConfig(vocab_size=23, block_size=16, n_layer=2, n_head=2, n_embd=16)
TILINGS = {
    "one-tile": Tiling(batch=2, time=16, width=16, hidden=64, vocab=32),
    # T=11 in time tiles of 4 (4, 4, 3); width 16 in 2 tiles (one head each); hidden 64 in
    # tiles of 24 (24, 24, 16); vocab 23 in tiles of 8 (8, 8, 7); one sequence per tile
    "fine": Tiling(batch=1, time=4, width=8, hidden=24, vocab=8),
    "default": Tiling(),
}
TOL = {np.float64: 1e-9, np.float32: 1e-4}


def rel_err(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def _batch(rng, B, T):
    return rng.integers(0, CFG.vocab_size, (B, T)), rng.integers(0, CFG.vocab_size, (B, T))


def _models(rng, tiling, dtype):
    sd = random_hf_state_dict(CFG, rng)
    ref = torch_model(CFG, sd, dtype)
    model = GPT.from_hf(sd, config=CFG, tiling=tiling, dtype=dtype)
    return model, ref


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("tiling", list(TILINGS))
@pytest.mark.parametrize("T", [8, 11])
def test_logits_loss_and_every_gradient_match_pytorch(rng, tiling, dtype, T):
    model, ref = _models(rng, TILINGS[tiling], dtype)
    idx, targets = _batch(rng, 2, T)
    tol = TOL[dtype]

    logits = model(idx)
    loss = model.loss(idx, targets)
    loss.backward()
    ref_logits, ref_loss = ref(torch.tensor(idx), torch.tensor(targets))
    ref_loss.backward()

    assert logits.shape == (2, T, CFG.vocab_size)
    assert rel_err(logits.detach().numpy(), ref_logits.detach().numpy()) < tol
    assert abs(float(loss) - ref_loss.item()) / abs(ref_loss.item()) < tol
    names = [n for n, _ in model.named_parameters()]
    assert names == [n for n, _ in ref.named_parameters()]  # same names, same order, wte once
    ref_grads = {n: p.grad.numpy() for n, p in ref.named_parameters()}
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        err = rel_err(p.grad.numpy(), ref_grads[name])
        assert err < tol, f"{name}: relative error {err:.2e}"


def test_tied_embedding_gets_both_contributions(rng):
    """wte's gradient is the sum of the embedding lookup's and the LM head's; each alone is
    far from it (so this fails if either contribution is dropped)."""
    model, ref = _models(rng, TILINGS["fine"], np.float64)
    idx, targets = _batch(rng, 2, 11)
    model.loss(idx, targets).backward()
    got = model.transformer.wte.weight.grad.numpy()

    # the two contributions separately, with the head untied in the reference
    head = torch.nn.Parameter(ref.transformer.wte.weight.detach().clone())
    ref.lm_head.weight = head
    _, ref_loss = ref(torch.tensor(idx), torch.tensor(targets))
    ref_loss.backward()
    emb, out = ref.transformer.wte.weight.grad.numpy(), head.grad.numpy()
    assert rel_err(got, emb + out) < 1e-9
    assert rel_err(got, emb) > 1e-2 and rel_err(got, out) > 1e-2


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("tiling", ["one-tile", "fine"])
def test_five_adamw_steps_match_pytorch(rng, tiling, dtype):
    model, ref = _models(rng, TILINGS[tiling], dtype)
    hyper = dict(lr=3e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    opt = AdamW(model.parameters(), **hyper)
    ref_opt = torch.optim.AdamW(ref.parameters(), **hyper)
    losses, ref_losses = [], []
    for _ in range(5):
        idx, targets = _batch(rng, 2, 11)
        opt.zero_grad()
        loss = model.loss(idx, targets)
        loss.backward()
        opt.step()
        losses.append(float(loss))
        ref_opt.zero_grad()
        _, ref_loss = ref(torch.tensor(idx), torch.tensor(targets))
        ref_loss.backward()
        ref_opt.step()
        ref_losses.append(ref_loss.item())
    tol = TOL[dtype]
    assert rel_err(losses, ref_losses) < tol
    assert losses[-1] < losses[0]  # it trains
    ref_sd = ref.state_dict()
    sd = model.state_dict()
    assert list(sd) == list(ref_sd)
    C = CFG.n_embd
    for name, a in sd.items():
        b = ref_sd[name].numpy()
        if name.endswith("attn.c_attn.bias"):
            # The key bias adds q.b_k to every score of a row, which the softmax cancels: its
            # gradient is exactly zero, so both sides hold rounding noise (1e-17 in float64,
            # 1e-9 in float32) that AdamW turns into updates of about lr * noise / eps.  It has
            # no effect on the loss; in float64 the updates stay far below what weight decay
            # does to it (0.3 * (1 - (1 - lr wd)^5) = 4e-3), so compare it absolutely there.
            key_a, key_b = a[C:2 * C], b[C:2 * C]
            if dtype == np.float64:
                assert np.abs(key_a - key_b).max() < 1e-7, name
            a, b = np.delete(a, np.s_[C:2 * C]), np.delete(b, np.s_[C:2 * C])
        err = rel_err(a, b)
        assert err < tol, f"{name} after 5 steps: relative error {err:.2e}"


def test_gradients_accumulate_over_micro_batches(rng):
    """Two backward passes before one step: the gradients add, as in PyTorch."""
    model, ref = _models(rng, TILINGS["fine"], np.float64)
    for _ in range(2):
        idx, targets = _batch(rng, 2, 8)
        model.loss(idx, targets).backward()
        ref(torch.tensor(idx), torch.tensor(targets))[1].backward()
    ref_grads = dict(ref.named_parameters())
    for name, p in model.named_parameters():
        assert rel_err(p.grad.numpy(), ref_grads[name].grad.numpy()) < 1e-9, name


def test_eval_logits_do_not_depend_on_the_tiling(rng):
    sd = random_hf_state_dict(CFG, rng)
    idx, _ = _batch(rng, 3, 13)
    outs = [GPT.from_hf(sd, config=CFG, tiling=t, dtype=np.float64).eval()(idx).detach().numpy()
            for t in (TILINGS["one-tile"], TILINGS["fine"],
                      Tiling(batch=2, time=5, width=8, hidden=64, vocab=23))]
    for o in outs[1:]:
        assert rel_err(o, outs[0]) < 1e-12


def test_int64_tensor_input_is_accepted_and_retiled(rng):
    model, ref = _models(rng, TILINGS["fine"], np.float64)
    idx, _ = _batch(rng, 2, 11)
    want = ref(torch.tensor(idx)).detach().numpy()
    same = tt.from_numpy(idx, model.tiling.rows(2, 11))
    other = tt.from_numpy(idx, (2, 11))
    assert rel_err(model(same).detach().numpy(), want) < 1e-9
    assert rel_err(model(other).detach().numpy(), want) < 1e-9
