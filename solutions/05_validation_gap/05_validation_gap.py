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
# * Compare like with like: the same mode (dropout off), the same loss terms, the same denominator.
#   `F.dropout(x, p)` ignores `.eval()`.
# * Audit train/validation overlap (exact and near duplicates) and split by group. **Leakage pushes
#   validation loss down**, so a rising validation curve is not its fingerprint.
# * Fit preprocessing statistics on the training split only.
# * Write a diagnosis that names the cause of hidden runs drawn from the bug catalogue.
#
# **Time.** About 40 seconds of computation on a laptop CPU. **GPU:** not needed anywhere.

# %%
import torch
import matplotlib.pyplot as plt

torch.set_num_threads(1)  # tiny models: one thread is fastest and does not fight other processes
_ = torch.manual_seed(0)  # returns the generator; assigned so it is not printed

# %% [markdown]
# ## The symptom, four times
#
# A small version of the course pipeline (one layer, 16-token windows, 200 steps) so that every run
# here takes a second or two. The healthy run has 4096 training windows. Three broken variants from
# the catalogue: a training set of four batches (`train-set-too-small`), validation drawn from another
# Markov chain (`val-from-another-source`), and a validation loss with label smoothing that training
# does not use (`eval-label-smoothing`). The last two change only how validation is measured, so they
# score the *same trained model* as the healthy run.

# %%
from course import ModelConfig, Pipeline
from course.bugs import inject
from course.train import evaluate
from course import valgap, overlap

BASE = Pipeline().replace(seq_len=16, model=ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                          n_train=4096, n_val=256, batch_size=16, steps=200, lr=3e-2, warmup=10)
lang = BASE.language()
floor = lang.loss_floor(BASE.seq_len)
print(f"entropy-rate floor for {BASE.seq_len}-token windows: {floor:.4f} nats (no honest model goes below it)")

shift_pipe = inject(BASE, "val-from-another-source")
evalbug_pipe = inject(BASE, "eval-label-smoothing")
overfit_pipe = inject(BASE, "train-set-too-small")
healthy_run, shared_curves = valgap.curves(BASE, {"healthy": BASE, "shift": shift_pipe, "eval bug": evalbug_pipe},
                                           steps=200, every=25, progress=True)
overfit_run, overfit_curves = valgap.curves(overfit_pipe, {"overfitting": overfit_pipe}, steps=200, every=25, progress=True)
print(f"training windows: healthy {BASE.n_train}, too small {overfit_pipe.n_train}")

# %% [markdown]
# "train" is the eval path on 256 training windows; "validation" is the eval path on each variant's
# validation split. The dotted line is the entropy-rate floor.

# %%
panels = {"healthy": shared_curves, "overfitting": overfit_curves, "shift": shared_curves, "eval bug": shared_curves}
fig, axes = plt.subplots(1, 4, figsize=(13, 3.2), sharey=True)
for ax, (name, c) in zip(axes, panels.items()):
    ax.plot(c["step"], c["train"], "o-", label="train")
    ax.plot(c["step"], c[name], "s-", label="validation")
    ax.axhline(floor, color="grey", linestyle=":", label="entropy rate")
    ax.set_title(name)
    ax.set_xlabel("step")
    ax.set_ylim(0, 4)
axes[0].set_ylabel("loss (nats per scored token)")
axes[0].legend(fontsize=8)
fig.suptitle("Train improves, validation does not: four runs")
plt.show()

# %%
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

# %%
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
# With dropout, the same mode matters. `nn.Dropout` obeys `.eval()`; `F.dropout(x, p)` does not,
# because its `training` argument defaults to `True` (the model's `.eval()` never reaches a function
# call). Both modules below have been put in eval mode:

# %%
import torch.nn as nn
from course.model import FunctionalDropout

ones = torch.ones(10)
print("nn.Dropout(0.5) after .eval():      ", nn.Dropout(0.5).eval()(ones).tolist())
_ = torch.manual_seed(0)
print("F.dropout(x, 0.5) after .eval():    ", FunctionalDropout(0.5).eval()(ones).tolist())

# %% [markdown]
# Now a model with dropout 0.1 (trained once), evaluated three ways: the healthy eval path, an eval
# path that forgets `model.eval()` (`dropout-left-on-in-eval`), and the same weights in a model whose
# dropout is written as `F.dropout` (`functional-dropout-ignores-eval`: training is bit-identical,
# since both draw the same random masks).

# %%
from course.train import train

DROP = BASE.replace(model=ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64, dropout=0.1))
drop_run = train(DROP, eval_every=0, progress=True)
functional = inject(DROP, "functional-dropout-ignores-eval")
functional_model = functional.build_model(0)
functional_model.load_state_dict(drop_run.model.state_dict())
dropout_cases = {"healthy (nn.Dropout)": (drop_run.model, DROP),
                 "model.eval() forgotten": (drop_run.model, inject(DROP, "dropout-left-on-in-eval")),
                 "F.dropout in the model": (functional_model, functional)}
for name, (model, p) in dropout_cases.items():
    c = valgap.eval_path_check(model, p)
    print(f"{name:>24}: eval path {c.eval_path:.4f}, reference {c.reference:.4f}, again {c.eval_path_again:.4f} -> agrees: {c.agrees}")

# %% [markdown]
# The forgotten `model.eval()` disagrees with the reference. `F.dropout` fools the reference too (it
# calls `model.eval()`, which does not reach the function), and shows only because two evaluations of
# the same data differ. Comparing modes the other way round matters as well: the loss logged during
# training is measured *with* dropout on, so a healthy model with dropout scores its own training data
# better in eval mode than its training log says:

# %%
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
# training; a shift predicts fresh ≈ training, and only validation off.

# %%
for name in ("healthy", "overfitting", "shift"):
    model, p = checks[name]
    train_loss = valgap.reference_loss(model, valgap.training_probe(p), "val")
    print(f"{name:>12}: train {train_loss:.3f}, fresh {evaluate(model, valgap.fresh(p)):.3f}, validation {evaluate(model, p):.3f}")

# %% [markdown]
# ## Explore: how small must the training set be?
#
# The gap from overfitting grows with how often each window is seen: 200 steps of 16 windows are 3200
# window presentations, about 50 per window at 64 windows and under one at 4096. Two more sizes are
# trained here; the slider shows each run's curves (precomputed, so moving it costs nothing).

# %%
size_curves = {64: {"train": overfit_curves["train"], "validation": overfit_curves["overfitting"], "step": overfit_curves["step"]},
               4096: {"train": shared_curves["train"], "validation": shared_curves["healthy"], "step": shared_curves["step"]}}
for n in (256, 1024):
    p = BASE.replace(n_train=n)
    _, c = valgap.curves(p, {"validation": p}, steps=200, every=25, progress=True)
    size_curves[n] = c
size_curves = dict(sorted(size_curves.items()))

# %%
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

# %%
train_windows = BASE.windows("train")
for name, p in {"healthy split": BASE, "fresh windows": valgap.fresh(BASE),
                "val-overlaps-train": inject(BASE, "val-overlaps-train"),
                "val-near-duplicates-train": inject(BASE, "val-near-duplicates-train")}.items():
    print(f"{name:>26}: {overlap.audit(train_windows, p.windows('val'))}")

# %% [markdown]
# Exact copies are proof. A near-duplicate rate means something only against the rate of fresh
# windows, which is what chance gives at this window length.
#
# ## Exercise 1: shingle Jaccard
#
# Write `shingle_jaccard(a, b, n)`: the Jaccard similarity |A ∩ B| / |A ∪ B| of the **sets** of
# contiguous `n`-token tuples of the sequences `a` and `b` (lists or 1-D tensors of ints). A sequence
# shorter than `n` has no shingles; return `0.0` when both sets are empty.

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
assert shingle_jaccard([1, 2, 3, 4], [1, 2, 3, 4], 2) == 1.0, "identical sequences have Jaccard 1"
assert shingle_jaccard([1, 2, 3, 4], [2, 3, 4, 5], 2) == 0.5, "shingles {12,23,34} and {23,34,45}: 2 shared of 4"
assert shingle_jaccard([1, 2], [3, 4], 3) == 0.0, "sequences shorter than n have no shingles: return 0.0"
### BEGIN HIDDEN TESTS
assert shingle_jaccard([1, 1, 1, 1, 1], [1, 1, 2], 2) == 0.5, "shingles are a set: repeats count once"
assert shingle_jaccard(torch.tensor([5, 6, 7]), [5, 6, 7], 3) == 1.0, "tensors and lists alike"
assert shingle_jaccard([1, 2, 3], [3, 2, 1], 1) == 1.0 and shingle_jaccard([1, 2, 3], [3, 2, 1], 2) == 0.0
_g = torch.Generator().manual_seed(3)
for _trial in range(20):
    _a, _b = torch.randint(0, 3, (9,), generator=_g), torch.randint(0, 3, (7,), generator=_g)
    for _n in (1, 2, 4):
        assert abs(shingle_jaccard(_a, _b, _n) - overlap.shingle_jaccard(_a, _b, _n)) < 1e-12, f"wrong for {_a.tolist()}, {_b.tolist()}, n={_n}"
### END HIDDEN TESTS

# %% [markdown]
# ### Leakage pushes validation loss *down*
#
# Take the overfitting model from above (its training loss is far below the entropy rate: it has
# memorised its 64 windows). Build validation sets of 64 windows in which a growing share are copies
# of training windows, and score the same model on each:

# %%
leaked_share = [0.0, 0.25, 0.5, 0.75, 1.0]
small_val = overfit_pipe.replace(n_val=64)
leaked_loss = [evaluate(overfit_run.model, small_val.replace(val_source=valgap.TrainCopies(f))) for f in leaked_share]
for f, loss in zip(leaked_share, leaked_loss):
    print(f"{f:>5.0%} of validation copied from training: validation loss {loss:.3f}" + ("   below the entropy rate" if loss < floor else ""))

# %%
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot([100 * f for f in leaked_share], leaked_loss, "o-", label="validation loss, same model")
ax.axhline(floor, color="grey", linestyle=":", label="entropy rate (floor)")
ax.set_xlabel("share of validation windows copied from training (%)")
ax.set_ylabel("loss (nats per scored token)")
ax.set_title("Leakage lowers validation loss: it hides a gap, it does not open one")
ax.legend()
plt.show()

# %% [markdown]
# A validation loss below the entropy rate is not luck: no model can predict fresh data of this
# source better. On a model that has *not* memorised (the healthy run), the copies score like fresh
# windows and the loss barely moves, which is why the audit, not the loss, is the test for leakage:

# %%
leaky = inject(BASE, "val-overlaps-train")
print(f"healthy model: validation {evaluate(healthy_run.model, BASE):.3f}, half copied {evaluate(healthy_run.model, leaky):.3f}")

# %% [markdown]
# ### Split by document, not by window
#
# Long documents are cut into overlapping windows (17 tokens, one every 4 tokens, so neighbours share
# 13). Split the windows at random and neighbours of one document land on both sides; split whole
# documents and none do.

# %%
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
# (at least one, never all) go to validation. The same seed must give the same split.

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
def _check_group_split(groups, fraction, seed):
    tr, va = group_split(groups, fraction, seed)
    assert sorted(tr.tolist() + va.tolist()) == list(range(len(groups))), "every item must be in exactly one split"
    shared = set(groups[tr].tolist()) & set(groups[va].tolist())
    assert not shared, f"groups on both sides: {sorted(shared)[:5]}"
    n_groups, n_val = len(set(groups.tolist())), len(set(groups[va].tolist()))
    assert 1 <= n_val < n_groups and abs(n_val - fraction * n_groups) <= 1, f"{n_val} of {n_groups} groups in validation"
    t2, v2 = group_split(groups, fraction, seed)
    assert torch.equal(tr, t2) and torch.equal(va, v2), "the same seed must give the same split"
    return set(groups[va].tolist())

_ = _check_group_split(doc_ids, 0.2, 0)
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(5)
_groups = torch.randint(0, 30, (500,), generator=_g)
_splits = {frozenset(_check_group_split(_groups, 0.3, _s)) for _s in range(4)}
assert len(_splits) > 1, "different seeds should give different splits"
_ = _check_group_split(torch.tensor([7, 7, 9, 9, 9, 3]), 0.5, 1)
_ = _check_group_split(torch.tensor([2, 5]), 0.9, 0)
### END HIDDEN TESTS

# %% [markdown]
# The same documents, split by document:

# %%
tr_idx, va_idx = group_split(doc_ids, 0.2, seed=0)
print("group split:        ", overlap.audit(windows[tr_idx], windows[va_idx]))

# %% [markdown]
# ## Preprocessing fitted on the training split only
#
# Leakage needs no shared windows: any statistic fitted on data that include validation has seen
# validation. The simplest statistic a token pipeline fits is a table of next-token counts per
# two-token context (the token form of target encoding, used as an n-gram feature or prior).
# `valgap.fit_context_counts` fits one; `valgap.counts_loss` scores windows with it, over the
# positions that have two tokens of context, whose floor is exactly the entropy rate.

# %%
print(f"entropy rate (floor for these positions): {lang.entropy_rate:.4f}")
small_val_windows, fresh_windows = lang.sample(64, 17, 2), lang.sample(1024, 17, 3)
for n_train in (64, 512, 4096):
    tr = lang.sample(n_train, 17, 1)
    fit_train = valgap.fit_context_counts(tr, lang.vocab_size)
    fit_all = valgap.fit_context_counts(torch.cat([tr, small_val_windows]), lang.vocab_size)
    print(f"{n_train:>5} training windows: validation {valgap.counts_loss(fit_train, small_val_windows):.3f} (fit on train), "
          f"{valgap.counts_loss(fit_all, small_val_windows):.3f} (fit on train + val); "
          f"fresh windows {valgap.counts_loss(fit_all, fresh_windows):.3f} (fit on train + val)")

# %% [markdown]
# Fitted on train and validation, the table scores validation below the entropy rate: impossible for
# fresh data, so proof of leakage. The honest number is the one on fresh windows. The effect shrinks
# as the training split grows (validation is a smaller share of the fit), but it never changes sign.
# Fit on the training split, then apply the fitted statistic unchanged to validation.
#
# ## Exercise 3: name the cause
#
# Write `diagnose(model, pipe)` for a trained `model` and the pipeline `pipe` it was trained with. It
# must return one of `"ok"`, `"overfitting"`, `"shift"`, `"eval-bug"`, `"leakage"`. Use the tests
# above (no training):
#
# * `valgap.eval_path_check(model, pipe)` (`.agrees`, `.eval_path`, `.reference`, `.eval_path_again`);
# * `valgap.training_probe(pipe)`: a pipeline whose validation split is 256 of its training windows;
# * `valgap.reference_loss(model, p, "val")`, `evaluate(model, p)` (the eval path, validation split);
# * `valgap.fresh(pipe)`: validation replaced by fresh windows of the training source;
# * `overlap.audit(train_windows, val_windows)` (`.exact`, `.near`), with `pipe.windows("train")`.
#
# The order you run them in matters: an eval bug corrupts every number the eval path gives. The hidden
# tests use bugs you have not run (other eval bugs, another shift, near duplicates), other training
# sizes, and models with dropout; `pipe.bugs` is blanked there, so read behaviour, not labels. An
# answer that is always the same earns nothing.

# %% nbgrader={"grade": false, "grade_id": "diagnose", "locked": false, "schema_version": 3, "solution": true}
def diagnose(model, pipe):
    ### BEGIN SOLUTION
    if not valgap.eval_path_check(model, pipe).agrees:
        return "eval-bug"
    train_windows = pipe.windows("train")
    fresh_pipe = valgap.fresh(pipe)
    val_audit = overlap.audit(train_windows, pipe.windows("val"))
    chance = overlap.audit(train_windows, fresh_pipe.windows("val"))
    if val_audit.exact > 0 or val_audit.near > chance.near + 0.1:
        return "leakage"
    train_loss = valgap.reference_loss(model, valgap.training_probe(pipe), "val")
    fresh_loss, val_loss = evaluate(model, fresh_pipe), evaluate(model, pipe)
    if fresh_loss - train_loss > 0.1:
        return "overfitting"
    if val_loss - fresh_loss > 0.1:
        return "shift"
    return "ok"
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_diagnose_visible", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.grading import assert_names

_blank = lambda p: p.replace(bugs=())  # the bug's name is not evidence
assert_names(lambda case: diagnose(*case), {
    "healthy": ((healthy_run.model, BASE), "ok"),
    "train-set-too-small": ((overfit_run.model, _blank(overfit_pipe)), "overfitting"),
    "val-from-another-source": ((healthy_run.model, _blank(shift_pipe)), "shift"),
    "eval-label-smoothing": ((healthy_run.model, _blank(evalbug_pipe)), "eval-bug"),
    "val-overlaps-train": ((healthy_run.model, _blank(inject(BASE, "val-overlaps-train"))), "leakage"),
})
### BEGIN HIDDEN TESTS
assert_names(lambda case: diagnose(*case), {
    "healthy with dropout": ((drop_run.model, DROP), "ok"),
    "overfit model, half its validation copied": ((overfit_run.model, _blank(inject(overfit_pipe, "val-overlaps-train"))), "leakage"),
})
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: evaluation bugs you have not seen, and their healthy controls.

# %% nbgrader={"grade": true, "grade_id": "test_diagnose_eval_bugs", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
from course.grading import assert_names
_blank = lambda p: p.replace(bugs=())
_functional = inject(DROP, "functional-dropout-ignores-eval")
_functional_model = _functional.build_model(0)
_functional_model.load_state_dict(drop_run.model.state_dict())
assert_names(lambda case: diagnose(*case), {
    "healthy with dropout": ((drop_run.model, DROP), "ok"),
    "dropout-left-on-in-eval": ((drop_run.model, _blank(inject(DROP, "dropout-left-on-in-eval"))), "eval-bug"),
    "functional-dropout-ignores-eval": ((_functional_model, _blank(_functional)), "eval-bug"),
    "eval-loss-per-sequence": ((healthy_run.model, _blank(inject(BASE, "eval-loss-per-sequence"))), "eval-bug"),
    "label smoothing 0.02": ((healthy_run.model, BASE.replace(eval_loss_fn=valgap.LabelSmoothed(0.02))), "eval-bug"),
})
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: overfitting, shift and leakage variants you have not seen.

# %% nbgrader={"grade": true, "grade_id": "test_diagnose_data", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
from course.grading import assert_names
from course.train import train as _train
_blank = lambda p: p.replace(bugs=())
_p128 = BASE.replace(n_train=128, data_seed=5)
_m128 = _train(_p128, seed=3, eval_every=0).model
assert_names(lambda case: diagnose(*case), {
    "healthy, a fresh validation seed": ((healthy_run.model, BASE.replace(val_source=valgap.SameSource(99))), "ok"),
    "128 windows": ((_m128, _p128), "overfitting"),
    "val-mixes-another-source": ((healthy_run.model, _blank(inject(BASE, "val-mixes-another-source"))), "shift"),
    "another chain, a quarter": ((healthy_run.model, BASE.replace(val_source=valgap.OtherSource(0.25, offset=3))), "shift"),
    "val-near-duplicates-train": ((healthy_run.model, _blank(inject(BASE, "val-near-duplicates-train"))), "leakage"),
    "slid by 2, a third": ((healthy_run.model, BASE.replace(val_source=valgap.TrainContinuations(0.3, shift=2))), "leakage"),
})
### END HIDDEN TESTS

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
# * **The entropy rate**: a validation loss below it proves leakage; a loss above it proves nothing
#   about leakage, since copies score like fresh windows on a model that has not memorised them.
# * The shape of the curves suggests a cause; it does not test one.
