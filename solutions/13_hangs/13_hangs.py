# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (debug course)
#     language: python
#     name: debug-course
# ---

# %% [markdown]
# # 13 · A job that hangs: ranks stop making progress, and nothing says why
#
# **What you learn.**
# * Tell a hang from a slow job by *progress per rank*, with a deadline on every wait you make.
# * Dump the stack of every rank, with `py-spy dump --pid` and with `faulthandler`: where each rank
#   waits is the evidence.
# * Check that the ranks agree on the sequence of collectives they issued.
# * Turn a hang into an error that names the collective, with the process group's timeout.
# * **Mystery:** a job drawn from four candidates (healthy, or one of three hangs): write a detector
#   that decides within a time budget, name the cause from the evidence, and fix the data plan that
#   makes one of them hang, graded on jobs you have not seen.
#
# The jobs are real: 3 `torch.distributed` ranks (gloo, 3 processes on this machine) train a small
# linear model data-parallel, forked by a *launcher* process that `course.lessons.hangs` starts once.
# Every job has a handle; `job.close()` ends its ranks. (Stas Bekman's *Machine Learning Engineering*,
# its chapters on debugging hangs, is the source of the three hangs and of the tools.)
#
# **Predict, then reveal.** Before each result that is the lesson, a *Predict* cell asks you to write
# your guess into `prediction`; the cell after it prints your guess beside what was measured.
#
# **Time.** Under a minute on a laptop CPU. **GPU:** not needed anywhere.

# %%
import time

import matplotlib.pyplot as plt

from course.exercises.record import reveal
from course.lessons import hangs

launcher = hangs.launcher()  # the process the ranks are forked from: it imports torch once (a few seconds)
print("launcher running:", launcher.alive())

# %% [markdown]
# ## The symptom
#
# A job starts. We look at it the way a dashboard does, once every 0.2 s for 2 s: the last step each
# rank finished. Every wait below has a deadline: nothing in this notebook waits on a rank without one.

# %% tags=["demo"]
job = hangs.draw(7)  # a job; what (if anything) is wrong with it is the question
print(job)
rows = []
for _ in range(10):
    time.sleep(0.2)
    rows.append([r["step"] for r in job.status()])
print("last finished step per rank after 2 s:", rows[-1], "| changed during the last second:", rows[4] != rows[-1])

# %% [markdown]
# No rank has failed and none has exited: the status says so per rank.

# %% tags=["demo"]
from torch.distributed.constants import default_pg_timeout

for r in job.status():
    print(f"rank {r['rank']}: step {r['step']}, idle for over a second {r['idle_s'] > 1}, exited {r['exited']}, error {r['error']}")
print("PyTorch's default process-group timeout:", default_pg_timeout)

# %% [markdown]
# **Predict.** The process group was created with a timeout of 300 s (`hangs.start`'s default; PyTorch's
# own is printed above). If we wait another 2 s with a deadline, does the job finish, fail with an
# error, or neither? Write `"finish"`, `"error"` or `"neither"`.

# %%
prediction = None  # your guess: "finish", "error" or "neither"

# %% tags=["demo"]
try:
    job.join(2.0)
    outcome = "finish"
except hangs.Hung as err:
    outcome, message = "neither", str(err)
except RuntimeError:
    outcome = "error"
reveal("after 2 more seconds", prediction, outcome)

# %% [markdown]
# Neither: a hang gives no error until a timeout fires, and `join` raised `Hung` at its own deadline
# instead of waiting forever. Its message is the clear failure a stuck cell should give:

# %% tags=["demo"]
print(message)

# %% [markdown]
# Beside it, a healthy job of the same size (the negative control for every check that follows):
# it finishes, and its ranks finish every step.

# %% tags=["demo"]
control = hangs.start("healthy", seed=7)
control.join(30)
print(control, [r["step"] for r in control.status()], "finished:", control.finished())

# %% [markdown]
# Progress over wall time, per rank, for both: each point is a step a rank finished. The stuck
# job's ranks stop together; the red dotted line marks the last step any of its ranks finished.

# %% tags=["demo"]
fig, ax = plt.subplots(figsize=(7, 3.2))
for name, j, style in (("healthy", control, "-"), ("stuck", job, "--")):
    for rank, points in enumerate(j.timeline()):
        if points:
            ax.plot([t for t, _ in points], [s for _, s in points], style, marker=".", label=f"{name}, rank {rank}")
stall = max(t for points in job.timeline() for t, _ in points)
ax.axvline(stall, color="red", linestyle=":", label="stuck job: last step finished")
ax.set_xlabel("seconds since the job's first event")
ax.set_ylabel("last step finished")
ax.set_title("progress per rank")
ax.legend(fontsize=7, ncol=2)
plt.show()

# %% [markdown]
# ## Hypotheses
#
# Three causes give this symptom, all from Bekman's chapter:
# 1. **A collective some ranks skip** under a data-dependent branch (empty shards of an uneven last
#    batch): those ranks move on to the *next* collective, the others wait in this one.
# 2. **A barrier some ranks never reach**: they wait, outside any collective, for something that
#    another rank does only after the barrier, while that rank waits in it.
# 3. **A data-loading worker that deadlocks**: one rank waits for a batch that never comes; the others
#    wait for it in the next collective.
#
# Each predicts a different *place* where each rank waits. So the first test is to look.

# %% [markdown]
# ## Test 1: every rank's stack
#
# `job.stacks()` runs `py-spy dump --pid` on each rank (py-spy reads a process's memory from outside;
# the rank does not have to cooperate). `hangs.brief` keeps each thread's innermost frame and its
# three innermost frames in the course's own code. A thread's `(idle)` or `(active)` is the state py-spy read for it
# at the instant of the dump: a rank that waits by polling (a short sleep in a loop, as the ranks that
# never reach the barrier would under hypothesis 2) can show either flag from one dump to the next, so
# read where each rank waits, not that flag.

# %% tags=["demo"]
stacks = job.stacks()
for rank, text in enumerate(stacks):
    print(f"--- rank {rank}\n{hangs.brief(text)}")

# %% [markdown]
# **Predict.** Which hypothesis do these stacks fit: 1, 2 or 3?

# %%
prediction = None  # your guess: 1, 2 or 3

# %% tags=["demo"]
in_collective = {rank: ("all_reduce" if "all_reduce (torch/distributed" in s else "barrier" if "barrier (torch/distributed" in s else "none")
                 for rank, s in enumerate(stacks)}
reveal("where each rank waits", prediction, in_collective)

# %% [markdown]
# Hypothesis 1: every rank is inside a collective, but not the same one. Some wait in the step's
# `all_reduce`; the others are already in the final `barrier`. The control: the healthy job has no stack
# to show (its ranks exited), and it finished every collective it issued.

# %% tags=["demo"]
print([hangs.brief(s) for s in control.stacks()])

# %% [markdown]
# The second route to the same evidence is Python's own `faulthandler`: every rank registered
# `faulthandler.register(SIGUSR1, all_threads=True)`, and `job.stacks("faulthandler")` sends the
# signal and reads what the handler wrote (innermost call first, the same frames as py-spy's; `brief`
# reads both formats). It works without ptrace permission, but only in a process that set it up
# before it got stuck.

# %% tags=["demo"]
print(hangs.brief(job.stacks("faulthandler")[2]))

# %% [markdown]
# `faulthandler` can also watch: `faulthandler.dump_traceback_later(t)`, re-armed after every step,
# writes every thread's stack if the rank finishes no step for `t` seconds, with no one asking (what
# you want in a job nobody is watching). `hangs.start(..., watchdog_s=1)` arms it in every rank:

# %% tags=["demo"]
watched = hangs.start("collective-skipped", seed=7, watchdog_s=1.0)
time.sleep(2.0)
for rank, dump in enumerate(watched.watchdog()):
    print(f"--- rank {rank}: {dump.splitlines()[0] if dump else 'nothing written'}\n{hangs.brief(dump, keep=1)}")
watched.close()

# %% [markdown]
# ## Test 2: do the ranks agree on the collectives they issued?
#
# The training loop records, in each rank, every collective *before* issuing it. Ranks agree when
# each rank's sequence is a prefix of the longest one; `hangs.agree` returns the first position
# where they differ.

# %% tags=["demo"]
sequences = job.collectives()
first = hangs.agree(sequences)
print("first disagreement at position", first, "->", [s[first] if first < len(s) else None for s in sequences])
print("healthy control:", hangs.agree(control.collectives()), "(None: they agree)")

# %% [markdown]
# At that position some ranks issued the last step's `all_reduce` and the others the final `barrier`:
# they skipped the step's `all_reduce`. The settings say why they could: the last global batch holds
# fewer examples than there are ranks, so a rank's shard (its stride of the batch) can be empty.

# %% tags=["demo"]
last = job.n_examples % job.batch_size
print(f"{job.n_examples} examples in batches of {job.batch_size}: the last batch holds {last} "
      f"example{'s' * (last != 1)} for {job.world} ranks")

# %% [markdown]
# ## Test 3: a timeout that names the collective
#
# The same job with a process-group timeout of 2 s (`init_process_group(timeout=...)`): the waiting
# collectives fail instead of waiting forever, and the training loop's record turns the error into
# one that says which collective, at which step, on which rank. gloo's own message (cut off below) says
# only that a send or a receive timed out, or that a peer closed its connection.

# %% tags=["demo"]
timed = hangs.start("collective-skipped", seed=7, timeout_s=2)
end = time.monotonic() + 20  # a deadline on this wait too
while not all(r["exited"] for r in timed.status()) and time.monotonic() < end:
    time.sleep(0.1)
for r in timed.status():  # each rank's error, up to gloo's own message (in brackets)
    print(f"exit code {r['code']}:", (r["error"] or "no error").split(": [")[0])
timed.close()

# %% [markdown]
# A timeout turns a hang into an error; it does not say *why* the peers never came, and set too short
# it fails healthy jobs that are merely slow (a long checkpoint, a slow first step). Set it above the
# slowest healthy wait, and dump the stacks before the job is killed.

# %% tags=["demo"]
job.close()
control.close()

# %% [markdown]
# ## The other two hangs, and an explorer
#
# The explorer below shows, for a healthy job and one job of each hang, the evidence of the tests above:
# progress, the last collective each rank issued, and each rank's stack. Compare where the ranks
# wait. Its text form (shown where widgets do not run) lists all four.

# %% tags=["demo"]
import html

import ipywidgets as widgets

from course.toolkit.textview import with_text

examples = {"healthy": 11, "collective-skipped": 12, "barrier-unreached": 13, "loader-deadlock": 14}
evidence = {}
with hangs.Batch() as shown:
    started = {kind: shown.start(kind, seed=seed) for kind, seed in examples.items()}
    time.sleep(1.5)
    for kind, j in started.items():
        steps = [r["step"] for r in j.status()]
        last = [s[-1] if s else None for s in j.collectives()]
        where = [hangs.brief(s, keep=2) for s in j.stacks()]
        evidence[kind] = (f"{kind}: last step finished per rank {steps} (steps 0 to {j.steps - 1}); "
                          f"last collective issued {last}\n"
                          + "\n".join(f"  rank {r}: " + w.replace("\n", "\n    ") for r, w in enumerate(where)))
choice, view = widgets.Dropdown(options=list(evidence), description="job"), widgets.Output()


def show(change=None):  # the Output's contents set directly: nothing is printed to the cell itself
    view.outputs = ({"output_type": "stream", "name": "stdout", "text": evidence[choice.value] + "\n"},)


choice.observe(show, names="value")
show()
with_text(widgets.VBox([choice, view]), lambda: "\n\n".join(evidence.values()))

# %% [markdown]
# * **Barrier never reached**: rank 0 waits in the checkpoint's `barrier`; the others wait in
#   `_wait_for_checkpoint` for a file rank 0 writes only after the barrier. No collective differs: the
#   polling ranks are outside any collective.
# * **Loader deadlock**: one rank's main thread waits in `_Loader.next_batch` for a batch (in the queue's `get`, below the
#   frames `brief` keeps), and its `data-worker` thread in
#   `_tally`, on the lock the worker itself holds; the others wait in the step's `all_reduce`.
# * **Healthy**: every rank exited; nothing to dump.

# %% [markdown]
# ## The mystery
#
# A job drawn by seed: healthy, or one of the three hangs, with the same kind of settings either way
# (the handle's fields and repr say nothing about which). Here are five; yours to investigate.

# %%
MYSTERY_SEEDS = (1, 2, 3, 6, 8)
print(f"draw one with hangs.draw(seed), seed in {MYSTERY_SEEDS}; close each job you draw with job.close()")

# %% [markdown]
# ### (a) Does it hang? (3 points)
#
# Write `detect(job) -> bool`: `True` when the job hangs, `False` when it finishes.
#
# * **The budget.** Return within `job.budget_s` seconds (4 s): a call that takes longer than that
#   plus 3 s is cut off and fails the cell. Never wait for a hung job to end: wait with a deadline
#   (`job.join(timeout)`, or poll `job.status()`).
# * **The noise.** A healthy job finishes all its steps in well under a second on an idle laptop, and
#   a step takes milliseconds; on a busy machine a healthy rank can pause for a few tenths of a second.
#   A hung job stops at a step that depends on the hang and the draw (a skipped collective at the last
#   step, the other two anywhere before it) and finishes no step after it.
# * Graded by mutation: quiet on healthy jobs, firing on hung ones, including jobs with other settings
#   and seeds you have not seen. Return a `bool`. Do not close the job (the grader does).

# %% nbgrader={"grade": false, "grade_id": "detect", "locked": false, "schema_version": 3, "solution": true}
def detect(job):
    ### BEGIN SOLUTION
    end = time.monotonic() + job.budget_s - 0.5
    while time.monotonic() < end:
        status = job.status()
        if all(r["exited"] for r in status):
            return any(r["code"] != 0 for r in status)
        if any(not r["exited"] and r["idle_s"] > 1.5 for r in status):
            return True
        time.sleep(0.05)
    return True
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_detect", "locked": true, "points": 1, "schema_version": 3, "solution": false}
from course.exercises.grading import assert_detector
from course.lessons import hangs as _hangs

with _hangs.Batch() as _jobs:
    _draws = {f"mystery {s}": (_hangs.draw_kind(s), _jobs.draw(s)) for s in (1, 2, 3, 6, 8)}
    assert_detector(_hangs.within_budget(detect),
                    healthy={k: j for k, (kind, j) in _draws.items() if kind == "healthy"},
                    broken={k: j for k, (kind, j) in _draws.items() if kind != "healthy"}, what="hang detector")
### BEGIN HIDDEN TESTS
with _hangs.Batch() as _jobs:
    assert_detector(_hangs.within_budget(detect),
                    healthy={"a fresh healthy job": _jobs.start("healthy", seed=40, salt="h13-v7k")},
                    broken={"a fresh hung job": _jobs.start("loader-deadlock", seed=41, salt="h13-v7k")},
                    what="hang detector")
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: healthy and hung jobs with fresh settings and seeds.

# %% nbgrader={"grade": true, "grade_id": "test_detect_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
from course.exercises.grading import assert_detector
from course.lessons import hangs as _hangs

with _hangs.Batch() as _jobs:
    assert_detector(_hangs.within_budget(detect),
                    healthy={f"hidden healthy job {i}": _jobs.start("healthy", seed=50 + i, salt="h13-d2m") for i in range(2)},
                    broken={f"hidden hung job {i}": _jobs.start(kind, seed=60 + i, salt="h13-d2m")
                            for i, kind in enumerate(_hangs.CAUSES)},
                    what="hang detector")
### END HIDDEN TESTS

# %% [markdown]
# ### (b) Name the cause (3 points)
#
# Write `name_cause(job) -> str` for a job that hangs: `"collective-skipped"`, `"barrier-unreached"`
# or `"loader-deadlock"`. Use the evidence of the tests above: where each rank waits
# (`job.stacks()`, py-spy or faulthandler) and the collectives each rank issued (`job.collectives()`).
# The same budget holds (4 s; a job just started may not be stuck yet: wait until no rank makes
# progress before you look). Graded on hung jobs of every cause with fresh settings and seeds.

# %% nbgrader={"grade": false, "grade_id": "name_cause", "locked": false, "schema_version": 3, "solution": true}
def name_cause(job):
    ### BEGIN SOLUTION
    # look again until the stacks show one cause's signature: on a loaded machine a rank can
    # still be on its way to where it will wait when the job first looks idle
    end = time.monotonic() + 3.5
    while time.monotonic() < end:
        if all(r["idle_s"] > 1.0 for r in job.status()):
            stacks = job.stacks()
            if any("_wait_for_checkpoint" in s for s in stacks):
                return "barrier-unreached"
            if any("Queue.get" in s for s in stacks):
                return "loader-deadlock"
            if any("_Collectives.barrier" in s for s in stacks):
                return "collective-skipped"
        time.sleep(0.1)
    return "collective-skipped"
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_name_cause", "locked": true, "points": 1, "schema_version": 3, "solution": false}
from course.exercises.grading import assert_names
from course.lessons import hangs as _hangs

with _hangs.Batch() as _jobs:
    assert_names(_hangs.within_budget(name_cause),
                 {f"mystery {s}": (_jobs.draw(s), _hangs.draw_kind(s)) for s in (1, 3, 8)},
                 what="diagnosis", show_expected=True)
### BEGIN HIDDEN TESTS
with _hangs.Batch() as _jobs:
    assert_names(_hangs.within_budget(name_cause),
                 {"a fresh hung job": (_jobs.start("barrier-unreached", seed=42, salt="h13-v7k"), "barrier-unreached"),
                  "another fresh hung job": (_jobs.start("collective-skipped", seed=43, salt="h13-v7k"), "collective-skipped")},
                 what="diagnosis")
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: hung jobs of every cause, fresh settings and seeds.

# %% nbgrader={"grade": true, "grade_id": "test_name_cause_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
from course.exercises.grading import assert_names
from course.lessons import hangs as _hangs

with _hangs.Batch() as _jobs:
    assert_names(_hangs.within_budget(name_cause),
                 {f"hidden hung job {i}": (_jobs.start(kind, seed=70 + i, salt="h13-n4p"), kind)
                  for i, kind in enumerate(_hangs.CAUSES + ("loader-deadlock",))},
                 what="diagnosis")
### END HIDDEN TESTS

# %% [markdown]
# ### (c) The fix (3 points)
#
# The collective is skipped because the default data plan (`hangs.default_shards`) gives a rank an
# empty shard when the last global batch holds fewer examples than ranks. Fix the plan, not the
# symptom: write `plan_shards(n_examples, batch_size, world)`, returning per step a list of `world`
# lists of example ids (ints in `range(n_examples)`), such that
#
# * no rank's shard is empty at any step (so the branch that skips the collective is never taken),
# * every example is trained on at least once and none more than twice (what was not broken is kept:
#   the job still sees all its data; padding by repeating a few examples is allowed, as
#   `DistributedSampler` does),
# * every step but the last holds `batch_size` examples, and none holds more than `batch_size + world`
#   (the job keeps its batch size: a plan of a few examples per step would also end the hang, and
#   change how the job trains).
#
# Graded by running the job that hangs with your plan on fresh settings and seeds: it must finish, and
# the ids its ranks trained on must satisfy the list above.

# %% nbgrader={"grade": false, "grade_id": "plan_shards", "locked": false, "schema_version": 3, "solution": true}
def plan_shards(n_examples, batch_size, world):
    ### BEGIN SOLUTION
    ids = list(range(n_examples))
    batches = [ids[i:i + batch_size] for i in range(0, n_examples, batch_size)]
    if len(batches) > 1 and len(batches[-1]) < world:
        last = batches.pop()
        batches[-1] = batches[-1] + last  # merge a short last batch into the one before
    return [[b[r::world] for r in range(world)] for b in batches]
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_plan_shards", "locked": true, "points": 1, "schema_version": 3, "solution": false}
from course.exercises.grading import graded_calls
from course.lessons import hangs as _hangs


def _check_plan(seed, salt=""):
    with _hangs.Batch() as jobs:
        broken = jobs.start("collective-skipped", seed=seed, salt=salt)
        n, batch, world = broken.n_examples, broken.batch_size, broken.world
        [plan] = graded_calls(lambda args: plan_shards(*args), [(n, batch, world)])
        problems = _hangs.shard_problems(plan, n, batch, world)
        assert not problems, f"the plan for {n} examples, batch {batch}, {world} ranks: " + "; ".join(problems)
        fixed = jobs.start("collective-skipped", seed=seed, salt=salt, shards=plan)
        fixed.join(30)
        seen = sorted(set(i for rank in fixed.examples_seen() for i in rank))
        assert seen == list(range(n)), "the fixed job did not train on every example"


for _seed in (1, 7):
    _check_plan(_seed)
### BEGIN HIDDEN TESTS
_check_plan(44, "h13-v7k")
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: the job that hangs, fixed by your plan, on fresh settings and seeds.

# %% nbgrader={"grade": true, "grade_id": "test_plan_shards_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
from course.exercises.grading import graded_calls
from course.lessons import hangs as _hangs


def _check_plan(seed, salt=""):
    with _hangs.Batch() as jobs:
        broken = jobs.start("collective-skipped", seed=seed, salt=salt)
        n, batch, world = broken.n_examples, broken.batch_size, broken.world
        [plan] = graded_calls(lambda args: plan_shards(*args), [(n, batch, world)])
        problems = _hangs.shard_problems(plan, n, batch, world)
        assert not problems, f"the plan for {n} examples, batch {batch}, {world} ranks: " + "; ".join(problems)
        fixed = jobs.start("collective-skipped", seed=seed, salt=salt, shards=plan)
        fixed.join(30)
        seen = sorted(set(i for rank in fixed.examples_seen() for i in rank))
        assert seen == list(range(n)), "the fixed job did not train on every example"


for _seed in (80, 81, 82):
    _check_plan(_seed, "h13-f5r")
### END HIDDEN TESTS

# %% [markdown]
# ## What each test can and cannot prove
#
# * **Progress per rank, with a deadline** tells a job that stopped from one that finished. It cannot
#   tell a hang from a rank slower than your deadline: the deadline must be above the slowest healthy
#   step.
# * **Every rank's stack** (py-spy from outside, faulthandler from inside) shows where each rank waits,
#   which separates the three causes here. It shows *where*, not *why*: reading why is your job. py-spy
#   needs permission to read the process (ptrace); faulthandler needs the process to have registered it.
# * **The sequence of issued collectives** proves a mismatch when two ranks issued different
#   collectives at the same position. Agreement does not prove health: a rank stuck outside any
#   collective (a barrier never reached, a loader deadlock) leaves sequences that agree.
# * **A process-group timeout** turns a hang into an error; it does not find the cause, and a timeout
#   below the slowest healthy wait fails healthy jobs.
# * **The fix** here removes the empty shard; a rank-side fix (always issue the collective, with a
#   zero contribution) would remove the branch itself. Either is checked the same way: the job that
#   hung now finishes, on every example.
