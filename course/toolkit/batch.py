"""The batch contract every check of the toolkit reads, and the next-token loss on it.

A ``Batch`` holds ``inputs`` and ``targets``, (B, T) long tensors, where ``targets[b, t]`` is the
token that should follow ``inputs[b, :t+1]`` (already shifted by one), or ``IGNORE`` where nothing is
scored, and the padding id. Build one from your own data with ``Batch(inputs, targets, pad_id)``, or
collate token windows with ``next_token_batch`` (pre-training) or ``prompt_answer_batch`` (SFT:
the answer and its EOS are scored, never the prompt or the padding).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

IGNORE = -100  # F.cross_entropy's default ignore_index: a target with this value is not scored


# ----- batches ------------------------------------------------------------------------------------
@dataclass
class Batch:
    """What one training step consumes.

    ``inputs`` and ``targets`` are (B, T) long tensors; ``targets[b, t]`` is the token that should
    follow ``inputs[b, :t+1]``, or ``IGNORE`` where nothing is scored. ``pad_id`` is the padding token.
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    pad_id: int

    @property
    def scored(self) -> torch.Tensor:
        """Boolean (B, T): which targets the loss counts."""
        return self.targets != IGNORE


def next_token_batch(windows: torch.Tensor, pad_id: int) -> Batch:
    """The reference collation: windows (B, T+1) become inputs ``w[:, :-1]`` and targets ``w[:, 1:]``.

    A target is ignored where it is padding, so a padded window never scores the padding.
    """
    inputs = windows[:, :-1].clone()
    targets = windows[:, 1:].clone()
    targets[targets == pad_id] = IGNORE
    return Batch(inputs, targets, pad_id)


def pad_sequences(seqs: list[torch.Tensor], pad_id: int, eos_id: int | None = None) -> torch.Tensor:
    """Right-pad 1-D token tensors to one (B, L) tensor, appending ``eos_id`` to each first if given."""
    if eos_id is not None:
        seqs = [torch.cat([s, torch.tensor([eos_id])]) for s in seqs]
    L = max(len(s) for s in seqs)
    out = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
    return out


def prompt_answer_batch(prompts: list[torch.Tensor], answers: list[torch.Tensor], pad_id: int, eos_id: int) -> Batch:
    """Supervised fine-tuning collation: score the answer and its EOS, never the prompt or padding."""
    seqs = [torch.cat([p, a]) for p, a in zip(prompts, answers)]
    windows = pad_sequences(seqs, pad_id, eos_id)
    batch = next_token_batch(windows, pad_id)
    for i, p in enumerate(prompts):
        batch.targets[i, : max(len(p) - 1, 0)] = IGNORE  # targets that are still prompt tokens
    return batch


def token_cross_entropy(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Mean cross-entropy over the scored targets (``IGNORE`` targets do not count)."""
    return F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten())
