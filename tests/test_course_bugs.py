"""Specifications of ``course.bugs``: the catalogue, ``inject``, and that each bug shows its symptom.

A symptom is checked with the same measurement on the healthy pipeline (negative control), so a
measurement that every pipeline passes cannot hide here.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import pytest
import torch

from course import Pipeline
from course.bugs import FAMILIES, bug, catalogue, get, inject
from course.toolkit.checks import BatchContractError, check_batch, update_report
from course.reference.train import evaluate, start, train, train_steps

from small_pipeline import SMALL
NAMES = [b.name for b in catalogue()]


def _quiet(fn, *args, **kwargs):
    """Call ``fn`` with warnings silenced (broken pipelines make torch's scheduler warn, rightly)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


# ----- the catalogue ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_every_bug_has_a_known_family_a_doc_and_a_symptom(name):
    b = get(name)
    assert b.name == name and b.family in FAMILIES, f"bug {name!r} has family {b.family!r}, not one of {FAMILIES}"
    assert b.doc.strip(), f"bug {name!r} has no docstring: write what breaks and how it happens in real code"
    assert b.symptom.strip(), f"bug {name!r} has no symptom"


def test_catalogue_covers_every_family_and_filters_by_family():
    assert len(NAMES) == len(set(NAMES)), "two bugs share a name"
    for family in FAMILIES:
        members = catalogue(family)
        assert members, f"family {family!r} has no bug"
        assert all(b.family == family for b in members), f"catalogue({family!r}) returned bugs of other families"
    assert sum(len(catalogue(f)) for f in FAMILIES) == len(NAMES)


def test_registering_a_bug_in_an_unknown_family_raises():
    with pytest.raises(ValueError, match="unknown family"):
        bug("no-such-family", "whatever")


def test_inject_records_the_names_and_never_mutates_the_original():
    original = SMALL.replace()
    snapshot = dataclasses.replace(original)
    broken = inject(original, "lr-zero", "no-positions")
    assert broken is not original
    assert broken.bugs == ("lr-zero", "no-positions"), f"inject recorded {broken.bugs}"
    assert broken.lr == 0.0 and broken.model.use_positions is False, "inject did not apply both bugs"
    assert original == snapshot and original.bugs == () and original.lr == SMALL.lr, "inject changed the pipeline it was given"
    assert inject(original) == original, "inject with no names must return the pipeline unchanged"


@pytest.mark.parametrize("name", NAMES)
def test_each_bug_changes_exactly_its_part_and_records_itself(name):
    broken = inject(SMALL, name)
    assert broken.bugs == (name,)
    changed = [f.name for f in dataclasses.fields(Pipeline) if getattr(broken, f.name) != getattr(SMALL, f.name) and f.name != "bugs"]
    assert len(changed) == 1, f"bug {name!r} changed the pipeline fields {changed}; a bug breaks exactly one part"


def test_unknown_bug_name_raises_keyerror_naming_the_known_ones():
    with pytest.raises(KeyError) as info:
        inject(SMALL, "no-such-bug")
    message = str(info.value)
    assert "no-such-bug" in message
    missing = [n for n in NAMES if n not in message]
    assert not missing, f"the KeyError does not list the known bugs {missing}"


# ----- no updates -------------------------------------------------------------------------------------
def _held_out_change_and_cause(pipe: Pipeline, steps: int = 15) -> tuple[float, str]:
    """|held-out loss after a short run - before it|, and update_report's cause on a fresh run's first step."""
    run = start(pipe, 0)
    before = evaluate(run.model, pipe)
    _quiet(train_steps, run, steps, eval_every=0)
    change = abs(evaluate(run.model, pipe) - before)
    fresh = start(pipe, 0)
    rep = _quiet(update_report, fresh.model, fresh.optimizer, lambda: train_steps(fresh, 1, eval_every=0))
    return change, rep.cause()


FLAT = 1e-3  # nats: far below what 15 healthy steps move the held-out loss (checked below)


def test_healthy_pipeline_moves_the_loss_and_updates_every_parameter():
    """Negative control of the no-updates tests: the healthy pipeline fails both of their criteria."""
    change, cause = _held_out_change_and_cause(SMALL)
    assert change > 100 * FLAT, f"15 healthy steps moved the held-out loss by only {change:.2e}"
    assert cause == "ok", f"update_report on a healthy step says {cause!r}"


@pytest.mark.parametrize("name", [b.name for b in catalogue("no-updates") if b.name != "embedding-not-in-optimizer"])
def test_no_update_bugs_leave_the_loss_flat_and_the_update_report_not_ok(name):
    change, cause = _held_out_change_and_cause(inject(SMALL, name))
    assert change < FLAT, f"with {name!r} 15 steps moved the held-out loss by {change:.2e}: the parameters are updating"
    assert cause != "ok", f"update_report says 'ok' for {name!r}"


def test_embedding_not_in_optimizer_freezes_exactly_the_token_embedding():
    run = start(inject(SMALL, "embedding-not-in-optimizer"), 0)
    before = {n: p.detach().clone() for n, p in run.model.named_parameters()}
    train_steps(run, 3, eval_every=0)
    unchanged = [n for n, p in run.model.named_parameters() if torch.equal(before[n], p.detach())]
    assert unchanged == ["tok.weight"], f"parameters that never moved: {unchanged}; expected only the token embedding"


# ----- too good ----------------------------------------------------------------------------------------
TOO_GOOD = SMALL.replace(n_train=1024, batch_size=32, lr=3e-2, steps=80)


@pytest.fixture(scope="module")
def healthy_80_steps():
    return train(TOO_GOOD, eval_every=0)


@pytest.mark.parametrize("name, steps", [("unshifted-targets", 30), ("causal-mask-off", 80)])
def test_leaky_bugs_drive_the_loss_below_the_floor(name, steps, healthy_80_steps):
    floor = TOO_GOOD.language().loss_floor(TOO_GOOD.seq_len)
    run = train(inject(TOO_GOOD, name), steps=steps, eval_every=0)
    assert run.final_val_loss < floor, (
        f"with {name!r} the held-out loss after {steps} steps is {run.final_val_loss:.3f}, not below the floor {floor:.3f}"
    )
    # negative control: the healthy pipeline, with the largest budget used here, stays above the floor
    assert healthy_80_steps.final_val_loss > floor


# ----- bad loss ------------------------------------------------------------------------------------------
def test_all_targets_ignored_gives_a_nan_loss_at_step_zero():
    run = _quiet(train_steps, start(inject(SMALL, "all-targets-ignored"), 0), 3, eval_every=0)
    assert math.isnan(run.history["loss"][0]), f"step 0 loss is {run.history['loss'][0]!r}, expected NaN (0/0)"
    healthy = train_steps(start(SMALL, 0), 1, eval_every=0)
    assert math.isfinite(healthy.history["loss"][0]), "negative control: the healthy step-0 loss must be finite"


def test_padding_scored_scores_every_position_padding_included():
    padded = SMALL.replace(min_len=4)
    all_positions = padded.batch_size * padded.seq_len
    run = train_steps(start(inject(padded, "padding-scored"), 0), 1, eval_every=0)
    assert run.history["tokens"][0] == all_positions, f"padding-scored scored {run.history['tokens'][0]} of {all_positions} targets"
    healthy = train_steps(start(padded, 0), 1, eval_every=0)
    assert healthy.history["tokens"][0] < all_positions, "negative control: the healthy collate must leave padding unscored"


# ----- batch contract ------------------------------------------------------------------------------------
PADDED = SMALL.replace(min_len=8)
CONTRACT_BREAKERS = [b.name for b in catalogue("batch")] + [
    "unshifted-targets", "targets-shifted-twice", "all-targets-ignored", "padding-scored",
]


def _padded_batch(pipe: Pipeline):
    windows = pipe.windows("train")[:32]
    assert (windows == pipe.language().PAD).any(), "the windows have no padding; the test needs padded windows"
    return pipe.collate(windows, pipe.language().PAD)


def test_healthy_collate_passes_the_batch_contract_on_padded_windows():
    check_batch(_padded_batch(PADDED), PADDED.language().vocab_size)


@pytest.mark.parametrize("name", CONTRACT_BREAKERS)
def test_batch_bugs_are_rejected_by_check_batch(name):
    pipe = inject(PADDED, name)
    with pytest.raises(BatchContractError):
        check_batch(_padded_batch(pipe), pipe.language().vocab_size)
