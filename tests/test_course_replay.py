"""Specifications of ``course.lessons.replay`` and the late-spike bug: the corrupted shard sits where its
documentation says, replaying from a checkpoint is bit-identical, a skip moves the data cursor and is
logged, and the spike is real (absent on the reference data stream, the negative control).

Runs use the unit tests' small pipeline (16 batches an epoch) for 300+ steps: about a second each.
"""

from __future__ import annotations

import statistics

import pytest
import torch

from course.bugs import inject
from course.bugs.spike import REPEATED_TOKEN, SHARD_LEN, SHARD_START, is_corrupted
from course.lessons.replay import StepLog, checkpoints, data_digest, last_good, replay, rewind_and_skip, token_counts, train_with_checkpoints
from course.reference.train import batch_at, resume, save_checkpoint, start, train_steps

from small_pipeline import SMALL

PIPE = inject(SMALL.replace(steps=1000), "corrupted-shard")
STEPS = SHARD_START + 20


@pytest.fixture(scope="module")
def spiked(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckpt")
    log = StepLog()
    run = train_with_checkpoints(PIPE, STEPS, folder, every=50, log=log)
    return run, log, folder


def test_the_shard_replaces_exactly_its_data_indices():
    for i in (SHARD_START - 1, SHARD_START, SHARD_START + SHARD_LEN - 1, SHARD_START + SHARD_LEN, 3):
        got, ref = batch_at(PIPE, 0, i), batch_at(SMALL, 0, i)
        if is_corrupted(i):
            assert (got.inputs == REPEATED_TOKEN).all() and (got.targets == REPEATED_TOKEN).all()
        else:
            assert torch.equal(got.inputs, ref.inputs) and torch.equal(got.targets, ref.targets), f"index {i} changed"


def test_checkpoints_are_saved_every_k_steps_and_last_good_is_at_or_before(spiked):
    _, _, folder = spiked
    assert sorted(checkpoints(folder)) == list(range(0, STEPS, 50))
    assert last_good(folder, SHARD_START) == 300 and last_good(folder, 349) == 300 and last_good(folder, 299) == 250
    with pytest.raises(ValueError):
        last_good(folder, -1)


def test_step_log_records_data_index_and_token_share(spiked):
    run, log, _ = spiked
    assert log.step == list(range(STEPS)) and log.batch == list(range(STEPS))
    assert all(log.top_token_share[i] == 1.0 for i in range(SHARD_START, SHARD_START + SHARD_LEN))
    assert max(log.top_token_share[:SHARD_START]) < 0.5, "an ordinary batch looks like the corrupted shard"
    assert len(log.adam_v) == STEPS and all(v > 0 for v in log.adam_v)


def test_the_spike_is_real_and_absent_on_the_reference_stream(spiked):
    run, _, _ = spiked
    reference = train_steps(start(SMALL.replace(steps=1000), 0), SHARD_START + 1, eval_every=0)

    def ratio(losses):
        return losses[SHARD_START] / statistics.median(losses[SHARD_START - 20:SHARD_START])

    assert ratio(run.history["loss"]) > 2.0, f"no spike at the shard: ratio {ratio(run.history['loss']):.2f}"
    assert ratio(reference.history["loss"]) < 1.3, "the reference stream spikes at the same step"
    assert run.history["loss"][:SHARD_START] == reference.history["loss"][:SHARD_START], \
        "the bug changed the run before the shard"


def test_replay_from_a_checkpoint_is_bit_identical_and_a_skip_changes_the_batches(spiked):
    run, _, folder = spiked
    same = replay(PIPE, folder, 300, steps=STEPS - 300)
    assert same.history["loss"] == run.history["loss"]
    assert all(torch.equal(a, b) for a, b in zip(same.model.state_dict().values(), run.model.state_dict().values()))
    log = StepLog()
    other = replay(PIPE, folder, 300, steps=5, skip=SHARD_LEN, log=log)
    assert log.batch == [300 + SHARD_LEN + k for k in range(5)] and other.data_offset == SHARD_LEN
    assert max(other.history["loss"][300:]) < 0.8 * run.history["loss"][SHARD_START]


def test_data_offset_survives_save_and_resume(tmp_path):
    run = train_steps(start(SMALL, 0), 3, eval_every=0)
    run.data_offset = 7
    save_checkpoint(run, tmp_path / "c.pt")
    back = resume(SMALL, tmp_path / "c.pt")
    assert back.data_offset == 7
    log = StepLog()
    train_steps(back, 2, eval_every=0, on_step=log)
    assert log.batch == [10, 11] and log.step == [3, 4]


def test_rewind_and_skip_logs_what_it_left_out_and_changes_the_data_seen(spiked):
    run, log, folder = spiked
    contained, skips = rewind_and_skip(PIPE, folder, SHARD_START, rewind=50, n_skip=60, steps=STEPS - 250)
    (skip,) = skips
    assert (skip.at_step, skip.first, skip.n) == (250, 250, 60)
    assert skip.digest == data_digest(PIPE, 0, range(250, 310)) and "250..309" in str(skip)
    seen = [s + contained.data_offset for s in range(250, STEPS)]
    assert not any(map(is_corrupted, seen)), "the skipped run still trained on the corrupted shard"
    assert data_digest(PIPE, 0, seen) != data_digest(PIPE, 0, log.batch[250:])
    assert token_counts(PIPE, 0, log.batch[250:])[REPEATED_TOKEN] > token_counts(PIPE, 0, seen)[REPEATED_TOKEN]
    assert max(contained.history["loss"][250:]) < 0.8 * max(run.history["loss"][250:])


# ----- the late-spike family in mystery draws, the quarantine, the mystery's grading check ---------
from course.exercises import mystery  # noqa: E402
from course.bugs import catalogue  # noqa: E402
from course.bugs.spike import shard_start  # noqa: E402
from course.toolkit.batch import IGNORE  # noqa: E402
from course.lessons.replay import MYSTERY_PIPE, Quarantine, spike_alerts, spike_symptom  # noqa: E402

LATE_SPIKE = {"corrupted-shard": "batches", "garbled-shard": "batches", "lr-burst": "optimizer_factory",
              "optimizer-state-reset": "update"}


def test_the_family_strikes_at_30_percent_of_the_schedule_and_every_bug_can_be_hidden():
    assert {b.name for b in catalogue("late-spike")} == set(LATE_SPIKE)
    assert shard_start() == SHARD_START == shard_start(SMALL.replace(steps=1000)) and shard_start(MYSTERY_PIPE) == 60
    for name, part in LATE_SPIKE.items():
        pipe = mystery.make(name, 1, MYSTERY_PIPE, salt="unit")
        assert mystery.touched(pipe) == (part,), f"{name} lives in {mystery.touched(pipe)}, expected {part}"
        assert mystery.signature(pipe) == mystery.signature(mystery.make("healthy", 1, MYSTERY_PIPE, salt="unit"))


def test_garbled_shard_keeps_the_inputs_and_randomises_only_the_shards_targets():
    pipe = inject(MYSTERY_PIPE, "garbled-shard")
    start_ = shard_start(pipe)
    for i in (start_ - 1, start_, start_ + SHARD_LEN - 1, start_ + SHARD_LEN):
        got, ref = batch_at(pipe, 0, i), batch_at(MYSTERY_PIPE, 0, i)
        assert torch.equal(got.inputs, ref.inputs), f"index {i}: the inputs changed"
        inside = start_ <= i < start_ + SHARD_LEN
        assert torch.equal(got.targets, ref.targets) != inside, f"index {i}: targets changed={not inside}"
        assert (got.targets != IGNORE).all() and got.targets.max() < MYSTERY_PIPE.n_symbols


def test_optimizer_bugs_log_a_smooth_lr_and_make_a_large_update_at_the_shard_step():
    healthy = train_steps(start(MYSTERY_PIPE, 0), 64, eval_every=0).history
    for name in ("lr-burst", "optimizer-state-reset"):
        h = train_steps(start(inject(MYSTERY_PIPE, name), 0), 64, eval_every=0).history
        assert h["loss"][:61] == healthy["loss"][:61], f"{name} changed the run before step 60"
        assert h["lr"] == healthy["lr"], f"{name}: the logged learning rate must stay the scheduler's"
        assert h["rel_update"][60] > 3 * healthy["rel_update"][60], f"{name}: no large update at step 60"


def test_quarantine_removes_failing_batches_logs_each_once_and_keeps_the_stream_before_them():
    pipe = inject(SMALL.replace(steps=1000), "corrupted-shard")

    def flooded(batch):
        return "flooded" if torch.bincount(batch.inputs.reshape(-1)).max() > 0.5 * batch.inputs.numel() else None

    guard = Quarantine(pipe.batches, flooded)
    guarded = pipe.replace(batches=guard)
    for i in (0, SHARD_START - 1):
        assert torch.equal(batch_at(guarded, 0, i).inputs, batch_at(pipe, 0, i).inputs)
    for k in range(3):
        assert torch.equal(batch_at(guarded, 0, SHARD_START + k).inputs, batch_at(pipe, 0, SHARD_START + SHARD_LEN + k).inputs)
    batch_at(guarded, 0, SHARD_START + 5)
    assert [q.index for q in guard.log] == list(range(SHARD_START, SHARD_START + SHARD_LEN)), guard.log
    assert "quarantined data index 300" in str(guard.log[0])


def test_spike_symptom_is_quiet_on_a_repaired_pipeline_and_sees_the_spike_and_a_replaced_stream():
    broken = mystery.make("garbled-shard", 3, MYSTERY_PIPE, salt="unit")
    assert spike_alerts(broken), "the grading detector missed a garbled shard"
    assert spike_symptom(broken) is not None, "an unfixed garbled shard passed the grading check"
    assert spike_symptom(broken.replace(batches=None)) is None
    constant = broken.replace(batches=lambda pipe, seed, i: batch_at(pipe.replace(batches=None), seed, 0))
    assert "ordinary" in spike_symptom(constant)
