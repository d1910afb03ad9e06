"""course.toolkit.phases, course.lessons.throughput and the throughput bugs: each check with its negative control."""

import statistics

import pytest
import torch

from course.exercises import mystery
from course.lessons import throughput as tp
from course.bugs import catalogue, inject
from course.toolkit.phases import PHASES, CostModel, WallClock, active, charge
from course.reference.train import start, train_steps
from tests.small_pipeline import SMALL

torch.set_num_threads(1)

KIND = {"sync-checkpoint-every-k": "checkpoint", "eval-every-step": "eval", "item-per-parameter-logging": "logging",
        "log-whole-history-every-step": "logging", "data-source-stalls": "data",
        "collate-quadratic-in-length": "data"}


@pytest.fixture(scope="module")
def baseline():
    return tp.traced(SMALL, seed=1)


def test_every_bug_of_the_family_is_listed_here():
    assert {b.name for b in catalogue("throughput")} == set(KIND)


def test_loop_records_every_phase_of_every_step():
    run = train_steps(start(SMALL, 0), 5, eval_every=2)
    assert set(run.phases) == set(PHASES)
    assert all(len(v) == 5 for v in run.phases.values())
    assert all(t >= 0 for v in run.phases.values() for t in v)
    fb = [a + b for a, b in zip(run.phases["fwd"], run.phases["bwd"])]
    assert run.history["t_fwd_bwd"] == fb
    assert run.val["step"] == [2, 4]


def test_cost_model_is_seeded():
    def trace(seed):
        run = train_steps(start(SMALL, 0), 6, eval_every=0, clock=CostModel(seed, 256, 1000))
        return run.phases
    assert trace(3) == trace(3)
    assert trace(3) != trace(4)  # negative control: another seed, another trace


def test_charge_sleeps_on_the_wall_clock_and_adds_on_the_cost_model():
    wall = WallClock()
    with active(wall):
        wall.lap()
        charge(0.02)
        assert wall.lap("data") >= 0.02
        charge(5.0, modelled_only=True)  # modelled only: the wall clock does not sleep
        assert wall.lap("data") < 1.0
    model = CostModel(0, 256, 1000, sigma=0.0, hiccup=0.0)
    with active(model):
        model.lap()
        plain = model.lap("data")
        charge(0.5)
        assert model.lap("data") == pytest.approx(plain + 0.5)


def test_healthy_traces_are_quiet(baseline):
    for seed in (0, 2, 3, 4):
        assert tp.regressions(tp.traced(SMALL, seed), baseline) == {}
        assert tp.slow_phase(tp.traced(SMALL, seed), baseline) == "healthy"


@pytest.mark.parametrize("name", sorted(KIND))
def test_each_bug_slows_its_phase(name, baseline):
    run = tp.traced(inject(SMALL, name), seed=0)
    found = tp.regressions(run, baseline)
    assert list(found) == [{"checkpoint": "ckpt", "eval": "eval", "logging": "log", "data": "data"}[KIND[name]]]
    assert tp.slow_phase(run, baseline) == KIND[name]


def test_mystery_draws_of_the_family_are_opaque_and_detected(baseline):
    names = ["healthy", *KIND]
    sigs = set()
    for i, name in enumerate(names):
        p = mystery.make(name, i, SMALL, salt="unit")
        sigs.add(tuple((f, t) for f, t, r in mystery.signature(p) if f not in ("language_seed", "data_seed", "val_seed", "lr", "warmup")))
        run = tp.traced(p, seed=0)
        assert tp.slow_phase(run, baseline) == ("healthy" if name == "healthy" else KIND[name]), name
    assert len(sigs) == 1


def test_sync_checkpoint_slows_only_its_own_steps(baseline):
    from course.bugs.throughput import SyncCheckpoint
    run = tp.traced(SMALL.replace(checkpoint=SyncCheckpoint(8)), seed=0)
    slow = [s for s, t in enumerate(run.phases["ckpt"]) if t > 1e-3]
    assert slow == list(range(7, tp.TRACE_STEPS, 8))  # run.step == s + 1 is a multiple of 8
    others = [t for s, t in enumerate(tp.step_times(run)) if s not in slow]
    assert max(others[1:]) < 3 * min(tp.step_times(run)[s] for s in slow)


def test_interval_explorer_text_lists_every_interval_against_the_stated_reference():
    from course.bugs.throughput import SyncCheckpoint
    traces = {k: tp.traced(SMALL.replace(checkpoint=SyncCheckpoint(k)), seed=0) for k in (2, 8)}
    box = tp.interval_explorer(traces)
    text = box._repr_mimebundle_()["text/plain"]
    lines = text.splitlines()
    assert [line.split(":")[0] for line in lines] == ["save every 2 steps", "save every 8 steps"], text
    ref = statistics.median(tp.step_times(traces[8]))
    assert all(f"save-every-8 run ({1e3 * ref:.2f} ms)" in line for line in lines), text
    slow = sum(t > 2 * ref for t in tp.step_times(traces[2]))
    assert f"; {slow} of {len(tp.step_times(traces[2]))} steps over twice" in lines[0], text
    assert "save every save every" not in text and not text.startswith("save every 2:"), text


def test_the_checkpoint_controls_split_the_save_from_the_modelled_disk():
    from course.bugs.throughput import SyncCheckpoint
    bug = tp.traced(SMALL.replace(checkpoint=SyncCheckpoint(4)), seed=0).phases["ckpt"]
    disk = tp.traced(SMALL.replace(checkpoint=tp.DiskWithoutSave(4, tp.saved_bytes(SMALL))), seed=0).phases["ckpt"]
    save = tp.traced(SMALL.replace(checkpoint=tp.SaveWithoutDisk(4)), seed=0).phases["ckpt"]
    assert any(bug), "the bug charges its modelled disk on its saving steps"
    assert disk == pytest.approx(bug), "the disk-only control waits as long as the bug, on the same steps"
    assert not any(save), "the save-only control charges no modelled disk"
    assert tp.DiskWithoutSave(4, 1) != tp.DiskWithoutSave(4, 2)  # the size is a setting of the control


def test_after_save_finds_the_slow_saving_steps_and_not_a_quiet_run():
    from course.bugs.throughput import DISK_BYTES_PER_S
    slow = tp.after_save(SMALL.replace(checkpoint=tp.DiskWithoutSave(4, int(DISK_BYTES_PER_S * 0.02))), every=4, steps=16)
    quiet = tp.after_save(SMALL, every=4, steps=16)
    assert slow["saving"] > slow["others"] + 0.015, "a 20 ms wait on every saving step shows in their median"
    assert quiet["saving"] < quiet["others"] + 0.015, "nothing saved: the same positions are not 20 ms slower"
    assert slow["q1"] <= slow["others"] <= slow["q3"]


def test_race_live_state_differs_and_snapshot_is_exact():
    live = tp.race(SMALL, tp.live_state, save_at=3, steps_after=2)
    assert live.differ and not live.exact
    copied = tp.race(SMALL, tp.snapshot, save_at=3, steps_after=2)
    assert copied.exact and copied.compared == live.compared


def test_race_names_the_step_each_saved_tensor_comes_from():
    """live: every tensor is the last step's, the lr the requested step's; model_first: two steps in one
    file; snapshot (the control): all the requested step's."""
    live = tp.race(SMALL, tp.live_state, save_at=3, steps_after=2)
    assert set(live.from_step.values()) == {5} and live.lr_from == 3
    mixed = tp.race(SMALL, tp.model_first, save_at=3, steps_after=2)
    assert {k for n, k in mixed.from_step.items() if n.startswith("/model")} == {3}
    assert {k for n, k in mixed.from_step.items() if n.startswith("/optimizer")} == {5}
    copied = tp.race(SMALL, tp.snapshot, save_at=3, steps_after=2)
    assert set(copied.from_step.values()) == {3} and copied.lr_from == 3


def test_loop_extras_times_the_loops_telemetry_without_training():
    run = start(SMALL, 0)
    before = [p.detach().clone() for p in run.model.parameters()]
    extras = tp.loop_extras(run, repeats=3)
    assert extras["bwd"] > 0 and extras["opt"] > 0
    assert all(torch.equal(a, b) for a, b in zip(before, run.model.parameters()))


def test_race_catches_a_snapshot_that_copies_the_model_only():
    def model_only(model, optimizer):
        return {"model": {k: v.clone() for k, v in model.state_dict().items()}, "optimizer": optimizer.state_dict()}
    r = tp.race(SMALL, model_only, save_at=3, steps_after=2)
    assert r.differ and all(n.startswith("/optimizer") for n in r.differ)


def test_race_catches_a_missing_part_and_a_snapshot_that_changes_training():
    assert tp.race(SMALL, lambda m, o: {"model": tp.snapshot(m, o)["model"]}, 3, 1).missing

    def meddles(model, optimizer):
        out = tp.snapshot(model, optimizer)
        with torch.no_grad():
            next(model.parameters()).add_(1.0)
        return out
    assert tp.race(SMALL, meddles, 3, 1).run_changed


def test_resume_from_a_snapshot_is_bit_identical():
    import copy
    run = train_steps(start(SMALL, 0), 4, eval_every=0)
    state, sched = tp.snapshot(run.model, run.optimizer), copy.deepcopy(run.scheduler.state_dict())
    resumed = train_steps(tp.resume_from(SMALL, state, sched, 4), 5, eval_every=0)
    full = train_steps(start(SMALL, 0), 9, eval_every=0)
    assert tp.same_parameters(resumed.model, full.model)
    # negative control: resuming without the scheduler's state changes the learning rates
    other = train_steps(tp.resume_from(SMALL, state, start(SMALL, 0).scheduler.state_dict(), 4), 5, eval_every=0)
    assert not tp.same_parameters(other.model, full.model)


def test_flop_count_matches_the_rule_with_attention():
    counted, by_op = tp.counted_flops(SMALL)
    rule = tp.rule_flops(SMALL)
    assert counted == rule["total"]
    assert counted != rule["6N"]  # without attention the rule misses the bmm FLOPs
    assert by_op["bmm"] == rule["attention"]


def test_real_tokens_below_positions_only_with_padding():
    full = tp.traced(SMALL, 0)
    assert tp.tokens_per_second(full, real=True) == tp.tokens_per_second(full, real=False)
    padded = tp.traced(SMALL.replace(min_len=4), 0)
    real, pos = tp.tokens_per_second(padded, True), tp.tokens_per_second(padded, False)
    assert all(r <= p for r, p in zip(real, pos)) and sum(real) < 0.9 * sum(pos)


def test_matmul_peak_and_overhead_are_positive():
    assert tp.matmul_peak(64, repeats=2, rounds=2) > 0
    o = tp.overhead(start(SMALL, 0), blocks=2, block=3)
    assert o["on"] > 0 and o["off"] > 0


def test_profile_steps_records_the_active_steps():
    prof = tp.profile_steps(start(SMALL, 0), wait=1, warmup=1, active=2)
    names = {e.key for e in prof.key_averages()}
    assert "aten::mm" in names or "aten::addmm" in names
