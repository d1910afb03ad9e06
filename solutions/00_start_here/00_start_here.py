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
# and re-run to see the symptom gone. You watch the loop once on a colleague's run, then you run it
# yourself on a **mystery pipeline** whose bug nobody tells you.
#
# **Predict, then reveal.** Before each result that is the lesson, a *Predict* cell asks you to write
# your guess into `prediction`; the cell after it prints your guess beside what was measured. Nothing
# there is graded: the point is to commit to an answer before you see it.
#
# **Time.** Under 40 seconds of computation on a laptop CPU (`make bench` times every notebook on
# yours). **GPU:** not needed anywhere.
#
# **Not using `make lab`** (Colab, Kaggle, a JupyterHub)? Install the course into this kernel first,
# from a cell: `%pip install ./debug-course` from a clone of the repository (restart the kernel if
# pip upgraded a package that was already imported). The paragraph *On a hosted Jupyter* of
# `docs/learners.md` says what was tested; no hosted service was tried.
#
# **How grading works.** Cells marked `# YOUR CODE HERE` are yours. The cell after each one holds
# tests: the visible ones run when you run the cell; the autograder adds hidden ones that try your
# code on cases you have not seen (other seeds, other bugs). A detector is graded like a test suite:
# it must stay quiet on healthy pipelines *and* fire on broken ones, so answering always "bug" (or
# never) scores nothing. While your code is graded, the package functions that would do the exercise
# for you (here `course.toolkit.checks.update_report` and `course.reference.diagnose.training_moves`, their private
# helpers, and the functions that draw and reveal mysteries) are switched off: call them and the test
# fails. Each graded call of your function on a pipeline runs in a copy of the kernel from which the mystery's
# answer and the test's expected values have been removed: test the pipeline you are given. (To
# debug your function, call it in a cell of its own: a debugger does not run inside a graded call.)
# A warning your code triggers is printed, never held against you. Do not delete or edit the test cells. Before you submit, press *Validate* in the
# notebook's toolbar: it saves the notebook, runs it from the top and lists every test cell that fails.

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
from course.reference.train import train
from course.toolkit.plots import loss_plot
from course.exercises.record import reveal

_ = torch.manual_seed(0)  # returns the generator; assigned so it is not printed

# %% [markdown]
# ## The pipeline and its known answers
#
# The data is a synthetic language: a second-order Markov chain whose every probability we know. So we
# know, exactly, the loss of a uniform guess `ln(V)`, the best loss without context (the unigram
# entropy) and the best loss a model can reach on these windows (the window floor). Every loss plot
# carries them. To keep this notebook fast we train the reference recipe with batches of 32 windows.

# %%
pipe = Pipeline(batch_size=32)
STEPS = 150
lang = pipe.language()
baselines = lang.baselines(pipe.seq_len)
for name, value in baselines.items():
    print(f"{name:>15}: {value:.3f} nats")

# %% [markdown]
# ## The symptom
#
# We train the reference pipeline and a colleague's copy of it for the same number of steps, from the
# same seed. Their copy has one bug from the course's catalogue; the cell below picks it by its place
# in the catalogue, so that its name is not in view before the Predict cells that ask about it (it is
# printed after the one-step test further down). Before you look at the curves, commit to a guess.

# %%
prediction = None  # your guess: the colleague's mean training loss over its last 20 steps, in nats (a number)

# %% tags=["demo"]
from course.bugs import catalogue

colleague_bug = catalogue()[4].name  # the colleague's bug, picked by its place in the catalogue
colleague_pipe = inject(pipe, colleague_bug)
healthy = train(pipe, steps=STEPS, seed=0, eval_every=0, progress=True)
colleague = train(colleague_pipe, steps=STEPS, seed=0, eval_every=0, progress=True)

# %% tags=["demo"]
ax = loss_plot({"reference": healthy.history["loss"], "colleague's copy": colleague.history["loss"]},
               baselines, title=f"{STEPS} steps of the same recipe")
plt.show()

# %% [markdown]
# In numbers: `first_last` gives the mean loss over the first and the last `window` steps of a run
# (later sections use it too).

# %%
def first_last(losses, window=20):
    return sum(losses[:window]) / window, sum(losses[-window:]) / window


# %% [markdown]
# Both runs over 20 steps at each end, and your guess beside the colleague's:

# %% tags=["demo"]
for label, run in [("reference", healthy), ("colleague", colleague)]:
    first, last = first_last(run.history["loss"])
    print(f"{label:>10}: first {first:.3f}, last {last:.3f}, drop {first - last:+.3f}")
reveal(f"the colleague's mean loss over its last 20 of {STEPS} steps", prediction,
       f"{first_last(colleague.history['loss'])[1]:.3f} nats (ln(V) = {baselines['uniform ln(V)']:.3f})")

# %% [markdown]
# ## Exercise 1: a detector for a stuck loss (2 points)
#
# Write `loss_is_stuck(losses, window=20, min_drop=0.05)`. `losses` is a list of floats (finite, at
# least `2 * window` of them). Return `True` (the loss is stuck) unless the mean of the last `window`
# losses is **at least `min_drop` below** the mean of the first `window` losses; else `False`.
#
# * A loss that *rises* is stuck too: it did not fall.
# * Compare the two windows' means, not single losses: one noisy step must not decide.
# * Use the `window` and `min_drop` you are given: the hidden tests call it with other values.
# * Return a `bool` (a numpy or torch boolean is accepted). Exact ties at `min_drop` are not tested.
#
# It is a symptom detector, not a diagnosis: it says *that* something is wrong, not *what*.

# %% nbgrader={"grade": false, "grade_id": "loss_is_stuck", "locked": false, "schema_version": 3, "solution": true}
def loss_is_stuck(losses, window=20, min_drop=0.05):
    ### BEGIN SOLUTION
    first = sum(losses[:window]) / window
    last = sum(losses[-window:]) / window
    return first - last < min_drop
    ### END SOLUTION

# %% [markdown]
# The visible test tries it on a healthy run and the colleague's bug, both 40 steps of a small
# pipeline, and on made-up curves: a flat one, a falling one, a rising one, and one with another
# `window` and `min_drop`. The hidden tests try it on fresh runs with other seeds and other bugs, and
# on more curves with other windows and thresholds.

# %% nbgrader={"grade": true, "grade_id": "test_loss_is_stuck", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import warnings as _warnings
from course import ModelConfig as _MC, Pipeline as _Pipeline
from course.bugs import catalogue as _catalogue, inject as _inject
from course.exercises.grading import assert_detector, graded_calls as _graded_calls
from course.reference.train import train as _train

_tiny = _Pipeline(seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                  n_train=512, n_val=64, batch_size=16, steps=40, warmup=5)
with _warnings.catch_warnings():  # the test's own training runs, not your code: their warnings are not shown
    _warnings.simplefilter("ignore")
    _runs = {name: _train(p, steps=40, seed=0, eval_every=0).history["loss"]
             for name, p in (("reference", _tiny), ("colleague's bug", _inject(_tiny, _catalogue()[4].name)))}
assert_detector(loss_is_stuck, healthy={"reference": _runs["reference"]},
                broken={"colleague's bug": _runs["colleague's bug"]}, what="stuck-loss detector")
# your loss_is_stuck on each (losses, keyword arguments), called apart; its truth value comes back
_stuck = _graded_calls(lambda _case: bool(loss_is_stuck(_case[0], **_case[1])), [
    ([3.0] * 40, {}),
    ([3.0] * 20 + [2.0] * 20, {}),
    ([2.0] * 20 + [2.5] * 20, {}),
    ([2.0] * 5 + [3.0] * 15 + [1.0] * 15 + [1.9] * 5, {"window": 5, "min_drop": 0.2}),
])
assert _stuck[0], "a loss that does not move at all is stuck"
assert not _stuck[1], \
    "a loss that falls by 1.0 (more than min_drop) is not stuck: check the direction of the drop"
assert _stuck[2], "a loss that rises did not fall: it is stuck"
assert _stuck[3], \
    "use the window and min_drop you are given: the mean of the last 5 losses is 0.1 below the first 5's, less than 0.2"
### BEGIN HIDDEN TESTS
from course.exercises.mystery import make as _make
with _warnings.catch_warnings():  # the test's own training runs, as above
    _warnings.simplefilter("ignore")
    _fresh = {name: _train(_make(name, 3, _tiny, salt="h-00-stuck-91"), steps=40, seed=7, eval_every=0).history["loss"]
              for name in ("healthy", "missing-step", "requires-grad-off", "clip-to-zero")}
assert_detector(lambda l: loss_is_stuck(l, window=10), healthy={"healthy, fresh seed": _fresh["healthy"]},
                broken={k: v for k, v in _fresh.items() if k != "healthy"}, what="stuck-loss detector")
_stuck = _graded_calls(lambda _case: bool(loss_is_stuck(_case[0], **_case[1])), [
    ([2.0] * 10 + [2.5] * 10, {"window": 10, "min_drop": 0.05}),
    ([2.0] * 10 + [1.99] * 10, {"window": 10, "min_drop": 0.05}),
    ([2.0] * 10 + [1.7] * 10, {"window": 10, "min_drop": 0.5}),
    ([2.0] * 10 + [1.99] * 10, {"window": 10, "min_drop": 0.001}),
    ([3.0] + [2.0] * 19, {"window": 10, "min_drop": 0.2}),
    ([3.0] * 10 + [2.0] * 9 + [3.5], {"window": 10, "min_drop": 0.2}),
    ([2.0] * 5 + [3.0] * 30 + [1.0] * 5, {"window": 5, "min_drop": 0.5}),
])
assert _stuck[0], \
    "a loss that rises did not fall: it is stuck"
assert _stuck[1], \
    "a drop smaller than min_drop is stuck"
assert _stuck[2], \
    "use the min_drop you are given: a drop smaller than it is stuck"
assert not _stuck[3], \
    "use the min_drop you are given: a drop at least that large is not stuck"
assert _stuck[4], \
    "compare the means of the first and last windows, not single losses: one high first loss must not decide"
assert not _stuck[5], \
    "compare the means of the first and last windows, not single losses: one noisy last step must not decide"
assert not _stuck[6], \
    "use the window you are given: compare the first and the last `window` losses"
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

# %% tags=["demo"]
from course.toolkit.checks import update_report
from course.reference.train import start, train_steps

def one_step_report(pipeline, seed=0):
    run = start(pipeline, seed)
    return update_report(run.model, run.optimizer, lambda: train_steps(run, 1, eval_every=0))

# %% [markdown]
# The negative control first: on the reference pipeline the test must pass. A test that fails on a
# healthy pipeline tells us nothing about a broken one.

# %% tags=["demo"]
control = one_step_report(pipe)
print("reference:", control.cause(), f"({len(control.unchanged)} of {control.n_params} tensors unchanged)")

# %% [markdown]
# Now the colleague's copy. Hypothesis 1 predicts that no tensor changes; hypothesis 2 that they change
# as on the reference. Commit to a number first.

# %% tags=["demo"]
prediction = None  # your guess: how many of the model's parameter tensors one step of the colleague's copy leaves unchanged

# %% tags=["demo"]
suspect = one_step_report(colleague_pipe)
reveal(f"tensors left unchanged by one step (of {suspect.n_params})", prediction, len(suspect.unchanged))
print("colleague:", suspect.cause(), f"(gradient norm after clipping to {colleague_pipe.clip}: {suspect.grad_norm:.3f};",
      f"learning rates {suspect.lrs})")
print("the colleague's bug, by name:", colleague_bug)

# %% [markdown]
# Hypothesis 2 predicted moving parameters; they did not move, so it is falsified. The gradients are
# there and finite, so the model *could* learn: the update is what is missing, and the optimizer's
# learning rate, printed above, says why.
#
# ## The fix, at the right depth
#
# The optimizer was built with a learning rate of 0, and the only thing that sets it is the recipe's
# `lr`. So the fix is that one setting, not a larger model, a different optimizer or more steps. We
# re-run the colleague's pipeline with the reference's learning rate, on a fresh seed, and look with the
# same detector that saw the symptom, your `loss_is_stuck`.

# %% tags=["demo"]
fixed = train(colleague_pipe.replace(lr=pipe.lr), steps=STEPS, seed=1, eval_every=0, progress=True)
print("stuck before the fix:", loss_is_stuck(colleague.history["loss"]),
      "| stuck after:", loss_is_stuck(fixed.history["loss"]))

# %% tags=["demo"]
ax = loss_plot({"colleague's copy": colleague.history["loss"], "after the fix (seed 1)": fixed.history["loss"]},
               baselines, title="The symptom is gone")
plt.show()

# %% [markdown]
# ## Exercise 2: your mystery pipeline
#
# Now nobody tells you the bug. `mystery` below is a pipeline drawn by seed from the *no-updates*
# family of bugs, or healthy. It is **opaque**: every part is a `<part>` that says nothing about what it
# does. Each draw has its own seeds, learning rate and warm-up, drawn independently of the bug, and
# every other setting is the base recipe's, so reading its settings (`mystery.lr`, `mystery.clip`, ...)
# tells you nothing. A bug that a plain pipeline would show as a wrong setting (a learning rate of 0, a
# clip threshold of 0) is carried by a part in a mystery: `mystery.lr` reads a healthy value while the
# part builds the optimizer with the wrong one, so a fix replaces the part, never the setting. The only
# way in is to *call* its parts and watch what they do. It is a smaller
# recipe than the one above (one layer, 16-token windows, batches of 16), so a run takes a fraction of
# a second.
#
# The parts a no-updates bug can live in, with the reference part that a fix puts back
# (all in `course.reference.pipeline`):
#
# | part | what it does | reference |
# |---|---|---|
# | `prepare` | `prepare(model) -> model`, called by `build_model` on every new model | `prepare_model` |
# | `make_optimizer` | `make_optimizer(model, pipe) -> optimizer`: which tensors it holds | `build_optimizer` |
# | `optimizer_factory` | `optimizer_factory(params, lr, weight_decay) -> optimizer`: its type and settings | `adamw` |
# | `update` | `update(optimizer)`: the step itself, and anything done to the gradients just before | `apply_update` |
#
# First the symptom: the mystery beside its **healthy twin** (`course.reference.pipeline.healthy_twin`:
# the mystery's own settings, every part the reference one), both for 40 steps.

# %%
from course import ModelConfig
from course.exercises.mystery import draw
from course.reference.pipeline import healthy_twin

SMALL = Pipeline(seq_len=16, model=ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                 n_train=512, n_val=64, batch_size=16, steps=40, warmup=5)
NO_UPDATES = ["missing-step", "optimizer-on-stale-model", "embedding-not-in-optimizer",
              "requires-grad-off", "lr-zero", "clip-to-zero"]
MYSTERY_SEED = 6  # another seed draws another mystery (perhaps a healthy one)
mystery = draw(["healthy"] + NO_UPDATES, seed=MYSTERY_SEED, base=SMALL)
print(mystery)

twin_run = train(healthy_twin(mystery), seed=0, eval_every=0)
mystery_run = train(mystery, seed=0, eval_every=0)
for label, run in [("healthy twin", twin_run), ("mystery", mystery_run)]:
    first, last = first_last(run.history["loss"], window=10)
    print(f"{label:>12}: mean of the first 10 steps {first:.3f}, of the last 10 {last:.3f}, drop {first - last:+.3f}")
ax = loss_plot({"healthy twin": twin_run.history["loss"], "mystery": mystery_run.history["loss"]},
               mystery.language().baselines(mystery.seq_len), title="The mystery: 40 steps")
plt.show()

# %% [markdown]
# A flat loss. You know two hypotheses already; within "no updates" there are four parts to suspect.
# Here is one training step of any pipeline, built from its own parts exactly as `course.reference.train` runs
# it (without the learning-rate schedule), returning the model, the optimizer and a copy of every
# parameter before and after the step. Use it, or write your own.

# %%
from types import SimpleNamespace
from course.reference.train import batch_at

ANSWERS = ("healthy", "prepare", "make_optimizer", "optimizer_factory", "update")  # what name_cause may return

def one_step(pipeline, seed=0):
    """One training step of ``pipeline`` with its own parts. Returns ``.model``, ``.optimizer``,
    ``.before`` and ``.after`` (dicts: parameter name -> a copy of the tensor) and ``.loss``."""
    model = pipeline.build_model(seed)  # runs pipeline.prepare on the new model
    optimizer = pipeline.make_optimizer(model, pipeline)  # which calls pipeline.optimizer_factory
    batch = batch_at(pipeline, seed, 0)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    loss = pipeline.loss_fn(model(batch.inputs), batch)
    optimizer.zero_grad(set_to_none=True)
    if loss.requires_grad:  # False when no parameter requires a gradient
        loss.backward()
    with_grad = [p for p in model.parameters() if p.grad is not None]
    if pipeline.clip is not None and with_grad:
        torch.nn.utils.clip_grad_norm_(with_grad, pipeline.clip)
    pipeline.update(optimizer)
    after = {name: p.detach().clone() for name, p in model.named_parameters()}
    return SimpleNamespace(model=model, optimizer=optimizer, before=before, after=after, loss=loss.item())

step = one_step(SMALL)
print(f"healthy: the largest change of each tensor in one step (learning rate {SMALL.lr}):")
for name in step.before:
    print(f"  {name:<28} {(step.after[name] - step.before[name]).abs().max().item():.2e}")

# %% [markdown]
# One bug of the family leaves a single tensor, the token embedding, out of the optimizer. Here is a
# question about its loss curve on the small recipe, under the rule you wrote in Exercise 1 with a
# window of 10 steps (`loss_is_stuck(losses, window=10)`).

# %% tags=["demo"]
prediction = None  # your guess: with the token embedding left out of the optimizer, is the 40-step loss stuck by loss_is_stuck(losses, window=10) (True/False)?

# %% tags=["demo"]
partial = inject(SMALL, "embedding-not-in-optimizer")
first, last = first_last(train(partial, seed=0, eval_every=0).history["loss"], window=10)
partial_step = one_step(partial)
in_place = [n for n in partial_step.before if (partial_step.after[n] - partial_step.before[n]).abs().max().item() <= 1e-5]
reveal("embedding left out of the optimizer: stuck by the rule, window 10 (drop of the mean loss < 0.05)?", prediction,
       f"{first - last < 0.05} (drop {first - last:+.3f} nats between the first and the last 10 of 40 steps)")
print("tensors that one step leaves in place:", in_place)

# %% [markdown]
# The loss curve can miss a bug that the tensors show plainly. So the test you write looks at the
# tensors.
#
# ### 2a: a falsifying test (2 points)
#
# Write `detect(pipe) -> bool`: `True` when one training step of `pipe` leaves **at least one** of the
# model's parameter tensors where it was, `False` when every tensor moves.
#
# * "Where it was" must tolerate tiny moves: AdamW divides each step by the root of its running mean
#   of squared gradients plus `eps` (1e-8), so when the gradients are scaled to almost nothing `eps`
#   dominates and a step moves a parameter by about `lr x |g| / eps` (some by nothing at all, lost to
#   rounding), far below the learning rate that a healthy step moves every tensor by (printed
#   above). Count a tensor as moved when its largest absolute change is above a threshold of your
#   choice between `1e-6` and `1e-4`.
# * It is graded on healthy draws (must be `False`) and broken ones (must be `True`), with other
#   seeds, other configurations and bugs you have not been shown. Return a `bool`.
# * Look at the parameters, not at `pipe`'s settings: a draw's settings are drawn independently of
#   its bug, so they say nothing about it.
# * A pipeline that crashes under your test is broken: catch the exception around the pipeline's own
#   calls and return `True`. An exception that leaves `detect` is no answer and fails the cell (this
#   holds for every `detect` of the course).

# %% nbgrader={"grade": false, "grade_id": "detect", "locked": false, "schema_version": 3, "solution": true}
def detect(pipe):
    ### BEGIN SOLUTION
    try:
        s = one_step(pipe)
    except Exception:  # a pipeline that crashes under the test is broken
        return True
    return any((s.after[n] - s.before[n]).abs().max().item() <= 1e-5 for n in s.before)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_detect", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# The grader's own copies of the recipe, the bug list and the functions it switches off: an answer
# cell that rebinds SMALL, NO_UPDATES or update_report changes nothing here.
from course import ModelConfig as _MC, Pipeline as _Pipeline
from course.exercises import mystery as _mystery
from course.toolkit.checks import update_report as _update_report
from course.exercises.grading import assert_detector, assert_names, captured_warnings, switched_off
from course.reference.train import start as _start, train_steps as _train_steps

_SMALL = _Pipeline(seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                   n_train=512, n_val=64, batch_size=16, steps=40, warmup=5)
_NO_UPDATES = ["missing-step", "optimizer-on-stale-model", "embedding-not-in-optimizer",
               "requires-grad-off", "lr-zero", "clip-to-zero"]
from course.reference.diagnose import training_moves as _training_moves  # the fix's check: no delegating to it
_off = (_update_report, _training_moves, _mystery.reveal, _mystery.touched, _mystery.draw, _mystery.make)
def _crashing_prepare(model):  # a part that raises: a pipeline that crashes under your test is broken
    raise RuntimeError("this pipeline's prepare crashes")

_broken = {f"broken draw {i}": _mystery.make(b, 110 + i, _SMALL)
           for i, b in enumerate(["missing-step", "lr-zero", "requires-grad-off", "embedding-not-in-optimizer"])}
_broken["a pipeline that crashes"] = _SMALL.replace(prepare=_crashing_prepare)
assert_detector(detect,
                healthy={f"healthy draw {i}": _mystery.make("healthy", 100 + i, _SMALL) for i in range(2)},
                broken=_broken, what="no-update detector", off=_off)
### BEGIN HIDDEN TESTS
_hidden_bugs = _NO_UPDATES + ["all-targets-ignored"]  # the last one is from another family: its grads are all zero
assert_detector(detect,
                healthy={f"hidden healthy draw {i}": _mystery.hidden("healthy", 7 + 13 * i, _SMALL, salt="h-00-det-4f1")
                         for i in range(3)},
                broken={f"hidden broken draw {i}": _mystery.hidden(b, 5 + i, _SMALL, salt="h-00-det-4f1")
                        for i, b in enumerate(_hidden_bugs)},
                what="no-update detector", off=_off)
### END HIDDEN TESTS

# %% [markdown]
# ### A method for any mystery: the part swap
#
# A mystery's settings say nothing about its bug; the bug lives in a part. A method that finds the part without
# reading any code: take a test that fails on the pipeline and passes on its **healthy twin** (the same
# settings, every part the reference one: `course.reference.pipeline.healthy_twin`), then replace
# **one part at a time** with its reference and run the test again. The part whose swap alone makes the
# test pass is the suspect. Here on a bug shown above, with a test of "some tensor stays in place":

# %% tags=["demo"]
from course.reference.pipeline import adamw, apply_update, build_optimizer, healthy_twin, prepare_model

REFERENCE_PARTS = {"prepare": prepare_model, "make_optimizer": build_optimizer, "optimizer_factory": adamw,
                   "update": apply_update}

def tensors_in_place(pipeline):
    s = one_step(pipeline)
    return [n for n in s.before if (s.after[n] - s.before[n]).abs().max().item() <= 1e-5]

print("the broken pipeline:", tensors_in_place(partial), " its healthy twin:", tensors_in_place(healthy_twin(partial)))
for part, reference in REFERENCE_PARTS.items():
    print(f"{part:>18} swapped for the reference: {tensors_in_place(partial.replace(**{part: reference}))}")

# %% [markdown]
# Only one swap empties the list, so that part is the suspect. What the method costs and where it stops:
#
# * **Cost:** one run of the test per part (here four one-step tests). With a slow test, swap the
#   parts the symptom points at first.
# * **It needs a control that passes.** If the healthy twin fails the test too, the test is wrong,
#   or the cause is in the settings, not the parts: no swap can say anything.
# * **One broken part.** With two broken parts no single swap passes; swap pairs, or fix one and look
#   again. A part that is meant to differ from the reference (a collate written for other data) also
#   "fixes" the symptom when swapped, by throwing away what the pipeline needed.
# * **It names the part, not the mistake in it.** Why the part is wrong comes from testing the part
#   itself (the questions of 2b below), and that is what a diagnosis record says.
#
# In a real code base the reference is the last version that worked, and the same idea is bisection
# by component, as `git bisect` is bisection by commit. Every later notebook's fix asks for the broken
# part replaced: this is one way to find it.
#
# ### 2b: name the broken part (2 points)
#
# Write `name_cause(pipe) -> str`: return the name of the part that keeps the parameters from
# updating, one of `"prepare"`, `"make_optimizer"`, `"optimizer_factory"`, `"update"` (the table
# above), or `"healthy"` when every tensor moves. Each broken draw has exactly one broken part.
#
# Call the parts and observe, in an order where each test can only blame one part. Questions to ask:
# does every parameter of the model `prepare` returned require a gradient? Does the optimizer hold
# exactly the model's parameters (compare them *by identity*, `id(p)`, not by name or shape)? Does it
# hold them with the learning rate `make_optimizer` passed (`pipe.lr`)? If all of that is right and
# the step still leaves a tensor in place, what is left? Graded on fresh draws of every no-updates
# bug and on healthy draws.

# %% nbgrader={"grade": false, "grade_id": "name_cause", "locked": false, "schema_version": 3, "solution": true}
def name_cause(pipe):
    ### BEGIN SOLUTION
    s = one_step(pipe)
    params = list(s.model.parameters())
    if not all(p.requires_grad for p in params):
        return "prepare"
    held = [p for group in s.optimizer.param_groups for p in group["params"]]
    if {id(p) for p in held} != {id(p) for p in params}:
        return "make_optimizer"
    if any(group["lr"] != pipe.lr for group in s.optimizer.param_groups):
        return "optimizer_factory"
    if any((s.after[n] - s.before[n]).abs().max().item() <= 1e-5 for n in s.before):
        return "update"
    return "healthy"
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_name_cause", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# The grader's own copies of the recipe, the bug list and the functions it switches off: an answer
# cell that rebinds SMALL, NO_UPDATES or update_report changes nothing here.
from course import ModelConfig as _MC, Pipeline as _Pipeline
from course.exercises import mystery as _mystery
from course.toolkit.checks import update_report as _update_report
from course.exercises.grading import assert_detector, assert_names, captured_warnings, switched_off
from course.reference.train import start as _start, train_steps as _train_steps

_SMALL = _Pipeline(seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                   n_train=512, n_val=64, batch_size=16, steps=40, warmup=5)
_NO_UPDATES = ["missing-step", "optimizer-on-stale-model", "embedding-not-in-optimizer",
               "requires-grad-off", "lr-zero", "clip-to-zero"]
from course.reference.diagnose import training_moves as _training_moves  # the fix's check: no delegating to it
_off = (_update_report, _training_moves, _mystery.reveal, _mystery.touched, _mystery.draw, _mystery.make)
_visible = {f"draw {i}": _mystery.make(b, 120 + i, _SMALL) for i, b in enumerate(["healthy"] + _NO_UPDATES)}
_expected = {k: (_mystery.touched(p) or ("healthy",))[0] for k, p in _visible.items()}
assert_names(name_cause, {k: (p, _expected[k]) for k, p in _visible.items()}, what="name_cause", off=_off)
### BEGIN HIDDEN TESTS
_hidden = {f"hidden draw {i}": _mystery.hidden(b, 31 + 7 * i, _SMALL, salt="h-00-name-c3d")
           for i, b in enumerate(["healthy"] + _NO_UPDATES + _NO_UPDATES)}
_part_of = {_mystery.reveal(p): _expected[k] for k, p in _visible.items()}  # a bug's part is the same in every draw
_hidden_expected = {k: _part_of[h.answer] for k, h in _hidden.items()}
assert_names(name_cause, {k: (p, _hidden_expected[k]) for k, p in _hidden.items()}, what="name_cause", off=_off)
### END HIDDEN TESTS

# %% [markdown]
# ### 2c: the fix (2 points)
#
# Write `fix(pipe) -> Pipeline`: return `pipe` with its broken part replaced by the reference part
# from the table (`pipe.replace(update=course.reference.pipeline.apply_update)`, for example), and every other
# part and setting left as it is. A healthy pipe comes back unchanged. You may use your `name_cause`.
#
# It is graded by behaviour on fresh draws of every no-updates bug: the fixed pipeline may differ from
# the broken one only in the broken part, and trained for 40 steps on a fresh seed its loss must fall
# and every parameter tensor must move. It is never compared with a stored number.

# %% nbgrader={"grade": false, "grade_id": "fix", "locked": false, "schema_version": 3, "solution": true}
from course.reference.pipeline import prepare_model, build_optimizer, adamw, apply_update

def fix(pipe):
    ### BEGIN SOLUTION
    reference = {"prepare": prepare_model, "make_optimizer": build_optimizer,
                 "optimizer_factory": adamw, "update": apply_update}
    cause = name_cause(pipe)
    if cause == "healthy":
        return pipe
    return pipe.replace(**{cause: reference[cause]})
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_fix", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# The grader's own copies of the recipe, the bug list and the functions it switches off: an answer
# cell that rebinds SMALL, NO_UPDATES or update_report changes nothing here.
from course import ModelConfig as _MC, Pipeline as _Pipeline
from course.exercises import mystery as _mystery
from course.toolkit.checks import update_report as _update_report
from course.exercises.grading import assert_detector, assert_names, captured_warnings, switched_off
from course.reference.train import start as _start, train_steps as _train_steps

_SMALL = _Pipeline(seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                   n_train=512, n_val=64, batch_size=16, steps=40, warmup=5)
_NO_UPDATES = ["missing-step", "optimizer-on-stale-model", "embedding-not-in-optimizer",
               "requires-grad-off", "lr-zero", "clip-to-zero"]
from course.reference.diagnose import training_moves as _training_moves  # the fix's check: no delegating to it
_off = (_update_report, _training_moves, _mystery.reveal, _mystery.touched, _mystery.draw, _mystery.make)
from course.reference.diagnose import training_moves as _symptom  # the reference check, independent of your code
from course.exercises.mystery import check_fix

### BEGIN HIDDEN TESTS
check_fix(fix, [_mystery.hidden(b, 41 + i, _SMALL, salt="h-00-fix-8e2") for i, b in enumerate(_NO_UPDATES)],
          lambda fixed: _symptom(fixed, seed=23), what="fix", off=(_update_report, _symptom))
### END HIDDEN TESTS
# three broken draws, one whose bug lives in make_optimizer, and a healthy draw, which must come back unchanged
check_fix(fix, [_mystery.make(b, 130 + i, _SMALL)
                for i, b in enumerate(["missing-step", "lr-zero", "requires-grad-off", "optimizer-on-stale-model", "healthy"])],
          _symptom, what="fix", off=(_update_report, _symptom))

# %% [markdown]
# ### The loop closed
#
# Your fix on your mystery, re-run on a fresh seed and looked at with the detectors that saw the
# symptom: `loss_is_stuck` on the curve, and your `detect` on one step.

# %% tags=["demo"]
repaired = fix(mystery)
repaired_run = train(repaired, seed=1, eval_every=0)
print("stuck before the fix:", loss_is_stuck(mystery_run.history["loss"], window=10),
      "| stuck after:", loss_is_stuck(repaired_run.history["loss"], window=10))
print("detect before the fix:", detect(mystery), "| detect after:", detect(repaired))
ax = loss_plot({"mystery": mystery_run.history["loss"], "after your fix (seed 1)": repaired_run.history["loss"]},
               mystery.language().baselines(mystery.seq_len), title="Your mystery, fixed")
plt.show()

# %% [markdown]
# ## Exercise 3: the diagnosis record (2 points)
#
# Every investigation in this course ends with a record of five lines: the *symptom*, at least two
# competing *hypotheses*, the *test* that separates them, its *prediction* under each hypothesis, and
# the *result*. Write `diagnosis_record(pipe)`: return a `Diagnosis` of your investigation of `pipe`,
# whose `result` is the part your test found broken, one of `ANSWERS` (exactly that string).
#
# The record must come from the investigation, not from memory: it is graded on the mystery of
# `MYSTERY_SEED = 6` (keep that seed for grading) and on fresh draws you have not seen, so a `result`
# typed in as a constant cannot pass. Its form is checked by `Diagnosis.problems()`: the symptom, the
# test, the prediction and each hypothesis in words (two or more; the result may be one name), two
# different hypotheses, a prediction that says what the test shows under your hypotheses (it shares
# a word of four or more letters with one), and a test that is the one they are about (it shares
# such a word with a hypothesis or the prediction). Your own words are fine.

# %% nbgrader={"grade": false, "grade_id": "diagnosis_record", "locked": false, "schema_version": 3, "solution": true}
from course.exercises.record import Diagnosis

def diagnosis_record(pipe):
    ### BEGIN SOLUTION
    return Diagnosis(
        symptom="training loss flat at ln(V) for 40 steps while a healthy run of the same recipe falls",
        hypotheses=["no signal: the parameters move but the targets carry nothing learnable",
                    "prepare froze the parameters", "make_optimizer holds tensors the model does not use",
                    "optimizer_factory builds the optimizer with a learning rate of 0",
                    "update does not step, or steps with gradients scaled to nothing"],
        test="one step with the pipeline's own parts: requires_grad of every parameter, optimizer membership "
             "by identity, the optimizer's learning rate, then the largest change of every tensor",
        prediction="each hypothesis fails exactly one of the four checks; no signal fails none and moves every tensor",
        result=name_cause(pipe),
    )
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_diagnosis_record", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# The grader's own copies of the recipe, the bug list and the functions it switches off: an answer
# cell that rebinds SMALL, NO_UPDATES or update_report changes nothing here.
from course import ModelConfig as _MC, Pipeline as _Pipeline
from course.exercises import mystery as _mystery
from course.toolkit.checks import update_report as _update_report
from course.exercises.grading import assert_detector, assert_names, captured_warnings, switched_off
from course.reference.train import start as _start, train_steps as _train_steps

_SMALL = _Pipeline(seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                   n_train=512, n_val=64, batch_size=16, steps=40, warmup=5)
_NO_UPDATES = ["missing-step", "optimizer-on-stale-model", "embedding-not-in-optimizer",
               "requires-grad-off", "lr-zero", "clip-to-zero"]
from course.reference.diagnose import training_moves as _training_moves  # the fix's check: no delegating to it
_off = (_update_report, _training_moves, _mystery.reveal, _mystery.touched, _mystery.draw, _mystery.make)
from course.exercises.grading import graded_calls
from course.exercises.record import as_data as _as_data, from_data as _from_data

_ANSWERS = ("healthy", "prepare", "make_optimizer", "optimizer_factory", "update")
_mine = _mystery.draw(["healthy"] + _NO_UPDATES, seed=6, base=_SMALL)  # the notebook's mystery, drawn here
record = _from_data(graded_calls(diagnosis_record, [_mine], _as_data, off=_off)[0])
assert record is not None, "diagnosis_record must return a course.exercises.record.Diagnosis"
assert record.problems() == [], f"the record is not yet a falsifiable investigation: {record.problems()}"
assert record.result in _ANSWERS, f"result must be one of {_ANSWERS}, not {record.result!r}"
### BEGIN HIDDEN TESTS
assert record.result == (_mystery.touched(_mine) or ("healthy",))[0], \
    "result should be the part your investigation of your mystery found broken"
_fresh = [_mystery.hidden(b, 61 + i, _SMALL, salt="h-00-rec-2a7")
          for i, b in enumerate(["clip-to-zero", "requires-grad-off", "lr-zero"])]
for _i, (_p, _r) in enumerate(zip(_fresh, graded_calls(diagnosis_record, _fresh, _as_data, off=_off))):
    _r = _from_data(_r)
    assert _r is not None and _r.problems() == [], f"fresh draw {_i}: the record is not a falsifiable investigation"
    assert _r.result == (_mystery.hidden_touched(_p) or ("healthy",))[0], \
        f"fresh draw {_i}: the result does not name the broken part; it must come from testing the pipe you are given"
### END HIDDEN TESTS

# %% [markdown]
# ## Explore: the package's one-step test on every "no updates" bug
#
# The package's `update_report` is the one-step test you just wrote, with more detail. Pick a bug
# from the catalogue's *no-updates* family; the cell runs it on the reference recipe with that bug
# (where no live widget shows, the cell's text lists every bug of the family). Note which bugs it
# names exactly and which it only narrows down.

# %% tags=["demo"]
# NBVAL_IGNORE_OUTPUT
import ipywidgets as widgets
from course.toolkit.textview import with_text

def one_line(name):
    report = one_step_report(inject(pipe, name))
    return f"{name}: cause {report.cause()!r}; unchanged tensors: {len(report.unchanged)} of {report.n_params}"

family = {b.name: one_line(b.name) for b in catalogue("no-updates")}  # one step each, run once
explorer = widgets.interactive(lambda name: print(family[name]),
                               name=widgets.Dropdown(options=list(family), description="bug"))
with_text(explorer, lambda: "\n".join(family.values()))

# %% [markdown]
# ## What these tests can and cannot prove
#
# * `loss_is_stuck` proves the loss did not fall by `min_drop` over this window. It does not say why,
#   and a slow learning rate or a short window also trips it. It can miss a pipeline that leaves
#   only *some* tensors in place while the rest still learn (`embedding-not-in-optimizer`, above).
# * The one-step update test proves whether each tensor changed. A tensor that changes is not proof
#   of learning: a wrong target would change it too. One step of AdamW moves parameters by about the
#   learning rate whatever the gradient's size (as long as the gradient is far above Adam's `eps`), so
#   it cannot tell a well-scaled gradient from a noisy
#   one.
# * Naming the part proves where the update is lost, for the four parts we checked; a bug elsewhere
#   (the loss, the data) needs its own test, which is what the later notebooks are about.
# * The negative control (the healthy pipeline passes every test) is what makes a failing test mean
#   something.
