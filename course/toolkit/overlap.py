"""Audit the overlap between a training split and a validation split, and split by group.

* ``exact_duplicates(train, val)``: which validation windows occur, token for token, in training.
* ``shingle_jaccard(a, b, n)``: the Jaccard similarity of the *sets* of n-token shingles of two
  sequences (exact sets, no MinHash: at this scale exact is cheap and never wrong).
* ``max_jaccard(train, val, n)``: for each validation window, its highest Jaccard with any training
  window, computed for all pairs at once with a sparse product.
* ``audit(train, val)``: both, as fractions of the validation windows, in one report.
* ``group_split(groups, val_fraction, seed)``: a split in which no group (document, source, user)
  has items on both sides.
* ``sliding_windows(docs, length, stride)``: cut documents into windows, with each window's document.

What the audit can prove: a window it flags *is* shared (exactly, or in at least ``threshold`` of its
shingles). What it cannot: leakage through anything other than the tokens themselves (a statistic
fitted on all the data, a hyper-parameter chosen on validation), or overlap shorter than ``n``
tokens. Windows of a low-entropy source share short shingles by chance: check the healthy split
(the negative control) with the same ``n`` and ``threshold`` before trusting a flag.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def exact_duplicates(train: torch.Tensor, val: torch.Tensor) -> torch.Tensor:
    """Boolean (n_val,): is validation window ``i`` identical to some training window?

    Both are (n, L) integer tensors of the same ``L``.
    """
    if train.shape[1] != val.shape[1]:
        raise ValueError(f"windows of different lengths: {train.shape[1]} vs {val.shape[1]}")
    _, inverse = torch.unique(torch.cat([train, val]), dim=0, return_inverse=True)
    seen = torch.zeros(int(inverse.max()) + 1, dtype=torch.bool)
    seen[inverse[: len(train)]] = True
    return seen[inverse[len(train):]]


def shingles(seq, n: int) -> set[tuple[int, ...]]:
    """The set of contiguous n-token tuples of a 1-D sequence (empty if it is shorter than ``n``)."""
    seq = [int(t) for t in seq]
    return {tuple(seq[i:i + n]) for i in range(len(seq) - n + 1)}


def shingle_jaccard(a, b, n: int) -> float:
    """|S(a) & S(b)| / |S(a) | S(b)| for the n-token shingle sets; 0.0 when both sets are empty."""
    sa, sb = shingles(a, n), shingles(b, n)
    union = len(sa | sb)
    return len(sa & sb) / union if union else 0.0


def _shingle_codes(sh: torch.Tensor) -> torch.Tensor:
    """One int64 per shingle row (base-V digits) when V**n fits, else the rows themselves (slower unique)."""
    V = int(sh.max()) + 1 if sh.numel() else 1
    if sh.shape[1] * math.log2(max(V, 2)) < 62:
        return (sh * V ** torch.arange(sh.shape[1] - 1, -1, -1)).sum(-1)
    return sh


def _window_shingle_pairs(shingle_ids: torch.Tensor, n_codes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Distinct (window, shingle id) pairs of a (n_windows, per_window) id matrix, as two 1-D tensors."""
    rows = torch.arange(shingle_ids.shape[0]).repeat_interleave(shingle_ids.shape[1])
    key = torch.unique(rows * n_codes + shingle_ids.flatten())  # sorted, so grouped by window
    return key // n_codes, key % n_codes


def max_jaccard(train: torch.Tensor, val: torch.Tensor, n: int = 8) -> torch.Tensor:
    """Float (n_val,): the highest shingle Jaccard of each validation window with any training window.

    Exact: shingles get ids by ``torch.unique`` over both splits, and shared shingles are counted for
    every (validation, training) pair through an inverted index (shingle -> training windows holding
    it), so the cost grows with how common the shingles are, not with n_val * n_train set comparisons.
    Windows shorter than ``n`` have no shingles and score 0.
    """
    if train.shape[1] < n or val.shape[1] < n or len(train) == 0 or len(val) == 0:
        return torch.zeros(len(val))
    sh_t, sh_v = train.unfold(1, n, 1), val.unfold(1, n, 1)  # (N, L-n+1, n)
    codes = _shingle_codes(torch.cat([sh_t.reshape(-1, n), sh_v.reshape(-1, n)]))
    _, ids = torch.unique(codes, dim=0 if codes.dim() > 1 else None, return_inverse=True)
    n_codes = int(ids.max()) + 1
    split = sh_t.shape[0] * sh_t.shape[1]
    tw, tc = _window_shingle_pairs(ids[:split].view(sh_t.shape[:2]), n_codes)
    vw, vc = _window_shingle_pairs(ids[split:].view(sh_v.shape[:2]), n_codes)
    n_train, n_val = len(train), len(val)
    order = torch.argsort(tc, stable=True)
    tc_sorted, tw_sorted = tc[order], tw[order]
    lo = torch.searchsorted(tc_sorted, vc, right=False)
    hi = torch.searchsorted(tc_sorted, vc, right=True)
    counts = hi - lo
    rep_val = vw.repeat_interleave(counts)
    # positions lo[k], lo[k]+1, ..., hi[k]-1 for every validation pair k, laid end to end
    starts = torch.repeat_interleave(lo - torch.cumsum(counts, 0) + counts, counts)
    pos = starts + torch.arange(int(counts.sum()))
    inter = torch.bincount(rep_val * n_train + tw_sorted[pos], minlength=n_val * n_train).view(n_val, n_train).float()
    size_t = torch.bincount(tw, minlength=n_train).float()
    size_v = torch.bincount(vw, minlength=n_val).float()
    union = size_v[:, None] + size_t[None, :] - inter
    return (inter / union.clamp_min(1)).max(dim=1).values


@dataclass
class OverlapReport:
    """Fractions of validation windows that are exact copies of, or near duplicates of, training windows.

    An exact copy is proof of overlap. A near-duplicate fraction means little alone: compare it with
    the same audit of fresh windows from the training source (what chance alone gives)."""

    n_val: int
    exact: float
    near: float
    n: int
    threshold: float

    def __str__(self) -> str:
        return (f"{self.n_val} validation windows: {self.exact:.1%} exact copies of training windows, "
                f"{self.near:.1%} near duplicates ({self.n}-token shingle Jaccard >= {self.threshold})")


def audit(train: torch.Tensor, val: torch.Tensor, n: int = 8, threshold: float = 0.4) -> OverlapReport:
    """Exact and near duplicates of ``val`` in ``train`` (near: max shingle Jaccard >= ``threshold``)."""
    exact = exact_duplicates(train, val)
    near = max_jaccard(train, val, n) >= threshold
    return OverlapReport(len(val), exact.float().mean().item(), near.float().mean().item(), n, threshold)


def group_split(groups, val_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices (train, val) of the items, splitting whole groups: no group has items on both sides.

    ``groups`` gives each item's group id (document, source). A seeded shuffle of the distinct groups
    puts ``round(val_fraction * n_groups)`` of them (at least one, at most all but one) in validation.
    """
    groups = torch.as_tensor(groups)
    ids = torch.unique(groups)
    if len(ids) < 2:
        raise ValueError("a group split needs at least two groups")
    k = min(len(ids) - 1, max(1, round(val_fraction * len(ids))))
    val_groups = ids[torch.randperm(len(ids), generator=torch.Generator().manual_seed(seed))[:k]]
    in_val = torch.isin(groups, val_groups)
    return torch.nonzero(~in_val).flatten(), torch.nonzero(in_val).flatten()


def sliding_windows(docs: torch.Tensor, length: int, stride: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut each document (row of ``docs``) into windows of ``length`` tokens every ``stride`` tokens.

    Returns ``(windows, doc_ids)``. With ``stride < length`` neighbouring windows share
    ``length - stride`` tokens: split them at random and validation holds near copies of training.
    """
    w = docs.unfold(1, length, stride)  # (n_docs, per_doc, length)
    return w.reshape(-1, length).clone(), torch.arange(len(docs)).repeat_interleave(w.shape[1])
