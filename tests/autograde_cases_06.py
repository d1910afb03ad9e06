"""Targeted submissions for 06_throughput (see tests/autograde_cases.py for the format).

Every graded exercise has an alternative correct answer (full marks), a realistic wrong answer and a
degenerate one (a constant, a delegation to the package function that is switched off, or one that
reads the pipeline's parts), each with the exact test cells it must lose. ``fix`` calls the
learner's ``name_cause``, so a wrong ``name_cause`` loses the fix cell too.
"""
from autograder.grading import Case

A = "06_throughput"
SNAP, DETECT, CAUSE, FIX = "test_take_snapshot", "test_mystery_detect", "test_mystery_cause", "test_mystery_fix"

# ----- take_snapshot --------------------------------------------------------------------------------
# Another way to copy at the step: serialise on the training thread and read it back.
_SNAP_SERIALISE = """import copy
import io

def take_snapshot(model, optimizer):
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)
"""

# Realistic wrong: the weights are copied, the optimizer's state dict is handed over live (its
# moments and step counters keep changing under the writer).
_SNAP_MODEL_ONLY = """import copy

def take_snapshot(model, optimizer):
    return {"model": {k: v.clone() for k, v in model.state_dict().items()}, "optimizer": optimizer.state_dict()}
"""

# Realistic wrong: .detach() makes a new tensor that shares the parameter's storage.
_SNAP_DETACH = """import copy

def take_snapshot(model, optimizer):
    return {"model": {k: v.detach() for k, v in model.state_dict().items()},
            "optimizer": copy.copy(optimizer.state_dict())}
"""

_SNAP_DELEGATES = """import copy

def take_snapshot(model, optimizer):
    return throughput.snapshot(model, optimizer)
"""

# ----- detect -----------------------------------------------------------------------------------------
# Another rule: whole-step times against the baseline's median, or a phase whose median after the
# first steps is more than twice the baseline's.
_DETECT_ALT = """def detect(pipe):
    run, ref = throughput.traced(pipe), throughput.traced(MBASE)
    typical = statistics.median(throughput.step_times(ref))
    slow_steps = sum(t > 1.6 * typical for t in throughput.step_times(run)[1:])
    raised = any(statistics.median(run.phases[p][8:]) > 2 * statistics.median(ref.phases[p]) + 5e-4 for p in PHASES)
    return bool(slow_steps >= 4 or raised)
"""

# Realistic wrong: compares the run with its own median, no healthy baseline: a slowdown present from
# the first step (evaluation every step, a logger that synchronises) is invisible.
_DETECT_SELF = """def detect(pipe):
    times = throughput.step_times(throughput.traced(pipe))
    typical = statistics.median(times)
    return sum(t > 1.8 * typical for t in times[1:]) >= 3
"""

_DETECT_DELEGATES = """def detect(pipe):
    return bool(throughput.regressions(throughput.traced(pipe), throughput.traced(MBASE)))
"""

# ----- name_cause -------------------------------------------------------------------------------------
_NAME_ALT = """def name_cause(pipe):
    run, ref = throughput.traced(pipe), throughput.traced(MBASE)
    labels = {"data": "data", "eval": "eval", "ckpt": "checkpoint", "log": "logging"}
    excess = {}
    for phase, label in labels.items():
        r = statistics.median(ref.phases[phase])
        over = [t - r for t in run.phases[phase] if t - r > 2e-3 + 2 * r]
        excess[label] = sum(over) if len(over) >= 3 else 0.0
    best = max(excess, key=excess.get)
    return best if excess[best] > 0 else "healthy"
"""

# Realistic wrong: the run compared with itself (its own median per phase): constant slowdowns look
# healthy.
_NAME_SELF = """def name_cause(pipe):
    run = throughput.traced(pipe)
    labels = {"data": "data", "eval": "eval", "ckpt": "checkpoint", "log": "logging"}
    for phase, label in labels.items():
        typical = statistics.median(run.phases[phase])
        if sum(t > 3 * typical + 1e-3 for t in run.phases[phase]) >= 4:
            return label
    return "healthy"
"""

# Degenerate: reads the parts' reprs and types (every part is an opaque <part>).
_NAME_READS_PARTS = """def name_cause(pipe):
    if "Checkpoint" in repr(pipe.checkpoint):
        return "checkpoint"
    if "Stalling" in repr(pipe.batches) or "quadratic" in repr(pipe.collate):
        return "data"
    if type(pipe.log_step).__name__ != "function":
        return ["healthy", "logging"][len(repr(pipe)) % 2]
    return "healthy"
"""

_NAME_DELEGATES = """def name_cause(pipe):
    return throughput.slow_phase(throughput.traced(pipe), throughput.traced(MBASE))
"""

# ----- fix --------------------------------------------------------------------------------------------
# Tries the batch stream first for a slow data phase, and names the references through their module.
_FIX_ALT = """import course.toolkit.phases
from course.toolkit.batch import next_token_batch

def fix(pipe):
    cause = name_cause(pipe)
    if cause == "data":
        trial = pipe.replace(batches=None)
        return trial if name_cause(trial) == "healthy" else pipe.replace(collate=next_token_batch)
    field, value = {"checkpoint": ("checkpoint", course.toolkit.phases.no_checkpoint),
                    "eval": ("eval_due", course.toolkit.phases.eval_on_schedule),
                    "logging": ("log_step", course.toolkit.phases.log_nothing)}.get(cause, (None, None))
    return pipe if field is None else pipe.replace(**{field: value})
"""

# Realistic wrong: a slow data phase "fixed" by replacing both data parts without testing which one
# is broken (changes a part that was not broken).
_FIX_BOTH_DATA_PARTS = """from course.toolkit.batch import next_token_batch
from course.toolkit.phases import eval_on_schedule, log_nothing, no_checkpoint

def fix(pipe):
    cause = name_cause(pipe)
    if cause == "checkpoint":
        return pipe.replace(checkpoint=no_checkpoint)
    if cause == "eval":
        return pipe.replace(eval_due=eval_on_schedule)
    if cause == "logging":
        return pipe.replace(log_step=log_nothing)
    if cause == "data":
        return pipe.replace(batches=None, collate=next_token_batch)
    return pipe
"""

_FIX_FRESH_PIPELINE = """def fix(pipe):
    return MBASE
"""

CASES = [
    # take_snapshot
    Case(A, "snapshot_serialised", {"take_snapshot": _SNAP_SERIALISE}, set()),
    Case(A, "snapshot_model_only", {"take_snapshot": _SNAP_MODEL_ONLY}, {SNAP}),
    Case(A, "snapshot_detach", {"take_snapshot": _SNAP_DETACH}, {SNAP}),
    Case(A, "snapshot_delegates", {"take_snapshot": _SNAP_DELEGATES}, {SNAP}),
    # detect
    Case(A, "detect_other_rule", {"detect": _DETECT_ALT}, set()),
    Case(A, "detect_against_itself", {"detect": _DETECT_SELF}, {DETECT}),
    Case(A, "detect_always_true", {"detect": "def detect(pipe):\n    return True\n"}, {DETECT}),
    Case(A, "detect_delegates", {"detect": _DETECT_DELEGATES}, {DETECT}),
    # name_cause (fix calls it)
    Case(A, "cause_other_rule", {"name_cause": _NAME_ALT}, set()),
    Case(A, "cause_against_itself", {"name_cause": _NAME_SELF}, {CAUSE, FIX}),
    Case(A, "cause_reads_parts", {"name_cause": _NAME_READS_PARTS}, {CAUSE, FIX}),
    Case(A, "cause_delegates", {"name_cause": _NAME_DELEGATES}, {CAUSE, FIX}),
    # fix
    Case(A, "fix_batches_first", {"fix": _FIX_ALT}, set()),
    Case(A, "fix_both_data_parts", {"fix": _FIX_BOTH_DATA_PARTS}, {FIX}),
    Case(A, "fix_returns_pipe", {"fix": "def fix(pipe):\n    return pipe\n"}, {FIX}),
    Case(A, "fix_fresh_pipeline", {"fix": _FIX_FRESH_PIPELINE}, {FIX}),
]
