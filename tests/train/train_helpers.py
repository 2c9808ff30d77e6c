"""What the tests in tests/train share: a small corpus and the tiny model's training options."""
import subprocess

from tiletrain.train import TrainArgs

TEXT = ("def add(a, b):\n    return a + b\n\nclass Tile:\n    pass\n" * 400)


def tiny_args(corpus, **kw) -> TrainArgs:
    """A one-layer, 32-wide GPT on ``corpus`` for 12 steps, evaluated every 4 (``kw`` overrides)."""
    base = dict(n_layer=1, n_head=2, n_embd=32, seq_len=16, batch=4, steps=12, warmup=2, eval_every=4,
                eval_batches=2, sample_tokens=0, progress=False, data=[corpus], val_fraction=0.1, lr=3e-3)
    base.update(kw)
    return TrainArgs(**base)


def cli_here(capsys, *args) -> subprocess.CompletedProcess:
    """`tiletrain ARGS` in this process (cli.main, as `python -m tiletrain` calls it), for
    commands refused before any work: no process of its own (~1 s each saved)."""
    from tiletrain.cli import main
    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["tiletrain", *args], code, out, err)
