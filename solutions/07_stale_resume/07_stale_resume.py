# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (debug course)
#     language: python
#     name: debug-course
# ---

# %% [markdown]
# # 07 · Yesterday's identical curve: stale resume and run manifests
#
# **What you learn.**
# * A "new" run whose curve matches an old one to the last bit has several possible causes: the
#   change never reached the run, the plot shows an old log, or the run really trained the old way.
#   A **run manifest** (hashes of code, config, data and environment) and the **used-LR telemetry**
#   tell them apart.
# * **The stale resume**: `optimizer.load_state_dict` restores the checkpoint's learning rate and a
#   scheduler's state restores its base rates, so a resumed run with a new learning rate silently
#   trains at the old one. Fix it where the state is restored, and check the used LR after resuming.
# * **Bit-identical resume**: a run split with a save and a resume equals the unbroken run in every
#   logged value except wall times, and every parameter; dropping the optimizer state, the scheduler, the RNG or the data
#   cursor each breaks this in its own way.
# * **Checkpoints that survive failure**: the write-then-rename order, keeping the last good
#   checkpoint, a fresh directory per run, tested by killing a real process in the middle of a save.
# * Debug a **mystery pipeline** yourself: a resume-correctness check, the cause, and the fix,
#   graded on pipelines you have never seen.
#
# **Time.** Under 40 seconds of computation on a laptop CPU (`make bench` times every notebook on
# yours). **GPU:** not needed anywhere.

# %%
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import torch

torch.set_num_threads(1)  # tiny models: one thread is fastest and does not fight other processes
_ = torch.manual_seed(0)  # returns the generator; assigned so it is not printed

# %% [markdown]
# ## The symptom: today's run is yesterday's
#
# A small version of the course pipeline (one layer, 16-token windows, batches of 16, dropout 0.1,
# a 200-step schedule). Every checkpoint of this notebook goes into a temporary folder that the last
# cell removes; each run gets a directory of its own (`checkpoint.new_run_dir`).
#
# `OLD` is the pipeline as yesterday's code had it: its resume is the plain PyTorch one
# (`optimizer.load_state_dict`, `scheduler.load_state_dict`; in the catalogue, `stale-lr-resume`).

# %%
from course import ModelConfig, Pipeline
from course.reference import checkpoint
from course.lessons import manifest
from course.bugs import inject
from course.reference.train import resume, start, train_steps

BASE = Pipeline().replace(seq_len=16, model=ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64, dropout=0.1),
                          n_train=2048, n_val=64, batch_size=16, steps=200, lr=1e-2, warmup=10)
OLD = inject(BASE, "stale-lr-resume")
NEW_LR = 3e-3
workdir = tempfile.TemporaryDirectory(prefix="ckpt-07-")  # removed by the last cell (or when the kernel exits)
ROOT = Path(workdir.name)
yesterday_dir, today_dir = checkpoint.new_run_dir(ROOT, "yesterday"), checkpoint.new_run_dir(ROOT, "today")
print("two run directories, never the same one:", yesterday_dir != today_dir)

# %% [markdown]
# Yesterday: 200 steps at `lr=1e-2`, with a checkpoint at step 100 (`checkpoint.save`, an atomic
# write; more on that below).

# %% tags=["demo"]
run_a = train_steps(start(OLD, seed=0), 100, eval_every=50)
checkpoint.save(run_a, yesterday_dir)
train_steps(run_a, 100, eval_every=50)
print(f"yesterday: loss at step 199 {run_a.history['loss'][-1]:.4f}, validation {run_a.final_val_loss:.4f}")

# %% [markdown]
# Today, the second half of yesterday's curve looked slow, so you branch from yesterday's step-100
# checkpoint with a lower learning rate, `NEW_LR = 3e-3`, and train the same 100 steps.
#
# **Predict.** Of the 100 training losses logged after the resume (steps 100 to 199), how many will
# be *exactly* equal to yesterday's losses at the same steps?

# %% tags=["demo"]
prediction = None  # your guess: a number from 0 to 100

# %% tags=["demo"]
from course.exercises.record import reveal

run_b = resume(OLD.replace(lr=NEW_LR), checkpoint.latest_good(yesterday_dir))
train_steps(run_b, 100, eval_every=50)
same = sum(a == b for a, b in zip(run_a.history["loss"][100:], run_b.history["loss"][100:]))
reveal("losses after the resume equal to yesterday's, bit for bit", prediction, same)

# %% [markdown]
# The curves, with the window floor (the best mean loss over fresh 16-token windows) as a reference
# line, and the learning rate each step used:

# %% tags=["demo"]
lang = BASE.language()
floor = lang.loss_floor(BASE.seq_len)
fig, (ax, ax_lr) = plt.subplots(1, 2, figsize=(12, 3.6))
ax.plot(run_a.history["step"], run_a.history["loss"], label="yesterday, lr 1e-2", linewidth=2.5, alpha=0.5)
ax.plot(run_b.history["step"][100:], run_b.history["loss"][100:], label="today, resumed with lr 3e-3", linewidth=1)
ax.axhline(floor, color="grey", linestyle=":", label="window floor")
ax.axvline(100, color="black", linestyle="--", linewidth=0.8, label="resume")
ax.set_xlabel("step")
ax.set_ylabel("training loss (nats per token)")
ax.set_title("Today's curve lies on yesterday's")
ax.legend(fontsize=8)
ax_lr.plot(run_a.history["step"], run_a.history["lr"], label="yesterday: used lr", linewidth=2.5, alpha=0.5)
ax_lr.plot(run_b.history["step"][100:], run_b.history["lr"][100:], label="today: used lr", linewidth=1)
ax_lr.axvline(100, color="black", linestyle="--", linewidth=0.8, label="resume")
ax_lr.set_xlabel("step")
ax_lr.set_ylabel("learning rate used by the step")
ax_lr.set_title("The learning rate the loop logged")
ax_lr.legend(fontsize=8)
plt.show()

# %% [markdown]
# Identical outputs alone cannot tell a stale resume from a perfectly reproducible run. The
# competing hypotheses, and what each predicts:
#
# | hypothesis | prediction | test |
# |---|---|---|
# | the plot shows an old log (a stale file, the wrong path) | today's steps never ran | the run's own wall-time log: timings are measured afresh every step |
# | the new learning rate never reached the run (a default or an old config file took precedence) | today's config says `lr=1e-2` | the manifest's config |
# | something else changed too, or nothing did | the code, data or environment differ, or nothing does | the manifest diff |
# | the resume restored the old learning rate | today's config says `3e-3`, but the steps used yesterday's rate | the used-LR telemetry against the configured schedule |
#
# The first test is cheap: the timings of today's steps were measured today. Here both histories are
# in memory and today's run was trained in this notebook, so on its own this comparison cannot come
# out any other way; the control after it shows what it prints when hypothesis 1 is true.

# %% tags=["demo"]
def fresh_timings(old_log, new_log):
    """How many of steps 100-199's forward+backward wall times differ between two logs."""
    return sum(a != b for a, b in zip(old_log["t_fwd_bwd"][100:], new_log["t_fwd_bwd"][100:]))

print(f"steps 100-199: {fresh_timings(run_a.history, run_b.history)} of 100 forward+backward wall times differ "
      "from yesterday's: the steps ran again")

# %% [markdown]
# The control: a plot that reads a stale file. Yesterday's log is written to disk, and "today's log"
# is read from that same path (the wrong-path mistake of hypothesis 1). The test must fire: no wall
# time differs.

# %% tags=["demo"]
import json

stale_path = ROOT / "yesterday-log.json"
stale_path.write_text(json.dumps(run_a.history))
stale_today = json.loads(stale_path.read_text())  # "today's" log, read from yesterday's file
print(f"control, today's log read from yesterday's file: {fresh_timings(run_a.history, stale_today)} of 100 "
      "wall times differ: the test says today's steps never ran")

# %% [markdown]
# ## The run manifest
#
# `manifest.manifest(pipe, seed, steps, directory)` records what went into a run, as four
# components of named entries (every value a string):
#
# * `code`: a hash of each source file of the `course` package, and one entry per pipeline part (a
#   function defined in a notebook is hashed by its compiled code, defaults and closure values, so a
#   change to the function's own code shows; a change to a global it reads does not, see below);
# * `config`: every setting of the pipeline, the seed and the number of steps;
# * `data`: hashes of the training and validation windows and of the exact batches, in order;
# * `environment`: Python, torch and numpy versions, the platform, torch's thread count, whether
#   deterministic algorithms are enabled, the default dtype, the float32 matmul precision and
#   `CUBLAS_WORKSPACE_CONFIG`.
#
# A fifth block, `run`, says when and where the run was made; it differs for every run by design.

# %%
manifest_a = manifest.manifest(OLD, 0, 200, yesterday_dir)
manifest_b = manifest.manifest(OLD.replace(lr=NEW_LR), 0, 200, today_dir)
for component in manifest.COMPONENTS + ("run",):
    print(f"{component:>12}: entries such as {sorted(manifest_a[component])[:3]}")  # counts grow with the package
print("config lr:", manifest_a["config"]["lr"], "->", manifest_b["config"]["lr"])

# %% [markdown]
# A function defined in a notebook is part of the code: redefine the loss in a cell (the same
# arithmetic, scaled by a constant) and its entry changes, although no file of the package did.

# %% tags=["demo"]
import torch.nn.functional as F

def scaled_loss(logits, batch):
    return 1.0 * F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten())

with_cell = manifest.manifest(OLD.replace(loss_fn=scaled_loss), 0, 200, today_dir)
changed = [k for k in manifest_a["code"] if manifest_a["code"][k] != with_cell["code"][k]]
print("code entries that changed:", changed)

# %% [markdown]
# The limit of that hash: it covers the function's code, not the module globals the code reads at
# call time. Change the constant inside the function and the hash changes; move the constant into a
# global and change the global, and the hash stays the same although the loss doubled.

# %% tags=["demo"]
def scaled_by_two(logits, batch):
    return 2.0 * F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten())

SCALE = 1.0

def scaled_by_global(logits, batch):
    return SCALE * F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten())

print("constant in the code, 1.0 -> 2.0:  ", manifest.function_hash(scaled_loss), "->",
      manifest.function_hash(scaled_by_two))
before = manifest.function_hash(scaled_by_global)
SCALE = 2.0
print("global SCALE read by the code, 1.0 -> 2.0:", before, "->", manifest.function_hash(scaled_by_global),
      "(same hash:", before == manifest.function_hash(scaled_by_global), end=")\n")
SCALE = 1.0

# %% [markdown]
# ## Exercise 1: a manifest diff
#
# Write `manifest_diff(old, new)`: for each component of `manifest.COMPONENTS` (`"code"`,
# `"config"`, `"data"`, `"environment"`) whose entries differ, the **sorted list** of entry names that
# were added, removed or changed between the two manifests. Leave out components that agree (an empty
# list is accepted too) and ignore the `run` block, which differs for every run. Return a `dict`.
# `course.lessons.manifest.diff` is switched off while this is graded.

# %% nbgrader={"grade": false, "grade_id": "manifest_diff", "locked": false, "schema_version": 3, "solution": true}
def manifest_diff(old, new):
    ### BEGIN SOLUTION
    out = {}
    for component in manifest.COMPONENTS:
        a, b = old.get(component, {}), new.get(component, {})
        names = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        if names:
            out[component] = names
    return out
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_manifest_diff", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import copy as _copy

import torch

from course import ModelConfig as _MC, Pipeline as _Pipeline
from course.bugs import inject as _inject
from course.lessons import manifest as _manifest
from course.exercises.grading import graded_calls as _graded_calls, sendable as _sendable

def _diff(case):  # manifest_diff(old, new) on copies, apart: its non-empty components, sorted, as plain data
    answer = manifest_diff(*_copy.deepcopy(case))
    if not isinstance(answer, dict):
        return {"not_a_dict": type(answer).__name__}
    return {"normal": _sendable({k: sorted(v) for k, v in answer.items() if len(v)})}

def _check_diff(old, new, sent, label):
    assert "not_a_dict" not in sent, \
        f"return a dict of component -> list of entry names, not {sent['not_a_dict']}"
    got, want = sent["normal"], _manifest.diff(old, new)  # the reference
    assert got == want, f"{label}: you returned {got}; compare every entry of each component, in both directions"

# the notebook's OLD pipeline and its manifests a and b, built here (labels in place of its run
# directories: they change only the manifests' run block, which the diff ignores)
_OLD = _inject(_Pipeline().replace(seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64, dropout=0.1),
                                   n_train=2048, n_val=64, batch_size=16, steps=200, lr=1e-2, warmup=10), "stale-lr-resume")
_manifest_a = _manifest.manifest(_OLD, 0, 200, "yesterday")
_manifest_b = _manifest.manifest(_OLD.replace(lr=3e-3), 0, 200, "today")
_manifest_c = _copy.deepcopy(_manifest_b)
_manifest_c["data"]["visible extra shard"] = "0a1b2c"  # an entry yesterday's manifest does not have
_pairs = [(_manifest_a, _manifest_b, "yesterday against today"), (_manifest_a, _manifest_a, "a manifest against itself"),
          (_manifest_a, _manifest_c, "today, with an entry added"),
          (_manifest_c, _manifest_a, "yesterday, against a manifest with an extra entry (it was removed)")]
_got = _graded_calls(_diff, [(_old, _new) for _old, _new, _ in _pairs], off=(_manifest.diff,))
for (_old, _new, _what), _sent in zip(_pairs, _got):
    _check_diff(_old, _new, _sent, _what)
### BEGIN HIDDEN TESTS
import copy as _copy
import random as _random
from course.exercises.grading import hidden_seed as _hidden_seed

# random runs of the same pipeline: seed, step count, data seed, thread count, the entries added,
# removed and changed, all drawn
_rng = _random.Random(_hidden_seed("h-07-mdf"))
_seed, _steps = _rng.randrange(10_000), _rng.randint(20, 60)
_label = lambda: f"run-{_rng.getrandbits(32):08x}"  # a run directory: only the run block sees it
_m0 = _manifest.manifest(_OLD, _seed, _steps, _label())
_threads = torch.get_num_threads()
torch.set_num_threads(_threads + _rng.randint(1, 3))
_m_threads = _manifest.manifest(_OLD, _seed, _steps, _label())
torch.set_num_threads(_threads)
_pairs = [(_m0, _m_threads, "one run made with another thread count")]
_hp = _OLD.replace(data_seed=_OLD.data_seed + _rng.randint(1, 10_000), lr=_OLD.lr * _rng.choice([0.3, 1.0, 3.0]))
_pairs.append((_m0, _manifest.manifest(_hp, _seed, _steps, _label()), "another data seed (and maybe learning rate)"))
_pairs.append((_m0, _manifest.manifest(_OLD, _seed, _steps, _label()), "the same run inputs, another run block"))
_m_added = _copy.deepcopy(_m0)
for _c in _rng.sample(_manifest.COMPONENTS, 2):
    _m_added[_c][f"{_c} extra {_rng.getrandbits(24):06x}"] = f"{_rng.getrandbits(24):06x}"
_pairs.append((_m0, _m_added, "a newer manifest with entries the old one lacks"))
_pairs.append((_m_added, _m0, "an older manifest lacking entries the new one has"))
_m_mixed = _copy.deepcopy(_m0)
_c_removed, _c_changed, _c_added = (_rng.choice(_manifest.COMPONENTS) for _ in range(3))
del _m_mixed[_c_removed][_rng.choice(sorted(_m_mixed[_c_removed]))]
_m_mixed[_c_changed][_rng.choice(sorted(_m_mixed[_c_changed]))] = f"{_rng.getrandbits(24):06x}"
_m_mixed[_c_added][f"{_c_added} extra {_rng.getrandbits(24):06x}"] = f"{_rng.getrandbits(24):06x}"
_pairs.append((_m0, _m_mixed, "an entry removed, one changed and one added"))
_pairs.append((_m_mixed, _m0, "the same, the other way round"))
_m_seed = _manifest.manifest(_OLD, _seed + _rng.randint(1, 100), _steps + _rng.randint(1, 10), _label())
_pairs.append((_m0, _m_seed, "another seed and step count"))
_got = _graded_calls(_diff, [(_old, _new) for _old, _new, _ in _pairs], off=(_manifest.diff,))
for (_old, _new, _what), _sent in zip(_pairs, _got):
    _check_diff(_old, _new, _sent, _what)
### END HIDDEN TESTS

# %% [markdown]
# The manifests differ in the config's `lr` and nothing else, so hypotheses 2 and 3 are out: the new
# learning rate reached the run, and code, data and environment are yesterday's. One caveat: here
# `manifest_b` is built from the same config expression that was passed to the resume, so this
# comparison cannot fail on hypothesis 2; in a real launcher the run itself must write its manifest
# from the config it parsed, or the check must read the rate back from the run (`run_b.pipe.lr`).

# %% tags=["demo"]
print("yesterday -> today:", manifest_diff(manifest_a, manifest_b))

# %% [markdown]
# ## The used-LR telemetry
#
# The loop logs, per step, the learning rate the optimizer actually used (`history["lr"]`). The
# configuration says what it should have used: `pipe.lr` times the schedule's factor at that step
# (`course.reference.pipeline.warmup_then_linear`). `lr_gap` is the largest relative difference between the
# two over a range of steps: the check that sees a stale resume.

# %%
from course.reference.pipeline import warmup_then_linear

def lr_gap(run, pipe, first):
    """Largest |used - configured| / configured over the steps from `first` on."""
    steps, used = run.history["step"][first:], run.history["lr"][first:]
    want = [pipe.lr * warmup_then_linear(s, pipe.warmup, pipe.steps) for s in steps]
    return max(abs(u - w) / w for u, w in zip(used, want))

# %% tags=["demo"]
s = 150
print(f"step {s}: configured {NEW_LR * warmup_then_linear(s, BASE.warmup, BASE.steps):.5f}, "
      f"used {run_b.history['lr'][s]:.5f} (yesterday used {run_a.history['lr'][s]:.5f})")
print(f"today's lr_gap after the resume: {lr_gap(run_b, OLD.replace(lr=NEW_LR), 100):.3f}")
same_lr = sum(a == b for a, b in zip(run_a.history["lr"][100:], run_b.history["lr"][100:]))
print(f"steps 100-199 whose used lr equals yesterday's: {same_lr} of 100")

# %% [markdown]
# The config says `3e-3`; the steps after the resume used yesterday's rate (the count above). This is documented
# PyTorch behaviour, not a bug in PyTorch: `optimizer.load_state_dict` replaces every param-group
# hyperparameter (`lr`, `initial_lr`, betas, weight decay) with the checkpoint's, and a scheduler's
# `load_state_dict` restores its `base_lrs` and `last_epoch`. On its own:

# %% tags=["demo"]
w = torch.nn.Parameter(torch.zeros(3))
saved = torch.optim.AdamW([w], lr=1e-2).state_dict()
opt = torch.optim.AdamW([w], lr=NEW_LR)
print("built with lr", opt.param_groups[0]["lr"], end="; ")
opt.load_state_dict(saved)
print("after load_state_dict, lr", opt.param_groups[0]["lr"])

# %% [markdown]
# ### The fix, and the wrong depth for it
#
# A quick fix after resuming: set each param group's `lr` to what the new config schedules for the
# current step.
#
# **Predict.** With that quick fix, the resumed run's step 100 uses the new rate. Which rate will
# step 101 use: `"new"` or `"old"`?

# %% tags=["demo"]
prediction = None  # your guess: "new" or "old"

# %% tags=["demo"]
quick = resume(OLD.replace(lr=NEW_LR), checkpoint.latest_good(yesterday_dir))
for g in quick.optimizer.param_groups:
    g["lr"] = NEW_LR * warmup_then_linear(quick.step, BASE.warmup, BASE.steps)
train_steps(quick, 100, eval_every=50)
configured_101 = NEW_LR * warmup_then_linear(101, BASE.warmup, BASE.steps)
print(f"step 100 used {quick.history['lr'][100]:.5f}, step 101 used {quick.history['lr'][101]:.5f} "
      f"(configured {configured_101:.5f})")
reveal("the rate step 101 uses after the quick fix", prediction,
       "new" if quick.history["lr"][101] == configured_101 else "old")

# %% [markdown]
# The scheduler used here, a `LambdaLR`, recomputes the rate at every step from its `base_lrs`
# (`base_lr * lambda(step)`), which still hold yesterday's rate: the quick fix lasts one step. That
# is a property of this scheduler, not of all of them: the chainable ones (`StepLR`,
# `ExponentialLR`, ...) compute the next rate from the group's *current* `lr`, so there the quick
# fix would last. The same quick fix on both, with a toy SGD (saved at `lr=1e-2` after 3 steps,
# resumed with `lr=3e-3`, the factor 0.9 per step either way):

# %% tags=["demo"]
from torch.optim.lr_scheduler import ExponentialLR, LambdaLR

def quick_fix_rates(make_scheduler, steps_done=3, old_lr=1e-2, new_lr=3e-3):
    """The rates of the 3 steps after a resume with the quick fix, and the new schedule's rates."""
    w = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([w], lr=old_lr)
    sched = make_scheduler(opt)
    for _ in range(steps_done):
        opt.step()
        sched.step()
    saved_opt, saved_sched = opt.state_dict(), sched.state_dict()
    opt = torch.optim.SGD([w], lr=new_lr)
    sched = make_scheduler(opt)
    opt.load_state_dict(saved_opt)
    sched.load_state_dict(saved_sched)
    opt.param_groups[0]["lr"] = new_lr * 0.9 ** steps_done  # the quick fix
    used = []
    for _ in range(3):
        opt.step()
        sched.step()
        used.append(opt.param_groups[0]["lr"])
    return used, [new_lr * 0.9 ** (steps_done + k) for k in (1, 2, 3)]

for name, make in {"LambdaLR": lambda o: LambdaLR(o, lambda s: 0.9 ** s),
                   "ExponentialLR": lambda o: ExponentialLR(o, gamma=0.9)}.items():
    used, wanted = quick_fix_rates(make)
    print(f"{name:>13}: rates after the quick fix {[f'{u:.5f}' for u in used]}, "
          f"new schedule {[f'{x:.5f}' for x in wanted]}, quick fix lasts: {all(abs(u - x) < 1e-12 for u, x in zip(used, wanted))}")

# %% [markdown]
# A quick fix that happens to work on one scheduler is still fragile: it depends on which scheduler
# the pipeline uses, and a chainable scheduler's restored `base_lrs` still hold yesterday's rate. The
# fix belongs where the state is restored: the pipeline's `restore` part (the function
# `course.reference.train.resume` hands the loaded checkpoint to). The reference, `checkpoint.restore_state`, loads everything, then puts back the configured hyperparameters and
# base rates and recomputes the current rate from them. The same check, re-run:

# %% tags=["demo"]
FIXED = OLD.replace(restore=checkpoint.restore_state)
run_c = resume(FIXED.replace(lr=NEW_LR), checkpoint.latest_good(yesterday_dir))
train_steps(run_c, 100, eval_every=50)
for name, run in {"plain load (stale)": run_b, "quick fix": quick, "fixed restore": run_c}.items():
    print(f"{name:>18}: lr_gap after the resume {lr_gap(run, FIXED.replace(lr=NEW_LR), 100):.2e}, "
          f"final validation {run.final_val_loss:.4f}")
assert lr_gap(run_c, FIXED.replace(lr=NEW_LR), 100) == 0.0, "after the fix, the used lr is the configured one"

# %% [markdown]
# The symptom is gone, measured by the check that saw it: the used rate is the configured one at
# every step, and the curve is no longer yesterday's. When you branch from a checkpoint on purpose,
# say so in the run's record: which setting changed, and whether moments, schedule and data position
# were kept.
#
# ## Bit-identical resume
#
# The fix must not cost what resuming is for: with an *unchanged* config, a run split 100 + 100 with
# a save and a resume must equal the unbroken 200-step run in every logged value (losses, learning
# rates, gradient and parameter norms, update sizes, token counts, validation losses) and in every
# parameter, bit for bit. Yesterday's run is the unbroken one (saving reads the state and changes
# nothing). `checkpoint.differences(a, b)` names, per logged value, the first step where `b` departs
# from `a`, and the largest parameter difference; an empty dict means identical.

# %% tags=["demo"]
split = train_steps(resume(BASE, checkpoint.latest_good(yesterday_dir)), 100, eval_every=50)
print("differences, split 100 + 100 against the unbroken 200 steps:", checkpoint.differences(run_a, split))

# %% [markdown]
# Wall times are not compared; everything else is. Now the negative controls: the same resume with
# one thing left out, in turn (each is a bug of the catalogue).
#
# **Predict.** Which of the four makes the run depart *at the first resumed step's loss* (step 100)
# rather than one step later: `"optimizer state"`, `"scheduler"`, `"RNG"`, `"data cursor"`? (Name all
# that do.)

# %% tags=["demo"]
prediction = None  # your guess: a list, e.g. ["RNG"]

# %% tags=["demo"]
DROPS = {"optimizer state": "optimizer-state-dropped", "scheduler": "scheduler-dropped",
         "RNG": "rng-dropped", "data cursor": "data-cursor-reset"}
dropped = {"nothing": split}
for label, bug in DROPS.items():
    dropped[label] = train_steps(resume(inject(BASE, bug), checkpoint.latest_good(yesterday_dir)), 100, eval_every=50)
first_loss = {}
for label, run in dropped.items():
    d = checkpoint.differences(run_a, run)
    first_loss[label] = d.get("loss")
    print(f"{label:>15}: " + (", ".join(f"{k} {v:.1e}" if k == "parameters" else f"{k} at {v}" for k, v in d.items()) or "identical"))
reveal("departs at the first resumed loss", prediction, [k for k, v in first_loss.items() if v == 100])

# %% [markdown]
# Dropout draws from the torch RNG, and the data cursor picks the batch, so both change the very
# first resumed loss. The optimizer state and the scheduler change the first *update*: the loss
# departs one step later, while the parameter norm and update size (logged after the update) depart
# at once; a dropped scheduler also shows in the learning rate itself (warm-up again). A check that
# looks at only one of these can miss a cause. Explore how each one diverges:

# %% tags=["demo"]
# NBVAL_IGNORE_OUTPUT
curves = {}
for label, run in dropped.items():
    diffs = [abs(a - b) for a, b in zip(run_a.history["loss"][100:], run.history["loss"][100:])]
    curves[label] = {"step": run.history["step"][100:], "diff": diffs, "first": first_loss[label]}
explorer = checkpoint.divergence_explorer(curves, first_step=100)
explorer

# %% [markdown]
# ## Checkpoints that survive failure
#
# Most training scripts `torch.save` straight into one file, say `latest.pt`, every time. If the
# process dies while writing, the file holds the first part of a checkpoint, and the previous one
# (the same file) is gone. `checkpoint.naive_save(..., stop_after=n)` writes like that and stops
# after `n` bytes, as a killed process would (a simulation in this process).
#
# **Predict.** Interrupted after 16 KiB while overwriting `latest.pt`, can the file still be
# loaded: `True` or `False`?

# %% tags=["demo"]
prediction = None  # your guess: True or False

# %% tags=["demo"]
from course.reference.train import checkpoint_state

naive_dir = checkpoint.new_run_dir(ROOT, "naive")
checkpoint.naive_save(checkpoint_state(run_a), naive_dir / "latest.pt")
print("a complete latest.pt loads:", checkpoint.loads(naive_dir / "latest.pt"))
try:
    checkpoint.naive_save(checkpoint_state(split), naive_dir / "latest.pt", stop_after=1 << 14)
except checkpoint.Interrupted as stop:
    print("interrupted:", stop)
reveal("latest.pt loads after the interrupted overwrite", prediction, checkpoint.loads(naive_dir / "latest.pt"))

# %% [markdown]
# `checkpoint.save(run, folder)` does it the safe way: it writes `step-NNNNNN.pt` through
# `atomic_save` (serialise, write a temporary file in the same folder, flush and `fsync` it,
# `os.replace` it over the destination, `fsync` the folder), then points a `LATEST` file at it the
# same way, and only then deletes checkpoints older than the newest two. A reader sees a whole old
# file or a whole new one. `latest_good(folder)` returns the newest checkpoint that loads.
#
# Now a real crash. `checkpoint.kill_during_save` starts a separate Python process that resumes the
# latest good checkpoint of a folder, trains 10 steps and saves; when the first 16 KiB of the new
# checkpoint are written to the file (in the kernel's page cache) the child tells the parent through a pipe and waits, and the parent kills it
# with `SIGKILL` (nothing in the child runs after that: no `finally`, no cleanup).

# %% tags=["demo"]
crash_dir = checkpoint.new_run_dir(ROOT, "crash")
checkpoint.save(resume(BASE, checkpoint.latest_good(yesterday_dir)), crash_dir)  # the last good one: step 100
report = checkpoint.kill_during_save(BASE, crash_dir, steps=10)
print(f"child exit code {report.returncode} (-9: SIGKILL); partial file present: {report.partial_exists}, "
      f"{report.partial_bytes} bytes, loads: {report.partial_loads}")
print("checkpoints in the folder:", [f for f in report.files if f.endswith(".pt")], "; LATEST names",
      (crash_dir / "LATEST").read_text())
print("latest good:", report.latest_good.name)

# %% [markdown]
# The crash left a partial temporary file and nothing else changed: `LATEST` still names the step-100
# checkpoint. What this test exercises is the write-then-rename order (`os.replace` is atomic, and a
# reader never sees the partial file under a checkpoint's name). It cannot show what the `fsync`
# calls are for: a killed process loses nothing already written to the kernel's page cache, so the
# partial file and every earlier write survive `SIGKILL` with or without them. `fsync` protects
# against losing the machine itself (power loss, a kernel crash) before the cache reaches the disk,
# which a test in one running kernel cannot produce. Resume from it and finish the run: the crash costs the 10 steps the child trained, not
# the run, and the result is still yesterday's unbroken run bit for bit.

# %% tags=["demo"]
recovered = train_steps(resume(BASE, report.latest_good), 100, eval_every=50)
print("differences after crash and recovery, against the unbroken run:", checkpoint.differences(run_a, recovered))

# %% [markdown]
# **A fresh run writes to a fresh directory.** A launcher that resumes "whatever is in `out/`" turns
# a new experiment into a continuation of an old one, and one that clears `out/` first deletes the
# only recovery point of the old run. `new_run_dir` makes a directory no run has used (it fails rather
# than reuse one), and the manifest's `run` block records where a run wrote. `save` keeps the last
# good checkpoint until a newer one is complete:

# %% tags=["demo"]
keep_dir = checkpoint.new_run_dir(ROOT, "keep")
kept = resume(BASE, checkpoint.latest_good(yesterday_dir))
for _ in range(3):
    train_steps(kept, 10, eval_every=0)
    checkpoint.save(kept, keep_dir, keep=2)
    print(f"after saving step {kept.step}:", sorted(p.name for p in keep_dir.iterdir()))

# %% [markdown]
# ## Exercise 2: a mystery pipeline
#
# Now you debug. Below are seven pipelines drawn by `course.exercises.mystery.draw` from this notebook's bug
# family: each is healthy or resumes wrongly in one way, and nothing you can read says which. Every
# part is an opaque `<part>`, every setting shows the healthy value, and each draw has its own seeds
# and learning rate. They are small (one layer, dropout 0.1, 16-token windows, a 40-step schedule),
# so a 16-step run takes a fraction of a second.
#
# Tools (all from `course`):
# * `train_steps(start(pipe, seed), n, eval_every=0)`: an unbroken run;
# * `checkpoint.split_run(pipe, seed, first, then, resume_pipe=None)`: `first` steps, a checkpoint in
#   memory, `resume` with `resume_pipe` (default `pipe`), `then` more steps; returns
#   `(resumed_run, checkpoint_bytes)`; `resume(pipe, io.BytesIO(checkpoint_bytes))` resumes the same
#   checkpoint again, with any pipeline;
# * `checkpoint.differences(a, b)`: per logged value the first step where `b` departs from `a`
#   (`"loss"`, `"lr"`, `"grad_norm"`, `"param_norm"`, `"rel_update"`, ..., `"val"`), and
#   `"parameters"`: the largest parameter difference;
# * `pipe.replace(lr=...)`: the same pipeline configured with another learning rate;
#   `pipe.replace(model=dataclasses.replace(pipe.model, dropout=0.0))`: without dropout;
# * `train_steps(run, n, on_step=f)` calls `f(run, step, batch)` after each step.
#
# A healthy resume is exact: no noise to tolerate. `checkpoint.resume_check` is switched off while
# you are graded (it would answer the exercise).

# %%
import dataclasses
import io

from course.exercises import mystery

from course.exercises.sets import SETS

MYSTERIES = SETS["07_stale_resume"]  # the candidates, the base and the seeds; the tests draw the same
MBASE, CANDIDATES = MYSTERIES.base, MYSTERIES.candidates  # MBASE: BASE with 1024 windows, 40 steps, warm-up 5
mysteries = MYSTERIES.draws()
print(repr(mysteries["mystery 1"].restore), "(every part looks like this)")

# %% [markdown]
# Their symptom: each was trained 8 steps, saved, resumed and trained 8 more. Compare each with its
# unbroken 16-step run:

# %% tags=["demo"]
for name, p in mysteries.items():
    unbroken = train_steps(start(p, 0), 16, eval_every=0)
    resumed, _ = checkpoint.split_run(p, 0, 8, 8)
    d = checkpoint.differences(unbroken, resumed)
    print(f"{name:>10}: lr {p.lr:.3g}; " + (", ".join(f"{k} at {v}" for k, v in d.items() if k != "parameters")
                                          + (f"; parameters differ by {d['parameters']:.1e}" if d else "") or "identical"))

# %% [markdown]
# ### (a) A resume-correctness check
#
# Write `detect(pipe) -> bool`: `True` if `pipe` resumes wrongly in any way (any logged value or
# parameter departs from the unbroken run after a save and resume, or a run resumed with a new
# learning rate does not use the new configuration's rates), `False` if it resumes correctly. Return a
# Python or torch bool. Graded like a test suite: quiet on every healthy draw, firing on every broken
# one, including ways of resuming wrongly that you have not seen and draws with other seeds. A
# pipeline that crashes under your test is broken: catch the exception around the pipeline's own
# calls and return `True` (an exception that leaves `detect` is no answer and fails the cell).
# `course.exercises.mystery.reveal`, `draw`, `make`, `touched` and `checkpoint.resume_check` are switched off.

# %% nbgrader={"grade": false, "grade_id": "detect", "locked": false, "schema_version": 3, "solution": true}
def detect(pipe):
    ### BEGIN SOLUTION
    try:
        unbroken = train_steps(start(pipe, 0), 16, eval_every=0)
        resumed, data = checkpoint.split_run(pipe, 0, 8, 8)
        if checkpoint.differences(unbroken, resumed):
            return True
        new = pipe.replace(lr=pipe.lr / 2)
        moved = train_steps(resume(new, io.BytesIO(data)), 8, eval_every=0)
    except Exception:  # a pipeline that crashes under the test is broken
        return True
    wanted = [new.lr * warmup_then_linear(s, new.warmup, new.steps) for s in range(8, 16)]
    return moved.history["lr"][8:] != wanted
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_detect", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.exercises.sets import SETS as _SETS
from course.reference import checkpoint as _ck
from course.exercises import mystery as _mystery
from course.exercises.grading import assert_detector as _assert_detector

_OFF = (_mystery.reveal, _mystery.draw, _mystery.make, _mystery.touched, _ck.resume_check)
_mysteries = _SETS["07_stale_resume"].draws()  # the notebook's `mysteries`, drawn again here
_answers = {name: _mystery.reveal(p) for name, p in _mysteries.items()}


def _crashing_restore(run, ckpt):  # a part that raises: a pipeline that crashes under your test is broken
    raise RuntimeError("this pipeline's restore crashes")


_broken = {n: p for n, p in _mysteries.items() if _answers[n] != "healthy"}
_broken["a pipeline that crashes"] = _SETS["07_stale_resume"].base.replace(restore=_crashing_restore)
_assert_detector(detect, {n: p for n, p in _mysteries.items() if _answers[n] == "healthy"}, _broken, "resume check", off=_OFF)
### BEGIN HIDDEN TESTS
from course import ModelConfig as _MC, Pipeline as _Pipeline
_hbase = _Pipeline().replace(seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64, dropout=0.1),
                             n_train=1024, n_val=64, batch_size=16, steps=40, lr=1e-2, warmup=5)
_healthy = {f"healthy draw {s}": _mystery.hidden("healthy", s, _hbase, salt="h-07-d53") for s in (1, 2)}
_broken = {b: _mystery.hidden(b, 3 + i, _hbase, salt="h-07-d53") for i, b in enumerate(
    ("weights-only-resume", "stale-schedule-resume", "stale-lr-resume", "data-cursor-reset", "rng-dropped"))}
_assert_detector(detect, _healthy, _broken, "resume check (unseen draws)", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ### (b) Name the cause
#
# Write `name_cause(pipe) -> str`, returning exactly one of `"healthy"`, `"stale-lr"` (a resumed
# run does not use its new configuration's learning rates), `"optimizer-state"`, `"scheduler"`,
# `"rng"`, `"data-cursor"` (each: that piece of state is not restored). Use behaviour: which logged
# value departs first, and when; what a resume without dropout does; which batch the first resumed
# step trains on. Graded on the draws above and on fresh draws; an answer that reads the pipeline's
# settings or reprs, or is always the same, cannot pass. The same functions are switched off.

# %% nbgrader={"grade": false, "grade_id": "name_cause", "locked": false, "schema_version": 3, "solution": true}
def name_cause(pipe):
    ### BEGIN SOLUTION
    unbroken = train_steps(start(pipe, 0), 16, eval_every=0)
    resumed, data = checkpoint.split_run(pipe, 0, 8, 8)
    d = checkpoint.differences(unbroken, resumed)
    if "lr" in d:
        return "scheduler"
    if d.get("loss") == 8:  # the first resumed loss: the dropout masks or the batch
        no_dropout = pipe.replace(model=dataclasses.replace(pipe.model, dropout=0.0))
        plain = train_steps(start(no_dropout, 0), 16, eval_every=0)
        again, _ = checkpoint.split_run(no_dropout, 0, 8, 8)
        return "data-cursor" if checkpoint.differences(plain, again) else "rng"
    if d:
        return "optimizer-state"
    new = pipe.replace(lr=pipe.lr / 2)
    moved = train_steps(resume(new, io.BytesIO(data)), 8, eval_every=0)
    wanted = [new.lr * warmup_then_linear(s, new.warmup, new.steps) for s in range(8, 16)]
    return "stale-lr" if moved.history["lr"][8:] != wanted else "healthy"
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_cause", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.exercises.sets import SETS as _SETS
from course.reference import checkpoint as _ck
from course.exercises import mystery as _mystery
from course.exercises.grading import assert_names as _assert_names

_OFF = (_mystery.reveal, _mystery.draw, _mystery.make, _mystery.touched, _ck.resume_check)
_KIND = {"healthy": "healthy", "stale-lr-resume": "stale-lr", "stale-schedule-resume": "stale-lr",
         "optimizer-state-dropped": "optimizer-state", "scheduler-dropped": "scheduler", "rng-dropped": "rng",
         "data-cursor-reset": "data-cursor"}
_mysteries = _SETS["07_stale_resume"].draws()  # the notebook's `mysteries`, drawn again here
_assert_names(name_cause, {n: (p, _KIND[_mystery.reveal(p)]) for n, p in _mysteries.items()}, "cause", off=_OFF)
### BEGIN HIDDEN TESTS
from course import ModelConfig as _MC, Pipeline as _Pipeline
_hbase = _Pipeline().replace(seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64, dropout=0.1),
                             n_train=1024, n_val=64, batch_size=16, steps=40, lr=1e-2, warmup=5)
_cases = {}
for _i, _b in enumerate(("healthy", "stale-schedule-resume", "optimizer-state-dropped", "scheduler-dropped",
                         "rng-dropped", "data-cursor-reset", "stale-lr-resume")):
    _p = _mystery.hidden(_b, 20 + _i, _hbase, salt="h-07-c19")
    _cases[f"fresh draw {_i}"] = (_p, _KIND[_b])
_assert_names(name_cause, _cases, "cause (fresh draws)", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ### (c) The fix
#
# The stale resume lives in the `restore` part: `course.reference.train.resume(pipe, path)` starts a fresh run
# of `pipe` (model, optimizer and scheduler built from `pipe`'s config) and calls
# `pipe.restore(run, ckpt)` with the loaded checkpoint, a dict with the keys `"model"`,
# `"optimizer"`, `"scheduler"` (the three state dicts), `"torch_rng"`, `"step"`, `"data_offset"`,
# `"seed"`, `"history"`, `"val"`. A restore must set `run.model`, `run.optimizer`, `run.scheduler`, the
# torch RNG, `run.step`, `run.data_offset`, `run.history` and `run.val` from it.
#
# Write `restore_keeping_config(run, ckpt)`: restore everything, but keep the configuration `run`
# was started with: each param group's hyperparameters (`initial_lr`, weight decay, betas, ...) and
# the scheduler's `base_lrs`, and set each group's current `lr` to what the schedule gives at the
# restored step (`run.scheduler.lr_lambdas[i](run.scheduler.last_epoch)` times the base rate). Then
# `fix(pipe)` returns the pipeline with that restore. The lines that load the weights, the RNG and the
# cursor are given; write the optimizer and scheduler part. Graded by behaviour on fresh draws of
# stale-resume pipelines: trained on a fresh seed, split with a save and resume, the run must equal
# the unbroken run (to 1e-6); resumed with a new learning rate and weight decay, the used rates must
# be the new configuration's schedule and the run that of a correct resume (its losses to 1e-4, its
# parameter norms to a relative 1e-6). `checkpoint.restore_state`
# and the package's resume helpers are switched off while your restore runs.

# %% nbgrader={"grade": false, "grade_id": "fix", "locked": false, "schema_version": 3, "solution": true}
def restore_keeping_config(run, ckpt):
    opt, sched = run.optimizer, run.scheduler  # built from run.pipe's config by start()
    run.model.load_state_dict(ckpt["model"])
    # the optimizer's and the scheduler's state, keeping the configured hyperparameters and base rates
    ### BEGIN SOLUTION
    configured = [{k: v for k, v in g.items() if k not in ("params", "lr")} for g in opt.param_groups]
    opt.load_state_dict(ckpt["optimizer"])
    sched.load_state_dict(ckpt["scheduler"])
    for g, conf in zip(opt.param_groups, configured):
        g.update(conf)
    sched.base_lrs = [g["initial_lr"] for g in opt.param_groups]
    for g, fn, base in zip(opt.param_groups, sched.lr_lambdas, sched.base_lrs):
        g["lr"] = base * fn(sched.last_epoch)
    sched._last_lr = [g["lr"] for g in opt.param_groups]
    ### END SOLUTION
    torch.set_rng_state(ckpt["torch_rng"])
    run.step, run.data_offset = ckpt["step"], ckpt["data_offset"]
    run.history, run.val = ckpt["history"], ckpt["val"]


def fix(pipe):
    ### BEGIN SOLUTION
    return pipe.replace(restore=restore_keeping_config)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_fix", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import io as _io
from course.reference import checkpoint as _ck
from course.exercises import mystery as _mystery
from course import ModelConfig as _MC, Pipeline as _Pipeline
from course.bugs import resume as _bugs_resume
from course.exercises.grading import SwitchedOff as _SwitchedOff, switched_off as _switched_off
from course.reference.train import resume as _resume, start as _start, train_steps as _steps

_mbase = _Pipeline().replace(seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64, dropout=0.1),
                             n_train=1024, n_val=64, batch_size=16, steps=40, lr=1e-2, warmup=5)
_PACKAGE = (_ck.restore_state, _ck._restore, _ck.resume_check) + tuple(
    getattr(_bugs_resume, _n) for _n in dir(_bugs_resume)
    if callable(getattr(_bugs_resume, _n)) and getattr(getattr(_bugs_resume, _n), "__module__", "") == _bugs_resume.__name__)

def _still_stale(fixed, seed=5, first=8, then=8):
    """None if `fixed` resumes like the reference on a fresh seed, with its own config and with a new
    one (another learning rate and weight decay: every configured hyperparameter, not the rate alone)."""
    new = fixed.replace(lr=fixed.lr * 0.4, weight_decay=fixed.weight_decay + 0.5)
    unbroken = _steps(_start(fixed, seed), first + then, eval_every=0)
    data = _ck.to_memory(_steps(_start(fixed, seed), first, eval_every=0)).getvalue()
    reference = _steps(_resume(new.replace(restore=_ck.restore_state), _io.BytesIO(data)), then, eval_every=0)
    try:
        with _switched_off(*_PACKAGE):
            same = _steps(_resume(fixed, _io.BytesIO(data)), then, eval_every=0)
            moved = _steps(_resume(new, _io.BytesIO(data)), then, eval_every=0)
    except _SwitchedOff as err:
        return f"your restore relies on a package function that is switched off while graded ({err})"
    except Exception as err:
        return f"resuming with your restore crashed: {type(err).__name__}: {err}"
    keys = ("loss", "grad_norm", "param_norm")
    far = [k for k in keys if max(abs(a - b) for a, b in zip(unbroken.history[k], same.history[k])) > 1e-6]
    if far or same.history["lr"] != unbroken.history["lr"]:
        return ("resumed with its own config, the run departs from the unbroken one in "
                f"{far + (['lr'] if same.history['lr'] != unbroken.history['lr'] else [])}: is every piece of state restored?")
    if any(abs(u - w) > 1e-9 * w for u, w in zip(moved.history["lr"][first:], reference.history["lr"][first:])):
        return "resumed with a new learning rate, the rates the loop used are not the new config's schedule"
    if max(abs(a - b) for a, b in zip(moved.history["loss"], reference.history["loss"])) > 1e-4 or \
            max(abs(a - b) / b for a, b in zip(moved.history["param_norm"], reference.history["param_norm"])) > 1e-6:
        return ("resumed with a new learning rate and weight decay, the run is not that of a correct resume: "
                "keep every configured hyperparameter of each param group, not only the rate")
    return None

### BEGIN HIDDEN TESTS
_mystery.check_fix(fix, [_mystery.hidden(b, 40 + i, _mbase, salt="h-07-f72") for i, b in enumerate(
    ("stale-lr-resume", "stale-schedule-resume"))], _still_stale, "fix (fresh draws)",
    off=(_ck.restore_state, _ck._restore, _ck.resume_check))
### END HIDDEN TESTS
_mystery.check_fix(fix, [_mystery.make("stale-lr-resume", 30 + i, _mbase) for i in range(2)], _still_stale, "fix",
                   off=(_ck.restore_state, _ck._restore, _ck.resume_check))

# %% [markdown]
# ## What each test can and cannot prove
#
# * **Identical curves** prove nothing by themselves: a correct reproduction and a stale resume give
#   the same bits. Look at what went in and at what the run did.
# * **The manifest** proves what went into a run (code, config, data, environment) and shows which
#   component changed between two runs. It cannot show what the run did with its config: a stale
#   resume has a correct manifest. It is only as complete as its entries (a setting read from an
#   environment variable it does not record is invisible to it).
# * **The used-LR telemetry against the configured schedule** proves the optimizer used the rates
#   the config asks for; it says nothing about moments, RNG or data.
# * **Split against unbroken**, compared bit for bit in every logged value and every parameter,
#   shows, for the seed and split tried, that the resume restores what those steps depend on. It cannot see a stale learning rate (the
#   config did not change), so the resume check needs both tests; and a resume without dropout cannot
#   show a dropped RNG.
# * **Atomic writes** keep a reader from seeing half a file under a checkpoint's name, on a file system
#   where `os.replace` is atomic and `fsync` is honoured; the `SIGKILL` test shows the rename order
#   only, not the `fsync` (that needs power loss or a kernel crash); they do not make the *content* right (a live `state_dict` saved
#   from another thread can still race with the update).
# * **The fix** is confirmed, for the inputs tried, by re-running the check that saw the symptom.
#
# The last cell removes this notebook's checkpoints.

# %%
workdir.cleanup()
print("removed:", not ROOT.exists())
