# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (debug course)
#     language: python
#     name: debug-course
# ---

# %% [markdown]
# # 03 · Overfit and shuffled-label controls: "can my pipeline learn at all?"
#
# **What you learn.**
# * Run a tiny-batch overfit **with its negative control** (the same run without `optimizer.step()`),
#   and see what a pass certifies: shuffled labels fit just as well; conflicting labels cannot go
#   below the floor the batch itself sets (ln 2).
# * Test the popular "8 samples, loss < 0.05 within 35 steps" rule on the course model, and watch it
#   misfire on runs with no bug.
# * Detect three wrong-gradient bugs with one cheap test each: a parameter left out of the optimizer,
#   a forgotten `zero_grad`, a loss that broadcasts to the wrong shape; fix the forgotten `zero_grad`
#   and re-run the overfit that saw it.
# * **Debug a mystery pipeline** (graded): write the test that tells a pipeline that can learn from
#   one that cannot, name the cause, and fix it.
# * Write a supervised fine-tuning collator and the **mask gate** that checks it (graded).
# * Catch a bug that lets the examples of a batch see each other while its loss looks healthy, with
#   Karpathy's **backprop dependency test**, along the batch and along time (graded).
# * Freeze a base model under a low-rank adapter, prove the base stays bit-identical, and see that
#   "no gradient" is not "no update" under AdamW.
# * Read per-layer telemetry against each layer's own history, and run a reusable pre-flight check.
#
# **Predict, then reveal.** Before each result that is the lesson, a *Predict* cell asks you to write
# your guess into `prediction`; the cell after it prints your guess beside what was measured. Nothing
# there is graded: the point is to commit to an answer before you see it.
#
# **Time.** Under 40 seconds of computation on a laptop CPU (`make bench` times every notebook on
# yours). **GPU:** not needed anywhere.

# %%
import copy
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from course.exercises.record import reveal

torch.set_num_threads(1)  # tiny models: one thread is fastest and does not fight other processes
_ = torch.manual_seed(0)

# %% [markdown]
# ## Overfit eight examples, with a negative control
#
# Take the first 8 windows of the first training batch and train on nothing else. The fit can only be
# judged against the lowest loss *these* examples allow: `fit_floor` groups targets by their whole
# prefix, and where two rows share a prefix but not the next token, no model can do better than the
# entropy of those tokens.

# %%
from course import Pipeline, IGNORE
from course.bugs import inject
from course.reference.train import batch_at
from course.toolkit.overfit import tiny_batch, fit_floor, overfit_rule
from course.reference.diagnose import overfit_pipe

pipe = Pipeline()
lang = pipe.language()
V = lang.vocab_size
tiny = tiny_batch(batch_at(pipe, seed=0, step=0), 8)
print(f"{tiny.inputs.shape[0]} examples x {tiny.inputs.shape[1]} targets, ln(V) = {math.log(V):.4f}, "
      f"lowest possible loss on them = {fit_floor(tiny):.4f}")

# %% [markdown]
# The fit uses the pipeline's own optimizer, loss, clipping and update, at a constant learning rate.
# The negative control is the **same run with the `missing-step` bug**: gradients computed, never applied.

# %% tags=["demo"]
STEPS = 50
fits = {
    "reference": overfit_pipe(pipe, tiny, STEPS),
    "missing-step (negative control)": overfit_pipe(inject(pipe, "missing-step"), tiny, STEPS),
}
for name, losses in fits.items():
    print(f"{name:>32}: loss {losses[0]:.4f} -> {losses[-1]:.4f} after {STEPS} steps")

# %% [markdown]
# ## A fit certifies nothing about meaning
#
# Now the same eight inputs with **shuffled labels**: every row gets another row's targets, so the
# pairs are wrong, but consistent (the same input always has the same label).
#
# **Predict.** After the same 50 steps, what is the loss on the shuffled batch: near the lowest
# possible loss (as the reference above), near ln(V) (nothing learned), or in between? Write a number.

# %% tags=["demo"]
prediction = None  # your guess: the loss on shuffled labels after 50 steps (nats)

# %% tags=["demo"]
from course.toolkit.overfit import shuffled_labels, conflicting_labels

shuffled = shuffled_labels(tiny, seed=1)
fits["shuffled labels"] = overfit_pipe(pipe, shuffled, STEPS)
reveal(f"shuffled labels: loss after {STEPS} steps", prediction,
       f"{fits['shuffled labels'][-1]:.4f} (lowest possible {fit_floor(shuffled):.4f}; ln V {math.log(V):.4f})")

# %% [markdown]
# Next, **conflicting labels**: each row twice, the copy with every target changed, so identical
# inputs carry two labels each. No model can tell the two copies apart.
#
# **Predict.** What is the lowest loss any model can reach on this batch, and where will the
# loss be after 50 steps?

# %% tags=["demo"]
prediction = None  # your guess: the loss on conflicting labels after 50 steps (nats)

# %% tags=["demo"]
conflict = conflicting_labels(tiny, V)
fits["conflicting labels"] = overfit_pipe(pipe, conflict, STEPS)
reveal(f"conflicting labels: loss after {STEPS} steps", prediction,
       f"{fits['conflicting labels'][-1]:.4f} (lowest possible {fit_floor(conflict):.4f}; ln 2 = {math.log(2):.4f})")

# %% [markdown]
# The floor is ln 2 plus whatever the batch's own repeated prefixes add: each target is a coin flip
# between two tokens, and the best prediction is one half each.

# %% tags=["demo"]
fig, ax = plt.subplots(figsize=(7, 3.8))
for name, losses in fits.items():
    ax.plot(losses, label=name)
ax.axhline(math.log(V), color="grey", linestyle=":", label="ln(V)")
ax.axhline(math.log(2), color="black", linestyle="--", label="ln 2 (conflicting labels' floor)")
ax.axhline(0.05, color="red", linestyle=":", label="0.05 (the rule below)")
ax.set_yscale("log")
ax.set_xlabel("step (the same 8 examples every step)")
ax.set_ylabel("training loss (nats, log scale)")
ax.set_title("Overfitting 8 examples: what fits and what cannot")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## The "8 samples, loss < 0.05 within 35 steps" rule
#
# This rule circulates attributed to Karpathy. His "A Recipe for Training Neural Networks" (2019) says
# to overfit a single batch of as few as two examples, increase capacity if needed, and check that
# you reach the lowest achievable loss; it gives no sample count, no step budget and no threshold
# (the CS231n notes gave the same advice earlier). The numbers are someone's policy. Here is what
# that policy says about the course model, with **no bug anywhere**: eight runs below, each a
# healthy pipeline (a small learning rate, dropout, label smoothing, weight decay, a small model,
# shorter examples, conflicting labels, and the reference itself).
#
# **Predict.** How many of the eight pass "loss < 0.05 within 35 steps"?

# %% tags=["demo"]
prediction = None  # your guess: how many of the 8 healthy runs pass the rule (0 to 8)

# %% tags=["demo"]
import dataclasses
from course.toolkit.batch import Batch
from course.toolkit.overfit import smoothed_cross_entropy

small_model = dataclasses.replace(pipe.model, d_model=8, n_head=1, n_layer=1, d_mlp=8)
no_bug_runs = {
    "reference, LR 1e-2": (pipe, tiny),
    "reference, 16 tokens per example": (pipe, Batch(tiny.inputs[:, :16], tiny.targets[:, :16], tiny.pad_id)),
    "LR 1e-4": (pipe.replace(lr=1e-4), tiny),
    "dropout 0.1": (pipe.replace(model=dataclasses.replace(pipe.model, dropout=0.1)), tiny),
    "label smoothing 0.1": (pipe.replace(loss_fn=smoothed_cross_entropy(0.1)), tiny),
    "weight decay 1.0": (pipe.replace(weight_decay=1.0), tiny),
    "low capacity (d_model 8)": (pipe.replace(model=small_model), tiny),
    "conflicting labels": (pipe, conflict),
}
# the reference and the conflicting labels are the runs of the first section (same pipeline, batch and
# seed): the rule reads their first 35 steps instead of training them again
already_run = {"reference, LR 1e-2": fits["reference"], "conflicting labels": fits["conflicting labels"]}
rule_results = {}
for name, (p, b) in no_bug_runs.items():
    losses = already_run[name] if name in already_run else overfit_pipe(p, b, 35)
    rule_results[name] = overfit_rule(losses, threshold=0.05, steps=35)
    print(f"{name:>34}: {rule_results[name]}")
reveal("healthy runs that pass the rule", prediction,
       f"{sum(r.passed for r in rule_results.values())} of {len(rule_results)}")

# %% [markdown]
# Every one of these pipelines is healthy; most miss the rule, and the reference itself passes or
# misses depending on how long the examples are. Treat the threshold and the step budget as a
# knob you set for *your* model and data, compared with the lowest loss the batch allows, never as
# proof of a defect. Explore it: the output below reruns one short overfit for each setting.

# %% tags=["demo"]
# NBVAL_IGNORE_OUTPUT
from course.reference.diagnose import rule_explorer

# its first setting (8 examples, LR 1e-2, 35 steps) is the reference run of the first section: reuse it
explorer = rule_explorer(pipe, tiny_batch(batch_at(pipe, 0, 0), 16),
                         runs={(pipe.lr, 35, 8, tiny.inputs.shape[1]): fits["reference"][:36]})
explorer

# %% [markdown]
# ## Three wrong gradients, three cheap tests
#
# ### A parameter left out of the optimizer
#
# The loss still falls (every other tensor learns), so the curve hides it. One step and a comparison
# by identity does not: `update_report` lists the tensors the optimizer does not hold.

# %% tags=["demo"]
from course.toolkit.checks import update_report
from course.reference.train import start, train_steps
from course.exercises.grading import quiet


def one_step(p):
    run = start(p, 0)
    with quiet():
        return update_report(run.model, run.optimizer, lambda: train_steps(run, 1, eval_every=0))


for name in ("reference", "embedding-not-in-optimizer"):
    r = one_step(pipe if name == "reference" else inject(pipe, name))
    print(f"{name:>28}: cause {r.cause()!r}, not in optimizer {r.not_in_optimizer}, unchanged {r.unchanged}")

# %% [markdown]
# ### A forgotten `zero_grad`
#
# `backward()` *adds* into `.grad`. The test: call the optimizer's `zero_grad`, run backward on a
# batch, do it again on the same batch at the same parameters (no step in between, so nothing moves),
# and compare the two gradients of the output head.
#
# **Predict.** With `zero_grad` forgotten, what is the ratio |second gradient| / |first gradient|?

# %% tags=["demo"]
prediction = None  # your guess: the ratio of the second gradient's norm to the first's

# %% tags=["demo"]
def grad_after_two_backwards(p):
    model = p.build_model(0)
    opt = p.make_optimizer(model, p)
    grads = []
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        p.loss_fn(model(tiny.inputs), tiny).backward()
        grads.append(model.head.weight.grad.clone())
    return grads


ratios = {}
for name in ("reference", "zero-grad-forgotten"):
    g1, g2 = grad_after_two_backwards(pipe if name == "reference" else inject(pipe, name))
    ratios[name] = (g2.norm() / g1.norm()).item()
    print(f"{name:>20}: |grad| first {g1.norm():.5f}, second {g2.norm():.5f}, ratio {ratios[name]:.3f}, "
          f"second == 2 x first exactly: {torch.equal(g2, 2 * g1)}")
reveal("zero_grad forgotten: |second gradient| / |first|", prediction, f"{ratios['zero-grad-forgotten']:.3f}")

# %% [markdown]
# Gradient clipping can hide it: when the gradient is above the clip norm, clipping scales a doubled
# gradient back to the same norm and the same direction. With the pipeline's clip at 1.0:

# %% tags=["demo"]
from course.reference.diagnose import pipeline_step

for name in ("reference", "zero-grad-forgotten"):
    p = pipe if name == "reference" else inject(pipe, name)
    model = p.build_model(0)
    opt = p.make_optimizer(model, p)
    for g in opt.param_groups:
        g["lr"] = 0.0
    norms = []
    for _ in range(2):
        pipeline_step(p)(model, opt, tiny, p.loss_fn)
        norms.append(torch.linalg.vector_norm(torch.cat([q.grad.flatten() for q in model.parameters()])).item())
    print(f"{name:>20}: clipped grad norm step 1 {norms[0]:.4f}, step 2 {norms[1]:.4f}")

# %% [markdown]
# ### The loop closed: fix it where it broke, and re-run the test that saw it
#
# The symptom was "cannot fit eight examples". Lowering the learning rate or clipping harder would
# only hide an accumulating gradient; the fix at the right depth is the part that is broken: the
# optimizer whose `zero_grad` does nothing is replaced by the reference one (`make_optimizer` back to
# `course.reference.pipeline.build_optimizer`). Then the same two detectors run again on the fixed pipeline:
# the overfit of the first section (same batch, same 50 steps, against the same lowest possible
# loss plus 0.1) and the two-backwards ratio.

# %% tags=["demo"]
from course.reference.pipeline import build_optimizer

broken = inject(pipe, "zero-grad-forgotten")
repaired = broken.replace(make_optimizer=build_optimizer)
floor = fit_floor(tiny)
for name, p in (("zero-grad-forgotten", broken), ("fixed (make_optimizer restored)", repaired)):
    losses = overfit_pipe(p, tiny, STEPS)
    g1, g2 = grad_after_two_backwards(p)
    verdict = "fits" if losses[-1] <= floor + 0.1 else "does NOT fit"
    print(f"{name:>32}: loss after {STEPS} steps {losses[-1]:.4f} (lowest possible {floor:.4f}): {verdict}; "
          f"gradient ratio {(g2.norm() / g1.norm()).item():.3f}")

# %% [markdown]
# ### A loss that broadcasts
#
# A regression head returns shape `(N, 1)`, the targets are `(N,)`. Their difference broadcasts to
# `(N, N)`: every prediction is compared with every target. PyTorch's `mse_loss` warns about it (the
# warning is caught and printed below).

# %%
import warnings

x = torch.linspace(-1, 1, 64).unsqueeze(1)
y = 3 * x.squeeze(1) + 0.5  # shape (64,)
lin = torch.nn.Linear(1, 1)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    loss = F.mse_loss(lin(x), y)
print(f"prediction {tuple(lin(x).shape)}, target {tuple(y.shape)}, difference {tuple((lin(x) - y).shape)}")
print(f"warning: {caught[0].message if caught else 'none'}")

# %% [markdown]
# The broadcast loss is minimised by predicting the *mean* target for every input, so the model fits
# a flat line and the loss goes down all the same:

# %%
def fit_line(loss_fn, steps=300):
    torch.manual_seed(0)
    m = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(m(x), y).backward()
        opt.step()
    return m.weight.item(), m.bias.item()


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    print("broadcast (N,1) vs (N,):  slope %.3f, intercept %.3f" % fit_line(F.mse_loss))
print("shapes matched (N,) (N,): slope %.3f, intercept %.3f  (true: 3, 0.5)" % fit_line(lambda p, t: F.mse_loss(p.squeeze(1), t)))

# %% [markdown]
# The catalogue's `loss-broadcast` does the same in the language model: a masked mean written with a
# `(N, 1)` mask over `(N,)` token losses returns their **sum**, with no warning. Two numbers expose it
# at step 0: the loss at initialisation is nowhere near ln(V), and stacking the batch twice doubles a
# sum where a mean would not move.

# %% tags=["demo"]
def loss_and_twice(p):
    model = p.build_model(0)
    twice = Batch(torch.cat([tiny.inputs] * 2), torch.cat([tiny.targets] * 2), tiny.pad_id)
    with torch.no_grad():
        return p.loss_fn(model(tiny.inputs), tiny).item(), p.loss_fn(model(twice.inputs), twice).item()


for name in ("reference", "loss-broadcast"):
    one, two = loss_and_twice(pipe if name == "reference" else inject(pipe, name))
    print(f"{name:>15}: loss at init {one:10.4f} (ln V {math.log(V):.4f}), batch stacked twice {two:10.4f}")

# %% [markdown]
# ## Exercise 1: the mystery pipeline
#
# Time to do it yourself. `course.exercises.mystery.draw` hands you a pipeline drawn by seed from this family:
# healthy, `zero-grad-forgotten`, `loss-broadcast`, `embedding-not-in-optimizer` or `missing-step`.
# It is **opaque**: every part is a `<part>`, every setting shows a healthy value, and its
# configuration (language, data and validation seeds, learning rate between about 0.007 and 0.014,
# warm-up) is drawn independently of the bug, so nothing you can *read* off it says what is wrong.
# You can only *run* it. A small model and short examples keep every test cheap.
#
# Its symptom, next to a healthy draw (the negative control), with the tiny-batch overfit of the first
# section (its own optimizer, loss and update; 40 steps):

# %%
from course.exercises import mystery
from course.reference.model import ModelConfig

MYSTERY_BASE = Pipeline(seq_len=16, model=ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                        batch_size=8, n_train=256, n_val=64)
CANDIDATES = ("healthy", "zero-grad-forgotten", "loss-broadcast", "embedding-not-in-optimizer", "missing-step")
mystery_pipe = mystery.draw(CANDIDATES, seed=7, base=MYSTERY_BASE)
healthy_draw = mystery.make("healthy", seed=0, base=MYSTERY_BASE)


def fresh(p, seed=0):
    """A fresh model and optimizer of ``p`` (built by its own parts) and 8 examples of its first batch."""
    model = p.build_model(seed)
    return model, p.make_optimizer(model, p), tiny_batch(batch_at(p, seed, 0), 8)


for name, p in (("mystery", mystery_pipe), ("healthy draw", healthy_draw)):
    _, _, b = fresh(p)
    losses = overfit_pipe(p, b, 40)
    print(f"{name:>12}: loss {losses[0]:.4f} -> {losses[-1]:.4f} after 40 steps; lowest possible {fit_floor(b):.4f}")
print(f"its parts read: make_optimizer {mystery_pipe.make_optimizer!r}, loss_fn {mystery_pipe.loss_fn!r}, "
      f"update {mystery_pipe.update!r}; the healthy draw's: {healthy_draw.make_optimizer!r}, "
      f"{healthy_draw.loss_fn!r}, {healthy_draw.update!r}")

# %% [markdown]
# The loss falls on the mystery pipeline too: "it learns something" is not "it learns correctly". Of
# the tests above, which would catch each of the four bugs, and which would not? (The overfit alone
# misses at least one of them: a model can fit eight examples with one tensor frozen.)
#
# **(a) The test.** Write `detect(pipe) -> bool`: `True` if `pipe` cannot learn correctly, `False` if
# it is healthy. It is graded like a test suite, by mutation: it must stay quiet on healthy draws
# (other seeds, other learning rates in the range above: that is the noise it must tolerate) and fire
# on broken ones, **including bugs you have not seen here** (other ways a pipeline fails to learn).
# An answer that always says `True`, or always `False`, earns nothing. Return a Python `bool` (or a
# one-element torch/numpy bool). A pipeline that crashes under your test is broken: catch the
# exception around the pipeline's own calls (its parts, and the tools that run them) and return
# `True`; an exception that leaves `detect` is no answer and fails the cell.
#
# What you may use: the pipeline's parts (`p.build_model(seed)`, `p.make_optimizer(model, p)`,
# `p.loss_fn(logits, batch)`, `course.reference.diagnose.pipeline_step(p)` for one step made of its parts),
# `fresh` above, `course.toolkit.overfit` (`overfit_pipe`, `fit_floor`, `tiny_batch`) and `batch_at`. Switched
# off while your answers are graded: `course.toolkit.preflight` (it runs these tests for you),
# `course.toolkit.checks.update_report`, and `course.exercises.mystery.reveal` / `touched` / `draw` / `make`.
#
# Scaffolding: the start below builds the pieces; a few lines per test remain. A check per bug of this
# notebook is enough: the loss at initialisation against ln(V), optimizer membership by identity,
# two backwards on the same batch, and the overfit against `fit_floor` with a margin and a budget you
# measure on healthy draws.

# %% nbgrader={"grade": false, "grade_id": "mystery_detect", "locked": false, "schema_version": 3, "solution": true}
def detect(pipe):
    """True if ``pipe`` cannot learn correctly (any test fails), False if every test passes."""
    try:
        model, opt, batch = fresh(pipe)
    except Exception:  # a pipeline that crashes under your test is broken
        return True
    V = pipe.language().vocab_size
    ### BEGIN SOLUTION
    try:
        loss = pipe.loss_fn(model(batch.inputs), batch)
        if not loss.requires_grad or not math.isfinite(loss.item()) or abs(loss.item() - math.log(V)) > 1.0:
            return True  # no gradient at all, or not a per-token mean near ln(V)
        held = {id(p) for g in opt.param_groups for p in g["params"]}
        if any(id(p) not in held for p in model.parameters() if p.requires_grad):
            return True  # a trainable tensor the optimizer does not hold
        grads = []
        for _ in range(2):  # same batch, same parameters: the second gradient must equal the first
            opt.zero_grad(set_to_none=True)
            pipe.loss_fn(model(batch.inputs), batch).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        if not all(torch.allclose(a, b, rtol=1e-4, atol=1e-8) for a, b in zip(*grads)):
            return True  # gradients accumulate across steps
        losses = overfit_pipe(pipe, batch, 40)
    except Exception:  # a pipeline that crashes under the test is broken
        return True
    return not losses[-1] <= fit_floor(batch) + 0.1  # cannot fit 8 examples (a NaN loss cannot either)
    ### END SOLUTION

# %% [markdown]
# The visible test: two healthy draws, one draw of each bug of this notebook, and a pipeline whose loss
# function crashes.

# %% nbgrader={"grade": true, "grade_id": "test_mystery_detect_visible", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course import Pipeline
from course.exercises import mystery as _mystery
from course.toolkit.checks import update_report as _update_report
from course.exercises.grading import assert_detector
from course.reference.model import ModelConfig as _MC
from course.toolkit.preflight import preflight as _preflight
from course.reference.diagnose import preflight_pipeline as _preflight_pipeline

_OFF = (_preflight, _preflight_pipeline, _update_report, _mystery.reveal, _mystery.touched, _mystery.draw, _mystery.make)
_BASE = Pipeline(seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64), batch_size=8, n_train=256, n_val=64)
_healthy = {f"healthy draw {s}": _mystery.make("healthy", s, _BASE) for s in (11, 12)}
_broken = {n: _mystery.make(n, 13, _BASE) for n in ("zero-grad-forgotten", "loss-broadcast", "embedding-not-in-optimizer", "missing-step")}


def _crashing_loss(logits, batch):  # a part that raises: a pipeline that crashes under your test is broken
    raise RuntimeError("this pipeline's loss crashes")


_broken["a pipeline that crashes"] = _BASE.replace(loss_fn=_crashing_loss)
assert_detector(detect, _healthy, _broken, what="detector", off=_OFF)
### BEGIN HIDDEN TESTS
assert_detector(detect, {"a fresh healthy draw": _mystery.hidden("healthy", 71, _BASE, salt="h-03-v5d")},
                {"a fresh broken draw": _mystery.hidden("zero-grad-forgotten", 72, _BASE, salt="h-03-v5d")},
                what="detector", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: fresh healthy draws, and broken draws of bugs this notebook never showed you.

# %% nbgrader={"grade": true, "grade_id": "test_mystery_detect_hidden", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
from course import Pipeline as _Pipeline
from course.exercises import mystery as _mystery
from course.toolkit.checks import update_report as _update_report
from course.exercises.grading import assert_detector
from course.reference.model import ModelConfig as _MC
from course.toolkit.preflight import preflight as _preflight
from course.reference.diagnose import preflight_pipeline as _preflight_pipeline

_OFF = (_preflight, _preflight_pipeline, _update_report, _mystery.reveal, _mystery.touched, _mystery.draw, _mystery.make)
_BASE = _Pipeline(seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64), batch_size=8, n_train=256, n_val=64)
_healthy = {f"healthy draw {s}": _mystery.hidden("healthy", s, _BASE, salt="h-03-d7c") for s in (1, 2, 3)}
_broken = {n: _mystery.hidden(n, 4, _BASE, salt="h-03-d7c")
           for n in ("lr-zero", "clip-to-zero", "requires-grad-off", "optimizer-on-stale-model", "zero-grad-forgotten")}
assert_detector(detect, _healthy, _broken, what="detector", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# **(b) The cause.** Write `name_cause(pipe) -> str`, returning exactly one of `CANDIDATES`
# (`"healthy"`, `"zero-grad-forgotten"`, `"loss-broadcast"`, `"embedding-not-in-optimizer"`,
# `"missing-step"`). It is graded on fresh draws with seeds you never see. Mind the order of your
# tests: one bug can trip the test written for another (which tensors does `optimizer.zero_grad()`
# reset?).

# %% nbgrader={"grade": false, "grade_id": "mystery_cause", "locked": false, "schema_version": 3, "solution": true}
def name_cause(pipe):
    """One of CANDIDATES: what keeps ``pipe`` from learning, or "healthy"."""
    model, opt, batch = fresh(pipe)
    V = pipe.language().vocab_size
    ### BEGIN SOLUTION
    with torch.no_grad():
        loss = pipe.loss_fn(model(batch.inputs), batch).item()
    if abs(loss - math.log(V)) > 1.0:
        return "loss-broadcast"
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    if any(id(p) not in held for p in model.parameters()):
        return "embedding-not-in-optimizer"  # first: zero_grad never resets a tensor the optimizer does not hold
    grads = []
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        pipe.loss_fn(model(batch.inputs), batch).backward()
        grads.append(model.head.weight.grad.clone())
    if not torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-8):
        return "zero-grad-forgotten"
    before = [p.detach().clone() for p in model.parameters()]
    pipeline_step(pipe)(model, opt, batch, pipe.loss_fn)
    if all(torch.equal(a, p) for a, p in zip(before, model.parameters())):
        return "missing-step"
    return "healthy"
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_cause", "locked": true, "points": 3, "schema_version": 3, "solution": false}
from course import Pipeline
from course.exercises import mystery as _mystery
from course.toolkit.checks import update_report as _update_report
from course.exercises.grading import assert_names
from course.reference.model import ModelConfig as _MC
from course.toolkit.preflight import preflight as _preflight
from course.reference.diagnose import preflight_pipeline as _preflight_pipeline

_OFF = (_preflight, _preflight_pipeline, _update_report, _mystery.reveal, _mystery.touched, _mystery.draw, _mystery.make)
_BASE = Pipeline(seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64), batch_size=8, n_train=256, n_val=64)
_NAMES = ("healthy", "zero-grad-forgotten", "loss-broadcast", "embedding-not-in-optimizer", "missing-step")
assert_names(name_cause, {f"a draw of {n}": (_mystery.make(n, 21, _BASE), n) for n in _NAMES}, what="name_cause", off=_OFF)
### BEGIN HIDDEN TESTS
_cases = {f"hidden draw {i}": (_mystery.hidden(n, 30 + i, _BASE, salt="h-03-c5a"), n) for i, n in enumerate(_NAMES * 2)}
assert_names(name_cause, _cases, what="name_cause", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# **(c) The fix.** Write `fix(pipe) -> Pipeline`: the same pipeline with the broken part replaced by
# the reference one, and nothing else changed: `pipe.replace(make_optimizer=course.reference.pipeline.build_optimizer)`
# (the optimizer holds every parameter and its `zero_grad` works), `pipe.replace(loss_fn=course.toolkit.batch.token_cross_entropy)`
# (a per-token mean) or `pipe.replace(update=course.reference.pipeline.apply_update)` (the step is taken). It
# is graded by behaviour on fresh draws of each bug: a fix may change only the part the bug lives in
# (changing a healthy part, or returning a new pipeline, fails), and the fixed pipeline must then pass
# every check of `course.toolkit.preflight` (loss at init, a mean loss, updates, gradients reset, the overfit to
# the batch's lowest possible loss and its no-step control) on a seed you never see.

# %% nbgrader={"grade": false, "grade_id": "mystery_fix", "locked": false, "schema_version": 3, "solution": true}
from course.reference.pipeline import build_optimizer, apply_update
from course.toolkit.batch import token_cross_entropy


def fix(pipe):
    """``pipe`` with its broken part replaced by the reference part; every other field kept."""
    ### BEGIN SOLUTION
    cause = name_cause(pipe)
    if cause in ("zero-grad-forgotten", "embedding-not-in-optimizer"):
        return pipe.replace(make_optimizer=build_optimizer)
    if cause == "loss-broadcast":
        return pipe.replace(loss_fn=token_cross_entropy)
    if cause == "missing-step":
        return pipe.replace(update=apply_update)
    return pipe
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_fix", "locked": true, "points": 3, "schema_version": 3, "solution": false}
from course import Pipeline
from course.exercises import mystery as _mystery
from course.toolkit.checks import update_report as _update_report
from course.reference.model import ModelConfig as _MC
from course.toolkit.preflight import preflight as _preflight
from course.reference.diagnose import preflight_pipeline as _preflight_pipeline

_OFF = (_preflight, _preflight_pipeline, _update_report)
_BASE = Pipeline(seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64), batch_size=8, n_train=256, n_val=64)


def _still_broken(fixed, seed=5):
    report = _preflight_pipeline(fixed, seed=seed, overfit_steps=40)
    return None if report.ok else f"on a fresh seed the fixed pipeline still fails the pre-flight checks {report.failed()}"


### BEGIN HIDDEN TESTS
_mystery.check_fix(fix, [_mystery.hidden(n, 50 + i, _BASE, salt="h-03-f9e") for i, n in enumerate(
    ("zero-grad-forgotten", "loss-broadcast", "embedding-not-in-optimizer", "missing-step"))],
    lambda fixed: _still_broken(fixed, seed=8), what="fix", off=_OFF)
### END HIDDEN TESTS
_mystery.check_fix(fix, [_mystery.make(n, 41, _BASE) for n in ("zero-grad-forgotten", "loss-broadcast",
                                                                  "embedding-not-in-optimizer", "missing-step")],
                   _still_broken, what="fix", off=_OFF)

# %% [markdown]
# ## Supervised fine-tuning: which tokens may the loss see?
#
# In supervised fine-tuning each example is a prompt and an answer, wrapped in a template:
#
# `user markers + prompt + assistant markers + answer + EOS`
#
# The model must learn to produce the answer and to stop, so the loss supervises **the answer tokens
# and the EOS**, and nothing else: not the user markers, not the prompt, not the assistant markers
# (the answer prefix), not the padding. The markers are ordinary token ids; here the course's
# default template uses the symbols 0 and 1 before the prompt, 2 and 3 before the answer.

# %%
from course.lessons.sft import Template, DEFAULT_TEMPLATE, sft_pipeline, examples_at

sft = sft_pipeline(pipe)
examples = examples_at(sft, 0, 0)
prompt, answer = examples[0]
print(f"template: user {DEFAULT_TEMPLATE.user}, assistant {DEFAULT_TEMPLATE.assistant}; PAD {lang.PAD}, EOS {lang.EOS}")
print(f"example 0: prompt {prompt.tolist()}, answer {answer.tolist()}")

# %% [markdown]
# ## Exercise 2: the collator
#
# Write `collate_sft(examples, template, pad_id, eos_id)`. It returns a `Batch` of next-token
# inputs and targets for the sequences `template.user + prompt + template.assistant + answer + [eos_id]`,
# right-padded with `pad_id` to the longest one: `inputs` are each padded sequence but its last
# position, `targets` the sequence shifted left by one, with `IGNORE` wherever the target is a marker,
# a prompt token or padding. Both tensors are `torch.long` (int64) of shape (rows, longest
# sequence − 1), compared exactly. Do not use the package's `course.toolkit.batch.prompt_answer_batch` or
# `course.lessons.sft.collate_sft`: every test cell switches them off while it runs yours. Markers, prompts
# and answers can have any length, including zero markers; the hidden tests try other templates,
# lengths and ids. A warning your code raises (for example torch's about `torch.tensor(a_tensor)`)
# is printed with the feedback and costs nothing.

# %% nbgrader={"grade": false, "grade_id": "collate_sft", "locked": false, "schema_version": 3, "solution": true}
from course.toolkit.batch import Batch


def collate_sft(examples, template, pad_id, eos_id):
    ### BEGIN SOLUTION
    rows, n_context = [], []
    for prompt, answer in examples:
        context = list(template.user) + prompt.tolist() + list(template.assistant)
        rows.append(context + answer.tolist() + [eos_id])
        n_context.append(len(context))
    width = max(len(r) for r in rows)
    seqs = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        seqs[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    inputs, targets = seqs[:, :-1].clone(), seqs[:, 1:].clone()
    for i, (r, c) in enumerate(zip(rows, n_context)):
        targets[i, : max(c - 1, 0)] = IGNORE  # targets that are still markers or prompt
        targets[i, len(r) - 1:] = IGNORE  # padding after the EOS
    return Batch(inputs, targets, pad_id)
    ### END SOLUTION

# %% [markdown]
# The visible test: two batches written out by hand, the second with no markers, an empty prompt and
# an empty answer.

# %% nbgrader={"grade": true, "grade_id": "test_collate_sft_visible", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import torch

from course import IGNORE as _I  # a short name for the rows below
from course.lessons.sft import Template
import course.lessons.sft as _sft
import course.toolkit.batch as _batch
from course.exercises.grading import graded_calls as _graded_calls


def _rows(case):
    """Your collate_sft on one (examples, template): the dtypes and rows of the batch's inputs and targets."""
    examples, template = case
    b = collate_sft(examples, template, pad_id=16, eos_id=17)
    return {"dtypes": [str(b.inputs.dtype), str(b.targets.dtype)],
            "inputs": b.inputs.tolist(), "targets": b.targets.tolist()}


_none = torch.tensor([], dtype=torch.long)
# both batches in one call of your collate_sft apart (graded_calls), the package's collate_sft switched off there
_got = _graded_calls(_rows, [([(torch.tensor([7, 8]), torch.tensor([9, 5])), (torch.tensor([6]), torch.tensor([4]))],
                              Template(user=(0,), assistant=(2, 3))),
                             ([(_none, torch.tensor([4, 5])), (torch.tensor([3]), _none)], Template())],
                     off=(_sft.collate_sft, _batch.prompt_answer_batch))
_b = _got[0]
assert _b["dtypes"] == ["torch.int64", "torch.int64"], \
    f"inputs and targets must be torch.long (int64), as token ids are: got {_b['dtypes']}"
# row 0: 0 7 8 2 3 9 5 17 ; row 1: 0 6 2 3 4 17 16 16
assert _b["inputs"] == [[0, 7, 8, 2, 3, 9, 5], [0, 6, 2, 3, 4, 17, 16]], f"inputs {_b['inputs']}"
assert _b["targets"][0] == [_I, _I, _I, _I, 9, 5, 17], \
    f"row 0 targets {_b['targets'][0]}: markers and prompt ignored, answer 9 5 and EOS 17 supervised"
assert _b["targets"][1] == [_I, _I, _I, 4, 17, _I, _I], f"row 1 targets {_b['targets'][1]}: padding must be ignored"
_b = _got[1]
# no markers. row 0: (empty prompt) 4 5 17 ; row 1: 3 (empty answer) 17 16
assert _b["inputs"] == [[4, 5], [3, 17]], f"no markers: inputs {_b['inputs']}"
assert _b["targets"] == [[5, 17], [17, _I]], \
    (f"no markers: targets {_b['targets']}; with no markers and an empty prompt there is nothing to ignore "
     "before the answer, and an empty answer still supervises its EOS")
### BEGIN HIDDEN TESTS
import random as _random

import course.lessons.sft as _sft
from course.exercises.grading import hidden_seed as _hidden_seed
_rng = _random.Random(_hidden_seed("h-03-colv"))
_g = torch.Generator().manual_seed(_rng.getrandbits(62))
_V = _rng.randint(8, 16)  # token ids 0.._V-1; the pad and EOS ids are two others
_pad, _eos = _rng.sample(range(_V, _V + 6), 2)


def _markers(lo, hi):
    return tuple(_rng.randrange(_V) for _ in range(_rng.randint(lo, hi)))


_tpls = [("no markers", Template()), ("three user markers, one assistant marker", Template(user=(5, 6, 7), assistant=(1,))),
         ("four equal assistant markers", Template(assistant=(4, 4, 4, 4)))]
_tpls += [(f"random template {_k}", Template(user=_markers(0, 3), assistant=_markers(0, 4))) for _k in (1, 2)]
_cases = []
for _what, _tpl in _tpls:
    _ex = [(torch.randint(0, _V, (_rng.randint(0, 5),), generator=_g), torch.randint(0, _V, (_rng.randint(0, 4),), generator=_g))
           for _ in range(_rng.randint(3, 7))]
    _cases.append((_what, _ex, _tpl))


from course.exercises.grading import tensor_data as _tensor_data, tensor_from_data as _tensor_from_data


def _probe(case):  # apart: the batch's two tensors as plain data (dtype, shape, values)
    examples, template, pad, eos = case
    b = collate_sft(examples, template, pad, eos)
    return {"inputs": _tensor_data(b.inputs), "targets": _tensor_data(b.targets)}


def _same(got, want):  # dtype too: torch.equal alone takes a float batch for its int64 twin
    return got.dtype == want.dtype and torch.equal(got, want)


_got = _graded_calls(_probe, [(_ex, _tpl, _pad, _eos) for _what, _ex, _tpl in _cases],
                     off=(_sft.collate_sft, _batch.prompt_answer_batch))
for (_what, _ex, _tpl), _b in zip(_cases, _got):
    _want = _sft.collate_sft(_ex, _tpl, _pad, _eos)  # the reference
    assert _same(_tensor_from_data(_b["inputs"]), _want.inputs) and _same(_tensor_from_data(_b["targets"]), _want.targets), \
        (f"wrong batch for random examples, {_what} (other pad and EOS ids): compare the dtype (torch.long), the row lengths, "
         "the padding and the ignored targets")
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: the package's pipelines, other seeds, a long answer prefix.

# %% nbgrader={"grade": true, "grade_id": "test_collate_sft_pipelines", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
import random as _random

import torch as _torch

from course import Pipeline as _Pipeline
from course.lessons.sft import Template as _Template, examples_at as _examples_at
from course.reference.train import batch_at as _batch_at
import course.lessons.sft as _sft
import course.toolkit.batch as _batch
from course.exercises.grading import graded_calls as _graded_calls, hidden_seed as _hidden_seed
_rng = _random.Random(_hidden_seed("h-03-colp"))


def _markers(lo, hi):
    return tuple(_rng.randrange(16) for _ in range(_rng.randint(lo, hi)))  # any of the language's 16 symbols


_cases = []
for _what, _tpl in (("the default template", _Template(user=(0, 1), assistant=(2, 3))),
                    ("a random template", _Template(user=_markers(0, 2), assistant=_markers(1, 4)))):
    # a small training set (cheaper windows, the same batches' shape) of a random data seed; a random batch of it
    _p = _sft.sft_pipeline(_Pipeline(n_train=512, data_seed=_rng.randrange(10**6)), _tpl, min_len=6)
    _seed, _step = _rng.randrange(10**6), _rng.randrange(8)
    _lang = _p.language()
    _cases.append((_what, _p, _seed, _step, _examples_at(_p, _seed, _step), _tpl, _lang.PAD, _lang.EOS))

from course.exercises.grading import tensor_data as _tensor_data, tensor_from_data as _tensor_from_data


def _probe(case):  # apart: the batch's two tensors as plain data (dtype, shape, values)
    examples, template, pad, eos = case
    b = collate_sft(examples, template, pad, eos)
    return {"inputs": _tensor_data(b.inputs), "targets": _tensor_data(b.targets)}


def _same(got, want):  # dtype too: torch.equal alone takes a float batch for its int64 twin
    return got.dtype == want.dtype and _torch.equal(got, want)


_got = _graded_calls(_probe, [(_ex, _tpl, _pad, _eos) for _what, _p, _seed, _step, _ex, _tpl, _pad, _eos in _cases],
                     off=(_sft.collate_sft, _batch.prompt_answer_batch))
for (_what, _p, _seed, _step, _ex, _tpl, _pad, _eos), _b in zip(_cases, _got):
    _want = _batch_at(_p, _seed, _step)  # the reference
    assert _same(_tensor_from_data(_b["inputs"]), _want.inputs) and _same(_tensor_from_data(_b["targets"]), _want.targets), \
        (f"wrong batch for a random batch of an SFT pipeline with {_what}: compare the dtype (torch.long), the row lengths, the padding "
         "and the ignored targets")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 3: the mask gate
#
# A collator is one implementation; the gate is the test any collator's batches must pass (yours, a
# library's, one with a bug). Write `mask_gate(batch, examples, template, eos_id)`: raise an exception
# (a `ValueError` or `AssertionError` whose message names the problem) unless the batch supervises
# exactly the answer tokens and the EOS of each example, with the right ids, and ignores the markers,
# the prompt and the padding; return normally otherwise. Only `ValueError` and `AssertionError` count
# as a rejection: any other exception (an `IndexError` on a short row, say) fails the test as a crash.
# It is graded like a test suite: it must accept healthy batches (other templates, lengths, seeds)
# and reject broken ones, including variants you have not seen. A gate that always passes, or always
# fails, earns nothing. (The package has `course.lessons.sft.mask_gate`; every test cell switches it off, with
# the package's collators, while it runs yours.)

# %% nbgrader={"grade": false, "grade_id": "mask_gate", "locked": false, "schema_version": 3, "solution": true}
def mask_gate(batch, examples, template, eos_id):
    ### BEGIN SOLUTION
    if batch.inputs.shape != batch.targets.shape or batch.inputs.shape[0] != len(examples):
        raise ValueError("the batch does not hold one row per example")
    for i, (prompt, answer) in enumerate(examples):
        context = list(template.user) + prompt.tolist() + list(template.assistant)
        seq = context + answer.tolist() + [eos_id]
        n = len(seq) - 1
        row_x, row_y = batch.inputs[i].tolist(), batch.targets[i].tolist()
        if n > len(row_x) or row_x[:n] != seq[:-1]:
            raise ValueError(f"row {i}: the inputs are not the templated example")
        expected = [IGNORE] * max(len(context) - 1, 0) + seq[max(len(context), 1):] + [IGNORE] * (len(row_y) - n)
        if row_y != expected:
            raise ValueError(f"row {i}: supervised {row_y}, expected {expected}")
    ### END SOLUTION

# %% [markdown]
# The visible test: healthy batches of the SFT pipeline pass; the catalogue's inverted mask and masked
# EOS fail, and so does a batch with the right mask and EOS but the wrong answer ids (each answer
# target is the input token at its own position, not the next one).

# %% nbgrader={"grade": true, "grade_id": "test_mask_gate_visible", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import dataclasses

import torch

from course import IGNORE, Pipeline
from course.bugs import inject
from course.lessons.sft import DEFAULT_TEMPLATE, Template, examples_at, sft_pipeline
from course.toolkit.batch import Batch
from course.reference.train import batch_at
import course.lessons.sft as _sft
import course.toolkit.batch as _batch
from course.exercises.grading import assert_detector, fires

_GATE_OFF = (_sft.mask_gate, _sft.collate_sft, _batch.prompt_answer_batch)
_pipe = Pipeline()  # the notebook's `pipe`, built here
_sft_pipe, _EOS = sft_pipeline(_pipe), _pipe.language().EOS  # and its `sft`


def _gate_case(p, seed, tpl=DEFAULT_TEMPLATE):
    return batch_at(p, seed, 0), examples_at(p, seed, 0), tpl


_healthy = {f"seed {s}": _gate_case(_sft_pipe, s) for s in (0, 1)}
_broken = {n: _gate_case(inject(_sft_pipe, n), 0) for n in ("prompt-answer-mask-inverted", "eos-masked")}
_good, _ex, _t = _healthy["seed 0"]
_answer = (_good.targets != IGNORE) & (_good.targets != _EOS)  # the answer targets, EOS left right
_unshifted = Batch(_good.inputs, torch.where(_answer, _good.inputs, _good.targets), _good.pad_id)
assert not torch.equal(_unshifted.targets, _good.targets), "grader: the unshifted batch equals the healthy one"
_broken["right mask and EOS, answer targets not shifted"] = (_unshifted, _ex, _t)
assert_detector(lambda c, eos=_EOS: fires(mask_gate, c[0], c[1], c[2], eos), _healthy, _broken, what="mask gate", off=_GATE_OFF)
### BEGIN HIDDEN TESTS
import random as _random

from course.exercises.grading import hidden_seed as _hidden_seed
_rng = _random.Random(_hidden_seed("h-03-gatev"))
_tpl2 = Template(user=tuple(_rng.randrange(16) for _ in range(_rng.randint(0, 2))),  # markers: any of the 16 symbols
                 assistant=tuple(_rng.randrange(16) for _ in range(_rng.randint(1, 3))))
_sft2 = sft_pipeline(_pipe.replace(seq_len=20, model=dataclasses.replace(_pipe.model, n_ctx=20), n_train=512,
                                   data_seed=_rng.randrange(10**6)), _tpl2, min_len=5)
_s1, _s2, _s3 = _rng.sample(range(10**6), 3)
_hidden_broken = {f"{n}, random template and batch": _gate_case(inject(_sft2, n), _s3, _tpl2)
                  for n in ("prompt-answer-mask-inverted", "eos-masked")}
for _k in range(8):  # a random batch whose answer targets are not all equal to their inputs (nearly every one)
    _good, _ex, _t = _gate_case(_sft2, _s3 + _k, _tpl2)
    _answer = (_good.targets != IGNORE) & (_good.targets != _EOS)
    _unshifted = Batch(_good.inputs, torch.where(_answer, _good.inputs, _good.targets), _good.pad_id)
    if not torch.equal(_unshifted.targets, _good.targets):
        break
assert not torch.equal(_unshifted.targets, _good.targets), "grader: every unshifted batch equals its healthy one"
_hidden_broken["right mask and EOS, answer targets not shifted, random template and batch"] = (_unshifted, _ex, _t)
assert_detector(lambda c, eos=_EOS: fires(mask_gate, c[0], c[1], c[2], eos),
                {f"random template, random batch {_k}": _gate_case(_sft2, _s, _tpl2) for _k, _s in ((1, _s1), (2, _s2))},
                _hidden_broken, what="mask gate", off=_GATE_OFF)
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: off-by-one masks, a scored answer prefix, scored padding, a wrong EOS id, and
# supervised targets with the right layout but the wrong values (unshifted, late, constant), on other
# templates.

# %% nbgrader={"grade": true, "grade_id": "test_mask_gate_hidden", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
import random as _random

import torch as _torch

from course import IGNORE as _IGNORE
from course.lessons.sft import Template as _Template
from course.toolkit.batch import Batch as _Batch
import course.lessons.sft as _sft
import course.toolkit.batch as _batch
from course.toolkit.batch import next_token_batch as _ntb, pad_sequences as _pad
from course.exercises.grading import assert_detector, fires, hidden_seed as _hidden_seed


def _bank(tpl, seed):
    """Healthy and broken batches of random examples (token ids 0..11, pad 13, EOS 14), or None when a
    broken variant happens to equal the healthy batch (then the caller draws again)."""
    g = _torch.Generator().manual_seed(seed)
    ex = [(_torch.randint(0, 12, (int(_torch.randint(1, 6, (1,), generator=g)),), generator=g),
           _torch.randint(0, 12, (int(_torch.randint(1, 6, (1,), generator=g)),), generator=g)) for _ in range(6)]
    good = _sft.collate_sft(ex, tpl, 13, 14)
    everything = _ntb(_pad([_torch.cat([tpl.context(p), a]) for p, a in ex], 13, 14), 13)  # every target scored
    ctx = [len(tpl.context(p)) for p, _ in ex]
    ends = [len(tpl.context(p)) + len(a) for p, a in ex]  # target index of the EOS
    def variant(edit):
        t = good.targets.clone()
        for i in range(len(ex)):
            edit(t, i)
        return _Batch(good.inputs.clone(), t, 13)
    broken = {
        "prefix scored": variant(lambda t, i: t[i].__setitem__(slice(0, ctx[i] - 1), everything.targets[i, : ctx[i] - 1])),
        "last prompt target scored": variant(lambda t, i: t[i].__setitem__(ctx[i] - 2, everything.targets[i, ctx[i] - 2])),
        "first answer token ignored": variant(lambda t, i: t[i].__setitem__(ctx[i] - 1, _IGNORE)),
        "EOS target is padding": variant(lambda t, i: t[i].__setitem__(ends[i] - 1, 13)),
        "padding scored": _Batch(good.inputs, _torch.where(good.inputs.roll(-1, 1) == 13, _torch.full_like(good.targets, 13), good.targets), 13),
        # the layout right, the values wrong: only a gate that compares the targets themselves sees these
        "answer targets not shifted": variant(lambda t, i: t[i].__setitem__(slice(ctx[i] - 1, ends[i] - 1),
                                                                            good.inputs[i, ctx[i] - 1: ends[i] - 1])),
        "answer targets one token late": variant(lambda t, i: t[i].__setitem__(slice(ctx[i], ends[i] - 1),
                                                                               good.targets[i, ctx[i] - 1: ends[i] - 2].clone())),
        "answer targets all one token": variant(lambda t, i: t[i].__setitem__(slice(ctx[i] - 1, ends[i] - 1), 12)),
    }
    if any(_torch.equal(b.targets, good.targets) for b in broken.values()):
        return None  # a variant that changed nothing: the caller draws again
    return (good, ex, tpl), {k: (b, ex, tpl) for k, b in broken.items()}


_rng = _random.Random(_hidden_seed("h-03-gateh"))


def _random_template():  # at least one marker, so every prompt's context is two tokens or more
    user = tuple(_rng.randrange(12) for _ in range(_rng.randint(0, 3)))
    return _Template(user=user, assistant=tuple(_rng.randrange(12) for _ in range(_rng.randint(0 if user else 1, 3))))


_healthy, _broken = {}, {}
for _k, _tpl in enumerate((_Template(user=(0, 1), assistant=(2,)), _Template(user=(9, 9), assistant=(3, 4, 5)), _random_template())):
    _what = f"template {_k}" if _k < 2 else "a random template"
    _seed = _rng.randrange(10**6)
    for _try in range(8):  # random examples: draw again while a broken variant equals the healthy batch
        _bnk = _bank(_tpl, _seed + _try)
        if _bnk is not None:
            break
    assert _bnk is not None, f"grader: every draw of {_what} has a broken variant equal to the healthy batch"
    _h, _b = _bnk
    _healthy[f"random examples, {_what}"] = _h
    _broken.update({f"{n} (random examples, {_what})": c for n, c in _b.items()})
assert_detector(lambda c: fires(mask_gate, c[0], c[1], c[2], 14), _healthy, _broken, what="mask gate",
                off=(_sft.mask_gate, _sft.collate_sft, _batch.prompt_answer_batch))
### END HIDDEN TESTS

# %% [markdown]
# The package's gate on the SFT pipeline and the two catalogue bugs, with the fraction of each part
# of the sequence that is supervised:

# %% tags=["demo"]
from course.lessons.sft import mask_gate as package_gate, MaskGateError

for name in ("healthy", "prompt-answer-mask-inverted", "eos-masked"):
    p = sft if name == "healthy" else inject(sft, name)
    try:
        fractions = package_gate(batch_at(p, 0, 0), examples_at(p, 0, 0), DEFAULT_TEMPLATE, lang.EOS)
        print(f"{name:>28}: passes, supervised fraction per part {fractions}")
    except MaskGateError as err:
        print(f"{name:>28}: FAILS: {err}")

# %% [markdown]
# ## Examples that see each other: the backprop dependency test
#
# Every test so far asks whether a pipeline can learn. One more wrong gradient hides from all of them:
# code that lets the examples of a batch see each other. Karpathy's *A Recipe for Training Neural
# Networks* (2019) names the usual culprit (a `view` where a `transpose` or `permute` was meant) and
# warns that such a network often still trains well, because it learns to ignore the other
# examples. The catalogue's `final-norm-over-batch` is one: the model's final normalisation takes its
# mean and variance over the batch axis (`dim=0`) where the features (`dim=-1`) were meant.
#
# Its symptom first. Three healthy seeds and the bug on seed 0, each trained 250 steps on a small
# pipeline (batch 16, 16 tokens per example).
#
# **Predict.** Where does the bug's final training loss land: above the three healthy runs, among
# them, or below them?

# %% tags=["demo"]
prediction = None  # your guess: "above", "among" or "below" the healthy runs' final losses

# %% tags=["demo"]
from course.reference.train import train

MIX_BASE = Pipeline(seq_len=16, model=ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                    batch_size=16, n_train=4096, n_val=64, steps=250, warmup=10)
mix_curves = {f"healthy, seed {s}": train(MIX_BASE, seed=s, eval_every=0).history["loss"] for s in (0, 1, 2)}
mix_curves["final-norm-over-batch, seed 0"] = train(inject(MIX_BASE, "final-norm-over-batch"), seed=0, eval_every=0).history["loss"]
mix_final = {name: sum(c[-20:]) / 20 for name, c in mix_curves.items()}  # mean of the last 20 steps
healthy_finals = [v for name, v in mix_final.items() if name.startswith("healthy")]
for name, v in mix_final.items():
    print(f"{name:>30}: final training loss (mean of the last 20 steps) {v:.4f}")
bug_final = mix_final["final-norm-over-batch, seed 0"]
reveal("the bug's final loss, against the healthy runs'", prediction,
       f"{bug_final:.4f}: {'among' if min(healthy_finals) <= bug_final <= max(healthy_finals) else 'above' if bug_final > max(healthy_finals) else 'below'} "
       f"them (healthy {min(healthy_finals):.4f} to {max(healthy_finals):.4f})")

# %% tags=["demo"]
fig, ax = plt.subplots(figsize=(7, 3.8))
for name, losses in mix_curves.items():
    ax.plot(losses, label=name, color="crimson" if "norm" in name else None, linewidth=1.6 if "norm" in name else 0.9)
mix_lang = MIX_BASE.language()
ax.axhline(mix_lang.bigram_entropy, color="grey", linestyle="--", label="bigram entropy")
ax.axhline(mix_lang.loss_floor(MIX_BASE.seq_len), color="black", linestyle=":", label="window floor")
ax.set_xlabel("training step")
ax.set_ylabel("training loss (nats)")
ax.set_title("A batch-mixing bug trains like the healthy seeds")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# The loss cannot see this bug. Karpathy's test can: make the loss depend on example *i* only (the
# sum of its logits is enough), run the backward pass all the way to the input, and look at which
# examples' inputs receive a gradient. The input here is integer token ids, which have no gradient,
# so take it one step later, at the token embedding's output: a forward hook replaces that output
# with a detached copy that requires grad, a leaf of our own (frozen parameters do not matter then).
#
# **Predict.** Four examples; the loss is the sum of example 0's logits. Under the bug, how many of
# the four examples' embedded inputs get a non-zero gradient?

# %% tags=["demo"]
prediction = None  # your guess: how many of the 4 examples get a gradient from example 0's loss (0 to 4)

# %% tags=["demo"]
def grads_from_example(model, tokens, i=0):
    """Largest |gradient| of the sum of example i's logits on each example's embedded input."""
    kept = {}

    def hook(module, inputs, output):
        kept["x"] = output.detach().requires_grad_(True)
        return kept["x"]

    handle = model.tok.register_forward_hook(hook)
    logits = model(tokens)
    handle.remove()
    (g,) = torch.autograd.grad(logits[i].sum(), kept["x"])
    return g.abs().amax(dim=(1, 2))


dep_tokens = torch.randint(0, MIX_BASE.n_symbols, (4, 8), generator=torch.Generator().manual_seed(0))
per_example = {name: grads_from_example(p.build_model(0), dep_tokens)
               for name, p in (("healthy", MIX_BASE), ("final-norm-over-batch", inject(MIX_BASE, "final-norm-over-batch")))}
for name, g in per_example.items():
    print(f"{name:>22}: largest |gradient| per example {[f'{v:.3g}' for v in g.tolist()]}")
reveal("examples with a non-zero gradient from example 0's loss, under the bug", prediction,
       f"{int((per_example['final-norm-over-batch'] != 0).sum())} (healthy model, the negative control: "
       f"{int((per_example['healthy'] != 0).sum())})")

# %% [markdown]
# On the healthy model the other examples' gradients are exactly 0.0, not small: autograd routes
# nothing to an input the loss does not depend on. So the test compares with zero (with a tolerance
# for nothing but float rounding), and any clear non-zero is a dependence that should not exist.
#
# What the bug costs outside training: run one example alone, as generation does. Its final
# normalisation then subtracts the example's own value (the mean over a batch of one), and every
# position gets the same logits whatever the tokens:

# %% tags=["demo"]
with torch.no_grad():
    for name, p in (("healthy", MIX_BASE), ("final-norm-over-batch", inject(MIX_BASE, "final-norm-over-batch"))):
        alone = p.build_model(0)(dep_tokens[:1])[0]  # (T, V): example 0 run alone
        print(f"{name:>22}: largest difference between the logits of two positions, example run alone: "
              f"{(alone - alone[0]).abs().max().item():.3g}")

# %% [markdown]
# ### The same test along time
#
# A causal model has one more independence to keep: the logits at position *t* must not depend on
# a token after *t*. It is the same test along the other axis: the loss is the sum of the logits at
# position *t* (every example), and no later position may get a gradient. (Notebook 08 asks the same
# question by perturbing later tokens.) `course.toolkit.dependence.dependence(model, tokens, along)`
# runs it for every example, or every position, and returns the matrix of largest gradients.
#
# **Predict.** The catalogue's `causal-mask-off` lets attention see the future. Which of the two
# tests fires on it, and which on `final-norm-over-batch`: "batch", "time" or "both"?

# %% tags=["demo"]
prediction = None  # your guess, e.g. {"causal-mask-off": "time", "final-norm-over-batch": "both"}

# %% tags=["demo"]
from course.toolkit.dependence import dependence

dep_models = {"healthy": MIX_BASE, "final-norm-over-batch": inject(MIX_BASE, "final-norm-over-batch"),
              "causal-mask-off": inject(MIX_BASE, "causal-mask-off")}
forbidden = {"batch": lambda n: ~torch.eye(n, dtype=torch.bool), "time": lambda n: torch.ones(n, n, dtype=torch.bool).triu(1)}
dep_matrices, fired = {}, {}
for name, p in dep_models.items():
    model = p.build_model(0)
    for along in ("batch", "time"):
        d = dependence(model, dep_tokens, along)
        dep_matrices[name, along] = d
        worst = d[forbidden[along](d.shape[0])].max().item()
        fired[name, along] = worst > 1e-6 * d.max().item()
        print(f"{name:>22}, along {along}: largest forbidden gradient {worst:.3g} -> {'FIRES' if fired[name, along] else 'quiet'}")
reveal("which test fires", prediction,
       {name: [a for a in ("batch", "time") if fired[name, a]] for name in dep_models if name != "healthy"})

# %% tags=["demo"]
fig, axes = plt.subplots(2, 3, figsize=(10, 6.2))
for col, name in enumerate(dep_models):
    for row, along in enumerate(("batch", "time")):
        ax = axes[row, col]
        d = dep_matrices[name, along]
        im = ax.imshow((d / d.max()).clamp(min=1e-8).log10(), cmap="viridis", vmin=-8, vmax=0)
        ax.set_title(f"{name}, along {along}", fontsize=9)
        what = "example" if along == "batch" else "position"
        ax.set_xlabel(f"input {what} (embedded)")
        if col == 0:
            ax.set_ylabel(f"loss of {what}")
fig.colorbar(im, ax=axes, label="log10 |gradient| / largest (floored at 1e-8: exact zeros)")
plt.show()

# %% [markdown]
# Healthy: a diagonal (each example depends on itself) and a lower triangle (each position on
# itself and the past). `final-norm-over-batch` fills the off-diagonal but keeps the triangle: it
# mixes examples position by position. `causal-mask-off` keeps the diagonal and fills the upper
# triangle.
#
# ## Exercise 4: the dependency test
#
# Write `leaks(model, tokens, along="batch") -> bool`, the test above as a detector.
#
# * `model` is a torch module: `model(tokens)` returns logits of shape (B, T, V), and its token
#   embedding is `model.tok` (an `nn.Embedding`); the "inputs" of the test are that embedding's
#   outputs. Its parameters may be frozen (`requires_grad=False`), and it may be in training mode
#   with dropout. Do not change its parameters.
# * `tokens` is an int64 tensor of shape (B, T), any sizes the model accepts, with B ≥ 2 for
#   `along="batch"` and T ≥ 2 for `along="time"`.
# * `along="batch"`: return `True` if the logits of some example i have a non-zero gradient on the
#   embedded input of another example j ≠ i. `along="time"`: return `True` if the logits at some
#   position t (of any example) have a non-zero gradient on an embedded input at a later position
#   s > t (of any example). Otherwise `False`.
# * Non-zero means larger in absolute value than 1e-6 times the largest |gradient| of the same
#   loss on the inputs it may depend on (on a healthy model the forbidden ones are exactly 0.0).
# * Return a Python `bool` (or a one-element torch/numpy bool). A model that crashes under your test
#   is broken: catch the exception and return `True`.
#
# It is graded like a test suite, by mutation: quiet on healthy models (other sizes, seeds,
# architectures, dropout, frozen parameters) and firing on broken ones, including ways of mixing
# you have not seen. An answer that always says `True`, or always `False`, earns nothing.
# `course.toolkit.dependence.dependence` is switched off while your answer is graded;
# `grads_from_example` above is yours to reuse (copy what you need into the cell).

# %% nbgrader={"grade": false, "grade_id": "dependency_test", "locked": false, "schema_version": 3, "solution": true}
def leaks(model, tokens, along="batch"):
    """True if an output of ``model`` depends on an input it must not see (``along`` the batch or time)."""
    ### BEGIN SOLUTION
    try:
        kept = {}

        def hook(module, inputs, output):
            kept["x"] = output.detach().requires_grad_(True)  # a leaf of our own: frozen parameters are fine
            return kept["x"]

        handle = model.tok.register_forward_hook(hook)
        try:
            logits = model(tokens)
        finally:
            handle.remove()
        x = kept["x"]
        n = tokens.shape[0] if along == "batch" else tokens.shape[1]
        for i in range(n):
            out = logits[i] if along == "batch" else logits[:, i]
            (g,) = torch.autograd.grad(out.sum(), x, retain_graph=True)
            g = g.abs()
            if along == "batch":
                allowed, forbidden = g[i], torch.cat([g[:i], g[i + 1:]])
            else:
                allowed, forbidden = g[:, : i + 1], g[:, i + 1:]
            if forbidden.numel() and forbidden.max() > 1e-6 * allowed.max():
                return True
        return False
    except Exception:  # a model that crashes under the test is broken
        return True
    ### END SOLUTION

# %% [markdown]
# The visible test: healthy models (one frozen, one with dropout in training mode), the bug above
# along both axes, `causal-mask-off` along both axes, and a model that crashes, on inputs of three
# shapes.

# %% nbgrader={"grade": true, "grade_id": "test_dependency_visible", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import dataclasses

import torch

from course import ModelConfig, Pipeline
from course.bugs import inject
from course.exercises.grading import assert_detector
import course.toolkit.dependence as _dep_mod

_DEP_OFF = (_dep_mod.dependence,)
_P = Pipeline(seq_len=16, model=ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64))


def _tokens(B, T, seed):
    return torch.randint(0, 16, (B, T), generator=torch.Generator().manual_seed(seed))


def _frozen(model):
    for q in model.parameters():
        q.requires_grad_(False)
    return model


class _Crashes(torch.nn.Module):  # a model whose forward raises: broken, whatever the axis
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(18, 8)

    def forward(self, tokens):
        raise RuntimeError("this model crashes")


_mixing, _peeking = inject(_P, "final-norm-over-batch"), inject(_P, "causal-mask-off")
_dropout = _P.replace(model=dataclasses.replace(_P.model, dropout=0.1))
_healthy = {
    "healthy, (4, 8), batch": (_P.build_model(1), _tokens(4, 8, 1), "batch"),
    "healthy, (3, 12), time": (_P.build_model(2), _tokens(3, 12, 2), "time"),
    "healthy with frozen parameters, (2, 5), batch": (_frozen(_P.build_model(3)), _tokens(2, 5, 3), "batch"),
    "healthy with frozen parameters, (2, 5), time": (_frozen(_P.build_model(3)), _tokens(2, 5, 3), "time"),
    "healthy with dropout 0.1 in training mode, (4, 8), batch": (_dropout.build_model(4).train(), _tokens(4, 8, 4), "batch"),
    "final-norm-over-batch, (3, 12), time (it mixes examples, not positions)": (_mixing.build_model(5), _tokens(3, 12, 5), "time"),
    "causal-mask-off, (4, 8), batch (it mixes positions, not examples)": (_peeking.build_model(6), _tokens(4, 8, 6), "batch"),
}
_broken = {
    "final-norm-over-batch, (4, 8), batch": (_mixing.build_model(7), _tokens(4, 8, 7), "batch"),
    "final-norm-over-batch with frozen parameters, (2, 5), batch": (_frozen(_mixing.build_model(8)), _tokens(2, 5, 8), "batch"),
    "causal-mask-off, (3, 12), time": (_peeking.build_model(9), _tokens(3, 12, 9), "time"),
    "a model that crashes, batch": (_Crashes(), _tokens(4, 8, 10), "batch"),
    "a model that crashes, time": (_Crashes(), _tokens(4, 8, 10), "time"),
}
### BEGIN HIDDEN TESTS
import random as _random

from course.exercises.grading import hidden_seed as _hidden_seed
_rng = _random.Random(_hidden_seed("h-03-depv"))


def _draw(B_lo, B_hi, T_lo, T_hi):  # a model seed and random tokens of a random shape (the same seed draws both)
    seed = _rng.randrange(10**6)
    return seed, _tokens(_rng.randint(B_lo, B_hi), _rng.randint(T_lo, T_hi), seed)


_d = [_draw(2, 4, 2, 8) for _ in range(5)] + [_draw(3, 4, 2, 6) for _ in range(2)] + [_draw(2, 4, 2, 8)]
_healthy.update({
    "healthy, random shape, batch": (_P.build_model(_d[0][0]), _d[0][1], "batch"),
    "healthy with frozen parameters, random shape, time": (_frozen(_P.build_model(_d[1][0])), _d[1][1], "time"),
    "healthy with dropout 0.1 in training mode, random shape, time": (_dropout.build_model(_d[2][0]).train(), _d[2][1], "time"),
    "final-norm-over-batch, random shape, time": (_mixing.build_model(_d[3][0]), _d[3][1], "time"),
    "causal-mask-off, random shape, batch": (_peeking.build_model(_d[4][0]), _d[4][1], "batch"),
})
_broken.update({
    "final-norm-over-batch, random shape, batch": (_mixing.build_model(_d[5][0]), _d[5][1], "batch"),
    "final-norm-over-batch with frozen parameters, random shape, batch": (_frozen(_mixing.build_model(_d[6][0])), _d[6][1], "batch"),
    "causal-mask-off, random shape, time": (_peeking.build_model(_d[7][0]), _d[7][1], "time"),
})
### END HIDDEN TESTS
assert_detector(lambda c: leaks(c[0], c[1], along=c[2]), _healthy, _broken, what="dependency test", off=_DEP_OFF)

# %% [markdown]
# Hidden tests: healthy models of other sizes and another architecture, and ways of mixing examples
# or positions that this notebook never showed you.

# %% nbgrader={"grade": true, "grade_id": "test_dependency_hidden", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
import random as _random

import torch as _torch

from course import ModelConfig as _MC, Pipeline as _Pipeline
from course.bugs import inject as _inject
from course.exercises.grading import assert_detector as _assert_detector, hidden_seed as _hidden_seed
import course.toolkit.dependence as _dep


class _RecurrentLM(_torch.nn.Module):
    """A GRU language model with ``.tok``; ``batch_first=False`` on batch-first input runs the
    recurrence along the batch (examples see the ones before them); ``bidirectional`` sees the future."""

    def __init__(self, seed, batch_first=True, bidirectional=False, vocab=18, d=16):
        super().__init__()
        _torch.manual_seed(seed)
        self.tok = _torch.nn.Embedding(vocab, d)
        self.rnn = _torch.nn.GRU(d, d, batch_first=batch_first, bidirectional=bidirectional)
        self.head = _torch.nn.Linear(d * (2 if bidirectional else 1), vocab)

    def forward(self, tokens):
        return self.head(self.rnn(self.tok(tokens))[0])


_rng = _random.Random(_hidden_seed("h-03-deph"))


def _toks(B, T):  # random tokens of shape (B, T), with a random seed for the model that reads them
    seed = _rng.randrange(10**6)
    return seed, _torch.randint(0, 16, (B, T), generator=_torch.Generator().manual_seed(seed))


def _shape(B_lo, B_hi, T_lo, T_hi):
    return _rng.randint(B_lo, B_hi), _rng.randint(T_lo, T_hi)


_Q = _Pipeline(seq_len=24, model=_MC(n_ctx=24, d_model=24, n_head=4, n_layer=2, d_mlp=48, dropout=0.1))
_norms, _time_major = _inject(_Q, "norms-over-batch-and-time"), _inject(_Q, "attention-output-time-major")
_mixing, _peeking = _inject(_Q, "final-norm-over-batch"), _inject(_Q, "causal-mask-off")
_s, _t = zip(*(_toks(*_shape(*lim)) for lim in (
    (3, 5, 5, 10), (2, 3, 12, 20), (4, 6, 4, 8), (2, 4, 6, 11), (2, 5, 3, 7),  # the healthy cases' shapes
    (2, 4, 4, 10), (2, 3, 3, 8), (2, 4, 4, 8), (2, 4, 4, 8), (2, 5, 3, 7), (2, 4, 2, 9), (2, 4, 4, 12), (2, 3, 4, 14))))
_hidden_healthy = {
    "healthy transformer, other size, dropout in training mode, batch": (_Q.build_model(_s[0]).train(), _t[0], "batch"),
    "healthy transformer, other size, eval mode, time": (_Q.build_model(_s[1]).eval(), _t[1], "time"),
    "healthy recurrent model, batch": (_RecurrentLM(_s[2]), _t[2], "batch"),
    "healthy recurrent model, time": (_RecurrentLM(_s[3]), _t[3], "time"),
    "a batch-mixing recurrent model, time": (_RecurrentLM(_s[4], batch_first=False), _t[4], "time"),
}
_hidden_broken = {
    "norms over batch and time, batch": (_norms.build_model(_s[5]).train(), _t[5], "batch"),
    "norms over batch and time, time": (_norms.build_model(_s[6]).eval(), _t[6], "time"),
    "attention output viewed time-major, batch": (_time_major.build_model(_s[7]).eval(), _t[7], "batch"),
    "attention output viewed time-major, time": (_time_major.build_model(_s[8]).eval(), _t[8], "time"),
    "recurrent model run along the batch, batch": (_RecurrentLM(_s[9], batch_first=False), _t[9], "batch"),
    "bidirectional recurrent model, time": (_RecurrentLM(_s[10], bidirectional=True), _t[10], "time"),
    "final-norm-over-batch, other size, batch": (_mixing.build_model(_s[11]).eval(), _t[11], "batch"),
    "causal-mask-off, other size, time": (_peeking.build_model(_s[12]).eval(), _t[12], "time"),
}
_assert_detector(lambda c: leaks(c[0], c[1], along=c[2]), _hidden_healthy, _hidden_broken, what="dependency test",
                 off=(_dep.dependence,))
### END HIDDEN TESTS

# %% [markdown]
# ## Per-layer telemetry, against each layer's own history
#
# Guides quote a "healthy gradient norm" band (0.1 to 3, or 5). No source supports one: the global
# norm depends on the number of parameters, on the loss's reduction and on the token count. The same
# healthy model at initialisation, measured three ways:

# %% tags=["demo"]
def global_grad_norm(model_cfg, reduction):
    model = pipe.replace(model=model_cfg).build_model(0)
    logits = model(tiny.inputs)
    F.cross_entropy(logits.flatten(0, 1), tiny.targets.flatten(), reduction=reduction).backward()
    return torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()])).item(), model.num_params()


for d in (16, 48, 128):
    cfg = dataclasses.replace(pipe.model, d_model=d, d_mlp=3 * d)
    (g_mean, n), (g_sum, _) = global_grad_norm(cfg, "mean"), global_grad_norm(cfg, "sum")
    print(f"d_model {d:>3} ({n:>6} parameters): global grad norm, mean loss {g_mean:.3f}; summed loss {g_sum:.1f}")

# %% [markdown]
# So compare each layer with its own recent past instead. `record` trains the reference pipeline and
# records per-layer statistics at every step; after step 30 the run's learning rate is raised 20-fold
# (a config change mid-run), and the run continues for 15 steps.

# %% tags=["demo"]
from course.reference.diagnose import record
from course.toolkit.telemetry import robust_z

BEFORE, AFTER = 30, 15  # steps at the pipeline's LR, then at 20x
run, tel_before = record(pipe, BEFORE, seed=0, progress=True)
base_model = copy.deepcopy(run.model)  # kept for the adapter section below
run.scheduler.base_lrs = [20 * lr for lr in run.scheduler.base_lrs]
run, tel_after = record(pipe, AFTER, run=run, progress=True)
names = tel_before.names
rel = torch.cat([tel_before.table("rel_update"), tel_after.table("rel_update")])
z = robust_z(rel)
print(f"{len(names)} layers x {rel.shape[0]} steps recorded")

# %% tags=["demo"]
fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
im0 = axes[0].imshow(rel.log10().clamp(-4, 0).T, aspect="auto", cmap="viridis")  # zero-init biases: huge at step 0
axes[0].set_title("log10 relative update per layer (clipped to [-4, 0])")
im1 = axes[1].imshow(z.abs().clamp(max=50).T, aspect="auto", cmap="magma")
axes[1].set_title("|robust z| against the layer's last 20 steps")
for ax, im in zip(axes, (im0, im1)):
    ax.axvline(BEFORE, color="white", linestyle="--")
    ax.set_xlabel("step (dashed: LR raised 20x)")
    fig.colorbar(im, ax=ax)
axes[0].set_yticks(range(len(names)), names, fontsize=6)
axes[0].set_ylabel("parameter tensor")
plt.show()

# %% [markdown]
# The negative control is the first 30 steps of the same run: the largest score there, against the
# largest after the change (the threshold is a knob, here 15):

# %% tags=["demo"]
print(f"max |z| steps 0-{BEFORE - 1} (healthy): {z[:BEFORE].abs().max():.1f}; "
      f"steps {BEFORE}-{BEFORE + AFTER - 1} (LR x20): {z[BEFORE:].abs().max():.1f}")
flagged = [(s, names[l]) for s, l in (z.abs() > 15).nonzero().tolist()]
print(f"cells above 15: {len(flagged)}, first at step {min(s for s, _ in flagged) if flagged else None}")
print(f"layers flagged: {len({n for _, n in flagged})} of {len(names)}")

# %% [markdown]
# ## An adapter on a frozen base
#
# Take the model trained for 30 steps above as the base. `add_lora` wraps linear layers in a
# low-rank update `B @ A` (rank 4) and freezes every base tensor. `B` starts at zero, so the adapted
# model starts exactly where the base is; and because `A`'s gradient passes through `B`, **`A`
# gets an exactly zero gradient at the first step**, while `B` gets a nonzero one.

# %% tags=["demo"]
from course.lessons.adapters import add_lora, linear_names, base_snapshot, changed_base_tensors

def adapted(freeze=True):
    model = copy.deepcopy(base_model)
    params = add_lora(model, linear_names(model), rank=4, freeze=freeze)
    return model, params

model, adapter_params = adapted()
snapshot = base_snapshot(model)
with torch.no_grad():
    print(f"adapted == base at step 0: {torch.equal(model(tiny.inputs), base_model(tiny.inputs))}")
F.cross_entropy(model(tiny.inputs).flatten(0, 1), tiny.targets.flatten()).backward()
a_grads = [p.grad.abs().max().item() for p in adapter_params[0::2]]
b_grads = [p.grad.abs().max().item() for p in adapter_params[1::2]]
print(f"{len(a_grads)} adapters; largest |grad A| {max(a_grads)}, smallest largest-|grad B| {min(b_grads):.2e}")

# %% [markdown]
# A zero gradient for `A`: so the first optimizer step leaves `A` exactly where it was?
#
# **Predict.** One step of `torch.optim.AdamW(adapter_params, lr=1e-2)`, every other setting at its
# default. Does `A` change (`True` / `False`)?

# %% tags=["demo"]
prediction = None  # your guess: True if A changes at the first AdamW step, False if it stays bit-identical

# %% tags=["demo"]
def a_after_first_step(**adamw_settings):
    m, params = adapted()
    A = params[0]
    before = A.detach().clone()
    opt = torch.optim.AdamW(params, lr=1e-2, **adamw_settings)
    F.cross_entropy(m(tiny.inputs).flatten(0, 1), tiny.targets.flatten()).backward()
    opt.step()
    return before, A.detach().clone(), A.grad.abs().max().item(), opt.param_groups[0]["weight_decay"]


before, after, grad_a, wd = a_after_first_step()
reveal("AdamW with its defaults: does A change at the first step?", prediction,
       f"{not torch.equal(after, before)} (largest |grad A| {grad_a}, weight_decay {wd}; "
       f"A after == (1 - lr x weight_decay) x A before, bit for bit: {torch.equal(after, before * (1 - 1e-2 * wd))})")
before, after, grad_a, wd = a_after_first_step(weight_decay=0.0)
print(f"with weight_decay {wd}: largest |grad A| {grad_a}, A unchanged bit for bit: {torch.equal(after, before)}")

# %% [markdown]
# AdamW's default `weight_decay` is 0.01, and its decay is decoupled from the gradient: every step
# multiplies each parameter it holds by 1 − lr·weight_decay, gradient or not. **No gradient is not no
# update.** (The same is why a "did this tensor move?" test must be read with the optimizer's settings
# in mind: decay alone moves a tensor that learns nothing.)

# %% [markdown]
# Train only the adapters on the 8 examples, then compare every base tensor with its snapshot,
# bit for bit. The negative control forgets to freeze the base (and hands every parameter to the
# optimizer): the same comparison must then find changed tensors.

# %% tags=["demo"]
from course.toolkit.overfit import overfit, plain_step

model.zero_grad(set_to_none=True)
lora_losses = overfit(model, torch.optim.AdamW(adapter_params, lr=1e-2), tiny, 35)
print(f"adapters only, 35 steps: {overfit_rule(lora_losses)}")
print(f"base tensors changed after training the adapters: {changed_base_tensors(model, snapshot)}")

unfrozen, _ = adapted(freeze=False)
unfrozen_snapshot = base_snapshot(unfrozen)
overfit(unfrozen, torch.optim.AdamW(unfrozen.parameters(), lr=1e-2), tiny, 5)
print(f"negative control (base not frozen), tensors changed: {len(changed_base_tensors(unfrozen, unfrozen_snapshot))} of {len(unfrozen_snapshot)}")

# %% [markdown]
# ## A reusable pre-flight check
#
# `course.toolkit.preflight.preflight(model, optimizer, batch, loss_fn, step_fn)` runs every cheap test of
# this notebook on **copies** of your model and optimizer, and reports what each pass can and cannot
# prove. `preflight_pipeline(pipe)` does it for a course pipeline. On the reference:

# %% tags=["demo"]
from course.reference.diagnose import preflight_pipeline

healthy_report = preflight_pipeline(pipe, overfit_steps=STEPS)
print(healthy_report.explain())

# %% [markdown]
# Your detector of Exercise 1 is a hand-made version of this report. As a cross-check once you have
# answered: the report on the mystery pipeline (which checks fail, not which bug it is):

# %% tags=["demo"]
print(preflight_pipeline(mystery_pipe, overfit_steps=40))

# %% [markdown]
# ## What these tests can and cannot prove
#
# * **Overfitting a tiny batch** proves the model, loss and loop can fit *those examples*. It needs
#   its negative control (the same run without `step()`), and it proves nothing about the labels:
#   shuffled labels fit as well. Missing a fixed threshold is not a defect: conflicting labels have a
#   floor (ln 2), and small learning rates, short budgets, dropout, label smoothing, weight decay and
#   low capacity all miss "< 0.05 within 35 steps" with no bug. Compare with `fit_floor`, not 0.
# * **The update report** proves every trainable tensor moves and is held by the optimizer, by
#   identity; not that it moves well.
# * **Two backwards at LR 0** prove gradients do not accumulate between steps; clipping can hide the
#   doubling, so measure before clipping (or with a small loss).
# * **Loss at init near ln(V) and stacking the batch twice** prove the loss is a per-token mean of the
#   right scale; not that it is taken over the right tokens.
# * **The mask gate** proves exactly the answer and EOS tokens are supervised, with the right ids; not
#   that the answers are good.
# * **The backprop dependency test** proves, for the inputs it ran on, that no example's logits depend
#   on another example's input and no position's on a later one: a healthy model's forbidden
#   gradients are exactly zero. It sees only dependences that pass through the token embedding, and
#   a zero at these inputs says nothing of a branch they never take. The loss curve cannot replace
#   it: `final-norm-over-batch` trains like the healthy seeds.
# * **Bit-identical base tensors** prove the adapter left the base alone. With `B = 0`, `A` gets an
#   exactly zero gradient at the first step, but under AdamW's default weight decay (0.01) it still
#   moves: no gradient is not no update.
# * **Your mystery detector** is graded as a test suite: quiet on healthy draws, firing on broken ones
#   it never saw. Each check in it proves one thing; only together do they say "this pipeline can
#   learn these examples", and still nothing about whether the labels mean anything.
# * **Telemetry against a layer's own history** shows *when* a layer changed behaviour; no band says
#   what is healthy, and a flag is a hypothesis to test, not a diagnosis.
