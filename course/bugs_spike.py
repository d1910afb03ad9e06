"""Bugs and triggers behind a late loss spike in an otherwise healthy run (notebook 04).

Registered in the catalogue of ``course.bugs`` (family late-spike) when ``course`` is imported.

``corrupted-shard``: the data stream holds, at data indices ``SHARD_START`` to
``SHARD_START + SHARD_LEN - 1``, batches whose every window is one token repeated (a corrupted file,
chunked into consecutive windows, as happens when a shard is not shuffled across files). Every other
batch is the reference one, so the run is healthy until the cursor reaches the shard, and the spike
comes back whenever those data indices are replayed.
"""

from __future__ import annotations

import torch

from .bugs import bug
from .pipeline import Pipeline

SHARD_START = 300  # the data index of the first corrupted batch
SHARD_LEN = 8  # consecutive corrupted batches
REPEATED_TOKEN = 6  # the token the corrupted windows repeat (modulo the number of symbols)


def is_corrupted(index: int) -> bool:
    """Is data index ``index`` inside the corrupted shard?"""
    return SHARD_START <= index < SHARD_START + SHARD_LEN


def _with_corrupted_shard(pipe: Pipeline, seed: int, index: int):
    from .train import windows_at  # late import: course.train imports the pipeline module

    windows = windows_at(pipe, seed, index)
    if is_corrupted(index):
        windows = torch.full_like(windows, REPEATED_TOKEN % pipe.n_symbols)
    return pipe.collate(windows, pipe.language().PAD)


@bug("late-spike", "healthy for 300 steps, then a loss spike and a slow recovery: a shard of one repeated token")
def corrupted_shard(pipe: Pipeline) -> Pipeline:
    """Eight consecutive batches of the data stream (data indices 300-307) are windows of a single
    token repeated, so a model that has learned the language meets data it finds very unlikely."""
    return pipe.replace(batches=_with_corrupted_shard)
