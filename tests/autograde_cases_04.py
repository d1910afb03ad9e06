"""Targeted submissions for notebook 04 (format: tests/autograde_cases.py).

The alert policy's ``observe`` is graded by behaviour on hidden sequences: a policy that always
alerts or never alerts loses every cell; a non-finite path that obeys the cooldown loses only the
non-finite cell; a cooldown shared by all kinds loses only the cooldown cell.
"""
from autograder.grading import Case

A = "04_late_spike"
OBSERVE_TESTS = {"test_observe_visible", "test_observe_cooldown", "test_observe_nonfinite"}

_HEADER = "from course.alerts import Alert, AlertPolicy\n\n\n"

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

CASES = [
    Case(A, "observe_always_alerts",
         {"observe": _HEADER + "def observe(policy, step, loss=None, grad_norm=None, tokens_per_s=None, val_loss=None):\n"
                               "    return [Alert(step, 'loss-spike', loss)]\n"},
         OBSERVE_TESTS),
    Case(A, "observe_never_alerts",
         {"observe": _HEADER + "def observe(policy, step, loss=None, grad_norm=None, tokens_per_s=None, val_loss=None):\n"
                               "    return []\n"},
         OBSERVE_TESTS),
    Case(A, "nonfinite_obeys_cooldown", {"observe": _NONFINITE_OBEYS_COOLDOWN}, {"test_observe_nonfinite"}),
    Case(A, "cooldown_shared_by_kinds", {"observe": _SHARED_COOLDOWN}, {"test_observe_cooldown"}),
]
