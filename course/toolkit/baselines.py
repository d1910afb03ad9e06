"""Baselines a loss is compared with, computed from the batch actually scored.

``uniform_loss(V)`` is the cross-entropy of a uniform guess over V classes, ln(V). It is a baseline to
compare against, not a fingerprint: a loss sitting at ln(V) is consistent with "no learning", but a
randomly initialised head is not exactly there, and a model can reach ln(V) for other reasons.

``unigram_entropy(targets)`` is the entropy of the empirical distribution of the targets the loss
actually scores (``IGNORE`` excluded): the best loss any model can reach without looking at its input.

``chain_loss(lang, windows)`` is the generating chain's own loss on a given set of windows: what a
perfect model scores on *those* windows. ``held_out_symptom(pipe)`` trains briefly and reads the
held-out loss against it and against the window floor (notebook 01's detector for "falls too well"
and "stalls above the floor").
"""

from __future__ import annotations

import math

import torch

from ..reference.data import IGNORE, entropy


def uniform_loss(vocab_size: int) -> float:
    """ln(V): the loss of predicting every one of ``vocab_size`` classes with probability 1/V."""
    return math.log(vocab_size)


def unigram_entropy(targets: torch.Tensor, ignore_index: int = IGNORE) -> float:
    """Entropy (nats) of the scored targets' empirical distribution; NaN if nothing is scored."""
    scored = targets[targets != ignore_index]
    if scored.numel() == 0:
        return float("nan")
    counts = torch.bincount(scored.flatten()).double()
    return entropy(counts / counts.sum()).item()


@torch.no_grad()
def loss_at_init(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> float:
    """Mean cross-entropy of ``model`` on one batch, in eval mode, before any update."""
    was = model.training
    model.eval()
    logits = model(inputs)
    model.train(was)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten()).item()


def chain_loss(lang, windows: torch.Tensor) -> float:
    """The generating chain's own mean cross-entropy (nats) on the next-token targets of ``windows``.

    ``windows`` is (n, L) tokens of ``lang`` (full windows, no padding), as ``pipe.windows("val")``
    returns them; the targets are ``windows[:, 1:]``. Target 0 is scored with one token of context
    (``P(b | a)`` from the chain's stationary pairs), every later one with two (the transition table).
    This is what a perfect model scores on *these* windows: compare a held-out loss with it, not with
    the window floor or the entropy rate, which are averages: on a finite validation set the chain
    itself scores below the window floor about half the time, and sometimes below the rate.
    """
    w = windows.long()
    if w.dim() != 2 or w.shape[1] < 2:
        raise ValueError(f"windows must be (n, L) with L >= 2, got {tuple(w.shape)}")
    if w.min() < 0 or w.max() >= lang.n_symbols:
        raise ValueError("chain_loss needs full windows of language tokens (no PAD, EOS or IGNORE)")
    S = lang.n_symbols
    pair = lang.pair_stationary.view(S, S)
    first = (pair[w[:, 0], w[:, 1]] / lang.stationary[w[:, 0]]).log()
    nll = [-first]
    if w.shape[1] > 2:
        ctx = w[:, :-2] * S + w[:, 1:-1]
        nll.append(-lang.transition[ctx, w[:, 2:]].log().flatten())
    return torch.cat([t.flatten() for t in nll]).mean().item()


# How a briefly trained run is read against the known floors (``held_out_symptom``). Measured on the
# notebook-01 mystery base (8 symbols, 16 targets a window, 200 steps at batch 32) over 7 languages:
# a healthy run closes all but 4-18% of the gap from the bigram entropy down to the window floor,
# a run with the positions or the context cut off keeps 52-65% of it; a healthy run ends 0.07-0.14
# nats above the exact chain's loss on its validation windows, a run that sees its targets 0.6+ below.
BELOW_CHAIN_MARGIN = 0.05  # nats below the exact chain's loss on the same windows: leakage
STALL_FRACTION = 0.35  # share of the gap bigram entropy -> window floor still open: context unused
MIN_GAP = 0.3  # below this gap (a nearly deterministic language) the stall is read against the unigram entropy


def held_out_symptom(pipe, seed: int = 0, run=None) -> str | None:
    """Train ``pipe`` for ``pipe.steps`` on ``seed`` (or read the finished ``run``) and compare its
    held-out loss with the known floors of its language. Returns the problem seen, or ``None``.

    * below the exact chain's loss on the same validation windows by more than
      ``BELOW_CHAIN_MARGIN``: the model sees what it predicts (no honest model beats the chain that
      generated the data, on any set of windows);
    * more than ``STALL_FRACTION`` of the gap from the bigram entropy down to the window floor still
      open: the run does not use the context (or does not learn at all). On a language whose bigram
      entropy is within ``MIN_GAP`` of its floor, seeing one token back is nearly enough, so context
      use cannot be told apart there: the gap is then taken from the unigram entropy, and only "does
      not learn" is caught.

    Needs full windows (``min_len=None``): the exact chain's loss is defined on language tokens only.
    """
    import math

    from ..reference.train import train

    if run is None:
        run = train(pipe, seed=seed, eval_every=0)
    lang = pipe.language()
    val = run.final_val_loss
    exact = chain_loss(lang, pipe.windows("val"))
    floor, bigram = lang.loss_floor(pipe.seq_len), lang.bigram_entropy
    top, top_name = (bigram, "bigram") if bigram - floor >= MIN_GAP else (lang.unigram_entropy, "unigram")
    if not math.isfinite(val):
        return f"the held-out loss is {val}"
    if val < exact - BELOW_CHAIN_MARGIN:
        return (f"held-out loss {val:.3f} is below the exact chain's loss {exact:.3f} on the same windows: "
                "the model sees what it predicts")
    if val > floor + STALL_FRACTION * (top - floor):
        return (f"held-out loss {val:.3f} stalls far above the window floor {floor:.3f} "
                f"({top_name} entropy {top:.3f}): the context is not used, or nothing is learned")
    return None
