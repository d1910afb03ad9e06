"""The toolkit's checks on the reference pipeline: each one builds, steps or trains a ``Pipeline``
with ``course.reference.train`` and reads the result with a function of ``course.toolkit``.

The toolkit itself takes a model, a batch, a loss function and an optimizer, and never needs the
course's loop; these are its counterparts for a ``Pipeline``, used by the notebooks and the
exercises:

* ``training_moves(pipe)``: does a short run train at all (notebook 00's check);
* ``held_out_symptom(pipe)``: a run's held-out loss against its language's known floors (01);
* ``trace(pipe)``, ``locate(pipe)``: the course's loop with a ``course.toolkit.nonfinite.Locator``
  attached, and the first non-finite tensor it finds (02);
* ``pipeline_step(pipe)``, ``overfit_pipe``, ``rule_explorer``, ``preflight_pipeline(pipe)``: the
  tiny-batch overfit and the pre-flight with the pipeline's own parts (03);
* ``record(pipe, steps)``: per-layer telemetry over a run of the pipeline (03).
"""

from __future__ import annotations

import warnings
from typing import Callable

import torch

from ..toolkit.batch import Batch
from ..toolkit.baselines import chain_loss
from ..toolkit.nonfinite import Event, Finding, Locator, _any_bad, _bad
from ..toolkit.overfit import fit_floor, overfit, overfit_rule, without_step
from ..toolkit.preflight import PreflightReport, preflight
from ..toolkit.telemetry import Telemetry
from .pipeline import Pipeline


# ----- does it train (notebook 00) ----------------------------------------------------------------
def training_moves(pipe, seed: int = 11, steps: int = 40, window: int = 10) -> str | None:
    """``None`` if ``pipe`` trains: run ``steps`` steps from ``seed`` (no evaluation); the mean loss of
    the last ``window`` steps must be at least 0.05 below that of the first ``window`` (a non-finite
    loss fails), and every parameter tensor must move by more than 1e-4. Otherwise the reason.

    It proves the pipeline updates and the loss falls on this seed, not that it learns the right
    thing. Warnings raised while training (a scheduler stepped without an optimizer step) are
    printed to stdout, not raised."""
    from ..toolkit.guards import captured_warnings
    from .train import start, train_steps

    run = start(pipe, seed)
    first = {n: p.detach().clone() for n, p in run.model.named_parameters()}
    with captured_warnings():
        train_steps(run, steps, eval_every=0)
    losses = run.history["loss"]
    drop = sum(losses[:window]) / window - sum(losses[-window:]) / window
    still = [n for n, p in run.model.named_parameters() if (p.detach() - first[n]).abs().max().item() <= 1e-4]
    if not drop >= 0.05:
        return f"trained for {steps} steps, the loss did not fall (drop {drop:+.3f})"
    if still:
        return f"trained for {steps} steps, these tensors did not move: {', '.join(still)}"
    return None


# ----- the held-out loss against the known floors (notebook 01) -----------------------------------
# How a briefly trained run is read against the known floors (``held_out_symptom``). Measured on the
# notebook-01 mystery base (8 symbols, 16 targets a window, 200 steps at batch 32) over 7 languages:
# a healthy run closes all but 4-18% of the gap from the bigram entropy down to the window floor,
# a run with the positions or the context cut off keeps 52-65% of it; a healthy run ends 0.07-0.14
# nats above the exact chain's loss on its validation windows, a run that sees its targets 0.6+ below.
BELOW_CHAIN_MARGIN = 0.05  # nats below the exact chain's loss on the same windows: leakage
STALL_FRACTION = 0.35  # share of the gap bigram entropy -> window floor still open: context unused
MIN_GAP = 0.3  # below this gap (a nearly deterministic language) the stall is read against the unigram entropy


def finite_and_falling(pipe, seed: int = 101, steps: int = 25, min_drop: float = 0.1) -> str | None:
    """``None`` if training ``pipe`` for ``steps`` steps from ``seed`` stays finite (the loop's own
    check does not stop it) and the mean of the last 5 losses (or of all, if fewer) is more than
    ``min_drop`` below the first loss; otherwise the problem. Notebook 02's check of a fixed pipeline: it shows that the
    NaN is gone and the run learns on this seed, not that the fix is the reference part."""
    from .train import start, train_steps

    run = start(pipe, seed)
    train_steps(run, steps, eval_every=0)
    if run.stopped:
        return f"training the fixed pipeline still went {run.stopped}"
    losses = run.history["loss"]
    first, last = losses[0], sum(losses[-5:]) / len(losses[-5:])
    if not last < first - min_drop:
        return (f"the fixed pipeline stayed finite but its loss did not fall by {min_drop:g} "
                f"({first:.3f} -> {last:.3f})")
    return None


def held_out_symptom(pipe, seed: int = 0, run=None) -> str | None:
    """Train ``pipe`` for ``pipe.steps`` on ``seed`` (or read the finished ``run``) and compare its
    held-out loss with the known floors of its language. Returns the problem seen, or ``None``.

    * below the exact chain's loss on the same validation windows by more than
      ``BELOW_CHAIN_MARGIN``: the model sees what it predicts (no honest model beats the chain that
      generated the data, on any set of windows);
    * more than ``STALL_FRACTION`` of the gap from the bigram entropy down to the window floor still
      open: the run does not use the context (or does not learn at all). On a language whose bigram
      entropy is within ``MIN_GAP`` of its floor, seeing one token back is nearly enough, so context
      use cannot be told apart there: the gap is then taken from the unigram entropy, and only "does
      not learn" is caught.

    Needs full windows (``min_len=None``): the exact chain's loss is defined on language tokens only.
    """
    import math

    from .train import train

    if run is None:
        run = train(pipe, seed=seed, eval_every=0)
    lang = pipe.language()
    val = run.final_val_loss
    exact = chain_loss(lang, pipe.windows("val"))
    floor, bigram = lang.loss_floor(pipe.seq_len), lang.bigram_entropy
    top, top_name = (bigram, "bigram") if bigram - floor >= MIN_GAP else (lang.unigram_entropy, "unigram")
    if not math.isfinite(val):
        return f"the held-out loss is {val}"
    if val < exact - BELOW_CHAIN_MARGIN:
        return (f"held-out loss {val:.3f} is below the exact chain's loss {exact:.3f} on the same windows: "
                "the model sees what it predicts")
    if val > floor + STALL_FRACTION * (top - floor):
        return (f"held-out loss {val:.3f} stalls far above the window floor {floor:.3f} "
                f"({top_name} entropy {top:.3f}): the context is not used, or nothing is learned")
    return None


# ----- the first non-finite tensor of a run (notebook 02) -----------------------------------------
def trace(pipe, steps: int = 20, seed: int = 0) -> list[Event]:
    """Run the course's training loop on ``pipe`` (as ``course.reference.train.train_steps`` does: batch,
    forward, loss, zero_grad, backward, clip, update, scheduler) with a ``Locator`` attached, and
    return the events of the first step where a tensor went bad, or of the last step if none did.

    If the forward pass raises after a bad input was recorded (an id out of range makes
    ``nn.Embedding`` raise), the events so far are returned; any other error propagates.
    """
    from .train import batch_at, start  # here, not at the top: course.reference.train imports tqdm

    run = start(pipe, seed)
    model, opt = run.model, run.optimizer
    params = list(model.parameters())
    model.train()
    with warnings.catch_warnings(), Locator(model, opt) as loc:
        warnings.simplefilter("ignore")  # broken pipelines make torch warn; the events say it all
        for s in range(steps):
            loc.new_step(s)
            batch = batch_at(pipe, seed, s)
            try:
                logits = model(batch.inputs)
            except Exception:
                if any(_bad(e) for e in loc.events):
                    return loc.events
                raise
            loss = pipe.loss_fn(logits, batch)
            loc.record_loss(loss)
            opt.zero_grad(set_to_none=True)
            if loss.requires_grad:
                loss.backward()
            loc.record_grads()
            if pipe.clip is not None and any(p.grad is not None for p in params):
                torch.nn.utils.clip_grad_norm_(params, pipe.clip)
            pipe.update(opt)
            run.scheduler.step()
            loc.record_optimizer()
            loc.record_params()
            if _any_bad(loc.events):
                break
    return loc.events


def locate(pipe, steps: int = 20, seed: int = 0) -> Finding | None:
    """The first non-finite tensor of a training run of ``pipe``, within ``steps`` steps, or None."""
    events = trace(pipe, steps, seed)
    bad = next((e for e in events if _bad(e)), None) if _any_bad(events) else None
    return None if bad is None else Finding(bad.step, bad.stage, bad.name)


# ----- overfit and pre-flight with the pipeline's parts (notebook 03) -----------------------------
def pipeline_step(pipe: Pipeline) -> Callable:
    """The step of ``course.reference.train`` built from ``pipe``'s parts (zero_grad, loss, backward, clip,
    ``pipe.update``), without the LR schedule, so a bug in any part travels with it."""

    def step(model, optimizer, batch, loss_fn):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(batch.inputs), batch)
        if loss.requires_grad:
            loss.backward()
        if pipe.clip is not None:
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.grad is not None], pipe.clip)
        pipe.update(optimizer)
        return loss.item()

    return step


def overfit_pipe(pipe: Pipeline, batch: Batch, steps: int, seed: int = 0, loss_fn: Callable | None = None,
                 control: bool = False) -> list[float]:
    """``overfit`` a fresh model of ``pipe`` with ``pipe``'s own optimizer, loss and update, at the
    constant learning rate ``pipe.lr``. ``control=True`` runs the no-step negative control."""
    model = pipe.build_model(seed)
    optimizer = pipe.make_optimizer(model, pipe)
    step_fn = pipeline_step(pipe)
    return overfit(model, optimizer, batch, steps, loss_fn or pipe.loss_fn,
                   without_step(step_fn) if control else step_fn)


def rule_explorer(pipe: Pipeline, batch: Batch, lrs=(1e-4, 1e-3, 3e-3, 1e-2, 3e-2), max_examples: int = 16,
                  runs: dict | None = None):
    """A widget to try the "loss < threshold within N steps" rule on the first rows and tokens of
    ``batch``: sliders for the learning rate, the step budget, the number of examples and tokens, and
    the threshold. Each change reruns one short overfit (cached) and rewrites the ``out`` area with the
    verdict and the lowest loss the batch allows. ``box.controls`` holds the sliders by name.
    ``runs`` seeds the cache with loss histories already trained, keyed ``(lr, steps, examples,
    tokens)``: each must be ``overfit_pipe(pipe.replace(lr=lr), <those rows and tokens>, steps)``."""
    import ipywidgets as w

    controls = {
        "lr": w.SelectionSlider(options=[(f"{x:g}", x) for x in lrs], value=pipe.lr if pipe.lr in lrs else lrs[len(lrs) // 2], description="LR"),
        "steps": w.IntSlider(value=35, min=5, max=100, step=5, description="steps"),
        "examples": w.IntSlider(value=8, min=1, max=min(max_examples, batch.inputs.shape[0]), description="examples"),
        "tokens": w.IntSlider(value=batch.inputs.shape[1], min=4, max=batch.inputs.shape[1], step=4, description="tokens"),
        "threshold": w.FloatLogSlider(value=0.05, base=10, min=-3, max=0, step=0.25, description="threshold"),
    }
    out = w.Output()
    cache: dict = dict(runs or {})

    def render(*_):
        v = {k: c.value for k, c in controls.items()}
        b = Batch(batch.inputs[: v["examples"], : v["tokens"]], batch.targets[: v["examples"], : v["tokens"]], batch.pad_id)
        key = (v["lr"], v["steps"], v["examples"], v["tokens"])
        if key not in cache:
            cache[key] = overfit_pipe(pipe.replace(lr=v["lr"]), b, v["steps"])
        result = overfit_rule(cache[key], v["threshold"], v["steps"])
        text = (f"{v['examples']} examples x {v['tokens']} tokens, LR {v['lr']:g}, {v['steps']} steps\n"
                f"{result}\nlowest loss any model can reach on these examples: {fit_floor(b):.4f}\n")
        out.outputs = ({"output_type": "stream", "name": "stdout", "text": text},)
        box.result = result

    box = w.VBox([w.HBox([controls["lr"], controls["steps"]]),
                  w.HBox([controls["examples"], controls["tokens"], controls["threshold"]]), out])
    box.controls, box.out = controls, out
    for c in controls.values():
        c.observe(render, names="value")
    render()
    return box


def preflight_pipeline(pipe: Pipeline, seed: int = 0, n_examples: int = 8, **kwargs) -> PreflightReport:
    """``preflight`` on a fresh model and optimizer of ``pipe``, the first ``n_examples`` rows of its
    first batch, its loss, and a step made of its parts (``course.reference.diagnose.pipeline_step``)."""
    from .train import batch_at

    model = pipe.build_model(seed)
    optimizer = pipe.make_optimizer(model, pipe)
    full = batch_at(pipe, seed, 0)
    batch = Batch(full.inputs[:n_examples], full.targets[:n_examples], full.pad_id)
    return preflight(model, optimizer, batch, pipe.loss_fn, pipeline_step(pipe), **kwargs)


# ----- per-layer telemetry over a run (notebook 03) -----------------------------------------------
def record(pipe: Pipeline, steps: int, seed: int = 0, progress: bool = False, run=None):
    """Train ``steps`` steps of ``pipe`` (or continue ``run``) with telemetry; returns ``(run, telemetry)``."""
    from .train import start, train_steps

    run = start(pipe, seed) if run is None else run
    named = [(n, p) for n, p in run.model.named_parameters() if p.requires_grad]
    tel = Telemetry([n for n, _ in named], frozen=[n for n, p in run.model.named_parameters() if not p.requires_grad])
    original = run.pipe
    run.pipe = original.replace(update=tel.wrap(original.update, [p for _, p in named]))
    try:
        train_steps(run, steps, eval_every=0, progress=progress)
    finally:
        run.pipe = original
    return run, tel
