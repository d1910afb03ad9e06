"""Baselines a loss is compared with, computed from the batch actually scored.

``uniform_loss(V)`` is the cross-entropy of a uniform guess over V classes, ln(V). It is a baseline to
compare against, not a fingerprint: a loss sitting at ln(V) is consistent with "no learning", but a
randomly initialised head is not exactly there, and a model can reach ln(V) for other reasons.

``unigram_entropy(targets)`` is the entropy of the empirical distribution of the targets the loss
actually scores (``IGNORE`` excluded): the best loss any model can reach without looking at its input.
"""

from __future__ import annotations

import math

import torch

from .data import IGNORE, entropy


def uniform_loss(vocab_size: int) -> float:
    """ln(V): the loss of predicting every one of ``vocab_size`` classes with probability 1/V."""
    return math.log(vocab_size)


def unigram_entropy(targets: torch.Tensor, ignore_index: int = IGNORE) -> float:
    """Entropy (nats) of the scored targets' empirical distribution; NaN if nothing is scored."""
    scored = targets[targets != ignore_index]
    if scored.numel() == 0:
        return float("nan")
    counts = torch.bincount(scored.flatten()).double()
    return entropy(counts / counts.sum()).item()


@torch.no_grad()
def loss_at_init(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> float:
    """Mean cross-entropy of ``model`` on one batch, in eval mode, before any update."""
    was = model.training
    model.eval()
    logits = model(inputs)
    model.train(was)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten()).item()
