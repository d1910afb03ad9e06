"""Specifications of ``course.toolkit.preflight`` and ``course.toolkit.overfit``: every pre-flight check passes the
healthy pipeline (negative control) and fails on the bug it targets; the learner's objects are
never changed; the overfit controls behave as the notebook claims."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from course.bugs import inject
from course.toolkit.batch import Batch
from course.toolkit.overfit import conflicting_labels, fit_floor, overfit_rule, shuffled_labels, tiny_batch
from course.reference.diagnose import overfit_pipe, rule_explorer
from course.toolkit.preflight import preflight
from course.reference.diagnose import preflight_pipeline
from course.reference.train import batch_at, start, train_steps

from small_pipeline import SMALL

FAST = dict(overfit_steps=60)


def _report(pipe, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return preflight_pipeline(pipe, **FAST, **kw)


def test_healthy_pipeline_passes_every_check():
    report = _report(SMALL)
    assert report.ok, f"healthy pipeline failed {report.failed()}:\n{report}"
    assert all(c.proves and c.cannot_prove for c in report.checks), "every check must say what it proves and what it cannot"


@pytest.mark.parametrize("bug, check", [
    ("missing-step", "update"), ("missing-step", "overfit"),
    ("embedding-not-in-optimizer", "update"),
    ("zero-grad-forgotten", "grads reset"),
    ("loss-broadcast", "loss at init"), ("loss-broadcast", "loss is a mean"),
    ("all-targets-ignored", "mask"), ("lr-zero", "update"),
])
def test_each_check_fails_on_the_bug_it_targets(bug, check):
    report = _report(inject(SMALL, bug))
    assert not report[check].passed, f"{check!r} passed on {bug!r}: {report[check]}"


def test_grads_reset_sees_the_doubling_even_under_clipping():
    assert SMALL.clip is not None, "fixture: the pipeline must clip"
    assert "2.000" in _report(inject(SMALL, "zero-grad-forgotten"))["grads reset"].measured


def test_finite_grads_fails_on_a_nan_gradient():
    def sqrt_of_zero(logits, batch):  # sqrt(0) backward is inf, times 0: NaN gradients, finite loss
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.targets.flatten()) + (logits * 0).sqrt().sum()
    assert not _report(SMALL.replace(loss_fn=sqrt_of_zero))["finite grads"].passed


def test_no_step_control_fails_when_the_loss_falls_without_updates():
    calls = []

    def shrinking(logits, batch):  # a loss that falls on its own: the overfit check would mean nothing
        calls.append(1)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.targets.flatten()) / len(calls)
    assert not _report(SMALL.replace(loss_fn=shrinking))["no-step control"].passed


def test_mask_check_hook_is_used():
    def gate(batch):
        raise ValueError("gate says no")
    report = _report(SMALL, mask_check=gate)
    assert not report["mask"].passed and "gate says no" in report["mask"].measured


def test_preflight_does_not_change_the_model_optimizer_grads_or_rng():
    run = start(SMALL, 0)
    train_steps(run, 2, eval_every=0)  # optimizer has state and the scheduler has wrapped step()
    model, opt = run.model, run.optimizer
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    opt_state = {(id(p), k): v.clone() for p, s in opt.state.items() for k, v in s.items() if torch.is_tensor(v)}
    lrs = [g["lr"] for g in opt.param_groups]
    rng = torch.get_rng_state()
    batch = batch_at(SMALL, 0, 0)
    report = preflight(model, opt, Batch(batch.inputs[:4], batch.targets[:4], batch.pad_id), overfit_steps=10)
    assert report.checks, "fixture: the report must hold checks"
    assert all(torch.equal(params[n], p) for n, p in model.named_parameters()), "preflight changed the parameters"
    assert all(torch.equal(grads[n], p.grad) for n, p in model.named_parameters()), "preflight changed the gradients"
    after = {(id(p), k): v for p, s in opt.state.items() for k, v in s.items() if torch.is_tensor(v)}
    assert after.keys() == opt_state.keys() and all(torch.equal(opt_state[k], after[k]) for k in opt_state), \
        "preflight changed the optimizer state"
    assert [g["lr"] for g in opt.param_groups] == lrs, "preflight changed the learning rate"
    assert torch.equal(rng, torch.get_rng_state()), "preflight changed the torch RNG"


# ----- course.toolkit.overfit ---------------------------------------------------------------------------------
TINY = tiny_batch(batch_at(SMALL, 0, 0), 4)
V = SMALL.language().vocab_size


def test_fit_floor_is_ln2_for_two_conflicting_labels_and_zero_for_unique_prefixes():
    x = torch.tensor([[1, 2], [1, 2]])
    assert fit_floor(Batch(x, torch.tensor([[3, 4], [3, 5]]), 0)) == pytest.approx(math.log(2) / 2)
    assert fit_floor(Batch(x[:1], torch.tensor([[3, 4]]), 0)) == 0.0
    assert fit_floor(conflicting_labels(TINY, V)) >= math.log(2) - 1e-12


def test_shuffled_labels_move_every_row_and_keep_the_inputs():
    s = shuffled_labels(TINY, seed=0)
    assert torch.equal(s.inputs, TINY.inputs)
    assert all(not torch.equal(s.targets[i], TINY.targets[i]) for i in range(4)), "a row kept its own labels"


def test_overfit_fits_and_the_missing_step_control_does_not():
    fit = overfit_pipe(SMALL, TINY, 60)
    control = overfit_pipe(inject(SMALL, "missing-step"), TINY, 60)
    assert fit[-1] < fit_floor(TINY) + 0.1, f"the healthy overfit reached only {fit[-1]:.3f}"
    assert control[-1] == pytest.approx(control[0]), "without step() the loss must not move"


def test_overfit_rule_reads_the_window_only():
    losses = [3.0, 1.0, 0.04, 0.01]
    assert overfit_rule(losses, 0.05, steps=2).first_step_below == 2
    assert not overfit_rule(losses, 0.05, steps=1).passed


def test_rule_explorer_output_changes_with_a_control():
    box = rule_explorer(SMALL, TINY)
    before = box.out.outputs[0]["text"]
    box.controls["steps"].value = 10
    after = box.out.outputs[0]["text"]
    assert before != after and "10 steps" in after, f"output did not follow the slider:\n{before}\n{after}"
    box.controls["threshold"].value = 1.0
    assert "< 1.0" in box.out.outputs[0]["text"]


def test_rule_explorer_reuses_a_run_given_and_trains_the_rest():
    """``runs`` seeds the cache: the first render shows the history given (no training), and the
    history ``overfit_pipe`` trains for that setting renders exactly as the explorer's own run."""
    plain = rule_explorer(SMALL, TINY)
    v = {k: c.value for k, c in plain.controls.items()}
    key = (v["lr"], v["steps"], v["examples"], v["tokens"])
    rows = Batch(TINY.inputs[: v["examples"], : v["tokens"]], TINY.targets[: v["examples"], : v["tokens"]], TINY.pad_id)
    trained = overfit_pipe(SMALL.replace(lr=v["lr"]), rows, v["steps"])
    assert rule_explorer(SMALL, TINY, runs={key: trained}).out.outputs[0]["text"] == plain.out.outputs[0]["text"]
    fake = [3.0] + [0.001] * v["steps"]
    box = rule_explorer(SMALL, TINY, runs={key: fake})
    assert box.result.passed and box.result.first_step_below == 1, "the history given was not used"
    box.controls["steps"].value = 10  # a setting not given: trained
    assert "10 steps" in box.out.outputs[0]["text"]
