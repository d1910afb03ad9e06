"""Tiny-batch overfitting, its controls, and the lowest loss a batch allows.

Overfitting a handful of examples is a test of the *pipeline's ability to fit*, nothing more:

* ``overfit(...)`` trains a model on one fixed batch and returns the loss at every step. With
  ``step_fn=without_step(plain_step)`` it runs the same loop without ``optimizer.step()``: the
  negative control, which must not fit.
* ``fit_floor(batch)`` is the lowest mean cross-entropy *any* model can reach on that batch: a target
  whose prefix (all inputs up to it) appears in several rows with different next tokens cannot be
  predicted better than the entropy of those tokens. On ordinary data it is close to 0; with
  identical inputs and two conflicting labels it is ln 2.
* ``shuffled_labels`` and ``conflicting_labels`` make the two controls: a batch whose labels were
  permuted across rows (still fits: a fit certifies nothing about meaning), and one whose labels
  contradict each other (cannot fit below ``fit_floor``).

The threshold of a "did it overfit?" rule (say, loss < 0.05 within 35 steps) is a policy knob, not
a law: ``overfit_rule`` returns what the rule says and the numbers it read, and the notebook shows
healthy runs that miss it.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from .batch import IGNORE, Batch, token_cross_entropy
from .outputs import on_logits


def tiny_batch(batch: Batch, n: int = 8) -> Batch:
    """The first ``n`` rows of ``batch`` (a fixed set of examples to overfit)."""
    return Batch(batch.inputs[:n].clone(), batch.targets[:n].clone(), batch.pad_id)


def fit_floor(batch: Batch) -> float:
    """Lowest achievable mean cross-entropy on ``batch`` for a model that sees each target's prefix.

    Targets are grouped by their full prefix ``inputs[b, :t+1]``; within a group the best prediction
    is the group's empirical distribution, whose entropy is the unavoidable loss. ``IGNORE`` targets do
    not count. Exact for a causal model that can memorise; NaN if nothing is scored.
    """
    groups: dict[tuple, Counter] = defaultdict(Counter)
    x, y = batch.inputs.tolist(), batch.targets.tolist()
    for row_x, row_y in zip(x, y):
        for t, target in enumerate(row_y):
            if target != IGNORE:
                groups[tuple(row_x[: t + 1])][target] += 1
    total = sum(sum(c.values()) for c in groups.values())
    if total == 0:
        return float("nan")
    loss = 0.0
    for counts in groups.values():
        n = sum(counts.values())
        loss -= sum(k * math.log(k / n) for k in counts.values())
    return loss / total


def shuffled_labels(batch: Batch, seed: int = 0) -> Batch:
    """Each row gets the targets of another row (a fixed random permutation): the pairs are wrong,
    but consistent, so a model can still memorise them. Rows whose scored positions differ keep
    ``IGNORE`` where the original row had it."""
    g = torch.Generator().manual_seed(seed)
    n = batch.targets.shape[0]
    shift = int(torch.randint(1, n, (1,), generator=g)) if n > 1 else 0
    perm = (torch.arange(n) + shift) % n  # no row keeps its own targets
    targets = batch.targets[perm].clone()
    targets[batch.targets == IGNORE] = IGNORE
    return Batch(batch.inputs.clone(), targets, batch.pad_id)


def conflicting_labels(batch: Batch, vocab: int) -> Batch:
    """Every row twice, the copy with every scored target replaced by a different token: identical
    inputs, two labels each, so the best any model can do is ln 2 per target."""
    other = batch.targets.clone()
    scored = other != IGNORE
    other[scored] = (other[scored] + 1) % vocab
    other[scored & (other == batch.pad_id)] = (batch.pad_id + 1) % vocab  # never the padding token
    return Batch(torch.cat([batch.inputs, batch.inputs]), torch.cat([batch.targets, other]), batch.pad_id)


def smoothed_cross_entropy(smoothing: float) -> Callable[[torch.Tensor, Batch], torch.Tensor]:
    """The pipeline's loss with label smoothing (its minimum is above 0 by construction)."""

    def loss(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), label_smoothing=smoothing)

    return loss


def plain_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: Batch, loss_fn: Callable) -> float:
    """One textbook training step: zero_grad, forward, loss, backward, step. Returns the loss."""
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(batch.inputs), batch)
    loss.backward()
    optimizer.step()
    return loss.item()


def without_step(step_fn: Callable) -> Callable:
    """``step_fn`` with ``optimizer.step()`` turned into a no-op: the negative control of an overfit."""

    def step(model, optimizer, batch, loss_fn):
        original = optimizer.__dict__.get("step")
        optimizer.step = lambda *args, **kwargs: None
        try:
            return step_fn(model, optimizer, batch, loss_fn)
        finally:
            if original is None:
                del optimizer.step
            else:
                optimizer.step = original

    return step


def overfit(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: Batch, steps: int,
            loss_fn: Callable = token_cross_entropy, step_fn: Callable = plain_step) -> list[float]:
    """Train ``model`` in place on the one ``batch`` for ``steps`` calls of ``step_fn``.

    Returns ``steps + 1`` losses: ``losses[k]`` is the training loss after ``k`` steps (the model
    stays in train mode, so dropout, if any, is on when the last one is measured).
    """
    loss_fn = on_logits(loss_fn)  # any output logits_of reads: a tensor, (logits, loss), .logits
    model.train()
    losses = [step_fn(model, optimizer, batch, loss_fn) for _ in range(steps)]
    with torch.no_grad():
        losses.append(loss_fn(model(batch.inputs), batch).item())
    return losses


@dataclass
class RuleResult:
    """What an "overfit within N steps below a threshold" rule said about one run."""

    passed: bool
    final_loss: float
    best_loss: float
    first_step_below: int | None  # first step whose loss is under the threshold, None if never
    threshold: float
    steps: int

    def __str__(self) -> str:
        when = f"first below at step {self.first_step_below}" if self.first_step_below is not None else "never below"
        verdict = "PASSES" if self.passed else "MISSES"
        return f"{verdict} (final {self.final_loss:.4f}, best {self.best_loss:.4f}, {when}; rule: < {self.threshold} within {self.steps} steps)"


def overfit_rule(losses: list[float], threshold: float = 0.05, steps: int = 35) -> RuleResult:
    """Apply "loss < ``threshold`` within ``steps`` steps" to a loss history from ``overfit``.

    ``losses[k]`` is the loss after ``k`` steps; the rule passes if any of ``losses[1..steps]`` is
    below the threshold. A policy knob: passing it does not prove the labels mean anything, missing
    it does not prove a bug.
    """
    window = losses[1: steps + 1]
    below = [k + 1 for k, v in enumerate(window) if v < threshold]
    return RuleResult(bool(below), window[-1] if window else float("nan"), min(window) if window else float("nan"),
                      below[0] if below else None, threshold, steps)


