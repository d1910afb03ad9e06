"""Specifications of ``course.lessons.generate`` and the generation bugs of ``course.bugs.generation``.

``generate`` is checked against the slow full-recompute reference and against known logits; each
test of the harness is run on the healthy generator (the negative control: it must pass) and on the
broken ones it is meant to catch (each must fail).
"""

from __future__ import annotations

import math

import pytest
import torch

from course import ModelConfig, Pipeline
from course.exercises import mystery
from course.lessons import generate as G
from course.bugs import catalogue, inject
from course.exercises.grading import SwitchedOff
from course.reference.train import train

PIPE = Pipeline().replace(n_symbols=8, seq_len=16, model=ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                          n_train=1024, n_val=64, batch_size=32, steps=120, lr=3e-2, warmup=10)
LANG = PIPE.language()
GENERATOR_BUGS = [b.name for b in catalogue("generation") if b.name != "eos-masked-in-training"]


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    return train(PIPE, seed=1, eval_every=0).model


@pytest.fixture(scope="module")
def prompts():
    return LANG.sample(64, 4, seed=3)


# ----- generate ---------------------------------------------------------------------------------
def test_greedy_matches_full_recompute(model, prompts):
    out, used = G.generate(model, prompts, 12, greedy=True, return_logits=True)
    assert out.shape == (64, 16) and used.shape == (64, 12, LANG.vocab_size)
    assert torch.equal(out, G.greedy_recompute(model, prompts, 12))
    gap = (used - G.recompute_logits(model, out, 4)).abs().max().item()
    assert 0 <= gap < G.CACHE_TOLERANCE


def test_seeded_bounded_and_leaves_global_rng_alone(model, prompts):
    state = torch.get_rng_state()
    a, b, c = (G.generate(model, prompts, 5, seed=s) for s in (1, 1, 2))
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.shape == (64, 9) and torch.equal(a[:, :4], prompts)
    with pytest.raises(ValueError):
        G.generate(model, prompts, 13)  # 4 + 13 > n_ctx = 16


def test_restores_training_mode(model, prompts):
    model.train()
    G.generate(model, prompts[:2], 3)
    assert model.training
    model.eval()


def test_stops_at_eos_and_pads_finished_rows_with_eos():
    stop = G.FixedLogits(torch.tensor([0.0, 0.0, 5.0]))
    out = G.generate(stop, torch.zeros(3, 2, dtype=torch.long), 6, greedy=True, eos_id=2)
    assert out.shape == (3, 3) and out[:, -1].eq(2).all()
    never = G.FixedLogits(torch.tensor([5.0, 0.0, 0.0]))
    assert G.generate(never, torch.zeros(3, 2, dtype=torch.long), 6, greedy=True, eos_id=2).shape == (3, 8)


def test_cache_protocol_on_fixed_logits():
    fixed = G.FixedLogits(torch.tensor([0.0, 1.0]))
    G.generate(fixed, torch.zeros(1, 3, dtype=torch.long), 4, greedy=True)
    assert fixed.calls == [(3, True, 0), (1, True, 3), (1, True, 4), (1, True, 5)]


@pytest.mark.parametrize("temperature,top_k", [(0.5, None), (1.0, None), (2.0, None), (1.0, 2)])
def test_sampler_follows_softmax_over_temperature(temperature, top_k):
    assert G.sampler_error(G.generate, torch.tensor([2.0, 1.0, 0.0, -1.0]), temperature, top_k) < 0.03


def test_top_k_never_samples_outside_the_top():
    out = G.generate(G.FixedLogits(torch.tensor([0.0, 3.0, 2.9, 0.1])), torch.zeros(2000, 1, dtype=torch.long), 1, top_k=2)
    assert set(out[:, -1].tolist()) == {1, 2}


# ----- the harness: negative controls and the bugs it catches --------------------------------------
def test_healthy_pipeline_has_no_problems(model, prompts):
    assert G.consistency_problems(PIPE) == []
    assert G.consistency_problems(PIPE, model) == []
    assert G.generator_problems(G.generate, model, prompts, LANG) == []


@pytest.mark.parametrize("name", GENERATOR_BUGS)
def test_every_generator_bug_is_caught(name, model, prompts):
    broken = inject(PIPE, name)
    assert G.consistency_problems(broken), name
    assert G.generator_problems(broken.generate, model, prompts, LANG), name


def test_first_disagreeing_step_names_the_mechanism(model, prompts):
    first = {}
    for name in ("kv-cache-position-offset", "kv-cache-not-appended", "first-position-logits"):
        gap = G.cache_gap(inject(PIPE, name).generate, model, prompts[:8], 8)
        first[name] = int((gap > G.CACHE_TOLERANCE).nonzero()[0])
    assert first == {"first-position-logits": 0, "kv-cache-position-offset": 1, "kv-cache-not-appended": 2}


def test_future_perturbation_sees_the_missing_mask():
    windows = LANG.sample(4, 16, seed=5)
    assert G.future_perturbation(PIPE.build_model(0), windows, 6) == 0.0
    assert G.future_perturbation(inject(PIPE, "causal-mask-off").build_model(0), windows, 6) > 1e-3


def test_generator_problems_switches_off_what_the_generator_must_not_call(model, prompts):
    with pytest.raises(SwitchedOff):
        G.generator_problems(G.generate, model, prompts, LANG, off=(G.generate,))


class _Later:
    """A result that works out its value only when read: indexed or handed to torch."""
    def __init__(self, thunk):
        self.thunk = thunk

    def __getitem__(self, idx):
        return _Later(lambda: self.thunk()[idx])

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        real = [a.thunk() if isinstance(a, _Later) else a for a in args]
        return func(*real, **(kwargs or {}))


def test_generator_results_are_read_while_the_package_is_switched_off(model, prompts):
    """A generator that returns stand-ins computing the package's generate when read is reported,
    never run after the switch is lifted; a tensor subclass is refused alike. Controls: the
    package's generate passes, and so does a (tokens, logits) pair returned as a list."""
    def lazy(*args, **kwargs):
        return _Later(lambda: G.generate(*args, **kwargs))

    class Sub(torch.Tensor):
        pass

    def subclassed(*args, **kwargs):
        out = G.generate(*args, **kwargs)
        return tuple(t.as_subclass(Sub) for t in out) if kwargs.get("return_logits") else out.as_subclass(Sub)

    found = G.generator_problems(lazy, model, prompts, LANG, off=(G.generate,))
    assert found == ["the generator must return a torch.Tensor (the token ids), got _Later"], found
    found = G.generator_problems(subclassed, model, prompts, LANG)
    assert found and "got Sub" in found[0], found
    as_list = lambda *a, **k: list(G.generate(*a, **k)) if k.get("return_logits") else G.generate(*a, **k)  # noqa: E731
    assert G.generator_problems(as_list, model, prompts, LANG) == []


def test_mystery_draws_hide_the_generator_bugs():
    draws = [mystery.make(b, 5, PIPE) for b in ["healthy"] + GENERATOR_BUGS]
    assert len({mystery.signature(p) for p in draws}) == 1
    assert all(mystery.touched(p) == ("generate",) for p in draws[1:])


# ----- scoring and repetition --------------------------------------------------------------------
def test_chain_score_of_the_chains_own_samples_is_near_the_entropy_rate():
    score = G.chain_score(LANG, LANG.sample(2000, 16, seed=9), 4)
    assert abs(score.nll - LANG.entropy_rate) < 0.05 and score.eos_rate == 0.0 and score.stopped == 0.0


def test_chain_score_counts_eos_and_clamps_impossible_tokens():
    S = LANG.n_symbols
    row = torch.tensor([[0, 1, 2, LANG.EOS, 3]])
    score = G.chain_score(LANG, row, 2)
    expected = -math.log(max(float(LANG.transition[0 * S + 1, 2]), 1e-9))
    assert score.scored == 1 and math.isclose(score.nll, expected) and score.eos_rate == 0.5 and score.stopped == 1.0
    pad = G.chain_score(LANG, torch.tensor([[0, 1, LANG.PAD]]), 2)
    assert math.isclose(pad.nll, -math.log(1e-9))


def test_repetition():
    assert G.repetition([1, 2] * 6, n=2) == G.Repetition(2 / 11, 2)
    assert G.repetition(list(range(12)), n=4).period == 0
    assert G.repetition([3] * 12).period == 1


# ----- EOS in the data ---------------------------------------------------------------------------
def test_eos_batch_and_its_masked_bug():
    pipe = PIPE.replace(min_len=6, collate=G.eos_batch)
    windows = pipe.windows("train")[:64]
    healthy = G.eos_batch(windows, LANG.PAD)
    broken = inject(pipe, "eos-masked-in-training").collate(windows, LANG.PAD)
    n_eos = int((healthy.targets == LANG.EOS).sum())
    assert n_eos > 0 and int((broken.targets == LANG.EOS).sum()) == 0
    assert int((healthy.targets != -100).sum()) - int((broken.targets != -100).sum()) == n_eos
    assert 0 < G.eos_share(pipe) < 0.2


def test_as_text():
    assert G.as_text([0, 1, LANG.PAD, LANG.EOS], LANG.n_symbols) == "ab_|"


def test_the_temperature_explorer_reads_as_text_one_sample_per_line():
    from course.toolkit.textview import html_text
    assert html_text("a<br>b<br/>c</p>d</div>e</li>") == "a\nb\nc\nd\ne", "a line break or a block end is a newline"
    results = {T: {"nll": 1.0 + T, "distinct": 0.5, "samples": ["abcd efgh", "hgfe dcba"]} for T in (0.5, 1.0, 2.0)}
    text = G.temperature_explorer(results, 0.9, 0.4)._repr_mimebundle_()["text/plain"]
    lines = text.split("\n")
    assert lines[0].startswith("T = 1.0: ") and lines[0].endswith("distinct 4-grams 0.50"), text
    assert lines[1:3] == ["abcd efgh", "hgfe dcba"], "each sample on a line of its own, not run into the numbers"
    assert text.count("1.0") == 1, "the setting is named once"
