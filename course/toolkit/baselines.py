"""Baselines a loss is compared with, computed from the batch actually scored.

``uniform_loss(V)`` is the cross-entropy of a uniform guess over V classes, ln(V). It is a baseline to
compare against, not a fingerprint: a loss sitting at ln(V) is consistent with "no learning", but a
randomly initialised head is not exactly there, and a model can reach ln(V) for other reasons.

``unigram_entropy(targets)`` is the entropy of the empirical distribution of the targets the loss
actually scores (``IGNORE`` excluded): the best loss any model can reach without looking at its input.

``chain_loss(lang, windows)`` is the generating chain's own loss on a given set of windows: what a
perfect model scores on *those* windows. ``course.reference.diagnose.held_out_symptom(pipe)``
trains briefly and reads the held-out loss against it and against the window floor (notebook 01's
detector for "falls too well" and "stalls above the floor").

``entropy(p)`` is the Shannon entropy in nats of a distribution (0 log 0 = 0).
"""

from __future__ import annotations

import math

import torch

from .batch import IGNORE
from .outputs import logits_of


def entropy(p: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Shannon entropy in nats along ``dim``, with 0 log 0 = 0."""
    p = p.double()
    logp = torch.where(p > 0, p, torch.ones_like(p)).log()
    return -(p * logp).sum(dim)


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
    logits = logits_of(model(inputs))
    model.train(was)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten()).item()


def chain_loss(lang, windows: torch.Tensor) -> float:
    """The generating chain's own mean cross-entropy (nats) on the next-token targets of ``windows``.

    ``windows`` is (n, L) tokens of ``lang`` (full windows, no padding), as ``pipe.windows("val")``
    returns them; the targets are ``windows[:, 1:]``. Target 0 is scored with one token of context
    (``P(b | a)`` from the chain's stationary pairs), every later one with two (the transition table).
    This is what a perfect model scores on *these* windows: compare a held-out loss with it, not with
    the window floor or the entropy rate, which are averages: on a finite validation set the chain
    itself scores below the window floor about half the time, and sometimes below the rate.
    """
    w = windows.long()
    if w.dim() != 2 or w.shape[1] < 2:
        raise ValueError(f"windows must be (n, L) with L >= 2, got {tuple(w.shape)}")
    if w.min() < 0 or w.max() >= lang.n_symbols:
        raise ValueError("chain_loss needs full windows of language tokens (no PAD, EOS or IGNORE)")
    S = lang.n_symbols
    pair = lang.pair_stationary.view(S, S)
    first = (pair[w[:, 0], w[:, 1]] / lang.stationary[w[:, 0]]).log()
    nll = [-first]
    if w.shape[1] > 2:
        ctx = w[:, :-2] * S + w[:, 1:-1]
        nll.append(-lang.transition[ctx, w[:, 2:]].log().flatten())
    return torch.cat([t.flatten() for t in nll]).mean().item()


