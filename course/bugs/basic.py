"""Bugs of notebooks 00 and 01: the run that does not learn, learns too little, learns too well,
measures the wrong loss, or is fed a batch that breaks its contract.

Families ``no-updates``, ``context-unused``, ``too-good``, ``bad-loss`` and ``batch`` (see
``course.bugs`` for what each means).
"""

from __future__ import annotations

import copy
from dataclasses import replace

import torch

from ..toolkit.batch import IGNORE, Batch, next_token_batch
from ..reference.pipeline import Pipeline
from .registry import bug


# ----- no updates -----------------------------------------------------------------------------------
def _no_step(optimizer) -> None:
    pass


@bug("no-updates", "loss flat at its initial value; parameters never change")
def missing_step(pipe: Pipeline) -> Pipeline:
    """The loop computes gradients but never calls ``optimizer.step()``."""
    return pipe.replace(update=_no_step)


def _optimizer_on_a_copy(model, pipe):
    return pipe.optimizer_factory(copy.deepcopy(model).parameters(), pipe.lr, pipe.weight_decay)


@bug("no-updates", "loss flat; the optimizer steps, but parameters it does not hold")
def optimizer_on_stale_model(pipe: Pipeline) -> Pipeline:
    """The optimizer was built from another model instance (a copy made before, say, moving or
    re-creating the model), so it updates tensors the model no longer uses."""
    return pipe.replace(make_optimizer=_optimizer_on_a_copy)


def _optimizer_without_embedding(model, pipe):
    left_out = model.tok.weight
    params = [p for p in model.parameters() if p is not left_out]
    return pipe.optimizer_factory(params, pipe.lr, pipe.weight_decay)


@bug("no-updates", "loss falls a little, then stalls; one tensor never moves")
def embedding_not_in_optimizer(pipe: Pipeline) -> Pipeline:
    """The token embedding is missing from the optimizer's parameter list (for example, a filter
    written for a different model's parameter names)."""
    return pipe.replace(make_optimizer=_optimizer_without_embedding)


def _freeze_all(model):
    for p in model.parameters():
        p.requires_grad_(False)
    return model


@bug("no-updates", "loss flat; no gradients at all")
def requires_grad_off(pipe: Pipeline) -> Pipeline:
    """Every parameter has ``requires_grad=False`` (a freezing loop applied to the whole model)."""
    return pipe.replace(prepare=_freeze_all)


@bug("no-updates", "loss flat; gradients present, updates zero")
def lr_zero(pipe: Pipeline) -> Pipeline:
    """The learning rate is 0 (a config value read as an integer, or a schedule that starts at 0
    and is never stepped)."""
    return pipe.replace(lr=0.0)


@bug("no-updates", "loss barely moves; every gradient is scaled to almost nothing")
def clip_to_zero(pipe: Pipeline) -> Pipeline:
    """Gradient clipping with ``max_norm`` set to 1e-12 (a units mix-up), so every update vanishes."""
    return pipe.replace(clip=1e-12)


# ----- context unused -------------------------------------------------------------------------------
@bug("context-unused", "loss stalls far above the entropy rate: order of the context is invisible")
def no_positions(pipe: Pipeline) -> Pipeline:
    """The position embedding is never added, so attention sees the context as an unordered bag."""
    return pipe.replace(model=replace(pipe.model, use_positions=False))


@bug("context-unused", "loss stalls near the bigram entropy: attention sees only the current token")
def attend_self_only(pipe: Pipeline) -> Pipeline:
    """The attention mask is the identity instead of lower-triangular, so no earlier token is seen."""
    return pipe.replace(model=replace(pipe.model, attention="self"))


def _shifted_by_two(windows: torch.Tensor, pad_id: int) -> Batch:
    batch = next_token_batch(windows, pad_id)
    targets = torch.full_like(batch.targets, IGNORE)
    targets[:, :-1] = batch.targets[:, 1:]
    return Batch(batch.inputs, targets, pad_id)


@bug("context-unused", "loss stalls above the entropy rate: the model predicts two tokens ahead")
def targets_shifted_twice(pipe: Pipeline) -> Pipeline:
    """Targets are shifted one position too far (the collator shifts, then the loss shifts again)."""
    return pipe.replace(collate=_shifted_by_two)


# ----- too good -------------------------------------------------------------------------------------
def _unshifted(windows: torch.Tensor, pad_id: int) -> Batch:
    batch = next_token_batch(windows, pad_id)
    return Batch(batch.inputs, batch.inputs.clone(), pad_id)


@bug("too-good", "loss races towards zero: the target is the input token itself")
def unshifted_targets(pipe: Pipeline) -> Pipeline:
    """Targets are the inputs, not the inputs shifted by one: the model learns to copy."""
    return pipe.replace(collate=_unshifted)


@bug("too-good", "loss falls below the entropy rate: every position sees the future")
def causal_mask_off(pipe: Pipeline) -> Pipeline:
    """Attention has no causal mask, so position t can read the token it must predict."""
    return pipe.replace(model=replace(pipe.model, attention="none"))


# ----- bad loss -------------------------------------------------------------------------------------
def _all_ignored(windows: torch.Tensor, pad_id: int) -> Batch:
    batch = next_token_batch(windows, pad_id)
    return Batch(batch.inputs, torch.full_like(batch.targets, IGNORE), pad_id)


@bug("bad-loss", "loss is NaN from the first step: mean over zero scored targets is 0/0")
def all_targets_ignored(pipe: Pipeline) -> Pipeline:
    """Every target is ``IGNORE`` (a mask built with the wrong comparison), so nothing is scored."""
    return pipe.replace(collate=_all_ignored)


def _padding_scored(windows: torch.Tensor, pad_id: int) -> Batch:
    return Batch(windows[:, :-1].clone(), windows[:, 1:].clone(), pad_id)


@bug("bad-loss", "on padded batches the loss falls below the floor: padding is trivially predictable")
def padding_scored(pipe: Pipeline) -> Pipeline:
    """Padding targets are not masked out, so the loss rewards predicting PAD after PAD."""
    return pipe.replace(collate=_padding_scored)


# ----- batch contract (visible in one batch, before any step) ---------------------------------------
def _float_targets(windows, pad_id):
    b = next_token_batch(windows, pad_id)
    return Batch(b.inputs, b.targets.float(), pad_id)


@bug("batch", "cross_entropy reads float targets as class probabilities, or raises on shape")
def float_targets(pipe: Pipeline) -> Pipeline:
    """Targets were cast to float (a ``.float()`` meant for the inputs of another model)."""
    return pipe.replace(collate=_float_targets)


def _int32_inputs(windows, pad_id):
    b = next_token_batch(windows, pad_id)
    return Batch(b.inputs.int(), b.targets, pad_id)


@bug("batch", "token ids stored as int32: silently works on some ops, fails on others")
def int32_inputs(pipe: Pipeline) -> Pipeline:
    """Inputs are int32 instead of int64 (from a numpy array built with the wrong dtype)."""
    return pipe.replace(collate=_int32_inputs)


def _padded_with_ignore_index(windows, pad_id):
    b = next_token_batch(windows, pad_id)
    inputs = b.inputs.clone()
    inputs[inputs == pad_id] = IGNORE
    return Batch(inputs, b.targets, pad_id)


@bug("batch", "an index error in the embedding on padded batches (negative token ids)")
def inputs_padded_with_ignore_index(pipe: Pipeline) -> Pipeline:
    """Inputs are padded with -100, the loss's ignore value, instead of the PAD token."""
    return pipe.replace(collate=_padded_with_ignore_index)


def _truncated_targets(windows, pad_id):
    b = next_token_batch(windows, pad_id)
    return Batch(b.inputs, b.targets[:, :-1], pad_id)


@bug("batch", "a shape error in the loss, or a silent broadcast")
def targets_one_short(pipe: Pipeline) -> Pipeline:
    """Targets are one position shorter than the inputs (sliced twice)."""
    return pipe.replace(collate=_truncated_targets)


def _masked_half(windows, pad_id):
    b = next_token_batch(windows, pad_id)
    targets = b.targets.clone()
    targets[:, 1::2] = IGNORE
    return Batch(b.inputs, targets, pad_id)


@bug("batch", "half the signal is thrown away: every second target is ignored")
def every_other_target_ignored(pipe: Pipeline) -> Pipeline:
    """A stride in the mask slice (``[:, ::2]`` for ``[:, :]``) ignores every second target."""
    return pipe.replace(collate=_masked_half)
