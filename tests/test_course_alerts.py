"""Specifications of ``course.toolkit.alerts``: each alert fires on its trigger and only then, the per-kind
cooldown, and the non-finite path (bypasses the cooldown, changes no state). Every test that checks an
alert fires also checks the same policy stays quiet without the trigger (the negative control)."""

from __future__ import annotations

import copy
import math

import pytest

from course.toolkit.alerts import KINDS, AlertPolicy, alert_explorer, replay_alerts

NAN, INF = float("nan"), float("inf")


def calm(n=30):
    """A slowly improving run with small alternating noise: nothing to alert on."""
    return [dict(loss=2.0 - 0.01 * s + 0.02 * (-1) ** s, grad_norm=1.0 + 0.1 * (-1) ** s,
                 tokens_per_s=1000.0 + 20 * (-1) ** s) for s in range(n)]


def fired(policy, sequence):
    out = []
    for step, values in enumerate(sequence):
        out += [(a.step, a.kind) for a in policy.observe(step, **values)]
    return out


def test_a_calm_run_raises_nothing():
    assert fired(AlertPolicy(), calm()) == []


@pytest.mark.parametrize("field,value,kind", [
    ("loss", 5.0, "loss-spike"),
    ("grad_norm", 4.0, "grad-spike"),
    ("tokens_per_s", 400.0, "throughput-drop"),
])
def test_each_ratio_alert_fires_on_its_trigger_only(field, value, kind):
    seq = calm()
    seq[20][field] = value
    assert fired(AlertPolicy(), seq) == [(20, kind)]
    # just inside the threshold: quiet (the comparison is with the run's own median, not a band)
    seq[20][field] = {"loss": 1.45 * 1.8, "grad_norm": 2.9 * 0.9, "tokens_per_s": 0.55 * 980}[field]
    assert fired(AlertPolicy(), seq) == [], f"{kind} fired below its threshold"


def test_ratio_alerts_wait_for_min_history():
    seq = calm(10)
    seq[3]["loss"] = 50.0
    assert fired(AlertPolicy(min_history=5), seq) == [], "a loss spike fired before 5 losses were seen"
    assert fired(AlertPolicy(min_history=3), seq) == [(3, "loss-spike")]


def test_val_gap_compares_with_the_median_recent_training_loss():
    seq = calm()
    seq[25]["val_loss"] = 1.75 + 0.5  # recent training losses are about 1.75
    assert fired(AlertPolicy(), seq) == [(25, "val-gap")]
    seq[25]["val_loss"] = 1.75 + 0.2
    assert fired(AlertPolicy(), seq) == []


def test_val_plateau_fires_after_patience_stalled_evaluations():
    p = AlertPolicy(patience=3, cooldown=0, val_gap=10.0)
    vals = [2.0, 1.8, 1.8, 1.79995, 1.81, 1.81, 1.5, 1.6]
    out = [[a.kind for a in p.observe(s, loss=2.0, val_loss=v)] for s, v in enumerate(vals)]
    assert out == [[], [], [], [], ["val-plateau"], ["val-plateau"], [], []], out
    assert p.best_val == 1.5 and p.evals_since_best == 1


def test_cooldown_is_per_kind_and_a_suppressed_alert_does_not_restart_it():
    seq = [dict(loss=2.0, grad_norm=1.0) for _ in range(40)]
    for s in (10, 15, 19, 21):
        seq[s]["loss"] = 6.0
    seq[11]["grad_norm"] = 9.0
    assert fired(AlertPolicy(cooldown=10), seq) == [(10, "loss-spike"), (11, "grad-spike"), (21, "loss-spike")]
    assert fired(AlertPolicy(cooldown=0), seq) == [(10, "loss-spike"), (11, "grad-spike"), (15, "loss-spike"),
                                                   (19, "loss-spike"), (21, "loss-spike")]


def test_non_finite_bypasses_cooldown_and_names_the_fields():
    p = AlertPolicy(cooldown=100)
    for s in range(6):
        p.observe(s, loss=2.0, grad_norm=1.0)
    got = [p.observe(6 + k, **v) for k, v in enumerate([dict(loss=NAN, grad_norm=1.0), dict(loss=2.0, grad_norm=INF),
                                                         dict(loss=-INF, grad_norm=NAN, val_loss=NAN)])]
    assert [[a.kind for a in g] for g in got] == [["non-finite"]] * 3
    assert [g[0].fields for g in got] == [("loss",), ("grad_norm",), ("loss", "grad_norm", "val_loss")]


@pytest.mark.parametrize("values", [dict(loss=NAN, grad_norm=1.0, val_loss=1.0),
                                    dict(loss=2.0, grad_norm=1.0, val_loss=NAN),
                                    dict(loss=9.0, grad_norm=INF, tokens_per_s=1.0, val_loss=5.0)])
def test_a_non_finite_step_changes_no_state(values):
    p = AlertPolicy(patience=2)
    for s, v in enumerate(calm(12)):
        p.observe(s, val_loss=1.5 if s == 5 else None, **v)
    before = copy.deepcopy(p)
    assert [a.kind for a in p.observe(12, **values)] == ["non-finite"]
    assert (list(p.losses), list(p.grads), list(p.throughputs), p.best_val, p.evals_since_best, p.last_fired) == \
        (list(before.losses), list(before.grads), list(before.throughputs), before.best_val,
         before.evals_since_best, before.last_fired)
    # negative control: the same step with finite values does change the state
    p.observe(13, loss=2.0, grad_norm=1.0, val_loss=1.6)
    assert p.evals_since_best == before.evals_since_best + 1 and len(p.losses) == len(before.losses) + 1


def test_a_nan_validation_loss_never_becomes_the_best():
    p = AlertPolicy()
    p.observe(0, loss=2.0, val_loss=NAN)
    assert p.best_val == math.inf and p.evals_since_best == 0
    p.observe(1, loss=2.0, val_loss=1.9)
    assert p.best_val == 1.9


def test_replay_alerts_passes_validation_with_the_step_it_follows():
    history = {"step": list(range(30)), "loss": [c["loss"] for c in calm()], "grad_norm": [1.0] * 30}
    history["loss"][12] = 9.0
    alerts = replay_alerts(AlertPolicy(), history, {"step": [26], "loss": [5.0]})
    assert [(a.step, a.kind) for a in alerts] == [(12, "loss-spike"), (25, "val-gap")]
    assert all(a.kind in KINDS for a in alerts)


def test_explorer_output_changes_when_a_control_moves():
    history = {"step": list(range(60)), "loss": [2.0] * 60, "grad_norm": [1.0] * 60}
    for s in (20, 24, 28):
        history["loss"][s] = 6.0
    box, controls, output = alert_explorer(history)

    def text():
        return "".join(o["text"] for o in output.outputs if o["output_type"] == "stream")

    assert text().startswith("1 alerts"), text()  # cooldown 10: only the first spike
    assert any(o["output_type"] == "display_data" and "image/png" in o["data"] for o in output.outputs)
    controls["cooldown"].value = 0
    assert text().startswith("3 alerts"), text()
    controls["loss_ratio"].value = 3.0  # 6.0 is exactly 3 x the median 2.0: not above it
    assert text().startswith("0 alerts") and "loss_ratio=3.0" in text(), text()
