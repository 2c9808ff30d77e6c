"""`tiletrain runs list | show | compare`: the run directories `tiletrain train` writes
(metrics.jsonl, run.json: tiletrain.utils.runlog) as tables and loss curves.

    tiletrain runs list [ROOT]              every run under ROOT (default runs/): steps, losses, tokens/s
    tiletrain runs show DIR                 a run's summary and DIR/loss.png (train/val loss, lr vs step)
    tiletrain runs compare DIR1 DIR2 ...    one PNG of the runs' curves side by side and a table

The figures are drawn with matplotlib (pip install 'tiletrain[trace]'); the tables need
nothing.  See docs/runs.md."""
from __future__ import annotations

import math
import os
import statistics
from pathlib import Path

from ..trace.plot import _figure as trace_figure
from ..utils.runlog import METRICS_NAME, RUN_NAME, RunLogError, read_metrics, read_run

__all__ = ["summary", "find_runs", "format_table", "figure_run", "figure_compare", "plot_run", "plot_compare",
           "add_subcommands", "cmd_runs_list", "cmd_runs_show", "cmd_runs_compare"]

CHECKPOINT = "checkpoint.safetensors"


def _values(lines: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the lines that have ``key``."""
    pts = [(ln["step"], ln[key]) for ln in lines if isinstance(ln.get(key), (int, float)) and ln.get(key) is not None]
    return [p[0] for p in pts], [float(p[1]) for p in pts]


def summary(run_dir: str | os.PathLike) -> dict:
    """A run's numbers: its last step, last train loss, last and best validation loss,
    median tokens/s and GFLOP/s over its steps (measured per step), peak memory, training
    time.  RunLogError for a directory without metrics (say why)."""
    d = Path(run_dir)
    lines = read_metrics(d)
    run = read_run(d)
    cfg = run.get("config", {})
    model = run.get("model_type") or cfg.get("arch") or "?"
    mc = run.get("model_config") or {}
    sizes = "x".join(str(mc[k]) for k in ("n_layer", "n_embd") if k in mc)
    out = {"run": str(d), "model": f"{model} {sizes}".strip(), "started": run.get("started", "?"),
           "steps": lines[-1]["step"] if lines else 0, "of": cfg.get("steps"), "lines": len(lines),
           "train_loss": None, "val_loss": None, "val_step": None, "best_val_loss": None, "tokens_per_s": None,
           "gflops": None, "peak_memory_bytes": None, "elapsed_s": None, "n_params": run.get("n_params"),
           "resumes": len(run.get("resumes", [])),
           "traces": sorted(p.name for p in d.glob("trace-step*.json") if not p.name.endswith("-metrics.json"))}
    if not lines:
        return out
    _, train = _values(lines, "train_loss")
    vs, val = _values(lines, "val_loss")
    _, tps = _values(lines, "tokens_per_s")
    _, gf = _values(lines, "gflops")
    _, mem = _values(lines, "peak_memory_bytes")
    out.update(train_loss=train[-1] if train else None, val_loss=val[-1] if val else None,
               val_step=vs[-1] if vs else None, best_val_loss=min(val) if val else None,
               tokens_per_s=statistics.median(tps) if tps else None, gflops=statistics.median(gf) if gf else None,
               peak_memory_bytes=int(max(mem)) if mem else None, elapsed_s=lines[-1].get("elapsed_s"))
    return out


def find_runs(root: str | os.PathLike) -> list[Path]:
    """The run directories under ``root`` (``root`` itself included, three levels deep): those
    with metrics.jsonl, run.json or a checkpoint."""
    root = Path(root)
    if not root.is_dir():
        raise RunLogError(f"{root} is not a directory (runs are written to runs/ by default, or to --ckpt-dir / "
                          "--run-dir)")
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        depth = len(Path(dirpath).relative_to(root).parts)
        if depth >= 3:
            dirnames[:] = []
        dirnames.sort()
        if {METRICS_NAME, RUN_NAME, CHECKPOINT} & set(filenames):
            found.append(Path(dirpath))
    return sorted(found)


def _num(v, fmt: str = "{:.4f}") -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else fmt.format(v)


def _bytes(v) -> str:
    if v is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= size:
            return f"{v / size:.1f} {unit}"
    return f"{v} B"


def _duration(s) -> str:
    if s is None:
        return "-"
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def format_table(rows: list[list[str]], header: list[str]) -> str:
    """Columns aligned: text left, the rest right."""
    cells = [header] + rows
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    left = [all(not _numeric(r[i]) for r in rows) for i in range(len(header))]

    def line(r):
        return "  ".join(c.ljust(w) if lf else c.rjust(w) for c, w, lf in zip(r, widths, left)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _numeric(text: str) -> bool:
    head = text.split(" ")[0].replace(",", "").replace("/", "")
    try:
        float(head)
        return True
    except ValueError:
        return text == "-"


def _row(s: dict, name: str) -> list[str]:
    steps = f"{s['steps']}/{s['of']}" if s.get("of") else str(s["steps"])
    return [name, s["model"], steps, _num(s["train_loss"]), _num(s["val_loss"]), _num(s["best_val_loss"]),
            _num(s["tokens_per_s"], "{:,.0f}"), _bytes(s["peak_memory_bytes"]), _duration(s["elapsed_s"])]


HEADER = ["run", "model", "steps", "train loss", "val loss", "best val", "tokens/s", "peak memory", "time"]


# -- figures (matplotlib, off-screen: no pyplot, the user's backend is left alone)

def _figure(**kw):
    try:
        return trace_figure("the loss curves need", **kw)
    except ImportError as exc:  # the command line's error (the tables still work without matplotlib)
        raise RuntimeError(f"{exc}; the tables need nothing: tiletrain runs show DIR --no-plot") from None


def figure_run(lines: list[dict], title: str = ""):
    """A run's figure: train and validation loss vs step (left), learning rate vs step
    (right); one curve each (validation: only when evaluated)."""
    fig = _figure(figsize=(11, 4), layout="constrained")
    ax, ax_lr = fig.subplots(1, 2)
    steps, train = _values(lines, "train_loss")
    ax.plot(steps, train, label="train", color="#30638e", linewidth=1.2)
    vs, val = _values(lines, "val_loss")
    if val:
        ax.plot(vs, val, label="validation", color="#d1495b", marker="o", markersize=3)
    ax.set(xlabel="step", ylabel="loss", title="loss")
    _integer_steps(ax)
    ax.legend()
    ls, lr = _values(lines, "lr")
    ax_lr.plot(ls, lr, color="#edae49", label="lr")
    ax_lr.set(xlabel="step", ylabel="learning rate", title="learning rate")
    _integer_steps(ax_lr)
    if title:
        fig.suptitle(title)
    return fig


def figure_compare(runs: list[tuple[str, list[dict]]]):
    """Runs side by side: train loss, validation loss and tokens/s vs step, one curve per run
    in each panel (a run without validation or throughput: no curve in that panel);
    ``runs``: (name, metrics lines) pairs."""
    fig = _figure(figsize=(15, 4.2), layout="constrained")
    axes = fig.subplots(1, 3)
    for (name, lines), color in zip(runs, _colors(len(runs))):
        for ax, key, mark in zip(axes, ("train_loss", "val_loss", "tokens_per_s"), ("", "o", "")):
            steps, vals = _values(lines, key)
            if vals:
                ax.plot(steps, vals, label=name, color=color, marker=mark or None, markersize=3, linewidth=1.2)
    for ax, title in zip(axes, ("train loss", "validation loss", "tokens/s (per step, measured)")):
        ax.set(xlabel="step", title=title)
        _integer_steps(ax)
    axes[0].legend(fontsize="small")
    return fig


def _integer_steps(ax) -> None:
    from matplotlib.ticker import MaxNLocator  # (matplotlib is there: _figure made the figure)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)


def _colors(n: int) -> list:
    base = ["#30638e", "#d1495b", "#edae49", "#00798c", "#8d5a97", "#4c9f38", "#b56576", "#003d5b", "#7f8c8d"]
    return [base[i % len(base)] for i in range(n)]


def plot_run(run_dir: str | os.PathLike, path: str | os.PathLike | None = None) -> Path:
    """DIR/loss.png (or ``path``): ``figure_run`` of the run."""
    d = Path(run_dir)
    lines = read_metrics(d)
    if not lines:
        raise RunLogError(f"{d / METRICS_NAME} has no steps yet: nothing to plot")
    out = Path(path) if path is not None else d / "loss.png"
    figure_run(lines, title=str(d)).savefig(out, dpi=110)
    return out


def plot_compare(run_dirs, path: str | os.PathLike) -> Path:
    runs = [(name, read_metrics(d)) for name, d in zip(_names(run_dirs), run_dirs)]
    out = Path(path)
    figure_compare(runs).savefig(out, dpi=110)
    return out


def _names(run_dirs) -> list[str]:
    """Short names of run directories: their last path parts, as many as tell them apart."""
    paths = [Path(d).resolve() for d in run_dirs]
    for k in range(1, max(len(p.parts) for p in paths) + 1):
        names = ["/".join(p.parts[-k:]) for p in paths]
        if len(set(names)) == len(names):
            return names
    return [f"{p} #{i + 1}" for i, p in enumerate(paths)]  # the same directory twice


# -- the subcommands

def cmd_runs_list(args) -> int:
    dirs = find_runs(args.root)
    if not dirs:
        print(f"no runs under {args.root}")
        return 0
    rows = []
    for d, name in zip(dirs, _names(dirs)):
        try:
            rows.append(_row(summary(d), name))
        except RunLogError:  # a checkpoint of a tiletrain from before metrics logs
            rows.append([name, "(no metrics.jsonl: an older run)"] + ["-"] * (len(HEADER) - 2))
    print(format_table(rows, HEADER))
    return 0


def cmd_runs_show(args) -> int:
    s = summary(args.dir)
    run = read_run(args.dir)
    print(f"run          {s['run']}")
    print(f"model        {run.get('model', s['model'])}" + (f", {s['n_params'] / 1e6:.2f} M parameters"
                                                              if s["n_params"] else ""))
    print(f"started      {s['started']}" + (f"; resumed {s['resumes']} time(s)" if s["resumes"] else ""))
    versions = ", ".join(f"{k} {run[k]}" for k in ("tiletrain", "starpu", "python", "numpy") if run.get(k))
    if versions:
        print(f"versions     {versions}")
    if run.get("blas"):
        print(f"blas         {run['blas']}")
    machine = run.get("machine") or {}
    if machine:
        print(f"machine      {machine.get('hostname', '?')}: {machine.get('cpus', '?')} CPUs, "
              f"{_bytes(machine.get('memory_bytes'))}, {machine.get('platform', '?')}")
    if s["lines"] == 0:
        print("steps        none logged yet")
        return 0
    print(f"steps        {s['steps']}" + (f" of {s['of']}" if s["of"] else ""))
    print(f"train loss   {_num(s['train_loss'])} (step {s['steps']})")
    print(f"val loss     {_num(s['val_loss'])}" + (f" (step {s['val_step']}), best {_num(s['best_val_loss'])}"
                                                   if s["val_step"] is not None else ""))
    print(f"throughput   {_num(s['tokens_per_s'], '{:,.0f}')} tokens/s, {_num(s['gflops'], '{:.2f}')} GFLOP/s "
          "(medians over the steps)")
    print(f"peak memory  {_bytes(s['peak_memory_bytes'])} (process resident, rank 0)")
    print(f"time         {_duration(s['elapsed_s'])} of training")
    if s["traces"]:
        print(f"traces       {', '.join(s['traces'])} (open in ui.perfetto.dev)")
    if not args.no_plot:
        print(f"wrote {plot_run(args.dir, args.out)}")
    return 0


def cmd_runs_compare(args) -> int:
    rows = [_row(summary(d), name) for d, name in zip(args.dirs, _names(args.dirs))]
    print(format_table(rows, HEADER))
    if not args.no_plot:
        print(f"wrote {plot_compare(args.dirs, args.out)}")
    return 0


def add_subcommands(sub) -> None:
    """`runs list|show|compare` on the command line's subparsers (tiletrain/cli.py)."""
    p = sub.add_parser("runs", help="training runs: list them, show one (table + loss curves), compare several")
    rs = p.add_subparsers(dest="runs_command", required=True)
    q = rs.add_parser("list", help="every run directory under ROOT with its steps, losses, tokens/s, peak memory")
    q.add_argument("root", nargs="?", default="runs", metavar="ROOT", help="where to look (default: runs)")
    q.set_defaults(func=cmd_runs_list)
    q = rs.add_parser("show", help="a run's summary, and loss.png in its directory (train/val loss and lr vs step)")
    q.add_argument("dir", metavar="DIR", help="a run directory (tiletrain train --ckpt-dir or --run-dir)")
    q.add_argument("--out", default=None, metavar="PNG", help="write the figure here (default: DIR/loss.png)")
    q.add_argument("--no-plot", action="store_true", help="only the summary")
    q.set_defaults(func=cmd_runs_show)
    q = rs.add_parser("compare", help="runs side by side: one PNG of their curves and a table of final val loss, "
                      "tokens/s, peak memory")
    q.add_argument("dirs", nargs="+", metavar="DIR", help="run directories")
    q.add_argument("--out", default="runs-compare.png", metavar="PNG", help="the figure")
    q.add_argument("--no-plot", action="store_true", help="only the table")
    q.set_defaults(func=cmd_runs_compare)
