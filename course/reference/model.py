"""A tiny causal transformer with learned positions and a KV cache.

Small enough to train on two CPU cores in seconds, and written out by hand (no
``scaled_dot_product_attention``) so every intermediate a debugger wants to look at, the attention
scores and weights included, is an ordinary tensor inside a named module.

Two switches in ``ModelConfig`` exist only so the bug catalogue can break the model the way real
code gets broken: ``use_positions=False`` drops the position embedding, and ``attention`` selects the
mask (``"causal"`` is correct; ``"none"`` lets a position see the future; ``"self"`` lets it see only
itself; ``"strict"`` hides a position from itself, so the first one sees nothing). ``score_scale``
replaces the ``1/sqrt(head dim)`` of the scores (notebook 02 uses both to make NaNs).

Each ``Attention`` passes its raw scores (before the mask) and its softmax weights through two
``nn.Identity`` modules, ``score_probe`` and ``softmax_probe``: no parameters, no effect, but a forward
hook on them sees those tensors (``course.toolkit.nonfinite``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 18
    n_ctx: int = 64
    d_model: int = 32
    n_head: int = 2
    n_layer: int = 2
    d_mlp: int = 96
    dropout: float = 0.0
    use_positions: bool = True
    attention: str = "causal"  # "causal" | "none" | "self" | "strict" (a key may not see itself: row 0 sees nothing)
    score_scale: float | None = None  # None: the reference 1/sqrt(head dim); a number replaces it (bugs only)
    functional_dropout: bool = False  # True: F.dropout(x, p) with its default training=True, blind to .eval()


class FunctionalDropout(nn.Module):
    """Dropout written as ``F.dropout(x, p)``: ``training`` defaults to True, so ``.eval()`` never reaches it.

    Exists only so the bug catalogue can reproduce that mistake (``ModelConfig.functional_dropout``).
    In training mode it draws exactly what ``nn.Dropout`` draws, so a run trains bit-identically.
    """

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, self.p)


def make_dropout(cfg: ModelConfig) -> nn.Module:
    """``nn.Dropout(cfg.dropout)``, or the eval-blind ``FunctionalDropout`` when ``cfg.functional_dropout``."""
    return FunctionalDropout(cfg.dropout) if cfg.functional_dropout else nn.Dropout(cfg.dropout)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.drop = make_dropout(cfg)
        # Hook points: identity modules, so a forward hook (course.toolkit.nonfinite) sees the raw scores
        # (before the mask) and the attention weights; they hold no parameters and change nothing.
        self.score_probe = nn.Identity()
        self.softmax_probe = nn.Identity()

    def forward(self, x: torch.Tensor, cache: dict | None = None) -> torch.Tensor:
        B, T, D = x.shape
        H = self.cfg.n_head
        q, k, v = self.qkv(x).split(D, dim=-1)
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))  # (B, H, T, d)
        if cache is not None:  # append this call's keys and values to those already seen
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        S = k.shape[2]  # keys seen so far; the queries are the last T of them
        if self.cfg.score_scale is None:
            scores = q @ k.transpose(-2, -1) / math.sqrt(D // H)  # (B, H, T, S)
        else:
            scores = (q @ k.transpose(-2, -1)) * self.cfg.score_scale
        scores = self.score_probe(scores)
        scores = scores.masked_fill(~self.mask(T, S, x.device), float("-inf"))
        weights = self.drop(self.softmax_probe(F.softmax(scores, dim=-1)))
        out = (weights @ v).transpose(1, 2).reshape(B, T, D)
        return self.proj(out)

    def mask(self, T: int, S: int, device) -> torch.Tensor:
        """Boolean (T, S): may query i (absolute position S-T+i) attend to key j?"""
        return attention_mask(self.cfg.attention, T, S, device)


def attention_mask(kind: str, T: int, S: int, device=None) -> torch.Tensor:
    """The boolean (T, S) mask of ``kind`` for the last T of S positions (see ``ModelConfig.attention``)."""
    qpos = torch.arange(S - T, S, device=device).unsqueeze(1)
    kpos = torch.arange(S, device=device).unsqueeze(0)
    if kind == "causal":
        return kpos <= qpos
    if kind == "self":
        return kpos == qpos
    if kind == "strict":
        return kpos < qpos
    if kind == "none":
        return torch.ones(T, S, dtype=torch.bool, device=device)
    raise ValueError(f"unknown attention mask {kind!r}")


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_mlp), nn.GELU(), nn.Linear(cfg.d_mlp, cfg.d_model))
        self.drop = make_dropout(cfg)

    def forward(self, x: torch.Tensor, cache: dict | None = None) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln1(x), cache))
        return x + self.drop(self.mlp(self.ln2(x)))


class TinyGPT(nn.Module):
    """Pre-LayerNorm decoder. ``forward(ids)`` returns logits (B, T, vocab_size).

    Generation passes ``caches=model.new_cache()`` and ``start`` (the absolute position of
    ``ids[:, 0]``); with a cache, ``forward`` sees only the new tokens and reuses stored keys and
    values, and must return what a full recompute would: the same at the prefill, equal to float32
    rounding after it (the order of the additions differs).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.n_ctx, cfg.d_model)
        self.drop = make_dropout(cfg)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def new_cache(self) -> list[dict]:
        return [{} for _ in self.blocks]

    def forward(self, ids: torch.Tensor, caches: list[dict] | None = None, start: int = 0) -> torch.Tensor:
        B, T = ids.shape
        if start + T > self.cfg.n_ctx:
            raise ValueError(f"positions {start}..{start + T - 1} exceed n_ctx={self.cfg.n_ctx}")
        x = self.add_positions(self.tok(ids), start)
        x = self.drop(x)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.head(self.ln_f(x))

    def add_positions(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """Token embeddings ``x`` (B, T, D) plus the position embeddings of ``start .. start+T-1``
        (unchanged when ``cfg.use_positions`` is off)."""
        if not self.cfg.use_positions:
            return x
        return x + self.pos(torch.arange(start, start + x.shape[1], device=x.device))

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
