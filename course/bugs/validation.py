"""Bugs that open a gap between training and validation, or leak one into the other (notebook 05).

Registered in the catalogue of ``course.bugs`` (family val-gap / leakage) when ``course`` is imported.

* val-gap, evaluation bugs: ``eval-label-smoothing``, ``eval-loss-per-sequence`` (the eval path
  measures another quantity), ``dropout-left-on-in-eval`` and ``functional-dropout-ignores-eval``
  (the eval path is random and penalised by dropout; the first matters only for a model with dropout).
* val-gap, the data: ``train-set-too-small`` (overfitting), ``val-from-another-source`` and
  ``val-mixes-another-source`` (distribution shift).
* leakage: ``val-overlaps-train`` (exact copies), ``val-near-duplicates-train`` (overlapping windows).

The separating test of each is in ``course.lessons.valgap`` and ``course.toolkit.overlap``.
"""

from __future__ import annotations

from dataclasses import replace

import torch.nn as nn

from ..reference.pipeline import Pipeline
from ..lessons.valgap import LabelSmoothed, OtherSource, TrainContinuations, TrainCopies, per_sequence_loss
from .registry import bug


# ----- evaluation bugs ----------------------------------------------------------------------------
@bug("val-gap", "validation rises as the model grows confident: its loss has a term training never sees")
def eval_label_smoothing(pipe: Pipeline) -> Pipeline:
    """The validation loss uses label smoothing 0.1 and the training loss does not (a loss object
    configured once for the trainer and once, differently, for the evaluator)."""
    return pipe.replace(eval_loss_fn=LabelSmoothed(0.1))


@bug("val-gap", "validation is seq_len times the training loss: nats per sequence against nats per token")
def eval_loss_per_sequence(pipe: Pipeline) -> Pipeline:
    """The eval path sums the token losses and divides by the batch size, the training loss divides by
    the number of scored tokens: two denominators, two units."""
    return pipe.replace(eval_loss_fn=per_sequence_loss)


def _eval_mode_forgotten(model: nn.Module) -> None:
    pass


@bug("val-gap", "validation is noisy and higher than the same weights score in eval mode (with dropout)")
def dropout_left_on_in_eval(pipe: Pipeline) -> Pipeline:
    """The evaluation never calls ``model.eval()``, so dropout stays on while validating. Visible only
    when the model has dropout."""
    return pipe.replace(eval_mode=_eval_mode_forgotten)


@bug("val-gap", "validation is noisy and penalised by dropout although the evaluator calls model.eval()")
def functional_dropout_ignores_eval(pipe: Pipeline) -> Pipeline:
    """The model applies dropout as ``F.dropout(x, p)`` (p = the config's dropout, 0.1 if it was 0):
    ``training`` defaults to True, so ``.eval()`` does not reach it. Training is unchanged; evaluation
    keeps dropping activations."""
    return pipe.replace(model=replace(pipe.model, functional_dropout=True, dropout=pipe.model.dropout or 0.1))


# ----- overfitting and shift ----------------------------------------------------------------------
@bug("val-gap", "training loss races down, validation turns up: a few windows seen many times")
def train_set_too_small(pipe: Pipeline) -> Pipeline:
    """The training set is only four batches (a subset flag left on, a glob matching one shard), so
    the model sees each window many times and memorises it."""
    return pipe.replace(n_train=4 * pipe.batch_size)


@bug("val-gap", "validation far above training from the start, and it does not close")
def val_from_another_source(pipe: Pipeline) -> Pipeline:
    """Validation is drawn from another source (another Markov chain) than training."""
    return pipe.replace(val_source=OtherSource(1.0))


@bug("val-gap", "validation well above training: half of it comes from a source training never saw")
def val_mixes_another_source(pipe: Pipeline) -> Pipeline:
    """Half the validation windows come from another source than training (a mix changed on one side)."""
    return pipe.replace(val_source=OtherSource(0.5))


# ----- leakage ------------------------------------------------------------------------------------
@bug("leakage", "validation looks better than fresh data, below the entropy rate on a memorising model")
def val_overlaps_train(pipe: Pipeline) -> Pipeline:
    """Half the validation windows are copies of training windows (split after duplication, or a
    validation file rebuilt from the training shards)."""
    return pipe.replace(val_source=TrainCopies(0.5))


@bug("leakage", "validation looks better than fresh data: its windows overlap training windows")
def val_near_duplicates_train(pipe: Pipeline) -> Pipeline:
    """Half the validation windows are training windows slid on by four tokens: overlapping windows of
    one document split at random instead of by document."""
    return pipe.replace(val_source=TrainContinuations(0.5, shift=4))
