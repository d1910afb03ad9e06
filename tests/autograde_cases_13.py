"""Targeted submissions for 13_hangs (see tests/autograde_cases.py for the format).

Every graded exercise has an alternative correct answer (full marks), a realistic wrong answer and a
work-free one (a constant, a delegation to the package, or a route around the evidence), each with
the exact test cells it must lose.
"""
from autograder.grading import Case

A = "13_hangs"
DETECT = {"test_detect", "test_detect_hidden"}
CAUSE = {"test_name_cause", "test_name_cause_hidden"}
PLAN = {"test_plan_shards", "test_plan_shards_hidden"}

# ----- detect -----------------------------------------------------------------------------------------
# Another way: a deadline wait; a job still running after it is hung.
_DETECT_JOIN = """def detect(job):
    try:
        job.join(2.5)
    except hangs.Hung:
        return True
    except RuntimeError:
        return True
    return False
"""

# Realistic wrong: only a mismatch of collectives counts as a hang; a rank stuck outside any collective
# (a barrier never reached, a loader deadlock) leaves sequences that agree.
_DETECT_SEQUENCES = """def detect(job):
    time.sleep(1.0)
    return hangs.agree(job.collectives()) is not None
"""

_DETECT_CONSTANT = """def detect(job):
    return True
"""

# A route around the evidence: read a rank's memory map and command line from /proc (refused in a
# graded call, so the call crashes).
_DETECT_PROC = """def detect(job):
    pid = job.pids()[0]
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return b"hang" in f.read()
"""

# ----- name_cause -------------------------------------------------------------------------------------
# Another way: faulthandler's dumps and the issued collectives.
_CAUSE_FAULTHANDLER = """def name_cause(job):
    end = time.monotonic() + 2.5
    while time.monotonic() < end and any(not r["exited"] and r["idle_s"] < 1.0 for r in job.status()):
        time.sleep(0.1)
    if hangs.agree(job.collectives()) is not None:
        return "collective-skipped"
    dumps = job.stacks("faulthandler")
    return "loader-deadlock" if any("in _tally" in d for d in dumps) else "barrier-unreached"
"""

# Realistic wrong: reads the collectives only, and takes every agreeing hang for a barrier.
_CAUSE_SEQUENCES = """def name_cause(job):
    time.sleep(1.0)
    return "collective-skipped" if hangs.agree(job.collectives()) is not None else "barrier-unreached"
"""

_CAUSE_CONSTANT = """def name_cause(job):
    return "collective-skipped"
"""

# ----- plan_shards ------------------------------------------------------------------------------------
# Another way: pad a short batch with examples from the start (what DistributedSampler does).
_PLAN_PAD = """def plan_shards(n_examples, batch_size, world):
    steps = []
    for start in range(0, n_examples, batch_size):
        batch = list(range(start, min(start + batch_size, n_examples)))
        batch += list(range(world - len(batch))) if len(batch) < world else []
        steps.append([batch[r::world] for r in range(world)])
    return steps
"""

# Realistic wrong: drop the short last batch (drop_last=True): no rank is empty, some examples are never seen.
_PLAN_DROP = """def plan_shards(n_examples, batch_size, world):
    full = n_examples - n_examples % batch_size
    return [[list(range(s, s + batch_size))[r::world] for r in range(world)] for s in range(0, full, batch_size)]
"""

_PLAN_DEFAULT = """def plan_shards(n_examples, batch_size, world):
    return hangs.default_shards(n_examples, batch_size, world)
"""

# Work-free (red team 14): one example per rank per step, wrapping around; no short batch found or
# merged. It ends the hang and uses every example, but trains on batches of 3: the fix must keep the
# batch size (hangs.shard_problems). Scored 3/3 before that rule.
_PLAN_ROUND_ROBIN = """def plan_shards(n_examples, batch_size, world):
    return [[[(k + r) % n_examples] for r in range(world)] for k in range(0, n_examples, world)]
"""

CASES = [
    Case(A, "alt_detect_join", {"detect": _DETECT_JOIN}, set()),
    Case(A, "wrong_detect_sequences", {"detect": _DETECT_SEQUENCES}, DETECT),
    Case(A, "free_detect_constant", {"detect": _DETECT_CONSTANT}, DETECT),
    Case(A, "route_detect_proc", {"detect": _DETECT_PROC}, DETECT),
    Case(A, "alt_cause_faulthandler", {"name_cause": _CAUSE_FAULTHANDLER}, set()),
    Case(A, "wrong_cause_sequences", {"name_cause": _CAUSE_SEQUENCES}, CAUSE),
    Case(A, "free_cause_constant", {"name_cause": _CAUSE_CONSTANT}, CAUSE),
    Case(A, "alt_plan_pad", {"plan_shards": _PLAN_PAD}, set()),
    Case(A, "wrong_plan_drop_last", {"plan_shards": _PLAN_DROP}, PLAN),
    Case(A, "free_plan_default", {"plan_shards": _PLAN_DEFAULT}, PLAN),
    Case(A, "free_plan_round_robin", {"plan_shards": _PLAN_ROUND_ROBIN}, PLAN),
]
