"""Generation on the KV cache, and the tests that tell a good sampler from a broken one (notebook 08).

``generate(model, prompt, max_new_tokens, ...)`` runs the prompt through the model once (the
*prefill*), then feeds one token at a time, reusing the keys and values stored in the model's cache
(``TinyGPT.new_cache``) and passing each new token's absolute position as ``start``. It samples with
a temperature and an optional top-k, or greedily; it is seeded (its own ``torch.Generator``, the
global RNG is untouched), bounded by ``max_new_tokens`` and stops once every row has emitted EOS.
It is the pipeline's ``generate`` part, so it is written in ``course.reference.parts`` (with
``sample_next``) and imported here.

A low teacher-forced loss says nothing about this code path: training never calls it. The tests here
check generation itself:

* ``future_perturbation``: change a later token; the logits of every earlier position must not move
  (a causal decoder). Catches a missing causal mask;
* ``recompute_logits`` against the logits the generator used (``return_logits=True``): run each
  prefix of the generated sequence through the model *without* a cache and compare. A cached step is
  a different computation (other matrix shapes, other summation order), so agreement is to float32
  rounding, ``CACHE_TOLERANCE``, not bit for bit;
* ``FixedLogits``: a stand-in model with known next-token logits, so the sampler's output frequencies
  can be compared with ``softmax(logits / temperature)`` exactly;
* ``chain_score``: generated text scored under the *true* chain (``MarkovLanguage.transition``):
  negative log-likelihood per generated token and the EOS rate; compared with the chain's entropy
  rate and with the same score of the healthy generator's samples;
* ``repetition``: distinct n-grams and the period of a loop, to put a number on "it repeats itself".

``consistency_problems(pipe, model)`` runs the first three on a pipeline's ``generate`` part (the
notebook's graded exercise asks the learner to write it; grading switches it off).

``eos_batch`` is a collation for variable-length windows that marks the end of each sequence with
EOS, so a model can learn to stop; ``eos_masked_batch`` (bug ``eos-masked-in-training``) ignores
those EOS targets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..reference.parts import _check_args, generate, sample_next  # noqa: F401  (the pipeline's generate part)
from ..reference.data import MarkovLanguage
from ..toolkit.textview import html_text, with_text
from ..toolkit.batch import IGNORE, Batch, next_token_batch

CACHE_TOLERANCE = 1e-4  # max |cached - recomputed| logit accepted: float32 rounding is ~1e-6 here


# ----- sampling and generation --------------------------------------------------------------------
def _staggered_eos(new: torch.Tensor) -> tuple[int | None, torch.Tensor | None]:
    """A token that the greedy continuations ``new`` (B, n) reach at different steps (or not at
    all) in different rows, and those continuations as a correct generator returns them with it as
    ``eos_id``: each row held at EOS after its first one, cut after the step where the last row
    ends (all n steps if some row never emits it). ``(None, None)`` if no token is staggered."""
    B, n = new.shape
    for token in torch.unique(new).tolist():
        hits = new == token
        first = torch.where(hits.any(1), hits.int().argmax(1), torch.full((B,), n))
        if len(set(first.tolist())) < 2:
            continue
        held = torch.where(torch.arange(n)[None, :] > first[:, None], torch.full_like(new, token), new)
        length = n if bool((first == n).any()) else int(first.max()) + 1
        return token, held[:, :length]
    return None, None


@torch.no_grad()
def recompute_logits(model, tokens: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """The logits of each generated position recomputed from scratch: for k = 0.., the last-position
    logits of ``model(tokens[:, :prompt_len + k])`` with no cache, stacked to (B, n, V)."""
    was_training = model.training
    model.eval()
    n = tokens.shape[1] - prompt_len
    out = torch.stack([model(tokens[:, :prompt_len + k])[:, -1] for k in range(n)], dim=1)
    model.train(was_training)
    return out


@torch.no_grad()
def greedy_recompute(model, prompt: torch.Tensor, max_new_tokens: int, eos_id: int | None = None) -> torch.Tensor:
    """Greedy continuation without any cache (each step recomputes the whole prefix): the slow
    reference that a cached greedy ``generate`` must match token for token."""
    _check_args(model, prompt, max_new_tokens)
    was_training = model.training
    model.eval()
    ids = prompt
    done = torch.zeros(prompt.shape[0], dtype=torch.bool)
    for _ in range(max_new_tokens):
        nxt = model(ids)[:, -1].argmax(-1)
        if eos_id is not None:
            nxt = torch.where(done, torch.full_like(nxt, eos_id), nxt)
            done = done | (nxt == eos_id)
        ids = torch.cat([ids, nxt.unsqueeze(1)], dim=1)
        if eos_id is not None and bool(done.all()):
            break
    model.train(was_training)
    return ids


@torch.no_grad()
def future_perturbation(model, tokens: torch.Tensor, t: int, vocab: int | None = None) -> float:
    """Max |change| of the logits at positions < ``t`` when the token at position ``t`` (and every
    later one) is replaced: 0 (to rounding) for a causal decoder."""
    was_training = model.training
    model.eval()
    vocab = vocab or model.cfg.vocab_size
    other = tokens.clone()
    other[:, t:] = (other[:, t:] + 1 + torch.arange(other.shape[1] - t)) % vocab
    a, b = model(tokens)[:, :t], model(other)[:, :t]
    model.train(was_training)
    return (a - b).abs().max().item()


class FixedLogits(nn.Module):
    """A stand-in model whose next-token logits are ``logits`` (V,) at every position, whatever the
    input: with it, a sampler's output frequencies can be checked against ``softmax(logits / T)``.
    It accepts ``caches`` and ``start`` like ``TinyGPT`` and counts its calls in ``calls``."""

    def __init__(self, logits: torch.Tensor, n_ctx: int = 64):
        super().__init__()
        self.register_buffer("logits", torch.as_tensor(logits, dtype=torch.float32))
        self.cfg = type("Cfg", (), {"n_ctx": n_ctx, "vocab_size": len(self.logits)})()
        self.calls: list[tuple[int, bool, int]] = []  # (tokens fed, with a cache, start)

    def new_cache(self) -> list[dict]:
        return [{}]

    def forward(self, ids: torch.Tensor, caches=None, start: int = 0) -> torch.Tensor:
        self.calls.append((ids.shape[1], caches is not None, start))
        return self.logits.expand(ids.shape[0], ids.shape[1], -1).clone()


def token_frequencies(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """The fraction of each token id among ``tokens`` (any shape), as a float64 (vocab,) tensor."""
    return torch.bincount(tokens.flatten(), minlength=vocab).double() / tokens.numel()


def sampler_error(generate_fn, logits: torch.Tensor, temperature: float, top_k: int | None = None,
                  n: int = 4000, seed: int = 0) -> float:
    """Max |observed - expected| token frequency of ``generate_fn`` on ``FixedLogits(logits)``: n
    first tokens, one per prompt row, against ``softmax(logits / temperature)`` (top-k applied).

    For a correct sampler this is sampling noise: one frequency's standard error is sqrt(p(1-p)/n),
    at most sqrt(0.25/n) ≈ 0.0079 at n = 4000 (p = 0.5). That is one standard error, not a bound: the
    max over tokens is often one to three of them. A threshold should be several standard errors;
    the course's 0.03 at n = 4000 is about 3.8 (under a normal approximation one token exceeds it with
    probability about 1.5e-4)."""
    model = FixedLogits(logits)
    out = generate_fn(model, torch.zeros(n, 1, dtype=torch.long), 1, temperature=temperature, top_k=top_k, seed=seed)
    scaled = torch.as_tensor(logits, dtype=torch.float64) / temperature
    if top_k is not None:
        kth = scaled.topk(top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    expected = torch.softmax(scaled, -1)
    return (token_frequencies(out[:, -1], len(expected)) - expected).abs().max().item()


# ----- the harness ---------------------------------------------------------------------------------
@torch.no_grad()
def cache_gap(generate_fn, model, prompt: torch.Tensor, n: int) -> torch.Tensor:
    """Per generated step, the max |cached - recomputed| logit of ``generate_fn`` (greedy) on
    ``model``: a (n,) tensor. The first step above ``CACHE_TOLERANCE`` points at the mechanism."""
    tokens, used = generate_fn(model, prompt, n, greedy=True, return_logits=True)
    again = recompute_logits(model, tokens, prompt.shape[1])
    return (used - again).abs().amax(dim=(0, 2))


def consistency_problems(pipe, model=None, seed: int = 0) -> list[str]:
    """The generation checks on ``pipe.generate`` (and ``pipe.build_model``'s mask): an empty list
    when every one passes. ``model`` (any trained TinyGPT) is used for the cache checks; by default a
    freshly initialised model of the pipeline is (the sampler check uses fixed logits either way)."""
    problems = []
    fresh = pipe.build_model(seed)
    vocab = fresh.cfg.vocab_size
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab - 2, (4, 12), generator=g)
    moved = future_perturbation(fresh, tokens, 6)
    if moved > CACHE_TOLERANCE:
        problems.append(f"changing token 6 moved earlier logits by {moved:.2e}: the model sees the future")
    gap = cache_gap(pipe.generate, model if model is not None else fresh, tokens[:, :4], 8)
    if gap.max() > CACHE_TOLERANCE:
        first = int((gap > CACHE_TOLERANCE).nonzero()[0])
        problems.append(f"cached logits leave the full recompute at generated step {first} (by {gap.max():.2e})")
    err = sampler_error(pipe.generate, torch.tensor([2.0, 1.0, 0.0, -1.0]), temperature=0.5)
    if err > 0.03:
        problems.append(f"sampled frequencies at temperature 0.5 are off softmax(logits / T) by {err:.3f}")
    return problems


# ----- scoring generated text under the true chain -------------------------------------------------
@dataclass(frozen=True)
class ChainScore:
    """Generated text under the true chain: ``nll`` per scored token (nats; a special token before
    the first EOS counts at ``min_prob``; the chain's
    ``entropy_rate`` is what its own samples score on average), how many were scored, the share of
    generated tokens that were EOS, and the share of rows that stopped (emitted EOS)."""

    nll: float
    scored: int
    eos_rate: float
    stopped: float


def chain_score(lang: MarkovLanguage, tokens: torch.Tensor, prompt_len: int, min_prob: float = 1e-9) -> ChainScore:
    """Score the tokens after ``prompt_len`` (prompt_len >= 2) of each row under ``lang``'s
    transition matrix, up to the row's first EOS (which ends the row, unscored). Any other special
    token (PAD, or EOS inside the two-token context) is scored at ``min_prob`` and scoring goes on;
    a probability below ``min_prob`` also counts as ``min_prob`` (at most -ln(1e-9) = 20.7 nats per
    token)."""
    if prompt_len < 2:
        raise ValueError("chain_score needs two prompt tokens of context")
    S = lang.n_symbols
    total, count, eos, generated, stopped = 0.0, 0, 0, 0, 0
    for row in tokens.tolist():
        for t in range(prompt_len, len(row)):
            generated += 1
            a, b, c = row[t - 2], row[t - 1], row[t]
            if c == lang.EOS:
                eos += 1
                stopped += 1
                break
            if a >= S or b >= S or c >= S:
                total += -math.log(min_prob)
                count += 1
                continue
            p = float(lang.transition[a * S + b, c])
            total += -math.log(max(p, min_prob))
            count += 1
    return ChainScore(total / count if count else float("nan"), count, eos / max(generated, 1),
                      stopped / max(len(tokens), 1))


# ----- repetition in numbers -----------------------------------------------------------------------
@dataclass(frozen=True)
class Repetition:
    """``distinct``: the share of distinct n-grams among a row's n-grams (1.0: no n-gram repeats);
    ``period``: the length of the cycle the row ends in (0 when its tail does not repeat)."""

    distinct: float
    period: int


def repetition(row, n: int = 4, tail: int = 12) -> Repetition:
    """Distinct n-grams of one generated row, and the shortest period p such that the last ``tail``
    tokens repeat with period p (0 if none up to tail // 2; notebook 08 uses ``tail=8``: periods up
    to 4 in the last 8 tokens)."""
    row = [int(x) for x in row]
    grams = [tuple(row[i:i + n]) for i in range(len(row) - n + 1)]
    distinct = len(set(grams)) / len(grams) if grams else 1.0
    end = row[-tail:]
    period = next((p for p in range(1, len(end) // 2 + 1) if all(end[i] == end[i + p] for i in range(len(end) - p))), 0)
    return Repetition(distinct, period)


# ----- data with an end: EOS --------------------------------------------------------------------
def _with_eos(windows: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Each padded window with EOS (pad_id + 1) written at its first padding position."""
    w = windows.clone()
    is_pad = w == pad_id
    has_pad = is_pad.any(dim=1)
    first = is_pad.float().argmax(dim=1)
    rows = torch.arange(len(w))[has_pad]
    w[rows, first[has_pad]] = pad_id + 1
    return w


def eos_batch(windows: torch.Tensor, pad_id: int) -> Batch:
    """Collation for variable-length windows (``Pipeline.min_len``): a window shorter than the full
    length ends with EOS, written at its first padded position and scored like any token, so the
    model learns when to stop; a full-length window has no padding and so no EOS. Padding is not
    scored."""
    return next_token_batch(_with_eos(windows, pad_id), pad_id)


def eos_masked_batch(windows: torch.Tensor, pad_id: int) -> Batch:
    """The bug: EOS is written, then its target is ignored with the padding, so nothing ever teaches
    the model to emit it."""
    batch = eos_batch(windows, pad_id)
    batch.targets[batch.targets == pad_id + 1] = IGNORE
    return batch


def eos_share(pipe) -> float:
    """The share of scored training targets that are EOS in ``pipe``'s data with ``eos_batch``: the
    language's EOS rate, what a healthy generator's ``ChainScore.eos_rate`` is compared with."""
    batch = eos_batch(pipe.windows("train"), pipe.language().PAD)
    scored = batch.targets[batch.targets != IGNORE]
    return (scored == pipe.language().EOS).double().mean().item()


# ----- showing samples ----------------------------------------------------------------------------
def as_text(row, n_symbols: int) -> str:
    """A row of token ids as letters (``a`` for 0, ...), ``_`` for PAD and ``|`` for EOS."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = []
    for t in (int(x) for x in row):
        out.append(letters[t] if t < n_symbols else "_" if t == n_symbols else "|" if t == n_symbols + 1 else "?")
    return "".join(out)


def temperature_explorer(results: dict, entropy_rate: float, greedy_nll: float):
    """A widget: a slider over the temperatures of ``results`` and, per temperature, the true-chain
    NLL and the distinct 4-gram share of the samples, a few samples and a plot with a marker.

    ``results[T]`` holds ``"nll"``, ``"distinct"`` (floats) and ``"samples"`` (strings), precomputed,
    so moving the slider only redraws. Returns a ``VBox`` with ``.slider``, ``.summary`` (HTML) and
    ``.output`` (the plot) as attributes, so tests can set ``explorer.slider.value``.
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    temps = sorted(results)
    slider = widgets.SelectionSlider(options=temps, value=temps[len(temps) // 2], description="temperature",
                                     style={"description_width": "initial"}, continuous_update=False)
    summary = widgets.HTML()
    output = widgets.Output()

    def draw(T) -> None:
        r = results[T]
        summary.value = (f"T = <b>{T}</b>: true-chain NLL <b>{r['nll']:.3f}</b> nats per token, "
                         f"distinct 4-grams <b>{r['distinct']:.2f}</b><br><tt>" + "<br>".join(r["samples"]) + "</tt>")
        output.clear_output(wait=True)
        with output:
            fig, ax = plt.subplots(figsize=(6, 3.2))
            ax.plot(temps, [results[t]["nll"] for t in temps], "o-", label="samples at temperature T")
            ax.plot([T], [r["nll"]], "o", color="red", markersize=10, label=f"T = {T}")
            ax.axhline(entropy_rate, color="grey", linestyle=":", label="entropy rate (the chain's own samples)")
            ax.axhline(greedy_nll, color="grey", linestyle="--", label="greedy")
            ax.set_xlabel("temperature T")
            ax.set_ylabel("NLL under the true chain (nats per token)")
            ax.legend(fontsize=8)
            plt.show()

    slider.observe(lambda change: draw(change["new"]), names="value")
    draw(slider.value)
    box = widgets.VBox([slider, summary, output])
    box.slider, box.summary, box.output = slider, summary, output
    # the summary starts with the setting ("T = 1.0: ..."), and each sample is a line of its own
    return with_text(box, lambda: html_text(summary.value) + "\n(move the slider in JupyterLab for the rest)")


# ----- grading a generator -------------------------------------------------------------------------
class _NotPlain(TypeError):
    """A generator returned something other than plain tensors."""


def _plain(value) -> torch.Tensor:
    """``value``, which must be a ``torch.Tensor`` (not a subclass), copied now. A generator's
    results are read while the package's functions are still switched off: an object that works
    out its value only when it is read (an indexing, ``__torch_function__``, ``__eq__``) would run
    after the switch is lifted and could call them then (red team, 2026-12-07, notebook 08)."""
    if type(value) is not torch.Tensor:
        raise _NotPlain(f"the generator must return a torch.Tensor (the token ids), got {type(value).__name__}")
    return value.detach().clone()


def _plain_pair(value) -> tuple:
    """The ``(tokens, logits)`` of ``return_logits=True``, as two plain tensors (``_plain``)."""
    if type(value) not in (tuple, list) or len(value) != 2:
        raise _NotPlain("with return_logits=True the generator must return (tokens, logits), got "
                        f"{type(value).__name__}")
    return _plain(value[0]), _plain(value[1])


def generator_problems(gen, model, prompts: torch.Tensor, lang: MarkovLanguage, seed: int = 0,
                       off=(), tolerance: float = 0.15) -> list[str]:
    """What is wrong with the generator ``gen`` (the signature of ``Pipeline.generate``), by its
    behaviour: an empty list when nothing is. ``model`` is a TinyGPT trained on ``lang``; ``prompts``
    (B, P >= 2) leave room for 12 new tokens. Checked: the cache protocol (a prefill with the cache,
    then one token per call at consecutive positions) and the ``max_new_tokens`` and EOS bounds on
    ``FixedLogits``; greedy output and logits against the full recompute; seeded sampling; sampled
    frequencies against ``softmax(logits / T)`` with and without top-k; the true-chain NLL of samples
    at T = 0.7 within ``tolerance`` of the reference generator's. ``gen`` runs with the functions in
    ``off`` switched off (``course.exercises.grading.switched_off``), and what it returns is read there, as
    plain tensors (anything else is the one problem reported); the references run outside. EOS is also
    checked on the trained model, with a token that some rows' greedy continuations reach before
    others' (a finished row must be held at EOS while the rest go on), when the prompts give such a
    token (they do for a few dozen rows of a small language; without one the check is skipped)."""
    from ..toolkit.guards import switched_off

    problems = []
    P, n = prompts.shape[1], 12
    fixed = FixedLogits(torch.tensor([0.0, 3.0, 1.0, 0.0]))
    stop = FixedLogits(torch.tensor([0.0, 0.0, 0.0, 5.0]))
    probe = torch.tensor([2.0, 1.0, 0.0, -1.0])
    rows = 4000
    try:
        with switched_off(*off):
            bounded = _plain(gen(fixed, torch.zeros(2, 3, dtype=torch.long), 5, greedy=True))
            stopped = _plain(gen(stop, torch.zeros(2, 3, dtype=torch.long), 5, greedy=True, eos_id=3))
            greedy, used = _plain_pair(gen(model, prompts, n, greedy=True, return_logits=True))
            a, b = _plain(gen(model, prompts, n, seed=seed + 5)), _plain(gen(model, prompts, n, seed=seed + 5))
            c = _plain(gen(model, prompts, n, seed=seed + 6))
            freq = {(T, k): _plain(gen(FixedLogits(probe), torch.zeros(rows, 1, dtype=torch.long), 1, temperature=T,
                                       top_k=k, seed=seed + 7))[:, -1] for T, k in ((0.5, None), (2.0, None), (1.0, 2))}
            warm = _plain(gen(model, prompts, n, temperature=0.7, seed=seed + 8))
        want = greedy_recompute(model, prompts, n)
        eos, held = _staggered_eos(want[:, P:])
        if eos is not None:
            with switched_off(*off):
                ended = _plain(gen(model, prompts, n, greedy=True, eos_id=eos))
    except _NotPlain as err:
        return [str(err)]
    if tuple(bounded.shape) != (2, 8) or bounded[:, 3:].ne(1).any():
        problems.append(f"greedy on fixed logits with max_new_tokens=5 gave shape {tuple(bounded.shape)}, "
                        "expected the prompt plus 5 argmax tokens")
    calls = fixed.calls
    if not calls or calls[0][:2] != (3, True) or calls[0][2] != 0:
        problems.append("the prompt is not run once through the model with the cache (the prefill)")
    elif [c_[:2] for c_ in calls[1:]] != [(1, True)] * (len(calls) - 1) or len(calls) - 1 not in (4, 5) \
            or [c_[2] for c_ in calls[1:]] != list(range(3, 3 + len(calls) - 1)):
        problems.append(f"after the prefill, each call must feed one token with the cache at the next position; "
                        f"got (tokens, cache, start) = {calls[1:]}")
    if tuple(stopped.shape) != (2, 4):
        problems.append(f"with EOS as the argmax, generation should stop after one token; shape {tuple(stopped.shape)}")
    if eos is not None:
        expected = torch.cat([prompts, held], dim=1)
        if ended.shape != expected.shape or not torch.equal(ended, expected):
            problems.append(f"greedy with eos_id={eos}, a token some rows reach before others: a row that has emitted "
                            "it must keep emitting eos_id (be held at EOS) while the others continue, and generation "
                            f"stop when every row has (shape {tuple(ended.shape)}, expected {tuple(expected.shape)})")
    if greedy.shape != want.shape or not torch.equal(greedy, want):
        problems.append("greedy output differs from the full-recompute greedy continuation")
    else:
        gap = (used - recompute_logits(model, greedy, P)).abs().max().item()
        if gap > CACHE_TOLERANCE:
            problems.append(f"returned logits differ from the full recompute by {gap:.2e}")
    if not torch.equal(a, b):
        problems.append("the same seed gave different samples")
    elif torch.equal(a, c):
        problems.append("different seeds gave the same samples")
    for (T, k), tokens in freq.items():
        scaled = probe.double() / T
        if k is not None:
            scaled = scaled.masked_fill(scaled < scaled.topk(k).values[-1], float("-inf"))
        err = (token_frequencies(tokens, 4) - torch.softmax(scaled, -1)).abs().max().item()
        if err > 0.03:
            problems.append(f"sampled frequencies at temperature {T}, top_k {k} are off softmax(logits / T) by {err:.3f}")
    ours = chain_score(lang, generate(model, prompts, n, temperature=0.7, seed=seed + 8), P).nll
    theirs = chain_score(lang, warm, P).nll
    if abs(theirs - ours) > tolerance:
        problems.append(f"samples at T = 0.7 score {theirs:.3f} nats per token under the true chain; "
                        f"a correct generator's score {ours:.3f}")
    return problems
