"""A small evaluation harness in the style of lm-evaluation-harness, on a task with known answers
(notebook 09).

**The text.** A first-order Markov chain over words (``WordChain``, defined here; not the second-order
language of ``course.reference.data``): each of its 16 symbols is
a pseudo-word (``WORDS``; every word starts with its own letter, so no word is a prefix of another),
words are joined by one space, documents by a newline. A ``TinyGPT`` over word-level tokens (``VOCAB``:
each word with and without its leading space, as a BPE tokenizer would have it) is trained on
such documents (``train_model``, a few seconds). Because the chain is known, the exact log-probability
of any continuation is known too (``chain_logprob``): each word is one token (its leading space folded
in), so the chain's log-probability of a continuation's tokens is its word-level one.

**The task.** ``make_task``: each item is a question (``question_words`` words of the chain) and four
options of one to three words; the gold option is the chain's own continuation, the three others are
stretches of the chain that started elsewhere. Ranking the options by the exact chain's
``P(option | question)`` (``chain_scores``) picks the gold option on most items, not on all: a
measured reference, not a ceiling. The distractors are drawn independently of the question, from the
stationary start, so the rule that uses how the items were made ranks by
``P(option | question) / P(option)`` (``chain_prior_logprob``), and a model can beat the first rule.
Everything after an option's first word cancels in that ratio, so options that start with the same
word tie; ``credit_with_ties`` scores such ties explicitly (a k-way tie that includes gold earns 1/k).

**The harness.** ``run(model, pipe, task, num_fewshot, seed)`` follows lm-evaluation-harness's
multiple-choice recipe, with every stage a part of the ``Pipeline`` (so a bug in one is a part swap):

* ``eval_fewshot(pool_size, index, k, seed)``: which ``k`` examples of the task's few-shot pool
  precede item ``index`` (``num_fewshot`` is a setting of the *run*, as ``--num_fewshot`` is);
* ``eval_template(question_words)``: the question as text, the way the training documents write it;
* the context is the examples (each ``template + target_delimiter + gold``) and the question, joined
  by the few-shot delimiter (``"\\n"`` here: the training corpus separates documents with it;
  lm-evaluation-harness's default is ``"\\n\\n"``);
* ``eval_continuation(choice, target_delimiter)``: what is scored, ``target_delimiter + choice``
  (lm-evaluation-harness's default delimiter is ``" "``);
* ``eval_truncate(context, continuation, n_ctx)``: cut the context **from the left** so that
  context + continuation fit the model's window (the question, at the end, is kept);
* ``eval_score(model, contexts, continuations)``: the sum of the continuation's tokens'
  log-probabilities (the context is conditioned on, never scored);
* ``eval_norm_length(choice, context, continuation)``: the length ``acc_norm`` divides by, the
  choice's character count without the delimiter (lm-evaluation-harness: ``len(choice)``).

``acc`` is the share of items whose highest summed log-probability is the gold option; ``acc_norm``
the same after dividing each option's sum by its length. Ties go to the first option (``argmax``).

**Reading results.** ``item_diff`` (which items changed, not one accuracy jump), ``bootstrap_ci``,
``paired_bootstrap`` and ``significantly_better``; ``ngram_overlap`` and ``contamination`` (an
n-gram check between evaluation items and training text, with its n stated).

The healthy stages themselves (``plain_template``, ``with_delimiter``, ``pick_fewshot``,
``truncate_left``, ``score_continuations``, ``choice_length``, with the task's ``WORDS`` and
``render``) are the pipeline's defaults, so they live in ``course.reference.parts``, below the
pipeline; this module imports them from there under the same names.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..reference.parts import (WORDS, choice_length, pick_fewshot, plain_template, render,  # noqa: F401
                               score_continuations, truncate_left, with_delimiter)  # the pipeline's harness stages
from ..toolkit.textview import html_text, with_text
from ..toolkit.baselines import entropy
from ..reference.model import ModelConfig, TinyGPT

# The tokenizer's vocabulary, as a BPE tokenizer would have it: each word twice, with its leading space
# folded in (" ka", how a word inside a line is written) and without ("ka", only at the start of a
# line), the newline, two template words, and every printable ASCII character as a fallback.
_STRINGS = ["\n"] + [" " + w for w in WORDS] + list(WORDS) + ["Question", "Answer"]
VOCAB = tuple(dict.fromkeys(_STRINGS + [chr(c) for c in range(32, 127)]))
_INDEX = {t: i for i, t in enumerate(VOCAB)}
_MAXLEN = max(len(t) for t in VOCAB)
NEWLINE = _INDEX["\n"]
LANGUAGE_SEED = 0
MODEL = ModelConfig(vocab_size=len(VOCAB), n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64)
DOC_WORDS = 12  # words per training document


def encode(text: str) -> list[int]:
    """Text to token ids: at each position the longest string of ``VOCAB`` that matches (so
    ``" ka"`` is one token and ``"ka"`` another). A character outside it raises ``ValueError``."""
    ids, i = [], 0
    while i < len(text):
        for L in range(min(_MAXLEN, len(text) - i), 0, -1):
            t = _INDEX.get(text[i:i + L])
            if t is not None:
                ids.append(t)
                i += L
                break
        else:
            raise ValueError(f"character {text[i]!r} is not in the vocabulary")
    return ids


def decode(ids) -> str:
    return "".join(VOCAB[int(i)] for i in ids)


class WordChain:
    """A seeded first-order Markov chain over ``n`` words: each row of ``transition`` is drawn from a
    Dirichlet(``concentration``), so most words have two or three likely successors. Exact numbers:
    ``stationary``, ``unigram_entropy``, ``entropy_rate`` (float64, by linear algebra)."""

    def __init__(self, n: int = 16, seed: int = 0, concentration: float = 0.1):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            rows = torch.distributions.Dirichlet(torch.full((n,), float(concentration))).sample((n,))
        self.n = n
        self.transition = rows.double() / rows.double().sum(-1, keepdim=True)
        p = torch.full((n,), 1.0 / n, dtype=torch.float64)
        lazy = 0.5 * (self.transition + torch.eye(n, dtype=torch.float64))
        for _ in range(100_000):
            nxt = p @ lazy
            if torch.max(torch.abs(nxt - p)) < 1e-15:
                break
            p = nxt
        self.stationary = nxt / nxt.sum()

    @property
    def unigram_entropy(self) -> float:
        return entropy(self.stationary).item()

    @property
    def entropy_rate(self) -> float:
        return (self.stationary * entropy(self.transition)).sum().item()

    def sample(self, n: int, length: int, seed) -> torch.Tensor:
        """``n`` sequences of ``length`` words (ids), started from the stationary distribution."""
        g = seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(seed)
        out = torch.empty(n, length, dtype=torch.long)
        out[:, 0] = torch.multinomial(self.stationary.float(), n, replacement=True, generator=g)
        cdf = self.transition.cumsum(-1)
        for t in range(1, length):
            u = torch.rand(n, generator=g, dtype=torch.float64)
            out[:, t] = torch.searchsorted(cdf[out[:, t - 1]], u.unsqueeze(-1)).squeeze(-1).clamp_max(self.n - 1)
        return out


_LANG: dict = {}


def language() -> WordChain:
    """The chain the task and the corpus are written in (16 words, seed ``LANGUAGE_SEED``)."""
    if "lang" not in _LANG:
        _LANG["lang"] = WordChain(len(WORDS), LANGUAGE_SEED)
    return _LANG["lang"]


def corpus(n_docs: int = 4000, seed: int = 1) -> str:
    """The training text: ``n_docs`` documents of ``DOC_WORDS`` words, one per line."""
    docs = language().sample(n_docs, DOC_WORDS, seed)
    return "\n".join(render(d) for d in docs) + "\n"


def corpus_tokens(n_docs: int = 4000, seed: int = 1) -> torch.Tensor:
    """``encode(corpus(n_docs, seed))`` as a 1-D tensor, built directly from the symbols (fast)."""
    docs = language().sample(n_docs, DOC_WORDS, seed)
    S = len(WORDS)
    ids = torch.empty(n_docs, DOC_WORDS + 1, dtype=torch.long)
    ids[:, 0] = docs[:, 0] + 1 + S  # the first word of a line has no leading space
    ids[:, 1:DOC_WORDS] = docs[:, 1:] + 1  # " word"
    ids[:, DOC_WORDS] = NEWLINE
    return ids.flatten()


def train_model(steps: int = 300, seed: int = 0, batch_size: int = 16, lr: float = 2e-2,
                tokens: torch.Tensor | None = None, cfg: ModelConfig = MODEL, keep: tuple[int, ...] = ()) -> TinyGPT:
    """A TinyGPT trained on ``corpus_tokens()`` (or ``tokens``): random windows, AdamW with warm-up
    and a linear decay, seeded. Returned in eval mode; ``model.history`` holds the training losses and
    ``model.checkpoints[s]`` a copy of the weights after ``s`` steps for each ``s`` in ``keep``."""
    ids = corpus_tokens() if tokens is None else tokens
    L = cfg.n_ctx
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = TinyGPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * max(0.05, 1 - s / steps))
    offsets = torch.arange(L + 1)
    history, checkpoints = [], {}
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, len(ids) - L - 1, (batch_size,), generator=g)
        w = ids[starts.unsqueeze(1) + offsets]
        loss = F.cross_entropy(model(w[:, :-1]).flatten(0, 1), w[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        history.append(loss.item())
        if len(history) in keep:
            checkpoints[len(history)] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.eval()
    model.history = history
    model.checkpoints = checkpoints
    return model


def load(weights: dict, cfg: ModelConfig = MODEL) -> TinyGPT:
    """A model in eval mode holding ``weights`` (e.g. ``model.checkpoints[100]``)."""
    model = TinyGPT(cfg)
    model.load_state_dict(weights)
    return model.eval()


@torch.no_grad()
def heldout_loss(model, n_docs: int = 400, seed: int = 2) -> float:
    """Mean next-token loss (nats) on fresh documents of the corpus (another seed), in windows of the
    model's context length: the likelihood side of "good likelihood, weak task score"."""
    ids = corpus_tokens(n_docs, seed)
    L = model.cfg.n_ctx + 1
    w = ids[: len(ids) // L * L].view(-1, L)
    return float(F.cross_entropy(model(w[:, :-1]).flatten(0, 1), w[:, 1:].flatten()))


def token_unigram_entropy() -> float:
    """The best expected loss per *token* of a model that ignores context (nats): the entropy of the
    token distribution of the corpus. A line is ``DOC_WORDS + 1`` tokens: a start-of-line word form,
    ``DOC_WORDS - 1`` word forms with their space, and the newline; every word position is distributed
    as the chain's stationary distribution (the chain starts there). ``language().unigram_entropy``
    is the same quantity per *word*, over 16 words only."""
    lang, D = language(), DOC_WORDS
    kinds = torch.tensor([1.0, 1.0, D - 1.0], dtype=torch.float64) / (D + 1)  # newline, line start, inside
    return float(entropy(kinds) + D / (D + 1) * lang.unigram_entropy)


def token_floor() -> float:
    """The best expected loss per token of a line of the corpus: its first word has no context
    (unigram entropy), every later word follows the chain (entropy rate), and the newline is certain. A window that starts inside a line sees less, so a trained model sits above it."""
    lang = language()
    return (lang.unigram_entropy + (DOC_WORDS - 1) * lang.entropy_rate) / (DOC_WORDS + 1)


# ----- the task ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Item:
    """One multiple-choice item: ``question`` (symbols), ``choices`` (strings without the delimiter),
    ``gold`` (index of the right choice), and the symbols of each choice (for the exact chain)."""
    question: tuple[int, ...]
    choices: tuple[str, ...]
    gold: int
    choice_symbols: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Task:
    """Items to evaluate and a separate pool that few-shot examples are drawn from."""
    items: tuple[Item, ...]
    fewshot_pool: tuple[Item, ...]
    target_delimiter: str = " "
    fewshot_delimiter: str = "\n"

    def __len__(self) -> int:
        return len(self.items)

    def subset(self, n: int) -> "Task":
        return Task(self.items[:n], self.fewshot_pool, self.target_delimiter, self.fewshot_delimiter)


def _items(n: int, seed: int, question_words: int, max_option_words: int, n_choices: int) -> tuple[Item, ...]:
    lang = language()
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        lengths = [rng.randint(1, max_option_words) for _ in range(n_choices)]
        gold = rng.randrange(n_choices)
        seq = lang.sample(1, question_words + lengths[gold], g)[0].tolist()
        question, cont = seq[:question_words], seq[question_words:]
        symbols = [None] * n_choices
        symbols[gold] = tuple(cont)
        for j, m in enumerate(lengths):
            while symbols[j] is None:  # a stretch of the chain that started elsewhere, unlike every other option
                other = tuple(lang.sample(1, m + 1, g)[0, 1:].tolist())
                if other not in symbols:
                    symbols[j] = other
        out.append(Item(tuple(question), tuple(render(s) for s in symbols), gold, tuple(symbols)))
    return tuple(out)


def make_task(n_items: int = 200, seed: int = 0, question_words: int = 4, max_option_words: int = 3,
              n_choices: int = 4, pool: int = 32) -> Task:
    """A seeded task: ``n_items`` items and a few-shot pool of ``pool`` items (another stream)."""
    return Task(_items(n_items, seed * 2 + 1, question_words, max_option_words, n_choices),
                _items(pool, seed * 2 + 2, question_words, max_option_words, n_choices))


def chain_logprob(item: Item, j: int) -> float:
    """The exact log-probability of choice ``j`` (with its delimiter) after the question, in nats."""
    T = language().transition
    prev, total = item.question[-1], 0.0
    for s in item.choice_symbols[j]:
        total += math.log(float(T[prev, s]))
        prev = s
    return total


def chain_prior_logprob(item: Item, j: int) -> float:
    """The log-probability of choice ``j`` as a distractor is drawn: a stretch of the chain that starts
    from the stationary distribution, whatever the question (in nats). ``chain_logprob(item, j) -
    chain_prior_logprob(item, j)`` is the score of the rule that knows how the items were made; all
    but the first word's terms cancel in it, so two options with the same first word tie (up to float
    rounding: score them with ``credit_with_ties``, not ``argmax``)."""
    lang = language()
    symbols = item.choice_symbols[j]
    total = math.log(float(lang.stationary[symbols[0]]))
    for a, b in zip(symbols, symbols[1:]):
        total += math.log(float(lang.transition[a, b]))
    return total


def chain_scores(task: Task) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probabilities (N, C) of every choice under the exact chain, choice lengths (N, C))."""
    lls = torch.tensor([[chain_logprob(it, j) for j in range(len(it.choices))] for it in task.items], dtype=torch.float64)
    lengths = torch.tensor([[float(len(c)) for c in it.choices] for it in task.items], dtype=torch.float64)
    return lls, lengths


# The healthy stages (the pipeline's defaults: plain_template, with_delimiter, pick_fewshot,
# truncate_left, score_continuations, choice_length) live in course.reference.parts, imported above.


# ----- running the harness --------------------------------------------------------------------------------
@dataclass
class Result:
    """Per-item results of one harness run: log-likelihoods and lengths (N, C), gold (N,), the
    per-item correctness of ``acc`` and ``acc_norm`` (bool, N), and each item's scored context."""
    lls: torch.Tensor
    lengths: torch.Tensor
    gold: torch.Tensor
    correct: torch.Tensor
    correct_norm: torch.Tensor
    contexts: list[str] = field(repr=False)

    @property
    def acc(self) -> float:
        return float(self.correct.double().mean())

    @property
    def acc_norm(self) -> float:
        return float(self.correct_norm.double().mean())


def build_context(pipe, task: Task, index: int, num_fewshot: int, seed: int = 0) -> str:
    """The full context of item ``index`` (before truncation): few-shot examples, then the question."""
    item = task.items[index]
    parts = []
    for j in pipe.eval_fewshot(len(task.fewshot_pool), index, num_fewshot, seed):
        ex = task.fewshot_pool[j]
        parts.append(pipe.eval_template(ex.question) + pipe.eval_continuation(ex.choices[ex.gold], task.target_delimiter))
    parts.append(pipe.eval_template(item.question))
    return task.fewshot_delimiter.join(parts)


def run(model, pipe, task: Task, num_fewshot: int = 0, seed: int = 0) -> Result:
    """Evaluate ``model`` on ``task`` with the harness parts of ``pipe``: context and continuation
    are tokenized **separately** (``encode(context)`` and ``encode(continuation)``), truncated,
    scored in one batch. lm-evaluation-harness does otherwise for decoder-only models (see
    ``encode_pair_lm_eval``); the two rules agree when the context does not end in whitespace and
    the continuation starts at a token boundary, as in the healthy harness here."""
    n_ctx = model.cfg.n_ctx
    contexts, conts, lengths, scored_contexts = [], [], [], []
    for i, item in enumerate(task.items):
        full = encode(build_context(pipe, task, i, num_fewshot, seed))
        for choice in item.choices:
            cont = encode(pipe.eval_continuation(choice, task.target_delimiter))
            ctx = pipe.eval_truncate(full, cont, n_ctx)
            contexts.append(ctx)
            conts.append(cont)
            lengths.append(float(pipe.eval_norm_length(choice, ctx, cont)))
        scored_contexts.append(decode(contexts[-1]))
    lls = torch.tensor(pipe.eval_score(model, contexts, conts), dtype=torch.float64)
    C = len(task.items[0].choices)
    lls, lengths_t = lls.view(-1, C), torch.tensor(lengths, dtype=torch.float64).view(-1, C)
    gold = torch.tensor([it.gold for it in task.items])
    correct, correct_norm = correct_per_item(lls, lengths_t, gold)
    return Result(lls, lengths_t, gold, correct, correct_norm, scored_contexts)


def encode_pair_lm_eval(context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-evaluation-harness's rule for decoder-only models (``_encode_pair``, in
    ``lm_eval/api/model.py``; earlier in ``lm_eval/models/huggingface.py``), with this tokenizer:
    the context's trailing whitespace is moved to the front of the continuation, ``context +
    continuation`` is encoded whole, and the continuation's tokens are those after the (stripped)
    context's encoding. Only for seq2seq models does lm-evaluation-harness encode the two parts
    separately. ``run`` encodes them separately."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
    whole, ctx = encode(context + continuation), encode(context)
    return ctx, whole[len(ctx):]


def correct_per_item(lls: torch.Tensor, lengths: torch.Tensor, gold: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(acc per item, acc_norm per item) as bool tensors: argmax of the sums, and of the sums / lengths."""
    lls, lengths = torch.as_tensor(lls, dtype=torch.float64), torch.as_tensor(lengths, dtype=torch.float64)
    gold = torch.as_tensor(gold)
    return lls.argmax(-1) == gold, (lls / lengths).argmax(-1) == gold


def credit_with_ties(scores, gold, atol: float = 1e-9) -> tuple[torch.Tensor, torch.Tensor]:
    """(credit per item (float64, N), tied (bool, N)) of ranking the options by ``scores`` (N, C) with
    ties scored explicitly: the options within ``atol`` of an item's top score share it, so a k-way
    tie that includes gold earns 1/k and one without gold 0 (the expected score of breaking the tie
    at random, where ``argmax`` would pick by float rounding). ``tied`` marks the items whose top is
    held by more than one option. With no ties the credit is ``argmax(scores) == gold``."""
    scores = torch.as_tensor(scores, dtype=torch.float64)
    gold = torch.as_tensor(gold, dtype=torch.long)
    top = (scores >= scores.max(-1, keepdim=True).values - atol)
    k = top.sum(-1)
    credit = top.gather(-1, gold.unsqueeze(-1)).squeeze(-1).double() / k
    return credit, k > 1


def accuracies(lls, choices, gold) -> tuple[float, float]:
    """(acc, acc_norm) of per-item option log-likelihoods ``lls`` (N lists), choice strings and gold
    indices; ``acc_norm`` divides by each choice's character length."""
    lengths = [[float(len(c)) for c in cs] for cs in choices]
    a, b = correct_per_item(torch.tensor(lls, dtype=torch.float64), torch.tensor(lengths), torch.as_tensor(gold))
    return float(a.double().mean()), float(b.double().mean())


# ----- reading results --------------------------------------------------------------------------------------
def item_diff(a, b) -> dict[str, int]:
    """How two runs' per-item correctness (bool tensors, same items) differ, item by item."""
    a, b = torch.as_tensor(a).bool(), torch.as_tensor(b).bool()
    return {"both right": int((a & b).sum()), "only A right": int((a & ~b).sum()),
            "only B right": int((~a & b).sum()), "both wrong": int((~a & ~b).sum())}


def bootstrap_ci(correct, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): a percentile bootstrap interval of the mean of per-item scores."""
    x = torch.as_tensor(correct, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, len(x), (n_boot, len(x)), generator=g)
    means = x[idx].mean(1)
    lo, hi = torch.quantile(means, torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64))
    return float(x.mean()), float(lo), float(hi)


def paired_bootstrap(a, b, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """(mean of b - a, low, high): items are resampled *together* for both runs, so what the two runs
    share (the same easy and hard items) cancels."""
    return bootstrap_ci(torch.as_tensor(b, dtype=torch.float64) - torch.as_tensor(a, dtype=torch.float64),
                        n_boot, seed, level)


def unpaired_bootstrap(a, b, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """(mean of b - a, low, high) resampling the two runs *independently*, as if they had scored
    different items: wider than the paired interval when the runs agree on most items."""
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    ia = torch.randint(0, len(a), (n_boot, len(a)), generator=g)
    ib = torch.randint(0, len(b), (n_boot, len(b)), generator=g)
    d = b[ib].mean(1) - a[ia].mean(1)
    lo, hi = torch.quantile(d, torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64))
    return float(b.mean() - a.mean()), float(lo), float(hi)


def significantly_better(a, b, n_boot: int = 2000, seed: int = 0) -> bool:
    """Is run B better than run A on the same items? True only if the paired 95% interval of
    mean(b - a) lies above zero."""
    _, lo, _ = paired_bootstrap(a, b, n_boot, seed)
    return lo > 0


def ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    """The set of word ``n``-grams of ``text`` (words split on whitespace; lines are not crossed)."""
    out = set()
    for line in text.split("\n"):
        w = line.split()
        out.update(tuple(w[i:i + n]) for i in range(len(w) - n + 1))
    return out


def ngram_overlap(item_text: str, train_grams: set, n: int) -> float:
    """The share of ``item_text``'s word n-grams that occur in the training text's set."""
    grams = ngrams(item_text, n)
    return len(grams & train_grams) / len(grams) if grams else 0.0


def contamination(item_texts: list[str], train_text: str, n: int, threshold: float = 1.0) -> tuple[float, list[float]]:
    """(share of items flagged, per-item overlap): an item is flagged when at least ``threshold`` of
    its word ``n``-grams occur in ``train_text`` (1.0, the default: every one of its n-grams occurs
    somewhere in ``train_text``, not necessarily together, so this is weaker than finding the item
    verbatim; a tiny positive threshold flags any collision, the GPT-3-style rule). The answer
    depends on ``n``, on the rule and on how repetitive the source is: state them, and compare with
    fresh items of the same source."""
    train_grams = ngrams(train_text, n)
    per_item = [ngram_overlap(t, train_grams, n) for t in item_texts]
    return sum(o >= threshold for o in per_item) / max(1, len(per_item)), per_item


def item_text(item: Item) -> str:
    """An item as the text that would leak: the question and its gold continuation."""
    return render(item.question) + " " + item.choices[item.gold]


def with_leaked_items(text: str, task: Task, share: float, seed: int = 0) -> str:
    """``text`` with ``share`` of the task's items (question and gold answer) added as lines, the way
    a test set leaks into a crawl."""
    rng = random.Random(seed)
    k = round(share * len(task.items))
    leaked = [item_text(task.items[i]) for i in sorted(rng.sample(range(len(task.items)), k))]
    return text + "\n".join(leaked) + ("\n" if leaked else "")


def judge_cases(salt: str = "") -> tuple[dict, dict]:
    """Seeded pairs ``(a, b)`` of per-item correctness on the same items, for grading a judge of
    "B is better than A": ``(noise, real)``. Every noise pair is within one standard error of no
    difference (or B is worse); every real pair is at least 2.5 paired standard errors above it.
    Some real pairs are consistent small gains that an *unpaired* comparison cannot see, some noise
    pairs are large gains on few items that a threshold on the difference mistakes for real."""
    rng = random.Random(f"judge|{salt}")

    def base(n, p_lo=0.3, p_hi=0.95):
        p = [rng.uniform(p_lo, p_hi) for _ in range(n)]
        return p, [rng.random() < q for q in p]

    def flips(a, up, down):
        b = list(a)
        wrong = [i for i, x in enumerate(a) if not x]
        right = [i for i, x in enumerate(a) if x]
        for i in rng.sample(wrong, up):
            b[i] = True
        for i in rng.sample(right, down):
            b[i] = False
        return b

    def rerun(n, lo, hi):
        p, a = base(n)
        while True:
            b = [rng.random() < q for q in p]
            if lo < (sum(b) - sum(a)) / n <= hi:
                return a, b

    as_t = lambda a, b, dtype: (torch.tensor(a, dtype=dtype), torch.tensor(b, dtype=dtype))
    noise = {
        "a rerun of the same model, 200 items": as_t(*rerun(200, 0.0, 0.03), torch.bool),
        "a rerun of the same model, 40 items": as_t(*rerun(40, 0.06, 0.1), torch.float32),
        "12 items better, 9 worse, of 200": as_t(*(lambda a: (a, flips(a, 12, 9)))(base(200)[1]), torch.bool),
        "B clearly worse": as_t(*(lambda a: (a, flips(a, 0, 25)))(base(200)[1]), torch.float64),
    }
    real = {
        "8 items better, none worse, of 300": as_t(*(lambda a: (a, flips(a, 8, 0)))(base(300)[1]), torch.bool),
        "30 items better, 6 worse, of 200": as_t(*(lambda a: (a, flips(a, 30, 6)))(base(200)[1]), torch.float32),
        "a much better model, 200 items": as_t(*(lambda p: ([rng.random() < 0.5 for _ in p], [rng.random() < 0.85 for _ in p]))(range(200)), torch.bool),
    }
    return noise, real


# ----- a reference check of every stage (switched off while graded) ------------------------------------
def problems(pipe, model, task: Task, num_fewshot: int = 3) -> list[str]:
    """What is wrong with ``pipe``'s harness parts, each stage tested on its own behaviour against
    its specification (the module docstring)."""
    found = []
    item = task.items[0]
    if pipe.eval_continuation(item.choices[0], task.target_delimiter) != task.target_delimiter + item.choices[0]:
        found.append("the continuation is not target_delimiter + choice")
    if len(pipe.eval_fewshot(len(task.fewshot_pool), 0, num_fewshot, 0)) != num_fewshot:
        found.append("the few-shot count is not honoured")
    if pipe.eval_template(item.question) != render(item.question):
        found.append("the template differs from the training text")
    question = encode(render(item.question))
    long_ctx = encode(render(task.fewshot_pool[0].question)) * 8 + [NEWLINE] + question
    cont = encode(" " + item.choices[0])
    kept = list(pipe.eval_truncate(long_ctx, cont, model.cfg.n_ctx))
    if kept != long_ctx[len(long_ctx) - len(kept):] or len(kept) + len(cont) - 1 != model.cfg.n_ctx:
        found.append("truncation does not keep the end of the context")
    if abs(pipe.eval_score(model, [question], [cont])[0] - score_continuations(model, [question], [cont])[0]) > 1e-6:
        found.append("the score is not the continuation's log-probability")
    choices = [c for it in task.items[:4] for c in it.choices]
    if any(pipe.eval_norm_length(c, question, encode(" " + c)) != len(c) for c in choices):
        found.append("acc_norm divides by another length")
    return found


# ----- the notebook's explorer -------------------------------------------------------------------------------
def fewshot_explorer(by_k: dict, n_ctx: int, cut: dict | None = None):
    """A widget: a slider over num_fewshot (the keys of ``by_k``, each a ``Result`` precomputed on one
    item set), showing acc and acc_norm and what the model reads of the first item after truncation;
    ``cut`` (same keys) adds the same for a second harness. Returns a ``VBox`` with ``.slider``,
    ``.summary`` and ``.output`` attributes."""
    import ipywidgets as widgets

    keys = list(by_k)
    slider = widgets.SelectionSlider(options=keys, value=keys[0], description="num_fewshot",
                                     continuous_update=False)
    summary = widgets.HTML()
    output = widgets.Output()

    def update(change=None) -> None:
        k = slider.value
        r = by_k[k]
        line = f"num_fewshot <b>{k}</b>: healthy harness acc <b>{r.acc:.3f}</b>, acc_norm {r.acc_norm:.3f}"
        if cut is not None:
            line += f"; keeping the start: acc <b>{cut[k].acc:.3f}</b>"
        summary.value = line + f" ({len(r.gold)} items)"
        output.clear_output(wait=True)
        with output:
            print(f"what the model reads before the last option of item 0 ({n_ctx}-token window):")
            print("  healthy (left truncation):", repr(r.contexts[0]))
            if cut is not None:
                print("  keeping the start:        ", repr(cut[k].contexts[0]))

    slider.observe(update, names="value")
    update()
    box = widgets.VBox([slider, summary, output])
    box.slider, box.summary, box.output = slider, summary, output
    def every_k() -> str:  # without a live frontend: every setting, with what the model reads
        lines = []
        for k in keys:
            r = by_k[k]
            lines.append(f"num_fewshot {k}: healthy harness acc {r.acc:.3f}, acc_norm {r.acc_norm:.3f}"
                         + (f"; keeping the start: acc {cut[k].acc:.3f}" if cut is not None else ""))
            lines.append(f"  item 0 as the model reads it ({n_ctx}-token window): {r.contexts[0]!r}")
            if cut is not None:
                lines.append(f"  keeping the start: {cut[k].contexts[0]!r}")
        return "\n".join(lines)

    return with_text(box, every_k)
