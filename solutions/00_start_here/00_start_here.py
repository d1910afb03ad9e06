# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (debug course)
#     language: python
#     name: debug-course
# ---

# %% [markdown]
# # 00 · Start here: one bug, the whole loop
#
# **What you learn.** The loop every notebook in this course repeats: look at a *symptom*, write down
# at least two *hypotheses* that would each produce it, run a *cheap test* that could prove each one
# wrong (and run it on a healthy pipeline too, as a *negative control*), then *fix* at the right depth
# and re-run to see the symptom gone.
#
# **Time.** About 30 seconds of computation on a laptop CPU. **GPU:** not needed anywhere.
#
# **How grading works.** Cells marked `# YOUR CODE HERE` are yours. The cell after each one holds
# tests: the visible ones run when you run the cell; the autograder adds hidden ones that try your
# code on cases you have not seen. A detector is graded like a test suite: it must stay quiet on
# healthy runs *and* fire on broken ones, so answering always "bug" (or never) scores nothing.
# Do not delete or edit the test cells. Before you submit, press *Validate* in the notebook's
# toolbar: it saves the notebook, runs it from the top and lists every test cell that fails.

# %% [markdown]
# Everything this course runs comes from one small package, `course`. Its models are tiny, and tiny
# models run fastest on one CPU thread (several threads spend more time waiting for each other than
# computing, especially on a busy machine). We fix the seed once here; every function below that draws
# random numbers also takes its own seed.

# %%
import torch
import matplotlib.pyplot as plt

torch.set_num_threads(1)

from course import Pipeline
from course.bugs import inject
from course.train import train
from course.plots import loss_plot

_ = torch.manual_seed(0)  # returns the generator; assigned so it is not printed

# %% [markdown]
# ## The pipeline and its known answers
#
# The data is a synthetic language: a second-order Markov chain whose every probability we know. So we
# know, exactly, the loss of a uniform guess `ln(V)`, the best loss without context (the unigram
# entropy) and the best loss any model can reach (the entropy rate). Every loss plot carries them.

# %%
pipe = Pipeline()
lang = pipe.language()
baselines = lang.baselines(pipe.seq_len)
for name, value in baselines.items():
    print(f"{name:>15}: {value:.3f} nats")

# %% [markdown]
# ## The symptom
#
# We train the reference pipeline and a colleague's copy of it for 200 steps each. Their copy has one
# bug from the course's catalogue. Watch the two curves.

# %%
healthy = train(pipe, steps=200, seed=0, eval_every=0, progress=True)
colleague = train(inject(pipe, "lr-zero"), steps=200, seed=0, eval_every=0, progress=True)

# %%
ax = loss_plot({"reference": healthy.history["loss"], "colleague's copy": colleague.history["loss"]},
               baselines, title="200 steps of the same recipe")
plt.show()

# %% [markdown]
# In numbers: the mean loss over the first and the last 20 steps of each run.

# %%
def first_last(losses, window=20):
    return sum(losses[:window]) / window, sum(losses[-window:]) / window

for label, run in [("reference", healthy), ("colleague", colleague)]:
    first, last = first_last(run.history["loss"])
    print(f"{label:>10}: first {first:.3f}, last {last:.3f}, drop {first - last:+.3f}")

# %% [markdown]
# ## Exercise 1: a detector for a stuck loss
#
# Write `loss_is_stuck(losses)`: return `True` when the mean of the last `window` losses is less than
# `min_drop` below the mean of the first `window`, else `False`. It is a symptom detector, not a
# diagnosis: it says *that* something is wrong, not *what*.

# %% nbgrader={"grade": false, "grade_id": "loss_is_stuck", "locked": false, "schema_version": 3, "solution": true}
def loss_is_stuck(losses, window=20, min_drop=0.05):
    ### BEGIN SOLUTION
    first = sum(losses[:window]) / window
    last = sum(losses[-window:]) / window
    return first - last < min_drop
    ### END SOLUTION

# %% [markdown]
# The visible test tries it on the two runs above. The hidden tests try it on fresh runs with other
# seeds and other bugs.

# %% nbgrader={"grade": true, "grade_id": "test_loss_is_stuck", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.grading import assert_detector

assert_detector(loss_is_stuck, healthy={"reference": healthy.history["loss"]},
                broken={"colleague": colleague.history["loss"]}, what="stuck-loss detector")
assert loss_is_stuck([3.0] * 40) and not loss_is_stuck([3.0] * 20 + [2.0] * 20), "check the direction of the drop"
### BEGIN HIDDEN TESTS
from course.grading import quiet
with quiet():
    _fresh = {
        name: train(pipe if name == "healthy" else inject(pipe, name), steps=60, seed=7, eval_every=0).history["loss"]
        for name in ("healthy", "missing-step", "requires-grad-off", "clip-to-zero")
    }
assert_detector(lambda l: loss_is_stuck(l, window=10), healthy={"healthy seed 7": _fresh["healthy"]},
                broken={k: v for k, v in _fresh.items() if k != "healthy"}, what="stuck-loss detector")
assert loss_is_stuck([2.0] * 10 + [1.99] * 10, window=10, min_drop=0.05)
assert not loss_is_stuck([2.0] * 10 + [1.0] * 10, window=10, min_drop=0.5)
### END HIDDEN TESTS

# %% [markdown]
# ## Two hypotheses, one cheap test
#
# A loss that does not move from `ln(V)` has (at least) two explanations that look the same on the plot:
#
# 1. **No updates**: the parameters never change (no `step()`, a zero learning rate, frozen
#    parameters, an optimizer holding the wrong tensors, gradients clipped to nothing).
# 2. **No signal**: the parameters change, but the targets carry nothing the model can learn.
#
# One training step separates them: record every parameter, step, and compare bit for bit. The
# package's `update_report` does that and names the most specific cause it can.

# %%
from course.checks import update_report
from course.train import start, train_steps

def one_step_report(pipeline, seed=0):
    run = start(pipeline, seed)
    return update_report(run.model, run.optimizer, lambda: train_steps(run, 1, eval_every=0))

# %% [markdown]
# The negative control first: on the reference pipeline the test must pass. A test that fails on a
# healthy pipeline tells us nothing about a broken one.

# %%
control = one_step_report(pipe)
print("reference:", control.cause(), f"({len(control.unchanged)} of {control.n_params} tensors unchanged)")

# %%
suspect = one_step_report(inject(pipe, "lr-zero"))
print("colleague:", suspect.cause(), f"({len(suspect.unchanged)} of {suspect.n_params} tensors unchanged,",
      f"gradient norm {suspect.grad_norm:.3f}, learning rates {suspect.lrs})")

# %% [markdown]
# Hypothesis 2 predicted moving parameters; they did not move, so it is falsified. The gradients are
# there and finite, so the model *could* learn: the update is what is missing.
#
# ## Exercise 2: the diagnosis record
#
# Fill in the record of this investigation: make `diagnosis_record()` return a `Diagnosis`.
# `result` must be exactly the cause that the test above printed for the colleague's pipeline (the
# hidden test re-runs the test and compares).

# %% nbgrader={"grade": false, "grade_id": "diagnosis_record", "locked": false, "schema_version": 3, "solution": true}
from course.record import Diagnosis

def diagnosis_record():
    ### BEGIN SOLUTION
    return Diagnosis(
        symptom="training loss flat at ln(V) for 200 steps while the reference falls",
        hypotheses=["no updates: parameters never change", "no signal: targets carry nothing learnable"],
        test="one step, compare every parameter bit for bit (update_report), reference as negative control",
        prediction="no updates: every tensor unchanged; no signal: tensors change",
        result="lr-zero",
    )
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_diagnosis_record", "locked": true, "points": 2, "schema_version": 3, "solution": false}
record = diagnosis_record()
assert record.problems() == [], f"the record is not yet a falsifiable investigation: {record.problems()}"
### BEGIN HIDDEN TESTS
assert record.result == one_step_report(inject(pipe, "lr-zero"), seed=3).cause(), \
    "result should be the cause the update test measured on the colleague's pipeline"
### END HIDDEN TESTS

# %% [markdown]
# ## The fix, at the right depth
#
# The learning rate was zero, so the fix is the learning rate, not a larger model, a different
# optimizer, or more steps. We re-run the colleague's pipeline with the reference's learning rate and
# check that the symptom is gone: the same detector, now on the fixed run.

# %%
fixed = train(inject(pipe, "lr-zero").replace(lr=pipe.lr), steps=200, seed=0, eval_every=0, progress=True)
print("stuck before the fix:", loss_is_stuck(colleague.history["loss"]),
      "| stuck after:", loss_is_stuck(fixed.history["loss"]))

# %%
ax = loss_plot({"colleague's copy": colleague.history["loss"], "after the fix": fixed.history["loss"]},
               baselines, title="The symptom is gone")
plt.show()

# %% [markdown]
# ## Explore: the same test on every "no updates" bug
#
# Pick a bug from the catalogue's *no-updates* family; the cell runs the one-step test on it. Note
# which bugs the test names exactly and which it only narrows down.

# %%
# NBVAL_IGNORE_OUTPUT
import ipywidgets as widgets
from course.bugs import catalogue

choice = widgets.Dropdown(options=[b.name for b in catalogue("no-updates")], description="bug")

def show(name):
    report = one_step_report(inject(pipe, name))
    print(f"{name}: cause {report.cause()!r}; unchanged tensors: {len(report.unchanged)} of {report.n_params}")

widgets.interact(show, name=choice);

# %% [markdown]
# ## What these tests can and cannot prove
#
# * `loss_is_stuck` proves the loss did not fall by `min_drop` over this window. It does not say why,
#   and a slow learning rate or a short window also trips it.
# * The one-step update test proves whether each tensor changed. A tensor that changes is not proof
#   of learning: a wrong target would change it too.
# * The negative control (the reference passes) is what makes a failing test mean something.
