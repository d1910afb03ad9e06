"""Specifications of ``course.reference.train``: determinism, the recorded history, evaluation, checkpoints.

Runs are tiny (a one-layer model on 16-token windows, a few dozen steps) so the file stays fast on
two CPU cores; each claim is checked against a second code path or a broken variant.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from course import IGNORE, Pipeline
from course.bugs import inject
from course.reference.pipeline import warmup_then_linear
from course.reference.train import HISTORY_KEYS, batch_at, evaluate, resume, save_checkpoint, start, train, train_steps

from small_pipeline import SMALL
TIMINGS = ("t_data", "t_fwd_bwd", "t_opt")  # wall times: never compared


def _params_equal(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def _optimizer_states_equal(a: torch.optim.Optimizer, b: torch.optim.Optimizer) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    if sa["param_groups"] != sb["param_groups"] or sa["state"].keys() != sb["state"].keys():
        return False
    for k in sa["state"]:
        x, y = sa["state"][k], sb["state"][k]
        if x.keys() != y.keys() or not all(torch.equal(x[n], y[n]) for n in x):
            return False
    return True


def _histories_equal(a: dict, b: dict) -> bool:
    return all(a[k] == b[k] for k in HISTORY_KEYS if k not in TIMINGS)


@pytest.fixture(scope="module")
def run30():
    return train(SMALL, steps=30, seed=0, eval_every=10)


# ----- determinism -------------------------------------------------------------------------------------
def test_same_seed_gives_bit_identical_runs_and_another_seed_does_not(run30):
    again = train(SMALL, steps=30, seed=0, eval_every=10)
    assert _params_equal(run30.model, again.model), "two runs with seed 0 ended with different parameters"
    assert _histories_equal(run30.history, again.history), "two runs with seed 0 recorded different histories"
    assert run30.val == again.val, "two runs with seed 0 recorded different held-out losses"
    other = train(SMALL, steps=30, seed=1, eval_every=10)
    assert not _params_equal(run30.model, other.model), "seed 1 gave the same parameters as seed 0: the seed is ignored"
    assert run30.history["loss"] != other.history["loss"]


def test_a_healthy_short_run_lowers_the_held_out_loss(run30):
    """The held-out loss falls from its initial value to below the unigram entropy (context is being used)."""
    lang = SMALL.language()

    def learned(run) -> bool:
        initial = evaluate(SMALL.build_model(run.seed), run.pipe)
        return run.final_val_loss < initial and run.final_val_loss < lang.unigram_entropy

    assert learned(run30), (
        f"after 30 steps the held-out loss is {run30.final_val_loss:.3f} "
        f"(unigram entropy {lang.unigram_entropy:.3f}): the healthy pipeline does not learn"
    )
    # negative control: the same criterion rejects a run whose learning rate is zero
    assert not learned(train(inject(SMALL, "lr-zero"), steps=30, seed=0, eval_every=0))


def test_train_evaluates_at_the_end_and_every_eval_every_steps(run30):
    assert run30.val["step"] == [10, 20, 30], f"val steps {run30.val['step']} for 30 steps with eval_every=10"
    assert run30.final_val_loss == run30.val["loss"][-1]
    assert run30.final_val_loss == pytest.approx(evaluate(run30.model, SMALL), abs=1e-6), (
        "the last recorded held-out loss is not the loss of the final model"
    )
    short = train(SMALL, steps=3, eval_every=0)
    assert short.val["step"] == [3], "train() must evaluate once at the end when eval_every does not hit the last step"
    assert short.step == 3


# ----- history ---------------------------------------------------------------------------------------------
def test_history_has_one_entry_per_step_for_every_key(run30):
    assert set(run30.history) == set(HISTORY_KEYS), f"history keys {sorted(run30.history)} differ from HISTORY_KEYS"
    for k in HISTORY_KEYS:
        assert len(run30.history[k]) == 30, f"history[{k!r}] has {len(run30.history[k])} entries after 30 steps"
    assert run30.history["step"] == list(range(30))
    assert all(run30.history["finite"])
    assert all(t >= 0 for k in TIMINGS for t in run30.history[k])


def test_history_lr_is_the_scheduled_rate_with_warmup(run30):
    lrs = run30.history["lr"]
    assert lrs[0] == pytest.approx(SMALL.lr / SMALL.warmup, rel=1e-12), (
        f"first lr {lrs[0]!r}, expected base/warmup = {SMALL.lr / SMALL.warmup!r}: is lr read after scheduler.step()?"
    )
    assert all(a < b for a, b in zip(lrs[: SMALL.warmup - 1], lrs[1: SMALL.warmup])), f"lr does not rise during warmup: {lrs[:SMALL.warmup]}"
    assert all(a >= b for a, b in zip(lrs[SMALL.warmup:], lrs[SMALL.warmup + 1:])), "lr rises after warmup"
    schedule = [SMALL.lr * warmup_then_linear(s, SMALL.warmup, SMALL.steps) for s in range(30)]
    assert lrs == pytest.approx(schedule, rel=1e-12), "recorded lrs differ from pipe.lr * warmup_then_linear(step)"


def _sgd(params, lr, weight_decay):
    return torch.optim.SGD(params, lr=lr)


def _replay_sgd(pipe: Pipeline, seed: int, lrs: list[float]) -> torch.nn.Module:
    """Replay the first steps by hand: plain SGD on the same batches, with the given learning rates."""
    model = pipe.build_model(seed)
    model.train()
    for s, lr in enumerate(lrs):
        batch = batch_at(pipe, seed, s)
        model.zero_grad(set_to_none=True)
        pipe.loss_fn(model(batch.inputs), batch).backward()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-lr)
    return model


def test_history_lr_is_the_rate_the_update_actually_used():
    """With SGD (delta = -lr * grad) and no clipping, replaying the steps with the recorded lrs reproduces the run."""
    pipe = SMALL.replace(optimizer_factory=_sgd, clip=None, lr=0.5)
    run = train_steps(start(pipe, 0), 3, eval_every=0)
    recorded = run.history["lr"]

    def max_err(lrs):
        replay = _replay_sgd(pipe, 0, lrs).state_dict()
        return max((replay[k] - v).abs().max().item() for k, v in run.model.state_dict().items())

    assert max_err(recorded) < 1e-6, f"replaying with the recorded lrs {recorded} misses the run's parameters by {max_err(recorded):.2e}"
    # negative control: the base lr (what a loop that ignores the schedule would record) does not reproduce it
    assert max_err([pipe.lr] * 3) > 1e-4


def test_history_tokens_is_the_number_of_scored_targets():
    pipe = SMALL.replace(min_len=4)  # padded windows: the number of scored targets varies by batch
    run = train_steps(start(pipe, 0), 4, eval_every=0)
    counted = [int((batch_at(pipe, 0, s).targets != IGNORE).sum()) for s in range(4)]
    assert run.history["tokens"] == counted, f"history tokens {run.history['tokens']}, batches score {counted}"
    # negative control: B*T (every position, padding included) is a different number here
    assert counted != [pipe.batch_size * pipe.seq_len] * 4


def test_batch_at_is_a_pure_function_of_seed_and_step():
    a, b = batch_at(SMALL, 0, 5), batch_at(SMALL, 0, 5)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets), "batch_at is not deterministic"
    assert not torch.equal(a.inputs, batch_at(SMALL, 0, 6).inputs), "consecutive steps got the same batch"
    assert not torch.equal(a.inputs, batch_at(SMALL, 1, 5).inputs), "batch_at ignores the seed"
    # one epoch (n_train // batch_size steps) visits every window exactly once
    per_epoch = SMALL.n_train // SMALL.batch_size
    seen = torch.cat([batch_at(SMALL, 0, s).inputs for s in range(per_epoch)])
    want = SMALL.windows("train")[:, :-1]
    assert sorted(map(tuple, seen.tolist())) == sorted(map(tuple, want.tolist())), "an epoch does not cover the training windows once each"


def test_a_nan_loss_stops_the_run_and_is_recorded_as_not_finite():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = train_steps(start(inject(SMALL, "all-targets-ignored"), 0), 5, eval_every=0)
    assert run.stopped == "non-finite at step 0", f"run.stopped = {run.stopped!r}"
    assert run.history["finite"] == [False] and math.isnan(run.history["loss"][0])
    kept = train_steps(start(inject(SMALL, "all-targets-ignored"), 0), 3, eval_every=0, stop_on_nonfinite=False)
    assert kept.step == 3 and kept.stopped is None


# ----- evaluation -------------------------------------------------------------------------------------------
def test_evaluate_is_the_mean_loss_per_scored_target_over_the_whole_split():
    """evaluate() in uneven chunks equals one cross-entropy summed over every scored target of the split."""
    pipe = SMALL.replace(min_len=4)
    model = pipe.build_model(0)
    with torch.no_grad():  # large random weights: per-token losses vary a lot, so weighting matters
        g = torch.Generator().manual_seed(0)
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    batch = pipe.collate(pipe.windows("val"), pipe.language().PAD)
    with torch.no_grad():
        logits = model(batch.inputs)
    total = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), reduction="sum").item()
    expected = total / int(batch.scored.sum())
    got = evaluate(model, pipe, batch_size=7)
    assert got == pytest.approx(expected, rel=1e-5), f"evaluate() = {got:.6f}, one pass over the split gives {expected:.6f}"
    # negative control: the unweighted mean of per-chunk means (a classic mistake) is a different number
    chunks = [pipe.collate(w, pipe.language().PAD) for w in pipe.windows("val").split(7)]
    with torch.no_grad():
        unweighted = sum(pipe.loss_fn(model(b.inputs), b).item() for b in chunks) / len(chunks)
    assert unweighted != pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_evaluate_restores_the_models_mode_and_runs_in_eval_mode(mode):
    pipe = SMALL.replace(model=dataclasses.replace(SMALL.model, dropout=0.5))
    model = pipe.build_model(0)
    model.train(mode == "train")
    first = evaluate(model, pipe)
    assert model.training == (mode == "train"), f"evaluate() left a model that was in {mode} mode in the other mode"
    assert evaluate(model, pipe) == first, "evaluate() is not deterministic with dropout: it does not switch to eval mode"


# ----- checkpoints ------------------------------------------------------------------------------------------
CKPT_PIPE = SMALL.replace(model=dataclasses.replace(SMALL.model, dropout=0.1), steps=20)


def _resume_without(pipe: Pipeline, path, skip: str):
    """A broken resume that restores everything but ``skip`` (negative control)."""
    ckpt = torch.load(path, weights_only=False)
    run = start(pipe, ckpt["seed"])
    run.model.load_state_dict(ckpt["model"])
    if skip != "optimizer":
        run.optimizer.load_state_dict(ckpt["optimizer"])
    if skip != "scheduler":
        run.scheduler.load_state_dict(ckpt["scheduler"])
    if skip != "rng":
        torch.set_rng_state(ckpt["torch_rng"])
    run.step = ckpt["step"]
    run.history, run.val = ckpt["history"], ckpt["val"]
    return run


def test_resuming_from_a_checkpoint_is_bit_identical_to_training_straight_through(tmp_path):
    """20 steps straight vs 10, save, resume in a fresh Run, 10 more: same parameters, optimizer and history.

    Dropout is on, so the saved RNG state matters too.
    """
    pipe, seed = CKPT_PIPE, 3
    straight = train_steps(start(pipe, seed), 20, eval_every=5)
    first = train_steps(start(pipe, seed), 10, eval_every=5)
    path = tmp_path / "run.pt"
    save_checkpoint(first, path)
    torch.manual_seed(999)
    torch.rand(100)  # whatever the notebook does in between must not matter
    resumed = resume(pipe, path)
    assert resumed.step == 10 and resumed.seed == seed
    train_steps(resumed, 10, eval_every=5)
    assert _params_equal(straight.model, resumed.model), "resumed parameters differ from a straight run"
    assert _optimizer_states_equal(straight.optimizer, resumed.optimizer), "resumed optimizer state differs from a straight run"
    assert straight.scheduler.state_dict() == resumed.scheduler.state_dict(), "resumed scheduler differs"
    assert _histories_equal(straight.history, resumed.history), "resumed history differs from a straight run"
    assert straight.val == resumed.val
    # negative controls: a resume that forgets the optimizer state, the schedule or the RNG is caught
    for skip in ("optimizer", "scheduler", "rng"):
        broken = train_steps(_resume_without(pipe, path, skip), 10, eval_every=5)
        assert not _params_equal(straight.model, broken.model), f"the comparison cannot see a resume that skips the {skip}"
