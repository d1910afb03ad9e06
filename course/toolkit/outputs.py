"""The one place where the toolkit reads logits out of whatever a model returns.

``course``'s own ``TinyGPT`` returns a ``(B, T, V)`` logits tensor. Models written elsewhere do not:

* nanoGPT-style models return a tuple ``(logits, loss)`` (``loss`` is ``None`` without targets);
* Hugging Face models return an output object (a ``ModelOutput``, which is also a mapping) whose
  ``.logits`` holds them.

``logits_of(output)`` accepts exactly these shapes: a tensor is returned as it is; an object with a
tensor attribute ``logits``, or a mapping with a tensor under ``"logits"``, gives that tensor; a
tuple or list gives its first element if that is a tensor. Anything else raises
``ModelOutputError``, whose message says what was returned (types, shapes, keys) and how to adapt it.
It does not guess beyond that: a tuple whose first element is not the logits (say ``(loss,
logits)``) is the caller's to unpack, with ``loss_fn`` or a wrapper module.

``preflight``, the first-non-finite locator (``course.toolkit.nonfinite``), ``update_report`` (through the
step it runs), ``course.toolkit.telemetry.record_model``, the batch contract's model clause
(``check_batch(..., model=)``), ``overfit`` (its loss wrapped by ``on_logits``), ``loss_at_init`` and
the sensitivity probes of ``course.toolkit.checks`` all read model outputs through this function.
``plain_step`` does not: it hands the model's output to the loss it is given (wrap yours with
``on_logits``, as ``overfit`` and ``preflight`` do).

What it cannot do: check that the tensor it returns *is* the logits of every position. nanoGPT
returns only the last position's logits when called without targets (``(B, 1, V)``);
``check_batch(batch, vocab_size, model=model)`` catches that by comparing the shape with the batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Callable

import torch


class ModelOutputError(TypeError):
    """A model returned something the toolkit cannot read logits from; the message says what."""


def describe(output, depth: int = 0) -> str:
    """A short description of ``output``: its type, and the shapes or keys inside it."""
    if isinstance(output, torch.Tensor):
        return f"Tensor{tuple(output.shape)} {str(output.dtype).removeprefix('torch.')}"
    if output is None:
        return "None"
    name = type(output).__name__
    if depth >= 2:
        return name
    if isinstance(output, Mapping):
        inner = ", ".join(f"{k!r}: {describe(v, depth + 1)}" for k, v in list(output.items())[:6])
        return f"{name}({{{inner}}})"
    if isinstance(output, (tuple, list)):
        inner = ", ".join(describe(v, depth + 1) for v in output[:6])
        return f"{name}({inner}{', ...' if len(output) > 6 else ''})"
    attrs = [a for a in vars(output) if not a.startswith("_")][:6] if hasattr(output, "__dict__") else []
    return f"{name} with attributes {attrs}" if attrs else name


def logits_of(output) -> torch.Tensor:
    """The logits in a model's ``output`` (see the module doc for the accepted shapes)."""
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(output, Mapping) and isinstance(output.get("logits"), torch.Tensor):
        return output["logits"]
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise ModelOutputError(
        f"cannot read logits from what the model returned: {describe(output)}. Accepted: a logits tensor, "
        "a tuple or list whose first element is the logits ((logits, loss), nanoGPT), or an object with a "
        "tensor .logits (Hugging Face). Otherwise wrap the model in an nn.Module whose forward returns "
        "the (B, T, V) logits")


def on_logits(loss_fn: Callable) -> Callable:
    """``loss_fn(logits, batch)`` made to accept any output ``logits_of`` reads: ``loss(output, batch)``.

    Idempotent (wrapping twice wraps once), so a toolkit function can wrap what it is given."""
    if getattr(loss_fn, "_course_on_logits", False):
        return loss_fn

    def loss(output, batch):
        return loss_fn(logits_of(output), batch)

    loss._course_on_logits = True
    loss.__wrapped__ = loss_fn
    loss.__name__ = getattr(loss_fn, "__name__", "loss")
    return loss
