"""Bugs and triggers behind a late loss spike in an otherwise healthy run (notebook 04).

Registered in the catalogue of ``course.bugs`` (family late-spike) when ``course`` is imported.
Every bug of the family strikes at the same point of a run: data index / optimizer step
``shard_start(pipe)`` (30% of the schedule's ``pipe.steps``; 300 for a 1000-step schedule), for
``SHARD_LEN`` steps. So *where* the spike comes tells nothing about *which* bug it is; what tells
them apart is an experiment (replay the same state on other data) and a look at the batch.

Two causes live in the **data** (the spike comes back whenever those data indices are trained on,
from any state, and never on other data):

``corrupted-shard``: the batches at data indices ``shard_start`` to ``shard_start + SHARD_LEN - 1``
are windows of one token repeated (a corrupted file, chunked into consecutive windows, as happens
when a shard is not shuffled across files).

``garbled-shard``: the same data indices hold ordinary-looking inputs whose *targets* are random
tokens (a shard whose label file is misaligned with its text): the inputs pass every look at the
batch's token statistics, but the targets do not follow the inputs.

Two live in the **optimizer** (the spike comes at that optimizer step whatever data it meets):

``lr-burst``: the optimizer factory builds an AdamW that multiplies its learning rate by
``BURST_FACTOR`` for ``SHARD_LEN`` steps from step ``shard_start`` (a warm restart left in a schedule
wrapper). The ``lr`` the loop logs is the scheduler's, so the burst shows only in the update size.

``optimizer-state-reset``: the update step zeroes Adam's moments once, at step ``shard_start`` (a
resume that rebuilt the optimizer state but kept its step count): the bias correction no longer
matches, and the next steps are many times larger than Adam's usual step.

Every bug changes exactly one part (``batches``, ``optimizer_factory`` or ``update``), so
``course.exercises.mystery.draw`` can hide each of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..toolkit.batch import IGNORE
from ..reference.pipeline import Pipeline
from .registry import bug

SHARD_START = 300  # the data index of the first corrupted batch for a 1000-step schedule
SHARD_FRACTION = 0.3  # where the family strikes: this fraction of pipe.steps
SHARD_LEN = 8  # consecutive corrupted batches (or burst steps)
REPEATED_TOKEN = 6  # the token the corrupted windows repeat (modulo the number of symbols)
BURST_FACTOR = 30.0  # lr-burst: the learning rate is this many times the scheduled one


def shard_start(pipe: Pipeline | None = None) -> int:
    """The data index (and optimizer step) where the late-spike bugs strike for ``pipe``:
    ``round(0.3 * pipe.steps)``; ``SHARD_START`` (300) when no pipeline is given."""
    return SHARD_START if pipe is None else round(SHARD_FRACTION * pipe.steps)


def is_corrupted(index: int, pipe: Pipeline | None = None) -> bool:
    """Is data index ``index`` inside the shard (of ``pipe``; default a 1000-step schedule)?"""
    start = shard_start(pipe)
    return start <= index < start + SHARD_LEN


# ----- the data ------------------------------------------------------------------------------------
def _with_corrupted_shard(pipe: Pipeline, seed: int, index: int):
    from ..reference.train import windows_at  # late import: course.reference.train imports the pipeline module

    windows = windows_at(pipe, seed, index)
    if is_corrupted(index, pipe):
        windows = torch.full_like(windows, REPEATED_TOKEN % pipe.n_symbols)
    return pipe.collate(windows, pipe.language().PAD)


@bug("late-spike", "healthy for 30% of the schedule, then a loss spike and a slow recovery: a shard of one repeated token")
def corrupted_shard(pipe: Pipeline) -> Pipeline:
    """Eight consecutive batches of the data stream (data indices ``shard_start(pipe)`` on: 300-307
    for a 1000-step schedule) are windows of a single token repeated, so a model that has learned the
    language meets data it finds very unlikely."""
    return pipe.replace(batches=_with_corrupted_shard)


def _with_garbled_shard(pipe: Pipeline, seed: int, index: int):
    from ..reference.train import windows_at

    batch = pipe.collate(windows_at(pipe, seed, index), pipe.language().PAD)
    if is_corrupted(index, pipe):
        g = torch.Generator().manual_seed(seed * 7919 + index)
        noise = torch.randint(0, pipe.n_symbols, batch.targets.shape, generator=g)
        batch.targets = torch.where(batch.targets == IGNORE, batch.targets, noise)
    return batch


@bug("late-spike", "healthy for 30% of the schedule, then a loss spike: a shard whose targets are random tokens")
def garbled_shard(pipe: Pipeline) -> Pipeline:
    """The same eight data indices as ``corrupted-shard`` hold ordinary inputs whose targets are
    uniformly random tokens (a label file misaligned with its text): the inputs look like every
    other batch, but the targets do not follow them."""
    return pipe.replace(batches=_with_garbled_shard)


# ----- the optimizer -------------------------------------------------------------------------------
def _steps_taken(optimizer: torch.optim.Optimizer) -> int:
    """How many steps ``optimizer`` (an Adam-like one) has taken: its per-parameter step count."""
    for state in optimizer.state.values():
        if "step" in state:
            return int(state["step"])
    return 0


class _BurstAdamW(torch.optim.AdamW):
    """AdamW whose learning rate is multiplied by ``factor`` while ``at <= steps taken < at + n``."""

    def __init__(self, params, lr, weight_decay, at: int, n: int, factor: float):
        super().__init__(params, lr=lr, weight_decay=weight_decay)
        self._burst = (at, n, factor)

    @torch.no_grad()
    def step(self, closure=None):
        at, n, factor = self._burst
        if not at <= _steps_taken(self) < at + n:
            return super().step(closure)
        saved = [g["lr"] for g in self.param_groups]
        for g in self.param_groups:
            g["lr"] = g["lr"] * factor
        try:
            return super().step(closure)
        finally:
            for g, lr in zip(self.param_groups, saved):
                g["lr"] = lr


@dataclass(frozen=True)
class _BurstFactory:
    at: int

    def __call__(self, params, lr, weight_decay):
        return _BurstAdamW(params, lr, weight_decay, self.at, SHARD_LEN, BURST_FACTOR)


@bug("late-spike", "healthy for 30% of the schedule, then a loss spike: the learning rate jumps for a few steps")
def lr_burst(pipe: Pipeline) -> Pipeline:
    """The optimizer is an AdamW whose learning rate is multiplied by 30 for eight steps from step
    ``shard_start(pipe)`` (a warm restart left in a schedule wrapper). The loop logs the scheduler's
    learning rate, so the logged ``lr`` is smooth; the relative update shows the burst."""
    return pipe.replace(optimizer_factory=_BurstFactory(shard_start(pipe)))


@dataclass(frozen=True)
class _ResetThenStep:
    at: int

    def __call__(self, optimizer):
        if _steps_taken(optimizer) == self.at:
            for state in optimizer.state.values():
                if "exp_avg_sq" in state:
                    state["exp_avg_sq"].zero_()
        optimizer.step()


@bug("late-spike", "healthy for 30% of the schedule, then a loss spike: Adam's moments are zeroed once")
def optimizer_state_reset(pipe: Pipeline) -> Pipeline:
    """At step ``shard_start(pipe)`` the update zeroes Adam's first and second moments but keeps the
    step count (a resume that rebuilt the optimizer state and restored only the counter), so the bias
    correction no longer matches and the next steps are far larger than Adam's usual step."""
    return pipe.replace(update=_ResetThenStep(shard_start(pipe)))
