# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (debug course)
#     language: python
#     name: debug-course
# ---

# %% [markdown]
# # 12 · Learning-rate instability: a run that diverges, or trains worse than it should
#
# **What you learn.**
# * Sweep the learning rate, find the best rate, and see what the rates above it do: an **early**
#   divergence (the first steps), a **late** one (after warm-up has ended), or none.
# * Warm-up as a hypothesis to test: what it changes at a rate above the best, and what it does not.
# * Read a clip threshold off the distribution of gradient norms, and see what a threshold far too
#   low or far too high does, with AdamW and with SGD.
# * Seed noise: a change that "helps" by less than the spread across seeds is no change.
# * Check what a run **used** (the rate at each step, the optimizer's own constants, the scale of
#   the weights it starts from), not what its configuration says.
# * **Mystery:** a run that spikes or trains worse, its cause in its schedule, its optimizer or its
#   initialisation: write the test, name the cause and fix it, graded on draws you have not seen.
#
# **Predict, then reveal.** Before each result that is the lesson, a *Predict* cell asks you to write
# your guess into `prediction`; the cell after it prints your guess beside what was measured.
#
# **Time.** Under a minute of computation on a laptop CPU (about fifty training runs of a second or
# less; `make bench` times every notebook on yours). **GPU:** not needed anywhere.

# %%
import math

import matplotlib.pyplot as plt
import torch

from course.exercises.record import reveal

torch.set_num_threads(1)  # tiny models: one thread is fastest and does not fight other processes
_ = torch.manual_seed(0)  # returns the generator; assigned so it is not printed

# %% [markdown]
# ## The symptom
#
# A small version of the course pipeline (one layer, 16-token windows, batches of 32, 100 steps of
# AdamW, with weight decay 0: Adam). Two runs of it that differ only in the learning rate, both
# without warm-up (`warmup=1`: the first step already uses the full rate). The dashed line is ln V,
# the loss of a uniform guess (where a fresh model starts); the dotted line is the window floor, the
# best mean loss any model can reach over fresh 16-token windows (a finite batch can score below it).

# %% tags=["demo"]
from course import ModelConfig, Pipeline
from course.reference.train import train
from course.lessons import instability

BASE = Pipeline().replace(n_symbols=8, seq_len=16, model=ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                          n_train=2048, n_val=128, batch_size=32, steps=100, lr=1e-2, warmup=10)
NO_WARMUP = BASE.replace(warmup=1)
symptom = {lr: train(NO_WARMUP.replace(lr=lr), seed=0, eval_every=10**9) for lr in (1e-2, 1e-1)}
for lr, run in symptom.items():
    print(f"lr {lr:g}: final validation loss {run.final_val_loss:.3f}, highest training loss "
          f"{max(run.history['loss']):.2f} at step {run.history['loss'].index(max(run.history['loss']))}")

# %% tags=["demo"]
instability.plot_losses({f"lr {lr:g}, no warm-up": run for lr, run in symptom.items()}, BASE,
                        "the same recipe at two learning rates")
plt.show()

# %% [markdown]
# At the higher rate the loss jumps above where it started within a few steps and never catches up.
# The hypotheses that produce this picture, each tested below against a healthy control:
#
# 1. the rate is above the range this model trains stably at (a sweep tells);
# 2. the rate is fine once the model has left its initial state, but the first steps need a smaller
#    one (warm-up tells);
# 3. the gradient clipping is wrong for this run (the distribution of gradient norms tells, on a
#    healthy run);
# 4. something the configuration does not show: the schedule, the optimizer's constants or the
#    initialisation is not what it says (what the run *used* tells);
# 5. it is noise: another seed would look different (several seeds tell: compare the gap above
#    with the spread measured at the end).
#
# ## The sweep
#
# Train the same recipe, same seed (same initialisation and batch order) at rates a factor of about
# three apart, without warm-up. `instability.diverged_at(run)` is the first step whose training loss
# is non-finite or more than 0.5 nats above the first step's; `instability.divergence(run)` calls it
# **early** within the first 10% of the steps and **late** after.
#
# **Predict.** Which rate of `1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1` ends with the lowest
# validation loss, and does the next rate above it (about three times it) diverge early, late, or
# not at all?

# %% tags=["demo"]
prediction = None  # your guess: a pair (best rate, "early" / "late" / None), e.g. (3e-3, "late")

# %% tags=["demo"]
RATES = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0)
sweep = instability.sweep(NO_WARMUP, RATES, seed=0)
best = instability.best_rate(sweep)
for lr, run in sweep.items():
    print(f"lr {lr:<6g} final validation loss {run.final_val_loss:6.3f}   diverged at step "
          f"{instability.diverged_at(run)} ({instability.divergence(run)})")
above = RATES[RATES.index(best) + 1] if best != RATES[-1] else None
reveal("(best rate, divergence at the next rate above it)", prediction,
       (best, instability.divergence(sweep[above]) if above else "no rate above it"))

# %% tags=["demo"]
instability.plot_sweep(sweep, BASE, "sweep without warm-up (seed 0)")
plt.show()

# %% [markdown]
# Below the best rate a run is stable and slow; just above it, stable and worse; from ten times it,
# the loss shoots up in the first steps, where the model is still near its initialisation, and the
# run never recovers what it lost (one seed: the neighbours of the best can swap places by seed
# noise). The slider below shows one rate's curve over the others.

# %% tags=["demo"]
# NBVAL_IGNORE_OUTPUT
explorer = instability.rate_explorer(sweep, BASE)
explorer

# %% [markdown]
# ## Warm-up
#
# The reference schedule multiplies a linear warm-up (from `1/warmup` of the rate to all of it over
# the first `warmup` steps) by a linear decay that starts at step 0 and stops at 10% (reached at 90%
# of the steps), so a warmed-up run's highest rate is somewhat below its nominal rate (printed
# below). Warm-up is a hypothesis for an *early*
# divergence: the first steps meet a freshly initialised model, whose gradients and Adam's
# second-moment estimates are not yet representative (Liu et al. 2019, RAdam; Goyal et al. 2017 for
# large-batch SGD). This model is pre-LayerNorm, which Xiong et al. 2020 show can train without
# warm-up: the sweep above agrees at the best rate. The question is what happens above it.
#
# **Predict.** At rate 0.1 (ten times the best) with 20 steps of warm-up: does the run still
# diverge, and does it end as low as the best rate without warm-up? And at rate 1 with 50 steps of
# warm-up, does it diverge?

# %% tags=["demo"]
prediction = None  # your guess: a triple (0.1 diverges?, 0.1 as low as the best?, 1 with 50 warm-up steps diverges?)

# %% tags=["demo"]
warm = {(lr, w): train(BASE.replace(lr=lr, warmup=w), seed=0, eval_every=10**9)
        for lr, w in ((0.1, 1), (0.1, 20), (1.0, 1), (1.0, 50))}
for (lr, w), run in warm.items():
    print(f"lr {lr:<4g} warm-up {w:>2} steps: highest rate used {max(run.history['lr']):.3g}, diverged at step "
          f"{instability.diverged_at(run)}, final validation loss {run.final_val_loss:.3f}")
reveal("(0.1 diverges?, 0.1 as low as the best?, 1 with 50 warm-up steps diverges?)", prediction,
       (instability.diverged_at(warm[0.1, 20]) is not None,
        warm[0.1, 20].final_val_loss <= sweep[best].final_val_loss,
        instability.diverged_at(warm[1.0, 50]) is not None))

# %% [markdown]
# Warm-up removed the early divergence at 0.1, and the run still ends above the best rate's loss: on
# this seed, the rate it reached (printed: still about eight times the best) is what costs it, not
# the start. At 1 it moved the divergence from step 1 to step 6 (both early by the 10% convention),
# where the warming rate had already passed rates the sweep saw diverge: later, not gone. What the schedule
# did is in the run's own record, the rate the optimizer used at each step (`run.history["lr"]`),
# which is what to read rather than the `warmup` setting:

# %% tags=["demo"]
fig, ax = plt.subplots(figsize=(7, 3.2))
for (lr, w), run in warm.items():
    ax.plot(run.history["step"], run.history["lr"], label=f"lr {lr:g}, warm-up {w}")
    at = instability.diverged_at(run)
    if at is not None:
        ax.plot([at], [run.history["lr"][at]], "x", color="red", markersize=9)
ax.set_yscale("log")
ax.set_xlabel("step")
ax.set_ylabel("learning rate used (log scale; x: diverged)")
ax.set_title("the rate each run used")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Clipping: read the threshold off the gradient norms
#
# The loop clips the gradient to a total norm of `clip` (1.0 here) and logs the norm *before*
# clipping (`run.history["grad_norm"]`). The Tuning Playbook's advice: log the unclipped norms,
# choose the threshold from about their 90th percentile, and treat a threshold that clips most steps
# (more than half) as an odd way of lowering the learning rate: lower the rate instead. A healthy
# run at the best rate, with four thresholds (the recipe's own 1.0 clips about a quarter of its
# steps, printed below):

# %% tags=["demo"]
healthy = train(BASE, seed=0, eval_every=10**9)
norms = healthy.history["grad_norm"]
p90 = instability.clip_percentile(norms, 0.9)
instability.plot_grad_norms(norms, {"the setting": BASE.clip, "90th percentile": p90,
                                    "far too low": 0.01, "far too high": 100.0},
                            "healthy run at lr 0.01: gradient norms before clipping")
plt.show()

# %% [markdown]
# ### Exercise 1: the clipped fraction
#
# Write `clipped_fraction(grad_norms, threshold)`: the fraction of steps whose pre-clip gradient
# norm is **strictly above** `threshold` (this notebook's convention; `clip_grad_norm_` itself also
# scales a norm equal to the threshold, by a factor within 1e-6 of 1). `grad_norms` is a
# list of floats or a 1-D tensor. A non-finite norm (NaN or inf) counts as clipped: such a step needs
# attention whatever the threshold (and `clip_grad_norm_` cannot repair it). An empty list gives
# `0.0`. Return a Python float (a 0-d tensor is accepted too), compared to 1e-6.
# `instability.clipped_fraction` is switched off while this is graded.

# %% nbgrader={"grade": false, "grade_id": "clipped_fraction", "locked": false, "schema_version": 3, "solution": true}
def clipped_fraction(grad_norms, threshold):
    ### BEGIN SOLUTION
    norms = [float(g) for g in grad_norms]
    if not norms:
        return 0.0
    return sum(1 for g in norms if not math.isfinite(g) or g > threshold) / len(norms)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_clipped_fraction", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import math
import torch

from course.lessons import instability as _instability
from course.exercises.grading import graded_calls as _graded_calls

# each call runs apart, where this cell's data does not exist; what comes back is float(the answer)
_got = _graded_calls(lambda _c: float(clipped_fraction(*_c)), [
    ([0.5, 1.5, 2.0, 0.9], 1.0), ([1.0, 1.0, 2.0], 1.0), (torch.tensor([0.1, float("nan"), float("inf"), 0.2]), 5.0),
    ([], 1.0), ([3.0, 4.0], 0.01), ([3.0, 4.0], 100.0)], off=(_instability.clipped_fraction,))
assert abs(_got[0] - 0.5) < 1e-6, "two of four norms are above 1.0"
assert abs(_got[1] - 1 / 3) < 1e-6, f"a norm equal to the threshold is not clipped (only > counts): 1 of 3, got {_got[1]}"
assert abs(_got[2] - 0.5) < 1e-6, f"NaN and inf count as clipped (2 of 4), and a tensor works like a list; got {_got[2]}"
assert _got[3] == 0.0, "an empty list gives 0.0"
assert _got[4] == 1.0 and _got[5] == 0.0, "a threshold below every norm clips all steps, one above every norm clips none"
### BEGIN HIDDEN TESTS
from course.exercises.grading import hidden_seed as _hidden_seed

_g = torch.Generator().manual_seed(_hidden_seed("h-12-clf"))
_lists = [torch.rand(int(torch.randint(4, 30, (1,), generator=_g)), generator=_g) * (0.5 + 4 * float(torch.rand(1, generator=_g)))
          for _ in range(10)]
for _bad in (float("nan"), float("-inf"), float("inf")):  # non-finite norms in random lists, at random steps
    _l = _lists[int(torch.randint(10, (1,), generator=_g))]
    _l[int(torch.randint(len(_l), (1,), generator=_g))] = _bad
_thresholds = []
for _l in _lists:  # two thresholds inside the norms' range, and one equal to one of the finite norms
    _finite = [_x for _x in _l.tolist() if math.isfinite(_x)]  # lists of 4 or more: at least one is finite
    _top = max(_finite)
    _thresholds.append([float(torch.rand(1, generator=_g)) * _top, float(torch.rand(1, generator=_g)) * _top,
                        _finite[int(torch.randint(len(_finite), (1,), generator=_g))]])
_KIND = ("a random threshold", "another random threshold", "a threshold equal to one of the norms")
# per random list and threshold: the tensor (a copy of its own), then the list
_hg = _graded_calls(lambda _c: float(clipped_fraction(*_c)), [([float("-inf")], 1.0), ([2.0], 2.0)]
                    + [(_x, _t) for _l, _ts in zip(_lists, _thresholds) for _t in _ts for _x in (_l.clone(), _l.tolist())],
                    off=(_instability.clipped_fraction,))
_want = [[_instability.clipped_fraction(_l.tolist(), _t) for _t in _ts] for _l, _ts in zip(_lists, _thresholds)]
assert _hg[0] == 1.0, "-inf is non-finite: clipped"
assert _hg[1] == 0.0, "equal to the threshold: not clipped"
for _i, (_l, _w) in enumerate(zip(_lists, _want)):
    for _j, (_kind, _x) in enumerate(zip(_KIND, _w)):
        assert abs(_hg[2 + 6 * _i + 2 * _j] - _x) < 1e-6, \
            f"wrong fraction for random tensor {_i + 1} ({len(_l)} norms), {_kind}"
        assert abs(_hg[3 + 6 * _i + 2 * _j] - _x) < 1e-6, \
            f"wrong fraction for random list {_i + 1} ({len(_l)} norms), {_kind}"
### END HIDDEN TESTS

# %% tags=["demo"]
for name, t in (("the setting", BASE.clip), ("90th percentile", p90), ("far too low", 0.01), ("far too high", 100.0)):
    print(f"{name:>16} {t:8.3g}: clips {clipped_fraction(norms, t):.0%} of the healthy run's steps")

# %% [markdown]
# A threshold far too low clips every step; one far too high never clips, so on this healthy run it
# changes nothing. What does clipping *every* step do to training?
#
# **Predict.** The same healthy run with the threshold at 0.01, so that every step is clipped: does
# its final loss end much worse (by more than 0.1 nats) than the unclipped run's, or about the same,
# with AdamW? And with SGD (momentum 0.9, rate 0.1)?

# %% tags=["demo"]
prediction = None  # your guess: a pair for (AdamW, SGD), each "much worse" or "about the same"

# %% tags=["demo"]
def sgd(params, lr, weight_decay):
    return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=weight_decay)


SGD = BASE.replace(optimizer_factory=sgd, lr=0.1)
clip_runs = {(opt, c): train((BASE if opt == "AdamW" else SGD).replace(clip=c), seed=0, eval_every=10**9)
             for opt in ("AdamW", "SGD") for c in (None, 0.01)}
for (opt, c), run in clip_runs.items():
    print(f"{opt:>5}, clip {str(c):>4}: final validation loss {run.final_val_loss:.3f}, "
          f"clipped {clipped_fraction(run.history['grad_norm'], c if c is not None else math.inf):.0%} of steps")
_change = {opt: clip_runs[opt, 0.01].final_val_loss - clip_runs[opt, None].final_val_loss for opt in ("AdamW", "SGD")}
reveal("final loss with every step clipped, against unclipped: (AdamW, SGD)", prediction,
       tuple("much worse" if _change[o] > 0.1 else "about the same" for o in ("AdamW", "SGD")))
print({o: round(v, 3) for o, v in _change.items()})

# %% [markdown]
# Clipping scales the whole gradient by one number per step. SGD's step follows the gradient, so a
# threshold that clips every step feeds it a gradient of norm 0.01 every step; with momentum 0.9
# each step is at most `lr * 0.01 / (1 - 0.9)` long: SGD crawls.
# AdamW divides each coordinate by a running root-mean-square of its own gradients, so a rescaling
# of the whole gradient largely cancels (it does not cancel exactly: the factor changes from step
# to step); compare the change above with the seed-to-seed spread measured below before reading
# anything into it. So "most steps are clipped" says different things about different optimizers,
# and a clipping policy is read off the distribution of the run at hand. What clipping does buy: SGD
# at rate 1, with and without a clip at 1.0:

# %% tags=["demo"]
for c in (None, 1.0):
    run = train(SGD.replace(lr=1.0, clip=c), seed=0, eval_every=10**9)
    print(f"SGD at rate 1, clip {c}: diverged at step {instability.diverged_at(run)} "
          f"({instability.divergence(run)}), final validation loss {run.final_val_loss:.4g}")

# %% [markdown]
# ## What a run used
#
# The loss cannot tell these causes apart: a schedule that skips warm-up, an optimizer built with
# other constants than the configuration suggests, an initialisation at another scale, all give a
# worse loss, some of them an early jump. What each run *used* can. `instability.used(pipe)` trains a few steps
# and reads the rate the optimizer used at each step, the optimizer's own constants (from its param
# group: `eps`, `betas`, `weight_decay`, `initial_lr`) and the standard deviation of the weights the
# model started from. Two bugs from the catalogue of this notebook, beside the healthy recipe:

# %% tags=["demo"]
from course.bugs import inject

shown = {"healthy": BASE, "adam-eps-large": inject(BASE, "adam-eps-large"),
         "init-too-small": inject(BASE, "init-too-small")}
for name, pipe in shown.items():
    u = instability.used(pipe)
    print(f"{name:>15}: rate used at steps 0-3 {[f'{x:.2g}' for x in u['lr']]}, eps {u['optimizer']['eps']:g}, "
          f"betas {u['optimizer']['betas']}, initial weight scale {u['init_scale']:.2g}")

# %% tags=["demo"]
shown_runs = {name: train(pipe, seed=0, eval_every=10**9) for name, pipe in shown.items()}
instability.plot_losses({f"{name}: final {run.final_val_loss:.3f}": run for name, run in shown_runs.items()}, BASE,
                        "same settings, same seed: what the configuration does not show")
plt.show()

# %% [markdown]
# AdamW with `eps=0.1` divides by about 0.1 wherever the gradients are small, so it takes steps of
# SGD with momentum at rate `lr / 0.1`: here it only falls slowly. Weights 100 times smaller than
# the reference's start every layer near zero, and this run ends worse. Both runs have the settings
# of the healthy one, and `used` shows the difference in one line each. The configuration is a
# claim; what the run used is the evidence.
#
# ## Seed noise
#
# Every comparison above used seed 0. A seed sets the initialisation and the batch order, and it
# moves the final loss by itself.
#
# **Predict.** The healthy recipe, trained with five seeds: how far apart (in nats) are its lowest and
# highest final validation losses?

# %% tags=["demo"]
prediction = None  # your guess: a number, e.g. 0.01

# %% tags=["demo"]
SEEDS = range(5)
seed_runs = {"lr 0.01 (the recipe)": [train(BASE, seed=s, eval_every=10**9) for s in SEEDS],
             "lr 0.003": [train(BASE.replace(lr=3e-3), seed=s, eval_every=10**9) for s in SEEDS]}
finals = {label: [r.final_val_loss for r in runs] for label, runs in seed_runs.items()}
recipe = instability.spread(finals["lr 0.01 (the recipe)"])
print({label: [round(x, 3) for x in v] for label, v in finals.items()})
reveal("range of the recipe's final loss over 5 seeds (nats)", prediction, round(recipe["range"], 3))

# %% tags=["demo"]
instability.plot_seed_band({label: [r.history["loss"] for r in runs] for label, runs in seed_runs.items()}, BASE,
                           "five seeds per setting: mean and the band between lowest and highest")
plt.show()

# %% [markdown]
# Two runs of the *same* recipe, seeds 0 and 2, differ by about the printed range: had seed 2 been a
# "change", it would have looked like an improvement. The rule this notebook uses, conservative on
# purpose with a handful of seeds: a candidate is better only if its mean final loss is below the
# baseline's by more than the larger of the two ranges (with a single seed per side both ranges
# are 0 and any decrease counts: the rule needs several seeds to mean anything). The Tuning
# Playbook's advice is the same in spirit: rerun the best trial several times before adopting it.
#
# ### Exercise 2: a real change?
#
# Write `real_change(baseline, candidate) -> bool`: `baseline` and `candidate` are lists (or 1-D
# tensors) of final losses, one per seed, possibly of different lengths (at least one value each).
# Return `True` exactly when the mean of `candidate` is lower than the mean of `baseline` by **more
# than** the larger of the two ranges (the range of a list is its maximum minus its minimum; a
# single value has range 0). Return a Python or torch bool. `instability.real_change` and
# `instability.spread` are switched off while this is graded.

# %% nbgrader={"grade": false, "grade_id": "real_change", "locked": false, "schema_version": 3, "solution": true}
def real_change(baseline, candidate):
    ### BEGIN SOLUTION
    b = [float(x) for x in baseline]
    c = [float(x) for x in candidate]
    noise = max(max(b) - min(b), max(c) - min(c))
    return sum(b) / len(b) - sum(c) / len(c) > noise
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_real_change", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import torch

from course.lessons import instability as _instability
from course.exercises.grading import graded_calls as _graded_calls


def _probe(case):  # apart, where this cell's data does not exist: the answer, as the checks read it
    _v = real_change(*case)
    return {"in_true": _v in (True,), "in_false": _v in (False,), "bool": bool(_v)}


_got = _graded_calls(_probe, [
    ([1.0, 1.1, 1.2], [0.5, 0.55, 0.6]), ([1.0, 1.3], [0.9, 0.95]), ([0.5, 0.55], [1.0, 1.1]), ([2.0], [1.0]),
    ([1.0, 1.0], [0.5, 0.5, 0.5, 1.5]), (torch.tensor([1.0, 1.2]), torch.tensor([0.7, 0.75])), ([1.0, 1.5], [0.75, 0.75]),
], off=(_instability.real_change, _instability.spread))
assert _got[0]["in_true"], "mean 1.1 against 0.55: 0.55 lower, ranges 0.2 and 0.1"
assert _got[1]["in_false"], \
    "mean 1.15 against 0.925 is 0.225 lower, but the baseline's range is 0.3: inside the noise"
assert _got[2]["in_false"], "a candidate that is worse is not an improvement"
assert _got[3]["in_true"], "single values have range 0: any decrease counts"
assert _got[4]["in_false"], \
    "lists of different lengths: mean 1.0 against 0.75, but the candidate's range is 1.0"
assert _got[5]["bool"] is True, "tensors work like lists"
assert _got[6]["in_false"], "a decrease (0.5) equal to the range (0.5) is not more than it"
### BEGIN HIDDEN TESTS
from course.exercises.grading import hidden_seed as _hidden_seed

for _k in range(8):  # random pairs that hold both answers, a gain inside the noise, and a gain inside the candidate's range only
    _g = torch.Generator().manual_seed(_hidden_seed("h-12-rch") + _k)
    _pairs = [((torch.rand(int(torch.randint(1, 6, (1,), generator=_g)), generator=_g) + _s).tolist(),
               torch.rand(int(torch.randint(1, 6, (1,), generator=_g)), generator=_g).tolist())
              for _s in (0.0, 0.3, 0.6, 0.9, 1.2, 1.5) for _ in range(4)]
    _want = [_instability.real_change(_b, _c) for _b, _c in _pairs]  # the draw's answers (deleted where yours runs)
    _sp = [(_instability.spread(_b), _instability.spread(_c)) for _b, _c in _pairs]
    _gain = [_sb["mean"] - _sc["mean"] for _sb, _sc in _sp]
    if (len(set(_want)) == 2 and any(_x > 0 and not _w for _x, _w in zip(_gain, _want))
            and any(_sb["range"] < _x <= _sc["range"] for _x, (_sb, _sc) in zip(_gain, _sp))):
        break  # a suitable draw
else:  # every redraw was unsuitable
    raise AssertionError("grader: no random pairs held every kind of case")
_hg = _graded_calls(_probe, [([3.0, 1.0], [0.1, 0.3, 0.2]), ([1.0, 1.0, 1.0], [0.99])] + _pairs,
                    off=(_instability.real_change, _instability.spread))
assert _hg[0]["in_false"], "gain 1.8 against the baseline's range 2.0"
assert _hg[1]["in_true"], "ranges 0: a gain of 0.01 counts"
for _i, ((_b, _c), _w, _r) in enumerate(zip(_pairs, _want, _hg[2:])):
    assert _r["bool"] is _w, \
        f"wrong for random pair {_i + 1} (a baseline of {len(_b)} seeds, a candidate of {len(_c)})"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 3: a mystery run
#
# Now you debug. Below are six pipelines drawn by `course.exercises.mystery.draw` from this
# notebook's bug family: each is healthy or carries one bug, and nothing you can read says which.
# Every part is an opaque `<part>`, every setting shows the healthy value, and each draw has its own
# seeds, learning rate and warm-up, drawn independently of the bug. All you get is the symptom: a run
# that may spike early or end worse than it should.
#
# The pipelines are small (one layer, 60 steps of 32 windows at a rate around 0.03), so one
# training takes well under a second.

# %% tags=["demo"]
from course.exercises import mystery
from course.exercises.sets import SETS
from course.reference.pipeline import healthy_twin
import course.reference.pipeline  # the reference parts (the table of the fix below)

MYSTERIES = SETS["12_lr_instability"]  # the candidates, the base and the seeds; the tests draw the same
mysteries = MYSTERIES.draws()
print(repr(mysteries["mystery 0"].schedule), repr(mysteries["mystery 0"].optimizer_factory), "(every part looks like this)")

# %% tags=["demo"]
for name, p in mysteries.items():
    run, twin = train(p, seed=0, eval_every=10**9), train(healthy_twin(p), seed=0, eval_every=10**9)
    print(f"{name:>10}: lr {p.lr:.3g}, warm-up {p.warmup:>2}: final validation loss {run.final_val_loss:.3f} "
          f"(healthy twin, same seed: {twin.final_val_loss:.3f}), highest training loss {max(run.history['loss']):.2f}")

# %% [markdown]
# Against its twin on the same seed, a difference in the loss is real, but some bugs move it only a
# little, and on other seeds the loss moves by about the spread measured earlier. The tests of this
# notebook are sharper:
#
# * **the healthy twin** (`healthy_twin(pipe)`: the same settings and seeds, every part the
#   reference): trained with the same seed, it is the negative control; a healthy pipeline gives the
#   same numbers as its twin, bit for bit;
# * **what the run used**: `instability.used(pipe)` against `instability.used(healthy_twin(pipe))`:
#   a dict with the rate at each step (`"lr"`: the schedule), the optimizer's constants
#   (`"optimizer"`: the optimizer factory), the initial weight scale (`"init_scale"`: the model's
#   preparation) and each step's relative update (`"rel_update"`), over the first `steps=4` steps by
#   default (pass `steps=` for more: a part that misbehaves only later needs them). Floats from the
#   same computation are equal; compare rates to a relative 1e-6 and the weight scale to 1%.
#
# ### (a) A falsifying test
#
# Write `detect(pipe) -> bool`: `True` if `pipe` carries a bug of this family (its schedule, its
# optimizer or its initialisation is not the reference's), `False` for a healthy pipeline. Return a
# Python or torch bool. Graded like a test suite: quiet on every healthy draw and firing on every
# broken one, including bugs of this family you have not seen and draws with other seeds. A
# pipeline that crashes under your test is broken: catch the exception around the pipeline's own
# calls and return `True`. `course.exercises.mystery.reveal`, `draw`, `make`, `touched` and
# `instability.problems` are switched off while it runs.

# %% nbgrader={"grade": false, "grade_id": "detect", "locked": false, "schema_version": 3, "solution": true}
def detect(pipe):
    ### BEGIN SOLUTION
    try:
        mine, ref = instability.used(pipe), instability.used(healthy_twin(pipe))
    except Exception:  # a pipeline that crashes under the test is broken
        return True
    rates_differ = any(abs(a - b) > 1e-6 * b for a, b in zip(mine["lr"], ref["lr"]))
    scale_differs = abs(mine["init_scale"] / ref["init_scale"] - 1) > 0.01
    return rates_differ or mine["optimizer"] != ref["optimizer"] or scale_differs
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_detect", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.exercises.sets import SETS as _SETS
from course.exercises import mystery as _mystery
from course.lessons import instability as _instability
from course.exercises.grading import assert_detector as _assert_detector

_OFF = (_mystery.reveal, _mystery.draw, _mystery.make, _mystery.touched, _instability.problems)
_mysteries = _SETS["12_lr_instability"].draws()  # the notebook's `mysteries`, drawn again here
_answers = {name: _mystery.reveal(p) for name, p in _mysteries.items()}


def _crashing_schedule(step, warmup, steps):  # a part that raises: a pipeline that crashes under your test is broken
    raise RuntimeError("this pipeline's schedule crashes")


_broken = {n: p for n, p in _mysteries.items() if _answers[n] != "healthy"}
_broken["a pipeline that crashes"] = _SETS["12_lr_instability"].base.replace(schedule=_crashing_schedule)
_assert_detector(detect, {n: p for n, p in _mysteries.items() if _answers[n] == "healthy"}, _broken, "falsifying test", off=_OFF)
### BEGIN HIDDEN TESTS
_hbase = _SETS["12_lr_instability"].base
_healthy = {f"healthy draw {s}": _mystery.hidden("healthy", s, _hbase, salt="h-12-d3b") for s in (1, 2)}
_broken = {b: _mystery.hidden(b, 3 + i, _hbase, salt="h-12-d3b") for i, b in enumerate(
    ("warmup-in-examples", "adam-beta2-low", "init-too-small", "warmup-skipped"))}
_assert_detector(detect, _healthy, _broken, "falsifying test (unseen draws)", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ### (b) Name the cause
#
# Write `name_cause(pipe) -> str`, returning exactly one of `"healthy"`, `"schedule"`, `"optimizer"`,
# `"init"`: the part the bug lives in (the schedule part, the optimizer factory, or the model's
# preparation). Graded on the draws above and on fresh draws (other seeds, and bugs of each kind
# that you have not run); an answer that reads the pipeline's settings or reprs, or is always the
# same, cannot pass. The same functions are switched off.

# %% nbgrader={"grade": false, "grade_id": "name_cause", "locked": false, "schema_version": 3, "solution": true}
def name_cause(pipe):
    ### BEGIN SOLUTION
    mine, ref = instability.used(pipe), instability.used(healthy_twin(pipe))
    if any(abs(a - b) > 1e-6 * b for a, b in zip(mine["lr"], ref["lr"])):
        return "schedule"
    if mine["optimizer"] != ref["optimizer"]:
        return "optimizer"
    if abs(mine["init_scale"] / ref["init_scale"] - 1) > 0.01:
        return "init"
    return "healthy"
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_cause", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.exercises.sets import SETS as _SETS
from course.exercises import mystery as _mystery
from course.lessons import instability as _instability
from course.exercises.grading import assert_names as _assert_names

_OFF = (_mystery.reveal, _mystery.draw, _mystery.make, _mystery.touched, _instability.problems)
_mysteries = _SETS["12_lr_instability"].draws()  # the notebook's `mysteries`, drawn again here
_assert_names(name_cause, {n: (p, _SETS["12_lr_instability"].cause(_mystery.reveal(p))) for n, p in _mysteries.items()},
              "cause", off=_OFF)
### BEGIN HIDDEN TESTS
_hbase = _SETS["12_lr_instability"].base
_cases = {}
for _i, _b in enumerate(("healthy", "warmup-in-examples", "adam-beta2-low", "init-too-small", "warmup-skipped",
                         "adam-eps-large")):
    _cases[f"fresh draw {_i}"] = (_mystery.hidden(_b, 20 + _i, _hbase, salt="h-12-c51"), _SETS["12_lr_instability"].cause(_b))
_assert_names(name_cause, _cases, "cause (fresh draws)", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ### (c) The fix
#
# Write `fix(pipe) -> Pipeline`: the pipeline with the broken part replaced by the reference, and
# nothing else changed (`pipe.replace(field=...)`; you may call your `name_cause`). The references:
#
# | field | reference value |
# |---|---|
# | `schedule` | `course.reference.pipeline.warmup_then_linear` |
# | `optimizer_factory` | `course.reference.pipeline.adamw` |
# | `prepare` | `course.reference.pipeline.prepare_model` |
#
# Graded by behaviour on fresh draws of broken pipelines (bugs you ran and bugs you did not): the fix
# may change only the field the bug lives in (a changed setting, or a part that was not broken, fails
# it), and the fixed pipeline, run on a fresh seed, must use what its healthy twin uses
# (`instability.problems` must be quiet; it and `course.exercises.mystery.reveal`, `draw`, `make` and
# `touched` are switched off while your fix runs). No stored number is compared.

# %% nbgrader={"grade": false, "grade_id": "fix", "locked": false, "schema_version": 3, "solution": true}
import course.reference.pipeline

def fix(pipe):
    ### BEGIN SOLUTION
    cause = name_cause(pipe)
    if cause == "schedule":
        return pipe.replace(schedule=course.reference.pipeline.warmup_then_linear)
    if cause == "optimizer":
        return pipe.replace(optimizer_factory=course.reference.pipeline.adamw)
    if cause == "init":
        return pipe.replace(prepare=course.reference.pipeline.prepare_model)
    return pipe
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_fix", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.exercises.sets import SETS as _SETS
from course.exercises import mystery as _mystery
from course.lessons import instability as _instability

_OFF = (_instability.problems,)  # check_fix also switches off reveal, draw, make, touched
_mbase = _SETS["12_lr_instability"].base


def _still_broken(fixed):
    found = _instability.problems(fixed, seed=7)  # a fresh seed: new initialisation and batch order
    return "after your fix, run on a fresh seed: " + "; ".join(found) if found else None

### BEGIN HIDDEN TESTS
_mystery.check_fix(fix, [_mystery.hidden(b, 40 + i, _mbase, salt="h-12-f08") for i, b in enumerate(
    ("warmup-in-examples", "adam-beta2-low", "init-too-small"))],
    _still_broken, "fix (unseen bugs)", off=_OFF)
### END HIDDEN TESTS
_mystery.check_fix(fix, [_mystery.make(b, 30 + i, _mbase) for i, b in enumerate(
    ("warmup-skipped", "adam-eps-large", "init-too-small"))],  # a bug in each field of the table
    _still_broken, "fix", off=_OFF)

# %% [markdown]
# ## What each test can and cannot prove
#
# * **A sweep** finds the best rate *for this recipe, seed and step budget*: with more steps, another
#   batch size or another model, the best rate moves. One seed per rate: the neighbours of the best
#   can swap places by seed noise alone.
# * **Divergence** as "the loss rose above its start by 0.5 nats" catches blow-ups; a run that
#   stalls without climbing, or climbs by less, is not caught. Early and late are relative to the
#   run's length, a convention.
# * **Warm-up** that removes an early divergence shows the start was the problem at that rate; it
#   does not show the rate is good (0.1 above), and at 1 with 50 warm-up steps the divergence moved
#   from step 1 to step 6, it did not go (one warm-up length, one seed).
# * **What clipping every step does** depends on the optimizer: with SGD a threshold that clips every step
#   slows training drastically; with AdamW the change is small beside the seed noise. The 90th
#   percentile is a starting point measured on one healthy run, not a rule.
# * **Seeds**: five seeds estimate the spread roughly; a change inside it is not shown to be a
#   change, and a change just outside it is a candidate for more seeds, not a proof.
# * **What a run used** against its healthy twin, same seed: any difference proves a part differs
#   from the reference. No difference proves only that, over the steps compared (4 by default), the
#   rate, the constants read from the first param group (`eps`, `betas`, `weight_decay`,
#   `initial_lr`; not the optimizer's class or momentum) and the initial scale of the weight matrices
#   match: a broken loss or batch passes (other notebooks' tests), and so would a bug in a part this
#   test does not read, or a schedule that departs from the reference only later.
