"""Low-rank adapters (LoRA-style) on a frozen base model.

``add_lora(model, names, rank)`` replaces each named ``nn.Linear`` by ``LoRALinear``: the original
layer (its weight and bias untouched) plus a trainable update ``B @ A`` of rank ``rank``, scaled by
``alpha / rank``; every parameter of the base model is frozen (``requires_grad=False``). Nothing
changes for a model that ``add_lora`` was not called on.

``B`` starts at zero, so at the first step the adapted model computes exactly what the base does,
and the gradient reaching ``A`` (which is multiplied by ``B``) is exactly zero; ``B`` gets a nonzero
gradient, and ``A`` starts learning once ``B`` has moved.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn


class LoRALinear(nn.Module):
    """``base(x) + (alpha / rank) * x @ A.T @ B.T``, with ``base`` frozen, ``A`` random and ``B`` zero."""

    def __init__(self, base: nn.Linear, rank: int = 4, alpha: float | None = None, generator: torch.Generator | None = None):
        super().__init__()
        self.base = base
        self.rank = rank
        self.scale = (alpha if alpha is not None else rank) / rank
        self.A = nn.Parameter(torch.randn(rank, base.in_features, generator=generator) / math.sqrt(base.in_features))
        self.B = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.scale * (x @ self.A.T @ self.B.T)


def add_lora(model: nn.Module, names: list[str], rank: int = 4, alpha: float | None = None, seed: int = 0,
             freeze: bool = True) -> list[nn.Parameter]:
    """Wrap the ``nn.Linear`` submodules called ``names`` (e.g. ``"blocks.0.attn.qkv"``) in place,
    freeze the base (unless ``freeze=False``: the negative control), and return the adapter parameters."""
    if freeze:
        for p in model.parameters():
            p.requires_grad_(False)
    g = torch.Generator().manual_seed(seed)
    adapters = []
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        layer = getattr(parent, child)
        if not isinstance(layer, nn.Linear):
            raise TypeError(f"{name} is a {type(layer).__name__}, not an nn.Linear")
        wrapped = LoRALinear(layer, rank, alpha, g)
        setattr(parent, child, wrapped)
        adapters += [wrapped.A, wrapped.B]
    return adapters


def linear_names(model: nn.Module) -> list[str]:
    """The names of every ``nn.Linear`` in ``model`` (candidates for ``add_lora``)."""
    return [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]


def base_snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    """Clones of every parameter and buffer that is not an adapter's ``A`` or ``B``."""
    return {n: t.detach().clone() for n, t in list(model.named_parameters()) + list(model.named_buffers())
            if not (n.endswith(".A") or n.endswith(".B"))}


def changed_base_tensors(model: nn.Module, snapshot: dict[str, torch.Tensor]) -> list[str]:
    """Names of base tensors that are not bit-identical (``torch.equal``) to ``snapshot``."""
    current = base_snapshot(model)
    return [n for n, t in snapshot.items() if n not in current or not torch.equal(t, current[n])]
