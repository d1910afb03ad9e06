"""The backprop dependency test: which outputs of a model depend on which of its inputs.

Karpathy's *A Recipe for Training Neural Networks* (2019): make the loss something that depends only
on example i (the sum of its outputs is enough), run the backward pass to the input, and check that
only example i's input gets a gradient. The same along time: the outputs at position t of a causal
model must have no gradient on a later position. A healthy model's forbidden gradients are exactly
zero (autograd routes nothing there), so the test compares with zero, not with "small".

``dependence(model, tokens, along)`` measures it for a model whose forward takes token ids. The
input is integers, which have no gradient, so the gradient is taken at the token embedding's output:
a forward hook on ``embedding`` (default ``model.tok``) replaces that output with a detached copy
that requires grad, a leaf this function owns. That works with frozen parameters too, and changes no
parameter and no ``.grad``.

What it can prove: a non-zero entry where a zero belongs is a dependence that should not exist. What
it cannot: a zero entry at these inputs says nothing of other inputs (a dependence through a
branch these tokens never take), and dependences that enter other than through the embedding (the
position embedding, a buffer) are not measured.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .outputs import logits_of


def _embedded_forward(model: nn.Module, tokens: torch.Tensor, embedding: nn.Module):
    """(logits, x): the model's logits on ``tokens`` and the leaf ``x`` that replaced the
    embedding's output in that forward pass."""
    kept = {}

    def hook(module, inputs, output):
        kept["x"] = output.detach().requires_grad_(True)
        return kept["x"]

    handle = embedding.register_forward_hook(hook)
    try:
        with torch.enable_grad():
            logits = logits_of(model(tokens))
    finally:
        handle.remove()
    if "x" not in kept:
        raise ValueError("the model's forward never called its embedding module")
    return logits, kept["x"]


def dependence(model: nn.Module, tokens: torch.Tensor, along: str = "batch",
               embedding: nn.Module | None = None) -> torch.Tensor:
    """The dependence matrix of ``model`` on ``tokens`` (int64, (B, T)), in float64.

    ``along="batch"``: (B, B); entry [i, j] is the largest |gradient| of the sum of example i's
    logits on example j's embedded input. A healthy model: zero off the diagonal.
    ``along="time"``: (T, T); entry [t, s] is the largest |gradient| of the sum of the logits at
    position t (every example) on the embedded inputs at position s. A causal model: zero above
    the diagonal (s > t).

    The model runs in the mode it is in (train or eval); one backward pass per row.
    """
    if along not in ("batch", "time"):
        raise ValueError(f"along must be 'batch' or 'time', not {along!r}")
    embedding = model.tok if embedding is None else embedding
    logits, x = _embedded_forward(model, tokens, embedding)
    n = tokens.shape[0] if along == "batch" else tokens.shape[1]
    rows = []
    for i in range(n):
        out = logits[i] if along == "batch" else logits[:, i]
        (g,) = torch.autograd.grad(out.sum(), x, retain_graph=i < n - 1, allow_unused=True)
        g = torch.zeros_like(x) if g is None else g.abs()
        rows.append(g.amax(dim=(1, 2)) if along == "batch" else g.amax(dim=(0, 2)))
    return torch.stack(rows).double()
