# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (debug course)
#     language: python
#     name: debug-course
# ---

# %% [markdown]
# # 05 · Training improves, validation worsens: which of four causes?
#
# **What you learn.**
# * Three causes open the same gap between a training and a validation curve: **overfitting**, a
#   **distribution shift**, and an **evaluation bug**. Each has one cheap test that can falsify it.
# * Compare like with like: the same mode (dropout off), the same loss terms, the same denominator;
#   and what `.eval()` reaches.
# * Audit train/validation overlap (exact and near duplicates) and split by group, and see which way
#   leakage moves a validation curve.
# * Fit preprocessing statistics on the training split only.
# * Close the loop: fix the cause at the right depth and re-run the test that saw the symptom.
# * Debug a **mystery pipeline** yourself: write the falsifying test, name the cause and write the
#   fix, graded on pipelines you have never seen.
#
# **Time.** Under 40 seconds of computation on a laptop CPU (`make bench` times every notebook on
# yours). **GPU:** not needed anywhere.

# %%
import torch
import matplotlib.pyplot as plt

torch.set_num_threads(1)  # tiny models: one thread is fastest and does not fight other processes
_ = torch.manual_seed(0)  # returns the generator; assigned so it is not printed

# %% [markdown]
# ## The symptom, four times
#
# A small version of the course pipeline (one layer, 16-token windows, 150 steps) so that every run
# here takes a second or two. The healthy run has 4096 training windows. Three broken variants from
# the catalogue: a training set of four batches (`train-set-too-small`), validation drawn from another
# Markov chain (`val-from-another-source`), and a validation loss with label smoothing that training
# does not use (`eval-label-smoothing`). The last two change only how validation is measured, so they
# score the *same trained model* as the healthy run.

# %% tags=["demo"]
from course import ModelConfig, Pipeline
from course.bugs import inject
from course.reference.train import evaluate
from course.lessons import valgap
from course.toolkit import overlap

BASE = Pipeline().replace(seq_len=16, model=ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                          n_train=4096, n_val=256, batch_size=16, steps=150, lr=3e-2, warmup=10)
lang = BASE.language()
floor = lang.loss_floor(BASE.seq_len)
print(f"window floor for {BASE.seq_len}-token windows: {floor:.4f} nats (the best average over fresh windows); "
      f"entropy rate {lang.entropy_rate:.4f}")

shift_pipe = inject(BASE, "val-from-another-source")
evalbug_pipe = inject(BASE, "eval-label-smoothing")
overfit_pipe = inject(BASE, "train-set-too-small")
healthy_run, shared_curves = valgap.curves(BASE, {"healthy": BASE, "shift": shift_pipe, "eval bug": evalbug_pipe},
                                           steps=BASE.steps, every=25, seed=1, progress=True)
overfit_run, overfit_curves = valgap.curves(overfit_pipe, {"overfitting": overfit_pipe}, steps=BASE.steps, every=25, progress=True)
print(f"training windows: healthy {BASE.n_train}, too small {overfit_pipe.n_train}")

# %% [markdown]
# "train" is the eval path on 256 training windows; "validation" is the eval path on each variant's
# validation split. The dotted line is the window floor: the best mean loss any model can reach *on
# average* over fresh windows (the first target has one token of context, so it sits a little above
# the entropy rate).

# %% tags=["demo"]
panels = {"healthy": shared_curves, "overfitting": overfit_curves, "shift": shared_curves, "eval bug": shared_curves}
fig, axes = plt.subplots(1, 4, figsize=(13, 3.2), sharey=True)
for ax, (name, c) in zip(axes, panels.items()):
    ax.plot(c["step"], c["train"], "o-", label="train")
    ax.plot(c["step"], c[name], "s-", label="validation")
    ax.axhline(floor, color="grey", linestyle=":", label="window floor")
    ax.set_title(name)
    ax.set_xlabel("step")
    ax.set_ylim(0, 4)
axes[0].set_ylabel("loss (nats per scored token)")
axes[0].legend(fontsize=8)
fig.suptitle("Train improves, validation does not: four runs")
plt.show()

# %% tags=["demo"]
for name, c in panels.items():
    print(f"{name:>12}: train {c['train'][-1]:.3f}, validation {c[name][-1]:.3f}, gap {c[name][-1] - c['train'][-1]:+.3f}")

# %% [markdown]
# The shapes differ (the overfitting curve turns up, the shifted one drifts up, the eval bug runs
# parallel), but a shape is a hint, not a test: a shorter run, another learning rate or another shift
# makes them look alike. Each cause makes a different **prediction** that a cheap test can check:
#
# | cause | prediction | test |
# |---|---|---|
# | evaluation bug | the eval path disagrees with a reference on the *same* data | score training windows with the eval path and with `reference_loss` (eval mode, reference loss, same denominator); twice |
# | overfitting | new samples from the *training* source score like validation | score fresh windows of the training source |
# | shift | new samples from the training source score like training; only validation is off | the same fresh windows |
# | leakage | validation shares windows with training | the overlap audit (needs no model) |
#
# ## Test 1: compare like with like
#
# `valgap.eval_path_check(model, pipe)` evaluates 256 *training* windows with the pipeline's eval path
# twice and once with `valgap.reference_loss` (`model.eval()`, mean cross-entropy over scored targets,
# the same batches). A healthy eval path gives the same number, bit for bit.

# %% tags=["demo"]
checks = {"healthy": (healthy_run.model, BASE), "overfitting": (overfit_run.model, overfit_pipe),
          "shift": (healthy_run.model, shift_pipe), "eval bug": (healthy_run.model, evalbug_pipe)}
for name, (model, p) in checks.items():
    c = valgap.eval_path_check(model, p)
    print(f"{name:>12}: eval path {c.eval_path:.4f}, reference {c.reference:.4f}, again {c.eval_path_again:.4f} -> agrees: {c.agrees}")

# %% [markdown]
# Only the eval bug fails. Overfitting and shift pass: their numbers are measured correctly, they are
# just bad. The check proves the eval path *measures the training loss* on training data; it cannot
# prove that validation data are the right data.
#
# ### Dropout in evaluation
#
# With dropout, the same mode matters. Two modules below drop with p = 0.5: one is `nn.Dropout`, the
# other calls `F.dropout(x, p)` in its forward. Both are put in eval mode and applied to ten ones.
#
# **Predict.** After `.eval()`, how many of the ten outputs of the `F.dropout` module are still
# changed (not 1.0)?

# %%
prediction = None  # your guess: how many of the 10 outputs F.dropout(x, 0.5) changes after .eval() (0 to 10)

# %%
import torch.nn as nn
from course.reference.model import FunctionalDropout
from course.exercises.record import reveal

ones = torch.ones(10)
print("nn.Dropout(0.5) after .eval():      ", nn.Dropout(0.5).eval()(ones).tolist())
_ = torch.manual_seed(0)
functional_out = FunctionalDropout(0.5).eval()(ones)
print("F.dropout(x, 0.5) after .eval():    ", functional_out.tolist())
reveal("outputs F.dropout still changes after .eval()", prediction, int((functional_out != 1).sum()))

# %% [markdown]
# `nn.Dropout` obeys `.eval()`; `F.dropout(x, p)` does not, because its `training` argument defaults
# to `True`: the model's `.eval()` sets a flag on modules and never reaches a function call.

# %% [markdown]
# Now a model with dropout 0.1 (trained once, for 200 steps), evaluated three ways: the healthy eval
# path, an eval path that forgets `model.eval()` (`dropout-left-on-in-eval`), and the same weights in
# a model whose dropout is written as `F.dropout` (`functional-dropout-ignores-eval`: training is
# bit-identical, since both draw the same random masks).
#
# **Predict.** The eval path that forgets `model.eval()` scores the same training windows as the
# reference: will its number be `"higher"`, `"lower"` or `"the same"`?

# %% tags=["demo"]
prediction = None  # your guess: "higher", "lower" or "the same" than the reference

# %% tags=["demo"]
from course.reference.train import train

DROP = BASE.replace(model=ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64, dropout=0.1), steps=200)
drop_run = train(DROP, eval_every=0, progress=True)
functional = inject(DROP, "functional-dropout-ignores-eval")
functional_model = functional.build_model(0)
functional_model.load_state_dict(drop_run.model.state_dict())
dropout_cases = {"healthy (nn.Dropout)": (drop_run.model, DROP),
                 "model.eval() forgotten": (drop_run.model, inject(DROP, "dropout-left-on-in-eval")),
                 "F.dropout in the model": (functional_model, functional)}
dropout_checks = {name: valgap.eval_path_check(model, p) for name, (model, p) in dropout_cases.items()}
for name, c in dropout_checks.items():
    print(f"{name:>24}: eval path {c.eval_path:.4f}, reference {c.reference:.4f}, again {c.eval_path_again:.4f} -> agrees: {c.agrees}")
forgot = dropout_checks["model.eval() forgotten"]
reveal("model.eval() forgotten, against the reference", prediction,
       "higher" if forgot.eval_path > forgot.reference else "lower" if forgot.eval_path < forgot.reference else "the same")

# %% [markdown]
# The forgotten `model.eval()` disagrees with the reference (dropout makes a trained model's predictions
# worse on average, so the number is usually higher, and a second evaluation differs from the first).
# `F.dropout` fools the reference too (it
# calls `model.eval()`, which does not reach the function), and shows only because two evaluations of
# the same data differ. Comparing modes the other way round matters as well: the loss logged during
# training is measured *with* dropout on, so a healthy model with dropout scores its own training data
# better in eval mode than its training log says:

# %% tags=["demo"]
logged = sum(drop_run.history["loss"][-20:]) / 20
print(f"logged training loss (train mode, last 20 steps): {logged:.4f}")
print(f"same weights, eval mode, training windows:        {valgap.reference_loss(drop_run.model, valgap.training_probe(DROP), 'val'):.4f}")
print(f"same weights, eval mode, validation windows:      {evaluate(drop_run.model, DROP):.4f}")

# %% [markdown]
# So "validation below training" on a model with dropout is no sign of leakage either: the two
# numbers were taken in different modes.
#
# ## Test 2: fresh samples from the training source
#
# `valgap.fresh(pipe)` is the same pipeline with a validation split of new windows from the
# *training* source (a seed neither split used). Overfitting predicts fresh ≈ validation, far above
# training; a shift predicts fresh ≈ training, and only validation off. "Training" here is what the
# run actually trained on: `valgap.seen_loss(run)` scores the last 8 batches of the run's own batch
# stream with the reference loss, whatever the pipeline's settings say its training set is.

# %% tags=["demo"]
def fresh_sample_test(run, val_pipe):
    """(seen, fresh, validation): reference losses on the batches trained on, on fresh windows of the
    training source, and on val_pipe's validation split."""
    model = run.model
    return (valgap.seen_loss(run), valgap.reference_loss(model, valgap.fresh(val_pipe), "val"),
            valgap.reference_loss(model, val_pipe, "val"))

runs = {"healthy": (healthy_run, BASE), "overfitting": (overfit_run, overfit_pipe), "shift": (healthy_run, shift_pipe)}
for name, (run, p) in runs.items():
    seen, new, val = fresh_sample_test(run, p)
    print(f"{name:>12}: seen {seen:.3f}, fresh {new:.3f}, validation {val:.3f}  (fresh - seen {new - seen:+.3f}, validation - fresh {val - new:+.3f})")

# %% [markdown]
# ## Closing the loop: the fix at the right depth, and the same test again
#
# The overfitting run's cause is its training set of four batches (a subset flag left on). Dropout,
# weight decay or early stopping would shrink the gap and leave the cause in place; the fix at the
# right depth is to train on the whole training set. That fixed pipeline is the healthy pipeline
# itself, and the healthy run at the top trained it on a fresh seed (seed 1; the broken run used
# seed 0): that run is the re-run, so there is nothing to train again. Measure it with the same
# fresh-sample test that saw the gap. The eval bug closes the same way: put back the training
# loss in the eval path and repeat the like-with-like check (no retraining needed, it is the same
# model).

# %% tags=["demo"]
fixed_pipe = overfit_pipe.replace(n_train=BASE.n_train)
assert fixed_pipe.replace(bugs=()) == BASE  # the healthy pipeline, part for part (`bugs` only records the injection)
fixed_run = healthy_run  # BASE trained on seed 1 above: the re-run of the fixed pipeline on a fresh seed
for name, run in {"before the fix": overfit_run, "after the fix": fixed_run}.items():
    seen, new, val = fresh_sample_test(run, run.pipe)
    print(f"{name:>15}: {run.pipe.n_train} training windows, seen {seen:.3f}, fresh {new:.3f}, fresh - seen {new - seen:+.3f}")
evalbug_fixed = evalbug_pipe.replace(eval_loss_fn=None)  # None: the eval path uses the training loss
for name, p in {"eval bug": evalbug_pipe, "eval bug fixed": evalbug_fixed}.items():
    c = valgap.eval_path_check(healthy_run.model, p)
    print(f"{name:>15}: eval path {c.eval_path:.4f}, reference {c.reference:.4f} -> agrees: {c.agrees}; "
          f"validation {evaluate(healthy_run.model, p):.3f}")

# %% [markdown]
# ## Explore: how small must the training set be?
#
# The gap from overfitting grows with how often each window is seen: 150 steps of 16 windows are 2400
# window presentations, about 38 per window at 64 windows and under one at 4096. Two more sizes are
# trained here; the slider shows each run's curves (precomputed, so moving it costs nothing).

# %% tags=["demo"]
size_curves = {64: {"train": overfit_curves["train"], "validation": overfit_curves["overfitting"], "step": overfit_curves["step"]},
               4096: {"train": shared_curves["train"], "validation": shared_curves["healthy"], "step": shared_curves["step"]}}
for n in (256, 1024):
    p = BASE.replace(n_train=n)
    _, c = valgap.curves(p, {"validation": p}, steps=BASE.steps, every=25, progress=True)
    size_curves[n] = c
size_curves = dict(sorted(size_curves.items()))

# %% tags=["demo"]
# NBVAL_IGNORE_OUTPUT
explorer = valgap.gap_explorer(size_curves, floor, steps_times_batch=BASE.steps * BASE.batch_size)
explorer

# %% [markdown]
# ## Leakage: validation that shares windows with training
#
# Leakage does not open a gap; it hides one. The audit needs no model: exact copies (identical
# windows) and near duplicates (windows whose 8-token shingle sets have Jaccard ≥ 0.4 with some
# training window). A low-entropy source repeats short stretches by chance, so the audit of a healthy
# split is the negative control, and so is the audit of fresh windows:

# %% tags=["demo"]
train_windows = BASE.windows("train")
for name, p in {"healthy split": BASE, "fresh windows": valgap.fresh(BASE),
                "val-overlaps-train": inject(BASE, "val-overlaps-train"),
                "val-near-duplicates-train": inject(BASE, "val-near-duplicates-train")}.items():
    print(f"{name:>26}: {overlap.audit(train_windows, p.windows('val'))}")

# %% [markdown]
# An exact copy proves that window is shared; a *rate* of copies or near duplicates means something
# only against the rate of fresh windows, which is what chance gives at this window length (a
# low-entropy source repeats a whole window now and then).
#
# ## Exercise 1: shingle Jaccard
#
# Write `shingle_jaccard(a, b, n)`: the Jaccard similarity |A ∩ B| / |A ∪ B| of the **sets** of
# contiguous `n`-token tuples of the sequences `a` and `b` (lists or 1-D tensors of ints). A sequence
# shorter than `n` has no shingles; return `0.0` when both sets are empty. Return a Python `float` (a
# 0-d tensor is accepted too); it is compared to 1e-9. `course.toolkit.overlap.shingle_jaccard` is switched
# off while this is graded.

# %% nbgrader={"grade": false, "grade_id": "shingle_jaccard", "locked": false, "schema_version": 3, "solution": true}
def shingle_jaccard(a, b, n):
    ### BEGIN SOLUTION
    def shingle_set(seq):
        seq = [int(t) for t in seq]
        return {tuple(seq[i:i + n]) for i in range(len(seq) - n + 1)}
    sa, sb = shingle_set(a), shingle_set(b)
    union = sa | sb
    return len(sa & sb) / len(union) if union else 0.0
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_shingle_jaccard", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import copy as _copy

import torch

from course.toolkit import overlap as _overlap
from course.exercises.grading import graded_calls as _graded_calls

def _jaccard(case):  # shingle_jaccard(a, b, n) on a copy of the case, as a float (None: not a number)
    value = shingle_jaccard(*_copy.deepcopy(case))
    try:
        return float(value)
    except Exception:
        return None

_OFF = (_overlap.shingle_jaccard, _overlap.shingles, _overlap.max_jaccard)
_got = _graded_calls(_jaccard, [([1, 2, 3, 4], [1, 2, 3, 4], 2), ([1, 2, 3, 4], [2, 3, 4, 5], 2), ([1, 2], [3, 4], 3),
                                (torch.tensor([4, 5, 6, 7]), [4, 5, 6, 8], 2), ([2, 2, 2, 2], [2, 2, 3], 2)], off=_OFF)
assert _got[0] == 1.0, "identical sequences have Jaccard 1"
assert _got[1] == 0.5, "shingles {12,23,34} and {23,34,45}: 2 shared of 4"
assert _got[2] == 0.0, "sequences shorter than n have no shingles: return 0.0"
_v = float(_got[3])
assert abs(_v - 0.5) < 1e-9, \
    f"a tensor and a list with shingles {{45,56,67}} and {{45,56,68}} share 2 of 4, got {_v}: compare token ids, not tensor objects"
_v = float(_got[4])
assert abs(_v - 0.5) < 1e-9, f"shingles are a set, repeats count once: {{22}} and {{22,23}} share 1 of 2, got {_v}"
### BEGIN HIDDEN TESTS
import random as _random

from course.exercises.grading import hidden_seed as _hidden_seed
_rng = _random.Random(_hidden_seed("h-05-jac"))
_g = torch.Generator().manual_seed(_rng.getrandbits(62))
# random pairs over a small alphabet (so shingles repeat and are shared), of random lengths: some shorter than n
_trials = [(torch.randint(0, _rng.randint(2, 4), (_rng.randint(0, 12),), generator=_g),
            torch.randint(0, _rng.randint(2, 4), (_rng.randint(0, 12),), generator=_g)) for _ in range(20)]
_trials = [(_a, _b.tolist() if _k % 2 else _b) for _k, (_a, _b) in enumerate(_trials)]  # every other pair: a tensor and a list
_ns = sorted(_rng.sample(range(1, 6), 3))
_got = _graded_calls(_jaccard, [([1, 1, 1, 1, 1], [1, 1, 2], 2), (torch.tensor([5, 6, 7]), [5, 6, 7], 3),
                                ([1, 2, 3], [3, 2, 1], 1), ([1, 2, 3], [3, 2, 1], 2)]
                     + [(_a, _b, _n) for _a, _b in _trials for _n in _ns], off=_OFF)
_expected = [[_overlap.shingle_jaccard(_a, _b, _n) for _n in _ns] for _a, _b in _trials]  # the reference, in this kernel
assert _got[0] == 0.5, "shingles are a set: repeats count once"
assert _got[1] == 1.0, "tensors and lists alike"
assert _got[2] == 1.0 and _got[3] == 0.0, \
    "n=1: the same tokens in any order share every shingle; n=2: the reversed pairs share none"
for _k, ((_a, _b), _want) in enumerate(zip(_trials, _expected)):
    for _j, (_n, _w) in enumerate(zip(_ns, _want)):
        _kind = "a tensor and a list" if _k % 2 else "two tensors"
        _short = " (one shorter than n)" if min(len(_a), len(_b)) < _n else ""
        assert abs(float(_got[4 + _k * len(_ns) + _j]) - _w) < 1e-9, f"wrong for random pair {_k}, {_kind}{_short}, n={_n}"
### END HIDDEN TESTS

# %% [markdown]
# ### Leakage and the validation curve
#
# Take the overfitting model from above (it has memorised its 64 windows). Build validation sets of
# 64 windows in which a growing share are copies of training windows, and score the same model on
# each.
#
# **Predict.** As the copied share grows from 0% to 100%, does this model's validation loss go
# `"up"`, `"down"` or stay `"flat"`?

# %% tags=["demo"]
prediction = None  # your guess: "up", "down" or "flat"

# %% tags=["demo"]
leaked_share = [0.0, 0.25, 0.5, 0.75, 1.0]
small_val = overfit_pipe.replace(n_val=64)
leaked_loss = [evaluate(overfit_run.model, small_val.replace(val_source=valgap.TrainCopies(f))) for f in leaked_share]
for f, loss in zip(leaked_share, leaked_loss):
    print(f"{f:>5.0%} of validation copied from training: validation loss {loss:.3f}")
reveal("validation loss as the copied share grows", prediction,
       "down" if leaked_loss[-1] < leaked_loss[0] - 0.1 else "up" if leaked_loss[-1] > leaked_loss[0] + 0.1 else "flat")

# %% tags=["demo"]
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot([100 * f for f in leaked_share], leaked_loss, "o-", label="validation loss, same model")
ax.axhline(floor, color="grey", linestyle=":", label="window floor")
ax.set_xlabel("share of validation windows copied from training (%)")
ax.set_ylabel("loss (nats per scored token)")
ax.set_title("Leakage lowers validation loss: it hides a gap, it does not open one")
ax.legend()
plt.show()

# %% [markdown]
# Is a validation loss under the dotted line proof of leakage? Only with care: the window floor (like
# the entropy rate) is an *average* over fresh data, and on one small validation set the exact
# generating chain itself scores below it about half the time. The sound comparison is with the exact
# chain's loss **on the same windows**, in standard errors over windows (`valgap.chain_loss`,
# `valgap.margin`):

# %% tags=["demo"]
for f in (0.0, 1.0):
    val_windows = small_val.replace(val_source=valgap.TrainCopies(f)).windows("val")
    model_w = valgap.window_losses(overfit_run.model, val_windows, lang.PAD)
    chain_w = valgap.chain_loss(lang, val_windows, per_window=True)
    diff, in_se = valgap.margin(model_w, chain_w)
    print(f"{f:>5.0%} copied: model {model_w.mean():.3f}, exact chain on the same windows {chain_w.mean():.3f}, "
          f"window floor {floor:.3f}; model - chain {diff:+.3f} nats = {in_se:+.1f} standard errors")

# %% [markdown]
# A model that beats the exact chain on the same windows by many standard errors has seen those
# windows: no model predicts fresh data of this source better than the chain that generates it.
# Beating the floor by a little proves nothing. And on a model that has *not* memorised (the healthy
# run), copies score like fresh windows and the loss barely moves, which is why the audit, not the
# loss, is the test for leakage:

# %% tags=["demo"]
leaky = inject(BASE, "val-overlaps-train")
print(f"healthy model: validation {evaluate(healthy_run.model, BASE):.3f}, half copied {evaluate(healthy_run.model, leaky):.3f}")

# %% [markdown]
# ### Split by document, not by window
#
# Long documents are cut into overlapping windows (17 tokens, one every 4 tokens, so neighbours share
# 13). Split the windows at random and neighbours of one document land on both sides; split whole
# documents and none do.

# %% tags=["demo"]
docs = lang.sample(40, 200, seed=7)
windows, doc_ids = overlap.sliding_windows(docs, length=BASE.seq_len + 1, stride=4)
perm = torch.randperm(len(windows), generator=torch.Generator().manual_seed(0))
cut = len(windows) // 5
print(f"{len(windows)} windows from {len(docs)} documents")
print("random window split:", overlap.audit(windows[perm[cut:]], windows[perm[:cut]]))

# %% [markdown]
# ## Exercise 2: a group split
#
# Write `group_split(groups, val_fraction, seed)`. `groups` is a 1-D tensor with each item's group id
# (here, its document). Return two 1-D `long` tensors of item indices `(train_idx, val_idx)` such that
# every item is in exactly one, no group has items in both, and about `val_fraction` of the *groups*
# (at least one, never all) go to validation (within one group of `val_fraction` × the number of
# groups). The same seed must give the same split; different seeds should give different splits.
# `course.toolkit.overlap.group_split` is switched off while this is graded; warnings are shown, not counted.

# %% nbgrader={"grade": false, "grade_id": "group_split", "locked": false, "schema_version": 3, "solution": true}
def group_split(groups, val_fraction, seed):
    ### BEGIN SOLUTION
    ids = torch.unique(groups)
    k = min(len(ids) - 1, max(1, round(val_fraction * len(ids))))
    val_groups = ids[torch.randperm(len(ids), generator=torch.Generator().manual_seed(seed))[:k]]
    in_val = torch.isin(groups, val_groups)
    return torch.nonzero(~in_val).flatten(), torch.nonzero(in_val).flatten()
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_group_split", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import torch

from course import Pipeline as _Pipeline
from course.toolkit import overlap as _overlap
from course.exercises.grading import graded_calls as _graded_calls

def _split(case):  # group_split called twice on a copy of the groups, the same fraction and seed; indices as lists
    groups, fraction, seed = case
    groups = groups.clone()
    tr, va = group_split(groups, fraction, seed)
    t2, v2 = group_split(groups, fraction, seed)
    if not (isinstance(tr, torch.Tensor) and isinstance(va, torch.Tensor)):
        return {"tensors": False}
    return {"tensors": True, "splits": [t.long().tolist() for t in (tr, va, t2, v2)]}

def _check_group_split(groups, fraction, got):
    assert got["tensors"], "return two tensors of indices"
    tr, va, t2, v2 = (torch.tensor(t, dtype=torch.long) for t in got["splits"])
    assert sorted(tr.tolist() + va.tolist()) == list(range(len(groups))), "every item must be in exactly one split"
    shared = set(groups[tr].tolist()) & set(groups[va].tolist())
    assert not shared, f"groups on both sides: {sorted(shared)[:5]}"
    n_groups, n_val = len(set(groups.tolist())), len(set(groups[va].tolist()))
    assert 1 <= n_val < n_groups and abs(n_val - fraction * n_groups) <= 1, f"{n_val} of {n_groups} groups in validation"
    assert torch.equal(tr, t2) and torch.equal(va, v2), "the same seed must give the same split"
    return set(groups[va].tolist())

# the notebook's documents and their windows' document ids, built here
_docs = _Pipeline().language().sample(40, 200, seed=7)
_, _doc_ids = _overlap.sliding_windows(_docs, length=17, stride=4)
_got = _graded_calls(_split, [(_doc_ids, 0.2, 0), (_doc_ids, 0.2, 1), (_doc_ids, 0.2, 2), (_doc_ids, 0.2, 3),
                              (torch.tensor([8, 8, 3]), 0.9, 0)], off=(_overlap.group_split,))
_ = _check_group_split(_doc_ids, 0.2, _got[0])
assert len({frozenset(_check_group_split(_doc_ids, 0.2, _got[_s])) for _s in (1, 2, 3)}) > 1, \
    "seeds 1, 2 and 3 gave the same split: different seeds should give different splits"
_ = _check_group_split(torch.tensor([8, 8, 3]), 0.9, _got[4])  # two groups (ids 3 and 8): one goes to validation, never both
### BEGIN HIDDEN TESTS
import random as _random

from course.exercises.grading import hidden_seed as _hidden_seed
_rng = _random.Random(_hidden_seed("h-05-grp"))
_g = torch.Generator().manual_seed(_rng.getrandbits(62))
_ids = torch.tensor(_rng.sample(range(1000), _rng.randint(20, 40)))  # random group ids, not 0..n-1
_groups = _ids[torch.randint(0, len(_ids), (_rng.randint(300, 600),), generator=_g)]  # items in random order
_fraction = _rng.choice((0.2, 0.25, 0.3, 0.4, 0.5))
_seeds = _rng.sample(range(1000), 4)
_got = _graded_calls(_split, [(_groups, _fraction, _s) for _s in _seeds]
                     + [(torch.tensor([7, 7, 9, 9, 9, 3]), 0.5, 1), (torch.tensor([2, 5]), 0.9, 0)], off=(_overlap.group_split,))
_splits = {frozenset(_check_group_split(_groups, _fraction, _got[_k])) for _k in range(len(_seeds))}
assert len(_splits) > 1, "random groups, four random seeds: different seeds should give different splits"
_ = _check_group_split(torch.tensor([7, 7, 9, 9, 9, 3]), 0.5, _got[4])
_ = _check_group_split(torch.tensor([2, 5]), 0.9, _got[5])
### END HIDDEN TESTS

# %% [markdown]
# The same documents, split by document:

# %% tags=["demo"]
tr_idx, va_idx = group_split(doc_ids, 0.2, seed=0)
print("group split:        ", overlap.audit(windows[tr_idx], windows[va_idx]))

# %% [markdown]
# ## Preprocessing fitted on the training split only
#
# Leakage needs no shared windows: any statistic fitted on data that include validation has seen
# validation. The simplest statistic a token pipeline fits is a table of next-token counts per
# two-token context (the token form of target encoding, used as an n-gram feature or prior).
# `valgap.fit_context_counts` fits one; `valgap.counts_loss` scores windows with it, over the
# positions that have two tokens of context. The yardstick is the exact chain's loss on the *same*
# positions (`valgap.chain_loss(lang, windows, first=1)`): no table fitted on other data beats it in
# expectation.
#
# **Predict.** With 4096 training windows, will the table fitted on train + validation score the
# 64 validation windows `"lower"`, `"higher"` or `"the same"` as the table fitted on train alone?

# %% tags=["demo"]
prediction = None  # your guess: "lower", "higher" or "the same"

# %% tags=["demo"]
small_val_windows, fresh_windows = lang.sample(64, 17, 2), lang.sample(1024, 17, 3)
chain_val = valgap.chain_loss(lang, small_val_windows, per_window=True, first=1)
print(f"entropy rate {lang.entropy_rate:.4f}; exact chain on these 64 validation windows {chain_val.mean():.4f}")
for n_train in (64, 512, 4096):
    tr = lang.sample(n_train, 17, 1)
    fit_train = valgap.fit_context_counts(tr, lang.vocab_size)
    fit_all = valgap.fit_context_counts(torch.cat([tr, small_val_windows]), lang.vocab_size)
    on_train, on_all = valgap.counts_loss(fit_train, small_val_windows), valgap.counts_loss(fit_all, small_val_windows)
    diff, in_se = valgap.margin(valgap.counts_loss(fit_all, small_val_windows, per_window=True), chain_val)
    print(f"{n_train:>5} training windows: validation {on_train:.3f} (fit on train), {on_all:.3f} (fit on train + val: "
          f"{diff:+.3f} against the exact chain, {in_se:+.1f} SE); fresh windows {valgap.counts_loss(fit_all, fresh_windows):.3f} (fit on train + val)")
reveal("4096 training windows: fit on train + val, against fit on train", prediction,
       "lower" if on_all < on_train else "higher" if on_all > on_train else "the same")

# %% [markdown]
# Fitted on train and validation, the table scores validation lower than fitted on train alone, at
# every size: it has seen the answers. Whether that is *provably* leakage from the loss alone depends
# on the margin: where validation is a large share of the fit, the leaky table beats the exact chain
# on the same windows by many standard errors, which no honest fit does; with 4096 training windows
# the advantage is small and the comparison with the chain (the SE column) no longer proves anything,
# although the leak is still there. The honest number is the one on fresh windows. Fit on the
# training split, then apply the fitted statistic unchanged to validation.
#
# ## Exercise 3: a mystery pipeline
#
# Now you debug. Below are seven pipelines drawn by `course.exercises.mystery.draw` from this notebook's bug
# family: each is healthy or carries one bug, and nothing you can read says which. Every part is an
# opaque `<part>` (the same type and repr whether healthy or broken), every setting shows the healthy
# value (a bug that the catalogue writes as a setting, such as a small training set, lives inside a
# part), and each draw has its own seeds and learning rate, drawn independently of the bug. All you
# get is the symptom: a training loss that falls and a validation loss that may not follow it.
#
# The pipelines are small (one layer, dropout 0.1, 2048 training windows, 256 validation windows,
# 45 steps of 16 windows), so one training takes about half a second. `valgap.trained(pipe)` trains a
# pipeline once and remembers the run, so your test, your namer and your fix can share it.

# %%
from course.exercises import mystery

from course.exercises.sets import SETS

MYSTERIES = SETS["05_validation_gap"]  # the candidates, the base and the seeds; the tests draw the same
MBASE, CANDIDATES = MYSTERIES.base, MYSTERIES.candidates  # MBASE: BASE with dropout 0.1, 2048 windows, 45 steps
mysteries = MYSTERIES.draws()
print(repr(mysteries["mystery 1"].loss_fn), repr(mysteries["mystery 1"].val_source), "(every part looks like this)")

# %% tags=["demo"]
for name, p in mysteries.items():
    run = valgap.trained(p)
    logged = sum(run.history["loss"][-10:]) / 10
    print(f"{name:>10}: lr {p.lr:.3g}, logged training loss {logged:.3f}, validation (its eval path) {evaluate(run.model, p):.3f}")

# %% [markdown]
# The logged training loss is taken in train mode (dropout on), the validation loss by each
# pipeline's own eval path: two numbers that need not be comparable, which is the point. Use the
# tests of this notebook, on the behaviour of each pipeline:
#
# * **like with like**: `evaluate(model, valgap.training_probe(pipe, 64))` twice and
#   `valgap.reference_loss(model, valgap.training_probe(pipe, 64), "val")`: a healthy eval path gives
#   the same number, bit for bit, three times; any model works, even an untrained `pipe.build_model(0)`
#   (`valgap.eval_path_check` is switched off while you are graded: write the comparison);
# * **overlap**: `overlap.audit(pipe.windows("train"), pipe.windows("val"))` (`.exact`, `.near`) against
#   the same audit of fresh windows, `valgap.fresh(pipe).windows("val")`;
# * **fresh samples**: with `run = valgap.trained(pipe)`: `valgap.seen_loss(run)` (the batches it
#   trained on), `valgap.reference_loss(run.model, valgap.fresh(pipe), "val")` (fresh windows of the
#   training source) and `valgap.reference_loss(run.model, pipe, "val")` (the validation split).
#
# **The noise you must tolerate** (measured on healthy draws of this size): fresh − seen and
# validation − fresh are within a few hundredths of a nat; a healthy split's rates of exact copies
# and of near duplicates are within a few percent of fresh windows' (this source is low-entropy: now
# and then a whole window repeats by chance, so one exact copy proves that window shared, not that
# the split leaks). The broken draws move one of these by far more (tenths of a nat or more, or tens
# of percent). Pick thresholds between the two and check them on the draws above.
#
# ### (a) A falsifying test
#
# Write `detect(pipe) -> bool`: `True` if `pipe` has any problem of this notebook (an eval path that
# disagrees with the reference, validation sharing windows with training, overfitting, a shifted
# validation split), `False` for a healthy pipeline. Return a Python or torch bool. Graded like a
# test suite: it must be quiet on every healthy draw and fire on every broken one, including bugs of
# this family you have not seen and draws with other seeds. A pipeline that crashes under your test
# is broken: catch the exception around the pipeline's own calls and return `True` (an exception
# that leaves `detect` is no answer and fails the cell). `course.exercises.mystery.reveal`, `draw`, `make`,
# `touched`, `valgap.eval_path_check` and `valgap.problems` are switched off while it runs.

# %% nbgrader={"grade": false, "grade_id": "detect", "locked": false, "schema_version": 3, "solution": true}
def detect(pipe):
    ### BEGIN SOLUTION
    try:
        model = pipe.build_model(0)
        probe = valgap.training_probe(pipe, 64)
        first, again = evaluate(model, probe), evaluate(model, probe)
        if first != again or abs(first - valgap.reference_loss(model, probe, "val")) > 1e-6:
            return True
        train_windows, honest = pipe.windows("train"), valgap.fresh(pipe)
        shared = overlap.audit(train_windows, pipe.windows("val"))
        chance = overlap.audit(train_windows, honest.windows("val"))
        if shared.exact > chance.exact + 0.1 or shared.near > chance.near + 0.1:
            return True
        run = valgap.trained(pipe)
        fresh_loss = valgap.reference_loss(run.model, honest, "val")
        val_loss = valgap.reference_loss(run.model, pipe, "val")
    except Exception:  # a pipeline that crashes under the test is broken
        return True
    return fresh_loss - valgap.seen_loss(run) > 0.3 or val_loss - fresh_loss > 0.1
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_detect", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.exercises.sets import SETS as _SETS
from course.exercises import mystery as _mystery
from course.lessons import valgap as _valgap
from course.exercises.grading import assert_detector as _assert_detector

_OFF = (_mystery.reveal, _mystery.draw, _mystery.make, _mystery.touched, _valgap.eval_path_check, _valgap.problems)
_mysteries = _SETS["05_validation_gap"].draws()  # the notebook's `mysteries`, drawn again here
_answers = {name: _mystery.reveal(p) for name, p in _mysteries.items()}


def _crashing_eval_mode(model):  # a part that raises: a pipeline that crashes under your test is broken
    raise RuntimeError("this pipeline's eval_mode crashes")


_broken = {n: p for n, p in _mysteries.items() if _answers[n] != "healthy"}
_broken["a pipeline that crashes"] = _SETS["05_validation_gap"].base.replace(eval_mode=_crashing_eval_mode)
_assert_detector(detect, {n: p for n, p in _mysteries.items() if _answers[n] == "healthy"}, _broken, "falsifying test", off=_OFF)
### BEGIN HIDDEN TESTS
from course import ModelConfig as _MC, Pipeline as _Pipeline
_hbase = _Pipeline().replace(seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64, dropout=0.1),
                             n_train=2048, n_val=256, batch_size=16, steps=45, lr=3e-2, warmup=10)
_healthy = {f"healthy draw {s}": _mystery.hidden("healthy", s, _hbase, salt="h-05-d41") for s in (1, 2)}
_broken = {b: _mystery.hidden(b, 3 + i, _hbase, salt="h-05-d41") for i, b in enumerate(
    ("eval-loss-per-sequence", "val-mixes-another-source", "val-near-duplicates-train", "train-set-too-small"))}
_assert_detector(detect, _healthy, _broken, "falsifying test (unseen draws)", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ### (b) Name the cause
#
# Write `name_cause(pipe) -> str`, returning exactly one of `"healthy"`, `"eval-bug"`, `"leakage"`,
# `"overfitting"`, `"shift"`. The order you run the tests in matters: an eval bug corrupts every number
# the eval path gives, so settle the eval path first. Graded on the draws above and on fresh draws
# (other seeds, and bugs of each kind that you have not run); an answer that reads the pipeline's
# settings or reprs, or is always the same, cannot pass. The same functions are switched off.

# %% nbgrader={"grade": false, "grade_id": "name_cause", "locked": false, "schema_version": 3, "solution": true}
def name_cause(pipe):
    ### BEGIN SOLUTION
    model = pipe.build_model(0)
    probe = valgap.training_probe(pipe, 64)
    first, again = evaluate(model, probe), evaluate(model, probe)
    if first != again or abs(first - valgap.reference_loss(model, probe, "val")) > 1e-6:
        return "eval-bug"
    train_windows, honest = pipe.windows("train"), valgap.fresh(pipe)
    shared = overlap.audit(train_windows, pipe.windows("val"))
    chance = overlap.audit(train_windows, honest.windows("val"))
    if shared.exact > chance.exact + 0.1 or shared.near > chance.near + 0.1:
        return "leakage"
    run = valgap.trained(pipe)
    fresh_loss = valgap.reference_loss(run.model, honest, "val")
    if fresh_loss - valgap.seen_loss(run) > 0.3:
        return "overfitting"
    if valgap.reference_loss(run.model, pipe, "val") - fresh_loss > 0.1:
        return "shift"
    return "healthy"
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_cause", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.exercises.sets import SETS as _SETS
from course.exercises import mystery as _mystery
from course.lessons import valgap as _valgap
from course.exercises.grading import assert_names as _assert_names

_OFF = (_mystery.reveal, _mystery.draw, _mystery.make, _mystery.touched, _valgap.eval_path_check, _valgap.problems)
_KIND = {"healthy": "healthy", "eval-label-smoothing": "eval-bug", "eval-loss-per-sequence": "eval-bug",
         "dropout-left-on-in-eval": "eval-bug", "train-set-too-small": "overfitting",
         "val-from-another-source": "shift", "val-mixes-another-source": "shift",
         "val-overlaps-train": "leakage", "val-near-duplicates-train": "leakage"}
_mysteries = _SETS["05_validation_gap"].draws()  # the notebook's `mysteries`, drawn again here
_assert_names(name_cause, {n: (p, _KIND[_mystery.reveal(p)]) for n, p in _mysteries.items()}, "cause", off=_OFF)
### BEGIN HIDDEN TESTS
from course import ModelConfig as _MC, Pipeline as _Pipeline
_hbase = _Pipeline().replace(seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64, dropout=0.1),
                             n_train=2048, n_val=256, batch_size=16, steps=45, lr=3e-2, warmup=10)
_cases = {}
for _i, _b in enumerate(("healthy", "eval-loss-per-sequence", "dropout-left-on-in-eval", "val-near-duplicates-train",
                         "val-mixes-another-source", "train-set-too-small")):
    _p = _mystery.hidden(_b, 20 + _i, _hbase, salt="h-05-c7e")
    _cases[f"fresh draw {_i}"] = (_p, _KIND[_b])
_assert_names(name_cause, _cases, "cause (fresh draws)", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ### (c) The fix
#
# Write `fix(pipe) -> Pipeline`: the pipeline with the broken part replaced by the reference, and
# nothing else changed (`pipe.replace(field=...)`; you may call your `name_cause`). Which field to
# replace is for your tests to tell; the references are
#
# | field | reference value |
# |---|---|
# | `eval_mode` | `course.reference.pipeline.set_eval_mode` |
# | `eval_loss_fn` | `None` (the eval path uses the training loss) |
# | `val_source` | `None` (a held-out split drawn from the training source with the pipeline's `val_seed`) |
# | `batches` | `None` (the epoch-wise shuffles of the whole training set) |
#
# An eval bug lives in `eval_mode` *or* in `eval_loss_fn`, not both: test which (an eval path with
# the reference mode and the pipeline's own loss either agrees with the reference or does not).
# Graded by behaviour on fresh draws of broken pipelines (bugs you ran and bugs you did not): the fix
# may change only the field the bug lives in (a changed setting, or a part that was not broken, fails
# it), and the fixed pipeline is trained on a fresh seed and every test of this notebook
# (`valgap.problems`) must be quiet. No stored number is compared.

# %% nbgrader={"grade": false, "grade_id": "fix", "locked": false, "schema_version": 3, "solution": true}
import course.reference.pipeline

def fix(pipe):
    ### BEGIN SOLUTION
    cause = name_cause(pipe)
    if cause == "eval-bug":
        model = pipe.build_model(0)
        probe = valgap.training_probe(pipe, 64).replace(eval_mode=course.reference.pipeline.set_eval_mode)
        first, again = evaluate(model, probe), evaluate(model, probe)
        if first == again == valgap.reference_loss(model, probe, "val"):
            return pipe.replace(eval_mode=course.reference.pipeline.set_eval_mode)
        return pipe.replace(eval_loss_fn=None)
    if cause in ("shift", "leakage"):
        return pipe.replace(val_source=None)
    if cause == "overfitting":
        return pipe.replace(batches=None)
    return pipe
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_fix", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.exercises import mystery as _mystery
from course.lessons import valgap as _valgap
from course import ModelConfig as _MC, Pipeline as _Pipeline

_OFF = (_valgap.eval_path_check, _valgap.problems)  # check_fix also switches off reveal, draw, make, touched
_mbase = _Pipeline().replace(seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64, dropout=0.1),
                             n_train=2048, n_val=256, batch_size=16, steps=45, lr=3e-2, warmup=10)

def _still_broken(fixed):
    found = _valgap.problems(fixed, seed=7)  # a fresh seed: new initialisation, dropout and batch order
    return "after your fix, trained on a fresh seed: " + "; ".join(found) if found else None

### BEGIN HIDDEN TESTS
_mystery.check_fix(fix, [_mystery.hidden(b, 40 + i, _mbase, salt="h-05-f90") for i, b in enumerate(
    ("eval-loss-per-sequence", "val-mixes-another-source", "val-near-duplicates-train"))],
    _still_broken, "fix (unseen bugs)", off=_OFF)
### END HIDDEN TESTS
_mystery.check_fix(fix, [_mystery.make(b, 30 + i, _mbase) for i, b in enumerate(
    ("dropout-left-on-in-eval", "train-set-too-small", "val-overlaps-train"))]
    + [_mystery.make("eval-label-smoothing", 33, _mbase)],  # a bug in each field of the table
    _still_broken, "fix", off=_OFF)

# %% [markdown]
# ## What each test can and cannot prove
#
# * **Like with like** (eval path against the reference on training windows, twice): a disagreement
#   proves the eval path measures something else or is random. Agreement proves only that it matches
#   the reference: an eval bug the reference shares (`F.dropout` is blind to `.eval()` in both) shows
#   only as two evaluations that differ, and nothing here checks that validation holds the right data.
# * **Fresh samples from the training source**: fresh ≈ validation ≫ training proves the model does
#   not generalise *within* its source (overfitting); fresh ≈ training ≪ validation proves validation
#   differs from the training source (shift). Both need a way to draw fresh data from the training
#   source; on real data, a held-out part of the training source split before anything was fitted.
# * **The overlap audit**: an exact copy proves overlap; a near-duplicate rate means something only
#   against the rate of fresh windows. It cannot see leakage through fitted statistics (the count
#   table), chosen hyper-parameters, or overlap shorter than its shingles.
# * **The entropy rate and the window floor** are averages over fresh data: the exact chain itself
#   scores below them on about half of small validation sets. A validation loss below the exact
#   chain's loss *on the same windows* by several standard errors proves leakage; a loss above it
#   proves nothing about leakage, since copies score like fresh windows on a model that has not
#   memorised them.
# * **The fix** is proved by the same test that saw the symptom, re-run after it (here: on a fresh
#   seed), not by a curve that looks better.
# * The shape of the curves suggests a cause; it does not test one.
