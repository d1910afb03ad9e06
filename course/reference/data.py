"""Data with known answers.

``MarkovLanguage`` is a seeded second-order Markov chain: each token depends on the two before it.
Because the chain is known, so is every baseline a loss can be compared with:

* ``ln(V)``: the loss of a uniform guess over the model's whole vocabulary;
* the unigram entropy ``H(pi)``: the best loss of a model that ignores context;
* the bigram entropy ``H(X_t | X_t-1)``: the best loss of a model that sees only the previous token;
* the entropy rate ``H(X_t | X_t-2, X_t-1)``: the best *expected* per-token loss any model can
  reach on a long sequence; ``loss_floor(seq_len)`` is its finite-window version (the first target
  of a window has one token of context), the **window floor** every loss plot carries.

Both are averages. On a small validation set the exact chain itself scores below the window floor
about half the time, so a held-out loss "below the floor" proves nothing by itself: compare it with
the exact chain's loss on the same windows (``course.toolkit.baselines.chain_loss``), or demand a margin of
several standard errors. Well below that, the model saw what it predicts.

The language has ``n_symbols`` ordinary tokens plus two specials, ``PAD`` and ``EOS``, so the model's
vocabulary is ``n_symbols + 2``. Sequences start from the chain's stationary distribution, so every
position has the same marginal ``pi`` and the numbers above are exact (computed in float64 by
linear algebra, not by sampling).

``pydoc_text()`` returns a small real English text that ships with Python (no download).

The batches these windows become (``Batch``, ``next_token_batch``, ``IGNORE``) are the toolkit's:
``course.toolkit.batch``.
"""

from __future__ import annotations

import math

import torch

from ..toolkit.baselines import entropy
from ..toolkit.batch import IGNORE, pad_sequences

class MarkovLanguage:
    """A seeded second-order Markov chain over ``n_symbols`` tokens.

    ``concentration`` is the Dirichlet parameter of each row of the transition table: small values
    make each next token nearly determined by the two before it (a low entropy rate), so a model
    that ignores context is far worse than one that uses it.
    """

    def __init__(self, n_symbols: int = 16, seed: int = 0, concentration: float = 0.1):
        self.n_symbols = n_symbols
        self.seed = seed
        self.PAD = n_symbols
        self.EOS = n_symbols + 1
        self.vocab_size = n_symbols + 2
        with torch.random.fork_rng(devices=[]):  # seeded without touching the caller's RNG
            torch.manual_seed(seed)
            rows = torch.distributions.Dirichlet(torch.full((n_symbols,), float(concentration))).sample((n_symbols**2,))
        self.transition = rows.double() / rows.double().sum(-1, keepdim=True)
        self.pair_stationary = self._pair_stationary()  # (S*S,) over (a, b)
        self.stationary = self.pair_stationary.view(n_symbols, n_symbols).sum(0)

    def _pair_stationary(self) -> torch.Tensor:
        S = self.n_symbols
        # Markov chain on pairs: (a, b) -> (b, c) with probability transition[a*S+b, c].
        M = torch.zeros(S * S, S * S, dtype=torch.float64)
        rows = torch.arange(S * S)
        b = rows % S
        for c in range(S):
            M[rows, b * S + c] = self.transition[:, c]
        # Stationary distribution: left eigenvector for eigenvalue 1, found by power iteration on
        # a lazy chain (always aperiodic) until it stops moving.
        lazy = 0.5 * (M + torch.eye(S * S, dtype=torch.float64))
        p = torch.full((S * S,), 1.0 / (S * S), dtype=torch.float64)
        for _ in range(100_000):
            nxt = p @ lazy
            if torch.max(torch.abs(nxt - p)) < 1e-15:
                break
            p = nxt
        return nxt / nxt.sum()

    # ----- the exact baselines -------------------------------------------------------------
    @property
    def uniform_loss(self) -> float:
        """ln(V) for the model's whole vocabulary (specials included)."""
        return math.log(self.vocab_size)

    @property
    def unigram_entropy(self) -> float:
        """H(pi): the best loss with no context at all."""
        return entropy(self.stationary).item()

    @property
    def bigram_entropy(self) -> float:
        """H(X_t | X_t-1): the best loss with only the previous token as context."""
        S = self.n_symbols
        joint = self.pair_stationary.view(S, S)  # P(a, b), and b is followed by c
        # P(b, c) = sum_a P(a, b) T[a, b, c]
        T = self.transition.view(S, S, S)
        bc = torch.einsum("ab,abc->bc", joint, T)
        cond = bc / bc.sum(-1, keepdim=True)
        return (bc.sum(-1) * entropy(cond)).sum().item()

    @property
    def entropy_rate(self) -> float:
        """H(X_t | X_t-2, X_t-1): the lowest loss any model can reach on this language."""
        return (self.pair_stationary * entropy(self.transition)).sum().item()

    def loss_floor(self, seq_len: int) -> float:
        """The best achievable mean loss over ``seq_len`` next-token targets of one fresh sequence.

        The first target is predicted from one token of context (bigram entropy); every later one
        from at least two (the entropy rate). This is the number a perfect model scores on
        ``sample(n, seq_len + 1)`` windows with every target scored.
        """
        return (self.bigram_entropy + (seq_len - 1) * self.entropy_rate) / seq_len

    def floor_for(self, targets: torch.Tensor) -> float:
        """The best achievable mean loss over exactly the scored targets of a batch of fresh sequences.

        Target column 0 has one token of context (bigram entropy), every later column at least two
        (entropy rate); ``IGNORE`` targets do not count. Valid for batches whose scored targets are
        all language tokens: it says nothing about a loss that scores padding.
        """
        scored = targets != IGNORE
        n_first = int(scored[:, 0].sum())
        n_rest = int(scored[:, 1:].sum())
        return (n_first * self.bigram_entropy + n_rest * self.entropy_rate) / max(1, n_first + n_rest)

    def baselines(self, seq_len: int) -> dict[str, float]:
        """The reference lines every loss plot carries, by name.

        The lowest line is the **window floor** ``loss_floor(seq_len)``, the best mean loss over a
        ``seq_len``-target window (its first target has one token of context), which sits above the
        **entropy rate** (``entropy_rate``, the per-token limit of an infinitely long sequence)."""
        return {
            "uniform ln(V)": self.uniform_loss,
            "unigram H(pi)": self.unigram_entropy,
            "window floor": self.loss_floor(seq_len),
        }

    # ----- sampling ---------------------------------------------------------------------------
    def sample(self, n: int, length: int, seed: int | torch.Generator) -> torch.Tensor:
        """``n`` sequences of ``length`` tokens, shape (n, length), dtype long. Deterministic in seed."""
        g = seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(seed)
        S = self.n_symbols
        out = torch.empty(n, length, dtype=torch.long)
        pair = torch.multinomial(self.pair_stationary.float(), n, replacement=True, generator=g)
        out[:, 0] = pair // S
        if length > 1:
            out[:, 1] = pair % S
        cdf = self.transition.cumsum(-1)
        for t in range(2, length):
            ctx = out[:, t - 2] * S + out[:, t - 1]
            u = torch.rand(n, generator=g, dtype=torch.float64)
            nxt = torch.searchsorted(cdf[ctx], u.unsqueeze(-1)).squeeze(-1)
            out[:, t] = nxt.clamp_max(S - 1)
        return out


# ----- variable-length windows -------------------------------------------------------------------
def variable_length_windows(lang: MarkovLanguage, n: int, max_len: int, min_len: int, seed: int) -> torch.Tensor:
    """``n`` sequences with lengths drawn uniformly from [min_len, max_len], right-padded to max_len."""
    g = torch.Generator().manual_seed(seed)
    full = lang.sample(n, max_len, g)
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=g)
    return pad_sequences([full[i, : lengths[i]] for i in range(n)], lang.PAD)


def pydoc_text(max_chars: int | None = None) -> str:
    """A small English text that ships with Python (the help topics of ``pydoc_data``), sorted by topic."""
    from pydoc_data.topics import topics

    text = "\n".join(topics[k] for k in sorted(topics))
    return text if max_chars is None else text[:max_chars]
