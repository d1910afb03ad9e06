"""Specifications of ``course.lessons.instability`` and the lr-instability bugs of ``course.bugs.instability``.

Each bug is run against the healthy pipeline of the same settings and seed (the negative control):
it must move exactly the measurement of ``instability.used`` that names its part, and the healthy
pipeline must move none. The outcome tools are pinned on small hand-made inputs.
"""

from __future__ import annotations

import math

import pytest
import torch

from course.bugs import catalogue, inject
from course.exercises import mystery
from course.exercises.sets import SETS
from course.lessons import instability
from course.reference.pipeline import Pipeline, healthy_twin, warmup_then_linear
from course.reference.train import Run, start, train

from small_pipeline import SMALL

PIPE = SMALL.replace(n_train=512, steps=40, lr=3e-2, warmup=8, batch_size=16)
FAMILY = {b.name for b in catalogue("lr-instability")}
PART_OF = {"warmup-skipped": "schedule", "warmup-in-examples": "schedule", "adam-eps-large": "optimizer",
           "adam-beta2-low": "optimizer", "init-too-small": "init"}


def test_every_lr_instability_bug_is_covered_here():
    assert FAMILY == set(PART_OF), f"a bug of the family without a test here, or a test of no bug: {FAMILY ^ set(PART_OF)}"


def _kinds(found: list[str]) -> set[str]:
    return {"schedule" if f.startswith("used learning rate") else "optimizer" if f.startswith("optimizer")
            else "init" if f.startswith("initial weight scale") else f for f in found}


def test_the_healthy_pipeline_uses_what_its_twin_uses_bit_for_bit():
    assert instability.problems(PIPE) == []
    a, b = instability.used(PIPE), instability.used(healthy_twin(PIPE))
    assert a == b, "the same parts and seed must give the same rates, constants, scale and updates"


@pytest.mark.parametrize("name", sorted(PART_OF))
def test_each_bug_moves_only_the_measurement_of_its_part(name):
    found = instability.problems(inject(PIPE, name))
    assert _kinds(found) == {PART_OF[name]}, f"{name}: {found}"


@pytest.mark.parametrize("name", sorted(PART_OF))
def test_an_opaque_draw_of_each_bug_is_told_apart_by_what_it_used(name):
    """The mystery's premise: every setting reads healthy, and `used` against the twin still names the part."""
    base = SETS["12_lr_instability"].base
    pipe = mystery.make(name, 3, base)
    assert (pipe.lr, pipe.warmup, pipe.clip) == (healthy_twin(pipe).lr, healthy_twin(pipe).warmup, base.clip)
    assert repr(pipe.schedule) == repr(pipe.optimizer_factory) == repr(pipe.prepare) == "<part>"
    assert _kinds(instability.problems(pipe)) == {PART_OF[name]}
    assert instability.problems(mystery.make("healthy", 3, base)) == []


def test_warmup_skipped_starts_at_the_full_rate_and_keeps_the_decay():
    broken = inject(PIPE, "warmup-skipped")
    lrs = instability.used(broken, steps=PIPE.warmup + 2)["lr"]
    assert lrs[0] == pytest.approx(PIPE.lr * warmup_then_linear(0, 1, PIPE.steps))
    assert lrs[-1] == pytest.approx(PIPE.lr * warmup_then_linear(PIPE.warmup + 1, PIPE.warmup, PIPE.steps))


def test_a_crashing_part_is_a_problem():
    def crash(step, warmup, steps):
        raise RuntimeError("boom")
    assert instability.problems(PIPE.replace(schedule=crash)) == ["the run crashed: RuntimeError"]


# ----- outcomes -----------------------------------------------------------------------------------
def _run_with_losses(losses) -> Run:
    run = start(PIPE, 0)
    run.history["loss"] = list(losses)
    run.history["step"] = list(range(len(losses)))
    return run


def test_diverged_at_is_the_first_step_above_the_start_by_the_margin_or_non_finite():
    assert instability.diverged_at(_run_with_losses([2.0, 2.4, 2.6, 1.0])) == 2
    assert instability.diverged_at(_run_with_losses([2.0, 2.5, 1.0])) is None, "exactly the margin is not above it"
    assert instability.diverged_at(_run_with_losses([2.0, 1.5, float("nan")])) == 2
    assert instability.diverged_at(_run_with_losses([2.0, 1.9, 1.8])) is None


def test_divergence_is_early_within_the_first_tenth_and_late_after():
    early = [2.0, 3.0] + [1.0] * 18
    late = [2.0] * 5 + [3.0] + [1.0] * 14
    assert instability.divergence(_run_with_losses(early)) == "early"
    assert instability.divergence(_run_with_losses(late)) == "late"
    assert instability.divergence(_run_with_losses([2.0] * 20)) is None


def test_a_sweep_trains_each_rate_from_the_same_seed_and_best_rate_skips_diverged_runs():
    runs = instability.sweep(PIPE, (1e-2, 3.0), steps=15)
    assert [r.pipe.lr for r in runs.values()] == [1e-2, 3.0]
    assert all(r.history["step"] == list(range(15)) for r in runs.values())
    assert instability.divergence(runs[3.0]) is not None, "rate 3 on this model diverges (the negative case)"
    assert instability.best_rate(runs) == 1e-2
    with pytest.raises(ValueError):
        instability.best_rate({3.0: runs[3.0]})


def test_spread_and_real_change():
    s = instability.spread([1.0, 2.0, 3.0])
    assert (s["mean"], s["min"], s["max"], s["range"]) == (2.0, 1.0, 3.0, 2.0) and s["std"] == pytest.approx(1.0)
    assert instability.spread([5.0])["std"] == 0.0
    assert instability.real_change([1.0, 1.1, 1.2], [0.5, 0.55, 0.6])
    assert not instability.real_change([1.0, 1.3], [0.9, 0.95]), "inside the baseline's range"
    assert not instability.real_change([1.0, 1.5], [0.75, 0.75]), "equal to the range is not more than it"
    assert not instability.real_change([1.0, 1.0], [0.5, 0.5, 0.5, 1.5]), "inside the candidate's range"


def test_clipped_fraction_and_percentile():
    assert instability.clipped_fraction([0.5, 1.0, 1.5, float("nan")], 1.0) == 0.5
    assert instability.clipped_fraction([], 1.0) == 0.0
    assert instability.clip_percentile(list(range(1, 11)), 0.9) == pytest.approx(9.1)
    assert instability.clip_percentile([1.0, float("inf"), 2.0], 1.0) == 2.0, "non-finite norms are left out"
    with pytest.raises(ValueError):
        instability.clip_percentile([float("nan")])


def test_clipping_every_step_barely_moves_adamw_and_slows_sgd():
    """The notebook's counterexample, on the small pipeline: the change from clipping every step is
    several times larger for SGD than for AdamW."""
    def sgd(params, lr, weight_decay):
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=weight_decay)

    def change(pipe):
        return train(pipe.replace(clip=0.01), eval_every=10**9).final_val_loss - train(pipe.replace(clip=None), eval_every=10**9).final_val_loss
    adamw, sgd_change = change(PIPE.replace(lr=1e-2)), change(PIPE.replace(optimizer_factory=sgd, lr=0.1))
    assert sgd_change > 0.1 and sgd_change > 3 * abs(adamw), (adamw, sgd_change)


def test_the_explorer_reads_as_text():
    runs = instability.sweep(PIPE, (1e-2, 3e-2), steps=10)
    box = instability.rate_explorer(runs, PIPE)
    text = box._repr_mimebundle_()["text/plain"]
    assert "lr 0.01" in text and "lr 0.03" in text and "<b>" not in text
    box.slider.value = 3e-2
    assert "lr <b>0.03</b>" in box.summary.value


def test_a_run_stopped_non_finite_is_early_by_its_planned_steps_and_a_non_finite_flag_counts():
    run = _run_with_losses([2.0, 2.1, 2.2, float("inf")])
    run.stopped = "non-finite at step 3"
    assert instability.divergence(run) == "early", "step 3 of a 40-step run is early, though only 4 steps were logged"
    flagged = _run_with_losses([2.0, 1.9, 1.8])
    flagged.history["finite"] = [True, False, True]
    assert instability.diverged_at(flagged) == 1, "parameters gone non-finite with a finite loss is a divergence"
