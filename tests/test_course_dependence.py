"""Specifications of ``course.toolkit.dependence`` (the backprop dependency test) and of the
batch-mixing bugs of ``course.bugs.mixing``, each with its negative control: the healthy model is
quiet where a bug fires, and the loss check that calls a bug "healthy-looking" rejects a bug whose
loss is not."""

from __future__ import annotations

import pytest
import torch

from course import ModelConfig, Pipeline
from course.bugs import get, inject
from course.reference.train import train
from course.toolkit.dependence import dependence

BASE = Pipeline(seq_len=16, model=ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64))
TOKENS = torch.randint(0, 16, (4, 8), generator=torch.Generator().manual_seed(0))


def _forbidden(d: torch.Tensor, along: str) -> torch.Tensor:
    n = d.shape[0]
    mask = ~torch.eye(n, dtype=torch.bool) if along == "batch" else torch.ones(n, n, dtype=torch.bool).triu(1)
    return d[mask]


def _fires(pipe: Pipeline, along: str, seed: int = 0) -> bool:
    d = dependence(pipe.build_model(seed), TOKENS, along)
    return bool(_forbidden(d, along).max() > 1e-6 * d.max())


@pytest.mark.parametrize("along", ["batch", "time"])
def test_a_healthy_models_forbidden_gradients_are_exactly_zero_and_its_allowed_ones_are_not(along):
    d = dependence(BASE.build_model(0), TOKENS, along)
    n = TOKENS.shape[0] if along == "batch" else TOKENS.shape[1]
    assert d.shape == (n, n) and d.dtype == torch.float64
    assert _forbidden(d, along).max().item() == 0.0, f"a healthy model depends on a forbidden input along {along}"
    assert (d.diagonal() > 0).all(), "each example (position) must depend on its own input"


def test_dependence_works_on_frozen_parameters_and_leaves_parameters_and_grads_alone():
    model = BASE.build_model(0)
    for p in model.parameters():
        p.requires_grad_(False)
    before = [p.detach().clone() for p in model.parameters()]
    d = dependence(model, TOKENS, "batch")
    assert (d.diagonal() > 0).all(), "frozen parameters: the embedding output is still a leaf of our own"
    assert all(torch.equal(a, p) and p.grad is None for a, p in zip(before, model.parameters()))


def test_dependence_refuses_an_unknown_axis():
    with pytest.raises(ValueError, match="along"):
        dependence(BASE.build_model(0), TOKENS, "channels")


# (bug, fires along batch, fires along time): each bug fires exactly where it mixes
WHERE = [
    ("final-norm-over-batch", True, False),
    ("norms-over-batch-and-time", True, True),
    ("attention-output-time-major", True, True),
    ("causal-mask-off", False, True),
]


@pytest.mark.parametrize("name, batch, time", WHERE)
def test_each_mixing_bug_fires_along_the_axes_it_mixes_and_only_those(name, batch, time):
    broken = inject(BASE, name)
    assert (_fires(broken, "batch"), _fires(broken, "time")) == (batch, time)
    assert (_fires(BASE, "batch"), _fires(BASE, "time")) == (False, False), "negative control: the healthy model"


def test_final_norm_over_batch_gives_one_example_alone_the_same_logits_at_every_position():
    with torch.no_grad():
        alone = inject(BASE, "final-norm-over-batch").build_model(0)(TOKENS[:1])[0]
        healthy = BASE.build_model(0)(TOKENS[:1])[0]
    assert (alone - alone[0]).abs().max().item() == 0.0
    assert (healthy - healthy[0]).abs().max().item() > 0.0, "negative control: the healthy model's positions differ"


def test_the_mixing_bugs_keep_the_models_parameters():
    healthy = dict(BASE.build_model(0).named_parameters())
    for name in ("final-norm-over-batch", "norms-over-batch-and-time", "attention-output-time-major"):
        broken = dict(inject(BASE, name).build_model(0).named_parameters())
        assert broken.keys() == healthy.keys(), f"{name} renamed or dropped parameters"
        assert all(torch.equal(broken[k], healthy[k]) for k in healthy), f"{name} changed the initialisation"
        assert get(name).family in ("wrong-gradient", "context-unused")


# The training-loss claim, on notebook 03's setting (batch 16, 250 steps) with seeds the notebook
# does not use: a bug "looks healthy" when its final loss (mean of the last 20 steps) is no further
# from the healthy seeds' median than the healthy seeds' own spread (max - min).
LOSS_BASE = BASE.replace(batch_size=16, n_train=4096, n_val=64, steps=250, warmup=10)


def _final(pipe: Pipeline, seed: int) -> float:
    losses = train(pipe, seed=seed, eval_every=0).history["loss"]
    return sum(losses[-20:]) / 20


@pytest.fixture(scope="module")
def healthy_finals():
    return sorted(_final(LOSS_BASE, s) for s in (3, 4, 5))


def _looks_healthy(value: float, finals: list[float]) -> bool:
    return abs(value - finals[1]) <= finals[-1] - finals[0]


def test_final_norm_over_batch_trains_within_the_healthy_seeds_spread(healthy_finals):
    bug = _final(inject(LOSS_BASE, "final-norm-over-batch"), 3)
    assert _looks_healthy(bug, healthy_finals), f"bug {bug:.4f}, healthy seeds {healthy_finals}"


def test_the_spread_check_rejects_a_mixing_bug_whose_loss_shows_it(healthy_finals):
    """Negative control of the check above: the time-major view stalls near the bigram entropy."""
    bug = _final(inject(LOSS_BASE, "attention-output-time-major"), 3)
    assert not _looks_healthy(bug, healthy_finals), f"bug {bug:.4f}, healthy seeds {healthy_finals}"
