"""The reference pipeline: every choice a training run makes, as one replaceable part each.

A ``Pipeline`` is plain data plus a few functions (collate the batch, compute the loss, build the
optimizer, apply the update). The training loop in ``course.reference.train`` only calls these parts, so a bug
from ``course.bugs`` is a function ``Pipeline -> Pipeline`` that swaps one part for a broken one,
and adding a bug never touches the loop.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn as nn

from ..toolkit.batch import Batch, next_token_batch, token_cross_entropy
from ..toolkit.phases import eval_on_schedule, log_nothing, no_checkpoint
from .data import MarkovLanguage, variable_length_windows
from .model import ModelConfig, TinyGPT
# the healthy defaults of the parts that notebooks 07-10 add (written below the pipeline: parts.py)
from .parts import (choice_length, keep_float, monitor_no_grad, pick_fewshot, plain_template, restore_state,
                    score_continuations, truncate_left, with_delimiter)
from .parts import generate as generate_tokens


def adamw(params, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


def build_optimizer(model: nn.Module, pipe: "Pipeline") -> torch.optim.Optimizer:
    """The reference: every parameter of the model that is being trained, by identity."""
    return pipe.optimizer_factory(model.parameters(), pipe.lr, pipe.weight_decay)


def prepare_model(model: nn.Module) -> nn.Module:
    """The reference does nothing here; bugs use this hook to freeze parameters."""
    return model


def apply_update(optimizer: torch.optim.Optimizer) -> None:
    optimizer.step()


def set_eval_mode(model: nn.Module) -> None:
    """The reference evaluation mode: ``model.eval()`` (dropout off). Bugs use this hook to forget it."""
    model.eval()


def part(default):
    """A replaceable part of the pipeline: a dataclass field marked so that ``course.exercises.mystery`` wraps
    it (``PARTS`` lists them in order)."""
    return field(default=default, metadata={"part": True})


def warmup_then_linear(step: int, warmup: int, total: int) -> float:
    """LR multiplier: a linear warm-up from ``1/warmup`` to 1 over the first ``warmup`` steps, times a
    linear decay that starts at step 0 and is floored at 10% (reached at 90% of ``total``). So a run
    never uses its full rate once ``warmup > 1``: its highest rate is the product at the end of warm-up."""
    return min(1.0, (step + 1) / max(1, warmup)) * max(0.1, 1.0 - step / max(1, total))


@dataclass(frozen=True)
class Pipeline:
    """A complete, healthy next-token training recipe on a ``MarkovLanguage``.

    Change a number with ``dataclasses.replace(pipe, lr=...)``; break a part with
    ``course.bugs.inject(pipe, name)``.
    """

    n_symbols: int = 16
    language_seed: int = 0
    seq_len: int = 32
    model: ModelConfig = ModelConfig(n_ctx=32, d_model=48, n_head=2, n_layer=2, d_mlp=144)
    batch_size: int = 64
    steps: int = 600
    lr: float = 1e-2
    warmup: int = 50
    weight_decay: float = 0.0
    clip: float = 1.0
    n_train: int = 20_000  # training windows, sampled once
    n_val: int = 512  # held-out windows, from a different seed
    min_len: int | None = None  # None: every window is full; else lengths in [min_len, seq_len + 1], padded
    data_seed: int = 1
    val_seed: int = 12345
    # the replaceable parts (``part``: course.exercises.mystery wraps exactly these). A part's default is a
    # function, never None, so a mystery draw can wrap the healthy part as it is.
    collate: Callable[[torch.Tensor, int], Batch] = part(next_token_batch)
    loss_fn: Callable[[torch.Tensor, Batch], torch.Tensor] = part(token_cross_entropy)
    optimizer_factory: Callable = part(adamw)
    make_optimizer: Callable[[nn.Module, "Pipeline"], torch.optim.Optimizer] = part(build_optimizer)
    prepare: Callable[[nn.Module], nn.Module] = part(prepare_model)
    update: Callable[[torch.optim.Optimizer], None] = part(apply_update)
    # the learning-rate schedule (notebook 12): (step, warmup, steps) -> the multiplier of ``lr`` at
    # that step, which course.reference.train.start hands to a LambdaLR
    schedule: Callable[[int, int, int], float] = part(warmup_then_linear)
    # the evaluation parts (notebook 05): where validation windows come from, the loss and mode it uses
    val_source: Callable[["Pipeline"], torch.Tensor] | None = part(None)  # None: n_val windows of the language, val_seed
    eval_loss_fn: Callable[[torch.Tensor, Batch], torch.Tensor] | None = part(None)  # None: loss_fn
    eval_mode: Callable[[nn.Module], None] = part(set_eval_mode)
    # the training data stream (notebook 04): the batch of (pipe, seed, data index); None: the
    # epoch-wise shuffles of course.reference.train.batch_at
    batches: Callable[["Pipeline", int, int], Batch] | None = part(None)
    # the parts of notebook 06 (throughput)
    # what the loop does after each update: log (run, step, loss), checkpoint (run), and whether to
    # evaluate now (step, eval_every) -> bool; timed as the phases log, ckpt and eval
    log_step: Callable = part(log_nothing)
    checkpoint: Callable = part(no_checkpoint)
    eval_due: Callable[[int, int], bool] = part(eval_on_schedule)
    # the parts of notebook 07 (checkpoints and resume)
    # how course.reference.train.resume puts a loaded checkpoint into a freshly started run: (run, ckpt) -> None;
    # the reference keeps this pipeline's learning rate and hyperparameters, not the checkpoint's
    restore: Callable = part(restore_state)
    # the parts of notebook 08 (generation)
    # how the model is run to write text: (model, prompt, max_new_tokens, temperature, top_k, greedy,
    # seed, eos_id, return_logits) -> tokens (and logits); training and evaluation never call it
    generate: Callable = part(generate_tokens)
    # the parts of notebook 09 (evaluation harness)
    # the harness's stages (course.lessons.harness.run): the question as text, the scored continuation, the
    # few-shot examples chosen, the context truncation, the option score and acc_norm's length
    eval_template: Callable = part(plain_template)
    eval_continuation: Callable[[str, str], str] = part(with_delimiter)
    eval_fewshot: Callable[[int, int, int, int], list] = part(pick_fewshot)
    eval_truncate: Callable = part(truncate_left)
    eval_score: Callable = part(score_continuations)
    eval_norm_length: Callable = part(choice_length)
    # the parts of notebook 10 (AMP and memory), called by course.lessons.amp.run: what the loop keeps of each
    # step's loss (loss) -> value, and the probe-batch monitor (model, batch, loss_fn) -> value
    keep_loss: Callable = part(keep_float)
    monitor: Callable = part(monitor_no_grad)
    bugs: tuple[str, ...] = field(default=())  # names of the bugs injected, for the record

    def replace(self, **changes) -> "Pipeline":
        return dataclasses.replace(self, **changes)

    def language(self) -> MarkovLanguage:
        return _language(self.n_symbols, self.language_seed)

    def windows(self, split: str) -> torch.Tensor:
        """The fixed token windows (n, seq_len + 1) of ``"train"`` or ``"val"`` (``val_source`` when set)."""
        if split != "train" and self.val_source is not None:
            return self.val_source(self).clone()
        n, seed = (self.n_train, self.data_seed) if split == "train" else (self.n_val, self.val_seed)
        return _windows(self.n_symbols, self.language_seed, n, self.seq_len + 1, seed, self.min_len)

    def build_model(self, seed: int = 0) -> nn.Module:
        """A freshly initialised model (vocabulary taken from the language), seeded."""
        torch.manual_seed(seed)
        cfg = dataclasses.replace(self.model, vocab_size=self.language().vocab_size)
        return self.prepare(TinyGPT(cfg))


PARTS = tuple(f.name for f in dataclasses.fields(Pipeline) if f.metadata.get("part"))


def healthy_twin(pipe: Pipeline) -> Pipeline:
    """``pipe``'s settings (seeds, learning rate, sizes) with every part the reference one: a healthy
    pipeline of the same configuration, the negative control for a test. It reads only what anyone
    can read off ``pipe``; it is not a fix (a fix keeps every part that was not broken)."""
    settings = {f.name: getattr(pipe, f.name) for f in dataclasses.fields(Pipeline)
                if f.name not in PARTS and f.name != "bugs"}
    return Pipeline(**settings)

# Sampling the data and solving for the stationary distribution are deterministic; cache them so
# notebooks that build many variants of one pipeline pay once.
_CACHE: dict = {}


def _language(n_symbols: int, seed: int) -> MarkovLanguage:
    key = ("lang", n_symbols, seed)
    if key not in _CACHE:
        _CACHE[key] = MarkovLanguage(n_symbols, seed)
    return _CACHE[key]


def _windows(n_symbols: int, lang_seed: int, n: int, length: int, seed: int, min_len: int | None) -> torch.Tensor:
    key = ("win", n_symbols, lang_seed, n, length, seed, min_len)
    if key not in _CACHE:
        lang = _language(n_symbols, lang_seed)
        if min_len is None:
            _CACHE[key] = lang.sample(n, length, seed)
        else:
            _CACHE[key] = variable_length_windows(lang, n, length, min_len, seed)
    return _CACHE[key].clone()
