"""Supervised fine-tuning batches: which tokens the loss may see, and a gate that checks it.

An example is a ``(prompt, answer)`` pair of 1-D token tensors. A ``Template`` wraps it as

    user + prompt + assistant + answer + [EOS]

(``user`` and ``assistant`` are the template's fixed marker tokens, possibly empty). The loss must
supervise the answer tokens and the EOS that ends them, and nothing else: not the user marker, not
the prompt, not the assistant marker (the "answer prefix"), not padding.

* ``collate_sft`` builds the batch (the reference; it reuses ``course.toolkit.batch.prompt_answer_batch``).
* ``mask_gate`` checks a batch from *any* collator against the examples it was made from, and raises
  ``MaskGateError`` naming the first clause it breaks. It can prove that exactly the answer and EOS
  tokens are supervised with the right ids; it cannot prove the answers are good answers.
* ``sft_pipeline`` turns a ``Pipeline`` into a prompt/answer one (examples cut from its windows), so the
  bug catalogue (``prompt-answer-mask-inverted``, ``eos-masked``) and ``course.reference.train`` work on it;
  ``examples_at`` returns the examples behind ``batch_at`` for the gate.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..toolkit.batch import IGNORE, Batch, prompt_answer_batch
from ..reference.pipeline import Pipeline

Example = tuple[torch.Tensor, torch.Tensor]


class MaskGateError(ValueError):
    """A prompt/answer batch supervises the wrong tokens; the message names which."""


@dataclass(frozen=True)
class Template:
    """Marker tokens around the prompt (``user``) and before the answer (``assistant``)."""

    user: tuple[int, ...] = ()
    assistant: tuple[int, ...] = ()

    def context(self, prompt: torch.Tensor) -> torch.Tensor:
        """Everything before the answer: ``user + prompt + assistant`` (never supervised)."""
        return torch.cat([torch.tensor(self.user, dtype=torch.long), prompt.long(),
                          torch.tensor(self.assistant, dtype=torch.long)])


def collate_sft(examples: list[Example], template: Template, pad_id: int, eos_id: int) -> Batch:
    """The reference collation: next-token batch of ``template``-wrapped examples, right-padded,
    supervising each answer and its EOS only."""
    return prompt_answer_batch([template.context(p) for p, _ in examples], [a.long() for _, a in examples], pad_id, eos_id)


def mask_gate(batch: Batch, examples: list[Example], template: Template, eos_id: int) -> dict:
    """Raise ``MaskGateError`` unless ``batch`` supervises exactly the answers and EOS of ``examples``.

    Checked per row, against the sequence the template makes: the inputs hold the sequence (then only
    padding); every target that predicts a template or prompt token is ``IGNORE``; every target that
    predicts an answer token is that token; the target that predicts the end is ``eos_id``; every
    later target is ``IGNORE``. Returns the supervised fraction of each part (1, 1, 0, 0 when healthy).
    """
    x, y = batch.inputs, batch.targets
    if x.dim() != 2 or x.shape != y.shape or x.shape[0] != len(examples):
        raise MaskGateError(f"batch {tuple(x.shape)} / {tuple(y.shape)} does not hold {len(examples)} rows")
    counts = {"answer": [0, 0], "eos": [0, 0], "context": [0, 0], "padding": [0, 0]}  # [scored, total]
    for i, (prompt, answer) in enumerate(examples):
        context = template.context(prompt)
        seq = torch.cat([context, answer.long(), torch.tensor([eos_id])])
        n = len(seq) - 1  # targets that predict a token of this example
        if n > x.shape[1]:
            raise MaskGateError(f"row {i}: the example needs {n} positions, the batch has {x.shape[1]}")
        if not torch.equal(x[i, :n], seq[:-1]):
            raise MaskGateError(f"row {i}: the inputs are not user + prompt + assistant + answer + EOS")
        expected = seq[1:].clone()
        c = len(context) - 1  # targets 0..c-1 predict context tokens
        row = y[i]
        parts = {"context": slice(0, max(c, 0)), "answer": slice(max(c, 0), n - 1), "eos": slice(n - 1, n),
                 "padding": slice(n, x.shape[1])}
        for part, span in parts.items():
            scored = row[span] != IGNORE
            counts[part][0] += int(scored.sum())
            counts[part][1] += scored.numel()
        if (row[parts["context"]] != IGNORE).any():
            raise MaskGateError(f"row {i}: {int((row[parts['context']] != IGNORE).sum())} prompt or template targets are supervised")
        if (row[parts["padding"]] != IGNORE).any():
            raise MaskGateError(f"row {i}: targets after the EOS (padding) are supervised")
        if not torch.equal(row[parts["answer"]], expected[parts["answer"]]):
            raise MaskGateError(f"row {i}: the answer targets are not the answer tokens (masked, or shifted)")
        if int(row[n - 1]) != eos_id:
            raise MaskGateError(f"row {i}: the EOS target is {int(row[n - 1])}, not EOS ({eos_id}): the model never learns to stop")
    return {part: (s / t if t else float("nan")) for part, (s, t) in counts.items()}


@dataclass(frozen=True)
class SFTCollate:
    """A pipeline collate that cuts a (prompt, answer) example out of each window and collates them.

    From the real (non-padding) tokens of a window it keeps as many as fit the window's length once
    the template and EOS are added; the prompt is the first ``min_prompt + (first token mod
    (max_prompt - min_prompt + 1))`` of them (at least one token is left for the answer), the answer
    the rest. Deterministic in the window, so ``examples`` rebuilds exactly what was collated.
    """

    template: Template
    eos_id: int
    min_prompt: int = 2
    max_prompt: int = 8

    def examples(self, windows: torch.Tensor, pad_id: int) -> list[Example]:
        out = []
        budget = windows.shape[1] - len(self.template.user) - len(self.template.assistant) - 1
        for row in windows:
            toks = row[row != pad_id][:budget]
            k = self.min_prompt + int(toks[0]) % (self.max_prompt - self.min_prompt + 1)
            k = max(0, min(k, len(toks) - 1))
            out.append((toks[:k].clone(), toks[k:].clone()))
        return out

    def __call__(self, windows: torch.Tensor, pad_id: int) -> Batch:
        return collate_sft(self.examples(windows, pad_id), self.template, pad_id, self.eos_id)


DEFAULT_TEMPLATE = Template(user=(0, 1), assistant=(2, 3))


def sft_pipeline(pipe: Pipeline, template: Template = DEFAULT_TEMPLATE, min_len: int = 12) -> Pipeline:
    """``pipe`` trained on prompt/answer examples cut from variable-length windows (``min_len``
    real tokens at least). The marker tokens are ordinary symbols: a collator that finds the answer by
    looking for them, instead of by position, is wrong on answers that contain them."""
    return pipe.replace(collate=SFTCollate(template, pipe.language().EOS), min_len=min_len)


def examples_at(pipe: Pipeline, seed: int, step: int) -> list[Example]:
    """The (prompt, answer) examples behind ``course.reference.train.batch_at(pipe, seed, step)`` of an SFT pipeline."""
    from ..reference.train import windows_at

    return pipe.collate.examples(windows_at(pipe, seed, step), pipe.language().PAD)
