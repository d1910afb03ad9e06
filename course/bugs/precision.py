"""Bugs of notebook 10 (family ``fp16-overflow``): a run that is finite in float32 goes inf/NaN under
fp16 autocast. Each puts the overflow in a different place, which is what a learner's tests must
tell apart:

* the **loss** (``loss_fn``): the logits are multiplied by a huge factor before the cross-entropy
  (``logit-temperature``: divided by a temperature of 1e-6 where 1 was meant; ``logit-multiplier``:
  times 5e5, an output multiplier in the wrong units). Under autocast the logits are fp16, so the
  multiply overflows before the loss is taken: every step's loss is non-finite from step 0, while the
  model's own outputs are in range.
* the **model** (``prepare``): one layer's weights are far larger than the model initialised them (a
  conversion in the wrong units), and fp16 cannot hold what the model computes from step 0
  (``mlp-weights-scaled``: block 0's first MLP layer times 1e6, whose output is over 65504;
  ``qkv-weights-scaled``: block 0's query/key/value projection times 1e4, whose output stays in range
  while the attention scores, the product of queries and keys, do not). In float32 both stay finite and
  their loss still falls over the first steps: a float32 run does not show the bug as a non-finite
  loss.
* the **updates** (``optimizer_factory``): the learning rate is hundreds of times too large
  (``lr-hundredfold``: the pipeline's rate times 300; ``lr-hardcoded``: a factory that ignores the
  rate it is passed and uses 3.0). Without a scaler, step 0's loss is finite and the weights
  grow until fp16 overflows a step or a few later (float32's loss grows to hundreds, finite); with a
  scaler, the scaled gradients overflow first and the scaler skips most steps.

Measured on notebook 10's base pipeline by ``tests/test_course_amp.py``: float32 runs of each stay
finite over the steps the notebook uses, so the non-finite loss is fp16's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..reference.pipeline import Pipeline
from ..toolkit.batch import token_cross_entropy
from .registry import bug

FAMILY = "fp16-overflow"


@dataclass(frozen=True)
class _ScaledLoss:
    factor: float

    def __call__(self, logits, batch):
        return token_cross_entropy(logits * self.factor, batch)


@dataclass(frozen=True)
class _TemperatureLoss:
    temperature: float

    def __call__(self, logits, batch):
        return token_cross_entropy(logits / self.temperature, batch)


@dataclass(frozen=True)
class _ScaleWeights:
    inner: object
    module: str
    factor: float

    def __call__(self, model):
        model = self.inner(model)
        with torch.no_grad():
            model.get_submodule(self.module).weight.mul_(self.factor)
        return model


@dataclass(frozen=True)
class _FixedLr:
    inner: object
    lr: float

    def __call__(self, params, lr, weight_decay):
        return self.inner(params, self.lr, weight_decay)


@bug(FAMILY, "fp16 loss non-finite from step 0: the logits are divided by a tiny temperature")
def logit_temperature(pipe: Pipeline) -> Pipeline:
    """``cross_entropy(logits / 1e-6)``: a temperature of 1e-6 where 1 was meant."""
    return pipe.replace(loss_fn=_TemperatureLoss(1e-6))


@bug(FAMILY, "fp16 loss non-finite from step 0: the logits are multiplied by 5e5")
def logit_multiplier(pipe: Pipeline) -> Pipeline:
    """``cross_entropy(logits * 5e5)``: an output multiplier in the wrong units."""
    return pipe.replace(loss_fn=_ScaledLoss(5e5))


@bug(FAMILY, "fp16 loss non-finite from step 0: an MLP layer's weights are 1e6 too large")
def mlp_weights_scaled(pipe: Pipeline) -> Pipeline:
    """Block 0's first MLP layer has weights 1e6 times their initial values."""
    return pipe.replace(prepare=_ScaleWeights(pipe.prepare, "blocks.0.mlp.0", 1e6))


@bug(FAMILY, "fp16 loss non-finite from step 0: the attention projection's weights are 1e4 too large")
def qkv_weights_scaled(pipe: Pipeline) -> Pipeline:
    """Block 0's query/key/value projection has weights 1e4 times their initial values."""
    return pipe.replace(prepare=_ScaleWeights(pipe.prepare, "blocks.0.attn.qkv", 1e4))


@bug(FAMILY, "fp16 loss goes non-finite after a few steps: the learning rate is 300 times too large")
def lr_hundredfold(pipe: Pipeline) -> Pipeline:
    """The learning rate times 300."""
    return pipe.replace(lr=pipe.lr * 300)


@bug(FAMILY, "fp16 loss goes non-finite after a few steps: the optimizer ignores the learning rate")
def lr_hardcoded(pipe: Pipeline) -> Pipeline:
    """An optimizer factory that uses a learning rate of 3.0 whatever it is passed."""
    return pipe.replace(optimizer_factory=_FixedLr(pipe.optimizer_factory, 3.0))
