# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (debug course)
#     language: python
#     name: debug-course
# ---

# %% [markdown]
# # 11 · Capstone: a mystery run of your own
#
# **What you do.** You get a training pipeline with one bug in it, drawn from your name out of the
# bug families of notebooks 00–09 (no updates, a wrong gradient, non-finite values, a late spike, a
# validation gap, slow steps, a bad resume, broken generation, a broken evaluation harness, a bad
# batch), with seeds, a learning rate and a warm-up of its own. A classmate may draw the same bug;
# the draw is yours. The notebook does not tell you which bug it is. You see its symptom, and then
# you do the whole loop on your own:
#
# 1. a **diagnosis record**: the symptom, the hypotheses that compete to explain it, the test that
#    separates them, what each hypothesis predicts, what the test showed, and the family you name;
# 2. a **falsifying test** `detect(pipe) -> bool`, graded on your draw, on fresh draws of the same bug
#    with other seeds and settings, and on healthy draws of the same recipe;
# 3. a **fix** `fix(pipe) -> Pipeline`, graded by training or running the fixed pipeline on fresh
#    draws of your bug.
#
# All of `course` is importable and every earlier notebook's method applies. While you are graded,
# the package functions that would answer for you are switched off ("The tools" below says which),
# so the tests you are graded on are the ones you write.
#
# **Time.** Under half a minute of computation on a laptop CPU for the cells here (your own
# experiments add to it; `make bench` times the notebook on yours). **GPU:** not needed.

# %%
import dataclasses
import io

import torch

from course.exercises import capstone
from course.reference import checkpoint
from course.exercises.identity import identity
from course.exercises.record import Diagnosis
from course.reference.train import batch_at, resume, start, train_steps

torch.set_num_threads(1)  # tiny models: one thread is fastest and does not fight other processes
_ = torch.manual_seed(0)  # returns the generator; assigned so it is not printed

# %% [markdown]
# ## Who are you?
#
# Your draw is keyed by your name. If your course is graded, type **your student id**. While a
# submission is graded, `identity(MY_NAME)` returns the id the grader grades it under, whatever you
# typed, so every test grades that id's draw; a different name here costs this section's hidden
# point, and the draw you investigated would not be the one you are graded on. For self-study, any
# name will do. Replace the `raise` line.

# %% nbgrader={"grade": false, "grade_id": "my_name", "locked": false, "schema_version": 3, "solution": true}
MY_NAME = ""  # your student id if your course is graded, any name for self-study
### BEGIN SOLUTION
MY_NAME = "solution"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_my_name", "locked": true, "points": 1, "schema_version": 3, "solution": false}
if not str(MY_NAME).strip():
    raise NotImplementedError("type your name (your student id, if your course is graded) into MY_NAME")
assert isinstance(MY_NAME, str), f"MY_NAME must be a string, not {type(MY_NAME).__name__}"

# %% nbgrader={"grade": true, "grade_id": "test_my_name_hidden", "locked": true, "points": 1, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
from course.exercises import identity as _identity
if not str(MY_NAME).strip():
    raise NotImplementedError("type your name (your student id, if your course is graded) into MY_NAME")
if _identity.GRADED_ID:
    assert str(MY_NAME).strip() == _identity.GRADED_ID, (
        "MY_NAME is not the student id you are graded under: every test grades the draw of that id, "
        "not the draw of the name you typed")
### END HIDDEN TESTS

# %% [markdown]
# ## Your draw
#
# `capstone.draw_for(name)` draws your pipeline. Like every mystery pipeline of the course it is
# **opaque**: every part is a `<part>`, every setting shows a healthy value, and its seeds, learning
# rate and warm-up are its own. The families it can come from:

# %%
mine = capstone.draw_for(identity(MY_NAME))
print(f"your draw: lr {mine.lr}, warm-up {mine.warmup}, language seed {mine.language_seed}; "
      f"its update part is {mine.update!r}, like every part")
capstone.print_families()

# %% [markdown]
# Each family has several candidate causes: `capstone.print_candidates(family)` lists the bugs a draw
# of that family can hold (some of its notebook's bugs, not all), each with the catalogue's one-line symptom (`course.bugs.get(name).doc` says more).
# They are the competing hypotheses your record weighs. For example:

# %% tags=["demo"]
capstone.print_candidates("no-updates")

# %% [markdown]
# What it does, as you would first see it (`capstone.show` trains or runs it on seed 0 and shows the
# first view of its family's notebook: a plot and a printed line for most families, printed lines for
# the others). For some bugs and draws the symptom is faint or absent in this view and shows only
# under that notebook's tests: the view is where to start, not the verdict.
#
# The view, and the draw's fixed settings, give away the **family**, not the bug. Each family keeps
# its notebook's base (its steps, training-set size, batch size and model, dropout in some), and
# `show` picks the view by those settings, so anyone comparing them with the families' bases can read
# the family off without testing. That is no shortcut to points: within a family every bug and the
# healthy draw share the base, and every test below asks for work the family alone does not give: a
# detector that tells fresh draws of your bug from healthy draws of the same recipe, a fix that makes
# fresh draws of your bug healthy, and a family in your record that scores only beside a detector that
# works.

# %% tags=["demo"]
capstone.show(mine)

# %% [markdown]
# A symptom means little without a **negative control**: the same view of a healthy pipeline.
# `capstone.healthy_twin(pipe)` is your draw's settings (seeds, learning rate, sizes) with every part
# the reference one. It is a control for your tests, not a fix: a fix keeps every part that was not
# broken.

# %% tags=["demo"]
capstone.show(capstone.healthy_twin(mine))

# %% [markdown]
# ## The tools
#
# Each family has the tools of its notebook; all of `course` is importable here.
#
# | family | tools (notebook) |
# |---|---|
# | `batch` | the batch contract: targets are the inputs shifted by one (`batch_at`); the held-out loss against the exact chain's loss (01) |
# | `no-updates` | one step of the pipeline's own parts: `requires_grad`, optimizer membership by `id`, the learning rate, every tensor's change (00, 01) |
# | `wrong-gradient` | loss at init against ln(V), two backwards on one batch, the tiny-batch overfit against `fit_floor` (`course.toolkit.overfit`) (03) |
# | `non-finite` | `run.stopped` of `train_steps`, the first non-finite tensor in step order (02) |
# | `late-spike` | a loss against the median of the steps before it; replay from a checkpoint on other data (`course.lessons.replay`) (04) |
# | `validation` | like with like on training windows, the overlap audit, fresh windows of the training source (`course.lessons.valgap`, `course.toolkit.overlap`) (05) |
# | `throughput` | `throughput.traced(pipe)` phase by phase against a healthy trace, counting slow steps (06) |
# | `resume` | `checkpoint.split_run` against an unbroken run, `checkpoint.differences`, a resume with a new learning rate (07) |
# | `generation` | a future-token perturbation, cached logits against a full recompute, the sampler on `FixedLogits` (`course.lessons.generate`) (08) |
# | `evaluation` | each harness stage (`pipe.eval_*`) against its specification on inputs you choose (`course.lessons.harness`) (09) |
#
# While your answers are graded, two groups of functions are switched off: the draw machinery
# (`capstone.SWITCHED_OFF`: `course.exercises.mystery`'s `reveal`, `touched`, `draw` and `make`,
# `capstone.draw_for`, `answer_family`, `reference_fix`, `summary_row`, `practice_explorer`, ...) and
# every package check that would answer "is this pipeline broken?" (`capstone.PACKAGE_CHECKS`). The
# second group includes `capstone.show` (compared with a healthy twin's, its printout would answer)
# and some helpers named in the table: the non-finite locator (`first_nonfinite`, `locate`),
# `update_report`, the `course.toolkit.checks` probes (`future_sensitivity` among them), `spike_alerts`,
# `throughput.slow_phase` and `regressions`, `eval_path_check`, `preflight`. Investigate with them in
# your own cells; `my_diagnosis`, `my_family`, `detect` and `fix` run graded with them switched off,
# so they must not call them. `capstone.switched_off_names()` lists them all, by module.
#
# ## 1. The diagnosis record
#
# Investigate `mine`, then write what you did as a `Diagnosis` (five fields: `symptom`, at least two
# competing `hypotheses`, the `test` that separates them, the `prediction` each hypothesis makes, the
# `result`), and name the family of your draw: `my_family()` returns exactly one of the names printed
# above. Put your experiments inside `my_diagnosis` so the record's result comes from them. The grader
# calls it in a separate copy of your kernel (a forked process) with the functions above switched off,
# `capstone.show` and `draw_for` among them: inside it, experiment on your draw `mine` (the notebook's
# global), not on a new `draw_for`, and print nothing you need `show` for. Graded:
# the record's form (`Diagnosis.problems()` empty: every field in words, two different hypotheses, a
# prediction that names a hypothesis and a test that names what they are about, by a shared word of
# four or more letters) and a family from the list (visible test), and,
# after your test in section 2, the family of your own draw, counted only together with a `detect`
# that passes (hidden test). The visible test checks the record's **form** only: a pass there says
# the record is a falsifiable investigation, not that its result or its family is right.

# %% nbgrader={"grade": false, "grade_id": "diagnosis", "locked": false, "schema_version": 3, "solution": true}
def my_diagnosis():
    ### BEGIN SOLUTION
    unbroken = train_steps(start(mine, 0), 16, eval_every=0)
    resumed, data = checkpoint.split_run(mine, 0, 8, 8)
    departs = checkpoint.differences(unbroken, resumed)
    # without dropout, a different RNG changes nothing: a departure that stays is the data or the state
    quiet = mine.replace(model=dataclasses.replace(mine.model, dropout=0.0))
    plain = train_steps(start(quiet, 0), 16, eval_every=0)
    again, _ = checkpoint.split_run(quiet, 0, 8, 8)
    still = checkpoint.differences(plain, again)
    # which batch does the first resumed step train on?
    seen = []
    train_steps(resume(mine, io.BytesIO(data)), 1, eval_every=0, on_step=lambda run, step, batch: seen.append(batch))
    first = min((v for k, v in departs.items() if k != "parameters"), default=None)
    first_still = min((v for k, v in still.items() if k != "parameters"), default=None)
    trained_on = next((f"batch {i}" for i in range(16) if torch.equal(seen[0].inputs, batch_at(mine, 0, i).inputs)),
                      "a batch of no earlier step")
    return Diagnosis(
        symptom=f"saved at step 8 and resumed, the run departs from the unbroken one in "
                f"{sorted(k for k in departs if k != 'parameters')} from step {first}",
        hypotheses=["the RNG is not restored: other dropout masks", "the data cursor is not restored: other batches",
                    "the optimizer state is not restored", "the scheduler is not restored"],
        test="the same split run without dropout, and the batch the first resumed step trains on against batch_at",
        prediction="RNG: identical without dropout, batch 8; cursor: departs without dropout, an earlier batch; "
                   "optimizer state: departs without dropout, batch 8; scheduler: departs without dropout in the lr, "
                   "batch 8",
        result=f"without dropout it departs from step {first_still}, in {sorted(k for k in still if k != 'parameters')}; "
               f"the first resumed step trains on {trained_on}: the data cursor",
    )
    ### END SOLUTION


def my_family():
    ### BEGIN SOLUTION
    return "resume"
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_diagnosis", "locked": true, "points": 1, "schema_version": 3, "solution": false}
from course.exercises import capstone as _capstone
from course.exercises.grading import graded_calls as _graded_calls
from course.exercises.record import as_data as _as_data, from_data as _from_data

_OFF = _capstone.SWITCHED_OFF + _capstone.PACKAGE_CHECKS
_record = _from_data(_graded_calls(lambda _: my_diagnosis(), [None], _as_data, off=_OFF)[0])
_family = _graded_calls(lambda _: my_family(), [None], off=_OFF)[0]
assert _record is not None, "my_diagnosis must return a course.exercises.record.Diagnosis"
assert _record.problems() == [], f"the record is not yet a falsifiable investigation: {_record.problems()}"
assert _family in _capstone.FAMILY_NAMES, f"my_family() must return one of {_capstone.FAMILY_NAMES}, not {_family!r}"

# %% [markdown]
# Your record, as the grader reads it:

# %% tags=["demo"]
for field, value in dataclasses.asdict(my_diagnosis()).items():
    print(f"{field:>10}: {value}")
print(f"{'family':>10}: {my_family()}")

# %% [markdown]
# ## 2. A falsifying test
#
# Write `detect(pipe) -> bool`: `True` if `pipe` has the bug you found, `False` if it is healthy.
# Return a bool (Python, numpy or torch). It is graded like a test suite: it must fire on your draw and on
# fresh draws of the same bug (other seeds, learning rates and warm-ups: the noise it must tolerate),
# and stay quiet on healthy draws of the same recipe, so one that always (or never) fires scores 0.
# The visible test cell grades fresh draws too, in a hidden part: passing what you can see is not yet
# the cell's points. Keep it to a few seconds a call: a test cell has 120 seconds in all, the visible
# cell calls `detect` on four pipelines (two in its hidden part) and the hidden cell on five, and the first call in a
# fresh process also pays for imports and warm-up (time yours on `mine` with `%time detect(mine)`).

# %% nbgrader={"grade": false, "grade_id": "detect", "locked": false, "schema_version": 3, "solution": true}
def detect(pipe):
    ### BEGIN SOLUTION
    unbroken = train_steps(start(pipe, 0), 16, eval_every=0)
    resumed, _ = checkpoint.split_run(pipe, 0, 8, 8)
    return bool(checkpoint.differences(unbroken, resumed))
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_detect", "locked": true, "points": 1, "schema_version": 3, "solution": false}
from course.exercises import capstone as _capstone, identity as _identity, mystery as _mystery
from course.exercises.grading import assert_detector as _assert_detector

_theirs = _capstone.draw_for(_identity.identity(MY_NAME))
_control = _mystery.make("healthy", 1, _capstone.family_of(_theirs).base)
_assert_detector(detect, {"a healthy draw of your recipe": _control}, {"your draw": _theirs}, "detect",
                 off=_capstone.SWITCHED_OFF + _capstone.PACKAGE_CHECKS)
### BEGIN HIDDEN TESTS
_healthy, _broken = _capstone.grading_draws(_identity.identity(MY_NAME), salt="h-11-v8d", n_broken=1, n_healthy=1)
_assert_detector(detect, _healthy, _broken, "detect (a fresh draw of your bug, a healthy draw)",
                 off=_capstone.SWITCHED_OFF + _capstone.PACKAGE_CHECKS)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_detect_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
from course.exercises import capstone as _capstone, identity as _identity
from course.exercises.grading import assert_detector as _assert_detector

_healthy, _broken = _capstone.grading_draws(_identity.identity(MY_NAME), salt="h-11-d5c")
_broken["your draw"] = _capstone.draw_for(_identity.identity(MY_NAME))
_assert_detector(detect, _healthy, _broken, "detect (fresh draws of your bug, healthy draws)",
                 off=_capstone.SWITCHED_OFF + _capstone.PACKAGE_CHECKS)
### END HIDDEN TESTS

# %% [markdown]
# **Your family, together with your test.** The family of your own draw is one fixed word, and
# anything your notebook runs can read your own draw, so a typed name alone proves no work. The
# hidden test here (2 points, all or nothing) needs both: `my_family()` names your draw's family,
# *and* your `detect` passes one more fresh draw of your bug and one healthy draw of the same recipe.
# A `detect` that fails costs this cell too, besides the two detect cells.

# %% nbgrader={"grade": true, "grade_id": "test_diagnosis_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
from course.exercises import capstone as _capstone, identity as _identity
from course.exercises.grading import assert_detector as _assert_detector, graded_calls as _graded_calls

_OFF = _capstone.SWITCHED_OFF + _capstone.PACKAGE_CHECKS
_family = _graded_calls(lambda _: my_family(), [None], off=_OFF)[0]
_theirs = _capstone.draw_for(_identity.identity(MY_NAME))  # the draw of the id graded (the same draw as mine)
assert _family == _capstone.answer_family(_theirs), f"my_family() answered {_family!r}, which is not the family of your draw"
_healthy, _broken = _capstone.grading_draws(_identity.identity(MY_NAME), salt="h-11-fam", n_broken=1, n_healthy=1)
_assert_detector(detect, _healthy, _broken, "detect, needed with your family (a fresh draw of your bug, a healthy draw)",
                 off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# **Check: the negative control.** Your test on your draw and on its healthy twin (the same settings,
# every part the reference one). This is a check, not a prediction: a `detect` that passes the visible
# test is already quiet on a healthy draw of your recipe. The twin has your draw's own settings, so a
# `True` on it means your test reacts to the settings, not to the bug: fix the test before the fix.

# %%
print(f"detect on your draw: {detect(mine)}; on its healthy twin: {detect(capstone.healthy_twin(mine))}")

# %% [markdown]
# ## 3. The fix
#
# Write `fix(pipe) -> Pipeline`: `pipe` with the broken part replaced by a working one
# (`pipe.replace(part=...)`: the reference parts are the defaults of `course.Pipeline`, or write your
# own), and every other part and setting left as it is: the same objects, the draw's own seeds,
# learning rate and warm-up. A fix that returns a fresh pipeline, or replaces parts that were not
# broken, fails. To find the part, the part swap of notebook 00 works here too: with a test that fails
# on your draw and passes on `capstone.healthy_twin(mine)`, replace one part at a time with its
# reference (`Pipeline()`'s) and test again. Graded by behaviour: applied to your draw and to fresh draws of the same bug, the
# fixed pipeline is trained or run, and your family's check (`capstone.FAMILIES[family].symptom`: for
# most families the check its notebook graded its fix with) must find nothing, on its default
# seed and on another (not the seed 0 of `show`). No stored number is compared.

# %% nbgrader={"grade": false, "grade_id": "fix", "locked": false, "schema_version": 3, "solution": true}
def fix(pipe):
    ### BEGIN SOLUTION
    return pipe.replace(restore=checkpoint.restore_state)  # the reference restore: the cursor too
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_fix", "locked": true, "points": 1, "schema_version": 3, "solution": false}
from course.exercises import capstone as _capstone, identity as _identity, mystery as _mystery

_theirs = _capstone.draw_for(_identity.identity(MY_NAME))
### BEGIN HIDDEN TESTS
_mystery.check_fix(fix, _capstone.fresh_draws(_theirs, salt="h-11-v8f", n=1), _capstone.family_of(_theirs).symptom,
                   "fix (a fresh draw of your bug)", off=_capstone.SWITCHED_OFF + _capstone.PACKAGE_CHECKS)
### END HIDDEN TESTS
_mystery.check_fix(fix, [_theirs], _capstone.family_of(_theirs).symptom, "fix",
                   off=_capstone.SWITCHED_OFF + _capstone.PACKAGE_CHECKS)

# %% nbgrader={"grade": true, "grade_id": "test_fix_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
from course.exercises import capstone as _capstone, identity as _identity, mystery as _mystery

_theirs = _capstone.draw_for(_identity.identity(MY_NAME))
_symptom = _capstone.family_of(_theirs).symptom
_mystery.check_fix(fix, _capstone.fresh_draws(_theirs, salt="h-11-f3e", n=2), lambda p: _symptom(p, 23),
                   "fix (fresh draws of your bug)", off=_capstone.SWITCHED_OFF + _capstone.PACKAGE_CHECKS)
### END HIDDEN TESTS

# %% [markdown]
# ## The loop closed
#
# Your fix on your draw, seen the way you first saw the symptom, and your own test on both:

# %% tags=["demo"]
repaired = fix(mine)
capstone.show(repaired)
print(f"your detect: on your draw {detect(mine)}, on your fixed draw {detect(repaired)}")

# %% [markdown]
# ## Practice: from a symptom to a family
#
# Naming the family is the step every later one rests on, and it takes practice: different families
# can share a symptom. The widget draws more mysteries for your name (practice draws, never graded).
# Pick one, read its symptom, name its family and check. When you are wrong, ask which test would
# have told the two families apart.

# %% tags=["demo"]
capstone.practice_explorer(identity(MY_NAME))

# %% [markdown]
# ## What these tests can and cannot prove
#
# * **The symptom** says which family to suspect, not which bug: the bugs of a family share the
#   symptom `capstone.print_families()` gives for it. Only an intervention that each hypothesis
#   answers differently separates them, with a healthy pipeline as the control.
# * **Your detector** has passed on the draws it was run on: your bug with other seeds and settings,
#   and healthy draws. It says nothing about other bugs of the family, unless you tested it on them.
# * **Your fix** is graded by your family's check, re-run on fresh draws of your bug with
#   every untouched part kept; passing it does not prove the rest of the pipeline healthy.
# * **Practice.** `capstone.draw_for(identity(MY_NAME), attempt=1)` (2, 3, ...) draws another
#   mystery for you, the widget's practice draws: you can run the whole loop on them too. Only
#   attempt 0 is graded.
