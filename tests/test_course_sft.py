"""Specifications of ``course.lessons.sft``, the wrong-gradient bugs of ``course.bugs.fitting`` and
``course.lessons.adapters``: the gate passes healthy batches (negative control) and fails each broken one."""

from __future__ import annotations

import pytest
import torch

from course.lessons.adapters import add_lora, base_snapshot, changed_base_tensors, linear_names
from course.bugs import inject
from course.toolkit.batch import IGNORE, Batch
from course.toolkit.overfit import overfit
from course.lessons.sft import DEFAULT_TEMPLATE, MaskGateError, Template, collate_sft, examples_at, mask_gate, sft_pipeline
from course.reference.train import batch_at

from small_pipeline import SMALL

SFT = sft_pipeline(SMALL, min_len=6)
EOS = SMALL.language().EOS


def test_collate_supervises_answer_and_eos_only():
    b = collate_sft([(torch.tensor([7, 8]), torch.tensor([9]))], Template((0,), (2,)), 16, 17)
    assert b.inputs.tolist() == [[0, 7, 8, 2, 9]]
    assert b.targets.tolist() == [[IGNORE, IGNORE, IGNORE, 9, 17]]


@pytest.mark.parametrize("seed", [0, 1])
def test_gate_passes_healthy_sft_batches(seed):
    got = mask_gate(batch_at(SFT, seed, 0), examples_at(SFT, seed, 0), DEFAULT_TEMPLATE, EOS)
    assert got == {"answer": 1.0, "eos": 1.0, "context": 0.0, "padding": 0.0}


@pytest.mark.parametrize("bug", ["prompt-answer-mask-inverted", "eos-masked"])
def test_gate_fails_the_sft_bugs(bug):
    p = inject(SFT, bug)
    with pytest.raises(MaskGateError):
        mask_gate(batch_at(p, 0, 0), examples_at(p, 0, 0), DEFAULT_TEMPLATE, EOS)


def test_gate_fails_a_scored_answer_prefix():
    ex = [(torch.tensor([5]), torch.tensor([6, 7]))]
    b = collate_sft(ex, DEFAULT_TEMPLATE, 16, 17)
    t = b.targets.clone()
    t[0, 3] = 3  # the target that predicts the last assistant marker
    with pytest.raises(MaskGateError, match="prompt or template"):
        mask_gate(Batch(b.inputs, t, 16), ex, DEFAULT_TEMPLATE, 17)


def test_loss_broadcast_returns_the_sum_of_token_losses():
    model = SMALL.build_model(0)
    b = batch_at(SMALL, 0, 0)
    with torch.no_grad():
        logits = model(b.inputs)
        mean = SMALL.loss_fn(logits, b)
        broken = inject(SMALL, "loss-broadcast").loss_fn(logits, b)
    assert broken.item() == pytest.approx(mean.item() * b.scored.sum().item(), rel=1e-4)


def test_zero_grad_forgotten_doubles_the_gradient_and_the_reference_does_not():
    b = batch_at(SMALL, 0, 0)
    for name, factor in ((None, 1.0), ("zero-grad-forgotten", 2.0)):
        p = SMALL if name is None else inject(SMALL, name)
        model = p.build_model(0)
        opt = p.make_optimizer(model, p)
        grads = []
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            p.loss_fn(model(b.inputs), b).backward()
            grads.append(model.head.weight.grad.clone())
        assert torch.allclose(grads[1], factor * grads[0]), f"{name}: second gradient is not {factor} x the first"


def test_lora_starts_at_the_base_gives_a_zero_grad_and_leaves_the_base_bit_identical():
    base = SMALL.build_model(0)
    model = SMALL.build_model(0)
    params = add_lora(model, linear_names(model), rank=2)
    snap = base_snapshot(model)
    b = batch_at(SMALL, 0, 0)
    with torch.no_grad():
        assert torch.equal(model(b.inputs), base(b.inputs)), "B = 0: the adapted model must equal the base"
    torch.nn.functional.cross_entropy(model(b.inputs).flatten(0, 1), b.targets.flatten()).backward()
    assert all(p.grad.abs().max() == 0 for p in params[0::2]), "A must get an exactly zero gradient at step 1"
    assert all(p.grad.abs().max() > 0 for p in params[1::2]), "B must get a nonzero gradient at step 1"
    model.zero_grad(set_to_none=True)
    overfit(model, torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1), b, 3)
    assert changed_base_tensors(model, snap) == []
    control = SMALL.build_model(0)
    add_lora(control, linear_names(control), rank=2, freeze=False)
    snap = base_snapshot(control)
    overfit(control, torch.optim.AdamW(control.parameters(), lr=1e-2), b, 1)
    assert changed_base_tensors(control, snap), "negative control: an unfrozen base must change"
