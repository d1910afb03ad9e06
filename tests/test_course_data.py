"""Specifications of ``course.reference.data``: the Markov language, its exact baselines, and the collators.

Expected values are derived here by a different route than the code under test (the chain rule
instead of conditional tables, counts from samples instead of linear algebra, the true model's own
log-loss instead of the closed formula), and every check is also run on a broken variant that it must
reject, so a check that cannot fail shows up as a failing negative control.
"""

from __future__ import annotations

import math

import pytest
import torch

from course.toolkit.batch import IGNORE, next_token_batch, pad_sequences, prompt_answer_batch
from course.reference.data import MarkovLanguage, pydoc_text, variable_length_windows
from course.toolkit.baselines import entropy

LANG = MarkovLanguage()  # the default language every pipeline uses
S = LANG.n_symbols


# ----- helpers: independent computations --------------------------------------------------------
def _h(p: torch.Tensor) -> float:
    """Entropy in nats of a (flattened) distribution, by a plain Python sum (not ``course.toolkit.baselines.entropy``)."""
    return -sum(x * math.log(x) for x in p.double().flatten().tolist() if x > 0)


def _triple_distribution(lang: MarkovLanguage) -> torch.Tensor:
    """P(x0, x1, x2) under stationarity, shape (S, S, S)."""
    n = lang.n_symbols
    return lang.pair_stationary.view(n, n, 1) * lang.transition.view(n, n, n)


def _stationarity_error(pair: torch.Tensor, transition: torch.Tensor) -> float:
    """max |pi' - pi| where pi'(b, c) = sum_a pi(a, b) T(c | a, b): one step of the pair chain."""
    n = int(round(math.sqrt(pair.numel())))
    nxt = torch.einsum("ab,abc->bc", pair.view(n, n), transition.view(n, n, n))
    return (nxt - pair.view(n, n)).abs().max().item()


def _plugin_entropy(tokens: torch.Tensor, n_values: int) -> float:
    counts = torch.bincount(tokens.flatten(), minlength=n_values).double()
    return _h(counts / counts.sum())


def _plugin_conditional_entropy(context: torch.Tensor, nxt: torch.Tensor, n_context: int, n_values: int) -> float:
    """H(next | context) of the empirical joint distribution, from counts: H(context, next) - H(context)."""
    joint = torch.bincount(context * n_values + nxt, minlength=n_context * n_values).double()
    joint = joint / joint.sum()
    return _h(joint) - _h(joint.view(n_context, n_values).sum(1))


def _global_rng_untouched(fn) -> bool:
    """Does ``fn()`` leave the global torch RNG where it was? Compare draws after a re-seed."""
    torch.manual_seed(1234)
    expected = torch.rand(8)
    torch.manual_seed(1234)
    fn()
    return torch.equal(torch.rand(8), expected)


# ----- the chain ----------------------------------------------------------------------------------
def test_transition_rows_are_probability_distributions():
    T = LANG.transition
    assert T.shape == (S * S, S), f"transition table has shape {tuple(T.shape)}, expected (S*S, S) = ({S * S}, {S})"
    assert (T >= 0).all(), "transition table has negative entries"
    err = (T.sum(-1) - 1).abs().max().item()
    assert err < 1e-12, f"transition rows sum to 1 only within {err:.2e}: check the row normalisation in MarkovLanguage.__init__"
    # negative control: the same measurement rejects a table that is off by 1e-9
    assert ((T * (1 + 1e-9)).sum(-1) - 1).abs().max().item() > 1e-12


def test_pair_stationary_distribution_is_invariant_under_the_chain():
    pair = LANG.pair_stationary
    assert abs(pair.sum().item() - 1) < 1e-12, f"pair_stationary sums to {pair.sum().item()!r}, not 1"
    assert (pair >= 0).all(), "pair_stationary has negative entries"
    err = _stationarity_error(pair, LANG.transition)
    assert err < 1e-12, f"pi M differs from pi by {err:.2e}: check _pair_stationary (power iteration / pair chain)"
    # negative control: the uniform pair distribution is not stationary for this chain
    uniform = torch.full_like(pair, 1.0 / pair.numel())
    assert _stationarity_error(uniform, LANG.transition) > 1e-3


def test_token_marginal_is_the_same_at_both_positions_of_a_pair():
    joint = LANG.pair_stationary.view(S, S)
    first, second = joint.sum(1), joint.sum(0)
    assert torch.allclose(LANG.stationary, second, rtol=0, atol=1e-15), "stationary is not the marginal of pair_stationary"
    err = (first - second).abs().max().item()
    assert err < 1e-12, f"P(x_t) differs between the two positions of a stationary pair by {err:.2e}"


def test_specials_and_vocabulary_size():
    assert (LANG.PAD, LANG.EOS, LANG.vocab_size) == (S, S + 1, S + 2), (
        "PAD and EOS must be the two ids right after the n_symbols ordinary tokens"
    )


# ----- exact baselines ------------------------------------------------------------------------------
def test_exact_entropies_agree_with_the_chain_rule():
    """Each baseline recomputed by a different formula: H(X|Y) = H(X, Y) - H(Y)."""
    tri = _triple_distribution(LANG)
    pair = LANG.pair_stationary.view(S, S)
    expected = {
        "unigram_entropy": _h(tri.sum((0, 1))),
        "bigram_entropy": _h(tri.sum(0)) - _h(tri.sum((0, 2))),  # H(x1, x2) - H(x1)
        "entropy_rate": _h(tri) - _h(pair),  # H(x0, x1, x2) - H(x0, x1)
    }
    for name, value in expected.items():
        got = getattr(LANG, name)
        assert got == pytest.approx(value, abs=1e-10), f"MarkovLanguage.{name} = {got!r}, chain rule gives {value!r}"
    assert LANG.uniform_loss == pytest.approx(math.log(LANG.vocab_size), abs=0), "uniform_loss must be ln(vocab_size)"


def test_entropy_helper_treats_zero_probability_as_zero_contribution():
    p = torch.tensor([0.5, 0.5, 0.0])
    assert entropy(p).item() == pytest.approx(math.log(2), abs=1e-15), "entropy() must use 0 log 0 = 0"
    assert not math.isnan(entropy(torch.tensor([1.0, 0.0])).item()), "entropy() returns NaN on a zero probability"


def test_baselines_are_ordered_and_context_matters():
    """ln(V) > H(pi) >= H(X_t | X_t-1) >= entropy rate, with more than one nat between no context and full context."""
    L = LANG
    assert L.uniform_loss > L.unigram_entropy >= L.bigram_entropy >= L.entropy_rate > 0, (
        f"baselines out of order: ln V={L.uniform_loss:.4f}, unigram={L.unigram_entropy:.4f}, "
        f"bigram={L.bigram_entropy:.4f}, rate={L.entropy_rate:.4f}"
    )
    gap = L.unigram_entropy - L.entropy_rate
    assert gap > 1.0, (
        f"unigram - entropy rate = {gap:.3f} nats: the default language must make context matter by > 1 nat "
        "(check MarkovLanguage's default concentration)"
    )
    # negative control: the gap criterion rejects a language whose rows are nearly uniform
    flat = MarkovLanguage(S, seed=0, concentration=100.0)
    assert flat.unigram_entropy - flat.entropy_rate < 1.0


def test_loss_floor_is_bigram_then_entropy_rate():
    for T in (1, 2, 16, 32):
        expected = (LANG.bigram_entropy + (T - 1) * LANG.entropy_rate) / T
        assert LANG.loss_floor(T) == pytest.approx(expected, rel=1e-14), f"loss_floor({T}) is not (bigram + (T-1) rate) / T"
    assert LANG.baselines(32)["window floor"] == LANG.loss_floor(32)
    assert LANG.baselines(32)["uniform ln(V)"] == LANG.uniform_loss
    assert LANG.baselines(32)["unigram H(pi)"] == LANG.unigram_entropy


def test_loss_floor_is_the_log_loss_of_the_true_model_on_sampled_windows():
    """The perfect model (the chain itself) scores loss_floor(T) on sample(n, T+1) windows, up to sampling error.

    Windows are independent, so the standard error is the spread of per-window means over sqrt(n);
    4 standard errors is the tolerance.
    """
    T, n = 16, 4000
    w = LANG.sample(n, T + 1, seed=7)
    marginal = LANG.stationary
    pair = LANG.pair_stationary.view(S, S)
    first = (pair[w[:, 0], w[:, 1]] / marginal[w[:, 0]]).log()  # P(x1 | x0): only one token of context
    later = LANG.transition[w[:, :-2] * S + w[:, 1:-1], w[:, 2:]].log()  # T(x_t | x_t-2, x_t-1)
    per_window = -(torch.cat([first.unsqueeze(1), later], 1)).mean(1)
    mean, se = per_window.mean().item(), per_window.std().item() / math.sqrt(n)
    floor = LANG.loss_floor(T)
    assert abs(mean - floor) < 4 * se, f"true-model loss {mean:.4f} +- {se:.4f}, loss_floor({T}) = {floor:.4f}"
    # negative control: the same tolerance tells the floor apart from the bare entropy rate
    assert abs(mean - LANG.entropy_rate) > 4 * se


# ----- sampling ---------------------------------------------------------------------------------------
def test_sampled_unigram_entropy_matches_the_exact_value():
    """Plug-in entropy of 20k independent tokens vs H(pi).

    Tolerance: 4 standard errors of the plug-in estimator (delta method: Var[-ln pi(X)] / N, computed
    from the exact pi) plus its first-order downward bias (K - 1) / 2N.
    """
    N = 20_000
    x = LANG.sample(N, 3, seed=0)[:, 2]  # one token per sequence: independent draws from pi
    pi = LANG.stationary
    logp = torch.where(pi > 0, pi.log(), torch.zeros_like(pi))
    var = ((pi * logp**2).sum() - (pi * logp).sum() ** 2).item()
    tol = 4 * math.sqrt(var / N) + (S - 1) / (2 * N)
    est = _plugin_entropy(x, S)
    assert abs(est - LANG.unigram_entropy) < tol, (
        f"sampled unigram entropy {est:.4f} vs exact {LANG.unigram_entropy:.4f} (tol {tol:.4f}): "
        "check that sample() starts from the stationary distribution"
    )
    # negative control: uniform tokens (a sampler that ignores pi) fail the same tolerance
    uniform = torch.randint(0, S, (N,), generator=torch.Generator().manual_seed(0))
    assert abs(_plugin_entropy(uniform, S) - LANG.unigram_entropy) > tol


def test_sampled_conditional_entropies_match_bigram_entropy_and_entropy_rate():
    """Plug-in H(x2 | x0, x1) and H(x2 | x1) from 200k independent triples.

    Tolerance: 4 standard errors (Var[-ln p(x2 | ctx)] / N from the exact chain) plus the plug-in bias
    bound sum over contexts of (K - 1) / 2N = n_contexts (S - 1) / 2N.
    """
    N = 200_000
    x = LANG.sample(N, 3, seed=1)
    tri = _triple_distribution(LANG).flatten()
    cond = LANG.transition.flatten()
    lc = torch.where(cond > 0, cond.log(), torch.zeros_like(cond))
    var = ((tri * lc**2).sum() - (tri * lc).sum() ** 2).item()
    tol_rate = 4 * math.sqrt(var / N) + S * S * (S - 1) / (2 * N)
    est_rate = _plugin_conditional_entropy(x[:, 0] * S + x[:, 1], x[:, 2], S * S, S)
    assert abs(est_rate - LANG.entropy_rate) < tol_rate, (
        f"empirical H(x_t | x_t-2, x_t-1) = {est_rate:.4f}, entropy_rate = {LANG.entropy_rate:.4f} (tol {tol_rate:.4f}): "
        "check sample()'s use of the transition table"
    )
    # the bigram entropy the same way, from the same triples
    bc = _triple_distribution(LANG).sum(0)
    cb = bc / bc.sum(1, keepdim=True)
    lb = torch.where(cb > 0, cb.log(), torch.zeros_like(cb))
    var_b = ((bc * lb**2).sum() - (bc * lb).sum() ** 2).item()
    tol_bigram = 4 * math.sqrt(var_b / N) + S * (S - 1) / (2 * N)
    est_bigram = _plugin_conditional_entropy(x[:, 1], x[:, 2], S, S)
    assert abs(est_bigram - LANG.bigram_entropy) < tol_bigram, (
        f"empirical H(x_t | x_t-1) = {est_bigram:.4f}, bigram_entropy = {LANG.bigram_entropy:.4f} (tol {tol_bigram:.4f})"
    )
    # negative control: the next token paired with another sequence's context carries no information
    shuffled = x[torch.randperm(N, generator=torch.Generator().manual_seed(2)), 2]
    est_wrong = _plugin_conditional_entropy(x[:, 0] * S + x[:, 1], shuffled, S * S, S)
    assert abs(est_wrong - LANG.entropy_rate) > tol_rate


def test_sample_shape_dtype_and_range():
    x = LANG.sample(5, 7, seed=0)
    assert x.shape == (5, 7) and x.dtype == torch.long, f"sample(5, 7) gave {tuple(x.shape)} {x.dtype}"
    assert int(x.min()) >= 0 and int(x.max()) < S, "sample() must emit ordinary tokens only (no PAD/EOS)"
    assert LANG.sample(4, 1, seed=0).shape == (4, 1)


def test_sampling_is_deterministic_in_the_seed():
    a, b = LANG.sample(64, 20, seed=3), LANG.sample(64, 20, seed=3)
    assert torch.equal(a, b), "sample() with the same seed gave different tokens"
    assert torch.equal(a, LANG.sample(64, 20, torch.Generator().manual_seed(3))), (
        "an int seed and a Generator seeded with it must give the same tokens"
    )
    assert not torch.equal(a, LANG.sample(64, 20, seed=4)), "sample() ignores its seed"


def test_language_is_deterministic_in_its_seed():
    assert torch.equal(MarkovLanguage(8, seed=5).transition, MarkovLanguage(8, seed=5).transition)
    assert not torch.equal(MarkovLanguage(8, seed=5).transition, MarkovLanguage(8, seed=6).transition), (
        "MarkovLanguage ignores its seed"
    )


def test_sampling_and_construction_leave_the_global_rng_alone():
    assert _global_rng_untouched(lambda: LANG.sample(32, 10, seed=0)), "sample() advanced the global torch RNG"
    assert _global_rng_untouched(lambda: MarkovLanguage(8, seed=3)), "MarkovLanguage() advanced the global torch RNG"
    # negative control: the comparison notices a single global draw
    assert not _global_rng_untouched(lambda: torch.rand(1))


# ----- batches ----------------------------------------------------------------------------------------
PAD, EOS = LANG.PAD, LANG.EOS


def _next_token_violations(collate, windows: torch.Tensor, pad_id: int) -> list[str]:
    """What is wrong with ``collate(windows, pad_id)`` as a next-token batch, checked element by element."""
    b = collate(windows, pad_id)
    found = []
    if not torch.equal(b.inputs, windows[:, :-1]):
        found.append("inputs are not windows[:, :-1]")
    if b.targets.shape != b.inputs.shape:
        return found + ["targets and inputs differ in shape"]
    for i in range(windows.shape[0]):
        for t in range(windows.shape[1] - 1):
            want = IGNORE if windows[i, t + 1] == pad_id else int(windows[i, t + 1])
            if int(b.targets[i, t]) != want:
                found.append(f"target[{i}, {t}] = {int(b.targets[i, t])}, expected {want}")
    return found


def test_next_token_batch_shifts_by_one_and_ignores_padding_targets():
    from course.bugs.basic import _padding_scored, _shifted_by_two, _unshifted

    windows = pad_sequences([torch.tensor([3, 1, 4, 1, 5]), torch.tensor([9, 2, 6]), torch.tensor([5])], PAD)
    problems = _next_token_violations(next_token_batch, windows, PAD)
    assert problems == [], f"next_token_batch broke the shift/mask contract: {problems}"
    b = next_token_batch(windows, PAD)
    assert b.pad_id == PAD and torch.equal(b.scored, b.targets != IGNORE)
    assert int(b.scored.sum()) == 4 + 2 + 0, "one scored target per real token after the first of each row"
    # negative controls: the same element-wise check rejects the broken collators of the bug catalogue
    for broken in (_padding_scored, _shifted_by_two, _unshifted):
        assert _next_token_violations(broken, windows, PAD), f"the check passed the broken collator {broken.__name__}"


def test_next_token_batch_does_not_write_into_the_windows():
    windows = pad_sequences([torch.tensor([1, 2]), torch.tensor([3, 4, 5])], PAD)
    before = windows.clone()
    next_token_batch(windows, PAD).targets.fill_(0)
    assert torch.equal(windows, before), "next_token_batch returned views: editing the batch changed the windows"


def test_pad_sequences_right_pads_and_appends_eos():
    seqs = [torch.tensor([1, 2, 3]), torch.tensor([4])]
    expected = torch.tensor([[1, 2, 3, EOS], [4, EOS, PAD, PAD]])
    got = pad_sequences(seqs, PAD, EOS)
    assert torch.equal(got, expected), f"pad_sequences with eos gave\n{got}\nexpected\n{expected}"
    assert got.dtype == torch.long
    assert torch.equal(pad_sequences(seqs, PAD), torch.tensor([[1, 2, 3], [4, PAD, PAD]])), "pad_sequences without eos"


def test_variable_length_windows_lengths_lie_in_range_and_padding_is_a_suffix():
    w = variable_length_windows(LANG, 200, max_len=12, min_len=4, seed=0)
    assert w.shape == (200, 12)
    real = w != PAD
    lengths = real.sum(1)
    assert int(lengths.min()) >= 4 and int(lengths.max()) <= 12, f"lengths span [{int(lengths.min())}, {int(lengths.max())}]"
    assert len(set(lengths.tolist())) > 1, "all windows have one length: nothing is padded"
    suffix = torch.arange(12).unsqueeze(0) < lengths.unsqueeze(1)
    assert torch.equal(real, suffix), "padding must be a right suffix of each window"


def _scored_answers(batch, prompts, answers) -> list[str]:
    """Each row must score exactly its answer tokens then EOS, starting where the answer starts."""
    found = []
    for i, (p, a) in enumerate(zip(prompts, answers)):
        pos = batch.scored[i].nonzero().flatten().tolist()
        want_pos = list(range(max(len(p) - 1, 0), len(p) + len(a)))
        want_tok = (a.tolist() + [EOS])[len(a) + 1 - len(want_pos):]
        if pos != want_pos:
            found.append(f"row {i}: scored positions {pos}, expected {want_pos}")
        elif batch.targets[i, pos].tolist() != want_tok:
            found.append(f"row {i}: scored targets {batch.targets[i, pos].tolist()}, expected {want_tok}")
    return found


def test_prompt_answer_batch_scores_exactly_the_answer_and_eos():
    prompts = [torch.tensor([1, 2, 3]), torch.tensor([4]), torch.tensor([5, 6])]
    answers = [torch.tensor([7, 8]), torch.tensor([9, 10, 11, 12]), torch.tensor([13])]
    b = prompt_answer_batch(prompts, answers, PAD, EOS)
    problems = _scored_answers(b, prompts, answers)
    assert problems == [], f"prompt_answer_batch scores the wrong targets: {problems}"
    assert int(b.scored.sum()) == sum(len(a) + 1 for a in answers), "scored count must be answer tokens + one EOS per row"
    assert not (b.targets == PAD).any(), "padding is a scored target"
    # negative control: plain next-token collation of the same text also scores the prompt
    windows = pad_sequences([torch.cat([p, a]) for p, a in zip(prompts, answers)], PAD, EOS)
    assert _scored_answers(next_token_batch(windows, PAD), prompts, answers)


def test_prompt_answer_batch_with_an_empty_prompt_scores_the_answer():
    """An empty prompt leaves nothing to mask: every answer token after the first, and EOS, is scored."""
    prompts = [torch.tensor([], dtype=torch.long), torch.tensor([1, 2, 3])]
    answers = [torch.tensor([4, 5, 6]), torch.tensor([7])]
    b = prompt_answer_batch(prompts, answers, PAD, EOS)
    assert b.targets[0][b.scored[0]].tolist() == [5, 6, EOS], (
        f"empty prompt: scored targets {b.targets[0][b.scored[0]].tolist()}, expected [5, 6, EOS]; "
        "check the prompt mask slice in prompt_answer_batch for len(prompt) == 0"
    )
    assert b.targets[1][b.scored[1]].tolist() == [7, EOS]


def test_pydoc_text_is_english_text_from_the_standard_library():
    text = pydoc_text()
    from pydoc_data.topics import topics

    assert len(text) > 10_000, f"pydoc_text() has only {len(text)} characters"
    assert topics[sorted(topics)[0]] in text, "pydoc_text() is not the pydoc_data help topics"
    words = text.lower().split()
    for w in ("the", "of", "is", "and"):
        assert words.count(w) > 100, f"the word {w!r} appears {words.count(w)} times: not English prose"
    assert sum(c.isascii() for c in text) / len(text) > 0.99
    short = pydoc_text(100)
    assert len(short) == 100 and text.startswith(short), "pydoc_text(max_chars) must be the first max_chars characters"


def test_floor_for_weights_bigram_and_rate_by_the_scored_columns():
    T = 16
    full = next_token_batch(LANG.sample(8, T + 1, seed=0), PAD).targets
    assert LANG.floor_for(full) == pytest.approx(LANG.loss_floor(T), rel=1e-12), (
        "floor_for on fully scored windows must equal loss_floor(seq_len)"
    )
    no_first = full.clone()
    no_first[:, 0] = IGNORE
    assert LANG.floor_for(no_first) == pytest.approx(LANG.entropy_rate, rel=1e-12), "with column 0 ignored the floor is the entropy rate"
    only_first = torch.full_like(full, IGNORE)
    only_first[:, 0] = full[:, 0]
    assert LANG.floor_for(only_first) == pytest.approx(LANG.bigram_entropy, rel=1e-12), "column 0 alone has the bigram entropy as floor"
    padded = next_token_batch(variable_length_windows(LANG, 50, T + 1, 4, seed=0), PAD).targets
    n0, n = int((padded[:, 0] != IGNORE).sum()), int((padded != IGNORE).sum())
    expected = (n0 * LANG.bigram_entropy + (n - n0) * LANG.entropy_rate) / n
    assert LANG.floor_for(padded) == pytest.approx(expected, rel=1e-12)
    assert LANG.floor_for(padded) != pytest.approx(LANG.loss_floor(T), rel=1e-6), "padding changes the weights"
