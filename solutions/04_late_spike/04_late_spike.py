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
# * Close the loop: fix the spike at the right depth (the data) and show, with the same alert policy
#   that saw it, that it is gone.
# * **Mystery:** a late spike drawn from four candidates (healthy, or one of three bugs that spike at the
#   same step): write a falsifying test, name the cause (data or optimizer) and fix it, graded on draws
#   you have not seen.
#
# **Predict, then reveal.** Before each result that is the lesson, a *Predict* cell asks you to write
# your guess into `prediction`; the cell after it prints your guess beside what was measured.
#
# **Time.** Under 40 seconds of computation on a laptop CPU (short training runs and two two-process
# launches; `make bench` times every notebook on yours). **GPU:** not needed anywhere.

# %%
import math

import matplotlib.pyplot as plt
import torch

from course.exercises.record import reveal

torch.set_num_threads(1)  # tiny models: one thread is fastest and does not fight other processes
_ = torch.manual_seed(0)  # returns the generator; assigned so it is not printed

from course.lessons.distributed import start_fork_server

start_fork_server()  # the two-process demos below fork their ranks from it; it loads torch in the background now

# %% [markdown]
# ## The symptom
#
# A small version of the reference recipe (one layer, 16-token windows, `course.lessons.replay.SPIKE_PIPE`)
# trains for 360 steps, twice: once on a stream drawn from the bug catalogue, once on the reference data
# stream. The loop saves a checkpoint every 50 steps, and a `StepLog` records per step what the
# history does not: the data index of the batch, Adam's state, and how much one token dominates the batch.
# Training is deterministic, and the two streams agree up to the first batch the bug changes, so the
# two runs are the same run until then: the reference run resumes the last checkpoint before that
# batch and trains only the remaining steps on the reference stream.

# %% tags=["demo"]
import tempfile

from course.bugs import inject
from course.lessons.replay import SPIKE_PIPE, StepLog, checkpoint_path, last_good, train_with_checkpoints
from course.reference.train import batch_at, resume, train_steps

pipe = inject(SPIKE_PIPE, "corrupted-shard")
lang = pipe.language()
checkpoints = tempfile.TemporaryDirectory(prefix="ckpt-04-")  # removed when the kernel exits
folder = checkpoints.name
log = StepLog()
run = train_with_checkpoints(pipe, 360, folder, every=50, log=log, eval_every=20, progress=True)
differs = next(i for i in range(360) if not all(
    torch.equal(getattr(batch_at(pipe, run.seed, i), f), getattr(batch_at(SPIKE_PIPE, run.seed, i), f)) for f in ("inputs", "targets")))
reference = resume(SPIKE_PIPE, checkpoint_path(folder, last_good(folder, differs)))  # the same run until then
_ = train_steps(reference, 360 - reference.step, eval_every=20, progress=True)

# %% [markdown]
# Where does the loss first jump above twice its recent median?

# %% tags=["demo"]
import statistics

loss = run.history["loss"]
spike = next(s for s in range(20, len(loss)) if loss[s] > 2 * statistics.median(loss[s - 20:s]))
print(f"first spike at step {spike}: loss {loss[spike]:.3f}, median of the 20 steps before "
      f"{statistics.median(loss[spike - 20:spike]):.3f}")
print(f"reference run at the same step: {reference.history['loss'][spike]:.3f}")
print(f"held-out loss at step 300 / 320 / 360: " + " / ".join(
    f"{l:.3f}" for s, l in zip(run.val['step'], run.val['loss']) if s in (300, 320, 360)))

# %% tags=["demo"]
from course.toolkit.plots import loss_plot

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
#
# **Predict.** Resumed from the last checkpoint before the spike and fed the *same* data indices, does
# the run spike again (at least 1.5 x the median loss of the 20 steps before the spike)? And fed
# *different* indices from the same state?

# %% tags=["demo"]
prediction = None  # your guess: a pair (same batches spike again?, different batches spike?), e.g. (True, False)

# %% tags=["demo"]
from course.lessons.replay import last_good, replay

good = last_good(folder, spike)
same = replay(pipe, folder, good, steps=40)
other = replay(pipe, folder, good, steps=40, skip=100)  # the same state, batches 100 further on
window = slice(good, good + 40)
print(f"last good checkpoint: step {good}")
print(f"same batches:      bit-identical to the original run: {same.history['loss'][window] == loss[window]}, "
      f"max loss {max(same.history['loss'][window]):.3f}")
print(f"different batches: max loss {max(other.history['loss'][window]):.3f} "
      f"(median before the spike {statistics.median(loss[spike - 20:spike]):.3f})")
_median = statistics.median(loss[spike - 20:spike])
reveal("from the last good checkpoint: (same batches spike again?, different batches spike?)", prediction,
       (max(same.history['loss'][window]) > 1.5 * _median, max(other.history['loss'][window]) > 1.5 * _median))

# %% [markdown]
# PaLM's authors report the opposite for their spikes (see below): the same batches replayed from an
# *earlier* checkpoint did not spike. Does the state matter here? Feed the same eight batches to the
# checkpoint of step 50 instead, by skipping the data cursor forward to them.

# %% tags=["demo"]
from course.bugs.spike import SHARD_START

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

# %% tags=["demo"]
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

# %% tags=["demo"]
from course.bugs.spike import SHARD_LEN

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
# package's `course.toolkit.alerts.AlertPolicy` watches six things, each against the run's *own* recent
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
# and compare every step's alerts with the contract. `AlertPolicy.observe` (the reference orchestration)
# is switched off while your function runs in every test cell, so calling it, directly or through a
# reference saved earlier, fails the test. A policy that always alerts, or never does, earns nothing.
# Return a list of `Alert` (an empty list when nothing fires).

# %% nbgrader={"grade": false, "grade_id": "observe", "locked": false, "schema_version": 3, "solution": true}
from course.toolkit.alerts import Alert, AlertPolicy


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
# The visible tests: a calm run, one spike, two spikes inside one cooldown, one NaN, two non-finite
# steps in a row (the second inside the first one's cooldown), a throughput drop and a validation gap
# (every value `observe` takes), and a non-finite step whose finite loss must not enter the running
# statistics (`policy.losses`).

# %% nbgrader={"grade": true, "grade_id": "test_observe_visible", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.toolkit.alerts import AlertPolicy
from course.exercises.grading import graded_calls as _graded_calls


def _observed(case):
    """Your observe over one case (policy, sequence[, True]), step after step: each step's alerts as
    [step, kind], and with True the policy's losses at the end."""
    policy, sequence, *losses = case
    alerts = [[[a.step, a.kind] for a in observe(policy, step, **values)] for step, values in enumerate(sequence)]
    return {"alerts": alerts, "losses": list(policy.losses) if losses else None}


def _fired(run):
    return [tuple(a) for step in run["alerts"] for a in step]


def fired(policy, sequence):
    """(step, kind) of every alert your observe raises over a list of per-step value dicts. It runs
    apart (course.exercises.grading.graded_calls, AlertPolicy.observe switched off there), so
    ``policy`` is left as it was here."""
    return _fired(_graded_calls(_observed, [(policy, sequence)], off=(AlertPolicy.observe,))[0])


calm = [dict(loss=2.0 - 0.01 * s + 0.02 * (-1) ** s, grad_norm=1.0 + 0.1 * (-1) ** s) for s in range(30)]
spiky = [dict(v) for v in calm]
spiky[20]["loss"] = 5.0
nan_step = [dict(v) for v in calm]
nan_step[12]["loss"] = float("nan")
_one_spike, _one_nan = [dict(v) for v in spiky], [dict(v) for v in nan_step]
spiky[23]["loss"] = 5.0
nan_step[13]["grad_norm"] = float("inf")
measured = [dict(v, tokens_per_s=1000.0 + 10 * (-1) ** s) for s, v in enumerate(calm)]
measured[18]["tokens_per_s"] = 300.0
measured[9]["val_loss"], measured[19]["val_loss"] = 1.95, 2.6
# every run in one call of your observe apart (fired does one): the calm run, one loss spike, one NaN loss,
# two spikes and two non-finite steps under a cooldown of 10, the measured run, and six calm steps then a
# NaN gradient norm beside a loss of 9.0 (True: the policy's losses come back too)
_runs = _graded_calls(_observed, [(AlertPolicy(), calm), (AlertPolicy(), _one_spike), (AlertPolicy(), _one_nan),
                                  (AlertPolicy(cooldown=10), spiky), (AlertPolicy(cooldown=10), nan_step),
                                  (AlertPolicy(), measured),
                                  (AlertPolicy(), [dict(loss=2.0, grad_norm=1.0)] * 6 + [dict(loss=9.0, grad_norm=float("nan"))], True)],
                      off=(AlertPolicy.observe,))
_got = _fired(_runs[0])
assert _got == [], f"a calm, slowly improving run must raise no alert; your observe raised {_got}"
_got = _fired(_runs[1])
assert _got == [(20, "loss-spike")], f"one loss spike at step 20 must give exactly [(20, 'loss-spike')]: got {_got}"
_got = _fired(_runs[2])
assert _got == [(12, "non-finite")], \
    f"a NaN loss at step 12 is one non-finite alert and nothing else (look at the non-finite path): got {_got}"
_got = _fired(_runs[3])
assert _got == [(20, "loss-spike")], \
    f"loss spikes at steps 20 and 23 with a cooldown of 10: the second is suppressed (record each alert that fires): got {_got}"
_got = _fired(_runs[4])
assert _got == [(12, "non-finite"), (13, "non-finite")], \
    f"non-finite values at steps 12 and 13: every non-finite step alerts, whatever the cooldown: got {_got}"
_got = _fired(_runs[5])
assert _got == [(18, "throughput-drop"), (19, "val-gap")], \
    (f"a throughput of 300 tokens/s at step 18 and a validation loss of 2.6 at step 19 (training loss near 1.8): "
     f"pass every value to the policy's parts; got {_got}")
# six calm steps, then a NaN gradient norm with a loss of 9.0 at step 6
_alerts = [kind for _, kind in _runs[6]["alerts"][6]]
assert _alerts == ["non-finite"], f"a NaN gradient norm with a loss of 9.0 is one non-finite alert and nothing else: got {_alerts}"
assert _runs[6]["losses"] == [2.0] * 6, \
    f"the finite loss of a non-finite step entered the running statistics (policy.losses is {_runs[6]['losses']}): a non-finite step changes no state"
### BEGIN HIDDEN TESTS
import math as _math
import random as _random
from course.toolkit.alerts import AlertPolicy as _Policy
from course.exercises.grading import hidden_seed as _hidden_seed, quiet as _quiet


def _sequence(seed):
    """A random run: its length, scales and validation period drawn too; spikes, drops and
    non-finite values at random steps (some two in a row, some beside a high finite value)."""
    rng = _random.Random(seed)
    n, every = rng.randint(100, 140), rng.randint(7, 12)
    lscale, gscale, tscale = rng.uniform(0.7, 1.5), rng.uniform(0.2, 5.0), rng.uniform(200.0, 5000.0)
    seq = []
    for s in range(n):
        v = dict(loss=lscale * (3.0 * 0.99 ** s + rng.uniform(-0.05, 0.05)), grad_norm=gscale * (1.0 + rng.uniform(-0.2, 0.2)),
                 tokens_per_s=tscale * (1.0 + rng.uniform(-0.05, 0.05)))
        if s % every == every - 1:
            v["val_loss"] = lscale * (3.0 * 0.99 ** min(s, 60) + rng.uniform(0.0, 0.5))
        r = rng.random()
        if r < 0.04:
            v["loss"] *= rng.uniform(1.6, 4.0)
        elif r < 0.08:
            v["grad_norm"] *= rng.uniform(3.5, 20.0)
        elif r < 0.11:
            v["tokens_per_s"] *= rng.uniform(0.1, 0.45)
        elif r < 0.15:
            v[rng.choice(["loss", "grad_norm", "tokens_per_s"])] = rng.choice([float("nan"), float("inf"), float("-inf")])
            if rng.random() < 0.5:  # a high finite value beside the non-finite one
                v["loss" if _math.isfinite(v["loss"]) else "grad_norm"] *= rng.uniform(2.0, 8.0)
        seq.append(v)
    for s in range(n - 1):  # some non-finite steps come two in a row
        if not all(map(_math.isfinite, seq[s].values())) and rng.random() < 0.5:
            seq[s + 1]["grad_norm"] = rng.choice([float("nan"), float("inf")])
    return seq


def _run(policy, seq):
    """The reference's alerts at each step, sorted."""
    with _quiet():
        return [sorted((a.step, a.kind) for a in policy.observe(step, **values)) for step, values in enumerate(seq)]


def _state(p):
    return list(p.losses), list(p.grads), list(p.throughputs), p.best_val, p.evals_since_best


def _probe(case):
    """Your observe over one (policy, sequence): each step's sorted alerts, and whether the step
    changed the policy's state."""
    policy, seq = case
    alerts, changed = [], []
    for step, values in enumerate(seq):
        before = _state(policy)
        alerts.append(sorted((a.step, a.kind) for a in observe(policy, step, **values)))
        changed.append(_state(policy) != before)
    return {"alerts": alerts, "changed": changed}


# four random sequences, the first two without a cooldown, the others with a random one
_draws = []
for _i in range(4):
    for _k in range(4):  # redraw a degenerate sequence (no alert, no quiet step, no two non-finite steps in a row)
        _rng = _random.Random(_hidden_seed("h-04-obv") + 4 * _i + _k)
        _cooldown = 0 if _i < 2 else _rng.randint(2, 12)
        _seq = _sequence(_rng.getrandbits(64))
        _want = _run(_Policy(cooldown=_cooldown), _seq)
        _nonfinite = [w == [(s, "non-finite")] for s, w in enumerate(_want)]
        if sum(map(len, _want)) > 0 and any(not w for w in _want) and any(a and b for a, b in zip(_nonfinite, _nonfinite[1:])):
            break  # a suitable draw
    else:  # every redraw was unsuitable
        raise AssertionError("grader: the hidden sequence is degenerate")
    _draws.append((_cooldown, _seq, _want, _nonfinite))
_runs = _graded_calls(_probe, [(_Policy(cooldown=_cooldown), _seq) for _cooldown, _seq, _want, _nonfinite in _draws],
                      off=(_Policy.observe,))
for _i, ((_cooldown, _seq, _want, _nonfinite), _run_i) in enumerate(zip(_draws, _runs)):
    _got = [[tuple(a) for a in step] for step in _run_i["alerts"]]
    _changed = [_s for _s, _c in enumerate(_run_i["changed"]) if _nonfinite[_s] and _c]
    assert not _changed, (f"random sequence {_i + 1}: the non-finite steps {_changed[:5]} changed the policy's running "
                          "statistics (policy.losses, grads, throughputs) or validation state: a non-finite step changes no state")
    _bad = [s for s, (g, w) in enumerate(zip(_got, _want)) if g != w]
    assert not _bad, (f"random sequence {_i + 1} (cooldown {_cooldown}; spikes, drops, validation losses and non-finite values): "
                      f"your alerts differ from the contract at steps {_bad[:5]}; check each alert kind's rule, the "
                      "per-kind cooldown, and that a non-finite step changes no state")
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: the cooldown (per kind, several lengths).

# %% nbgrader={"grade": true, "grade_id": "test_observe_cooldown", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
import random as _random
from course.toolkit.alerts import AlertPolicy as _Policy
from course.exercises.grading import graded_calls as _graded_calls, hidden_seed as _hidden_seed, quiet as _quiet


def _bursts(rng, n=150):
    """Finite values only: bursts of loss and gradient spikes a few steps apart (levels drawn too)."""
    level, glevel = rng.uniform(0.5, 4.0), rng.uniform(0.2, 5.0)
    seq = [dict(loss=level * (1.0 + rng.uniform(-0.025, 0.025)), grad_norm=glevel * (1.0 + rng.uniform(-0.1, 0.1)))
           for _ in range(n)]
    for start in range(rng.randint(12, 18), n - 17, rng.randint(18, 30)):
        for k in range(rng.randint(2, 5)):
            s = start + k * rng.randint(1, 4)
            seq[s]["loss" if rng.random() < 0.6 else "grad_norm"] *= rng.uniform(4.0, 8.0)
    return seq


def _run(policy, seq):
    """The reference's alerts at each step, sorted."""
    with _quiet():
        return [sorted((a.step, a.kind) for a in policy.observe(step, **values)) for step, values in enumerate(seq)]


def _probe(case):
    """Your observe over one (policy, sequence): each step's sorted alerts."""
    policy, seq = case
    return [sorted((a.step, a.kind) for a in observe(policy, step, **values)) for step, values in enumerate(seq)]


# random bursts under a short, a medium, a long and a one-step cooldown (lengths drawn in each range)
_bursts_drawn = []
for _i, (_lo, _hi) in enumerate([(2, 4), (8, 12), (20, 30), (1, 1)]):
    for _k in range(4):  # redraw a degenerate sequence (no alert at all, or one at every step)
        _rng = _random.Random(_hidden_seed("h-04-cdn") + 4 * _i + _k)
        _cooldown = _rng.randint(_lo, _hi)
        _seq = _bursts(_rng)
        _want = _run(_Policy(cooldown=_cooldown), _seq)
        if any(_want) and not all(_want):
            break  # a suitable draw
    else:  # every redraw was unsuitable
        raise AssertionError("grader: the hidden sequence is degenerate")
    _bursts_drawn.append((_cooldown, _seq, _want))
# two kinds at neighbouring steps: each has its own cooldown
_kinds_seq = [dict(loss=2.0, grad_norm=1.0) for _ in range(20)]
_kinds_seq[10]["loss"], _kinds_seq[11]["grad_norm"], _kinds_seq[13]["loss"] = 6.0, 9.0, 6.0
# the same on random levels, positions and cooldowns: a loss spike, a gradient spike the step after,
# a second loss spike inside the loss cooldown and a third once it has run out
_pairs_drawn = []
for _i in range(3):
    _rng = _random.Random(_hidden_seed("h-04-cdn") + 100 + _i)
    _cooldown, _p = _rng.randint(4, 15), _rng.randint(6, 15)
    _d = _rng.randint(2, _cooldown - 1)
    _level, _glevel = _rng.uniform(0.5, 4.0), _rng.uniform(0.2, 5.0)
    _seq = [dict(loss=_level * _rng.uniform(0.98, 1.02), grad_norm=_glevel * _rng.uniform(0.95, 1.05))
            for _ in range(_p + _cooldown + 4)]
    _seq[_p]["loss"] *= _rng.uniform(2.0, 6.0)
    _seq[_p + 1]["grad_norm"] *= _rng.uniform(4.0, 12.0)
    _seq[_p + _d]["loss"] *= _rng.uniform(2.0, 6.0)
    _seq[_p + _cooldown + _rng.randint(0, 2)]["loss"] *= _rng.uniform(2.0, 6.0)
    _want = _run(_Policy(cooldown=_cooldown), _seq)
    assert _want[_p] and _want[_p + 1] and not _want[_p + _d], "grader: the hidden sequence is degenerate"
    _pairs_drawn.append((_cooldown, _d, _seq, _want))
# your observe on every sequence, in one call apart
_runs = _graded_calls(_probe, [(_Policy(cooldown=_c), _seq) for _c, _seq, _want in _bursts_drawn]
                      + [(_Policy(cooldown=10), _kinds_seq)]
                      + [(_Policy(cooldown=_c), _seq) for _c, _d, _seq, _want in _pairs_drawn], off=(_Policy.observe,))
_runs = [[[tuple(a) for a in step] for step in _r] for _r in _runs]
for (_cooldown, _seq, _want), _got in zip(_bursts_drawn, _runs[:4]):
    _bad = [s for s, (g, w) in enumerate(zip(_got, _want)) if g != w]
    assert not _bad, (f"cooldown {_cooldown}: your alerts differ from the contract at steps {_bad[:5]}; an alert "
                      "of a kind is silent until cooldown steps after that kind last fired, and a suppressed "
                      "alert does not restart the cooldown")
_got = _runs[4]
assert _got[10] == [(10, "loss-spike")] and _got[11] == [(11, "grad-spike")] and _got[13] == [], \
    f"each kind of alert has its own cooldown: a loss spike at 10, a gradient spike at 11 and a loss spike at 13 gave {_got[10:14]}"
for _i, ((_cooldown, _d, _seq, _want), _got) in enumerate(zip(_pairs_drawn, _runs[5:])):
    _bad = [s for s, (g, w) in enumerate(zip(_got, _want)) if g != w]
    assert not _bad, (f"random case {_i + 1} (cooldown {_cooldown}): a loss spike, a gradient spike the step after, a "
                      f"loss spike {_d} steps after the first and one after its cooldown: your alerts differ from the "
                      f"contract at steps {_bad[:5]}; each kind of alert has its own cooldown")
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: the non-finite path (bypasses the cooldown, changes no state).

# %% nbgrader={"grade": true, "grade_id": "test_observe_nonfinite", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
import math as _math
import random as _random
from course.toolkit.alerts import AlertPolicy as _Policy
from course.exercises.grading import graded_calls as _graded_calls, hidden_seed as _hidden_seed


def _state(p):
    return list(p.losses), list(p.grads), list(p.throughputs), p.best_val, p.evals_since_best


def _probe(case):
    """Your observe over one case (policy, [(step, values), ...], keep): at each step its alerts as
    [step, kind] in the order returned (None if what it returned is not iterable), whether it
    returned [], whether the step changed the policy's state, and with keep that state after the step."""
    policy, steps, keep = case
    out = []
    for step, values in steps:
        before = _state(policy)
        alerts = observe(policy, step, **values)
        after = _state(policy)
        try:
            sent = [[a.step, a.kind] for a in alerts]
        except TypeError:  # not iterable: the checks below fail on it where they would have
            sent = None
        out.append({"alerts": sent, "empty": bool(alerts == []), "changed": after != before, "state": after if keep else None})
    return out


def _kinds(o):
    return [kind for _, kind in o["alerts"]]


# random runs: loss spikes, each followed inside its cooldown by a run of non-finite steps (NaN or
# +-inf in any value, some with a high finite value beside it, NaN validation losses among improving
# ones), then another loss spike inside or just after the cooldown. Loss spikes are the only finite
# alerts, so only the non-finite path decides the answer
_NONFINITE = (float("nan"), float("inf"), float("-inf"))


def _quarantine(rng):
    cooldown, every = rng.randint(4, 12), rng.randint(2, 4)
    base = dict(loss=rng.uniform(1.0, 4.0), grad_norm=rng.uniform(0.3, 3.0), tokens_per_s=rng.uniform(500.0, 3000.0))
    n = rng.randint(60, 90)
    seq = [{k: b * rng.uniform(0.97, 1.03) for k, b in base.items()} for _ in range(n)]
    val = base["loss"] * rng.uniform(0.9, 1.0)
    for s in range(every - 1, n, every):  # each finite validation loss a new best: no validation alert
        val -= base["loss"] * rng.uniform(0.002, 0.01)
        seq[s]["val_loss"] = val
    s = rng.randint(8, 14)
    while s + 2 * cooldown + 8 < n:
        seq[s]["loss"] *= rng.uniform(2.0, 5.0)
        run = rng.randint(2, 4)
        for k in range(1, run + 1):
            v = seq[s + k]
            v[rng.choice(("loss", "grad_norm", "tokens_per_s", "val_loss"))] = rng.choice(_NONFINITE)
            other = rng.choice(("loss", "grad_norm"))
            if _math.isfinite(v[other]) and rng.random() < 0.5:
                v[other] *= rng.uniform(4.0, 10.0)
        seq[s + rng.randint(run + 1, cooldown + 2)]["loss"] *= rng.uniform(2.0, 5.0)
        s += rng.randint(2 * cooldown + 4, 2 * cooldown + 12)
    return cooldown, seq


_drawn = []
for _i in range(3):
    for _k in range(4):  # redraw a sequence where no loss spike is followed by two non-finite steps
        _cooldown, _seq = _quarantine(_random.Random(_hidden_seed("h-04-nfq") + 4 * _i + _k))
        _ref = _Policy(cooldown=_cooldown, patience=2)
        _want = [sorted((a.step, a.kind) for a in _ref.observe(s, **v)) for s, v in enumerate(_seq)]
        if any((s, "loss-spike") in _want[s] and _want[s + 1] == [(s + 1, "non-finite")]
               and _want[s + 2] == [(s + 2, "non-finite")] for s in range(len(_seq) - 2)):
            break  # a suitable draw
    else:  # every redraw was unsuitable
        raise AssertionError("grader: the hidden sequence is degenerate")
    _drawn.append((_cooldown, _seq, _want))
_calm = dict(loss=2.0, grad_norm=1.0)
_fixed = [
    # three non-finite steps in a row, inside any cooldown, then a fourth; then a loss spike
    (_Policy(cooldown=50), [(s, _calm) for s in range(10)]
     + [(10 + k, dict(loss=v, grad_norm=1.0)) for k, v in enumerate([float("nan"), float("inf"), float("nan")])]
     + [(13, dict(loss=2.0, grad_norm=float("-inf"))), (14, dict(loss=5.0, grad_norm=1.0))], True),
    # a NaN gradient norm beside a high loss after six calm steps
    (_Policy(), [(s, _calm) for s in range(6)] + [(6, dict(loss=9.0, grad_norm=float("nan")))], True),
    # validation losses 1.5, NaN, 1.6, 1.6 with patience 2
    (_Policy(patience=2, cooldown=0), [(s, dict(loss=2.0, val_loss=v)) for s, v in enumerate([1.5, float("nan"), 1.6, 1.6])], True),
    # a loss spike at step 8, a NaN loss at 9, loss spikes at 12 and 13 (cooldown 5)
    (_Policy(cooldown=5), [(s, _calm) for s in range(8)] + [(8, dict(loss=6.0, grad_norm=1.0)), (9, dict(loss=float("nan"), grad_norm=1.0)),
                                                            (12, dict(loss=6.0, grad_norm=1.0)), (13, dict(loss=6.0, grad_norm=1.0))], True),
]
# your observe on every run, in one call apart
_runs = _graded_calls(_probe, _fixed + [(_Policy(cooldown=_c, patience=2), list(enumerate(_seq)), False) for _c, _seq, _want in _drawn],
                      off=(_Policy.observe,))
# three non-finite steps in a row, inside any cooldown: three alerts
_out = _runs[0]
assert all(o["empty"] for o in _out[:10]), "ten calm steps (loss 2.0, grad norm 1.0) must raise no alert"
assert [_kinds(o) for o in _out[10:14]] == [["non-finite"]] * 4, \
    f"every non-finite step alerts, whatever the cooldown: four non-finite steps in a row gave {[_kinds(o) for o in _out[10:14]]}"
# non-finite values never enter the running statistics: a spike right after NaNs is still seen
_losses, _grads = _out[13]["state"][:2]
assert len(_losses) == 10 and len(_grads) == 10 and all(_math.isfinite(x) for x in _losses), \
    "a non-finite step must not update the running statistics (policy.losses, policy.grads)"
assert _kinds(_out[14]) == ["loss-spike"], "a loss spike right after non-finite steps must still be one loss-spike alert"
# a finite value on a non-finite step is not used either
_out = _runs[1]
assert _kinds(_out[6]) == ["non-finite"], "a step with a NaN gradient norm and a high loss is one non-finite alert and nothing else"
_losses = _out[6]["state"][0]
assert len(_losses) == 6 and 9.0 not in _losses, \
    "the finite loss of a non-finite step entered the running statistics: a non-finite step changes no state"
# a NaN validation loss is not the best and does not move the plateau counter
_out = _runs[2]
_best, _since = _out[0]["state"][3:]
assert _kinds(_out[1]) == ["non-finite"], "a NaN validation loss is one non-finite alert"
assert _out[1]["state"][3] == _best and _out[1]["state"][4] == _since, "a NaN validation loss changed the plateau state"
assert _out[2]["empty"], "one stalled evaluation is not a plateau with patience 2"
assert _kinds(_out[3]) == ["val-plateau"], \
    "two stalled evaluations in a row with patience 2 (a NaN one in between not counted) are a val-plateau"
# a NaN loss where the cooldown of a loss spike is running: still one alert, and the spike's
# cooldown is not restarted by it
_out = _runs[3]
assert _kinds(_out[8]) == ["loss-spike"], "a loss spike after calm steps"
assert _kinds(_out[9]) == ["non-finite"], "a NaN loss inside a loss spike's cooldown is still one non-finite alert"
assert _out[10]["empty"], "the loss spike's cooldown (5 steps from step 8) runs to step 12"
assert _kinds(_out[11]) == ["loss-spike"], "the non-finite step must not restart or extend the loss spike's cooldown"
# the random runs
for _i, ((_cooldown, _seq, _want), _out) in enumerate(zip(_drawn, _runs[4:])):
    _got = [sorted(tuple(a) for a in o["alerts"]) for o in _out]
    _changed = [_s for _s, o in enumerate(_out) if _want[_s] == [(_s, "non-finite")] and o["changed"]]
    _label = f"random run {_i + 1} (cooldown {_cooldown}; loss spikes followed by runs of non-finite steps)"
    assert not _changed, (f"{_label}: the non-finite steps {_changed[:5]} changed the policy's state (policy.losses, "
                          "grads, throughputs, best_val or evals_since_best): a non-finite step changes no state")
    _bad = [s for s, (g, w) in enumerate(zip(_got, _want)) if g != w]
    assert not _bad, (f"{_label}: your alerts differ from the contract at steps {_bad[:5]}; every non-finite step "
                      "is one non-finite alert, whatever the cooldown, and starts or restarts no cooldown")
### END HIDDEN TESTS

# %% [markdown]
# Your `observe` on the recorded runs: the run with the spike, and the reference run as the negative
# control.

# %% tags=["demo"]
from course.toolkit.alerts import replay_alerts

for name, r in (("run with the spike", run), ("reference", reference)):
    alerts = replay_alerts(AlertPolicy(), r.history, r.val, observe=observe)
    print(f"{name}: {len(alerts)} alerts")
    for a in alerts:
        print("   ", a)

# %% [markdown]
# Thresholds are policy knobs, not facts. Move the sliders to see which alerts fire where on the
# recorded run: a low loss ratio or a short window makes the policy chatter, a long cooldown hides the
# second spike (the one where ordinary data returns). The plot and the list below it change with every move.

# %% tags=["demo"]
# NBVAL_IGNORE_OUTPUT
from IPython.display import display

from course.toolkit.alerts import alert_explorer

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

# %% tags=["demo"]
from course.lessons.replay import rewind_and_skip

contained, skips = rewind_and_skip(pipe, folder, spike, rewind=50, n_skip=80, steps=110)
for s in skips:
    print(s)
after = contained.history["loss"][skips[0].at_step:]
print(f"after the rewind: max loss {max(after):.3f}; the original run's max after step {skips[0].at_step}: "
      f"{max(loss[skips[0].at_step:]):.3f}")

# %% tags=["demo"]
ax = loss_plot({"run with the spike": loss, f"rewound to step {skips[0].at_step}, {skips[0].n} batches skipped": contained.history["loss"]},
               lang.baselines(pipe.seq_len), title="Rewind and skip: the same run past the same steps")
ax.axvline(spike, color="tab:red", linestyle="--", linewidth=1)
ax.axvspan(skips[0].at_step, skips[0].at_step + 1, color="grey", alpha=0.3)
plt.show()

# %% [markdown]
# The spike is gone. **Predict**, before looking: from the rewind to step 360, does the rewound run
# train on the same data as the original run, only without the 8 corrupted batches? Or how many ordinary
# batches that the original run trained on does it never see?

# %% tags=["demo"]
prediction = None  # your guess: the number of ordinary (not corrupted) batches the original run saw and the skipped run never does

# %% [markdown]
# Compare the data the two runs saw from the rewind to the end: which data indices, how many windows of
# one repeated token, and a digest of every input token.

# %% tags=["demo"]
from course.bugs.spike import REPEATED_TOKEN, is_corrupted
from course.lessons.replay import data_digest, token_counts

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
reveal("ordinary batches the original run saw and the skipped run never does", prediction,
       sum(not is_corrupted(i) for i in never))

# %% [markdown]
# The skip threw away ordinary batches along with the corrupted ones, and the model now trains on
# batches it would otherwise have reached only later. A skip must be logged like this, or the run can no longer be
# reproduced or audited.
#
# ## The fix at the right depth: the data
#
# Rewind-and-skip contained the spike; it did not fix anything. The replays located the cause in the
# data (the same indices spike from any state, other indices from the same state do not), and the
# correlation plot said what is wrong with it (one token fills the whole batch). So the fix belongs in
# the data stream: a check that every batch must pass before the loop may train on it, and a logged
# decision for each batch it removes. `course.lessons.replay.Quarantine` wraps a `batches` part: data index
# `i` of the guarded stream is the `i`-th source batch that passed the check, and every rejection is
# logged once. Until the first rejection the guarded stream is the original one, so the checkpoint of
# step 300 (saved before the spike) is still a valid state to resume from.
#
# The check: no token may fill more than half of a batch's inputs. The correlation panel above shows
# what ordinary batches look like on this statistic.

# %% tags=["demo"]
from course.lessons.replay import Quarantine, checkpoint_path
from course.reference.train import resume, train_steps


def one_token_floods(batch, limit=0.5):
    """The reason to reject ``batch`` if one token is more than ``limit`` of its inputs, else None."""
    counts = torch.bincount(batch.inputs.reshape(-1))
    share = counts.max().item() / batch.inputs.numel()
    return f"token {counts.argmax().item()} is {share:.0%} of the inputs" if share > limit else None


guard = Quarantine(pipe.batches, one_token_floods)
fixed_pipe = pipe.replace(batches=guard)
fixed = resume(fixed_pipe, checkpoint_path(folder, good))  # the state before the spike
train_steps(fixed, 360 - good, eval_every=20)
for decision in guard.log:
    print(decision)
print(f"the fixed run from step {good}: max loss {max(fixed.history['loss'][good:]):.3f}; "
      f"the original run over the same steps: {max(loss[good:]):.3f}")

# %% [markdown]
# Now the same detector that saw the spike: your `observe`, with the same default policy, over the
# whole recorded run (the 300 steps before the checkpoint and the 60 after it), beside the original.

# %% tags=["demo"]
for name, r in (("original run", run), ("fixed data stream", fixed)):
    alerts = replay_alerts(AlertPolicy(), r.history, r.val, observe=observe)
    print(f"{name}: {len(alerts)} alerts {[str(a) for a in alerts]}")

# %% tags=["demo"]
ax = loss_plot({"run with the spike": loss, "resumed at step 300 on the quarantined stream": fixed.history["loss"]},
               lang.baselines(pipe.seq_len), title="The fix: the corrupted shard removed from the data stream")
ax.axvline(spike, color="tab:red", linestyle="--", linewidth=1)
plt.show()

# %% [markdown]
# What the fix does and does not claim: the check removes batches that one token floods, whatever
# their cause, and logs each; it would not catch a shard whose *targets* are garbled while the inputs
# look ordinary (the mystery below has one). Removing the shard shifts every later data index by the
# number of batches removed, which the log records.
#
# ## Two ranks that disagree about a skip
#
# In data-parallel training every rank holds a replica of the model and they stay identical only
# because every rank applies the same averaged update. If one rank decides on its own to skip a step
# (a local spike alert, a local "bad batch" rule), the replicas silently part ways: nothing crashes.
#
# `course.lessons.distributed.run_ranks` starts two processes with real `torch.distributed` (gloo, on
# 127.0.0.1): both train the same model on their halves of each batch and all-reduce the gradients. In
# the second scenario rank 1 skips its update at step 3. After each step, both ranks all-reduce a
# float64 parameter checksum (two numbers: the plain sum of the parameters and a sum weighted by a
# fixed weight per position) with MAX and with MIN: the two results are equal exactly when every rank
# computed the same checksum. Each rank also saves its parameters, so the checksum's verdict can be
# checked against a direct comparison.
#
# **Predict.** After rank 1 skips step 3 and both ranks go on applying the same averaged gradient, do
# the replicas come back together by step 5, stay exactly as far apart as after the skip, or drift
# further apart?

# %% tags=["demo"]
prediction = None  # your guess: "together", "same distance" or "further apart"

# %% tags=["demo"]
from course.lessons.distributed import run_ranks

replicas = run_ranks({"both ranks step": [], "rank 1 skips step 3": [(1, 3)]}, steps=6)
for name, r in replicas.items():
    print(name)
    for step in r.steps:
        print(f"  step {step}: rank 0 sum {r.checksums[0][step][0]:+.6f}, rank 1 sum {r.checksums[1][step][0]:+.6f}, "
              f"all-reduce says agree={r.agree[step]}, largest parameter difference {r.max_param_diff[step]:.2e}")
_d = replicas["rank 1 skips step 3"].max_param_diff
reveal("after the skip at step 3, the replicas by step 5", prediction,
       "together" if _d[5] == 0 else ("further apart" if _d[5] > _d[3] else "same distance"))
print("checksum verdict equals the direct comparison at every step, in both scenarios:",
      all(r.agree == [d == 0.0 for d in r.max_param_diff] for r in replicas.values()))

# %% [markdown]
# The replicas drift further apart after the skip even though both ranks apply the same averaged
# gradient afterwards: their parameters and their Adam moments differ.
#
# **What equal checksums prove.** *Different* checksums prove that the parameters differ. *Equal*
# checksums do not prove that they are equal: the checksum maps thousands of parameters to two numbers,
# so many different parameter vectors share each value. A plain sum misses any swap of two values;
# the weighted sum catches swaps, but it still has collisions, and they are easy to find: change four
# weights at evenly spaced positions by +a, -a, -a, +a (the position weights of such a group add up
# the same on both sides, so both sums can come out unchanged, to the last bit).

# %% tags=["demo"]
from course.lessons.distributed import checksum

model = SPIKE_PIPE.build_model(0)
params = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
before_sum = checksum(model)
for i in range(0, 2000):  # search for the first group of four positions i, i+8, i+16, i+24 that collides
    changed = params.clone()
    changed[[i, i + 24]] += 2 ** -6
    changed[[i + 8, i + 16]] -= 2 ** -6
    torch.nn.utils.vector_to_parameters(changed, model.parameters())
    if torch.equal(checksum(model), before_sum):
        break
print(f"positions {i}, {i + 8}, {i + 16}, {i + 24} changed by +-{2 ** -6}: largest parameter difference "
      f"{(changed - params).abs().max().item():.4f}; checksums equal: {torch.equal(checksum(model), before_sum)} "
      f"({before_sum.tolist()} before, {checksum(model).tolist()} after)")

# %% [markdown]
# So the all-reduced checksum is a cheap *alarm* (any difference in it is real), not a proof of
# agreement; a periodic direct comparison (a hash of the raw parameter bytes, or all-gathering them)
# is the stronger check, at a higher cost. It also covers the parameters only, not the optimizer state,
# and cannot say which replica is right.
#
# **Failure is part of the contract.** When a rank dies, its peer waits in a collective. `run_ranks`
# sets a timeout on the process group, destroys it in `finally`, watches the children, and raises an
# error naming the rank as soon as one fails, after every child has exited:

# %% tags=["demo"]
import os
import time

from course.lessons.distributed import RankFailed

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
# ## Mystery: whose spike is it?
#
# A late spike has more than one cause. The bug catalogue's late-spike family holds, besides the
# corrupted shard, two more (`course.bugs.catalogue("late-spike")` lists them all):
#
# * `corrupted-shard`: eight batches whose inputs are one token repeated (what you just fixed);
# * `garbled-shard`: eight batches whose inputs are ordinary but whose *targets* are random tokens;
# * `lr-burst`: the optimizer multiplies its learning rate for eight steps (the `lr` the loop logs is
#   the scheduler's, so it stays smooth).
#
# All of them strike at the same point of a run (30% of the schedule: step 60 on the small schedule
# below), so *where* the spike comes says nothing about which it is. The pipeline below was drawn by
# seed from `healthy` and these three, opaque: every part is a `<part>`, the settings are the healthy
# ones, and its learning rate and seeds were drawn independently of the bug. All you can do is run it
# and test it. `course.lessons.replay.MYSTERY_PIPE` is a small version of the recipe above, over 8 symbols so
# that the model has learned most of the language by step 60 (one training run of `MYSTERY_STEPS` = 75
# steps takes about half a second); `train_history` below trains one.

# %%
from course.exercises import mystery
from course.lessons.replay import MYSTERY_CANDIDATES, MYSTERY_PIPE, MYSTERY_STEPS
from course.reference.train import start

mine = mystery.draw(MYSTERY_CANDIDATES, seed=6, base=MYSTERY_PIPE)


def train_history(pipe, seed=0, steps=MYSTERY_STEPS, skip=0):
    """The history of a fresh run of ``pipe`` (model seed ``seed``) for ``steps`` steps; with ``skip``
    the data cursor starts ``skip`` batches further on, so the run meets other data."""
    r = start(pipe, seed)
    r.data_offset = skip
    return train_steps(r, steps, eval_every=0).history


print(mine)
mine_history = train_history(mine)
plt.figure(figsize=(7, 3))
plt.plot(mine_history["loss"], linewidth=1)
plt.xlabel("step")
plt.ylabel("training loss (nats)")
plt.title("Your mystery pipeline: one run of 75 steps")
plt.show()

# %% [markdown]
# ### (a) A falsifying test (3 points)
#
# Write `detect(pipe) -> bool`: `True` when a run of `pipe` has a late loss spike, `False` when it does
# not. Train it (`train_history`, or `course.lessons.replay.train_with_checkpoints`) and look at the losses.
#
# * **The noise it must tolerate.** The loss of a healthy draw falls quickly, then wobbles: a step's
#   loss can be up to about 1.35 x the median of the 10 steps before it. Every bug of this family pushes
#   the loss of some step between 60 and 75 to at least 1.6 x the median of the 10 steps before that
#   step. Compare each step with the run's own recent history (the alert policy's rule), not with a
#   fixed number: the loss level depends on the draw's language and learning rate.
# * Graded by mutation: quiet on healthy draws, firing on broken ones, with other seeds and
#   configurations and with a bug of this family you have not been shown. Return a `bool` (numpy and
#   torch bools are accepted).
# * A pipeline that crashes under your test is broken: catch the exception around the pipeline's own
#   calls (the training run) and return `True`; an exception that leaves `detect` is no answer and
#   fails the cell.
# * You may use your own `observe` (`replay_alerts(AlertPolicy(...), history, observe=observe)`); the
#   package's `AlertPolicy.observe`, `course.lessons.replay.spike_alerts` and `course.lessons.replay.spike_symptom`,
#   and the mystery module's `reveal`, `touched`, `draw` and `make` are switched off while your
#   function is graded. Keep it to at most three training runs of 75 steps per call.

# %% nbgrader={"grade": false, "grade_id": "detect", "locked": false, "schema_version": 3, "solution": true}
def first_spike(losses, ratio=1.4, window=10):
    """The first step whose loss is above ``ratio`` x the median of the ``window`` losses before it, or None."""
    ### BEGIN SOLUTION
    for s in range(window, len(losses)):
        if losses[s] > ratio * statistics.median(losses[s - window:s]):
            return s
    return None
    ### END SOLUTION


def detect(pipe):
    ### BEGIN SOLUTION
    try:
        losses = train_history(pipe)["loss"]
    except Exception:  # a pipeline that crashes under the test is broken
        return True
    return first_spike(losses) is not None
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_detect", "locked": true, "points": 1, "schema_version": 3, "solution": false}
from course.exercises import mystery as _mystery
from course.toolkit.alerts import AlertPolicy as _Policy
from course.exercises.grading import assert_detector
from course.lessons.replay import MYSTERY_PIPE as _BASE, spike_alerts as _spike_alerts, spike_symptom as _spike_symptom

_off = (_mystery.reveal, _mystery.touched, _mystery.draw, _mystery.make, _spike_alerts, _spike_symptom, _Policy.observe)


def _crashing_update(optimizer):  # a part that raises: a pipeline that crashes under your test is broken
    raise RuntimeError("this pipeline's update crashes")


assert_detector(detect, healthy={"healthy draw": _mystery.make("healthy", 1, _BASE)},
                broken={"corrupted-shard draw": _mystery.make("corrupted-shard", 2, _BASE),
                        "a pipeline that crashes": _BASE.replace(update=_crashing_update)},
                what="spike detector", off=_off)
### BEGIN HIDDEN TESTS
assert_detector(detect, healthy={"a fresh healthy draw": _mystery.hidden("healthy", 61, _BASE, salt="h-04-v2d")},
                broken={"a fresh broken draw": _mystery.hidden("corrupted-shard", 62, _BASE, salt="h-04-v2d")},
                what="spike detector", off=_off)
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: healthy draws and the other bugs of the family (one you have not seen), fresh configurations.

# %% nbgrader={"grade": true, "grade_id": "test_detect_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
from course.exercises import mystery as _mystery
from course.toolkit.alerts import AlertPolicy as _Policy
from course.exercises.grading import assert_detector
from course.lessons.replay import MYSTERY_PIPE as _BASE, spike_alerts as _spike_alerts, spike_symptom as _spike_symptom

_off = (_mystery.reveal, _mystery.touched, _mystery.draw, _mystery.make, _spike_alerts, _spike_symptom, _Policy.observe)
_salt = "h04-d7e"
assert_detector(detect,
                healthy={f"hidden healthy draw {i}": _mystery.hidden("healthy", s, _BASE, salt=_salt) for i, s in enumerate((3, 4))},
                broken={f"hidden broken draw {i}": _mystery.hidden(b, 5 + i, _BASE, salt=_salt)
                        for i, b in enumerate(("garbled-shard", "lr-burst", "optimizer-state-reset"))},
                what="spike detector", off=_off)
### END HIDDEN TESTS

# %% [markdown]
# ### (b) Name the cause (3 points)
#
# Write `name_cause(pipe) -> str`: `"healthy"` when there is no spike, `"data"` when the spike comes
# from the batches the run trains on, `"optimizer"` when it comes from the optimizer (its factory or
# its update), whatever data it meets.
#
# This is the replay experiment from the start of the notebook: resume a state from *before* the spike
# on *other* data indices (`train_with_checkpoints`, `last_good` and `replay(..., skip=...)` from
# `course.lessons.replay`, or `train_history(pipe, skip=...)`) and see whether the spike comes back. Checkpoint
# well before the spike: the state right after a shard is already damaged. Graded on fresh, salted
# draws of every bug of the family, one of them never shown to you (it is an optimizer bug); the same
# functions as in (a) are switched off. Return one of the three strings.

# %% nbgrader={"grade": false, "grade_id": "name_cause", "locked": false, "schema_version": 3, "solution": true}
import tempfile

from course.lessons.replay import last_good, replay, train_with_checkpoints


def name_cause(pipe):
    ### BEGIN SOLUTION
    with tempfile.TemporaryDirectory(prefix="mystery-") as folder:
        run = train_with_checkpoints(pipe, MYSTERY_STEPS, folder, every=10)
        s = first_spike(run.history["loss"])
        if s is None:
            return "healthy"
        good = last_good(folder, s - 10)  # a state from before anything broke
        other = replay(pipe, folder, good, steps=min(MYSTERY_STEPS, s + 10) - good, skip=100)
    return "optimizer" if first_spike(other.history["loss"]) is not None else "data"
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_name_cause", "locked": true, "points": 1, "schema_version": 3, "solution": false}
from course.exercises import mystery as _mystery
from course.toolkit.alerts import AlertPolicy as _Policy
from course.exercises.grading import assert_names
from course.lessons.replay import MYSTERY_PIPE as _BASE, spike_alerts as _spike_alerts, spike_symptom as _spike_symptom

_off = (_mystery.reveal, _mystery.touched, _mystery.draw, _mystery.make, _spike_alerts, _spike_symptom, _Policy.observe)
assert_names(name_cause, {"corrupted-shard draw": (_mystery.make("corrupted-shard", 12, _BASE), "data"),
                          "lr-burst draw": (_mystery.make("lr-burst", 13, _BASE), "optimizer"),
                          "healthy draw": (_mystery.make("healthy", 14, _BASE), "healthy")},
             what="name_cause", off=_off)
### BEGIN HIDDEN TESTS
assert_names(name_cause, {"fresh draw 0": (_mystery.hidden("lr-burst", 63, _BASE, salt="h-04-v2c"), "optimizer"),
                          "fresh draw 1": (_mystery.hidden("corrupted-shard", 64, _BASE, salt="h-04-v2c"), "data")},
             what="name_cause", off=_off)
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: a healthy draw and fresh draws of the other bugs of the family (one you have not seen).

# %% nbgrader={"grade": true, "grade_id": "test_name_cause_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
from course.exercises import mystery as _mystery
from course.toolkit.alerts import AlertPolicy as _Policy
from course.exercises.grading import assert_names
from course.lessons.replay import MYSTERY_PIPE as _BASE, spike_alerts as _spike_alerts, spike_symptom as _spike_symptom

_off = (_mystery.reveal, _mystery.touched, _mystery.draw, _mystery.make, _spike_alerts, _spike_symptom, _Policy.observe)
_salt = "h04-n3a"
_want = {"healthy": "healthy", "garbled-shard": "data", "lr-burst": "optimizer", "optimizer-state-reset": "optimizer"}
assert_names(name_cause, {f"hidden draw {i}": (_mystery.hidden(b, 1 + i, _BASE, salt=_salt), w)
                          for i, (b, w) in enumerate(_want.items())}, what="name_cause", off=_off)
### END HIDDEN TESTS

# %% [markdown]
# ### (c) The fix (3 points)
#
# Write `fix(pipe) -> Pipeline` for a broken draw of `corrupted-shard`, `garbled-shard` or `lr-burst`:
# return `pipe` with the broken part replaced and every other part and setting left as it is. The
# reference parts: the data stream is `batches=None` (the reference stream; or wrap the broken stream
# in a `Quarantine` with a check that catches what is wrong), the optimizer factory is
# `course.reference.pipeline.adamw`. You may use your `name_cause`, or compare the draw's batches with the
# reference stream (`course.reference.train.batch_at(pipe, 0, i)` against
# `batch_at(pipe.replace(batches=None), 0, i)`): calling a part is a test, and allowed.
#
# Graded by behaviour on fresh draws of each of the three bugs (`course.exercises.mystery.check_fix`): the fixed
# pipeline may differ from the draw only in the broken part; trained on a fresh seed, the alert policy
# that grades it (loss-spike alerts at 1.4 x the median of the last 10 steps) must stay quiet; and at
# least 90% of its first 75 batches must be ordinary data (removing bad batches is fine, replacing the
# data is not). Never compared with a stored number. The same functions as in (a) are switched off.

# %% nbgrader={"grade": false, "grade_id": "fix", "locked": false, "schema_version": 3, "solution": true}
import course.reference.pipeline
from course.reference.train import batch_at


def fix(pipe):
    ### BEGIN SOLUTION
    reference = pipe.replace(batches=None)
    for i in range(MYSTERY_STEPS):
        a, b = batch_at(pipe, 0, i), batch_at(reference, 0, i)
        if not (torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)):
            return reference  # the data part is broken: back to the reference stream
    return pipe.replace(optimizer_factory=course.reference.pipeline.adamw)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_fix", "locked": true, "points": 1, "schema_version": 3, "solution": false}
from course.exercises import mystery as _mystery
from course.toolkit.alerts import AlertPolicy as _Policy
from course.lessons.replay import MYSTERY_PIPE as _BASE, spike_alerts as _spike_alerts, spike_symptom as _spike_symptom

_off = (_mystery.reveal, _mystery.touched, _mystery.draw, _mystery.make, _spike_alerts, _spike_symptom, _Policy.observe)
### BEGIN HIDDEN TESTS
# two bugs of different parts: no one repair made to every pipeline fixes both
_mystery.check_fix(fix, [_mystery.hidden(b, 65 + i, _BASE, salt="h-04-v2f") for i, b in enumerate(("lr-burst", "corrupted-shard"))],
                   lambda p: _spike_symptom(p, seed=7), what="fix", off=_off)
### END HIDDEN TESTS
_mystery.check_fix(fix, [_mystery.make("corrupted-shard", 21, _BASE), _mystery.make("lr-burst", 22, _BASE)],
                   lambda p: _spike_symptom(p, seed=7), what="fix", off=_off)

# %% [markdown]
# Hidden tests: fresh draws of each of the three bugs, trained on a fresh seed.

# %% nbgrader={"grade": true, "grade_id": "test_fix_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
from course.exercises import mystery as _mystery
from course.toolkit.alerts import AlertPolicy as _Policy
from course.lessons.replay import MYSTERY_PIPE as _BASE, spike_alerts as _spike_alerts, spike_symptom as _spike_symptom

_off = (_mystery.reveal, _mystery.touched, _mystery.draw, _mystery.make, _spike_alerts, _spike_symptom, _Policy.observe)
_salt = "h04-f9c"
_mystery.check_fix(fix, [_mystery.hidden(b, 1 + i, _BASE, salt=_salt) for i, b in enumerate(("garbled-shard", "lr-burst", "corrupted-shard"))],
                   lambda p: _spike_symptom(p, seed=11), what="fix", off=_off)
### END HIDDEN TESTS

# %% [markdown]
# ## What these tests can and cannot prove
#
# * **Replaying from the last good checkpoint** proves the spike is deterministic given the state and
#   the data indices (bit-identical here), which rules out a glitch. Replaying *different* data from the
#   same state, and the same data from another state, tell you whether the batch, the state, or both
#   are needed. It cannot tell you *what* about the batch matters; that takes looking at the batch.
# * **Correlation on one step axis** rules causes out only as far as the logged number is the real one:
#   a smooth *logged* learning rate rules out the schedule, not an optimizer that scales the rate
#   inside its step (the mystery's `lr-burst` logs a smooth rate; the relative update shows it). It
#   never proves a cause in: it points at what to replay.
# * **Rewind and skip** proves only that *this* run got past *this* spike; it changes the data the model
#   sees, and the same batches may spike again from another state. Log every skip.
# * **The quarantine and the re-run** prove that *this* run no longer spikes where it did, by the same
#   alert policy that saw the spike; they do not prove the data clean (a check catches only what it
#   looks for: garbled targets pass a token-share check).
# * **The checksum all-reduce** proves the replicas' parameters differ when the checksums differ. Equal
#   checksums do not prove equal parameters (a collision is shown above), and say nothing about the
#   optimizer state or which replica is right.
# * **Replaying a state on other data** separates a data cause from an optimizer cause only if the state
#   is from before anything broke, and the other data is clean.
# * **The alert policy's tests** prove that each alert fires on its trigger and stays quiet on the
#   sequences tested; the thresholds that suit a run come from that run's healthy history.
