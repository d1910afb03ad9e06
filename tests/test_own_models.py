"""The toolkit on models the course did not write (``tests/own_models.py``): Hugging Face GPT-2 (an
output object with ``.logits``) and a causal ``nn.TransformerEncoder`` returning ``(logits, loss)``.

Every check passes on both healthy setups (the negative control) and fails on the fault it targets
(``own_models.TARGETS``); the locator names the layer that holds the planted inf; frozen tensors are
named and ``expect_frozen=`` fails the unexpected ones; an output the adapter cannot read raises an
error naming what the model returned. ``python tests/own_models.py`` prints the whole matrix.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn

import own_models as om
from course.lessons.adapters import add_lora
from course.toolkit.checks import BatchContractError, check_batch, update_report
from course.toolkit.nonfinite import Locator, locate_step
from course.toolkit.outputs import ModelOutputError, logits_of
from course.toolkit.preflight import preflight
from course.toolkit.telemetry import record_model


@pytest.fixture(scope="module")
def results():
    return om.matrix()


@pytest.mark.parametrize("arch", list(om.ARCHS))
def test_every_check_passes_on_the_healthy_setup(results, arch):
    failed = {c: m for c, (ok, m) in results[(arch, "healthy")].items() if not ok}
    assert not failed, f"healthy {arch} failed {failed}\n{om.table(results)}"


@pytest.mark.parametrize("arch", list(om.ARCHS))
@pytest.mark.parametrize("fault, check", [(f, c) for f, cs in om.TARGETS.items() for c in cs])
def test_each_check_fails_on_its_fault(results, arch, fault, check):
    ok, measured = results[(arch, fault)][check]
    assert not ok, f"{check!r} passed on {arch} with {fault!r}: {measured}\n{om.table(results)}"


@pytest.mark.parametrize("arch", list(om.ARCHS))
def test_the_locator_names_the_layer_with_the_inf(arch):
    s = om.setup(arch, "inf in one layer")
    finding = locate_step(s.model, s.optimizer, s.batch, s.loss_fn)
    assert finding is not None and (finding.step, finding.stage, finding.name) == (0, "activations", om.LAYER[arch]), finding


def test_the_locator_records_hugging_face_outputs_and_their_logits():
    s = om.healthy("gpt2")
    with Locator(s.model, s.optimizer) as loc:
        s.model(s.batch.inputs)
    stages = {e.name: e.stage for e in loc.events}
    assert stages.get("lm_head") == "logits", stages
    assert "transformer" in stages, "the GPT2Model's output object was not searched for tensors"


@pytest.mark.parametrize("arch", list(om.ARCHS))
def test_frozen_tensors_are_named_and_fail_only_when_not_expected(arch):
    s = om.setup(arch, "frozen block")
    block = [n for n, _ in s.model.named_parameters() if n.startswith(om.BLOCK[arch])]
    step = lambda m, o: (lambda: s.step_fn(m, o, s.batch, om.on_logits(s.loss_fn)))  # noqa: E731

    import copy
    m, o = copy.deepcopy((s.model, s.optimizer))
    quiet = update_report(m, o, step(m, o))
    assert quiet.ok and quiet.frozen == block, "without expect_frozen a frozen block is reported, not failed"
    assert f"frozen: {len(block)} tensors ({block[0]}" in quiet.frozen_summary()

    m, o = copy.deepcopy((s.model, s.optimizer))
    assert update_report(m, o, step(m, o), expect_frozen=block).ok, "the frozen block was expected"
    m, o = copy.deepcopy((s.model, s.optimizer))
    by_rule = update_report(m, o, step(m, o), expect_frozen=lambda n: n.startswith(om.BLOCK[arch]))
    assert by_rule.ok
    m, o = copy.deepcopy((s.model, s.optimizer))
    partly = update_report(m, o, step(m, o), expect_frozen=block[1:])
    assert partly.cause() == "frozen-unexpected" and partly.unexpected_frozen == block[:1]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = preflight(s.model, s.optimizer, s.batch, s.loss_fn, overfit_steps=5)
    assert report["update"].passed and f"frozen: {len(block)} tensors" in report["update"].measured


def test_expect_frozen_fails_a_tensor_expected_frozen_that_trains_and_rejects_unknown_names():
    s = om.healthy("encoder")
    name = "head.weight"
    r = update_report(s.model, s.optimizer, lambda: s.step_fn(s.model, s.optimizer, s.batch, om.on_logits(s.loss_fn)),
                      expect_frozen=[name])
    assert r.cause() == "trainable-unexpected" and r.not_frozen == [name]
    with pytest.raises(ValueError, match="no parameter"):
        update_report(s.model, s.optimizer, lambda: None, expect_frozen=["head.wieght"])


def test_expect_frozen_on_a_lora_base():
    s = om.healthy("encoder")
    adapters = add_lora(s.model, ["head"], rank=2)
    opt = torch.optim.AdamW(adapters, lr=1e-2)
    base = lambda n: not n.endswith((".A", ".B"))  # noqa: E731
    r = update_report(s.model, opt, lambda: s.step_fn(s.model, opt, s.batch, om.on_logits(s.loss_fn)), expect_frozen=base)
    assert r.ok, (r.cause(), r.frozen_summary())


def test_grads_reset_holds_under_dropout():
    """GPT-2's default config has dropout 0.1: the two steps must draw the same masks."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=om.V, n_positions=16, n_embd=om.D, n_layer=2, n_head=2,
                                       n_inner=2 * om.D, bos_token_id=0, eos_token_id=0))
    assert model.config.resid_pdrop > 0
    opt = torch.optim.AdamW(model.parameters(), lr=om.LR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        healthy = preflight(model, opt, om.make_batch(), om.mean_loss, overfit_steps=2)
        broken = preflight(model, opt, om.make_batch(), om.mean_loss, om.no_zero_grad_step, overfit_steps=2)
    assert healthy["grads reset"].passed, healthy["grads reset"]
    assert not broken["grads reset"].passed and "2.000" in broken["grads reset"].measured, broken["grads reset"]


class _ReturnsLossFirst(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, idx):
        logits, _ = self.inner(idx)
        return {"loss": logits.sum(), "scores": logits}


def test_an_output_without_logits_raises_an_error_naming_what_was_returned():
    s = om.healthy("encoder")
    model = _ReturnsLossFirst(s.model)
    with pytest.raises(ModelOutputError, match=r"dict\(\{'loss': Tensor\(\) float32, 'scores': Tensor\(4, 8, 16\)"):
        preflight(model, s.optimizer, s.batch, s.loss_fn, overfit_steps=2)
    with pytest.raises(ModelOutputError, match="cannot read logits"), Locator(model):
        model(s.batch.inputs)
    with pytest.raises(ModelOutputError):
        check_batch(s.batch, om.V, model=model)
    with pytest.raises(ModelOutputError):
        record_model(model, s.optimizer, [s.batch], s.loss_fn)
    with pytest.raises(ModelOutputError, match=r"tuple\(None, Tensor"):
        logits_of((None, torch.zeros(2)))


def test_logits_of_leaves_a_tensor_alone_and_reads_the_two_foreign_shapes():
    t = torch.zeros(1, 2, 3)
    assert logits_of(t) is t
    assert logits_of((t, None)) is t
    assert logits_of(om.gpt2()(torch.zeros(1, 2, dtype=torch.long))).shape == (1, 2, om.V)


class _LastPositionOnly(nn.Module):  # nanoGPT's forward without targets
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, idx, targets=None):
        logits, loss = self.inner(idx, targets)
        return (logits, loss) if targets is not None else (logits[:, [-1], :], None)


def test_the_batch_contract_catches_logits_of_the_last_position_only():
    s = om.healthy("encoder")
    check_batch(s.batch, om.V, model=s.model)
    with pytest.raises(BatchContractError, match=r"logits are \(4, 1, 16\) for inputs \(4, 8\)"):
        check_batch(s.batch, om.V, model=_LastPositionOnly(s.model))
    with pytest.raises(BatchContractError, match="expected"):
        check_batch(s.batch, om.V + 1, model=s.model)


@pytest.mark.parametrize("arch", list(om.ARCHS))
def test_the_probes_the_first_loss_and_the_overfit_read_foreign_outputs(arch):
    """past/future sensitivity, loss_at_init and overfit take the model's output through logits_of
    (the two architectures return an output object and a tuple); a causal model moves with its past
    and not with its future, and overfitting one batch lowers its loss."""
    from course.toolkit.baselines import loss_at_init
    from course.toolkit.checks import future_sensitivity, past_sensitivity
    from course.toolkit.overfit import overfit

    s = om.healthy(arch)
    vocab = int(s.batch.inputs.max()) + 1
    assert past_sensitivity(s.model, vocab) > 1e-4
    assert future_sensitivity(s.model, vocab) < 1e-5
    first = loss_at_init(s.model, s.batch.inputs, s.batch.targets)
    losses = overfit(s.model, s.optimizer, s.batch, 20, loss_fn=s.loss_fn)
    assert abs(losses[0] - first) < 0.5 and losses[-1] < losses[0], (first, losses[:3], losses[-1])
