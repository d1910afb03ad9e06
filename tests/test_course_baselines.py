"""Specifications of ``course.toolkit.baselines``: ln(V) and the entropy of the targets a loss actually scores."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

from course import IGNORE
from course.toolkit.baselines import loss_at_init, uniform_loss, unigram_entropy
from course.reference.model import ModelConfig, TinyGPT


def _counter_entropy(values: list[int]) -> float:
    """Entropy of the empirical distribution by counting in plain Python."""
    n = len(values)
    return -sum(c / n * math.log(c / n) for c in Counter(values).values())


def _targets(seed: int = 0, shape=(6, 9), vocab: int = 7, ignored: float = 0.3) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, vocab, shape, generator=g)
    t[torch.rand(shape, generator=g) < ignored] = IGNORE
    return t


@pytest.mark.parametrize("V", [2, 18, 1000])
def test_uniform_loss_is_the_cross_entropy_of_a_uniform_guess(V):
    targets = torch.arange(20) % V
    by_loss = F.cross_entropy(torch.zeros(20, V), targets).item()  # equal logits = uniform probabilities
    assert uniform_loss(V) == pytest.approx(by_loss, rel=1e-6), f"uniform_loss({V}) = {uniform_loss(V)}, cross-entropy of a uniform guess {by_loss}"
    assert uniform_loss(V) == pytest.approx(math.log(V), rel=1e-15)


def test_unigram_entropy_is_the_entropy_of_the_scored_targets():
    t = _targets()
    expected = _counter_entropy([v for v in t.flatten().tolist() if v != IGNORE])
    assert unigram_entropy(t) == pytest.approx(expected, abs=1e-12), "unigram_entropy differs from counting the scored targets"
    # negative control: the same comparison rejects an entropy that counts IGNORE as a class
    assert unigram_entropy(t) != pytest.approx(_counter_entropy(t.flatten().tolist()), abs=1e-12)
    # ignore_index is honoured: with a different sentinel, IGNORE-free targets give the same entropy
    sentinel = torch.where(t == IGNORE, torch.full_like(t, 99), t)
    assert unigram_entropy(sentinel, ignore_index=99) == unigram_entropy(t)


def test_ignored_entries_do_not_change_the_unigram_entropy_at_all():
    t = _targets()
    padded = torch.cat([t, torch.full((3, t.shape[1]), IGNORE)])
    assert unigram_entropy(padded) == unigram_entropy(t), "adding IGNORE rows changed unigram_entropy"
    # negative control: adding real tokens does change it
    assert unigram_entropy(torch.cat([t, torch.zeros(3, t.shape[1], dtype=torch.long)])) != unigram_entropy(t)


def test_unigram_entropy_is_nan_when_nothing_is_scored():
    assert math.isnan(unigram_entropy(torch.full((4, 5), IGNORE))), "all-ignored targets must give NaN, not 0"
    assert math.isnan(unigram_entropy(torch.empty(0, dtype=torch.long)))
    assert unigram_entropy(torch.tensor([3, 3, 3])) == 0.0, "a single scored class has entropy exactly 0"


def test_unigram_entropy_is_invariant_under_relabelling_tokens():
    t = _targets(vocab=7)
    perm = torch.randperm(7, generator=torch.Generator().manual_seed(1)) + 100  # also moves the ids far away
    relabelled = torch.where(t == IGNORE, t, perm[t.clamp_min(0)])
    assert unigram_entropy(relabelled) == pytest.approx(unigram_entropy(t), abs=1e-12), "relabelling the tokens changed the entropy"
    # negative control: merging two labels (not a permutation) lowers it
    merged = torch.where(t == 1, torch.zeros_like(t), t)
    assert unigram_entropy(merged) < unigram_entropy(t) - 1e-6


def test_loss_at_init_is_the_eval_mode_cross_entropy_and_restores_the_mode():
    torch.manual_seed(0)
    model = TinyGPT(ModelConfig(vocab_size=7, n_ctx=9, d_model=16, n_head=2, n_layer=1, d_mlp=32, dropout=0.5))
    g = torch.Generator().manual_seed(0)
    inputs, targets = torch.randint(0, 7, (6, 9), generator=g), _targets()
    model.train()
    got = loss_at_init(model, inputs, targets)
    assert model.training, "loss_at_init left the model in eval mode"
    model.eval()
    with torch.no_grad():
        expected = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten(), ignore_index=IGNORE).item()
    assert got == pytest.approx(expected, rel=1e-6), f"loss_at_init = {got}, eval-mode cross-entropy {expected}"


# ----- the exact chain's loss and the held-out symptom ---------------------------------------------
def test_chain_loss_is_the_chains_own_cross_entropy():
    from course import MarkovLanguage
    from course.toolkit.baselines import chain_loss
    lang = MarkovLanguage(6, seed=3)
    w = lang.sample(5, 7, 0)
    S = lang.n_symbols
    by_hand = []
    for row in w.tolist():
        a, b = row[0], row[1]
        by_hand.append(-math.log(lang.pair_stationary[a * S + b].item() / lang.stationary[a].item()))
        for t in range(2, len(row)):
            by_hand.append(-math.log(lang.transition[row[t - 2] * S + row[t - 1], row[t]].item()))
    assert chain_loss(lang, w) == pytest.approx(sum(by_hand) / len(by_hand), rel=1e-12)
    # on many windows it averages to the window floor (the expectation it estimates)
    assert chain_loss(lang, lang.sample(20_000, 9, 1)) == pytest.approx(lang.loss_floor(8), abs=0.02)
    with pytest.raises(ValueError):
        chain_loss(lang, torch.full((2, 5), lang.PAD))


def test_held_out_symptom_reads_a_finished_run_against_the_floors():
    from types import SimpleNamespace
    from course import Pipeline
    from course.reference.diagnose import BELOW_CHAIN_MARGIN, held_out_symptom
    from course.toolkit.baselines import chain_loss
    pipe = Pipeline(n_symbols=6, seq_len=8, n_val=32)
    lang = pipe.language()
    exact = chain_loss(lang, pipe.windows("val"))
    floor = lang.loss_floor(pipe.seq_len)

    def run(v):
        return SimpleNamespace(final_val_loss=v)
    assert held_out_symptom(pipe, run=run(max(exact, floor) + 0.01)) is None
    assert "below the exact chain" in held_out_symptom(pipe, run=run(exact - 2 * BELOW_CHAIN_MARGIN))
    assert "stalls" in held_out_symptom(pipe, run=run(lang.bigram_entropy))
    assert "nan" in held_out_symptom(pipe, run=run(float("nan")))


def test_held_out_symptom_reads_a_nearly_deterministic_language_against_the_unigram_entropy():
    """Where seeing one token back is nearly enough (bigram entropy within MIN_GAP of the floor),
    a loss between floor and bigram cannot show unused context: only "does not learn" is reported."""
    from types import SimpleNamespace
    from course import Pipeline
    from course.reference.diagnose import MIN_GAP, held_out_symptom
    from course.toolkit.baselines import chain_loss
    real = Pipeline(n_symbols=6, seq_len=8, n_val=32)
    lang = real.language()
    floor = lang.loss_floor(real.seq_len)

    class NearlyDeterministic:
        def __getattr__(self, name):
            return getattr(lang, name)
        bigram_entropy = floor + MIN_GAP / 2
        unigram_entropy = floor + 1.0

    pipe = SimpleNamespace(language=NearlyDeterministic, windows=real.windows, seq_len=real.seq_len)
    above_both = max(floor, chain_loss(lang, real.windows("val"))) + MIN_GAP
    assert held_out_symptom(pipe, run=SimpleNamespace(final_val_loss=above_both)) is None
    assert "unigram" in held_out_symptom(pipe, run=SimpleNamespace(final_val_loss=floor + 0.9))
