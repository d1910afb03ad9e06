"""The runs and separating tests behind a validation gap (notebook 05).

"Training improves, validation worsens" has at least four causes, and each has one test that can
falsify it:

* **an evaluation bug** (dropout left on, a different loss or denominator in the eval path): evaluate
  the *training* windows with the eval path and with ``reference_loss`` (``model.eval()``, the
  reference mean cross-entropy over scored tokens, the same batches). A healthy eval path gives the
  same number, bit for bit, every time (``eval_path_check``);
* **leakage** (validation shares windows with training): the overlap audit of ``course.toolkit.overlap``,
  which needs no model at all;
* **overfitting** (a small training set seen many times): score *fresh* windows from the training
  source (``fresh``); they behave like validation, far above the training windows;
* **distribution shift** (validation drawn from another source): fresh windows from the training
  source behave like training, validation does not.

The validation sources here are values for ``Pipeline.val_source``: ``SameSource`` (healthy, a
chosen seed), ``OtherSource`` (all or part of validation from another Markov chain),
``TrainCopies`` and ``TrainContinuations`` (leakage: copies of training windows, or training windows
slid on by a few tokens, as a random split of overlapping windows produces).

For mystery pipelines (``course.exercises.mystery``, whose parts are opaque): ``trained`` (one short run per
pipeline and seed, remembered, so several tests share it), ``seen_loss`` (the reference loss on the
batches a run actually trained on: what the pipeline's settings call its training set may not be
what it trained on), and ``problems`` (the four separating tests at once, with thresholds: the
grader's behavioural check of a fix; switched off while a learner's own test is graded).

``chain_loss`` is the exact generating chain's loss on given windows: the right thing to compare a
suspiciously low validation loss with (the entropy rate is an average; the exact chain scores below
it on about half of small validation sets).

``fit_context_counts`` / ``counts_loss`` are a statistic fitted on data (next-token counts per
two-token context, the token form of target encoding), to show what fitting it on train + validation
does to the validation loss.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..toolkit.textview import html_text, with_text
from ..toolkit.batch import Batch
from ..reference.data import MarkovLanguage
from ..reference.pipeline import Pipeline, _language, _windows, set_eval_mode
from ..toolkit.batch import token_cross_entropy
from ..reference.train import Run, batch_at, evaluate, start, train, train_steps


# ----- validation sources (values for Pipeline.val_source) ----------------------------------------
@dataclass(frozen=True)
class SameSource:
    """``n_val`` windows of the training language from ``seed``: an honest validation set."""

    seed: int

    def __call__(self, pipe: Pipeline) -> torch.Tensor:
        return _windows(pipe.n_symbols, pipe.language_seed, pipe.n_val, pipe.seq_len + 1, self.seed, pipe.min_len)


@dataclass(frozen=True)
class OtherSource:
    """A ``fraction`` of the validation windows drawn from another Markov chain (language seed
    ``language_seed + offset``), the rest from the training language: a held-out source."""

    fraction: float = 1.0
    offset: int = 1

    def __call__(self, pipe: Pipeline) -> torch.Tensor:
        k = round(self.fraction * pipe.n_val)
        other = _sample(pipe, pipe.language_seed + self.offset, k)
        return torch.cat([other, _sample(pipe, pipe.language_seed, pipe.n_val - k)])


def _sample(pipe: Pipeline, language_seed: int, n: int) -> torch.Tensor:
    """``n`` windows of the language with seed ``language_seed``, from ``pipe.val_seed`` (n may be 0)."""
    if n == 0:
        return torch.zeros(0, pipe.seq_len + 1, dtype=torch.long)
    return _windows(pipe.n_symbols, language_seed, n, pipe.seq_len + 1, pipe.val_seed, pipe.min_len)


def _pick(n: int, k: int, seed: int) -> torch.Tensor:
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:k]


@dataclass(frozen=True)
class TrainCopies:
    """A ``fraction`` of the validation windows are copies of training windows (leakage)."""

    fraction: float = 0.5

    def __call__(self, pipe: Pipeline) -> torch.Tensor:
        k = round(self.fraction * pipe.n_val)
        train = pipe.windows("train")
        fresh = _sample(pipe, pipe.language_seed, pipe.n_val - k)
        return torch.cat([train[_pick(len(train), k, pipe.val_seed)], fresh])


def continue_windows(lang: MarkovLanguage, windows: torch.Tensor, n_more: int, seed: int) -> torch.Tensor:
    """``windows`` (n, L) with ``n_more`` tokens appended, sampled from the chain given the last two."""
    if (windows >= lang.n_symbols).any():
        raise ValueError("continue_windows needs windows of language tokens only (no padding)")
    g = torch.Generator().manual_seed(seed)
    n, L = windows.shape
    S = lang.n_symbols
    out = torch.cat([windows, torch.empty(n, n_more, dtype=torch.long)], dim=1)
    cdf = lang.transition.cumsum(-1)
    for t in range(L, L + n_more):
        ctx = out[:, t - 2] * S + out[:, t - 1]
        u = torch.rand(n, generator=g, dtype=torch.float64)
        out[:, t] = torch.searchsorted(cdf[ctx], u.unsqueeze(-1)).squeeze(-1).clamp_max(S - 1)
    return out


@dataclass(frozen=True)
class TrainContinuations:
    """A ``fraction`` of the validation windows are training windows slid on by ``shift`` tokens
    (their true continuation appended): what a random split of overlapping windows of one document
    gives. They share all but ``shift`` tokens with a training window (leakage, near duplicates)."""

    fraction: float = 0.5
    shift: int = 4

    def __call__(self, pipe: Pipeline) -> torch.Tensor:
        k = round(self.fraction * pipe.n_val)
        train = pipe.windows("train")
        picked = train[_pick(len(train), k, pipe.val_seed)]
        slid = continue_windows(pipe.language(), picked, self.shift, pipe.val_seed)[:, self.shift:]
        fresh = _sample(pipe, pipe.language_seed, pipe.n_val - k)
        return torch.cat([slid, fresh])


def fresh(pipe: Pipeline) -> Pipeline:
    """``pipe`` whose validation split is ``n_val`` fresh windows of the *training* source (a seed used
    by neither split), whatever its ``val_source`` was. Its eval path is ``pipe``'s own."""
    seed = pipe.val_seed + 1
    while seed in (pipe.data_seed, pipe.val_seed):
        seed += 1
    return pipe.replace(val_source=SameSource(seed))


# ----- losses for the eval path -------------------------------------------------------------------
@dataclass(frozen=True)
class LabelSmoothed:
    """Cross-entropy with label smoothing ``eps`` (mean over scored targets)."""

    eps: float = 0.1

    def __call__(self, logits: torch.Tensor, batch: Batch) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), label_smoothing=self.eps)


def per_sequence_loss(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Summed cross-entropy divided by the number of sequences: nats per sequence, not per token."""
    return F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), reduction="sum") / batch.targets.shape[0]


# ----- measurements -------------------------------------------------------------------------------
def reference_loss(model: torch.nn.Module, pipe: Pipeline, split: str = "train", batch_size: int = 256) -> float:
    """The loss a correct eval path reports: ``course.reference.train.evaluate`` with the reference evaluation
    parts (``model.eval()``, mean token cross-entropy over scored targets) in place of the
    pipeline's own, on the same batches. Comparing it with ``evaluate`` on the same split compares
    like with like."""
    reference = pipe.replace(eval_mode=set_eval_mode, eval_loss_fn=token_cross_entropy)
    return evaluate(model, reference, split, batch_size)


@dataclass
class EvalPathCheck:
    """The eval path and the reference on the training windows, and the eval path run a second time."""

    eval_path: float
    reference: float
    eval_path_again: float

    @property
    def agrees(self) -> bool:
        """True if the eval path matches the reference and itself to 1e-6 nats (healthy: exactly)."""
        return abs(self.eval_path - self.reference) <= 1e-6 and abs(self.eval_path - self.eval_path_again) <= 1e-6


def training_probe(pipe: Pipeline, n_windows: int = 256) -> Pipeline:
    """``pipe`` whose validation split is its own first ``n_windows`` training windows, evaluated by
    ``pipe``'s eval path: ``evaluate(model, training_probe(pipe))`` scores training data as validation."""
    return pipe.replace(val_source=_FirstTrainingWindows(n_windows))


@dataclass(frozen=True)
class _FirstTrainingWindows:
    n: int

    def __call__(self, pipe: Pipeline) -> torch.Tensor:
        return pipe.windows("train")[: self.n]


def eval_path_check(model: torch.nn.Module, pipe: Pipeline, n_windows: int = 256) -> EvalPathCheck:
    """Evaluate ``n_windows`` *training* windows twice with the pipeline's eval path and once with the
    reference.

    Proves, when it disagrees, that the eval path measures something else than the training loss in
    eval mode (another mode, loss term or denominator) or is random (dropout on). It cannot see an eval
    bug that the reference shares: ``model.eval()`` does not reach ``F.dropout(x, p)``, so that bug
    shows only as the second evaluation differing from the first.
    """
    probe = training_probe(pipe, n_windows)
    return EvalPathCheck(evaluate(model, probe), reference_loss(model, probe, "val"), evaluate(model, probe))


def curves(pipe: Pipeline, val_pipes: dict[str, Pipeline], steps: int, every: int, seed: int = 0,
           n_train_eval: int = 256, progress: bool = False):
    """Train ``pipe`` once; every ``every`` steps (and at step 0) record the eval-path loss on its first
    ``n_train_eval`` training windows (``"train"``) and, for each named pipeline of ``val_pipes``,
    ``evaluate(model, that_pipeline)`` on its validation split.

    Only the evaluation parts of ``val_pipes`` matter (``val_source``, ``eval_loss_fn``,
    ``eval_mode``): they all score the one model trained by ``pipe``. Returns ``(run, curves)``.
    """
    run = start(pipe, seed)
    probe = training_probe(pipe, n_train_eval)
    out = {"step": [], "train": [], **{name: [] for name in val_pipes}}

    def record():
        out["step"].append(run.step)
        out["train"].append(evaluate(run.model, probe))
        for name, vp in val_pipes.items():
            out[name].append(evaluate(run.model, vp))

    record()
    for _ in tqdm(range(steps // every), desc="training", file=sys.stderr, disable=not progress, mininterval=0.5):
        train_steps(run, every, eval_every=0)
        record()
    return run, out


# ----- short runs, and what a run trained on ------------------------------------------------------
_RUNS: dict = {}


def trained(pipe: Pipeline, seed: int = 0) -> Run:
    """``course.reference.train.train(pipe, seed=seed, eval_every=0)``, remembered per (pipeline, seed): tests
    that need a trained model of the same draw share one training. Pipelines are compared as values
    (parts by identity), so ``pipe.replace(...)`` with a changed part is trained anew. Do not change
    the returned model's weights."""
    key = (pipe, seed)
    try:
        return _RUNS[key]
    except TypeError:  # an unhashable part: no cache
        return train(pipe, seed=seed, eval_every=0)
    except KeyError:
        pass
    if len(_RUNS) > 256:
        _RUNS.clear()
    _RUNS[key] = train(pipe, seed=seed, eval_every=0)
    return _RUNS[key]


@torch.no_grad()
def batches_loss(model: torch.nn.Module, batches: list[Batch]) -> float:
    """The reference loss (``model.eval()``, mean token cross-entropy over scored targets) on the
    given batches together."""
    was_training = model.training
    set_eval_mode(model)
    total, count = 0.0, 0
    for batch in batches:
        n = int(batch.scored.sum())
        total += token_cross_entropy(model(batch.inputs), batch).item() * n
        count += n
    model.train(was_training)
    return total / count if count else float("nan")


def seen_batches(run: Run, k: int = 8) -> list[Batch]:
    """The last ``k`` batches ``run`` trained on, from its own batch stream (``course.reference.train.batch_at``
    with the run's seed and data offset), whatever the pipeline's settings say its training set is."""
    first = max(0, run.step - k)
    return [batch_at(run.pipe, run.seed, s + run.data_offset) for s in range(first, run.step)]


def seen_loss(run: Run, k: int = 8) -> float:
    """The reference loss of ``run``'s model on the last ``k`` batches it trained on."""
    return batches_loss(run.model, seen_batches(run, k))


def problems(pipe: Pipeline, seed: int = 1, gap: float = 0.3, shift: float = 0.1, near: float = 0.1) -> list[str]:
    """The four separating tests of this notebook on ``pipe``, each with its threshold; an empty list
    means none fired. The grader's behavioural check of a fix (switched off while a learner's own test
    runs: it would answer the exercise).

    1. like with like: the eval path on 64 training windows (twice) against ``reference_loss``, on a
       freshly initialised model (an eval bug shows before any training);
    2. overlap: a rate of exact copies or of near duplicates more than ``near`` above that of fresh
       windows (a low-entropy source repeats a whole window now and then by chance);
    3. overfitting: after a short run (``trained(pipe, seed)``), fresh windows of the training source
       score more than ``gap`` nats worse than the batches the run trained on;
    4. shift: the validation split scores more than ``shift`` nats worse than fresh windows.
    The thresholds sit far above a healthy run's noise at the sizes of notebook 05.
    """
    from ..toolkit.overlap import audit

    found = []
    model = pipe.build_model(seed)
    probe = training_probe(pipe, 64)
    first, ref, again = evaluate(model, probe), reference_loss(model, probe, "val"), evaluate(model, probe)
    if abs(first - ref) > 1e-6 or abs(first - again) > 1e-6:
        found.append(f"the eval path disagrees with the reference on training windows ({first:.4f}, "
                     f"again {again:.4f}, reference {ref:.4f})")
    train_windows, honest = pipe.windows("train"), fresh(pipe)
    shared, chance = audit(train_windows, pipe.windows("val")), audit(train_windows, honest.windows("val"))
    if shared.exact > chance.exact + near or shared.near > chance.near + near:
        found.append(f"validation shares windows with training ({shared}; fresh windows: {chance.near:.1%} near)")
    run = trained(pipe, seed)
    seen, new = seen_loss(run), reference_loss(run.model, honest, "val")
    val = reference_loss(run.model, pipe, "val")
    if new - seen > gap:
        found.append(f"fresh windows score {new - seen:+.3f} nats worse than the batches it trained on (overfitting)")
    if val - new > shift:
        found.append(f"validation scores {val - new:+.3f} nats worse than fresh windows of the training source (shift)")
    return found


# ----- the exact chain's loss: what a suspiciously low validation loss is compared with -------------
def chain_loss(lang: MarkovLanguage, windows: torch.Tensor, per_window: bool = False, first: int = 0):
    """The exact generating chain's loss on ``windows`` (n, L) of language tokens: the mean of
    -log P(token | the tokens before), over targets ``first + 1 .. L - 1`` (as the model scores a
    window, ``first=0``: target 1 has one token of context, the rest two; ``first=1``: only the
    targets with two tokens of context, as ``counts_loss`` scores). ``per_window``: one mean per
    window (n,), to compute a standard error over windows."""
    S = lang.n_symbols
    w = windows.long()
    if (w >= S).any():
        raise ValueError("chain_loss needs windows of language tokens only (no padding)")
    nll = -lang.transition[w[:, :-2] * S + w[:, 1:-1], w[:, 2:]].log()  # targets 2..L-1
    if first == 0:
        pair = lang.pair_stationary.view(S, S)
        cond = pair / pair.sum(-1, keepdim=True)  # P(b | a) under the stationary chain
        nll = torch.cat([-cond[w[:, 0], w[:, 1]].log().unsqueeze(1), nll], dim=1)
    per = nll.mean(1)
    return per if per_window else per.mean().item()


@torch.no_grad()
def window_losses(model: torch.nn.Module, windows: torch.Tensor, pad_id: int) -> torch.Tensor:
    """The model's mean loss on each window (n,), in eval mode, every target scored."""
    from ..toolkit.batch import next_token_batch

    was_training = model.training
    model.eval()
    batch = next_token_batch(windows, pad_id)
    logits = model(batch.inputs)
    nll = F.cross_entropy(logits.transpose(1, 2), batch.targets, reduction="none")
    model.train(was_training)
    return nll.mean(1)


def margin(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """Mean of ``a - b`` (paired per window) and that mean in standard errors (over windows)."""
    d = (a - b).double()
    se = d.std().item() / len(d) ** 0.5
    return d.mean().item(), d.mean().item() / se if se > 0 else float("inf")


# ----- a statistic fitted on data -----------------------------------------------------------------
def fit_context_counts(windows: torch.Tensor, vocab_size: int, alpha: float = 0.1) -> torch.Tensor:
    """P(next | two tokens before), (V*V, V): add-``alpha`` smoothed counts over every position of
    ``windows`` that has two tokens of context. This is *fitted* on whatever windows it is given."""
    ctx = windows[:, :-2] * vocab_size + windows[:, 1:-1]
    counts = torch.zeros(vocab_size * vocab_size, vocab_size, dtype=torch.float64)
    counts.index_put_((ctx.flatten(), windows[:, 2:].flatten()), torch.ones(ctx.numel(), dtype=torch.float64), accumulate=True)
    counts += alpha
    return counts / counts.sum(-1, keepdim=True)


def counts_loss(table: torch.Tensor, windows: torch.Tensor, per_window: bool = False):
    """Mean -log P(next | two before) under ``table`` over the positions with two tokens of context
    (``per_window``: one mean per window). On fresh windows of a ``MarkovLanguage`` no table averages
    below the exact chain (``chain_loss(lang, windows, first=1)``) in expectation; on one small set
    either can be lower by chance, so compare on the same windows, in standard errors (``margin``)."""
    V = int(round(table.shape[0] ** 0.5))
    ctx = windows[:, :-2] * V + windows[:, 1:-1]
    per = -table[ctx, windows[:, 2:]].log().mean(1)
    return per if per_window else per.mean().item()


def language_of(pipe: Pipeline, offset: int = 0) -> MarkovLanguage:
    """The training language (``offset`` 0) or the one ``OtherSource(offset=offset)`` draws from."""
    return _language(pipe.n_symbols, pipe.language_seed + offset)


# ----- the notebook's explorer --------------------------------------------------------------------
def gap_explorer(runs: dict, floor: float, steps_times_batch: int | None = None):
    """A widget: a slider over the keys of ``runs`` (training-set sizes), a summary line and a plot.

    ``floor`` is drawn as the **window floor** (``MarkovLanguage.loss_floor(seq_len)``, the best mean
    loss over a fresh window, whose first target has one token of context), not the entropy rate.

    ``runs[key]`` holds equal-length lists ``"step"``, ``"train"``, ``"validation"`` (precomputed, so
    moving the slider only redraws). Returns a ``VBox`` whose ``.slider``, ``.summary`` (HTML) and
    ``.output`` (the plot) are attributes, so tests can set ``explorer.slider.value`` and read the
    summary.
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    keys = list(runs)
    slider = widgets.SelectionSlider(options=keys, value=keys[-1], description="train windows",
                                     style={"description_width": "initial"}, continuous_update=False)
    summary = widgets.HTML()
    output = widgets.Output()

    def describe(key) -> str:
        r = runs[key]
        gap = r["validation"][-1] - r["train"][-1]
        reps = f", each seen about {steps_times_batch / key:.1f} times" if steps_times_batch else ""
        return (f"<b>{key}</b> training windows{reps}: final train {r['train'][-1]:.3f}, "
                f"validation {r['validation'][-1]:.3f}, gap <b>{gap:+.3f}</b> nats")

    def draw(key) -> None:
        r = runs[key]
        output.clear_output(wait=True)
        with output:
            fig, ax = plt.subplots(figsize=(6, 3.5))
            ax.plot(r["step"], r["train"], "o-", label="train (eval path, training windows)")
            ax.plot(r["step"], r["validation"], "s-", label="validation")
            ax.axhline(floor, color="grey", linestyle=":", label="window floor")
            ax.set_ylim(0, max(4.0, max(r["validation"]) * 1.05))
            ax.set_xlabel("step")
            ax.set_ylabel("loss (nats per scored token)")
            ax.set_title(f"{key} training windows")
            ax.legend(fontsize=8)
            plt.show()

    def update(change=None) -> None:
        summary.value = describe(slider.value)
        draw(slider.value)

    slider.observe(update, names="value")
    update()
    box = widgets.VBox([slider, summary, output])
    box.slider, box.summary, box.output = slider, summary, output
    return with_text(box, lambda: f"{slider.description} {slider.value}: {html_text(summary.value)}"
                              " (move the slider in JupyterLab for the rest)")
