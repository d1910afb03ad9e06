# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (debug course)
#     language: python
#     name: debug-course
# ---

# %% [markdown]
# # 01 · Baselines and ln(V): what a loss value can and cannot tell you
#
# **What you learn.**
# * Compute the numbers every loss is read against: `ln(V)`, the unigram entropy of the targets
#   actually scored, the **entropy rate** (the per-token limit of an infinitely long sequence) and the
#   **window floor** (the best mean loss over one finite window, slightly above the rate); and what
#   each one bounds.
# * Run the counterexamples that keep those numbers honest: a random head that is *not* at `ln(V)`, a
#   healthy model that *stays* at `ln(V)`, a relabelling that changes nothing, a mask that makes the
#   loss NaN, padding and a copy task that make it fall "too well". Before each one, write down what
#   you expect.
# * Write a batch contract check, graded against a hidden bank of broken batches.
# * Debug a **mystery pipeline**: write a test that tells a broken pipeline from a healthy one, name the
#   cause ("no updates" or "context not used", and which one), and fix it at the right depth.
#
# **Time.** Under 40 seconds of computation on a laptop CPU (`make bench` times every notebook on
# yours). **GPU:** not needed anywhere.

# %%
import math

import torch
import torch.nn.functional as F
import matplotlib.pyplot as plt

torch.set_num_threads(1)  # tiny models: one thread is fastest and does not fight other processes
_ = torch.manual_seed(0)  # returns the generator; assigned so it is not printed

# %% [markdown]
# ## The numbers before any training
#
# For the course's language the package computes them exactly, from the chain's probabilities:

# %%
from course import Pipeline, IGNORE
from course.exercises.record import reveal
from course.reference.train import train, batch_at

pipe = Pipeline()
lang = pipe.language()
print(f"vocabulary V = {lang.vocab_size} ({lang.n_symbols} symbols + PAD + EOS)")
print(f"ln(V)                      = {lang.uniform_loss:.4f}")
print(f"unigram entropy H(pi)      = {lang.unigram_entropy:.4f}   (best loss with no context)")
print(f"bigram entropy             = {lang.bigram_entropy:.4f}   (best loss seeing one token back)")
print(f"entropy rate               = {lang.entropy_rate:.4f}   (best loss per token of an endless sequence)")
print(f"window floor, {pipe.seq_len} targets   = {lang.loss_floor(pipe.seq_len):.4f}   "
      "(best mean loss over one window: its first target sees one token)")

# %% [markdown]
# Two of these are easy to confuse. The **entropy rate** is a limit: the loss per token of a perfect
# model on an infinitely long sequence. A training window is finite: its first target is predicted
# from one token of context, so even a perfect model scores the **window floor**, a little higher.
# The plots below carry the window floor; where the difference matters, both lines are drawn.
#
# On your own data you do not have the chain, only batches. The unigram baseline must then be computed
# from **the targets the loss actually scores**: the same mask, the same ignored positions. Padding
# included, the number is a different (and wrong) baseline.
#
# ## Exercise 1: the baselines from a batch
#
# Write `uniform_loss(V)` and `masked_unigram_entropy(targets)`: the entropy, in nats, of the empirical
# distribution of the targets that are not `IGNORE` (return `float("nan")` when none is scored).
#
# *What is accepted.* Both return a number (a Python `float`, or a 0-d tensor, which the tests convert
# with `float()`). `ln(V)` is accepted within 1e-6 relative. The entropy may be computed in float32
# or float64: the tests accept it within 1e-5 relative (a float32 probability `counts / counts.sum()`
# carries about 1e-7 relative error, so a tighter tolerance would reject correct answers). The
# package's own `course.toolkit.baselines` functions are switched off while your answers are graded.

# %% nbgrader={"grade": false, "grade_id": "baselines", "locked": false, "schema_version": 3, "solution": true}
def uniform_loss(V):
    ### BEGIN SOLUTION
    return math.log(V)
    ### END SOLUTION

def masked_unigram_entropy(targets):
    ### BEGIN SOLUTION
    scored = targets[targets != IGNORE]
    if scored.numel() == 0:
        return float("nan")
    p = torch.bincount(scored).double()
    p = p[p > 0] / p.sum()
    return -(p * p.log()).sum().item()
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_uniform_loss", "locked": true, "points": 1, "schema_version": 3, "solution": false}
import math

from course import Pipeline as _Pipeline
import course.toolkit.baselines
from course.exercises.grading import graded_calls as _graded_calls

_lang = _Pipeline().language()  # the notebook's language, built here
# your uniform_loss, called apart (the package's own is switched off there)
[_got] = _graded_calls(lambda _V: float(uniform_loss(_V)), [_lang.vocab_size],
                       off=(course.toolkit.baselines.uniform_loss,))
assert math.isclose(_got, _lang.uniform_loss, rel_tol=1e-6), \
    f"uniform_loss({_lang.vocab_size}) = {_got}: ln(V) is the natural log of the vocabulary size"
### BEGIN HIDDEN TESTS
import random as _random

from course.exercises.grading import hidden_seed as _hidden_seed
_rng = _random.Random(_hidden_seed("h-01-ulnv"))
_Vs = [2, 7, 50257] + [_rng.randint(3, 999) for _ in range(3)] + [_rng.randint(1000, 10**6) for _ in range(2)]
_got = list(zip(_Vs, _graded_calls(lambda _V: float(uniform_loss(_V)), _Vs,
                                   off=(course.toolkit.baselines.uniform_loss,))))
for _V, _g in _got:
    assert math.isclose(_g, math.log(_V), rel_tol=1e-6), f"uniform_loss({_V}) is wrong: the natural log of V"
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_masked_unigram_entropy", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import math

import torch

from course import IGNORE, Pipeline as _Pipeline
from course.reference.train import batch_at as _batch_at
import course.toolkit.baselines
from course.exercises.grading import graded_calls as _graded_calls

def _close(a, b):
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7)

_two = torch.tensor([[0, 1, IGNORE, IGNORE]])
# your masked_unigram_entropy on each input, called apart (the package's unigram_entropy is switched off there)
_got, _uneven, _nothing = _graded_calls(lambda _t: float(masked_unigram_entropy(_t)), [
    _two,
    torch.tensor([[2, 2, IGNORE, 2], [5, IGNORE, IGNORE, IGNORE]]),
    torch.full((2, 3), IGNORE),
], off=(course.toolkit.baselines.unigram_entropy,))
_counting_ignored = course.toolkit.baselines.unigram_entropy(_two % 1000)  # what counting IGNORE as a class gives
assert not _close(_got, _counting_ignored), \
    "your entropy counts the IGNORE targets as a class: keep only targets != IGNORE before counting"
assert _close(_got, math.log(2)), \
    f"two equally frequent scored targets have entropy ln 2 = {math.log(2):.6f} nats, got {_got}: check the natural log and the normalisation"
_want = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))  # three 2s and one 5 scored, four targets ignored
assert _close(_uneven, _want), \
    f"scored targets 2, 2, 2, 5 have entropy {_want:.6f} nats, got {_uneven}: the probabilities are counts over the scored targets only"
assert math.isnan(_nothing), f"nothing scored: return float('nan') (a mean over zero targets), not {_nothing}"
### BEGIN HIDDEN TESTS
import random as _random

from course.exercises.grading import hidden_seed as _hidden_seed
_rng = _random.Random(_hidden_seed("h-01-entm"))
_g = torch.Generator().manual_seed(_rng.getrandbits(62))
_inputs = []  # (label, targets): no expected value exists until yours has answered every input
for _trial in range(5):  # random shapes, id ranges and shares of ignored targets
    _shape, _n, _share = (_rng.randint(3, 6), _rng.randint(8, 20)), _rng.randint(2, 12), _rng.choice((0.2, 0.4, 0.6))
    _t = torch.randint(0, _n, _shape, generator=_g)
    _t[torch.rand(_shape, generator=_g) < _share] = IGNORE
    _inputs.append((f"random batch {_trial} ({_share:.0%} ignored)", _t))
# a random batch of the course's language, padded (the windows are the notebook's; the batch is drawn)
_inputs.append(("a padded batch of the course's language",
                _batch_at(_Pipeline(min_len=8), seed=_rng.randrange(2**31), step=_rng.randrange(300)).targets))
_kept = [(tuple(_t.shape), tuple(_t.flatten().tolist())) for _label, _t in _inputs]  # a copy no answer can change
_gots = _graded_calls(lambda _t: float(masked_unigram_entropy(_t)), [_t for _label, _t in _inputs],
                      off=(course.toolkit.baselines.unigram_entropy,))
_reference = course.toolkit.baselines.unigram_entropy
_wrong = []
for (_label, _t), (_shape, _values), _got in zip(_inputs, _kept, _gots):
    _want = _reference(torch.tensor(_values, dtype=torch.long).reshape(_shape))
    if not (_close(_got, _want) or (math.isnan(_want) and math.isnan(_got))):  # NaN: nothing scored
        _wrong.append(_label)
assert not _wrong, f"wrong entropy (beyond 1e-5 relative) on: {', '.join(_wrong)}; check the mask and the counting"
### END HIDDEN TESTS

# %% [markdown]
# On a padded batch, the masked baseline and the naive one (every position, padding included) differ:

# %% tags=["demo"]
padded = batch_at(pipe.replace(min_len=8), seed=0, step=0)
naive = masked_unigram_entropy(padded.inputs)  # every position, padding included
print(f"scored targets: {padded.scored.float().mean():.1%} of positions")
print(f"unigram entropy, exact mask:       {masked_unigram_entropy(padded.targets):.4f}")
print(f"unigram entropy, padding included: {naive:.4f}")

# %% [markdown]
# ## Counterexample 1: a randomly initialised head is not at ln(V)
#
# "The loss at step 0 should be `ln(V)`" holds only when the initial logits are nearly equal. Below,
# the same model with its output head drawn at different scales, scored on one held-out batch.
#
# **Predict.** With the head's weights drawn with standard deviation 1.0, will the loss at
# initialisation be above `ln(V)`, at it, or below it? By roughly how much?

# %%
prediction = None  # your guess: "above" / "at" / "below", and by how many nats

# %%
from course.toolkit.baselines import loss_at_init

val = batch_at(pipe, seed=99, step=0)

def init_loss(head_std, seed=0):
    model = pipe.build_model(seed)
    with torch.no_grad():
        model.head.weight.normal_(0.0, head_std, generator=torch.Generator().manual_seed(seed))
    return loss_at_init(model, val.inputs, val.targets)

stds = [0.0, 0.02, 0.1, 0.3, 1.0, 3.0]
losses_at_init = [init_loss(s) for s in stds]
for s, l in zip(stds, losses_at_init):
    print(f"head std {s:>4}: loss at init {l:.4f}  ({l - lang.uniform_loss:+.4f} vs ln V)")
reveal("loss at init with head std 1.0, minus ln(V)", prediction, f"{losses_at_init[4] - lang.uniform_loss:+.4f} nats")

# %% [markdown]
# With a larger initial scale the logits spread out, the model is confidently wrong, and the loss at
# initialisation lands *above* `ln(V)`.

# %% tags=["demo"]
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(stds, losses_at_init, "o-", label="loss at initialisation")
ax.axhline(lang.uniform_loss, color="grey", linestyle=":", label="ln(V)")
ax.set_xscale("symlog", linthresh=0.01)
ax.set_xlabel("standard deviation of the output head's weights at init")
ax.set_ylabel("cross-entropy (nats)")
ax.legend()
plt.show()

# %% [markdown]
# Move the slider to see the loss at initialisation for any head scale. `ln(V)` is a baseline to
# compare against, not a fingerprint of a healthy start.

# %% tags=["demo"]
# NBVAL_IGNORE_OUTPUT
import ipywidgets as widgets

def show_init_loss(head_std=0.02):
    loss = init_loss(head_std)
    print(f"head std {head_std:.2f}: loss at init {loss:.4f}, ln(V) {lang.uniform_loss:.4f}, "
          f"difference {loss - lang.uniform_loss:+.4f}")

widgets.interact(show_init_loss, head_std=widgets.FloatLogSlider(value=0.02, base=10, min=-3, max=0.7, step=0.1));

# %% [markdown]
# ## A smaller pipeline for everything that trains
#
# From here on, runs use a smaller language (8 symbols, windows of 16 targets) so that each one trains
# in a second or two: 200 steps at batch 32 bring a healthy run close to its window floor.

# %%
small = Pipeline(n_symbols=8, seq_len=16, batch_size=32, steps=200, n_train=2048, n_val=128, warmup=20)
small_lang = small.language()
print(f"small language: V = {small_lang.vocab_size}, ln(V) {small_lang.uniform_loss:.4f}, "
      f"unigram {small_lang.unigram_entropy:.4f}, bigram {small_lang.bigram_entropy:.4f}, "
      f"window floor ({small.seq_len} targets) {small_lang.loss_floor(small.seq_len):.4f}, "
      f"entropy rate {small_lang.entropy_rate:.4f}")

# %% [markdown]
# ## Counterexample 2: a healthy model that stays at ln(V)
#
# Give the pipeline targets drawn uniformly at random, independent of the inputs. Nothing is broken in
# the model or the loop.
#
# **Predict.** After 40 steps, where will the training loss be: near `ln(V)`, near the unigram
# entropy, or near the window floor?

# %%
prediction = None  # your guess: "ln(V)" / "unigram" / "window floor"

# %% tags=["demo"]
from course.toolkit.batch import Batch, next_token_batch

def uniform_random_targets(windows, pad_id, vocab_size=small_lang.vocab_size):
    batch = next_token_batch(windows, pad_id)
    g = torch.Generator().manual_seed(int(windows[:, :4].sum()))  # seeded by the batch itself
    return Batch(batch.inputs, torch.randint(0, vocab_size, batch.targets.shape, generator=g), pad_id)

noise = train(small.replace(collate=uniform_random_targets), steps=40, seed=0, eval_every=0, progress=True)
noise_loss = sum(noise.history['loss'][-20:]) / 20
reveal("mean training loss over the last 20 of 40 steps, on uniform random targets", prediction,
       f"{noise_loss:.4f} (ln V = {small_lang.uniform_loss:.4f}, unigram {small_lang.unigram_entropy:.4f}, "
       f"window floor {small_lang.loss_floor(small.seq_len):.4f})")

# %% [markdown]
# The loss stays near `ln(V)` because there is nothing to learn. A loss at `ln(V)` is consistent with
# "no learning" *and* with "no signal".
#
# ## Counterexample 3: a consistent relabelling changes nothing
#
# Rename every token by a fixed permutation, in the logits and in the targets alike.
#
# **Predict.** How much does the cross-entropy change?

# %%
prediction = None  # your guess: a number of nats

# %%
perm = torch.randperm(lang.vocab_size, generator=torch.Generator().manual_seed(5))
logits = pipe.build_model(0)(val.inputs)
relabelled_logits = torch.empty_like(logits)
relabelled_logits[..., perm] = logits  # class c is now called perm[c]
relabelled_targets = perm[val.targets]
ce = F.cross_entropy(logits.flatten(0, 1), val.targets.flatten())
ce_relabelled = F.cross_entropy(relabelled_logits.flatten(0, 1), relabelled_targets.flatten())
print(f"CE {ce.item():.6f}, relabelled {ce_relabelled.item():.6f}")
print(f"unigram entropy {masked_unigram_entropy(val.targets):.6f}, relabelled {masked_unigram_entropy(relabelled_targets):.6f}")
reveal("|CE - CE relabelled| (float32)", prediction, f"{(ce - ce_relabelled).abs().item():.3e} nats")

# %% [markdown]
# The difference printed above is zero or float32 rounding, nothing more: the same terms, summed in
# another order, may differ in the last bits, so compare such numbers with a tolerance, not
# bit-for-bit. The unigram entropy is the same too: the loss cannot tell you whether your labels mean
# what you think they mean.
#
# ## Counterexample 4: every target ignored
#
# With `reduction="mean"`, cross-entropy divides the summed loss by the number of scored targets.
#
# **Predict.** When the mask ignores every target, what does `F.cross_entropy` return with
# `reduction="mean"`, and with `reduction="sum"`?

# %% tags=["demo"]
prediction = None  # your guess: (mean, sum)

# %% tags=["demo"]
ignored = torch.full_like(val.targets, IGNORE)
measured = {}
for reduction in ("mean", "sum"):
    lg = logits.detach().clone().requires_grad_(True)
    loss = F.cross_entropy(lg.flatten(0, 1), ignored.flatten(), reduction=reduction)
    loss.backward()
    measured[reduction] = loss.item()
    print(f"reduction={reduction!r}: loss {loss.item()}, largest |grad| {lg.grad.abs().max().item()}")
reveal("all targets ignored: (mean, sum)", prediction, (measured["mean"], measured["sum"]))

# %% [markdown]
# The mean is 0/0: NaN. The sum is 0, which looks like a perfect model. The gradients are all zeros
# in both cases.
#
# ## Counterexample 5: falling "too well"
#
# Two bugs make a loss fall faster and lower than the data allows:
#
# * **padding scored**: on padded batches, predicting PAD after PAD is trivial, so every scored padding
#   target pulls the mean loss down. Compare it with the reference trained on the *same* padded data:
#   only the mask differs.
# * **unshifted targets**: the target is the input token itself; a causal model sees it and can copy it.
#
# **Predict.** After 50 steps, where does the training loss of the copy model (unshifted targets)
# end: near the window floor, a little below it, or near zero?

# %%
prediction = None  # your guess: a number of nats

# %% tags=["demo"]
from course.bugs import inject

padded_small = small.replace(min_len=6)
runs = {
    "reference (padded data)": train(padded_small, steps=50, seed=0, eval_every=0, progress=True),
    "padding scored": train(inject(padded_small, "padding-scored"), steps=50, seed=0, eval_every=0, progress=True),
    "unshifted targets": train(inject(small, "unshifted-targets"), steps=50, seed=0, eval_every=0, progress=True),
}

# %% tags=["demo"]
pad_targets = batch_at(inject(padded_small, "padding-scored"), 0, 0).targets
print(f"share of scored targets that are PAD when padding is scored: {(pad_targets == small_lang.PAD).float().mean():.1%}")
for name, run in runs.items():
    print(f"{name:>24}: last-20 mean loss {sum(run.history['loss'][-20:]) / 20:.4f}")
print(f"{'window floor':>24}: {small_lang.loss_floor(small.seq_len):.4f} (full windows), "
      f"{small_lang.floor_for(batch_at(padded_small, 0, 0).targets):.4f} (real tokens of padded windows); "
      f"entropy rate {small_lang.entropy_rate:.4f}")
reveal("copy model (unshifted targets), last-20 mean training loss", prediction,
       f"{sum(runs['unshifted targets'].history['loss'][-20:]) / 20:.4f} nats")

# %% [markdown]
# ## How far below is "too far"?
#
# "A held-out loss below the entropy rate is proof of leakage" is true only on average. A validation
# set is a finite sample: the exact chain that generated the data, the best model there is, scores
# above or below its own average on any particular set. Below, the chain's own loss on 200 random
# validation sets of 64 windows of the course's language:

# %% tags=["demo"]
from course.toolkit.baselines import chain_loss

sets = lang.sample(200 * 64, pipe.seq_len + 1, seed=2026).view(200, 64, pipe.seq_len + 1)
chain_on_sets = torch.tensor([chain_loss(lang, s) for s in sets])
sd = chain_on_sets.std().item()
print(f"exact chain's loss over 200 validation sets of 64 windows: mean {chain_on_sets.mean():.4f}, sd {sd:.4f}")
print(f"sets on which the exact chain scores below the window floor ({lang.loss_floor(pipe.seq_len):.4f}): "
      f"{(chain_on_sets < lang.loss_floor(pipe.seq_len)).float().mean():.0%}")
print(f"sets on which it scores below the entropy rate ({lang.entropy_rate:.4f}): "
      f"{(chain_on_sets < lang.entropy_rate).float().mean():.0%}")
print(f"lowest set: {chain_on_sets.min():.4f}, {(lang.loss_floor(pipe.seq_len) - chain_on_sets.min()) / sd:.1f} sd below the window floor")

# %% [markdown]
# So a held-out loss a little below the floor (or even the rate) is not proof of anything. Two ways
# to make the claim sound: compare with the **exact chain's loss on the same windows** (no honest
# model beats the chain that generated them, on any set), or demand a margin of several standard
# deviations. `course.reference.diagnose.held_out_symptom(pipe)` does the first: it trains the pipeline
# briefly and reports a held-out loss more than `BELOW_CHAIN_MARGIN` nats below the chain's loss on
# the same windows ("it sees what it predicts"), or one that still has more than `STALL_FRACTION` of
# the gap from the bigram entropy down to the window floor left to close ("the context is not used";
# both printed below). The thresholds come from runs on seven languages of this size (see the
# source); they leave a wide margin on both sides.
#
# ## Closing the loop: fix the copy model at the right depth
#
# The symptom, read by that detector, then the fix where the bug lives (the collator: targets are the
# inputs shifted left by one), then the same detector on a fresh run. Clamping the loss, adding noise
# or training less would hide the symptom without fixing anything.

# %% tags=["demo"]
from course.reference.diagnose import held_out_symptom, BELOW_CHAIN_MARGIN, STALL_FRACTION

print(f"held_out_symptom: leakage below the exact chain by more than {BELOW_CHAIN_MARGIN} nats; "
      f"a stall with more than {STALL_FRACTION:.0%} of the bigram-to-floor gap left")
copy_pipe = inject(small, "unshifted-targets")
print("before the fix:", held_out_symptom(copy_pipe, run=runs["unshifted targets"]))
fixed_pipe = copy_pipe.replace(collate=next_token_batch)  # the reference collator: the only change
runs["unshifted targets, fixed"] = train(fixed_pipe, seed=0, eval_every=0, progress=True)  # small.steps: 200
print("after the fix: ", held_out_symptom(fixed_pipe, run=runs["unshifted targets, fixed"]))
print(f"held-out loss after the fix {runs['unshifted targets, fixed'].final_val_loss:.4f}, "
      f"exact chain on the same windows {chain_loss(small_lang, small.windows('val')):.4f}, "
      f"window floor {small_lang.loss_floor(small.seq_len):.4f}")

# %% tags=["demo"]
from course.toolkit.plots import loss_plot

refs = dict(small_lang.baselines(small.seq_len), **{"entropy rate": small_lang.entropy_rate})
ax = loss_plot({k: r.history["loss"] for k, r in runs.items()}, refs,
               title="Far below the window floor is a bug, not a breakthrough")
plt.show()

# %% [markdown]
# ## The batch contract
#
# Most of these bugs are visible in **one batch**, before any training step. A batch contract check
# states what a correct next-token batch looks like and refuses anything else:
#
# * `inputs` and `targets` are 2-D `int64` tensors of the same shape;
# * input ids lie in `[0, V)`; scored targets lie in `[0, V)` and are never the padding token;
# * the shift: where a target is scored and the next input is a real token, the target *is* that input;
# * at least one target is scored, and (for pre-training batches) the targets before every real token are.
#
# ## Exercise 2: write the batch contract check
#
# Write `check_batch(batch, vocab_size)`: raise a `ValueError` or an `AssertionError`, with a message
# that says which clause failed, if the batch breaks the contract; return normally otherwise.
#
# *What is accepted.* Only `ValueError` (and its subclasses) and `AssertionError` count as a
# rejection. Any other exception (an `IndexError` from indexing with a negative id, a `TypeError`, a
# `RuntimeError` from torch) fails the test with "your check crashed": a check that falls over on a
# broken batch has not caught it. Look at dtypes and ranges *before* you index or count with the ids.
# The hidden tests run it on healthy batches of other shapes and vocabularies, which it must accept,
# and on a hidden bank of broken batches drawn from the bug catalogue, which it must reject. A check
# that always raises, or never does, earns nothing. The package's own `course.toolkit.checks.check_batch`
# (whose `BatchContractError` is a `ValueError`) is switched off while yours is graded.

# %% nbgrader={"grade": false, "grade_id": "check_batch", "locked": false, "schema_version": 3, "solution": true}
def check_batch(batch, vocab_size):
    ### BEGIN SOLUTION
    x, y, pad = batch.inputs, batch.targets, batch.pad_id
    if x.dim() != 2 or x.shape != y.shape:
        raise ValueError(f"shape: inputs {tuple(x.shape)} vs targets {tuple(y.shape)}")
    if x.dtype != torch.long or y.dtype != torch.long:
        raise ValueError(f"dtype: {x.dtype}, {y.dtype}")
    if x.min() < 0 or x.max() >= vocab_size:
        raise ValueError("input id out of range")
    scored = y != IGNORE
    if not scored.any():
        raise ValueError("no target is scored")
    if y[scored].min() < 0 or y[scored].max() >= vocab_size or (y[scored] == pad).any():
        raise ValueError("scored target out of range or padding")
    real_next = x[:, 1:] != pad
    if ((y[:, :-1] != x[:, 1:]) & scored[:, :-1] & real_next).any():
        raise ValueError("targets are not the inputs shifted by one")
    if (real_next & ~scored[:, :-1]).any():
        raise ValueError("a target before a real token is not scored")
    ### END SOLUTION

# %% [markdown]
# The visible tests: two healthy batches (one padded) and four broken ones: a target that is the input
# itself, nothing scored, `int32` inputs, and inputs padded with `IGNORE` (a negative id: look at the
# range before you index with it).

# %% nbgrader={"grade": true, "grade_id": "test_check_batch_visible", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course import Pipeline
from course.bugs import inject
from course.reference.train import batch_at
import course.toolkit.checks
from course.exercises.grading import assert_detector, fires

_pipe = Pipeline()  # the notebook's `pipe`, built here
_padded_pipe = _pipe.replace(min_len=8)
_healthy = {"full windows": batch_at(_pipe, 0, 0), "padded windows": batch_at(_padded_pipe, 0, 0)}
_broken = {name: batch_at(inject(_padded_pipe, name), 0, 0)
           for name in ("unshifted-targets", "all-targets-ignored", "int32-inputs", "inputs-padded-with-ignore-index")}
assert_detector(lambda b, vocab=_pipe.language().vocab_size: fires(check_batch, b, vocab), _healthy, _broken, what="batch check",
                off=(course.toolkit.checks.check_batch,))
### BEGIN HIDDEN TESTS
import random as _random

from course.exercises.grading import hidden_seed as _hidden_seed
_rng = _random.Random(_hidden_seed("h-01-cbvh"))
_hidden_pipe = Pipeline(n_symbols=8, seq_len=12, min_len=4, n_train=512)
_hidden_healthy = {f"{p.n_symbols} symbols, random batch {i}": (batch_at(p, _rng.randrange(2**31), _rng.randrange(64)),
                                                                p.language().vocab_size)
                   for p in (_hidden_pipe, _pipe.replace(min_len=2)) for i in (1, 2)}
assert_detector(lambda bv: fires(check_batch, *bv), _hidden_healthy,
                {n: (batch_at(inject(_hidden_pipe, n), _rng.randrange(2**31), _rng.randrange(64)), 10)
                 for n in ("unshifted-targets", "all-targets-ignored")},
                what="batch check", off=(course.toolkit.checks.check_batch,))
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: contract clauses on shapes, types and id ranges.

# %% nbgrader={"grade": true, "grade_id": "test_check_batch_types", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
from course import Pipeline as _Pipeline
from course.bugs import inject as _inject
from course.exercises.grading import assert_detector as _assert_detector, fires as _fires
from course.reference.train import batch_at as _batch_at
import course.toolkit.checks
import random as _random
from course.exercises.grading import hidden_seed as _hidden_seed
_rng = _random.Random(_hidden_seed("h-01-cbty"))
_hidden_pipe = _Pipeline(n_symbols=8, seq_len=12, min_len=4, n_train=512)
_seed, _step = _rng.randrange(2**31), _rng.randrange(64)  # a random batch (64 padded windows: some padding, surely)
_bank = {n: _batch_at(_inject(_hidden_pipe, n), _seed, _step)
         for n in ("float-targets", "int32-inputs", "inputs-padded-with-ignore-index", "targets-one-short")}
_assert_detector(lambda b: _fires(check_batch, b, 10), {"healthy": _batch_at(_hidden_pipe, _seed, _step)}, _bank,
                what="batch check", off=(course.toolkit.checks.check_batch,))
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: contract clauses on the shift and the mask.

# %% nbgrader={"grade": true, "grade_id": "test_check_batch_mask", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
from course import Pipeline as _Pipeline
from course.bugs import inject as _inject
from course.exercises.grading import assert_detector as _assert_detector, fires as _fires
from course.reference.train import batch_at as _batch_at
import course.toolkit.checks
import random as _random
from course.exercises.grading import hidden_seed as _hidden_seed
_rng = _random.Random(_hidden_seed("h-01-cbmk"))
_hidden_pipe = _Pipeline(n_symbols=8, seq_len=12, min_len=4, n_train=512)
_seed, _step = _rng.randrange(2**31), _rng.randrange(64)  # a random batch (64 padded windows: some padding, surely)
_bank = {n: _batch_at(_inject(_hidden_pipe, n), _seed, _step)
         for n in ("padding-scored", "targets-shifted-twice", "every-other-target-ignored")}
_assert_detector(lambda b: _fires(check_batch, b, 10), {"healthy": _batch_at(_hidden_pipe, _seed, _step)}, _bank,
                what="batch check", off=(course.toolkit.checks.check_batch,))
### END HIDDEN TESTS

# %% [markdown]
# ## A mystery: "no updates" or "context not used"?
#
# Two families of bugs keep a loss from reaching the window floor. In the first the parameters never
# change; in the second they change, but the model cannot use the tokens before the one it predicts
# (or, the other way round, it sees the very token it must predict and falls "too well"). On a loss
# plot they can look alike, and a plot does not say which part of the pipeline to fix.
#
# Below are fourteen pipelines drawn by `course.exercises.mystery.draw` from these families, healthy ones among
# them. They are **opaque**: every part is a `<part>`, every setting shows the healthy value, and the
# learning rate and seeds are drawn independently of the bug, so nothing you can read off a pipeline
# says what is wrong with it. You can only *run* its parts.

# %%
from course.exercises import mystery

from course.exercises.sets import SETS

MYSTERIES = SETS["01_baselines"]  # the candidates, the base (`small`) and the seeds; the tests draw the same
CANDIDATES = MYSTERIES.candidates
mysteries = MYSTERIES.draws()
print(f"every part of a mystery pipeline looks the same: {mysteries['mystery 1'].collate!r}, {mysteries['mystery 2'].collate!r}")

# %% [markdown]
# Three of them, trained for 200 steps:

# %% tags=["demo"]
shown = ["mystery 1", "mystery 6", "mystery 7"]
mystery_runs = {name: train(mysteries[name], seed=0, eval_every=0, progress=True) for name in shown}
for name in shown:
    print(f"{name}: lr {mysteries[name].lr}, held-out loss {mystery_runs[name].final_val_loss:.4f}; "
          f"symptom: {held_out_symptom(mysteries[name], run=mystery_runs[name])}")

# %% tags=["demo"]
fig, axes = plt.subplots(1, len(shown), figsize=(12, 3.2), sharey=True)
for ax, name in zip(axes, shown):
    p_lang = mysteries[name].language()
    loss_plot({name: mystery_runs[name].history["loss"]},
              dict(p_lang.baselines(small.seq_len), **{"entropy rate": p_lang.entropy_rate}), ax=ax)
    ax.get_legend().remove()
    ax.set_title(name, fontsize=9)
plt.tight_layout()
plt.show()

# %% [markdown]
# Each cause has a test that can falsify it in milliseconds, with no training at all:
#
# | cause | test | a healthy pipeline gives |
# |---|---|---|
# | parameters do not move | one step, compare every tensor (`update_report`) | every tensor changes |
# | targets not shifted by one | the batch contract (`check_batch`) | passes |
# | positions unused | same tokens at a later position: do the logits move? (`position_sensitivity`) | they move |
# | context masked off | replace every earlier token: do the last logits move? (`past_sensitivity`) | they move |
# | future visible | change only the last token: do earlier logits move? (`future_sensitivity`) | exactly 0 |
#
# The table below runs the package's versions of these tests on the small reference (the negative
# control: nothing may fire) and on a **known** bug of each kind. In the exercise you write your own:
# the package's are switched off while your answers are graded.

# %% tags=["demo"]
from course.toolkit.checks import check_batch as reference_check_batch, update_report
from course.toolkit.checks import position_sensitivity, past_sensitivity, future_sensitivity
from course.reference.train import start, train_steps

def one_step_report(p, seed=0):
    run = start(p, seed)
    return update_report(run.model, run.optimizer, lambda: train_steps(run, 1, eval_every=0))

def run_all_tests(p, seed=0):
    model, V = p.build_model(seed), p.language().vocab_size
    return {
        "update": one_step_report(p, seed).cause(),
        "batch": "fails" if fires(reference_check_batch, batch_at(p, seed, 0), V) else "passes",
        "position": f"{position_sensitivity(model, V):.1e}",
        "past": f"{past_sensitivity(model, V):.1e}",
        "future": f"{future_sensitivity(model, V):.1e}",
    }

print(f"{'pipeline':>26} | {'update':>17} | {'batch':>6} | {'position':>8} | {'past':>8} | {'future':>8}")
for name in ["reference", "lr-zero", "requires-grad-off", "targets-shifted-twice", "no-positions",
             "attend-self-only", "causal-mask-off"]:
    r = run_all_tests(small if name == "reference" else inject(small, name))
    print(f"{name:>26} | {r['update']:>17} | {r['batch']:>6} | {r['position']:>8} | {r['past']:>8} | {r['future']:>8}")

# %% [markdown]
# ## Exercise 3: debug the mystery pipelines
#
# Three parts, graded on the pipelines above (the test and the cause on all fourteen, the fix on two:
# one broken model, one broken collator)
# and on fresh, hidden draws: other seeds, learning rates, language sizes, and bugs of the same
# families that you have not seen here.
#
# Two tools are given (they are the scaffolding, not the answer): `one_step(pipe, seed)` builds a
# fresh run and takes one real training step, and `logits_at(model, ids, start)` returns a model's
# logits in eval mode with the tokens placed at absolute positions `start, start + 1, ...`.
#
# *The noise your tests must tolerate.* Logits that cannot depend on a change come out bit-for-bit
# equal on CPU (a causal model's earlier positions when only the last token changes); logits that do
# depend on it move by more than 1e-2 at initialisation. A healthy first step changes every parameter
# tensor by a relative amount (`||after - before|| / ||before||`) above 1e-4; a step on vanishing
# gradients leaves most weight tensors bit-for-bit unchanged and moves the rest by less than 1e-6
# relative (tensors that start at zero, such as biases, have no meaningful relative change).
#
# While your answers are graded, `course.toolkit.checks` (`check_batch`, `update_report`, the three
# `*_sensitivity` probes), `course.reference.diagnose.held_out_symptom` and `course.exercises.mystery`'s `draw`, `make`,
# `reveal` and `touched` are switched off: write the tests yourself (`one_step`, `logits_at`,
# `batch_at`, `pipe.build_model` and `pipe.language()` stay available).

# %%
from course.exercises.grading import captured_warnings

def one_step(pipe, seed=0):
    """A fresh run of ``pipe`` (model, optimizer) after one real training step, and a copy of every
    parameter from before that step: ``run, before = one_step(pipe)``; ``before[name]`` is a tensor,
    ``dict(run.model.named_parameters())[name]`` the same parameter now."""
    run = start(pipe, seed)
    before = {n: t.detach().clone() for n, t in run.model.named_parameters()}
    with captured_warnings():  # a broken pipeline can make torch warn; that is evidence, not an error
        train_steps(run, 1, eval_every=0)
    return run, before


@torch.no_grad()
def logits_at(model, ids, start=0):
    """Logits (B, T, V) of ``model`` in eval mode for token ids (B, T) at positions start..start+T-1."""
    was = model.training
    model.eval()
    out = model(ids, start=start)
    model.train(was)
    return out

# %% [markdown]
# ### (a) A falsifying test
#
# Write `detect(pipe) -> bool`: `True` if the pipeline has a bug of either family (its parameters do
# not move, its targets are not the next tokens, or its model cannot see the context, cannot see
# positions, or can see the future), `False` if it is healthy. Return a Python or torch bool. Do not
# train more than one step. It is graded like a test suite: quiet on every healthy draw, firing on
# every broken one, in the same cell, so an answer that always (or never) fires scores 0. A pipeline
# that crashes under your test is broken: catch the exception around the pipeline's own calls and
# return `True` (an exception that leaves `detect` is no answer and fails the cell).
#
# `logit_changes(pipe)` is the place for your three model probes (you will reuse it in (b)): fill it in
# so it returns how much the logits move under each change.

# %% nbgrader={"grade": false, "grade_id": "detect", "locked": false, "schema_version": 3, "solution": true}
def logit_changes(pipe, seed=0):
    """Max |logit change| of a freshly built model of ``pipe`` under three interventions:
    "future": earlier positions' logits when only the last token changes;
    "past": the last position's logits when every earlier token changes;
    "position": all logits when the same tokens sit 8 positions later."""
    model = pipe.build_model(seed)
    S = pipe.language().n_symbols
    ids = torch.randint(0, S, (8, 8), generator=torch.Generator().manual_seed(seed))
    base = logits_at(model, ids)
    ### BEGIN SOLUTION
    future = ids.clone()
    future[:, -1] = (future[:, -1] + 1) % S
    past = ids.clone()
    past[:, :-1] = (past[:, :-1] + 1) % S
    return {"future": (logits_at(model, future)[:, :-1] - base[:, :-1]).abs().max().item(),
            "past": (logits_at(model, past)[:, -1] - base[:, -1]).abs().max().item(),
            "position": (logits_at(model, ids, start=8) - base).abs().max().item()}
    ### END SOLUTION


def detect(pipe, seed=0):
    ### BEGIN SOLUTION
    try:
        batch = batch_at(pipe, seed, 0)
        ch = logit_changes(pipe, seed)
        run, before = one_step(pipe, seed)
    except Exception:  # a pipeline that crashes under the test is broken
        return True
    if not torch.equal(batch.targets[:, :-1], batch.inputs[:, 1:]):
        return True
    if ch["future"] > 1e-6 or ch["past"] < 1e-6 or ch["position"] < 1e-6:
        return True
    for name, p in run.model.named_parameters():
        moved = (p.detach() - before[name]).norm() / before[name].norm().clamp_min(1e-12)
        if moved < 1e-6:
            return True
    return False
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_detect", "locked": true, "points": 3, "schema_version": 3, "solution": false}
from course.exercises import mystery
from course.exercises.sets import SETS
import course.reference.diagnose
import course.toolkit.checks
from course.exercises.grading import assert_detector

_OFF = (course.toolkit.checks.check_batch, course.toolkit.checks.update_report, course.toolkit.checks.position_sensitivity,
        course.toolkit.checks.past_sensitivity, course.toolkit.checks.future_sensitivity, course.reference.diagnose.held_out_symptom,
        mystery.reveal, mystery.draw, mystery.make, mystery.touched)  # switched off while your code runs
_mysteries = SETS["01_baselines"].draws()  # the notebook's mysteries, drawn again here
_answers = {name: mystery.reveal(p) for name, p in _mysteries.items()}


def _crashing_prepare(model):  # a part that raises: a pipeline that crashes under your test is broken
    raise RuntimeError("this pipeline's prepare crashes")


_broken = {n: p for n, p in _mysteries.items() if _answers[n] != "healthy"}
_broken["a pipeline that crashes"] = SETS["01_baselines"].base.replace(prepare=_crashing_prepare)
assert_detector(detect, {n: p for n, p in _mysteries.items() if _answers[n] == "healthy"}, _broken, what="detect", off=_OFF)
### BEGIN HIDDEN TESTS
from course import Pipeline as _Pipeline
_small = SETS["01_baselines"].base
_tiny = _Pipeline(n_symbols=6, seq_len=12, batch_size=16, steps=100, n_train=512, n_val=64, warmup=10)
_h_healthy = {f"hidden healthy {i}": mystery.hidden("healthy", i, _b, salt="h-01-d3t")
              for i, _b in enumerate((_small, _small, _tiny, _tiny))}
_h_broken = {f"hidden broken {i}": mystery.hidden(_bug, i, _b, salt="h-01-d3t")
             for i, (_bug, _b) in enumerate((("requires-grad-off", _small), ("optimizer-on-stale-model", _tiny),
                                             ("embedding-not-in-optimizer", _small), ("clip-to-zero", _tiny),
                                             ("unshifted-targets", _tiny), ("attend-self-only", _tiny),
                                             ("causal-mask-off", _small), ("no-positions", _tiny)))}
assert_detector(detect, _h_healthy, _h_broken, what="detect", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ### (b) The cause
#
# Write `name_cause(pipe) -> str`, returning exactly one of:
#
# `"healthy"`, `"no-step"`, `"not-in-optimizer"`, `"requires-grad-off"`, `"lr-zero"`, `"grads-vanish"`,
# `"targets-misaligned"`, `"positions-unused"`, `"context-masked"`, `"future-visible"`.
#
# | name | what you can measure |
# |---|---|
# | `"requires-grad-off"` | no parameter of the built model requires a gradient |
# | `"not-in-optimizer"` | a model parameter is missing from the optimizer (compare by identity, `id`) |
# | `"lr-zero"` | the optimizer's learning rate is 0 |
# | `"no-step"` | gradients exist, but the optimizer never stepped (its `state` is empty after the step) |
# | `"grads-vanish"` | the step ran, but the gradients it used have a total norm below 1e-8 |
# | `"targets-misaligned"` | the targets are not the inputs shifted left by one |
# | `"positions-unused"` / `"context-masked"` / `"future-visible"` | the three probes of (a) |
#
# On some bugs more than one test fires (a model that cannot use positions also leaves its position
# embedding unchanged after a step): the order you run them in decides the name, so read the table
# above first. Do not train more than one step.

# %% nbgrader={"grade": false, "grade_id": "name_cause", "locked": false, "schema_version": 3, "solution": true}
def name_cause(pipe, seed=0):
    ### BEGIN SOLUTION
    batch = batch_at(pipe, seed, 0)
    if not torch.equal(batch.targets[:, :-1], batch.inputs[:, 1:]):
        return "targets-misaligned"
    ch = logit_changes(pipe, seed)
    if ch["future"] > 1e-6:
        return "future-visible"
    if ch["past"] < 1e-6:
        return "context-masked"
    if ch["position"] < 1e-6:
        return "positions-unused"
    run, before = one_step(pipe, seed)
    params = list(run.model.parameters())
    if not any(p.requires_grad for p in params):
        return "requires-grad-off"
    held = {id(p) for group in run.optimizer.param_groups for p in group["params"]}
    if any(id(p) not in held for p in params):
        return "not-in-optimizer"
    if max(group["lr"] for group in run.optimizer.param_groups) == 0:
        return "lr-zero"
    if not run.optimizer.state:
        return "no-step"
    grad_norm = sum(p.grad.double().pow(2).sum().item() for p in params if p.grad is not None) ** 0.5
    if grad_norm < 1e-8:
        return "grads-vanish"
    return "healthy"
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_name_cause_visible", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.exercises import mystery
from course.exercises.sets import SETS
import course.reference.diagnose
import course.toolkit.checks
from course.exercises.grading import assert_names

_OFF = (course.toolkit.checks.check_batch, course.toolkit.checks.update_report, course.toolkit.checks.position_sensitivity,
        course.toolkit.checks.past_sensitivity, course.toolkit.checks.future_sensitivity, course.reference.diagnose.held_out_symptom,
        mystery.reveal, mystery.draw, mystery.make, mystery.touched)  # switched off while your code runs
_SET = SETS["01_baselines"]  # the notebook's mysteries and the name each bug must get (the table above)
_cases = {name: (p, _SET.cause(mystery.reveal(p))) for name, p in _SET.draws().items()}
assert_names(name_cause, _cases, what="name_cause", off=_OFF)
### BEGIN HIDDEN TESTS
assert_names(name_cause, {f"fresh draw {i}": (mystery.hidden(b, 300 + i, _SET.base, salt="h-01-v7c"), _SET.cause(b))
                          for i, b in enumerate(("healthy", "lr-zero", "no-positions"))},
             what="name_cause (fresh draws)", off=_OFF)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_name_cause_hidden", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
import course.reference.diagnose
import course.toolkit.checks
from course import Pipeline as _Pipeline
from course.exercises import mystery as _mystery
from course.exercises.grading import assert_names as _assert_names
from course.exercises.sets import SETS as _SETS

_SET = _SETS["01_baselines"]
_OFF = (course.toolkit.checks.check_batch, course.toolkit.checks.update_report, course.toolkit.checks.position_sensitivity,
        course.toolkit.checks.past_sensitivity, course.toolkit.checks.future_sensitivity, course.reference.diagnose.held_out_symptom,
        _mystery.reveal, _mystery.draw, _mystery.make, _mystery.touched)  # switched off while your code runs
_tiny = _Pipeline(n_symbols=6, seq_len=12, batch_size=16, steps=100, n_train=512, n_val=64, warmup=10)
_h_cases = {}
for _i, _bug in enumerate(sorted(dict(_SET.causes))):
    _p = _mystery.hidden(_bug, 100 + _i, _tiny if _i % 2 else _SET.base, salt="h-01-n4m")
    _h_cases[f"hidden draw {_i}"] = (_p, _SET.cause(_bug))
_assert_names(name_cause, _h_cases, what="name_cause", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ### (c) The fix
#
# Write `fix(pipe) -> Pipeline` for a pipeline whose cause is `"targets-misaligned"`,
# `"positions-unused"`, `"context-masked"` or `"future-visible"`: return `pipe.replace(part=...)`
# with the broken part, and only that part, replaced by a working one (the references are
# `course.toolkit.batch.next_token_batch` for the collator and `course.reference.pipeline.prepare_model` for the model's
# preparation; your own equivalent is fine). Every other part must stay the very same object, and the
# settings (learning rate, seeds) must stay the draw's own: a fix that returns a fresh reference
# pipeline, or replaces parts that were not broken, fails.
#
# It is graded by behaviour: applied to fresh draws of these bugs, the fixed pipeline is trained for
# 200 steps on a seed you do not see, and `held_out_symptom` (the same detector that saw the symptom
# above) must find nothing: a held-out loss near the window floor and not below the exact chain's.
# Expect a few seconds per draw.

# %% nbgrader={"grade": false, "grade_id": "fix", "locked": false, "schema_version": 3, "solution": true}
import course.reference.pipeline

def fix(pipe):
    ### BEGIN SOLUTION
    cause = name_cause(pipe)
    if cause == "targets-misaligned":
        return pipe.replace(collate=next_token_batch)
    if cause in ("positions-unused", "context-masked", "future-visible"):
        return pipe.replace(prepare=course.reference.pipeline.prepare_model)
    return pipe
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_fix", "locked": true, "points": 3, "schema_version": 3, "solution": false}
from course.exercises import mystery
from course.exercises.sets import SETS
import course.reference.diagnose
import course.toolkit.checks

_OFF = (course.toolkit.checks.check_batch, course.toolkit.checks.update_report, course.toolkit.checks.position_sensitivity,
        course.toolkit.checks.past_sensitivity, course.toolkit.checks.future_sensitivity, course.reference.diagnose.held_out_symptom,
        mystery.reveal, mystery.draw, mystery.make, mystery.touched)  # switched off while your code runs
_symptom = lambda p: course.reference.diagnose.held_out_symptom(p, seed=31)  # runs after your fix, switched on again
### BEGIN HIDDEN TESTS
mystery.check_fix(fix, [mystery.hidden("targets-shifted-twice", 7, SETS["01_baselines"].base, salt="h-01-f1x")], _symptom,
                  what="fix", off=_OFF)
### END HIDDEN TESTS
_shown = SETS["01_baselines"].draws()  # a broken model's preparation and a broken collator
mystery.check_fix(fix, [_shown["mystery 6"], _shown["mystery 2"]], _symptom, what="fix", off=_OFF)

# %% [markdown]
# ## What these tests can and cannot prove
#
# * `ln(V)`, the unigram entropy, the window floor and the entropy rate are **baselines**, not
#   fingerprints: a loss at `ln(V)` fits "no updates", "no signal" and "random targets" alike.
# * A held-out loss below the entropy rate proves nothing by itself on a finite validation set (the
#   exact chain does it on some sets, as measured above); below the **exact chain's loss on the same
#   windows**, or by a margin of several standard deviations, it proves the model saw what it predicts.
# * The unigram baseline is only right when computed under the exact mask the loss uses.
# * A passing batch check proves the batch is well formed. It cannot prove the labels mean anything
#   (counterexample 3).
# * The update test proves parameters move, not that they move well.
# * The sensitivity tests prove what the model *can* see (past, future, position), not what it has
#   learned to use.
# * A fix is proven by the symptom going away on a fresh run, read by the same detector that saw it,
#   with nothing else changed.
