"""course.lessons.harness and the ``evaluation`` bugs: the tokenizer, the task's known answers, every harness
stage against its specification, and each bug seen by the check that must see it, with the healthy
harness as the negative control. One small model is trained once per module (about a second)."""

from __future__ import annotations

import math

import pytest
import torch

from course import Pipeline
from course.lessons import harness
from course.exercises import mystery
from course.bugs import catalogue, inject
from course.reference.model import ModelConfig

TINY = ModelConfig(vocab_size=len(harness.VOCAB), n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64)
BUGS = [b.name for b in catalogue("evaluation")]


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    return harness.train_model(steps=120, keep=(10,), cfg=TINY)


@pytest.fixture(scope="module")
def task():
    return harness.make_task(60, seed=3)


# ----- tokenizer, text and task ---------------------------------------------------------------------
def test_the_tokenizer_folds_the_leading_space_into_the_word_and_round_trips():
    assert [harness.VOCAB[i] for i in harness.encode("ka rup\nmun")] == ["ka", " rup", "\n", "mun"]
    assert harness.encode(" ka") != harness.encode("ka"), "control: with and without the space are two tokens"
    text = "Question: o dorn?\nAnswer: vex"
    assert harness.decode(harness.encode(text)) == text
    with pytest.raises(ValueError):
        harness.encode("é")


def test_corpus_tokens_are_the_encoded_corpus():
    assert harness.corpus_tokens(5, seed=4).tolist() == harness.encode(harness.corpus(5, seed=4))


def test_the_chain_is_a_distribution_and_the_floor_is_below_the_unigram_entropy():
    lang = harness.language()
    assert torch.allclose(lang.transition.sum(-1), torch.ones(16, dtype=torch.float64))
    assert torch.allclose(lang.stationary @ lang.transition, lang.stationary, atol=1e-12)
    assert 0 < lang.entropy_rate < lang.unigram_entropy < math.log(16)
    assert harness.token_floor() < lang.unigram_entropy


def test_items_have_one_gold_continuation_and_the_exact_chain_beats_chance(task):
    for it in task.items:
        assert len(it.choices) == 4 and len(set(it.choice_symbols)) == 4 and 0 <= it.gold < 4
        assert all(c == harness.render(s) for c, s in zip(it.choices, it.choice_symbols))
    lls, lengths = harness.chain_scores(task)
    right, _ = harness.correct_per_item(lls, lengths, torch.tensor([it.gold for it in task.items]))
    assert right.double().mean() > 0.5, "the exact chain must prefer the gold continuation on most items"
    assert harness.make_task(60, seed=3).items == task.items, "a task is a function of its seed"


def test_the_exact_log_probability_is_the_product_of_transitions():
    it = harness.make_task(1, seed=5).items[0]
    T = harness.language().transition
    path = [it.question[-1], *it.choice_symbols[it.gold]]
    want = sum(math.log(float(T[a, b])) for a, b in zip(path, path[1:]))
    assert abs(harness.chain_logprob(it, it.gold) - want) < 1e-12


# ----- the healthy stages --------------------------------------------------------------------------
def test_truncation_keeps_the_end_and_exactly_fills_the_window():
    ctx, cont = list(range(30)), [1, 2, 3]
    kept = harness.truncate_left(ctx, cont, 16)
    assert kept == ctx[-14:] and len(kept) + len(cont) - 1 == 16
    assert harness.truncate_left(ctx[:5], cont, 16) == ctx[:5], "a context that fits is kept whole"
    with pytest.raises(ValueError):
        harness.truncate_left(ctx, list(range(20)), 16)


def test_score_is_the_sum_of_the_continuations_log_probabilities(model):
    ctx, cont = harness.encode("o dorn vex"), harness.encode(" ka rup")
    ids = torch.tensor([ctx + cont])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids[:, :-1]).double(), -1)[0]
    want = float(logp[len(ctx) - 1, cont[0]] + logp[len(ctx), cont[1]])
    got = harness.score_continuations(model, [ctx, harness.encode("mun")], [cont, harness.encode(" o")])
    assert abs(got[0] - want) < 1e-5, "batched, right-padded scoring must equal the single sequence's"
    single = harness.score_continuations(model, [harness.encode("mun")], [harness.encode(" o")])[0]
    assert abs(got[1] - single) < 1e-5, "padding of a shorter row must not change its score (float32 logits)"


def test_fewshot_honours_the_count_and_is_seeded():
    assert len(harness.pick_fewshot(32, 0, 3, 0)) == 3 and len(set(harness.pick_fewshot(32, 0, 5, 0))) == 5
    assert harness.pick_fewshot(32, 4, 3, 0) == harness.pick_fewshot(32, 4, 3, 0)
    assert harness.pick_fewshot(32, 0, 0, 0) == []


def test_accuracies_follow_lm_evaluation_harness():
    lls = [[-3.0, -4.0], [-1.0, -1.0]]
    choices = [["a", "abcd"], ["ab", "ab"]]
    acc, acc_norm = harness.accuracies(lls, choices, [1, 1])
    assert acc == 0.0, "acc: argmax of the sums, a tie goes to the first option"
    assert acc_norm == 0.5, "acc_norm divides by characters: -3/1 < -4/4"


def test_a_run_matches_a_hand_computed_item(model, task):
    r = harness.run(model, Pipeline(), task.subset(5), num_fewshot=0)
    it = task.items[0]
    ctx = harness.encode(harness.render(it.question))
    want = [harness.score_continuations(model, [ctx], [harness.encode(" " + c)])[0] for c in it.choices]
    assert torch.allclose(r.lls[0], torch.tensor(want, dtype=torch.float64))
    assert r.lengths[0].tolist() == [float(len(c)) for c in it.choices]
    assert r.contexts[0] == harness.render(it.question)


def test_a_trained_model_beats_chance_and_an_early_checkpoint(model, task):
    final = harness.run(model, Pipeline(), task)
    early = harness.run(harness.load(model.checkpoints[10], TINY), Pipeline(), task)
    assert final.acc > 0.45, f"the trained model should be well above chance (0.25): {final.acc}"
    assert final.acc > early.acc, "control: ten steps of training are not enough"


# ----- the bugs: each seen by its stage check, the healthy harness quiet ------------------------------
def test_problems_is_quiet_on_the_healthy_harness(model, task):
    assert harness.problems(Pipeline(), model, task) == []


@pytest.mark.parametrize("name", BUGS)
def test_every_bug_breaks_exactly_one_stage_check(name, model, task):
    found = harness.problems(inject(Pipeline(), name), model, task)
    assert len(found) == 1, f"{name}: {found}"


@pytest.mark.parametrize("name", BUGS)
def test_every_bug_can_be_hidden_in_a_mystery_draw(name, model, task):
    hidden = mystery.make(name, 2, Pipeline())
    assert mystery.signature(hidden) == mystery.signature(mystery.make("healthy", 2, Pipeline()))
    assert harness.problems(hidden, model, task) == harness.problems(inject(Pipeline(), name), model, task)


@pytest.mark.parametrize("name, metric, shots", [
    ("option-without-delimiter", "acc", 0), ("template-differs-from-training", "acc", 0),
    ("truncation-cuts-question", "acc", 3), ("prompt-tokens-scored", "acc_norm", 3)])
def test_score_dropping_bugs_drop_their_score(name, metric, shots, model, task):
    healthy = getattr(harness.run(model, Pipeline(), task, shots), metric)
    broken = getattr(harness.run(model, inject(Pipeline(), name), task, shots), metric)
    assert broken < healthy - 0.1, f"{name}: {metric} {broken:.3f} against healthy {healthy:.3f}"


def test_truncation_bug_is_invisible_at_zero_shot_and_prompt_scoring_leaves_acc(model, task):
    healthy0 = harness.run(model, Pipeline(), task, 0)
    cut0 = harness.run(model, inject(Pipeline(), "truncation-cuts-question"), task, 0)
    assert torch.equal(cut0.lls, healthy0.lls), "nothing to cut at zero-shot"
    prompt0 = harness.run(model, inject(Pipeline(), "prompt-tokens-scored"), task, 0)
    assert torch.equal(prompt0.correct, healthy0.correct), \
        "without truncation the prompt adds the same number to every option: acc per item is unchanged"


# ----- reading results --------------------------------------------------------------------------------
def test_item_diff_counts_every_item_once():
    a = torch.tensor([1, 1, 0, 0, 1], dtype=torch.bool)
    b = torch.tensor([1, 0, 1, 0, 1], dtype=torch.bool)
    assert harness.item_diff(a, b) == {"both right": 2, "only A right": 1, "only B right": 1, "both wrong": 1}


def test_bootstrap_interval_contains_the_mean_and_narrows_with_more_items():
    g = torch.Generator().manual_seed(0)
    small = (torch.rand(50, generator=g) < 0.7)
    large = (torch.rand(2000, generator=g) < 0.7)
    m, lo, hi = harness.bootstrap_ci(small)
    assert lo <= m <= hi
    _, lo2, hi2 = harness.bootstrap_ci(large)
    assert hi2 - lo2 < (hi - lo) / 3


def test_paired_interval_is_narrower_than_unpaired_for_runs_that_agree():
    g = torch.Generator().manual_seed(1)
    a = torch.rand(300, generator=g) < 0.7
    b = a.clone()
    b[torch.nonzero(~a).flatten()[:8]] = True  # eight items fixed, none broken
    p, u = harness.paired_bootstrap(a, b), harness.unpaired_bootstrap(a, b)
    assert p[2] - p[1] < (u[2] - u[1]) / 2
    assert p[1] > 0 and u[1] < 0, "the consistent gain is clear only when paired"


def test_the_reference_judge_separates_the_graded_pairs():
    for salt in ("", "unit"):
        noise, real = harness.judge_cases(salt)
        assert not any(harness.significantly_better(a, b) for a, b in noise.values())
        assert all(harness.significantly_better(a, b) for a, b in real.values())
        # negative controls: the naive judges fail on these pairs
        assert any(bool(b.double().mean() > a.double().mean()) for a, b in noise.values())
        assert not all(harness.unpaired_bootstrap(a, b)[1] > 0 for a, b in real.values())


def test_contamination_flags_leaked_items_above_fresh_ones_at_a_long_n():
    task = harness.make_task(100, seed=4, question_words=12)
    fresh = harness.make_task(100, seed=9, question_words=12)
    text = harness.corpus(1500)
    leaky = harness.with_leaked_items(text, task, 0.3)
    items = [harness.item_text(i) for i in task.items]
    leaked, _ = harness.contamination(items, leaky, 10)
    chance, _ = harness.contamination([harness.item_text(i) for i in fresh.items], leaky, 10)
    assert leaked >= 0.3 and chance < 0.15, (leaked, chance)
    assert harness.contamination(items, text, 10)[0] < 0.15, "control: the clean text"
    assert harness.ngrams("a b c\nd e", 2) == {("a", "b"), ("b", "c"), ("d", "e")}, "n-grams do not cross lines"


def test_the_explorer_responds_to_its_slider(model, task):
    by_k = {k: harness.run(model, Pipeline(), task.subset(10), k) for k in (0, 3)}
    cut = {k: harness.run(model, inject(Pipeline(), "truncation-cuts-question"), task.subset(10), k) for k in (0, 3)}
    box = harness.fewshot_explorer(by_k, model.cfg.n_ctx, cut=cut)
    before = box.summary.value
    box.slider.value = 3
    assert box.summary.value != before and "<b>3</b>" in box.summary.value


def test_the_explorer_reads_as_text_with_every_setting_named_once_and_what_the_model_reads(model, task):
    """Without a live frontend the explorer's text lists each num_fewshot once, with the context the
    model reads of item 0 (the point of the widget); the label is not doubled."""
    by_k = {k: harness.run(model, Pipeline(), task.subset(10), k) for k in (0, 3)}
    text = harness.fewshot_explorer(by_k, model.cfg.n_ctx)._repr_mimebundle_()["text/plain"]
    lines = text.splitlines()
    assert [ln.split(":")[0] for ln in lines if ln.startswith("num_fewshot")] == ["num_fewshot 0", "num_fewshot 3"], text
    assert text.count("num_fewshot") == 2 and repr(by_k[3].contexts[0]) in text, text


def test_ties_share_their_credit_and_the_prior_rule_ties_on_a_shared_first_word():
    scores = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0], [2.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    credit, tied = harness.credit_with_ties(scores, torch.tensor([1, 2, 0, 3]))
    assert credit.tolist() == [0.5, 1 / 3, 1.0, 0.0] and tied.tolist() == [True, True, False, True]
    assert harness.credit_with_ties(scores[2:3] + 1e-12 * torch.tensor([[0.0, 1, 0, 0]]), [0])[0].tolist() == [1.0], \
        "control: no tie, the credit is argmax == gold"
    # the rule that knows how the items were made: options that share a first word tie, up to rounding
    task = harness.make_task(200, seed=0)
    lls, _ = harness.chain_scores(task)
    prior = torch.tensor([[harness.chain_prior_logprob(it, j) for j in range(4)] for it in task.items], dtype=torch.float64)
    _, tied = harness.credit_with_ties(lls - prior, [it.gold for it in task.items])
    shared = [len({s[0] for s in it.choice_symbols}) < 4 for it in task.items]
    assert tied.any() and all(not t or s for t, s in zip(tied.tolist(), shared)), "only a shared first word ties"
