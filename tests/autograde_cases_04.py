"""Targeted submissions for notebook 04 (format: tests/autograde_cases.py).

The alert policy's ``observe`` is graded by behaviour on hidden sequences: a policy that always
alerts or never alerts loses every cell; a non-finite path that obeys the cooldown loses the visible
cell (two non-finite steps in a row) and the non-finite cell; a cooldown shared by all kinds loses the
visible cell (a throughput drop and a validation gap on neighbouring steps) and the cooldown cell; an ``observe`` that
delegates to ``AlertPolicy.observe`` (kept in a variable before the test) loses every cell, because the reference is switched off while the tests run it.

The mystery exercise (``detect``, ``name_cause``, ``fix``): each has an alternative correct answer
written differently (full marks), a realistic wrong answer and a degenerate one (constant, reading
the pipeline's repr, delegating to a package function that is switched off, or returning a fresh
pipeline). ``name_cause`` in the solution uses ``first_spike`` from the detect cell, so every detect
case below keeps a working ``first_spike``; the alternative answers do not lean on other answer
cells, so a packed submission that breaks another exercise cannot cost them points.
"""
from autograder.grading import Case

A = "04_late_spike"
OBSERVE_TESTS = {"test_observe_visible", "test_observe_cooldown", "test_observe_nonfinite"}
DETECT_TESTS = {"test_detect", "test_detect_hidden"}
NAME_TESTS = {"test_name_cause", "test_name_cause_hidden"}
FIX_TESTS = {"test_fix", "test_fix_hidden"}

_HEADER = "from course.toolkit.alerts import Alert, AlertPolicy\n\n\n"

# ----- observe --------------------------------------------------------------------------------------
_NONFINITE_OBEYS_COOLDOWN = _HEADER + """def observe(policy, step, loss=None, grad_norm=None, tokens_per_s=None, val_loss=None):
    values = dict(loss=loss, grad_norm=grad_norm, tokens_per_s=tokens_per_s, val_loss=val_loss)
    bad = policy.non_finite(**values)
    if bad:
        alert = Alert(step, "non-finite", fields=bad)
        if policy.in_cooldown(alert):
            return []
        policy.record_fired(alert)
        return [alert]
    fired = [a for a in policy.candidates(step, **values) if not policy.in_cooldown(a)]
    for a in fired:
        policy.record_fired(a)
    policy.update(**values)
    return fired
"""

_SHARED_COOLDOWN = _HEADER + """def observe(policy, step, loss=None, grad_norm=None, tokens_per_s=None, val_loss=None):
    values = dict(loss=loss, grad_norm=grad_norm, tokens_per_s=tokens_per_s, val_loss=val_loss)
    bad = policy.non_finite(**values)
    if bad:
        return [Alert(step, "non-finite", fields=bad)]
    recent = any(step - last < policy.cooldown for last in policy.last_fired.values())
    fired = [] if recent else policy.candidates(step, **values)
    for a in fired:
        policy.record_fired(a)
    policy.update(**values)
    return fired
"""

_OBSERVE_ALT = _HEADER + """import math


def observe(policy, step, loss=None, grad_norm=None, tokens_per_s=None, val_loss=None):
    given = {"loss": loss, "grad_norm": grad_norm, "tokens_per_s": tokens_per_s, "val_loss": val_loss}
    culprits = tuple(name for name, v in given.items() if v is not None and not math.isfinite(v))
    if culprits:                      # quarantined: one alert, no state touched, no cooldown
        return [Alert(step, "non-finite", fields=culprits)]
    out = []
    for alert in policy.candidates(step, **given):
        last = policy.last_fired.get(alert.kind)
        if last is None or step - last >= policy.cooldown:
            policy.last_fired[alert.kind] = step
            out.append(alert)
    policy.update(**given)
    return out
"""

_OBSERVE_SAVED_REFERENCE = _HEADER + """_orig = AlertPolicy.observe


def observe(policy, step, loss=None, grad_norm=None, tokens_per_s=None, val_loss=None):
    return _orig(policy, step, loss=loss, grad_norm=grad_norm, tokens_per_s=tokens_per_s, val_loss=val_loss)
"""

# A copy of the reference made before the test (red team, issue 31): switching AlertPolicy.observe off
# replaces that function's code, never a copy's, so the guard refuses the copy in the answer cell.
_OBSERVE_COPIED_REFERENCE = _HEADER + """import types as _types

_f = AlertPolicy.observe
_copy = _types.FunctionType(_f.__code__, _f.__globals__, _f.__name__, _f.__defaults__, _f.__closure__)
_copy.__kwdefaults__ = _f.__kwdefaults__


def observe(policy, step, loss=None, grad_norm=None, tokens_per_s=None, val_loss=None):
    return _copy(policy, step, loss=loss, grad_norm=grad_norm, tokens_per_s=tokens_per_s, val_loss=val_loss)
"""

# ----- detect ---------------------------------------------------------------------------------------
_FIRST_SPIKE = """import statistics


def first_spike(losses, ratio=1.4, window=10):
    for s in range(window, len(losses)):
        if losses[s] > ratio * statistics.median(losses[s - window:s]):
            return s
    return None


"""

_DETECT_ALT = _FIRST_SPIKE + """import torch
from course.reference.train import start, train_steps


def detect(pipe):
    try:  # a pipeline that crashes under the test is broken (the exercise's rule)
        run = train_steps(start(pipe, 5), 75, eval_every=0)
    except Exception:
        return True
    losses = torch.tensor(run.history["loss"])
    recent = losses.unfold(0, 10, 1)[:-1].median(dim=1).values   # the 10 steps before each step from 10 on
    return (losses[10:] > 1.4 * recent).any()                     # a torch bool
"""

_DETECT_TOKEN_SHARE = _FIRST_SPIKE + """import torch
from course.reference.train import batch_at


def detect(pipe):   # looks at the data only: catches a flooded shard, nothing else
    for i in range(75):
        inputs = batch_at(pipe, 0, i).inputs
        if torch.bincount(inputs.reshape(-1)).max().item() > 0.5 * inputs.numel():
            return True
    return False
"""

_DETECT_LOGGED_LR = _FIRST_SPIKE + """from course.reference.train import start, train_steps


def detect(pipe):   # the logged learning rate is the scheduler's: it never jumps
    lr = train_steps(start(pipe, 0), 75, eval_every=0).history["lr"]
    return any(b > 1.5 * a for a, b in zip(lr, lr[1:]))
"""

_DETECT_REPR = _FIRST_SPIKE + """def detect(pipe):
    return "<part>" in repr(pipe)
"""

_DETECT_DELEGATES = _FIRST_SPIKE + """from course.lessons.replay import spike_alerts


def detect(pipe):
    return len(spike_alerts(pipe)) > 0
"""

# ----- name_cause -----------------------------------------------------------------------------------
_NAME_ALT = """import statistics
import torch
from course.reference.train import batch_at, start, train_steps


def _spiky(losses):
    return any(losses[s] > 1.4 * statistics.median(losses[s - 10:s]) for s in range(10, len(losses)))


def name_cause(pipe):
    reference = pipe.replace(batches=None)        # the reference data stream, same configuration
    for i in range(80):
        a, b = batch_at(pipe, 2, i), batch_at(reference, 2, i)
        if not (torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)):
            return "data"
    return "optimizer" if _spiky(train_steps(start(pipe, 1), 75, eval_every=0).history["loss"]) else "healthy"
"""

_NAME_TOKEN_SHARE = """import statistics
import torch
from course.reference.train import batch_at, start, train_steps


def name_cause(pipe):   # blames the data only when one token floods a batch near the spike
    run = train_steps(start(pipe, 0), 75, eval_every=0)
    losses = run.history["loss"]
    spikes = [s for s in range(10, 75) if losses[s] > 1.4 * statistics.median(losses[s - 10:s])]
    if not spikes:
        return "healthy"
    for i in range(spikes[0] - 10, spikes[0] + 1):
        inputs = batch_at(pipe, 0, i).inputs
        if torch.bincount(inputs.reshape(-1)).max().item() > 0.5 * inputs.numel():
            return "data"
    return "optimizer"
"""

_NAME_CONSTANT = """def name_cause(pipe):
    return "data"
"""

_NAME_REVEAL = """from course.exercises import mystery


def name_cause(pipe):
    answer = mystery.reveal(pipe)
    return {"healthy": "healthy", "corrupted-shard": "data", "garbled-shard": "data"}.get(answer, "optimizer")
"""

# ----- fix ------------------------------------------------------------------------------------------
_FIX_ALT = """import torch
import course.reference.pipeline
from course.reference.train import batch_at


def fix(pipe):
    ref = pipe.replace(batches=None)
    if any(not torch.equal(batch_at(pipe, 1, i).targets, batch_at(ref, 1, i).targets) for i in range(50, 80)):
        return ref
    return pipe.replace(optimizer_factory=course.reference.pipeline.adamw)
"""

# Red team, 2026-12-07: every part the reference part (the same choice apart and in the kernel),
# and each judge of what a fix changed answered once, in the kernel's re-run, by a stand-in that
# puts the real one back when called, so the guard's check after the test sees nothing (before
# the verdict was taken from the choice made apart, it scored 3 of 3 on 04 and 2 of 2 on 00).
# Its control defines the same stand-ins beside a real fix and installs none (a stand-in left in
# place, never called, is a binding replaced while the test ran: the guard voids the test). Since
# 2026-12-07 the fix runs only in the graded call's process, where its stand-ins are a package
# change the fix's check finds, and its every-part choice fails there anyway.
_STAND_INS = """import course.exercises.mystery as _M
from course.reference.pipeline import healthy_twin as _twin


def _stand_in(name, answer):
    real = _M.__dict__.get(name)
    if real is None:
        return

    def once(*args, **kwargs):
        setattr(_M, name, real)
        return answer()
    setattr(_M, name, once)


def _stamp():
    _stand_in("_kept_verdict", tuple)
    _stand_in("kept_problems", list)
"""
_FIX_RUBBER_STAMP = _STAND_INS + "\n\ndef fix(pipe):\n    _stamp()\n    return _twin(pipe)\n"
_FIX_STAMP_BESIDE_A_FIX = (_STAND_INS + _FIX_ALT.replace("def fix(pipe):", "def _fix(pipe):")
                           + "\n\ndef fix(pipe):\n    return _fix(pipe)\n")

_FIX_TOKEN_QUARANTINE = """import torch
import course.reference.pipeline
from course.lessons.replay import Quarantine
from course.reference.train import batch_at


def _flooded(batch):
    counts = torch.bincount(batch.inputs.reshape(-1))
    return "one token floods the batch" if counts.max().item() > 0.5 * batch.inputs.numel() else None


def fix(pipe):   # a data check that sees only flooded inputs: a garbled shard passes it
    if any(_flooded(batch_at(pipe, 0, i)) for i in range(75)):
        return pipe.replace(batches=Quarantine(pipe.batches, _flooded))
    return pipe.replace(optimizer_factory=course.reference.pipeline.adamw)
"""

_FIX_FRESH_PIPE = """from course.lessons.replay import MYSTERY_PIPE


def fix(pipe):
    return MYSTERY_PIPE
"""

_FIX_SHOTGUN = """import course.reference.pipeline


def fix(pipe):
    return pipe.replace(batches=None, optimizer_factory=course.reference.pipeline.adamw, update=course.reference.pipeline.apply_update)
"""

CASES = [
    # alternative correct answers: full marks
    Case(A, "observe_alt_own_cooldown", {"observe": _OBSERVE_ALT}, set()),
    Case(A, "detect_alt_torch_median", {"detect": _DETECT_ALT}, set()),
    Case(A, "name_alt_compare_stream", {"name_cause": _NAME_ALT}, set()),
    Case(A, "fix_alt_targets_window", {"fix": _FIX_ALT}, set()),
    # realistic wrong answers
    Case(A, "nonfinite_obeys_cooldown", {"observe": _NONFINITE_OBEYS_COOLDOWN},
         {"test_observe_visible", "test_observe_nonfinite"}),
    Case(A, "cooldown_shared_by_kinds", {"observe": _SHARED_COOLDOWN}, {"test_observe_visible", "test_observe_cooldown"}),
    # it never trains, so it also misses the visible pipeline whose update crashes
    Case(A, "detect_token_share_only", {"detect": _DETECT_TOKEN_SHARE}, DETECT_TESTS),
    Case(A, "detect_logged_lr", {"detect": _DETECT_LOGGED_LR}, DETECT_TESTS),
    Case(A, "name_token_share_at_spike", {"name_cause": _NAME_TOKEN_SHARE}, {"test_name_cause_hidden"}),
    Case(A, "fix_token_quarantine", {"fix": _FIX_TOKEN_QUARANTINE}, {"test_fix_hidden"}),
    # degenerate answers: constant, reading the pipeline, delegating to a switched-off function
    Case(A, "observe_always_alerts",
         {"observe": _HEADER + "def observe(policy, step, loss=None, grad_norm=None, tokens_per_s=None, val_loss=None):\n"
                               "    return [Alert(step, 'loss-spike', loss)]\n"},
         OBSERVE_TESTS),
    Case(A, "observe_never_alerts",
         {"observe": _HEADER + "def observe(policy, step, loss=None, grad_norm=None, tokens_per_s=None, val_loss=None):\n"
                               "    return []\n"},
         OBSERVE_TESTS),
    Case(A, "observe_saved_reference", {"observe": _OBSERVE_SAVED_REFERENCE}, OBSERVE_TESTS),
    Case(A, "observe_copied_reference", {"observe": _OBSERVE_COPIED_REFERENCE}, OBSERVE_TESTS),
    Case(A, "detect_reads_repr", {"detect": _DETECT_REPR}, DETECT_TESTS),
    Case(A, "detect_delegates", {"detect": _DETECT_DELEGATES}, DETECT_TESTS),
    Case(A, "name_constant", {"name_cause": _NAME_CONSTANT}, NAME_TESTS),
    Case(A, "name_reads_reveal", {"name_cause": _NAME_REVEAL}, NAME_TESTS),
    Case(A, "fix_fresh_pipeline", {"fix": _FIX_FRESH_PIPE}, FIX_TESTS),
    Case(A, "fix_shotgun", {"fix": _FIX_SHOTGUN}, FIX_TESTS),
    Case(A, "fix_rubber_stamp_once", {"fix": _FIX_RUBBER_STAMP}, FIX_TESTS),
    Case(A, "fix_stamp_beside_a_real_fix", {"fix": _FIX_STAMP_BESIDE_A_FIX}, set()),
]
