"""PyTorch-style programs written once as functions of the module (`def program(torch)`):
tests/test_ported_programs.py and benchmarks/ported_nanogpt.py run each with `torch` and with
`tiletrain` as the module.  Only the import differs; parameters and data come in as NumPy
arrays (the two libraries' random streams differ), and everything else is plain torch code."""
from __future__ import annotations

import math

import numpy as np


# -- a nanoGPT-style language model ---------------------------------------------------------
def nanogpt_program(torch, *, steps=3, sample_tokens=6, top_k=1, **config):
    """Train a small GPT for `steps` steps (AdamW with parameter groups, LambdaLR warm-up,
    clip_grad_norm_), then sample `sample_tokens` tokens with top-k and a seeded Generator.
    config: nanogpt_trainer's.  Returns (losses, tokens, state names)."""
    model, train_step = nanogpt_trainer(torch, **config)
    losses = [train_step(step) for step in range(steps)]
    model.eval()
    g = torch.Generator().manual_seed(1234)
    out = model.generate(torch.zeros((1, 1), dtype=torch.long), sample_tokens, top_k=top_k, generator=g)
    names = sorted(model.state_dict().keys())
    return losses, [int(t) for t in out[0].tolist()], names


def nanogpt_trainer(torch, *, init=None, data=None, vocab=32, block=8, n_embd=16, n_head=2, n_layer=2, batch=4,
                    dtype=None):
    """The model and its training step (``train_step(step) -> loss.item()``) of
    nanogpt_program.  init: {name: ndarray} loaded into the model (None: the module's own
    initialisation); data: (N,) int64 token stream."""
    nn = torch.nn
    F = torch.nn.functional
    if dtype is not None:
        torch.set_default_dtype(dtype)
    device = torch.device("cpu")

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)
            self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(1, 1, block, block),
                                 persistent=False)

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(n_embd, dim=2)
            k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
            q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
            v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(n_embd, 4 * n_embd)
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd)
            self.attn = CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(n_embd)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            x = x + self.mlp(self.ln_2(x))
            return x

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(vocab, n_embd),
                wpe=nn.Embedding(block, n_embd),
                h=nn.ModuleList([Block() for _ in range(n_layer)]),
                ln_f=nn.LayerNorm(n_embd),
            ))
            self.lm_head = nn.Linear(n_embd, vocab, bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # tied weights
            self.apply(self._init_weights)

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets=None):
            b, t = idx.size()
            pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
            x = self.transformer.wte(idx) + self.transformer.wpe(pos)
            for blk in self.transformer.h:
                x = blk(x)
            x = self.transformer.ln_f(x)
            logits = self.lm_head(x)
            loss = None
            if targets is not None:
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
            return logits, loss

        @torch.no_grad()
        def generate(self, idx, max_new_tokens, top_k=None, generator=None):
            for _ in range(max_new_tokens):
                idx_cond = idx if idx.size(1) <= block else idx[:, -block:]
                logits, _ = self(idx_cond)
                logits = logits[:, -1, :]
                if top_k is not None:
                    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                    logits[logits < v[:, [-1]]] = -float("Inf")
                probs = F.softmax(logits, dim=-1)
                idx_next = torch.multinomial(probs, num_samples=1, generator=generator)
                idx = torch.cat((idx, idx_next), dim=1)
            return idx

    model = GPT().to(device)
    if init is not None:
        model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-2, betas=(0.9, 0.95))
    warmup = 2
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: min(1.0, (it + 1) / warmup))
    tokens = torch.tensor(data if data is not None else np.arange(256) % vocab, dtype=torch.long)
    model.train()

    def train_step(step):
        ix = [(step * 7 + 3 * i) % (tokens.size(0) - block - 1) for i in range(batch)]
        x = torch.stack([tokens[i:i + block] for i in ix])
        y = torch.stack([tokens[i + 1:i + 1 + block] for i in ix])
        x, y = x.to(device), y.to(device)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        return loss.item()

    return model, train_step


def nanogpt_init(vocab=32, block=8, n_embd=16, n_layer=2, seed=0) -> dict:
    """Initial parameters for nanogpt_program, as NumPy float64 arrays (names as its state_dict)."""
    rng = np.random.default_rng(seed)
    p = {"transformer.wte.weight": rng.normal(0, 0.02, (vocab, n_embd)),
         "transformer.wpe.weight": rng.normal(0, 0.02, (block, n_embd)),
         "transformer.ln_f.weight": np.ones(n_embd), "transformer.ln_f.bias": np.zeros(n_embd),
         "lm_head.weight": None}
    p["lm_head.weight"] = p["transformer.wte.weight"]
    for i in range(n_layer):
        h = f"transformer.h.{i}."
        for ln in ("ln_1", "ln_2"):
            p[h + ln + ".weight"] = 1.0 + rng.normal(0, 0.1, n_embd)
            p[h + ln + ".bias"] = rng.normal(0, 0.1, n_embd)
        for name, (o, i_) in {"attn.c_attn": (3 * n_embd, n_embd), "attn.c_proj": (n_embd, n_embd),
                              "mlp.c_fc": (4 * n_embd, n_embd), "mlp.c_proj": (n_embd, 4 * n_embd)}.items():
            p[h + name + ".weight"] = rng.normal(0, 0.2, (o, i_))
            p[h + name + ".bias"] = rng.normal(0, 0.1, o)
    return p


# -- an MLP classifier with a DataLoader and StepLR ---------------------------------------
def mlp_program(torch, *, init, x, y, epochs=2, batch_size=16, dtype=None):
    """Train a 2-layer MLP classifier with SGD + momentum, StepLR, a DataLoader over a
    TensorDataset-like Dataset (seeded shuffle off: order must match), mse + cross entropy."""
    nn = torch.nn
    F = torch.nn.functional
    from_module = torch.utils.data
    if dtype is not None:
        torch.set_default_dtype(dtype)

    class Pairs(from_module.Dataset):
        def __init__(self, xs, ys):
            self.xs, self.ys = xs, ys

        def __len__(self):
            return len(self.xs)

        def __getitem__(self, i):
            return self.xs[i], self.ys[i]

    def collate(batch):
        xs = torch.stack([torch.tensor(b[0]) for b in batch])
        ys = torch.tensor([int(b[1]) for b in batch], dtype=torch.long)
        return xs, ys

    class Net(nn.Module):
        def __init__(self, d_in, d_hidden, n_out):
            super().__init__()
            self.fc1 = nn.Linear(d_in, d_hidden)
            self.fc2 = nn.Linear(d_hidden, n_out)

        def forward(self, x):
            return self.fc2(F.relu(self.fc1(x)))

    n_in, n_hidden = init["fc1.weight"].shape[1], init["fc1.weight"].shape[0]
    n_out = init["fc2.weight"].shape[0]
    model = Net(n_in, n_hidden, n_out)
    model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    loader = from_module.DataLoader(Pairs(x, y), batch_size=batch_size, shuffle=False, collate_fn=collate)
    losses, lrs = [], []
    for epoch in range(epochs):
        model.train()
        for xb, yb in loader:
            logits = model(xb)
            onehot = F.one_hot(yb, n_out).to(logits.dtype)
            loss = F.cross_entropy(logits, yb) + 0.1 * F.mse_loss(F.softmax(logits, dim=-1), onehot)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
            lrs.append(sched.get_last_lr()[0])
    model.eval()
    with torch.no_grad():
        pred = model(torch.tensor(x)).argmax(dim=1)
        acc = (pred == torch.tensor(y)).float().mean().item()
    return losses, lrs, acc


# -- a WGAN-GP critic: a gradient penalty through torch.autograd.grad(create_graph=True) ------
def wgan_gp_program(torch, *, init, real, fake, mix, lam=10.0, lr=1e-3, dtype=None):
    """Train an MLP critic WGAN-GP style for len(real) steps with Adam(W): loss = D(fake).mean()
    - D(real).mean() + lam * ((||dD(x_hat)/dx_hat||_2 - 1)^2).mean() at x_hat = mix * real +
    (1 - mix) * fake, the input gradient taken with create_graph=True so that the penalty's
    backward is a double backward.  init: {name: ndarray} of the critic; real, fake: (steps,
    B, D) arrays; mix: (steps, B, 1).  Returns (losses, penalties)."""
    nn = torch.nn
    F = torch.nn.functional
    if dtype is not None:
        torch.set_default_dtype(dtype)

    class Critic(nn.Module):
        def __init__(self, d_in, d_hidden):
            super().__init__()
            self.fc1 = nn.Linear(d_in, d_hidden)
            self.fc2 = nn.Linear(d_hidden, d_hidden)
            self.out = nn.Linear(d_hidden, 1)

        def forward(self, x):
            h = torch.tanh(self.fc1(x))
            h = F.gelu(self.fc2(h))
            return self.out(h)

    critic = Critic(init["fc1.weight"].shape[1], init["fc1.weight"].shape[0])
    critic.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    opt = torch.optim.AdamW(critic.parameters(), lr=lr, betas=(0.5, 0.9), weight_decay=0.0)
    losses, penalties = [], []
    for step in range(len(real)):
        x_real, x_fake, alpha = torch.tensor(real[step]), torch.tensor(fake[step]), torch.tensor(mix[step])
        x_hat = (alpha * x_real + (1 - alpha) * x_fake).requires_grad_(True)
        d_hat = critic(x_hat)
        (grad,) = torch.autograd.grad(d_hat, x_hat, grad_outputs=torch.ones_like(d_hat), create_graph=True)
        penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
        loss = critic(x_fake).mean() - critic(x_real).mean() + lam * penalty
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        penalties.append(penalty.item())
    return losses, penalties
