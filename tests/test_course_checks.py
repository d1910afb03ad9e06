"""Specifications of ``course.toolkit.checks``: the batch contract, the update report, the context probes.

Each check must pass the healthy pipeline and fail (with the right name) on the broken variant it
exists to catch; both halves are asserted.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from course import IGNORE, Pipeline
from course.bugs import inject
from course.toolkit.checks import BatchContractError, check_batch, future_sensitivity, past_sensitivity, position_sensitivity, update_report
from course.toolkit.batch import Batch, next_token_batch, prompt_answer_batch
from course.reference.train import start, train_steps

from small_pipeline import SMALL
LANG = SMALL.language()
V, PAD, EOS = LANG.vocab_size, LANG.PAD, LANG.EOS


# ----- check_batch ------------------------------------------------------------------------------------
def _healthy(padded: bool) -> Batch:
    pipe = SMALL.replace(min_len=8) if padded else SMALL
    return next_token_batch(pipe.windows("train")[:32], PAD)


@pytest.mark.parametrize("padded", [False, True])
def test_check_batch_passes_healthy_batches(padded):
    b = _healthy(padded)
    assert (b.inputs == PAD).any() == padded, "fixture: the padded batch must contain padding, the other none"
    got = check_batch(b, V)
    assert got["scored_fraction"] == pytest.approx((b.targets != IGNORE).float().mean().item())
    assert got["pad_fraction"] == pytest.approx((b.inputs == PAD).float().mean().item())
    assert (got["pad_fraction"] > 0) == padded


def _replace(b: Batch, inputs=None, targets=None) -> Batch:
    return Batch(b.inputs if inputs is None else inputs, b.targets if targets is None else targets, b.pad_id)


def _off_by_one_token(b: Batch) -> torch.Tensor:
    """The targets with one scored target (followed by a real input) replaced by another ordinary token."""
    ok = (b.targets[:, :-1] != IGNORE) & (b.inputs[:, 1:] != PAD)
    row, t = ok.nonzero()[0].tolist()
    targets = b.targets.clone()
    targets[row, t] = (b.inputs[row, t + 1] + 1) % LANG.n_symbols
    return targets


def _set(t: torch.Tensor, index, value) -> torch.Tensor:
    t = t.clone()
    t[index] = value
    return t


# (clause, how to break a healthy padded batch, words the error message must contain)
CLAUSES = {
    "tensors": (lambda b: _replace(b, targets=b.targets.tolist()), "must be tensors"),
    "shape": (lambda b: _replace(b, targets=b.targets[:, :-1]), "of one shape"),
    "rank": (lambda b: _replace(b, inputs=b.inputs.flatten(), targets=b.targets.flatten()), "must be (B, T)"),
    "dtype-inputs": (lambda b: _replace(b, inputs=b.inputs.int()), "int64"),
    "dtype-targets": (lambda b: _replace(b, targets=b.targets.float()), "int64"),
    "input-range-high": (lambda b: _replace(b, inputs=_set(b.inputs, (0, 0), V)), "input ids span"),
    "input-range-negative": (lambda b: _replace(b, inputs=torch.where(b.inputs == PAD, IGNORE, b.inputs)), "input ids span"),
    "nothing-scored": (lambda b: _replace(b, targets=torch.full_like(b.targets, IGNORE)), "no target is scored"),
    "target-range": (lambda b: _replace(b, targets=_set(b.targets, (0, b.targets.shape[1] - 1), V + 3)), "scored targets span"),
    "padding-scored": (lambda b: _replace(b, targets=torch.where(b.targets == IGNORE, PAD, b.targets)), "padding"),
    "shift": (lambda b: _replace(b, targets=_off_by_one_token(b)), "next input token"),
    "mask-fraction": (lambda b: _replace(b, targets=_set(b.targets, (slice(None), slice(1, None, 2)), IGNORE)), "are scored"),
}


@pytest.mark.parametrize("clause", list(CLAUSES))
def test_each_batch_contract_clause_fails_with_a_message_naming_it(clause):
    breaker, words = CLAUSES[clause]
    healthy = _healthy(padded=True)
    check_batch(healthy, V)  # negative control: the unbroken batch passes
    with pytest.raises(BatchContractError) as info:
        check_batch(breaker(healthy), V)
    assert words in str(info.value), f"clause {clause!r} raised {str(info.value)!r}, which does not say {words!r}"


def test_check_batch_accepts_a_masked_prompt_only_when_told_to():
    prompts = [torch.tensor([1, 2, 3, 4]), torch.tensor([5, 6])]
    answers = [torch.tensor([7, 8]), torch.tensor([9, 10, 11])]
    b = prompt_answer_batch(prompts, answers, PAD, EOS)
    check_batch(b, V, min_scored_fraction=0)
    with pytest.raises(BatchContractError, match="are scored"):
        check_batch(b, V)


def test_batch_contract_error_is_a_value_error():
    assert issubclass(BatchContractError, ValueError)


# ----- update_report ------------------------------------------------------------------------------------
def _cause(pipe: Pipeline) -> str:
    run = start(pipe, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # broken loops make torch's scheduler warn, rightly
        rep = update_report(run.model, run.optimizer, lambda: train_steps(run, 1, eval_every=0))
    return rep.cause()


@pytest.mark.parametrize(
    "bug, cause",
    [
        (None, "ok"),
        ("requires-grad-off", "requires-grad-off"),
        ("optimizer-on-stale-model", "not-in-optimizer"),
        ("embedding-not-in-optimizer", "not-in-optimizer"),
        ("lr-zero", "lr-zero"),
        ("missing-step", "no-step"),
        ("clip-to-zero", "grads-vanish"),
        ("no-positions", "no-grad"),  # the position embedding is trainable, in the optimizer, but never used
    ],
)
def test_update_report_names_the_cause(bug, cause):
    pipe = SMALL if bug is None else inject(SMALL, bug)
    got = _cause(pipe)
    assert got == cause, f"update_report(...).cause() on {bug or 'the healthy pipeline'} is {got!r}, expected {cause!r}"


def _freeze_embedding(model):
    model.tok.weight.requires_grad_(False)
    return model


def test_update_report_accepts_parameters_frozen_on_purpose():
    """An adapter-style run freezes some tensors on purpose: listed as frozen, not a failure."""
    run = start(SMALL.replace(prepare=_freeze_embedding), 0)
    rep = update_report(run.model, run.optimizer, lambda: train_steps(run, 1, eval_every=0))
    assert rep.frozen == ["tok.weight"], f"frozen={rep.frozen}; expected only the token embedding"
    assert rep.cause() == "ok", f"a partly frozen model whose trainable tensors all move is {rep.cause()!r}, not 'ok'"
    # negative control: the same freeze plus an optimizer that misses a trainable tensor is not ok
    run = start(inject(SMALL.replace(prepare=_freeze_embedding), "optimizer-on-stale-model"), 0)
    rep = update_report(run.model, run.optimizer, lambda: train_steps(run, 1, eval_every=0))
    assert rep.cause() == "not-in-optimizer"


def test_update_report_lists_the_parameters_and_counts_optimizer_steps():
    run = start(inject(SMALL, "embedding-not-in-optimizer"), 0)
    rep = update_report(run.model, run.optimizer, lambda: train_steps(run, 1, eval_every=0))
    assert rep.not_in_optimizer == ["tok.weight"] and rep.unchanged == ["tok.weight"], (
        f"not_in_optimizer={rep.not_in_optimizer}, unchanged={rep.unchanged}; expected only the token embedding"
    )
    assert rep.optimizer_stepped and rep.n_params == len(list(run.model.parameters()))
    assert rep.grad_norm > 0
    # the step counter keeps working on a second report of the same optimizer
    rep2 = update_report(run.model, run.optimizer, lambda: train_steps(run, 1, eval_every=0))
    assert rep2.optimizer_stepped
    rep3 = update_report(run.model, run.optimizer, lambda: None)
    assert not rep3.optimizer_stepped and rep3.unchanged == [n for n, _ in run.model.named_parameters()]


def test_update_report_on_a_fresh_healthy_run_emits_no_warning():
    """Wrapping optimizer.step must not make torch's LR scheduler warn about a healthy loop."""
    run = start(SMALL, 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        update_report(run.model, run.optimizer, lambda: train_steps(run, 1, eval_every=0))
        train_steps(run, 1, eval_every=0)
    messages = [str(w.message) for w in caught]
    assert not messages, f"update_report on a healthy run warned: {messages}"


# ----- does the model use its context? -----------------------------------------------------------------
def _model(bug: str | None = None) -> torch.nn.Module:
    pipe = SMALL if bug is None else inject(SMALL, bug)
    return pipe.build_model(0)


def test_healthy_model_uses_position_and_past_but_not_future():
    m = _model()
    assert position_sensitivity(m, V) > 0, "a healthy model must react to moving its input to a later position"
    assert past_sensitivity(m, V) > 0, "a healthy model's last logits must react to earlier tokens"
    assert future_sensitivity(m, V) == 0.0, "a causal model's logits moved when only a later token changed"


def test_no_positions_gives_exactly_zero_position_sensitivity():
    assert position_sensitivity(_model("no-positions"), V) == 0.0


def test_attend_self_only_gives_exactly_zero_past_sensitivity():
    m = _model("attend-self-only")
    assert past_sensitivity(m, V) == 0.0
    assert position_sensitivity(m, V) > 0, "attend-self-only keeps positions: only the past is cut off"


def test_causal_mask_off_gives_positive_future_sensitivity():
    assert future_sensitivity(_model("causal-mask-off"), V) > 0


@pytest.mark.parametrize("probe", [position_sensitivity, past_sensitivity, future_sensitivity])
def test_probes_restore_the_models_mode(probe):
    m = _model()
    for mode in (True, False):
        m.train(mode)
        probe(m, V)
        assert m.training == mode, f"{probe.__name__} left the model in the wrong train/eval mode"
