"""Bugs that move the parameters by the wrong gradient (notebook 03).

Registered in the catalogue of ``course.bugs`` (family wrong-gradient) when ``course`` is imported.

* ``zero-grad-forgotten``: gradients accumulate across steps.
* ``loss-broadcast``: the loss multiplies an (N,) tensor by an (N, 1) one and reduces an (N, N) matrix.
* ``prompt-answer-mask-inverted`` and ``eos-masked``: supervised fine-tuning batches that supervise
  the wrong tokens. They wrap whatever collate the pipeline has; they are meant for the prompt/answer
  pipelines of ``course.lessons.sft.sft_pipeline`` (on a pre-training pipeline the inverted mask ignores every
  target, and there is no EOS to mask).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from ..toolkit.batch import IGNORE, Batch
from ..reference.pipeline import Pipeline
from .registry import bug

def _forgetful_class(cls: type) -> type:
    """A subclass of optimizer class ``cls`` whose ``zero_grad`` does nothing. Made afresh for each
    optimizer, not cached in the module: a cache would be data that a draw reads, which a submission
    could fill beforehand (the grading kernel puts the catalogue's data back, and a cache filled by an
    honest run would read as a change). A copy of the optimizer keeps its class, and so the bug."""
    return type(f"ForgetsZeroGrad{cls.__name__}", (cls,), {"zero_grad": lambda self, set_to_none=True: None})


def _optimizer_without_zero_grad(model, pipe):
    optimizer = pipe.optimizer_factory(model.parameters(), pipe.lr, pipe.weight_decay)
    optimizer.__class__ = _forgetful_class(type(optimizer))
    return optimizer


@bug("wrong-gradient", "loss falls, then wobbles or diverges: each step uses the sum of every gradient so far")
def zero_grad_forgotten(pipe: Pipeline) -> Pipeline:
    """``optimizer.zero_grad()`` is never effective (removed in a refactor, or called on another
    optimizer), so ``backward()`` adds each new gradient to all the earlier ones."""
    return pipe.replace(make_optimizer=_optimizer_without_zero_grad)


def _broadcast_loss(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    per_token = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), reduction="none")  # (N,)
    weights = batch.scored.flatten().to(per_token.dtype).unsqueeze(1)  # (N, 1): the bug
    return (per_token * weights).sum() / weights.sum()  # (N, N) summed: the SUM of token losses


@bug("wrong-gradient", "loss at init is thousands of nats, not near ln(V): the mean became a sum over an (N, N) matrix")
def loss_broadcast(pipe: Pipeline) -> Pipeline:
    """A masked mean written with a mask of shape (N, 1) against per-token losses of shape (N,):
    broadcasting makes an (N, N) matrix, and its sum divided by the mask's sum is the *sum* of the
    token losses, so the loss and its gradient scale with the number of tokens in the batch."""
    return pipe.replace(loss_fn=_broadcast_loss)


@dataclass(frozen=True)
class _CollateWrapper:
    inner: Callable

    def __getattr__(self, name):  # expose the wrapped collate's helpers (for example ``examples``)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


@dataclass(frozen=True)
class _InvertedMask(_CollateWrapper):
    def __call__(self, windows: torch.Tensor, pad_id: int) -> Batch:
        b = self.inner(windows, pad_id)
        targets = torch.full_like(b.targets, IGNORE)
        was_ignored = b.targets[:, :-1] == IGNORE
        nxt = b.inputs[:, 1:]
        targets[:, :-1] = torch.where(was_ignored & (nxt != pad_id), nxt, torch.full_like(nxt, IGNORE))
        return Batch(b.inputs, targets, pad_id)


@bug("wrong-gradient", "SFT loss falls, but the model learns to write prompts: the prompt is supervised, the answer ignored")
def prompt_answer_mask_inverted(pipe: Pipeline) -> Pipeline:
    """The prompt/answer mask is inverted (``mask`` where ``~mask`` was meant): prompt and template
    tokens are scored, the answer and its EOS are ignored."""
    return pipe.replace(collate=_InvertedMask(pipe.collate))


@dataclass(frozen=True)
class _EOSMasked(_CollateWrapper):
    def __call__(self, windows: torch.Tensor, pad_id: int) -> Batch:
        b = self.inner(windows, pad_id)
        eos = getattr(self.inner, "eos_id", pad_id + 1)  # the course's languages put EOS right after PAD
        targets = b.targets.clone()
        targets[targets == eos] = IGNORE
        return Batch(b.inputs, targets, pad_id)


@bug("wrong-gradient", "SFT loss looks fine, generation never stops: EOS is never a target")
def eos_masked(pipe: Pipeline) -> Pipeline:
    """EOS is masked with the padding (the mask is built from ``ids >= pad_id`` when EOS follows PAD
    in the vocabulary, or EOS is used as the padding token), so the model never learns to stop."""
    return pipe.replace(collate=_EOSMasked(pipe.collate))
