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
# * Compute the three numbers every loss is read against: `ln(V)`, the unigram entropy of the targets
#   actually scored, and the entropy rate; and what each one bounds.
# * Run the counterexamples that keep those numbers honest: a random head that is *not* at `ln(V)`, a
#   healthy model that *stays* at `ln(V)`, a relabelling that changes nothing, a mask that makes the
#   loss NaN, padding and a copy task that make it fall "too well".
# * Write a batch contract check, graded against a hidden bank of broken batches.
# * Tell "no updates" apart from "context not used" with one cheap test per cause.
#
# **Time.** About 40 seconds of computation on a laptop CPU. **GPU:** not needed anywhere.

# %%
import torch
import torch.nn.functional as F
import matplotlib.pyplot as plt

torch.set_num_threads(1)  # tiny models: one thread is fastest and does not fight other processes
_ = torch.manual_seed(0)  # returns the generator; assigned so it is not printed

# %% [markdown]
# ## Three numbers before any training
#
# For the course's language the package computes them exactly, from the chain's probabilities:

# %%
from course import Pipeline, IGNORE
from course.train import train, batch_at

pipe = Pipeline()
lang = pipe.language()
print(f"vocabulary V = {lang.vocab_size} ({lang.n_symbols} symbols + PAD + EOS)")
print(f"ln(V)                      = {lang.uniform_loss:.4f}")
print(f"unigram entropy H(pi)      = {lang.unigram_entropy:.4f}   (best loss with no context)")
print(f"bigram entropy             = {lang.bigram_entropy:.4f}   (best loss seeing one token back)")
print(f"entropy rate               = {lang.entropy_rate:.4f}   (best loss of any model)")

# %% [markdown]
# On your own data you do not have the chain, only batches. The unigram baseline must then be computed
# from **the targets the loss actually scores**: the same mask, the same ignored positions. Padding
# included, the number is a different (and wrong) baseline.
#
# ## Exercise 1: the baselines from a batch
#
# Write `uniform_loss(V)` and `masked_unigram_entropy(targets)`: the entropy, in nats, of the empirical
# distribution of the targets that are not `IGNORE` (return `float("nan")` when none is scored).

# %% nbgrader={"grade": false, "grade_id": "baselines", "locked": false, "schema_version": 3, "solution": true}
import math

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
assert abs(uniform_loss(lang.vocab_size) - lang.uniform_loss) < 1e-12, "ln(V) uses the natural log of the vocabulary size"
### BEGIN HIDDEN TESTS
for _V in (2, 7, 50257):
    assert abs(uniform_loss(_V) - math.log(_V)) < 1e-9
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_masked_unigram_entropy", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert abs(masked_unigram_entropy(torch.tensor([[0, 1, IGNORE, IGNORE]])) - math.log(2)) < 1e-9, \
    "two equally frequent scored targets have entropy ln 2; ignored targets must not count"
assert math.isnan(masked_unigram_entropy(torch.full((2, 3), IGNORE))), "nothing scored: return NaN"
### BEGIN HIDDEN TESTS
from course.baselines import unigram_entropy as _ref_entropy
_g = torch.Generator().manual_seed(11)
for _trial in range(5):
    _t = torch.randint(0, 9, (4, 13), generator=_g)
    _t[torch.rand(4, 13, generator=_g) < 0.4] = IGNORE
    assert abs(masked_unigram_entropy(_t) - _ref_entropy(_t)) < 1e-9, f"wrong entropy for\n{_t}"
_padded = batch_at(pipe.replace(min_len=8), seed=3, step=0).targets
assert abs(masked_unigram_entropy(_padded) - _ref_entropy(_padded)) < 1e-9
### END HIDDEN TESTS

# %% [markdown]
# On a padded batch, the masked baseline and the naive one (every position, padding included) differ:

# %%
padded = batch_at(pipe.replace(min_len=8), seed=0, step=0)
naive = masked_unigram_entropy(padded.inputs)  # every position, padding included
print(f"scored targets: {padded.scored.float().mean():.1%} of positions")
print(f"unigram entropy, exact mask:       {masked_unigram_entropy(padded.targets):.4f}")
print(f"unigram entropy, padding included: {naive:.4f}")

# %% [markdown]
# ## Counterexample 1: a randomly initialised head is not at ln(V)
#
# "The loss at step 0 should be `ln(V)`" holds only when the initial logits are nearly equal. With a
# larger initial scale the logits spread out, the model is confidently wrong, and the loss at
# initialisation lands *above* `ln(V)`. Below, the same model with its output head drawn at different
# scales, scored on one held-out batch.

# %%
from course.baselines import loss_at_init

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

# %%
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

# %%
# NBVAL_IGNORE_OUTPUT
import ipywidgets as widgets

def show_init_loss(head_std=0.02):
    loss = init_loss(head_std)
    print(f"head std {head_std:.2f}: loss at init {loss:.4f}, ln(V) {lang.uniform_loss:.4f}, "
          f"difference {loss - lang.uniform_loss:+.4f}")

widgets.interact(show_init_loss, head_std=widgets.FloatLogSlider(value=0.02, base=10, min=-3, max=0.7, step=0.1));

# %% [markdown]
# ## Counterexample 2: a healthy model that stays at ln(V)
#
# Give the reference pipeline targets drawn uniformly at random, independent of the inputs. Nothing is
# broken in the model or the loop; the loss stays near `ln(V)` because there is nothing to learn. A
# loss at `ln(V)` is consistent with "no learning" *and* with "no signal".

# %%
from course.data import Batch, next_token_batch

def uniform_random_targets(windows, pad_id, vocab_size=lang.vocab_size):
    batch = next_token_batch(windows, pad_id)
    g = torch.Generator().manual_seed(int(windows[:, :4].sum()))  # seeded by the batch itself
    return Batch(batch.inputs, torch.randint(0, vocab_size, batch.targets.shape, generator=g), pad_id)

noise = train(pipe.replace(collate=uniform_random_targets), steps=120, seed=0, eval_every=0, progress=True)
print(f"mean loss over the last 30 steps: {sum(noise.history['loss'][-30:]) / 30:.4f} (ln V = {lang.uniform_loss:.4f})")

# %% [markdown]
# ## Counterexample 3: a consistent relabelling changes nothing
#
# Rename every token by a fixed permutation, in the logits and in the targets alike. Cross-entropy is
# identical to the last bit, and so is the unigram entropy of the targets: the loss cannot tell you
# whether your labels mean what you think they mean.

# %%
perm = torch.randperm(lang.vocab_size, generator=torch.Generator().manual_seed(5))
logits = pipe.build_model(0)(val.inputs)
relabelled_logits = torch.empty_like(logits)
relabelled_logits[..., perm] = logits  # class c is now called perm[c]
relabelled_targets = perm[val.targets]
ce = F.cross_entropy(logits.flatten(0, 1), val.targets.flatten())
ce_relabelled = F.cross_entropy(relabelled_logits.flatten(0, 1), relabelled_targets.flatten())
print(f"CE {ce.item():.6f}, relabelled {ce_relabelled.item():.6f}, bit-identical: {torch.equal(ce, ce_relabelled)}")
print(f"unigram entropy {masked_unigram_entropy(val.targets):.6f}, relabelled {masked_unigram_entropy(relabelled_targets):.6f}")

# %% [markdown]
# ## Counterexample 4: every target ignored
#
# With `reduction="mean"`, cross-entropy divides the summed loss by the number of scored targets. When
# the mask ignores everything, that is 0/0: NaN. With `reduction="sum"` the same batch gives 0, which
# looks like a perfect model. The gradients are all zeros in both cases.

# %%
ignored = torch.full_like(val.targets, IGNORE)
for reduction in ("mean", "sum"):
    lg = logits.detach().clone().requires_grad_(True)
    loss = F.cross_entropy(lg.flatten(0, 1), ignored.flatten(), reduction=reduction)
    loss.backward()
    print(f"reduction={reduction!r}: loss {loss.item()}, largest |grad| {lg.grad.abs().max().item()}")

# %% [markdown]
# ## Counterexample 5: falling "too well"
#
# Two bugs make a loss fall faster and lower than the data allows:
#
# * **padding scored**: on padded batches, predicting PAD after PAD is trivial, so every scored padding
#   target pulls the mean loss down. Compare it with the reference trained on the *same* padded data:
#   only the mask differs.
# * **unshifted targets**: the target is the input token itself; a causal model sees it and copies it,
#   and the loss goes far below the entropy rate, which no honest model can do.

# %%
from course.bugs import inject

padded_pipe = pipe.replace(min_len=8)
runs = {
    "reference (padded data)": train(padded_pipe, steps=120, seed=0, eval_every=0, progress=True),
    "padding scored": train(inject(padded_pipe, "padding-scored"), steps=120, seed=0, eval_every=0, progress=True),
    "unshifted targets": train(inject(pipe, "unshifted-targets"), steps=120, seed=0, eval_every=0, progress=True),
}

# %%
pad_targets = batch_at(inject(padded_pipe, "padding-scored"), 0, 0).targets
print(f"share of scored targets that are PAD when padding is scored: {(pad_targets == lang.PAD).float().mean():.1%}")
for name, run in runs.items():
    print(f"{name:>24}: last-20 mean loss {sum(run.history['loss'][-20:]) / 20:.4f}")
print(f"{'entropy-rate floor':>24}: {lang.loss_floor(pipe.seq_len):.4f} (full windows), "
      f"{lang.floor_for(batch_at(padded_pipe, 0, 0).targets):.4f} (real tokens of padded windows)")

# %%
from course.plots import loss_plot

ax = loss_plot({k: r.history["loss"] for k, r in runs.items()}, lang.baselines(pipe.seq_len),
               title="Below the floor is a bug, not a breakthrough")
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
# Write `check_batch(batch, vocab_size)`: raise an exception (a `ValueError` or `AssertionError` with a
# message that says which clause failed) if the batch breaks the contract; return normally otherwise.
# The hidden tests run it on healthy batches of other shapes and vocabularies, which it must accept,
# and on a hidden bank of broken batches drawn from the bug catalogue, which it must reject. A check
# that always raises, or never does, earns nothing. (The package has its own `course.checks.check_batch`;
# the grader disables it while it runs yours.)

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
# The visible tests: two healthy batches (one padded) and two broken ones.

# %% nbgrader={"grade": true, "grade_id": "test_check_batch_visible", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.grading import assert_detector, fires

_healthy = {"full windows": batch_at(pipe, 0, 0), "padded windows": batch_at(padded_pipe, 0, 0)}
_broken = {name: batch_at(inject(padded_pipe, name), 0, 0) for name in ("unshifted-targets", "all-targets-ignored")}
assert_detector(lambda b: fires(check_batch, b, lang.vocab_size), _healthy, _broken, what="batch check")
### BEGIN HIDDEN TESTS
_hidden_pipe = Pipeline(n_symbols=8, seq_len=12, min_len=4, n_train=512)
_hidden_healthy = {f"{p.n_symbols} symbols, seed {s}": (batch_at(p, s, 1), p.language().vocab_size)
                   for p in (_hidden_pipe, pipe.replace(min_len=2)) for s in (4, 5)}
assert_detector(lambda bv: fires(check_batch, *bv), _hidden_healthy,
                {n: (batch_at(inject(_hidden_pipe, n), 2, 0), 10) for n in ("unshifted-targets", "all-targets-ignored")},
                what="batch check")
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: contract clauses on shapes, types and id ranges.

# %% nbgrader={"grade": true, "grade_id": "test_check_batch_types", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
import course.checks as _checks
_hidden_pipe = Pipeline(n_symbols=8, seq_len=12, min_len=4, n_train=512)
_saved_code = _checks.check_batch.__code__
_checks.check_batch.__code__ = (lambda batch, vocab_size, min_scored_fraction=0.99: None).__code__
try:
    _bank = {n: batch_at(inject(_hidden_pipe, n), 6, 0)
             for n in ("float-targets", "int32-inputs", "inputs-padded-with-ignore-index", "targets-one-short")}
    assert_detector(lambda b: fires(check_batch, b, 10), {"healthy": batch_at(_hidden_pipe, 6, 0)}, _bank, what="batch check")
finally:
    _checks.check_batch.__code__ = _saved_code
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: contract clauses on the shift and the mask.

# %% nbgrader={"grade": true, "grade_id": "test_check_batch_mask", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
import course.checks as _checks
_hidden_pipe = Pipeline(n_symbols=8, seq_len=12, min_len=4, n_train=512)
_saved_code = _checks.check_batch.__code__
_checks.check_batch.__code__ = (lambda batch, vocab_size, min_scored_fraction=0.99: None).__code__
try:
    _bank = {n: batch_at(inject(_hidden_pipe, n), 7, 0)
             for n in ("padding-scored", "targets-shifted-twice", "every-other-target-ignored")}
    assert_detector(lambda b: fires(check_batch, b, 10), {"healthy": batch_at(_hidden_pipe, 7, 0)}, _bank, what="batch check")
finally:
    _checks.check_batch.__code__ = _saved_code
### END HIDDEN TESTS

# %% [markdown]
# ## "No updates" or "context not used"?
#
# Two families of bugs produce a loss that does not reach the entropy rate. In the first the parameters
# never change; in the second they change, but the model cannot use the tokens before the one it
# predicts from. On a plot the two can look alike:

# %%
families = {
    "reference": pipe,
    "no updates (optimizer on a stale copy)": inject(pipe, "optimizer-on-stale-model"),
    "context unused (attention sees only itself)": inject(pipe, "attend-self-only"),
    "context unused (no positions)": inject(pipe, "no-positions"),
}
family_runs = {k: train(p, steps=120, seed=0, eval_every=0, progress=True) for k, p in families.items()}

# %%
refs = dict(lang.baselines(pipe.seq_len), **{"bigram": lang.bigram_entropy})
ax = loss_plot({k: r.history["loss"] for k, r in family_runs.items()}, refs, title="Four runs, 120 steps")
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
# The table below runs every test on the reference (the negative control: nothing may fire) and on
# a bug of each kind.

# %%
from course.checks import check_batch as reference_check_batch, update_report
from course.checks import position_sensitivity, past_sensitivity, future_sensitivity
from course.train import start, train_steps

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
    r = run_all_tests(pipe if name == "reference" else inject(pipe, name))
    print(f"{name:>26} | {r['update']:>17} | {r['batch']:>6} | {r['position']:>8} | {r['past']:>8} | {r['future']:>8}")

# %% [markdown]
# ## Exercise 3: name the cause
#
# Write `diagnose(pipe)`. It must return one name from this list:
#
# `"ok"`, `"no-step"`, `"not-in-optimizer"`, `"requires-grad-off"`, `"lr-zero"`, `"grads-vanish"`,
# `"targets-misaligned"`, `"positions-unused"`, `"context-masked"`, `"future-visible"`.
#
# Use the cheap tests above. `one_step_report(p).cause()` returns the first six names, but read the
# table first: on some bugs more than one test fires, and the order you run them in decides the name.
# Do not train. The hidden tests give it pipelines with bugs you have not run here, other seeds, and
# a differently sized language; `pipe.bugs` is blanked there, so read the pipeline's behaviour, not
# its label.

# %% nbgrader={"grade": false, "grade_id": "diagnose", "locked": false, "schema_version": 3, "solution": true}
def diagnose(p, seed=0):
    ### BEGIN SOLUTION
    V = p.language().vocab_size
    if fires(reference_check_batch, batch_at(p, seed, 0), V):
        return "targets-misaligned"
    model = p.build_model(seed)
    if future_sensitivity(model, V) > 0:
        return "future-visible"
    if past_sensitivity(model, V) == 0:
        return "context-masked"
    if position_sensitivity(model, V) == 0:
        return "positions-unused"
    return one_step_report(p, seed).cause()
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_diagnose_visible", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.grading import assert_names

assert_names(diagnose, {"reference": (pipe, "ok"), "lr-zero": (inject(pipe, "lr-zero"), "lr-zero"),
                        "attend-self-only": (inject(pipe, "attend-self-only"), "context-masked")})
### BEGIN HIDDEN TESTS
def _blank(p):
    return p.replace(bugs=())

_small = Pipeline(n_symbols=8, seq_len=12, n_train=512)
assert_names(diagnose, {
    "small reference": (_small, "ok"),
    "missing-step": (_blank(inject(_small, "missing-step")), "no-step"),
    "requires-grad-off": (_blank(inject(pipe, "requires-grad-off")), "requires-grad-off"),
})
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: the "no updates" family.

# %% nbgrader={"grade": true, "grade_id": "test_diagnose_updates", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
_small = Pipeline(n_symbols=8, seq_len=12, n_train=512)
_blank = lambda p: p.replace(bugs=())  # the bug's name is not evidence
assert_names(diagnose, {
    "reference": (_small, "ok"),
    "optimizer-on-stale-model": (_blank(inject(_small, "optimizer-on-stale-model")), "not-in-optimizer"),
    "embedding-not-in-optimizer": (_blank(inject(pipe, "embedding-not-in-optimizer")), "not-in-optimizer"),
    "clip-to-zero": (_blank(inject(_small, "clip-to-zero")), "grads-vanish"),
})
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: the "context not used" and "too good" families.

# %% nbgrader={"grade": true, "grade_id": "test_diagnose_context", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
_small = Pipeline(n_symbols=8, seq_len=12, n_train=512)
_blank = lambda p: p.replace(bugs=())
assert_names(diagnose, {
    "reference": (pipe, "ok"),
    "no-positions": (_blank(inject(_small, "no-positions")), "positions-unused"),
    "targets-shifted-twice": (_blank(inject(_small, "targets-shifted-twice")), "targets-misaligned"),
    "unshifted-targets": (_blank(inject(pipe, "unshifted-targets")), "targets-misaligned"),
    "causal-mask-off": (_blank(inject(_small, "causal-mask-off")), "future-visible"),
})
### END HIDDEN TESTS

# %% [markdown]
# ## What these tests can and cannot prove
#
# * `ln(V)`, the unigram entropy and the entropy rate are **baselines**, not fingerprints: a loss at
#   `ln(V)` fits "no updates", "no signal" and "random targets" alike; a loss below the entropy rate
#   proves the model saw what it predicts.
# * The unigram baseline is only right when computed under the exact mask the loss uses.
# * A passing batch check proves the batch is well formed. It cannot prove the labels mean anything
#   (counterexample 3).
# * The update test proves parameters move, not that they move well.
# * The sensitivity tests prove what the model *can* see (past, future, position), not what it has
#   learned to use.
