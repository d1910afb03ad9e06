"""Specifications of ``course.toolkit.telemetry``: what is recorded, and that the robust score stays small on a
steady history (negative control) and is large on a jump."""

from __future__ import annotations

import torch

from course.toolkit.telemetry import STATS, Telemetry, outliers, robust_z
from course.reference.diagnose import record

from small_pipeline import SMALL


def test_record_fills_one_row_per_step_and_layer_and_restores_the_pipeline():
    run, tel = record(SMALL, 5)
    n_layers = sum(1 for p in run.model.parameters() if p.requires_grad)
    for s in STATS:
        assert tel.table(s).shape == (5, n_layers), s
    assert (tel.table("grad_finite") == 1).all()
    assert (tel.table("rel_update") > 0).all(), "every tensor moves at every healthy step"
    assert run.pipe is SMALL, "record must restore the run's pipeline"


def test_robust_z_is_small_on_noise_and_large_on_a_jump():
    g = torch.Generator().manual_seed(0)
    steady = 1 + 0.01 * torch.randn(60, 3, generator=g)
    assert robust_z(steady).abs().max() < 8, "a steady noisy history must not be flagged"
    jumped = steady.clone()
    jumped[50, 1] = 2.0
    z = robust_z(jumped)
    assert z[50, 1] > 20 and z[50, 0].abs() < 8, "only the jumped cell is flagged"


def test_outliers_only_after_an_lr_jump():
    run, before = record(SMALL, 30)
    run.scheduler.base_lrs = [30 * lr for lr in run.scheduler.base_lrs]
    _, after = record(SMALL, 5, run=run)
    joined = Telemetry(before.names, list(range(35)), {s: before.rows[s] + after.rows[s] for s in STATS})
    assert not outliers(before, "rel_update", threshold=15), "negative control: the steady part is flagged"
    assert any(step >= 30 for step, _, _ in outliers(joined, "rel_update", threshold=15)), "the LR jump is not flagged"
