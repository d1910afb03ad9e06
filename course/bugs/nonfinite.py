"""Bugs that make a loss, an activation or a gradient non-finite (notebook 02).

Registered in the catalogue of ``course.bugs`` (family non-finite) when ``course`` is imported.
Each one goes non-finite at a different stage of a training step, as ``course.reference.diagnose.locate``
reports it on the reference pipeline (``tests/test_course_nonfinite.py`` checks every stage):

============================  =================  ==============================
bug                           first bad stage    when
============================  =================  ==============================
``embedding-scaled-by-inf``   embeddings         step 0, before any update
``attention-scale-inf``       scores             step 0, before any update
``causal-mask-strict``        softmax            step 0, before any update
``loss-scaled-in-fp16``       loss               step 0, before any update
``log-guarded-by-where``      grads              step 0, before any update (the forward is finite)
``adam-eps-zero``             params             step 0, in the first update
``lr-sign-typo``              grads              a later step, after some updates (when depends on the run)
============================  =================  ==============================
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F

from ..reference.pipeline import Pipeline
from .registry import bug


def _embedding_times_inf(model):
    init_std = torch.tensor(0.0)  # read from a config that never set it
    with torch.no_grad():
        model.tok.weight.div_(init_std)  # meant: rescale to unit variance, i.e. weight / std
    return model


@bug("non-finite", "NaN loss at the first step; the token embedding's output is already inf")
def embedding_scaled_by_inf(pipe: Pipeline) -> Pipeline:
    """At initialisation the token embedding is divided by an "init std" read from a config that
    left it at 0, so every weight becomes +-inf before the first forward pass."""
    return pipe.replace(prepare=_embedding_times_inf)


@bug("non-finite", "NaN loss at the first step; the attention scores are already inf")
def attention_scale_inf(pipe: Pipeline) -> Pipeline:
    """The attention scale is ``1/sqrt(head_dim)`` with ``head_dim`` computed as 0 (an integer
    division in the wrong order), i.e. an infinite scale: every score is +-inf or NaN."""
    return pipe.replace(model=replace(pipe.model, score_scale=float("inf")))


@bug("non-finite", "NaN loss at the first step; scores are finite, the attention weights are NaN")
def causal_mask_strict(pipe: Pipeline) -> Pipeline:
    """The causal mask uses ``<`` instead of ``<=``: a query may not attend to its own position, so
    the first position has no key at all; softmax over a row of -inf is 0/0 = NaN."""
    return pipe.replace(model=replace(pipe.model, attention="strict"))


def _ce_fp16_scaled(logits, batch):
    loss = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten())
    return loss.half() * 65536.0  # static loss scale 2**16, applied in fp16


@bug("non-finite", "loss is inf at the first step; logits are finite")
def loss_scaled_in_fp16(pipe: Pipeline) -> Pipeline:
    """Hand-rolled mixed precision: the loss is cast to fp16 and multiplied by a static loss scale
    of 2**16 before backward. fp16's largest value is 65504, so the scaled loss is inf."""
    return pipe.replace(loss_fn=_ce_fp16_scaled)


def _smoothed_with_where(logits, batch, eps=0.1):
    pad = batch.pad_id
    logits = logits.clone()
    logits[..., pad] = float("-inf")  # the model may never predict padding
    p = logits.softmax(-1)
    logp = torch.where(p > 0, p.log(), torch.zeros_like(p))  # "guard" against log(0)
    targets = batch.targets.flatten()
    nll = F.nll_loss(logp.flatten(0, 1), targets)
    scored = targets != -100
    smooth = -logp.flatten(0, 1)[scored].sum(-1).mean() / (logits.shape[-1] - 1)
    return (1 - eps) * nll + eps * smooth


@bug("non-finite", "loss finite, every gradient NaN from the first backward")
def log_guarded_by_where(pipe: Pipeline) -> Pipeline:
    """Label smoothing with the padding column masked to -inf and ``log(0)`` "guarded" by
    ``torch.where(p > 0, p.log(), 0)``. The forward is finite, but backward goes through the
    unselected branch: d log(p)/dp at p = 0 is inf, times the zero gradient of the unselected
    branch gives NaN, and softmax spreads it to every logit."""
    return pipe.replace(loss_fn=_smoothed_with_where)


def _adamw_eps_zero(params, lr, weight_decay):
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, eps=0.0)


@bug("non-finite", "loss finite at the first step; some parameters NaN right after the first update")
def adam_eps_zero(pipe: Pipeline) -> Pipeline:
    """AdamW with ``eps=0`` ("to be exact"). A parameter whose gradient is exactly 0 (the embedding
    rows of tokens absent from the batch) gets the update 0 / (sqrt(0) + 0) = NaN."""
    return pipe.replace(optimizer_factory=_adamw_eps_zero)


@bug("non-finite", "loss explodes for several steps, then the gradients overflow and everything is NaN")
def lr_sign_typo(pipe: Pipeline) -> Pipeline:
    """The recipe's learning rate is overridden with 1e5: an exponent typed without its minus sign
    (1e-5 meant, 1e5 written); the fix drops the override and puts back the recipe's rate. Each AdamW
    step moves every weight by about the learning rate (the warm-up ramps the LR actually used up to
    1e5), so the weights grow roughly additively, not geometrically, until the backward pass overflows:
    the first non-finite tensor is a gradient, at a step that depends on the run and on the machine
    (float rounding differs between CPUs)."""
    return pipe.replace(lr=1e5)
