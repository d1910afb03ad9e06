"""Specifications of ``course.lessons.valgap`` and the val-gap / leakage bugs of ``course.bugs.validation``.

Every bug is run on a small pipeline against the healthy one (the negative control): each must move
the measurement its separating test reads, and the healthy pipeline must not.
"""

from __future__ import annotations

import pytest
import torch

from course import ModelConfig
from course.bugs import catalogue, inject
from course.reference.train import evaluate, train
from course.toolkit import overlap
from course.lessons import valgap

from small_pipeline import SMALL

PIPE = SMALL.replace(n_train=1024, n_val=128, steps=120, lr=3e-2, warmup=10)
DROP = PIPE.replace(model=ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64, dropout=0.1))
GAP = 0.1  # nats: far above the healthy run's measurement noise (checked by the negative controls)


@pytest.fixture(scope="module")
def healthy():
    return train(PIPE, eval_every=0).model


@pytest.fixture(scope="module")
def with_dropout():
    return train(DROP, eval_every=0).model


def _train_loss(model, pipe):
    return valgap.reference_loss(model, valgap.training_probe(pipe), "val")


def test_every_val_gap_and_leakage_bug_is_covered_here():
    covered = {"eval-label-smoothing", "eval-loss-per-sequence", "dropout-left-on-in-eval", "functional-dropout-ignores-eval",
               "train-set-too-small", "val-from-another-source", "val-mixes-another-source",
               "val-overlaps-train", "val-near-duplicates-train"}
    registered = {b.name for b in catalogue("val-gap") + catalogue("leakage")}
    assert registered == covered, f"bugs without a test here: {registered - covered}; tested but gone: {covered - registered}"


def test_defaults_keep_evaluation_bit_identical_to_the_reference(healthy):
    """The new Pipeline parts default to the old behaviour: evaluate == reference_loss exactly."""
    assert evaluate(healthy, PIPE) == valgap.reference_loss(healthy, PIPE, "val")
    assert torch.equal(PIPE.windows("val"), PIPE.replace(val_source=valgap.SameSource(PIPE.val_seed)).windows("val"))


def test_healthy_pipelines_pass_the_eval_path_check_and_show_no_gap(healthy, with_dropout):
    for model, pipe in ((healthy, PIPE), (with_dropout, DROP)):
        check = valgap.eval_path_check(model, pipe)
        assert check.agrees, f"healthy eval path disagrees with the reference: {check}"
        assert evaluate(model, pipe) - _train_loss(model, pipe) < GAP, "the healthy run already has a validation gap"


@pytest.mark.parametrize("name", ["eval-label-smoothing", "eval-loss-per-sequence", "dropout-left-on-in-eval"])
def test_eval_bugs_open_a_gap_on_the_same_weights_and_fail_the_eval_path_check(name, with_dropout):
    broken = inject(DROP, name)
    gap = evaluate(with_dropout, broken) - evaluate(with_dropout, DROP)
    assert gap > 0.01, f"{name} raised the reported validation loss of the same weights by only {gap:.4f}"
    assert not valgap.eval_path_check(with_dropout, broken).agrees, f"the eval path check missed {name}"


def test_functional_dropout_trains_bit_identically_but_evaluates_at_random(with_dropout):
    broken = inject(DROP, "functional-dropout-ignores-eval")
    model = train(broken, eval_every=0).model
    same = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), with_dropout.state_dict().values()))
    assert same, "F.dropout and nn.Dropout should draw the same masks in training"
    model.eval()
    assert evaluate(model, broken) != evaluate(model, broken), "two evaluations in eval mode agree: dropout is off after all"
    assert evaluate(model, broken) > evaluate(with_dropout, DROP), "eval-mode dropout should raise the validation loss"
    assert not valgap.eval_path_check(model, broken).agrees


def test_train_set_too_small_overfits_and_fresh_samples_score_like_validation(healthy):
    broken = inject(PIPE, "train-set-too-small")
    model = train(broken, eval_every=0).model
    train_loss, fresh_loss = _train_loss(model, broken), evaluate(model, valgap.fresh(broken))
    assert fresh_loss - train_loss > 10 * GAP, f"too-small training set: train {train_loss:.3f}, fresh {fresh_loss:.3f}"
    assert abs(evaluate(model, broken) - fresh_loss) < 2 * GAP, "validation and fresh windows should score alike"
    assert evaluate(healthy, valgap.fresh(PIPE)) - _train_loss(healthy, PIPE) < GAP, "negative control overfits"


@pytest.mark.parametrize("name", ["val-from-another-source", "val-mixes-another-source"])
def test_shift_bugs_raise_validation_but_not_fresh_samples_of_the_training_source(name, healthy):
    broken = inject(PIPE, name)
    val, fresh = evaluate(healthy, broken), evaluate(healthy, valgap.fresh(broken))
    assert val - fresh > 2 * GAP, f"{name}: validation {val:.3f} vs fresh {fresh:.3f}"
    assert abs(evaluate(healthy, PIPE) - fresh) < GAP, "negative control: healthy validation should score like fresh windows"


@pytest.mark.parametrize("name", ["val-overlaps-train", "val-near-duplicates-train"])
def test_leakage_bugs_are_found_by_the_audit_and_not_on_the_healthy_split(name):
    train_windows = PIPE.windows("train")
    leaky = overlap.audit(train_windows, inject(PIPE, name).windows("val"))
    healthy = overlap.audit(train_windows, PIPE.windows("val"))
    assert leaky.near > healthy.near + 0.3, f"{name}: {leaky} vs healthy {healthy}"
    assert healthy.exact == 0, f"the healthy split has exact copies: {healthy}"


def test_leakage_pushes_validation_down_below_the_floor_on_a_memorising_model():
    small = inject(PIPE, "train-set-too-small")
    model = train(small, eval_every=0).model
    floor = PIPE.language().loss_floor(PIPE.seq_len)
    honest = evaluate(model, small)
    copied = evaluate(model, small.replace(n_val=64, val_source=valgap.TrainCopies(1.0)))
    assert copied < floor < honest, f"copied validation {copied:.3f}, floor {floor:.3f}, honest {honest:.3f}"


def test_fresh_and_sources_are_deterministic_and_distinct():
    fresh = valgap.fresh(PIPE).windows("val")
    assert torch.equal(fresh, valgap.fresh(PIPE).windows("val"))
    assert not overlap.exact_duplicates(PIPE.windows("train"), fresh).any()
    assert not torch.equal(fresh, PIPE.windows("val"))
    mixed = valgap.OtherSource(0.5)(PIPE)
    assert mixed.shape == (PIPE.n_val, PIPE.seq_len + 1)
    assert valgap.OtherSource(0.0)(PIPE).shape == (PIPE.n_val, PIPE.seq_len + 1), "fraction 0 must not fail"


def test_continue_windows_keeps_the_prefix_and_follows_the_chain():
    lang = PIPE.language()
    w = lang.sample(500, 10, seed=1)
    longer = valgap.continue_windows(lang, w, 5, seed=2)
    assert torch.equal(longer[:, :10], w), "the prefix must be kept"
    S = lang.n_symbols
    p = lang.transition[longer[:, 8:-2].flatten() * S + longer[:, 9:-1].flatten(), longer[:, 10:].flatten()]
    assert (p > 0).all(), "a continuation used a transition of probability 0"


def test_counts_fitted_on_validation_beat_the_exact_chain_on_the_same_windows():
    """Compared with the exact chain on the same windows (not with the entropy rate, an average that
    the chain itself misses on about half of small validation sets), in standard errors."""
    lang = PIPE.language()
    tr, va, fresh = lang.sample(64, 17, 1), lang.sample(64, 17, 2), lang.sample(1024, 17, 3)
    fit_train = valgap.fit_context_counts(tr, lang.vocab_size)
    fit_all = valgap.fit_context_counts(torch.cat([tr, va]), lang.vocab_size)
    chain = valgap.chain_loss(lang, va, per_window=True, first=1)
    diff, in_se = valgap.margin(valgap.counts_loss(fit_all, va, per_window=True), chain)
    assert diff < 0 and in_se < -3, f"the leaky fit beats the exact chain by only {diff:.3f} ({in_se:.1f} SE)"
    assert valgap.counts_loss(fit_train, va) > chain.mean().item(), "an honest fit does not beat the chain here"
    assert valgap.counts_loss(fit_all, fresh) > valgap.chain_loss(lang, fresh, first=1), \
        "on fresh windows the leaky fit is honest again"


def test_chain_loss_matches_the_table_and_the_floor():
    lang = PIPE.language()
    w = lang.sample(4000, 17, 5)
    assert abs(valgap.chain_loss(lang, w[:7], first=1) - valgap.counts_loss(lang.transition, w[:7])) < 1e-12
    assert abs(valgap.chain_loss(lang, w) - lang.loss_floor(16)) < 0.03, "on many windows the chain scores the floor"
    assert valgap.chain_loss(lang, w, per_window=True).shape == (4000,)
    with pytest.raises(ValueError):
        valgap.chain_loss(lang, torch.full((2, 5), lang.PAD))


def test_trained_remembers_one_run_per_pipeline_and_seed():
    a = valgap.trained(SMALL)
    assert valgap.trained(SMALL) is a and valgap.trained(SMALL.replace()) is a, "the same pipeline trains once"
    assert valgap.trained(SMALL, seed=1) is not a


def test_seen_loss_scores_the_batches_trained_on_not_the_settings_training_set():
    """On an opaque draw whose small training set lives in the batch stream, the settings' training
    windows score like fresh ones; the batches it trained on do not."""
    from course.exercises import mystery

    base = DROP.replace(n_train=2048, n_val=256, steps=45)
    run = valgap.trained(mystery.make("train-set-too-small", 0, base))
    seen = valgap.seen_loss(run)
    probe = valgap.reference_loss(run.model, valgap.training_probe(run.pipe), "val")
    fresh = valgap.reference_loss(run.model, valgap.fresh(run.pipe), "val")
    assert fresh - seen > 0.3 and abs(fresh - probe) < 0.3, f"seen {seen:.3f}, probe {probe:.3f}, fresh {fresh:.3f}"
    assert len(valgap.seen_batches(run, 5)) == 5


def test_problems_is_quiet_on_healthy_draws_and_names_each_broken_one():
    """The grader's check of a fix (notebook 05): negative controls and one draw of each bug."""
    from course.exercises import mystery

    base = DROP.replace(n_train=2048, n_val=256, steps=45)
    expected = {"healthy": None, "eval-label-smoothing": "eval path", "eval-loss-per-sequence": "eval path",
                "dropout-left-on-in-eval": "eval path", "train-set-too-small": "overfitting",
                "val-from-another-source": "shift", "val-mixes-another-source": "shift",
                "val-overlaps-train": "shares windows", "val-near-duplicates-train": "shares windows"}
    for i, (name, word) in enumerate(expected.items()):
        found = valgap.problems(mystery.make(name, 50 + i, base, salt="unit"), seed=3)
        if word is None:
            assert not found, f"healthy draw: {found}"
        else:
            assert len(found) == 1 and word in found[0], f"{name}: {found}"


def test_gap_explorer_redraws_when_the_slider_moves():
    import ipywidgets  # noqa: F401  (the widget needs no kernel to run its observers)

    runs = {n: {"step": [0, 10], "train": [2.0, 1.0 / n], "validation": [2.0, 1.0 + n / 100]} for n in (1, 10, 100)}
    box = valgap.gap_explorer(runs, floor=0.5, steps_times_batch=100)
    first = box.summary.value
    assert "100</b> training windows" in first and "+1.990" in first, first
    box.slider.value = 1
    assert box.summary.value != first and "+0.010" in box.summary.value and "100.0 times" in box.summary.value, box.summary.value
