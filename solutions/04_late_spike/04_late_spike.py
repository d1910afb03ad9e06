# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (debug course)
#     language: python
#     name: debug-course
# ---

# %% [markdown]
# # 04 · The late spike: a healthy run that jumps at step N
#
# **What you learn.**
# * Save what a spike investigation needs *before* the spike: checkpoints every k steps and the
#   identity of every batch. Then replay the batch from the last good state, and a different batch
#   from the same state: the two runs separate "this batch" from "this state" and from "a glitch".
# * Line the spike up with the batch, the learning rate, the gradient norm before clipping and Adam's
#   state, on one step axis.
# * Rewind and skip as *logged containment*, not a fix: show that it changes the data the model sees.
# * Two real `torch.distributed` ranks that disagree about a skip: watch the replicas drift apart and
#   catch it with a parameter checksum all-reduce; shut down cleanly when a rank dies.
# * Build the core of an alert policy (cooldown and the non-finite path), graded on runs you have not seen.
#
# **Time.** About 40 seconds of computation on a laptop CPU (two short training runs and two
# two-process launches). **GPU:** not needed anywhere.

# %%
import math

import matplotlib.pyplot as plt
import torch

torch.set_num_threads(1)  # tiny models: one thread is fastest and does not fight other processes
_ = torch.manual_seed(0)  # returns the generator; assigned so it is not printed

# %% [markdown]
# ## The symptom
#
# A small version of the reference recipe (one layer, 16-token windows, `course.replay.SPIKE_PIPE`)
# trains for 360 steps, twice: once on the reference data stream, once on a stream drawn from the bug
# catalogue. The loop saves a checkpoint every 50 steps, and a `StepLog` records per step what the
# history does not: the data index of the batch, Adam's state, and how much one token dominates the batch.

# %%
import tempfile

from course.bugs import inject
from course.replay import SPIKE_PIPE, StepLog, train_with_checkpoints

pipe = inject(SPIKE_PIPE, "corrupted-shard")
lang = pipe.language()
folder = tempfile.mkdtemp(prefix="ckpt-04-")
log = StepLog()
run = train_with_checkpoints(pipe, 360, folder, every=50, log=log, eval_every=20, progress=True)
reference = train_with_checkpoints(SPIKE_PIPE, 360, tempfile.mkdtemp(), every=1000, eval_every=20, progress=True)

# %% [markdown]
# Where does the loss first jump above twice its recent median?

# %%
import statistics

loss = run.history["loss"]
spike = next(s for s in range(20, len(loss)) if loss[s] > 2 * statistics.median(loss[s - 20:s]))
print(f"first spike at step {spike}: loss {loss[spike]:.3f}, median of the 20 steps before "
      f"{statistics.median(loss[spike - 20:spike]):.3f}")
print(f"reference run at the same step: {reference.history['loss'][spike]:.3f}")
print(f"held-out loss at step 300 / 320 / 360: " + " / ".join(
    f"{l:.3f}" for s, l in zip(run.val['step'], run.val['loss']) if s in (300, 320, 360)))

# %%
from course.plots import loss_plot

ax = loss_plot({"run with the spike": loss, "reference data stream": reference.history["loss"]},
               lang.baselines(pipe.seq_len), title="A healthy run, then a spike at step N")
ax.axvline(spike, color="tab:red", linestyle="--", linewidth=1)
plt.show()

# %% [markdown]
# Three hypotheses fit this picture:
#
# 1. **the batch**: something in the data at that step;
# 2. **the state**: the parameters and optimizer state at that moment (learning rate, Adam's moments)
#    are fragile, and any batch would have tipped them over;
# 3. **a glitch**: something that will not happen again (a race, a flaky node, nondeterminism).
#
# One experiment separates all three, if the loop saved what it needs. Resume the last checkpoint
# *before* the spike and train on the **same** data indices: a glitch would not come back, a real cause
# comes back bit for bit. Then resume the same checkpoint on **different** data indices: if the state
# alone were fragile, the spike would come back there too.

# %%
from course.replay import last_good, replay

good = last_good(folder, spike)
same = replay(pipe, folder, good, steps=40)
other = replay(pipe, folder, good, steps=40, skip=100)  # the same state, batches 100 further on
window = slice(good, good + 40)
print(f"last good checkpoint: step {good}")
print(f"same batches:      bit-identical to the original run: {same.history['loss'][window] == loss[window]}, "
      f"max loss {max(same.history['loss'][window]):.3f}")
print(f"different batches: max loss {max(other.history['loss'][window]):.3f} "
      f"(median before the spike {statistics.median(loss[spike - 20:spike]):.3f})")

# %% [markdown]
# PaLM's authors report the opposite for their spikes (see below): the same batches replayed from an
# *earlier* checkpoint did not spike. Does the state matter here? Feed the same eight batches to the
# checkpoint of step 50 instead, by skipping the data cursor forward to them.

# %%
from course.bugs_spike import SHARD_START

early = replay(pipe, folder, 50, steps=20, skip=SHARD_START - 50)
early_control = replay(pipe, folder, 50, steps=20, skip=SHARD_START - 50 + 40)
print(f"the shard met at step 50: first loss {early.history['loss'][50]:.3f}, "
      f"max after it {max(early.history['loss'][58:70]):.3f}; control batches: max {max(early_control.history['loss'][50:70]):.3f}")

# %% [markdown]
# Here the batch alone is enough: it spikes from the early state too. That is a property of *this*
# bug (a shard of one repeated token is far from anything the model has seen, whatever its state),
# not a law: PaLM's spikes did need the state, which is exactly why they replayed before concluding.
#
# ## Correlate on one step axis
#
# What else moved at the spike? The learning rate the optimizer used, the gradient norm *before*
# clipping, Adam's state, and what is in the batch, aligned with the loss:

# %%
steps = run.history["step"]
panels = [
    ("training loss", loss, "linear"),
    ("largest share of one token in the batch", log.top_token_share, "linear"),
    ("learning rate used", run.history["lr"], "linear"),
    ("gradient norm before clipping", run.history["grad_norm"], "log"),
    ("Adam: mean |m̂|/√v̂ (step per coordinate, in LRs)", log.adam_step, "linear"),
    ("Adam: mean second moment v", log.adam_v, "log"),
]
fig, axes = plt.subplots(len(panels), 1, figsize=(8, 11), sharex=True)
for ax, (label, values, scale) in zip(axes, panels):
    ax.plot(steps, values, linewidth=1)
    ax.axvline(spike, color="tab:red", linestyle="--", linewidth=1)
    ax.set_yscale(scale)
    ax.set_ylabel(label, fontsize=8)
axes[0].axhline(lang.entropy_rate, color="grey", linestyle="-.", linewidth=1)
axes[0].annotate("entropy rate", (0, lang.entropy_rate), fontsize=7, color="grey", va="bottom")
axes[2].axhline(pipe.lr, color="grey", linestyle=":", linewidth=1)
axes[3].axhline(pipe.clip, color="grey", linestyle=":", linewidth=1)
axes[3].annotate("clip threshold", (0, pipe.clip), fontsize=7, color="grey", va="bottom")
axes[-1].set_xlabel("step")
axes[0].set_title("Everything the spike could be correlated with, on one step axis")
plt.show()

# %% [markdown]
# The numbers behind the plot, for the spike and the step before it:

# %%
from course.bugs_spike import SHARD_LEN

print(f"lowest loss on the corrupted batches: {min(loss[spike:spike + SHARD_LEN]):.3f} "
      f"(entropy rate of the language {lang.entropy_rate:.3f})")
before, during = slice(spike - 20, spike), slice(spike, spike + SHARD_LEN)
print(f"Adam step per coordinate: median {statistics.median(log.adam_step[before]):.3f} over the 20 steps before, "
      f"max {max(log.adam_step[during]):.3f} during the shard")
print(f"Adam mean v: median {statistics.median(log.adam_v[before]):.2e} before, max {max(log.adam_v[during]):.2e} during")
for s in (spike - 1, spike, spike + SHARD_LEN):
    print(f"step {s}: data index {log.batch[s]}, top-token share {log.top_token_share[s]:.2f}, "
          f"lr {run.history['lr'][s]:.2e}, grad norm {run.history['grad_norm'][s]:.2f}, "
          f"Adam step {log.adam_step[s]:.3f}, mean v {log.adam_v[s]:.2e}, loss {loss[s]:.3f}")

# %% [markdown]
# Read it as a debugger would. The learning rate is smooth through the spike, so it is not the
# trigger. The batch statistic jumps to 1.0 exactly at the spike: every input token is the same. The
# gradient norm before clipping jumps by an order of magnitude; clipping caps what reaches Adam, but
# the corrupted batches push the same way one after another, so Adam's normalised step per coordinate
# grows (compare its median before with its maximum during the shard) while the mean second moment
# barely moves: the mean of `v` is not the statistic that shows this spike. The model learns to repeat that token (the loss falls *below the entropy
# rate* on those batches, which is only possible because they are not the language), and when ordinary
# data returns, the loss jumps again and takes tens of steps to recover: the parameters were damaged.
#
# ## An alert policy
#
# To act on a spike you must notice it, and an alert that fires on every noisy step gets muted. The
# package's `course.alerts.AlertPolicy` watches six things, each against the run's *own* recent
# history (its docstring is the contract; defaults in brackets):
#
# | alert | fires when |
# |---|---|
# | `loss-spike` | loss > ratio x median of the last `window` finite losses (1.5, 20) |
# | `grad-spike` | gradient norm > ratio x median of recent finite gradient norms (3.0) |
# | `throughput-drop` | tokens/s < (1 - drop) x median of recent finite throughputs (0.5) |
# | `val-gap` | validation loss - median recent training loss > gap (0.3 nats) |
# | `val-plateau` | `patience` validation losses in a row not below the best by `min_delta` (3, 1e-3) |
# | `non-finite` | any value of the step is NaN or inf |
#
# The ratio alerts stay silent until `min_history` (5) values have been seen. Two rules make it usable:
#
# * **cooldown, per kind**: after a kind fires at step s, it is silent until step s + `cooldown`; a
#   suppressed alert does not restart the cooldown; kinds do not share it.
# * **the non-finite path**: a step with any non-finite value returns exactly one `non-finite` alert
#   and nothing else, **bypasses the cooldown** (every such step alerts) and **changes no state**: no
#   running statistic takes any value of that step, and a NaN validation loss neither becomes the
#   best nor moves the plateau counter.
#
# ## Exercise: write `observe`
#
# Write `observe(policy, step, loss=None, grad_norm=None, tokens_per_s=None, val_loss=None)`, which
# returns the list of alerts at `step` and updates `policy`, from the policy's parts:
#
# * `policy.non_finite(loss=..., ...)`: the names of the non-finite values given (a tuple);
# * `policy.candidates(step, loss=..., ...)`: the alerts the finite values would raise, cooldown ignored;
# * `policy.in_cooldown(alert)`, `policy.record_fired(alert)`: the per-kind cooldown;
# * `policy.update(loss=..., ...)`: advance the running statistics and the validation state;
# * `Alert(step, "non-finite", fields=names)` makes a non-finite alert.
#
# The hidden tests drive your `observe` with sequences you have not seen (non-finite values included)
# and compare every step's alerts with the contract; `AlertPolicy.observe` is switched off while they
# run. A policy that always alerts, or never does, earns nothing.

# %% nbgrader={"grade": false, "grade_id": "observe", "locked": false, "schema_version": 3, "solution": true}
from course.alerts import Alert, AlertPolicy


def observe(policy, step, loss=None, grad_norm=None, tokens_per_s=None, val_loss=None):
    ### BEGIN SOLUTION
    values = dict(loss=loss, grad_norm=grad_norm, tokens_per_s=tokens_per_s, val_loss=val_loss)
    bad = policy.non_finite(**values)
    if bad:
        return [Alert(step, "non-finite", fields=bad)]
    fired = [a for a in policy.candidates(step, **values) if not policy.in_cooldown(a)]
    for a in fired:
        policy.record_fired(a)
    policy.update(**values)
    return fired
    ### END SOLUTION

# %% [markdown]
# The visible tests: a calm run, one spike, one NaN.

# %% nbgrader={"grade": true, "grade_id": "test_observe_visible", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.grading import quiet


def fired(policy, sequence):
    """(step, kind) of every alert your observe raises over a list of per-step value dicts."""
    out = []
    with quiet():
        for step, values in enumerate(sequence):
            out += [(a.step, a.kind) for a in observe(policy, step, **values)]
    return out


calm = [dict(loss=2.0 - 0.01 * s + 0.02 * (-1) ** s, grad_norm=1.0 + 0.1 * (-1) ** s) for s in range(30)]
assert fired(AlertPolicy(), calm) == [], "a calm, slowly improving run must raise no alert"
spiky = [dict(v) for v in calm]
spiky[20]["loss"] = 5.0
assert fired(AlertPolicy(), spiky) == [(20, "loss-spike")], f"one loss spike at step 20: got {fired(AlertPolicy(), spiky)}"
nan_step = [dict(v) for v in calm]
nan_step[12]["loss"] = float("nan")
assert fired(AlertPolicy(), nan_step) == [(12, "non-finite")], "a NaN loss is one non-finite alert and nothing else"
### BEGIN HIDDEN TESTS
import random as _random
from course.alerts import AlertPolicy as _Policy
from course.grading import quiet as _quiet


def _sequence(seed, n=120):
    rng = _random.Random(seed)
    seq = []
    for s in range(n):
        v = dict(loss=3.0 * 0.99 ** s + rng.uniform(-0.05, 0.05), grad_norm=1.0 + rng.uniform(-0.2, 0.2),
                 tokens_per_s=1000.0 + rng.uniform(-50, 50))
        if s % 10 == 9:
            v["val_loss"] = 3.0 * 0.99 ** min(s, 60) + rng.uniform(0.0, 0.5)
        r = rng.random()
        if r < 0.04:
            v["loss"] *= rng.uniform(1.6, 4.0)
        elif r < 0.08:
            v["grad_norm"] *= rng.uniform(3.5, 20.0)
        elif r < 0.11:
            v["tokens_per_s"] *= rng.uniform(0.1, 0.45)
        elif r < 0.13:
            v[rng.choice(["loss", "grad_norm"])] = rng.choice([float("nan"), float("inf")])
        seq.append(v)
    return seq


def _run(step_fn, policy, seq):
    out = []
    with _quiet():
        for step, values in enumerate(seq):
            out.append(sorted((a.step, a.kind) for a in step_fn(policy, step, **values)))
    return out


_ref = _Policy.observe
for _seed in range(4):
    _seq = _sequence(100 + _seed)
    _want = _run(lambda p, s, **v: _ref(p, s, **v), _Policy(cooldown=0), _seq)
    assert sum(map(len, _want)) > 0 and any(not w for w in _want)
    _Policy.observe = None  # the reference is switched off while your function runs
    try:
        _got = _run(observe, _Policy(cooldown=0), _seq)
    finally:
        _Policy.observe = _ref
    _bad = [s for s, (g, w) in enumerate(zip(_got, _want)) if g != w]
    assert not _bad, f"hidden sequence {_seed}: wrong alerts at steps {_bad[:5]}"
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: the cooldown (per kind, several lengths).

# %% nbgrader={"grade": true, "grade_id": "test_observe_cooldown", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
import random as _random
from course.alerts import AlertPolicy as _Policy
from course.grading import quiet as _quiet


def _bursts(seed, n=150):
    """Finite values only: bursts of loss and gradient spikes a few steps apart."""
    rng = _random.Random(seed)
    seq = [dict(loss=2.0 + rng.uniform(-0.05, 0.05), grad_norm=1.0 + rng.uniform(-0.1, 0.1)) for _ in range(n)]
    for start in range(15, n - 10, rng.randint(18, 30)):
        for k in range(rng.randint(2, 5)):
            s = start + k * rng.randint(1, 4)
            seq[s]["loss" if rng.random() < 0.6 else "grad_norm"] *= rng.uniform(4.0, 8.0)
    return seq


def _run(step_fn, policy, seq):
    out = []
    with _quiet():
        for step, values in enumerate(seq):
            out.append(sorted((a.step, a.kind) for a in step_fn(policy, step, **values)))
    return out


_ref = _Policy.observe
for _seed, _cooldown in [(1, 3), (2, 10), (3, 25), (4, 1)]:
    _seq = _bursts(_seed)
    _want = _run(lambda p, s, **v: _ref(p, s, **v), _Policy(cooldown=_cooldown), _seq)
    assert any(_want) and not all(_want)
    _Policy.observe = None
    try:
        _got = _run(observe, _Policy(cooldown=_cooldown), _seq)
    finally:
        _Policy.observe = _ref
    _bad = [s for s, (g, w) in enumerate(zip(_got, _want)) if g != w]
    assert not _bad, f"cooldown {_cooldown}: wrong alerts at steps {_bad[:5]}"
# two kinds at neighbouring steps: each has its own cooldown
_seq = [dict(loss=2.0, grad_norm=1.0) for _ in range(20)]
_seq[10]["loss"], _seq[11]["grad_norm"], _seq[13]["loss"] = 6.0, 9.0, 6.0
_Policy.observe = None
try:
    _got = _run(observe, _Policy(cooldown=10), _seq)
finally:
    _Policy.observe = _ref
assert _got[10] == [(10, "loss-spike")] and _got[11] == [(11, "grad-spike")] and _got[13] == [], \
    "each kind of alert has its own cooldown"
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: the non-finite path (bypasses the cooldown, changes no state).

# %% nbgrader={"grade": true, "grade_id": "test_observe_nonfinite", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
import math as _math
from course.alerts import AlertPolicy as _Policy
from course.grading import quiet as _quiet

_ref = _Policy.observe
_Policy.observe = None
try:
    with _quiet():
        # three non-finite steps in a row, inside any cooldown: three alerts
        _p = _Policy(cooldown=50)
        _out = [observe(_p, s, loss=2.0, grad_norm=1.0) for s in range(10)]
        _out += [observe(_p, 10 + k, loss=v, grad_norm=1.0) for k, v in enumerate([float("nan"), float("inf"), float("nan")])]
        _out.append(observe(_p, 13, loss=2.0, grad_norm=float("-inf")))
        assert all(o == [] for o in _out[:10])
        assert [[a.kind for a in o] for o in _out[10:]] == [["non-finite"]] * 4, \
            "every non-finite step alerts, whatever the cooldown"
        # non-finite values never enter the running statistics: a spike right after NaNs is still seen
        assert len(_p.losses) == 10 and len(_p.grads) == 10 and all(_math.isfinite(x) for x in _p.losses)
        assert [a.kind for a in observe(_p, 14, loss=5.0, grad_norm=1.0)] == ["loss-spike"]
        # a finite value on a non-finite step is not used either
        _p2 = _Policy()
        for s in range(6):
            observe(_p2, s, loss=2.0, grad_norm=1.0)
        assert [a.kind for a in observe(_p2, 6, loss=9.0, grad_norm=float("nan"))] == ["non-finite"]
        assert len(_p2.losses) == 6 and 9.0 not in _p2.losses
        # a NaN validation loss is not the best and does not move the plateau counter
        _p3 = _Policy(patience=2, cooldown=0)
        observe(_p3, 0, loss=2.0, val_loss=1.5)
        _best, _since = _p3.best_val, _p3.evals_since_best
        assert [a.kind for a in observe(_p3, 1, loss=2.0, val_loss=float("nan"))] == ["non-finite"]
        assert _p3.best_val == _best and _p3.evals_since_best == _since, "a NaN validation loss changed the plateau state"
        assert observe(_p3, 2, loss=2.0, val_loss=1.6) == [], "one stalled evaluation is not a plateau with patience 2"
        assert [a.kind for a in observe(_p3, 3, loss=2.0, val_loss=1.6)] == ["val-plateau"]
        # a NaN loss where the cooldown of a loss spike is running: still one alert, and the spike's
        # cooldown is not restarted by it
        _p4 = _Policy(cooldown=5)
        for s in range(8):
            observe(_p4, s, loss=2.0, grad_norm=1.0)
        assert [a.kind for a in observe(_p4, 8, loss=6.0, grad_norm=1.0)] == ["loss-spike"]
        assert [a.kind for a in observe(_p4, 9, loss=float("nan"), grad_norm=1.0)] == ["non-finite"]
        assert observe(_p4, 12, loss=6.0, grad_norm=1.0) == []
        assert [a.kind for a in observe(_p4, 13, loss=6.0, grad_norm=1.0)] == ["loss-spike"]
finally:
    _Policy.observe = _ref
### END HIDDEN TESTS

# %% [markdown]
# Your `observe` on the recorded runs: the run with the spike, and the reference run as the negative
# control.

# %%
from course.alerts import replay_alerts

for name, r in (("run with the spike", run), ("reference", reference)):
    alerts = replay_alerts(AlertPolicy(), r.history, r.val, observe=observe)
    print(f"{name}: {len(alerts)} alerts")
    for a in alerts:
        print("   ", a)

# %% [markdown]
# Thresholds are policy knobs, not facts. Move the sliders to see which alerts fire where on the
# recorded run: a low loss ratio or a short window makes the policy chatter, a long cooldown hides the
# second spike (the one where ordinary data returns). The plot and the list below it change with every move.

# %%
# NBVAL_IGNORE_OUTPUT
from IPython.display import display

from course.alerts import alert_explorer

box, controls, output = alert_explorer(run.history, run.val, {"entropy rate": lang.entropy_rate},
                                       title="Alerts of the policy on the run with the spike")
display(box)

# %% [markdown]
# ## Rewind and skip, as logged containment
#
# PaLM (Chowdhery et al. 2022, section 5.1) saw about 20 loss spikes while training its largest model,
# despite gradient clipping. Their workaround: restart from a checkpoint about 100 steps before the
# spike and skip roughly 200 to 500 data batches. They also report that the same batches replayed from
# an earlier checkpoint did not spike, so neither the data alone nor the state alone explained it. An
# empirical workaround, reported for their runs: not a recipe, and not a fix.
#
# Scaled down here: rewind to the checkpoint 50 steps before the spike and skip the next 80 batches,
# with the skip written to a log.

# %%
from course.replay import rewind_and_skip

contained, skips = rewind_and_skip(pipe, folder, spike, rewind=50, n_skip=80, steps=110)
for s in skips:
    print(s)
after = contained.history["loss"][skips[0].at_step:]
print(f"after the rewind: max loss {max(after):.3f}; the original run's max after step {skips[0].at_step}: "
      f"{max(loss[skips[0].at_step:]):.3f}")

# %%
ax = loss_plot({"run with the spike": loss, f"rewound to step {skips[0].at_step}, {skips[0].n} batches skipped": contained.history["loss"]},
               lang.baselines(pipe.seq_len), title="Rewind and skip: the same run past the same steps")
ax.axvline(spike, color="tab:red", linestyle="--", linewidth=1)
ax.axvspan(skips[0].at_step, skips[0].at_step + 1, color="grey", alpha=0.3)
plt.show()

# %% [markdown]
# The spike is gone, and so is part of the training data. Compare the data the two runs saw from the
# rewind to the end: which data indices, how many windows of one repeated token, and a digest of every
# input token.

# %%
from course.bugs_spike import REPEATED_TOKEN, is_corrupted
from course.replay import data_digest, token_counts

rewound_at = skips[0].at_step
seen = {"original": [log.batch[s] for s in range(rewound_at, 360)],
        "rewind and skip": [s + contained.data_offset for s in range(rewound_at, 360)]}
for name, indices in seen.items():
    counts = token_counts(pipe, run.seed, indices)
    print(f"{name:>16}: data indices {indices[0]}..{indices[-1]}, corrupted batches {sum(map(is_corrupted, indices))}, "
          f"share of token {REPEATED_TOKEN} {counts[REPEATED_TOKEN] / counts.sum():.3f}, digest {data_digest(pipe, run.seed, indices)}")
never = set(seen["original"]) - set(seen["rewind and skip"])
print(f"batches the original run trained on and the skipped run never did: {len(never)}, "
      f"of which corrupted: {sum(map(is_corrupted, never))}, ordinary: {sum(not is_corrupted(i) for i in never)}")

# %% [markdown]
# The skip threw away ordinary batches along with the corrupted ones, and the model now trains on
# batches it would otherwise have reached only later. A skip must be logged like this, or the run can no longer be
# reproduced or audited.
#
# ## Two ranks that disagree about a skip
#
# In data-parallel training every rank holds a replica of the model and they stay identical only
# because every rank applies the same averaged update. If one rank decides on its own to skip a step
# (a local spike alert, a local "bad batch" rule), the replicas silently part ways: nothing crashes.
#
# `course.distributed.run_ranks` starts two processes with real `torch.distributed` (gloo, on
# 127.0.0.1): both train the same model on their halves of each batch and all-reduce the gradients. In
# the second scenario rank 1 skips its update at step 3. After each step, both ranks all-reduce a
# float64 parameter checksum with MAX and with MIN; the replicas agree iff the two are equal. Each rank
# also saves its parameters, so the checksum's verdict can be checked against a direct comparison.

# %%
from course.distributed import run_ranks

replicas = run_ranks({"both ranks step": [], "rank 1 skips step 3": [(1, 3)]}, steps=6)
for name, r in replicas.items():
    print(name)
    for step in r.steps:
        print(f"  step {step}: rank 0 sum {r.checksums[0][step][0]:+.6f}, rank 1 sum {r.checksums[1][step][0]:+.6f}, "
              f"all-reduce says agree={r.agree[step]}, largest parameter difference {r.max_param_diff[step]:.2e}")

# %% [markdown]
# The replicas drift further apart after the skip even though both ranks apply the same averaged
# gradient afterwards: their parameters and their Adam moments differ. The checksum's verdict matches
# the direct comparison at every step, in both scenarios.
#
# **Failure is part of the contract.** When a rank dies, its peer waits in a collective. `run_ranks`
# sets a timeout on the process group, destroys it in `finally`, watches the children, and raises an
# error naming the rank as soon as one fails, after every child has exited:

# %%
import os
import time

from course.distributed import RankFailed

t0 = time.perf_counter()
try:
    run_ranks({"crash": []}, steps=6, fail=(1, 2))
except RankFailed as err:
    elapsed = time.perf_counter() - t0
    alive = []
    for pid in err.pids:
        try:
            os.kill(pid, 0)
            alive.append(pid)
        except ProcessLookupError:
            pass
    print(f"RankFailed: {err}".split(" (logs")[0])
    print(f"children still running: {len(alive)}; returned in under 60 s: {elapsed < 60}")

# %% [markdown]
# ## What these tests can and cannot prove
#
# * **Replaying from the last good checkpoint** proves the spike is deterministic given the state and
#   the data indices (bit-identical here), which rules out a glitch. Replaying *different* data from the
#   same state, and the same data from another state, tell you whether the batch, the state, or both
#   are needed. It cannot tell you *what* about the batch matters; that takes looking at the batch.
# * **Correlation on one step axis** rules causes out (a learning rate that is smooth through the spike
#   did not trigger it) but never proves one in: it points at what to replay.
# * **Rewind and skip** proves only that *this* run got past *this* spike; it changes the data the model
#   sees, and the same batches may spike again from another state. Log every skip.
# * **The checksum all-reduce** proves the replicas' parameters differ when the checksums differ; equal
#   checksums make equal parameters overwhelmingly likely, not certain, and say nothing about the
#   optimizer state or which replica is right.
# * **The alert policy's tests** prove that each alert fires on its trigger and stays quiet on the
#   sequences tested; the thresholds that suit a run come from that run's healthy history.
