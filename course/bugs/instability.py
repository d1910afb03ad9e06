"""Bugs behind a run that diverges early or trains worse than it should (notebook 12).

Registered in the catalogue of ``course.bugs`` (family lr-instability) when ``course`` is imported.
Every setting of a broken pipeline reads as the healthy one (the learning rate, ``warmup``,
``clip``): each bug lives in one part, so only the run's behaviour, or a part swapped for the
reference, can tell them apart.

``warmup-skipped``: the schedule part ignores ``warmup`` and starts at the full rate (a schedule
written for a run without warm-up, reused; or a config key that never reaches it). At a rate that
needs warm-up, the first steps overshoot: an early spike and a worse loss at the end.

``warmup-in-examples``: the schedule counts ``warmup`` in examples of a 16-window batch where the
run counts steps (``warmup * 16`` steps of warm-up, whatever the batch size), so the rate is still
climbing when the run ends.

``adam-eps-large``: the optimizer factory builds AdamW with ``eps=0.1`` (a value from another
library's convention, or a typo). Adam divides each step by ``sqrt(v) + eps``; with gradients
much smaller than 0.1 the denominator is about ``eps``, and Adam becomes SGD with momentum (its
``beta1`` average) at a rate ``lr / eps`` that is too small here: a run that falls slowly (at rates
far above the best it can still diverge).

``adam-beta2-low``: AdamW with ``betas=(0.9, 0.5)``: the second moment averages over about two
steps instead of a thousand, so one small gradient after large ones makes a step many times larger
than Adam's usual step; the loss is noisier and ends worse.

``init-too-small``: the model's weights are initialised with a standard deviation 100 times
smaller than the reference's 0.02 (``0.0002``, a typo of the exponent): every layer's output starts
near zero; the loss ends worse, and at some rates it jumps in the first steps before it falls.

Each bug changes exactly one part (``schedule``, ``optimizer_factory`` or ``prepare``), so
``course.exercises.mystery.draw`` can hide each of them.
"""

from __future__ import annotations

import torch

from ..reference.pipeline import Pipeline, warmup_then_linear
from .registry import bug

EPS_LARGE = 0.1
BETA2_LOW = 0.5
INIT_SCALE = 0.01  # of the reference initialisation (std 0.02 -> 0.0002)


def _no_warmup(step: int, warmup: int, total: int) -> float:
    return warmup_then_linear(step, 1, total)


@bug("lr-instability", "an early loss spike, then a worse loss than a healthy run: the schedule skips warm-up")
def warmup_skipped(pipe: Pipeline) -> Pipeline:
    """The schedule part starts at the full learning rate whatever ``warmup`` says (the linear decay
    is kept)."""
    return pipe.replace(schedule=_no_warmup)


def _warmup_in_examples(step: int, warmup: int, total: int) -> float:
    return warmup_then_linear(step, warmup * 16, total)


@bug("lr-instability", "a loss that falls too slowly: the learning rate is still warming up when the run ends")
def warmup_in_examples(pipe: Pipeline) -> Pipeline:
    """The schedule part warms up over ``warmup * 16`` steps (warm-up counted in examples of a
    16-window batch, the run in steps): the rate the optimizer uses stays far below ``lr``."""
    return pipe.replace(schedule=_warmup_in_examples)


def _adamw_eps_large(params, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, eps=EPS_LARGE)


@bug("lr-instability", "a loss that falls too slowly: Adam's eps swamps its denominator")
def adam_eps_large(pipe: Pipeline) -> Pipeline:
    """AdamW with ``eps=0.1`` instead of ``1e-8``: the update is ``lr * m / (sqrt(v) + 0.1)``, which
    for gradients far below 0.1 is SGD at rate ``lr / 0.1``, too small for this run."""
    return pipe.replace(optimizer_factory=_adamw_eps_large)


def _adamw_beta2_low(params, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=(0.9, BETA2_LOW))


@bug("lr-instability", "a noisy loss that ends worse than a healthy run: Adam's beta2 forgets in two steps")
def adam_beta2_low(pipe: Pipeline) -> Pipeline:
    """AdamW with ``betas=(0.9, 0.5)`` instead of ``(0.9, 0.999)``: the second-moment estimate
    follows the last couple of gradients, so its steps swing with them."""
    return pipe.replace(optimizer_factory=_adamw_beta2_low)


def _shrink_init(model: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:  # the weights initialised with std 0.02; norms and biases keep theirs
                p.mul_(INIT_SCALE)
    return model


@bug("lr-instability", "a worse loss, at some rates a jump in the first steps: weights initialised 100 times too small")
def init_too_small(pipe: Pipeline) -> Pipeline:
    """The model's weight matrices and embeddings start with standard deviation 0.0002 instead of
    0.02 (every matrix of the reference initialisation scaled by 0.01)."""
    prepare = pipe.prepare
    return pipe.replace(prepare=_ScaledAfter(prepare))


class _ScaledAfter:
    """``prepare`` then the too-small initialisation (a class, so the pipeline stays picklable)."""

    def __init__(self, prepare):
        self.prepare = prepare

    def __call__(self, model):
        return _shrink_init(self.prepare(model))
