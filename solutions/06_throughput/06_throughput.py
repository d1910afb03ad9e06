# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (debug course)
#     language: python
#     name: debug-course
# ---

# %% [markdown]
# # 06 · Throughput: tokens/s drops at step N
#
# **What you learn.**
# * Time a training step in **phases** (data wait, forward, backward, optimizer, logging, checkpoint,
#   evaluation) and find which phase a slowdown lives in, against a healthy baseline, phase by phase.
# * A **synchronous checkpoint** delays its own step; what it does to the step after it is measured
#   against controls. Two controls split it in its halves (the serialisation alone, the modelled disk's sleep alone) against a run that saves
#   nothing; what a real save to a file leaves behind is named, not measured.
# * Saving a live `state_dict` from a background thread **races** with training: make the race happen
#   on purpose (a `threading.Event`), see which step each saved piece comes from, fix it with a copy
#   taken at the step and show it bit-for-bit equal to that state under the forced schedule.
# * Count **real tokens** (scored targets), not padded positions.
# * *Optional appendix:* read the operator table of a scheduled `torch.profiler` run; count FLOPs with
#   `FlopCounterMode` against the 6·N·positions rule; a utilisation of a measured matmul rate (and how MFU proper differs);
#   what instrumentation costs, the loop's own telemetry included.
# * Debug a **mystery pipeline**: a falsifying test, the slow phase, the fix, graded on pipelines you
#   have never seen.
#
# **Time.** The last cell prints this kernel's CPU time for the notebook on your machine (graded calls
# run in processes of their own and are not counted; `make bench` times every notebook). **GPU:** not needed anywhere.

# %%
import statistics
import time

import matplotlib.pyplot as plt
import torch

_notebook_cpu_start = time.process_time()  # CPU time of this kernel, user plus system
torch.set_num_threads(1)  # tiny models: one thread is fastest and does not fight other processes
_ = torch.manual_seed(0)  # returns the generator; assigned so it is not printed

# %% [markdown]
# ## Where a step's time goes
#
# A small version of the course pipeline (one layer, 16-token windows, batches of 16). The training
# loop (`course.reference.train.train_steps`) times seven phases of every step and keeps them in `run.phases`:
# `data` (fetch and collate the batch), `fwd` (forward and loss), `bwd` (backward, gradient norm,
# clipping), `opt` (optimizer and scheduler, and copies of the parameters for the update size), then three parts of the pipeline that run after the
# update: `log` (`log_step`), `ckpt` (`checkpoint`) and `eval` (evaluation, when `eval_due` says so).
# The healthy parts log nothing extra, save nothing inside the step, and evaluate every `eval_every`
# steps. The loop's bookkeeping after the `opt` phase (`loss.item()`, the parameter norm, the norms
# for the update size, the finiteness check, appending to `run.history`) is charged to no phase, so
# in this notebook a step's time means the sum of its seven phases (`throughput.step_times`), which
# leaves that bookkeeping out. Here a real run, on this machine's clock, evaluating every 20 steps:

# %%
from course import ModelConfig, Pipeline
from course.lessons import throughput
from course.bugs import inject
from course.toolkit.phases import PHASES
from course.exercises.record import reveal
from course.reference.train import start, train_steps

BASE = Pipeline().replace(seq_len=16, model=ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                          n_train=2048, n_val=128, batch_size=16, steps=48, lr=3e-2, warmup=10)
print("phases:", PHASES)

# %% tags=["demo"]
healthy_wall = train_steps(start(BASE, seed=0), 60, eval_every=20)
fig, ax = plt.subplots(figsize=(8, 3))
throughput.stacked_plot(healthy_wall, ax, title="healthy run, real clock (eval every 20 steps)")
ax.legend(fontsize=7, ncol=4)
plt.show()

# %% [markdown]
# The evaluation steps stand out: they are scheduled, so they are not a regression, but a dashboard
# that averages tokens/s over a window containing one will dip. The medians per phase, in
# milliseconds (they change from run to run and machine to machine):

# %% tags=["demo"]
# NBVAL_IGNORE_OUTPUT
print({p: round(1e3 * m, 3) for p, m in throughput.phase_medians(healthy_wall).items()})

# %% [markdown]
# ## A clock that does not depend on this machine
#
# Wall-clock times move with the load of the machine; a grader that compared them would flake. So
# this notebook also runs the same loop under `course.toolkit.phases.CostModel`: a **seeded model** of what
# each phase costs (proportional to the positions computed and the parameters updated, with ±15%
# noise per phase, a slow first step, and a few isolated slow steps, as a shared machine has). A
# bug's extra work is charged to the clock that runs: a slow disk, a device synchronisation or a
# stalled data server *sleeps* under the real clock and is *added* under the cost model. Read the
# docstrings of `course.toolkit.phases.CostModel` and `course.bugs.throughput` for the numbers.
# `throughput.traced(pipe, seed)` trains a pipeline for 24 steps under the cost model and remembers
# the run.

# %%
help(throughput.traced)

# %% [markdown]
# ## The symptom
#
# A run whose tokens/s drops partway and stays down. Throughput is counted in **scored target
# tokens** per second (here every window is full, so it equals positions per second).

# %% [markdown]
# **Predict.** Before you look at the phases: a run's tokens/s drops at one step and stays down.
# Which phase do you bet the lost time lives in: `"data"`, `"fwd"`, `"bwd"`, `"opt"`, `"log"`,
# `"ckpt"` or `"eval"`? (The regression check below reveals it.)

# %%
prediction = None  # your guess: one phase name

# %% tags=["demo"]
symptom_pipe = inject(BASE, "data-source-stalls")
symptom_run = throughput.traced(symptom_pipe, seed=0)
baseline = throughput.traced(BASE, seed=1)  # a healthy run of the same shape, another seed

# %% tags=["demo"]
fig, axes = plt.subplots(1, 2, figsize=(12, 3.2))
for run, label in ((baseline, "healthy"), (symptom_run, "the symptom")):
    axes[0].plot(run.history["step"], [t / 1e3 for t in throughput.tokens_per_second(run)], "o-", ms=3, label=label)
axes[0].axhline(statistics.median(throughput.tokens_per_second(baseline)) / 1e3, color="grey", linestyle=":",
                label="healthy median")
axes[0].set_xlabel("step")
axes[0].set_ylabel("thousand scored tokens / s (cost model)")
axes[0].legend(fontsize=8)
throughput.stacked_plot(symptom_run, axes[1], title="the symptom, by phase")
axes[1].legend(fontsize=7, ncol=4)
plt.show()

# %% [markdown]
# ## Competing hypotheses, and one test for all of them
#
# | hypothesis | prediction |
# |---|---|
# | a checkpoint saved on the training thread | the `ckpt` phase is slow, on every k-th step |
# | evaluation running too often | the `eval` phase is slow |
# | logging that synchronises or grows | the `log` phase is slow, constant or growing |
# | the data source | the `data` phase is slow |
#
# One test separates them: compare each phase, step by step, with the same phase of a healthy
# baseline of the same shape. `throughput.regressions(run, baseline)` counts the steps on which a
# phase takes more than 3× the baseline's median of that phase plus 1 ms, and reports a phase that
# is slow on at least 4 steps (one or two slow steps are a busy machine, not a regression). The
# negative control is a healthy run on another seed:

# %% tags=["demo"]
symptom_found = throughput.regressions(symptom_run, baseline)
print("the symptom:     ", symptom_found)
print("healthy, seed 2: ", throughput.regressions(throughput.traced(BASE, seed=2), baseline))
reveal("the phase the lost time lives in", prediction, ", ".join(symptom_found) or "none")

# %% [markdown]
# ## Closing the loop
#
# The data phase is slow from one step on. In a real job the fix at the right depth is in the data
# source (prefetching, a healthy server). What would a change of batch size do?
#
# **Predict.** The stalled run with batches of 32 windows instead of 16: do its tokens/s once
# stalled go up, stay the same, or go down? And does the regression check still report the data
# phase (`True` or `False`)?

# %%
prediction = None  # your guess: a pair, e.g. ("down", False): ("up", "same" or "down"; True or False)

# %% tags=["demo"]
stall_from = symptom_pipe.batches.start  # the first data index that stalls (one batch per step)
tokens_once_stalled = {}
for batch_size in (8, 16, 32):
    stalled = throughput.traced(symptom_pipe.replace(batch_size=batch_size), seed=0)
    healthy = throughput.traced(BASE.replace(batch_size=batch_size), seed=1)
    tokens_once_stalled[batch_size] = statistics.median(throughput.tokens_per_second(stalled)[stall_from:])
    print(f"batch {batch_size:>2}: {tokens_once_stalled[batch_size] / 1e3:5.1f}k tokens/s once stalled, "
          f"{statistics.median(throughput.tokens_per_second(healthy)) / 1e3:5.1f}k healthy;",
          "regressions:", throughput.regressions(stalled, healthy))
ratio = tokens_once_stalled[32] / tokens_once_stalled[16]
reveal("(tokens/s once stalled at batch 32 against 16, the data phase still reported at batch 32)", prediction,
       ("up" if ratio > 1.05 else "down" if ratio < 0.95 else "same", "data" in throughput.regressions(stalled, healthy)))
print(f"(the ratio of tokens/s once stalled, batch 32 over batch 16: x{ratio:.2f})")

# %% [markdown]
# A larger batch raises tokens/s: the stall costs the same time per batch, whatever the batch holds,
# so more tokens share it. The check still reports the data phase, because the stall is still there;
# a dashboard of tokens/s alone would call the larger batch a fix. A smaller model would barely change
# tokens/s here and leave the stall: under the cost model, forward and backward cost per position
# whatever the model's width, and only the optimizer's cost follows the parameter count. (On real hardware a narrower model computes faster, so the stall takes
# a larger share of each step.) A lower learning rate would not change the speed at all. Here the fix
# is to put the reference batch stream back (`batches=None`), and the same check, on a fresh seed,
# must be quiet:

# %% tags=["demo"]
fixed_pipe = symptom_pipe.replace(batches=None)
for name, p in {"before the fix": symptom_pipe, "after the fix": fixed_pipe}.items():
    print(f"{name:>15}: {throughput.regressions(throughput.traced(p, seed=3), baseline)}")

# %% [markdown]
# ## The catalogue
#
# Every bug of this notebook's family (`course.bugs.catalogue("throughput")`), traced under the cost
# model. Each slows one phase, in its own pattern: periodic, constant, growing, or from step N on.

# %% tags=["demo"]
from course.bugs import catalogue

bugs = catalogue("throughput")
fig, axes = plt.subplots(2, 3, figsize=(13, 6), sharey=True)
for ax, b in zip(axes.flat, bugs):
    run = throughput.traced(inject(BASE, b.name), seed=0)
    throughput.stacked_plot(run, ax, title=b.name)
    print(f"{b.name:>30}: {throughput.regressions(run, baseline)}   ({b.symptom})")
axes[0, 0].legend(fontsize=7, ncol=2)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## A synchronous checkpoint delays its own step
#
# A checkpoint saved on the training thread every 8 steps, on the real clock. It is a model
# (`course.bugs.throughput.SyncCheckpoint`): `torch.save` serialises the state into a buffer in
# memory, and the slow disk is a sleep of the modelled write time; no file is written, and the buffer
# is freed when the save returns. The serialisation is real work; only the disk is a sleep.
#
# **Predict.** The median time of the step right after each save, divided by the median of the
# steps that neither save nor follow a save: what ratio do you expect (a number)?

# %%
prediction = None  # your guess: the ratio (a number)

# %% [markdown]
# Four runs of 64 steps separate the causes. Beside the bug, each half of it alone: the same
# `torch.save` without the sleep (`throughput.SaveWithoutDisk`), and the same sleep, for the bytes the
# bug writes, without the save (`throughput.DiskWithoutSave`). The control saves nothing: its ratios
# at the same step positions are one sample of how far such steps wander by chance. `throughput.after_save` gives the medians of the
# saving steps, of the step after each, and of the others, with the others' quartiles.

# %% tags=["demo"]
# NBVAL_IGNORE_OUTPUT
from course.bugs.throughput import SyncCheckpoint

arms = {"the bug: save and disk": SyncCheckpoint(8), "save only": throughput.SaveWithoutDisk(8),
        "disk only (a sleep)": throughput.DiskWithoutSave(8, throughput.saved_bytes(BASE)),
        "control: no checkpoint": BASE.checkpoint}
cost = {name: throughput.after_save(BASE.replace(checkpoint=c), every=8) for name, c in arms.items()}
for name, c in cost.items():
    print(f"{name:>23}: saving/others {c['saving'] / c['others']:4.1f}   after/others {c['after'] / c['others']:4.2f}"
          f"   others' quartiles {c['q1'] / c['others']:.2f} to {c['q3'] / c['others']:.2f}")
bug, control = cost["the bug: save and disk"], cost["control: no checkpoint"]
reveal("step after a save / other steps", prediction,
       f"{bug['after'] / bug['others']:.2f}, beside {control['after'] / control['others']:.2f} for the control "
       "(no checkpoint) at the same step positions")

# %% [markdown]
# The save costs its own step (`saving/others`). For the step after it, read each row against the
# control and against the others' quartiles, not against 1: seven steps follow a save, and one run of
# the control is one sample of their chance. Run the cell a few times before deciding: from run to run
# these ratios move by a tenth or more. If the *disk only* row's `after/others` stays above the
# control's, the next step pays for the wait itself, since nothing was serialised and nothing was left
# to do. A hypothesis for why, which this cell does not test: while the training thread sleeps its core
# is idle, and the operating system may lower the core's clock or run another process there whose
# memory traffic evicts the model's weights from the caches, so the next step starts on a slower,
# colder core (a busy or power-saving machine more, a quiet one with a fixed clock less). The *save
# only* row shows whether the serialisation itself leaves work behind (caches to refill). A real
# `torch.save` to a file can leave more that this cell neither models nor measures: the operating
# system writes the file's dirty pages back to disk after the call returns (competing for the disk
# and memory bandwidth), a copy taken for the save holds memory until it is freed, and a save to a
# network file system can stall later reads. So on a real job, measure the same ratio (the step after
# a save over the others, against a run that does not save) before blaming or clearing the checkpoint
# for a run that stays slow after it. The explorer below shows traces under the cost model for several
# intervals: a longer interval makes fewer steps slow, not each of them faster.

# %% tags=["demo"]
interval_traces = {k: throughput.traced(BASE.replace(checkpoint=SyncCheckpoint(k)), seed=0) for k in (2, 4, 8, 16)}

# %% tags=["demo"]
# NBVAL_IGNORE_OUTPUT
explorer = throughput.interval_explorer(interval_traces)
explorer

# %% [markdown]
# ## The async-save race
#
# The usual cure for a slow save is to write it from a background thread, handed
# `model.state_dict()` and `optimizer.state_dict()` as they are, while training goes on.
#
# A race that shows up only sometimes teaches nothing, so `throughput.race` forces one: the saver's
# thread waits on a `threading.Event` until the trainer has run 3 more steps, then writes. The
# checkpoint is compared, tensor by tensor with `torch.equal`, with a deep copy of the state taken at
# the requested step, and with deep copies taken after each later step, which say where each saved
# tensor comes from (`from_step`: the number of updates of the state it equals; `lr_from`, the same
# for the learning rate).
#
# **Predict.** With the live state dicts, how many of the checkpoint's tensors (parameters, Adam's
# moments and step counts) will differ from the state at the requested step: none, a few, or all?

# %%
prediction = None  # your guess: "none", "a few" or "all"

# %% tags=["demo"]
from collections import Counter


def provenance(r):
    """How many saved tensors of each part come from the state after how many updates."""
    counts = Counter((name.split("/")[1], k) for name, k in r.from_step.items())
    return ", ".join(f"{n} {part} tensors from step {k}" for (part, k), n in sorted(counts.items(), key=str)) + \
        f"; the learning rate from step {r.lr_from}"


live = throughput.race(BASE, throughput.live_state, save_at=4, steps_after=3)
print(f"requested at step {live.step}, written {live.steps_after} steps later: "
      f"{len(live.differ)} of {live.compared} tensors differ, e.g. {live.differ[:3]}")
print("where each saved piece comes from:", provenance(live))
reveal("tensors that differ", prediction,
       "none" if not live.differ else "all" if len(live.differ) == live.compared else "a few")

# %% [markdown]
# The state dicts hold the **live** tensors: a state dict shares storage with the parameters and with
# Adam's moments, and training updates them in place, so whatever the thread writes is the state at
# the moment each tensor is serialised, not at the step the checkpoint was asked for. The learning
# rate is a float in the optimizer's param group, which `optimizer.state_dict()` copies when it is
# called. Every tensor differs, the step counters too, and the provenance line says how: every tensor in
# the file is the state after step 7, written under the label of step 4, while the learning rate
# beside them is step 4's. A resume from it would start from step 7's weights, moments and Adam step
# counts, while the loop and the scheduler count from 4 and replay the batches of steps 4 to 6: wrong,
# and nothing in the file says so.
#
# A real asynchronous save can also leave a file with tensors from *two* steps: one that copies the
# state lazily, part by part, and lets training go on before it has finished. `throughput.model_first`
# is such a half-done copy: it copies the model's tensors at the step and hands the optimizer's state
# over live.

# %% tags=["demo"]
half = throughput.race(BASE, throughput.model_first, save_at=4, steps_after=3)
print(f"model copied at the step, optimizer live: {len(half.differ)} of {half.compared} tensors differ")
print("where each saved piece comes from:", provenance(half))

# %% [markdown]
# The weights are step 4's and Adam's moments and step counts are step 7's: a mixture of steps that
# no run ever passed through. The fix is a copy of **all** of it taken **at the step**, on the
# training thread, before it goes on; the thread then owns tensors nothing else touches.
# `throughput.snapshot` deep-copies:

# %% tags=["demo"]
copied = throughput.race(BASE, throughput.snapshot, save_at=4, steps_after=3)
print(f"with a copy at the step: {len(copied.differ)} of {copied.compared} differ, bit-exact: {copied.exact}")
print("where each saved piece comes from:", provenance(copied))

# %% [markdown]
# And the checkpoint does what a checkpoint is for: a run resumed from it continues **bit for bit**
# like a run that never stopped. The model and optimizer state of the checkpoint, with the scheduler's
# state and the step kept beside them (the cell takes both at the step), are enough for this pipeline:
# it has no dropout, so no RNG state is needed, and its loader's order (a seeded shuffle per epoch)
# is a function of the seed and the step, so the step is the loader's position.

# %% tags=["demo"]
import copy
import threading

from course.lessons.throughput import AsyncSaver

run = train_steps(start(BASE, seed=0), 4, eval_every=0)
saver, hold = AsyncSaver(throughput.snapshot), threading.Event()
saver.save(run.model, run.optimizer, run.step, hold)
scheduler_state = copy.deepcopy(run.scheduler.state_dict())  # on the training thread, at the step too
train_steps(run, 3, eval_every=0)  # training goes on while the write waits
hold.set()
saver.join()
resumed = train_steps(throughput.resume_from(BASE, saver.load(4), scheduler_state, step=4), 10, eval_every=0)
uninterrupted = train_steps(start(BASE, seed=0), 14, eval_every=0)
print("resumed equals uninterrupted, bit for bit:", throughput.same_parameters(resumed.model, uninterrupted.model),
      "| losses equal:", resumed.history["loss"] == uninterrupted.history["loss"][4:])

# %% [markdown]
# ### Exercise 1: the race fix
#
# Write `take_snapshot(model, optimizer) -> dict`: a dictionary with keys `"model"` and `"optimizer"`
# holding what `model.state_dict()` and `optimizer.state_dict()` hold, **as it is when you are
# called**, so that a background thread can write it later while training changes the live tensors.
# It is graded with `throughput.race` under the adversarial schedule above (the write waits until
# more steps have run), on this pipeline and on others (another optimizer, other steps): every tensor
# must equal the state at the requested step bit for bit (`torch.equal`), none may be missing, and
# taking the snapshot must not change the training run. `throughput.snapshot` is switched off while
# it runs.

# %% nbgrader={"grade": false, "grade_id": "take_snapshot", "locked": false, "schema_version": 3, "solution": true}
import copy

def take_snapshot(model, optimizer):
    ### BEGIN SOLUTION
    return {"model": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "optimizer": copy.deepcopy(optimizer.state_dict())}
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_take_snapshot", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import torch

from course.exercises.sets import SETS as _SETS
from course.lessons import throughput as _throughput
from course.exercises.grading import captured_warnings as _captured_warnings, switched_off as _switched_off

def _race_ok(pipe, save_at, steps_after, label, seed=0):
    with _switched_off(_throughput.snapshot), _captured_warnings():
        r = _throughput.race(pipe, take_snapshot, save_at=save_at, steps_after=steps_after, seed=seed)
    assert not r.missing, f"{label}: your snapshot lacks {len(r.missing)} tensors of the state, e.g. {r.missing[:2]}"
    assert not r.differ, (f"{label}: {len(r.differ)} tensors of your checkpoint differ from the state at the step it "
                          f"was taken, e.g. {r.differ[:3]}: does each tensor share storage with the live one?")
    assert not r.run_changed, f"{label}: taking your snapshot changed the training run"
    assert r.exact, f"{label}: the checkpoint is empty"

_BASE = _SETS["06_throughput"].base  # the notebook's `BASE`
_race_ok(_BASE, 4, 3, "this notebook's pipeline")
### BEGIN HIDDEN TESTS
import functools as _functools
import random as _random
from course.exercises.grading import hidden_seed as _hidden_seed

def _sgd_momentum(params, lr, weight_decay, momentum):
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)

# random pipelines (language, data, initialisation, rates) and random steps to save at and train after
_rng = _random.Random(_hidden_seed("h-06-snp"))
_sgd = _BASE.replace(optimizer_factory=_functools.partial(_sgd_momentum, momentum=_rng.uniform(0.8, 0.95)),
                     lr=_rng.uniform(0.05, 0.2), data_seed=_rng.randrange(10_000))
_race_ok(_sgd, _rng.randint(2, 4), _rng.randint(1, 2), "SGD with momentum, a random pipeline", seed=_rng.randrange(10_000))
_other = _BASE.replace(weight_decay=_rng.uniform(0.001, 0.05), language_seed=_rng.randrange(10_000),
                       data_seed=_rng.randrange(10_000), lr=_BASE.lr * _rng.uniform(0.5, 1.5))
_race_ok(_other, _rng.randint(4, 7), _rng.randint(1, 3), "AdamW with weight decay, a random pipeline",
         seed=_rng.randrange(10_000))
### END HIDDEN TESTS

# %% [markdown]
# ## Throughput in real tokens
#
# With variable-length sequences padded to one length, the hardware computes every position, but
# only the scored targets are training signal. A dashboard that counts positions reports the same
# tokens/s whatever the padding; one that counts scored targets shows how much of that work trains
# the model. Here the sequences are 4 to 17 tokens long, padded to 17.
#
# **Predict.** What fraction of the positions computed are scored targets?

# %%
prediction = None  # your guess: a fraction between 0 and 1

# %% tags=["demo"]
PADDED = BASE.replace(min_len=4)
padded_run = throughput.traced(PADDED, seed=0)
fill = sum(padded_run.history["tokens"]) / (throughput.positions(PADDED) * len(padded_run.history["tokens"]))
reveal("fraction of positions that are scored targets", prediction, round(fill, 3))

# %% tags=["demo"]
fig, ax = plt.subplots(figsize=(8, 3))
ax.plot(padded_run.history["step"], [t / 1e3 for t in throughput.tokens_per_second(padded_run, real=False)], "o-",
        ms=3, label="padded positions / s")
ax.plot(padded_run.history["step"], [t / 1e3 for t in throughput.tokens_per_second(padded_run, real=True)], "s-",
        ms=3, label="scored tokens / s")
ax.axhline(fill * statistics.median(throughput.tokens_per_second(padded_run, real=False)) / 1e3, color="grey",
           linestyle=":", label="fill x median positions / s")
ax.set_xlabel("step")
ax.set_ylabel("thousand per second (cost model)")
ax.set_ylim(0)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# The positions curve cannot tell a batch of long sequences from a batch of short ones, and a change
# that adds padding (a larger maximum length, no bucketing by length) does not lower it (under this
# cost model a step costs the same per position, padded or not) while the real curve falls. Compare runs, and set alerts, on scored tokens per second.
#
# ## Exercise 2: a mystery pipeline
#
# Now you debug. Below are six pipelines drawn by `course.exercises.mystery.draw` from this notebook's bug
# family: each is healthy or carries one bug, and nothing you can read says which (every part is an
# opaque `<part>`; each draw has its own seeds, learning rate and warm-up, and every other setting
# is the base's). `throughput.traced(pipe)` gives you its run under the cost model (24 steps; `run.phases`,
# `run.history`), and `throughput.traced(MBASE)` a healthy baseline of the same shape.

# %%
from course.exercises import mystery

from course.exercises.sets import SETS

MYSTERIES = SETS["06_throughput"]  # the candidates, the base (BASE) and the seeds; the tests draw the same
MBASE, CANDIDATES = MYSTERIES.base, MYSTERIES.candidates
mysteries = MYSTERIES.draws()
print(repr(mysteries["mystery 1"].checkpoint), repr(mysteries["mystery 1"].batches), "(every part looks like this)")

# %% tags=["demo"]
fig, axes = plt.subplots(1, len(mysteries), figsize=(16, 2.8), sharey=True)
for ax, (name, p) in zip(axes, mysteries.items()):
    throughput.stacked_plot(throughput.traced(p), ax, title=name)
axes[0].legend(fontsize=6)
fig.tight_layout()
plt.show()

# %% [markdown]
# **The noise you must tolerate** (the cost model): each phase varies by about ±15% from step to
# step; the first step is 3× slower in `fwd` and `bwd`; and on about 4% of steps one phase is 3 to 8×
# slower, once. A broken draw makes one phase slow on many steps: every step, every k-th step, from a
# step on, or more and more. Compare each phase with the baseline, and count steps, not one maximum.
#
# ### (a) A falsifying test
#
# Write `detect(pipe) -> bool`: `True` if a phase of `pipe`'s traced run is slow on several steps
# against the healthy baseline, `False` for a healthy pipeline. Return a Python or torch bool. Graded
# like a test suite: quiet on every healthy draw and firing on every broken one, including bugs of
# this family that are not among the candidates drawn above and draws with other seeds. `course.exercises.mystery.reveal`, `draw`, `make`,
# `touched`, `throughput.regressions`, `throughput.slow_phase` and `throughput.problems` are switched
# off while it runs.

# %% nbgrader={"grade": false, "grade_id": "detect", "locked": false, "schema_version": 3, "solution": true}
def detect(pipe):
    ### BEGIN SOLUTION
    run, base = throughput.traced(pipe), throughput.traced(MBASE)
    for phase in PHASES:
        typical = statistics.median(base.phases[phase])
        slow_steps = sum(t > 3 * typical + 1e-3 for t in run.phases[phase])
        if slow_steps >= 4:
            return True
    return False
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_detect", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.exercises.sets import SETS as _SETS
from course.exercises import mystery as _mystery
from course.lessons import throughput as _throughput
from course.exercises.grading import assert_detector as _assert_detector

_OFF = (_mystery.reveal, _mystery.draw, _mystery.make, _mystery.touched, _throughput.regressions,
        _throughput.slow_phase, _throughput.problems)
_mysteries = _SETS["06_throughput"].draws()  # the notebook's `mysteries`, drawn again here
_answers = {name: _mystery.reveal(p) for name, p in _mysteries.items()}
_assert_detector(detect, {n: p for n, p in _mysteries.items() if _answers[n] == "healthy"},
                 {n: p for n, p in _mysteries.items() if _answers[n] != "healthy"}, "falsifying test", off=_OFF)
### BEGIN HIDDEN TESTS
from course import ModelConfig as _MC, Pipeline as _Pipeline
_hbase = _Pipeline().replace(seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                             n_train=2048, n_val=128, batch_size=16, steps=48, lr=3e-2, warmup=10)
_healthy = {f"healthy draw {s}": _mystery.hidden("healthy", s, _hbase, salt="h-06-d3a") for s in (1, 2)}
_broken = {b: _mystery.hidden(b, 4 + i, _hbase, salt="h-06-d3a") for i, b in enumerate(
    ("log-whole-history-every-step", "collate-quadratic-in-length", "sync-checkpoint-every-k"))}
_assert_detector(detect, _healthy, _broken, "falsifying test (unseen draws)", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ### (b) Name the slow phase
#
# Write `name_cause(pipe) -> str`, returning exactly one of `"healthy"`, `"data"`, `"eval"`,
# `"checkpoint"`, `"logging"`: the phase the slowdown lives in. Graded on the draws above and on fresh
# draws (other seeds, and bugs of this family that are not among the candidates drawn above); an answer that reads the pipeline's settings or
# reprs, or is always the same, cannot pass. The same functions are switched off.

# %% nbgrader={"grade": false, "grade_id": "name_cause", "locked": false, "schema_version": 3, "solution": true}
def name_cause(pipe):
    ### BEGIN SOLUTION
    run, base = throughput.traced(pipe), throughput.traced(MBASE)
    worst, most = "healthy", 0.0
    for phase in PHASES:
        typical = statistics.median(base.phases[phase])
        excess = [t - typical for t in run.phases[phase] if t > 3 * typical + 1e-3]
        if len(excess) >= 4 and sum(excess) > most:
            worst, most = phase, sum(excess)
    return {"data": "data", "eval": "eval", "ckpt": "checkpoint", "log": "logging"}.get(worst, "healthy")
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_cause", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.exercises.sets import SETS as _SETS
from course.exercises import mystery as _mystery
from course.lessons import throughput as _throughput
from course.exercises.grading import assert_names as _assert_names

_OFF = (_mystery.reveal, _mystery.draw, _mystery.make, _mystery.touched, _throughput.regressions,
        _throughput.slow_phase, _throughput.problems)
_KIND = {"healthy": "healthy", "sync-checkpoint-every-k": "checkpoint", "eval-every-step": "eval",
         "item-per-parameter-logging": "logging", "log-whole-history-every-step": "logging",
         "data-source-stalls": "data", "collate-quadratic-in-length": "data"}
_mysteries = _SETS["06_throughput"].draws()  # the notebook's `mysteries`, drawn again here
_assert_names(name_cause, {n: (p, _KIND[_mystery.reveal(p)]) for n, p in _mysteries.items()}, "slow phase", off=_OFF)
### BEGIN HIDDEN TESTS
from course import ModelConfig as _MC, Pipeline as _Pipeline
_hbase = _Pipeline().replace(seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                             n_train=2048, n_val=128, batch_size=16, steps=48, lr=3e-2, warmup=10)
_cases = {}
for _i, _b in enumerate(("healthy", "eval-every-step", "log-whole-history-every-step", "collate-quadratic-in-length",
                         "data-source-stalls")):
    _cases[f"fresh draw {_i}"] = (_mystery.hidden(_b, 20 + _i, _hbase, salt="h-06-c5b"), _KIND[_b])
_assert_names(name_cause, _cases, "slow phase (fresh draws)", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ### (c) The fix
#
# Write `fix(pipe) -> Pipeline`: the pipeline with the broken part replaced by the reference, and
# nothing else changed (`pipe.replace(field=...)`; you may call your `name_cause`).
# The references:
#
# | slow phase | field | reference value |
# |---|---|---|
# | checkpoint | `checkpoint` | `course.toolkit.phases.no_checkpoint` |
# | eval | `eval_due` | `course.toolkit.phases.eval_on_schedule` |
# | logging | `log_step` | `course.toolkit.phases.log_nothing` |
# | data | `batches` | `None` (the reference batch stream) |
# | data | `collate` | `course.toolkit.batch.next_token_batch` |
#
# A slow data phase lives in the batch stream *or* in the collate function, not both: test which
# (replace one, trace again, and see whether the slowdown is gone). Graded by behaviour on fresh draws
# of broken pipelines (candidates drawn above and bugs of this family that are not among them): the fix may change only the field the bug
# lives in, and the fixed pipeline, traced on a fresh seed, must show no slow phase
# (`throughput.problems` against a healthy baseline). No stored number is compared.

# %% nbgrader={"grade": false, "grade_id": "fix", "locked": false, "schema_version": 3, "solution": true}
from course.toolkit.batch import next_token_batch
from course.toolkit.phases import eval_on_schedule, log_nothing, no_checkpoint

def fix(pipe):
    ### BEGIN SOLUTION
    cause = name_cause(pipe)
    if cause == "checkpoint":
        return pipe.replace(checkpoint=no_checkpoint)
    if cause == "eval":
        return pipe.replace(eval_due=eval_on_schedule)
    if cause == "logging":
        return pipe.replace(log_step=log_nothing)
    if cause == "data":
        trial = pipe.replace(collate=next_token_batch)
        return trial if name_cause(trial) == "healthy" else pipe.replace(batches=None)
    return pipe
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_fix", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.exercises import mystery as _mystery
from course.lessons import throughput as _throughput
from course import ModelConfig as _MC, Pipeline as _Pipeline

_OFF = (_throughput.regressions, _throughput.slow_phase, _throughput.problems)  # check_fix also switches off reveal, draw, make, touched
_mbase = _Pipeline().replace(seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                             n_train=2048, n_val=128, batch_size=16, steps=48, lr=3e-2, warmup=10)

def _still_slow(fixed):
    found = _throughput.problems(fixed, _mbase, seed=7)  # a fresh seed: new noise, initialisation and batches
    return "after your fix, traced on a fresh seed: " + "; ".join(found) if found else None

### BEGIN HIDDEN TESTS
_mystery.check_fix(fix, [_mystery.hidden(b, 40 + i, _mbase, salt="h-06-f71") for i, b in enumerate(
    ("collate-quadratic-in-length", "log-whole-history-every-step"))],
    _still_slow, "fix (unseen bugs)", off=_OFF)
### END HIDDEN TESTS
_mystery.check_fix(fix, [_mystery.make(b, 30 + i, _mbase) for i, b in enumerate(
    ("sync-checkpoint-every-k", "data-source-stalls", "item-per-parameter-logging"))], _still_slow, "fix", off=_OFF)

# %% [markdown]
# ## What each test can and cannot prove
#
# * **Phases against a healthy baseline**: a phase slow on many steps locates the time; it does not
#   say why that phase is slow (a slow disk and a large checkpoint look the same), and it needs a
#   baseline of the same shape, run on the same kind of machine. One slow step proves nothing.
# * **Wall-clock times** move with the machine's load: compare within one run (ratios, medians,
#   alternating blocks), never against a number measured elsewhere. Graders use a cost model.
# * **The forced race** proves that the live state dicts can be written after training moved on, and
#   that a copy at the step is exact *under that schedule*; a race that happened not to show in one
#   run proves nothing, which is why the schedule is forced.
# * **Resumed equals uninterrupted** proves that the model and optimizer state, with the scheduler's
#   state and the step kept beside them, are enough for this pipeline. Dropout would add the RNG
#   state; a loader whose order is not a function of the seed and the step would add its position.
# * **Scored tokens per second** measures training signal; positions per second measures the
#   hardware's work. A utilisation depends on its conventions (what counts as a FLOP, forward and
#   backward, and what it divides by: MFU divides by the hardware's peak, the appendix by a measured
#   matmul rate), so a number without them cannot be compared.
# * **The profiler and the telemetry** can change what they measure: the appendix measures the
#   telemetry's cost as a ratio within one run; measure the profiler's the same way before trusting
#   its absolute times.

# %% [markdown]
# ## Appendix (optional, not graded): inside a phase, and the cost of looking
#
# The regression check names the phase a slowdown lives in. The next questions are which operators
# inside a step take the time (a profiler trace), how far the step is from what this machine's
# matmuls can do (FLOPs and a utilisation), and what the measuring itself costs. Nothing below is
# needed by the exercises.
#
# ### A scheduled profiler trace
#
# `torch.profiler.profile` with `schedule(wait=1, warmup=1, active=3)` skips one step, warms up on
# one (recording, then discarding), and records three; `prof.step()` marks each step.
# `key_averages()` sums the recorded operators (times change from run to run):

# %% tags=["demo"]
# NBVAL_IGNORE_OUTPUT
prof = throughput.profile_steps(start(BASE, seed=0), wait=1, warmup=1, active=3)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))

# %% [markdown]
# ### FLOPs, the 6·N rule, and a utilisation (not MFU)
#
# `FlopCounterMode` counts one step's forward and backward. Its conventions: a matmul of (M, K) by
# (K, N) is 2·M·N·K FLOPs (a multiply and an add each count one); elementwise ops, softmax and layer
# norm count 0. The rule of thumb: 6·N FLOPs per position for a model whose matmuls hold N
# parameters (2·N forward, 4·N backward; embedding tables are lookups, not matmuls), plus attention's
# two T×T matmuls per layer, which the rule leaves out. Positions include padding: the hardware
# computes them.

# %%
counted, by_op = throughput.counted_flops(BASE)
rule = throughput.rule_flops(BASE)
print(f"counted by FlopCounterMode: {counted:,} FLOPs per step, by operator {by_op}")
print(f"6 N x positions per step:   {rule['6N']:,} (N = {rule['N']:,} matmul parameters)")
print(f"attention matmuls:          {rule['attention']:,}")
print(f"rule total:                 {rule['total']:,}; counted / rule = {counted / rule['total']:.4f}")

# %% [markdown]
# This model's attention computes the scores with plain matmuls, so the counter sees them; a model
# that calls `scaled_dot_product_attention` on CPU would be counted 0 there (check the by-operator
# list for what is missing).
#
# **MFU** (model FLOPs utilisation, Chowdhery et al. 2022, PaLM, section 4.1 and appendix B) = model
# FLOPs per step / step time / the hardware's **peak** FLOP/s: the data-sheet number for the chips
# and the dtype (times the number of chips), with model FLOPs counting forward and backward and no
# recomputation. A CPU has no such number in this notebook, so the cell below divides by something
# else: this machine's float32 matmul rate on one thread, *measured* as the best of five rounds of 20
# timed 256×256 matmuls. A measured rate is below the peak, so the figure below, the **utilisation of the
# measured matmul rate**, is higher than MFU would be; do not compare it with published MFUs. Its
# other conventions: model FLOPs = the counted forward + backward above; step time = the median, over
# the steps of the healthy run at the top of the notebook, of the sum of the seven phases (the loop's
# bookkeeping after `opt` is left out; one thread, this machine, now).

# %% tags=["demo"]
# NBVAL_IGNORE_OUTPUT
rate = throughput.matmul_peak(256)  # a measured rate, not the hardware's peak
step = statistics.median(throughput.step_times(healthy_wall))
print(f"measured 256x256 matmul rate {rate / 1e9:.2f} GFLOP/s; achieved {counted / step / 1e9:.3f} GFLOP/s; "
      f"utilisation of the measured matmul rate {counted / step / rate:.1%} (not MFU: MFU divides by the peak)")

# %% [markdown]
# A tiny model on a CPU reaches a small fraction of even the measured rate (the percentage printed
# above): its operators are small, and the profiler table above shows much of the time outside the
# matmuls. Whether the step can go faster is for the profiler to say, not this ratio.
#
# ### What instrumentation costs
#
# Measuring can change what is measured. `throughput.overhead` switches per-layer telemetry
# (`course.toolkit.telemetry`: a clone of every parameter before the update, then seven statistics per
# parameter tensor, eight `.item()` calls since the update size takes two) on and off in
# alternating blocks of one run and compares the median step times (a ratio within one run, so a
# steady load on the machine cancels):

# %% tags=["demo"]
# NBVAL_IGNORE_OUTPUT
cost = throughput.overhead(start(BASE, seed=0), blocks=6, block=8)
print(f"median step: telemetry off {1e3 * cost['off']:.2f} ms, on {1e3 * cost['on']:.2f} ms, ratio {cost['ratio']:.2f}")

# %% [markdown]
# The ratio printed above is the telemetry's cost at this size, on this machine, under its load at the
# time: alternating blocks spread a changing load over both modes, they do not remove it, so a ratio
# close to 1 (on either side) is within the noise, and a ratio below 1 is noise, not telemetry making
# steps faster. On an accelerator each `.item()` also waits for the device; the same measurement is how
# you find out, and if the cost is not small, log per-layer statistics every k steps.
#
# The loop's own timer is nine clock reads per step, but two phases also hold work that is not
# backward or optimizer: `bwd` includes the gradient norm (a norm per gradient and an `.item()`: the
# loop's telemetry) and the clipping (training, when the pipeline clips), and `opt` includes two flat copies of every parameter (before and after the update, for the
# relative update size). `throughput.loop_extras` times those apart, right before a short healthy run
# whose phase medians they are compared with (both on the real clock, so close in time):

# %% tags=["demo"]
# NBVAL_IGNORE_OUTPUT
extras = throughput.loop_extras(start(BASE, seed=0))
medians = throughput.phase_medians(train_steps(start(BASE, seed=0), 20, eval_every=0))
for p in ("bwd", "opt"):
    part = {"bwd": "the gradient norm and clipping", "opt": "the update-size copies"}[p]
    print(f"{p}: phase median {1e3 * medians[p]:.3f} ms, of which {part} {1e3 * extras[p]:.3f} ms "
          f"({extras[p] / medians[p]:.0%})")

# %% [markdown]
# So a `bwd` or `opt` phase is not pure backward or optimizer time: compare phases with a baseline run
# by the same loop (as the regression check does), not with a backward pass timed on its own.

# %% tags=["demo"]
# NBVAL_IGNORE_OUTPUT
print(f"this notebook took {time.process_time() - _notebook_cpu_start:.0f} s of CPU time (this kernel, user plus system)")
