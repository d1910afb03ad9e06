"""Learning-rate instability (notebook 12): a rate sweep, warm-up, clipping statistics, seed noise,
and what a run actually used.

A loss curve that spikes early or ends worse than it should has many causes that look alike in the
loss: a rate above the stable range, a schedule that skips warm-up, Adam's constants, an
initialisation scale. The loss is also the noisiest thing a run logs (a change of seed moves it by
about as much as many bugs do), so these tools measure two kinds of thing:

* **outcomes over several runs**: ``sweep`` (one run per rate), ``diverged_at`` and ``divergence``
  (did the training loss climb above where it started, and when), ``seed_losses`` and ``spread`` (the range a change
  must beat before it is a change), ``clipped_fraction`` and ``clip_percentile`` (the gradient-norm
  distribution that a clip threshold should be read from);
* **what a run used**, which a configuration does not say: ``used`` reads the rate the optimizer
  used at each step, the optimizer's own constants (``eps``, ``betas``, ``weight_decay``) and the
  scale of the weights the model starts from. Two runs of the same settings and seed that differ
  there differ in a part, whatever their losses say (``problems`` compares a pipeline with its
  healthy twin this way).

Limits: ``divergence`` reads the logged training loss against its first value: a run that never
falls but never climbs is "not diverged" (it may still be useless), and a margin below the seed noise
would call noise a divergence. ``used`` sees the first optimizer param group only, and the scale of
weight matrices and embeddings (parameters of two or more dimensions), not of norms or biases.
Everything here trains on the CPU and is seeded (``seed`` arguments): the same call gives the same
numbers on the same machine, PyTorch version and thread count.
"""

from __future__ import annotations

import math
from statistics import mean

import torch

from ..reference.pipeline import Pipeline, healthy_twin
from ..reference.train import Run, start, train, train_steps
from ..toolkit.textview import html_text, with_text


# ----- outcomes ---------------------------------------------------------------------------------
def sweep(pipe: Pipeline, lrs, seed: int = 0, steps: int | None = None) -> dict[float, Run]:
    """``{lr: a finished run of pipe at that rate}`` (same seed, so the same initialisation and batch
    order for every rate; ``steps`` default ``pipe.steps``; the validation loss at the end in
    ``run.final_val_loss``, NaN for a run that stopped non-finite)."""
    return {lr: train(pipe.replace(lr=lr), steps=steps, seed=seed, eval_every=10**9) for lr in lrs}


def diverged_at(run: Run, margin: float = 0.5) -> int | None:
    """The first logged step at which the training loss is non-finite or above its first value by
    more than ``margin`` nats, or at which the loop found the loss, gradients or parameters
    non-finite (``run.history["finite"]``); ``None`` if there is none. Limits: it compares with the
    first loss, so a spike from a lower level that stays below the start is not caught."""
    losses, finite = run.history["loss"], run.history.get("finite", [])
    for i, value in enumerate(losses):
        if not math.isfinite(value) or value > losses[0] + margin or (i < len(finite) and not finite[i]):
            return run.history["step"][i]
    return None


def divergence(run: Run, margin: float = 0.5, early_fraction: float = 0.1) -> str | None:
    """``"early"`` or ``"late"`` if the run diverged (``diverged_at``), else ``None``: early within
    the first ``early_fraction`` of the run's planned steps (the logged steps, or ``pipe.steps`` for
    a run the loop stopped early), late after them. A convention: it says when, not why."""
    at = diverged_at(run, margin)
    if at is None:
        return None
    planned = run.pipe.steps if run.stopped else len(run.history["loss"])
    return "early" if at < early_fraction * planned else "late"


def best_rate(runs: dict[float, Run]) -> float:
    """The rate whose run ends with the lowest validation loss among those that did not diverge
    (``divergence``); ValueError if every run diverged."""
    kept = {lr: r.final_val_loss for lr, r in runs.items() if divergence(r) is None and math.isfinite(r.final_val_loss)}
    if not kept:
        raise ValueError("every run of the sweep diverged: sweep lower rates")
    return min(kept, key=kept.get)


def seed_losses(pipe: Pipeline, seeds, steps: int | None = None) -> list[float]:
    """The final validation loss of ``pipe`` trained once per seed (a seed sets the initialisation,
    the batch order and dropout)."""
    return [train(pipe, steps=steps, seed=s, eval_every=10**9).final_val_loss for s in seeds]


def spread(values) -> dict:
    """``{"mean", "std", "min", "max", "range"}`` of ``values`` (``std``: the sample standard
    deviation, 0 for a single value)."""
    values = [float(v) for v in values]
    m = mean(values)
    std = math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return {"mean": m, "std": std, "min": min(values), "max": max(values), "range": max(values) - min(values)}


def real_change(baseline, candidate) -> bool:
    """Whether ``candidate`` (final losses over seeds) is lower than ``baseline`` by more than the
    noise: its mean is below the baseline's mean by more than the larger of the two ranges
    (max - min). The rule this notebook uses. Limit: with one value on each side both ranges are 0
    and any decrease counts; the rule means something only with several seeds per side."""
    b, c = spread(baseline), spread(candidate)
    return b["mean"] - c["mean"] > max(b["range"], c["range"])


def clipped_fraction(grad_norms, threshold: float) -> float:
    """The fraction of steps whose pre-clip gradient norm is above ``threshold`` (the steps
    ``clip_grad_norm_`` scales down). Non-finite norms count as clipped; an empty list gives 0.0."""
    norms = [float(g) for g in grad_norms]
    if not norms:
        return 0.0
    return sum(1 for g in norms if not math.isfinite(g) or g > threshold) / len(norms)


def clip_percentile(grad_norms, q: float = 0.9) -> float:
    """The ``q`` quantile of the finite pre-clip gradient norms: the Tuning Playbook's starting
    point for a clip threshold (about the 90th percentile), to be checked, not trusted."""
    norms = torch.tensor([float(g) for g in grad_norms if math.isfinite(float(g))], dtype=torch.float64)
    if norms.numel() == 0:
        raise ValueError("no finite gradient norms")
    return float(torch.quantile(norms, q))


# ----- what a run used --------------------------------------------------------------------------
def init_scale(model: torch.nn.Module) -> float:
    """The standard deviation of every weight matrix and embedding of ``model`` together
    (parameters of two or more dimensions)."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters() if p.dim() >= 2])
    return float(flat.std())


def used(pipe: Pipeline, steps: int = 4, seed: int = 0) -> dict:
    """What a run of ``pipe`` used, over its first ``steps`` steps (seeded):

    ``"lr"``: the rate the optimizer used at each step (the schedule's doing, not the setting);
    ``"optimizer"``: the constants of its first param group (``eps``, ``betas``, ``weight_decay``,
    and ``initial_lr``, the rate the schedule multiplies);
    ``"init_scale"``: ``init_scale`` of the model before any step;
    ``"rel_update"``: each step's ``||delta theta|| / ||theta||``.
    """
    run = start(pipe, seed)
    scale = init_scale(run.model)
    train_steps(run, steps, eval_every=10**9)
    group = run.optimizer.param_groups[0]
    constants = {k: group[k] for k in ("eps", "betas", "weight_decay", "initial_lr") if k in group}
    return {"lr": list(run.history["lr"]), "optimizer": constants, "init_scale": scale,
            "rel_update": list(run.history["rel_update"])}


def problems(pipe: Pipeline, seed: int = 0, steps: int = 4) -> list[str]:
    """How a run of ``pipe`` differs from its healthy twin (``healthy_twin``: the same settings and
    seed, every part the reference) in what it used: the rate at any step (relative difference
    above 1e-6), the optimizer's constants, the initial weight scale (above 1%). Empty when nothing
    differs. A part that crashes is a problem too. It cannot see a bug that leaves all three alone
    (a broken loss, a broken batch: other notebooks' checks)."""
    try:
        mine, ref = used(pipe, steps, seed), used(healthy_twin(pipe), steps, seed)
    except Exception as err:  # noqa: BLE001 - a pipeline that crashes is broken
        return [f"the run crashed: {type(err).__name__}"]
    found = []
    bad = [i for i, (a, b) in enumerate(zip(mine["lr"], ref["lr"])) if abs(a - b) > 1e-6 * max(abs(b), 1e-12)]
    if bad:
        i = bad[0]
        found.append(f"used learning rate differs from step {i}: {mine['lr'][i]:.3g} against {ref['lr'][i]:.3g}")
    for k in sorted(set(mine["optimizer"]) | set(ref["optimizer"])):
        if mine["optimizer"].get(k) != ref["optimizer"].get(k):
            found.append(f"optimizer {k} is {mine['optimizer'].get(k)!r}, the reference's {ref['optimizer'].get(k)!r}")
    if abs(mine["init_scale"] / ref["init_scale"] - 1) > 0.01:
        found.append(f"initial weight scale {mine['init_scale']:.3g} against {ref['init_scale']:.3g}")
    return found


# ----- plots and the explorer -------------------------------------------------------------------
def _reference_lines(ax, pipe: Pipeline) -> None:
    lang = pipe.language()
    ax.axhline(math.log(lang.vocab_size), color="grey", linestyle="--", linewidth=1, label="ln V (uniform guess)")
    ax.axhline(lang.loss_floor(pipe.seq_len), color="grey", linestyle=":", linewidth=1,
               label="window floor (best mean over fresh windows)")


def plot_losses(runs: dict, pipe: Pipeline, title: str):
    """The training loss of each run (``{label: Run}``) against the step, with ln V and the window
    floor of ``pipe``'s language. Returns the figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    for label, run in runs.items():
        ax.plot(run.history["step"], run.history["loss"], label=label)
    _reference_lines(ax, pipe)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats per token)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_sweep(runs: dict[float, Run], pipe: Pipeline, title: str = "learning-rate sweep"):
    """Two panels: the training loss of each rate's run against the step, and the final validation
    loss against the rate (log scale; a diverged run marked with an x at the top). Returns the figure."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    for lr, run in runs.items():
        left.plot(run.history["step"], run.history["loss"], label=f"lr {lr:g}", linewidth=1)
    _reference_lines(left, pipe)
    left.set_xlabel("step")
    left.set_ylabel("training loss (nats per token; cut off at the top)")
    left.set_ylim(0, math.log(pipe.language().vocab_size) + 1.5)
    left.set_title(title)
    left.legend(fontsize=7, ncol=2)
    lrs = sorted(runs)
    finals = [runs[lr].final_val_loss for lr in lrs]
    top = math.log(pipe.language().vocab_size) + 1.0
    right.plot(lrs, [min(f, top) if math.isfinite(f) else top for f in finals], "o-", label="final loss (non-finite: at the top)")
    bad = [lr for lr in lrs if divergence(runs[lr]) is not None]
    right.plot(bad, [min(runs[lr].final_val_loss, top) if math.isfinite(runs[lr].final_val_loss) else top for lr in bad],
               "x", color="red", markersize=10, label="diverged on the way")
    _reference_lines(right, pipe)
    right.set_xscale("log")
    right.set_xlabel("learning rate (log scale)")
    right.set_ylabel("final validation loss")
    right.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_grad_norms(grad_norms, thresholds: dict[str, float], title: str = "pre-clip gradient norms"):
    """A histogram of the pre-clip gradient norms with a vertical line per named threshold (its
    clipped fraction in the legend). Returns the figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    norms = [float(g) for g in grad_norms if math.isfinite(float(g))]
    lo, hi = min(norms + list(thresholds.values())), max(norms + list(thresholds.values()))
    ax.hist(norms, bins=torch.logspace(math.log10(lo), math.log10(hi), 50).tolist(), color="tab:blue", alpha=0.7)
    for (name, t), color in zip(thresholds.items(), ("black", "tab:green", "tab:red", "tab:purple")):
        ax.axvline(t, color=color, linestyle="--", label=f"{name} = {t:.3g}: clips {clipped_fraction(grad_norms, t):.0%} of steps")
    ax.set_xscale("log")
    ax.set_xlabel("gradient norm before clipping (log scale)")
    ax.set_ylabel("steps")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_seed_band(curves: dict[str, list[list[float]]], pipe: Pipeline, title: str = "seed to seed"):
    """Per label, the mean training loss over seeds against the step, with the band between the
    lowest and highest seed at each step. ``curves[label]`` is one loss list per seed. Returns the figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    for label, runs in curves.items():
        n = min(len(c) for c in runs)
        steps = list(range(n))
        lo = [min(c[i] for c in runs) for i in steps]
        hi = [max(c[i] for c in runs) for i in steps]
        ax.plot(steps, [mean(c[i] for c in runs) for i in steps], label=f"{label} (mean of {len(runs)} seeds)")
        ax.fill_between(steps, lo, hi, alpha=0.25)
    _reference_lines(ax, pipe)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats per token)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def rate_explorer(runs: dict[float, Run], pipe: Pipeline):
    """A widget: a slider over the rates of a sweep; per rate, its final validation loss, whether and
    when it diverged, and its training curve drawn over the others (in grey). Precomputed runs: moving
    the slider only redraws. Returns a ``VBox`` with ``.slider``, ``.summary`` and ``.output``."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    lrs = sorted(runs)
    best = best_rate(runs)
    slider = widgets.SelectionSlider(options=lrs, value=best, description="learning rate",
                                     style={"description_width": "initial"}, continuous_update=False)
    summary = widgets.HTML()
    output = widgets.Output()

    def describe(lr) -> str:
        run = runs[lr]
        kind = divergence(run)
        state = f"diverged <b>{kind}</b>" if kind else "did not diverge"
        final = run.final_val_loss
        rel = "the best of the sweep" if lr == best else f"{lr / best:.3g} times the best rate ({best:g})"
        return (f"lr <b>{lr:g}</b> ({rel}): final validation loss <b>{final:.3f}</b>, {state}; "
                f"highest training loss {max(run.history['loss']):.3f} at step "
                f"{run.history['loss'].index(max(run.history['loss']))}")

    def draw(lr) -> None:
        summary.value = describe(lr)
        output.clear_output(wait=True)
        with output:
            fig, ax = plt.subplots(figsize=(6.5, 3.2))
            for other in lrs:
                if other != lr:
                    ax.plot(runs[other].history["loss"], color="lightgrey", linewidth=1)
            ax.plot(runs[lr].history["loss"], color="tab:red", label=f"lr {lr:g}")
            _reference_lines(ax, pipe)
            ax.set_ylim(0, math.log(pipe.language().vocab_size) + 1.5)
            ax.set_xlabel("step")
            ax.set_ylabel("training loss (nats per token)")
            ax.legend(fontsize=8)
            plt.show()

    slider.observe(lambda change: draw(change["new"]), names="value")
    draw(slider.value)
    box = widgets.VBox([slider, summary, output])
    box.slider, box.summary, box.output = slider, summary, output
    return with_text(box, lambda: "\n".join(html_text(describe(lr)) for lr in lrs)
                     + "\n(move the slider in JupyterLab to see each curve)")
