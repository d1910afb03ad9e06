"""Bugs that let the examples of a batch see each other (notebook 03's backprop dependency test).

A healthy model computes each example of a batch on its own: the loss of example i has a gradient
on the input of example i and on no other (exactly zero, not small), and the logits at position t
have no gradient on a later position. These bugs break that, each the way real code does, through
the pipeline's ``prepare`` part (the model is built as usual, then one module is swapped):

* ``final-norm-over-batch`` (family ``wrong-gradient``): the final normalisation takes its mean and
  variance over the batch axis (``dim=0``) where the features (``dim=-1``) were meant. Each
  position is still normalised on its own, so nothing leaks along time. It trains like the
  healthy model (``tests/test_course_dependence.py`` measures where its training loss falls among
  healthy seeds); a batch of one example normalises everything to the bias.
* ``norms-over-batch-and-time`` (family ``wrong-gradient``): every normalisation takes BatchNorm's
  statistics (over the batch and time axes) where LayerNorm's were meant: examples see each other,
  and every position sees the later ones through the mean and variance.
* ``attention-output-time-major`` (family ``context-unused``): each attention's output, computed
  time-major (T, B, D) as ``nn.MultiheadAttention`` returns it by default, is reshaped with
  ``.view(B, T, D)`` where ``.transpose(0, 1)`` was meant, so example b at position t receives
  another example's (and often a later position's) attention output. The model learns to ignore
  its attention and stalls near the bigram entropy.

The swapped modules keep the original parameters (same names, same tensors), so the optimizer,
checkpoints and ``update_report`` see the model they expect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn

from ..reference.model import Attention
from ..reference.pipeline import Pipeline
from .registry import bug


class _NormOver(nn.Module):
    """LayerNorm's affine normalisation with its statistics taken over ``dims`` instead of the last
    axis. Holds the replaced LayerNorm's own ``weight`` and ``bias`` parameters."""

    def __init__(self, norm: nn.LayerNorm, dims: tuple[int, ...]):
        super().__init__()
        self.weight, self.bias, self.eps, self.dims = norm.weight, norm.bias, norm.eps, dims

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(self.dims, keepdim=True)
        var = x.var(self.dims, unbiased=False, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


@dataclass(frozen=True)
class _NormsOver:
    """A model preparation: ``inner``, then every LayerNorm named in ``names`` (all when empty)
    replaced by a ``_NormOver(dims)`` holding its parameters."""

    inner: Callable
    dims: tuple[int, ...]
    names: tuple[str, ...] = ()

    def __call__(self, model):
        model = self.inner(model)
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.LayerNorm) and (not self.names or name in self.names):
                    setattr(parent, name, _NormOver(child, self.dims))
        return model


class _TimeMajorViewAttention(Attention):
    """The reference attention whose output, held time-major, is reshaped with ``view``."""

    def forward(self, x: torch.Tensor, cache: dict | None = None) -> torch.Tensor:
        B, T, D = x.shape
        time_major = super().forward(x, cache).transpose(0, 1).contiguous()  # (T, B, D)
        return time_major.view(B, T, D)  # meant: time_major.transpose(0, 1)


@dataclass(frozen=True)
class _TimeMajorOutputs:
    """A model preparation: ``inner``, then every attention reshapes its output with ``view``."""

    inner: Callable

    def __call__(self, model):
        model = self.inner(model)
        for m in model.modules():
            if type(m) is Attention:
                m.__class__ = _TimeMajorViewAttention
        return model


_QUIET = "the loss curve looks healthy; "


@bug("wrong-gradient", _QUIET + "each example's logits depend on the other examples of its batch")
def final_norm_over_batch(pipe: Pipeline) -> Pipeline:
    """The final LayerNorm is hand-written with its statistics over the batch axis
    (``x.mean(dim=0)``, ``x.var(dim=0)``) where the features (``dim=-1``) were meant. What it
    breaks: examples of a batch are no longer independent; a prediction changes with what else is
    in the batch, and a batch of one example is normalised to the bias alone (the same logits at
    every position). Why the loss does not show it: with a batch of many examples the batch
    statistics are nearly the same from batch to batch, so the model learns with them as with any
    normalisation, and its training loss stays among the healthy seeds'. The backprop dependency
    test sees it: the loss of example i has a gradient on the other examples' inputs."""
    return pipe.replace(prepare=_NormsOver(pipe.prepare, (0,), ("ln_f",)))


@bug("wrong-gradient", "examples see each other, and each position sees the later ones")
def norms_over_batch_and_time(pipe: Pipeline) -> Pipeline:
    """Every LayerNorm takes BatchNorm's statistics, over the batch and time axes
    (``dim=(0, 1)``), where LayerNorm's (``dim=-1``) were meant. Examples see each other, and
    through the mean and variance every position sees the later ones."""
    return pipe.replace(prepare=_NormsOver(pipe.prepare, (0, 1)))


@bug("context-unused", "loss stalls near the bigram entropy: attention outputs land on other examples and positions")
def attention_output_time_major(pipe: Pipeline) -> Pipeline:
    """Each attention's output, computed time-major (T, B, D) as ``nn.MultiheadAttention`` returns it
    by default, is reshaped with ``.view(B, T, D)`` where ``.transpose(0, 1)`` was meant (Karpathy's
    "view instead of transpose"). Example b at position t then receives the attention output of
    another example, often at a later position; the model learns to ignore attention and its loss
    stalls near the bigram entropy. With one example (generation) the view is harmless."""
    return pipe.replace(prepare=_TimeMajorOutputs(pipe.prepare))
