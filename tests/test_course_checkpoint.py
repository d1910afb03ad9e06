"""Specifications of ``course.reference.checkpoint``: the reference restore keeps the new config and resumes bit
for bit, the resume bugs are caught, writes are atomic, the last good checkpoint survives a SIGKILL.

Runs are tiny (one layer, 16-token windows, a few steps); every check has a negative control.
"""

from __future__ import annotations

import dataclasses
import io
import os
import sys

import pytest
import torch

from course.reference import checkpoint
from course.bugs import catalogue, inject
from course.reference.checkpoint import differences, resume_check, split_run
from course.reference.pipeline import warmup_then_linear
from course.reference.train import checkpoint_state, resume, save_checkpoint, start, train_steps

from small_pipeline import SMALL

PIPE = SMALL.replace(model=dataclasses.replace(SMALL.model, dropout=0.1), steps=40)
RESUME_BUGS = [b.name for b in catalogue("resume")]


def _unbroken(pipe, seed, n):
    return train_steps(start(pipe, seed), n, eval_every=4)


# ----- the reference restore ------------------------------------------------------------------------
def test_split_run_is_bit_identical_to_the_unbroken_run_in_every_logged_value_and_parameter():
    straight = _unbroken(PIPE, 3, 16)
    split, _ = split_run(PIPE, 3, 8, 8, eval_every=4)
    assert differences(straight, split) == {}, f"the split run departs: {differences(straight, split)}"
    assert split.val == straight.val and split.history["lr"] == straight.history["lr"]


def test_differences_sees_a_changed_seed_and_names_the_first_step():
    a, b = _unbroken(PIPE, 0, 6), _unbroken(PIPE, 1, 6)
    d = differences(a, b)
    assert d.get("loss") == 0 and d.get("parameters", 0) > 0, f"differences of two seeds: {d}"


def test_the_reference_restore_keeps_the_new_learning_rate_and_the_plain_load_does_not():
    run = train_steps(start(PIPE, 0), 8, eval_every=0)
    data = checkpoint.to_memory(run).getvalue()
    new = PIPE.replace(lr=PIPE.lr / 4)
    want = [new.lr * warmup_then_linear(s, new.warmup, new.steps) for s in range(8, 14)]
    good = train_steps(resume(new, io.BytesIO(data)), 6, eval_every=0)
    assert good.history["lr"][8:] == want, "the reference restore does not train at the new config's schedule"
    assert good.scheduler.base_lrs == [new.lr]
    # negative control: the plain PyTorch load (the stale resume) keeps the old rate
    stale = train_steps(resume(inject(new, "stale-lr-resume"), io.BytesIO(data)), 6, eval_every=0)
    assert stale.history["lr"][8:] == [PIPE.lr * warmup_then_linear(s, PIPE.warmup, PIPE.steps) for s in range(8, 14)]


def test_the_stale_resume_is_bit_identical_when_the_config_is_unchanged():
    """Why the stale resume survives every test that does not change the config."""
    straight = _unbroken(PIPE, 2, 12)
    stale, _ = split_run(inject(PIPE, "stale-lr-resume"), 2, 6, 6, eval_every=4)
    assert differences(straight, stale) == {}


def test_resume_check_passes_the_reference():
    assert resume_check(PIPE) == []


@pytest.mark.parametrize("name", RESUME_BUGS)
def test_resume_check_fires_on_every_resume_bug(name):
    assert resume_check(inject(PIPE, name)), f"resume_check is quiet on {name!r}"


@pytest.mark.parametrize("name, first", [("rng-dropped", "loss"), ("data-cursor-reset", "loss"),
                                         ("optimizer-state-dropped", "param_norm"), ("scheduler-dropped", "lr")])
def test_each_dropped_piece_departs_where_the_notebook_says(name, first):
    straight = _unbroken(PIPE, 0, 12)
    broken, _ = split_run(inject(PIPE, name), 0, 6, 6, eval_every=4)
    d = differences(straight, broken)
    assert d.get(first) == 6, f"{name}: {first} should depart at the first resumed step, differences {d}"


def test_rng_dropped_is_invisible_without_dropout():
    """The limit the notebook states: without dropout the RNG is never drawn from."""
    plain = PIPE.replace(model=dataclasses.replace(PIPE.model, dropout=0.0))
    straight = _unbroken(plain, 0, 12)
    broken, _ = split_run(inject(plain, "rng-dropped"), 0, 6, 6, eval_every=4)
    assert differences(straight, broken) == {}


# ----- writing -----------------------------------------------------------------------------------------
def test_atomic_save_round_trips_and_leaves_no_temporary_file(tmp_path):
    run = train_steps(start(PIPE, 0), 3, eval_every=0)
    path = checkpoint.atomic_save(checkpoint_state(run), tmp_path / "c.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]
    back = torch.load(path, weights_only=False)
    assert back["step"] == 3 and torch.equal(back["torch_rng"], checkpoint_state(run)["torch_rng"])


def test_an_interrupted_atomic_save_keeps_the_old_file_and_a_naive_one_destroys_it(tmp_path):
    run = train_steps(start(PIPE, 0), 3, eval_every=0)
    target = tmp_path / "latest.pt"
    checkpoint.atomic_save(checkpoint_state(run), target)

    class Crash(Exception):
        pass

    def crash(tmp, n):
        raise Crash

    train_steps(run, 2, eval_every=0)
    with pytest.raises(Crash):
        checkpoint.atomic_save(checkpoint_state(run), target, on_partial=crash)
    assert torch.load(target, weights_only=False)["step"] == 3, "the old checkpoint was damaged"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.pt"], "the temporary file was left behind"
    # negative control: writing in place, interrupted, leaves a file that does not load
    with pytest.raises(checkpoint.Interrupted):
        checkpoint.naive_save(checkpoint_state(run), target, stop_after=1 << 14)
    assert not checkpoint.loads(target)


def test_save_keeps_the_last_good_ones_and_latest_good_skips_a_damaged_one(tmp_path):
    run = start(PIPE, 0)
    for _ in range(3):
        train_steps(run, 2, eval_every=0)
        checkpoint.save(run, tmp_path, keep=2)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["LATEST", checkpoint.checkpoint_name(4), checkpoint.checkpoint_name(6)], names
    assert checkpoint.latest_good(tmp_path).name == checkpoint.checkpoint_name(6)
    (tmp_path / checkpoint.checkpoint_name(6)).write_bytes(b"half a checkpoint")
    assert checkpoint.latest_good(tmp_path).name == checkpoint.checkpoint_name(4)
    assert checkpoint.latest_good(tmp_path / "nothing-here") is None


def test_new_run_dir_never_reuses_a_directory(tmp_path):
    dirs = {checkpoint.new_run_dir(tmp_path, "r") for _ in range(5)}
    assert len(dirs) == 5 and all(d.is_dir() and not any(d.iterdir()) for d in dirs)


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "win32", reason="SIGKILL needs POSIX")
def test_sigkill_during_save_leaves_the_last_good_checkpoint_and_resume_is_bit_identical(tmp_path):
    run = train_steps(start(PIPE, 0), 6, eval_every=4)
    checkpoint.save(run, tmp_path)
    report = checkpoint.kill_during_save(PIPE, tmp_path, steps=3)
    assert report.returncode == -9, f"the child was not killed by SIGKILL: {report}"
    assert report.partial_exists and not report.partial_loads and report.partial_bytes > 0
    assert report.latest_good is not None and report.latest_good.name == checkpoint.checkpoint_name(6)
    assert [f for f in report.files if f.endswith(".pt")] == [checkpoint.checkpoint_name(6)]
    resumed = train_steps(resume(PIPE, report.latest_good), 6, eval_every=4)
    assert differences(_unbroken(PIPE, 0, 12), resumed) == {}


def test_save_checkpoint_writes_what_resume_reads_from_a_file_object():
    run = train_steps(start(PIPE, 1), 4, eval_every=0)
    buf = io.BytesIO()
    save_checkpoint(run, buf)
    buf.seek(0)
    back = resume(PIPE, buf)
    assert back.step == 4 and back.history == run.history
