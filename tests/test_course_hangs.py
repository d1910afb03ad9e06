"""Specifications of ``course.lessons.hangs``: each hang is produced and diagnosed (stacks by py-spy
and by faulthandler, the issued collectives, the process-group timeout), a healthy job is not
flagged by the same checks (the negative control), a handle works in a sealed graded call, and no
process a test started outlives it: the ``no_orphans`` fixture records every pid the test's jobs
and launchers had and fails the test if one is still alive after it.

One launcher serves the file (it imports torch once, 2-3 s); a job starts in well under a second.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from course.lessons import hangs


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class _Tracker:
    def __init__(self):
        self.pids: list[int] = []
        self.jobs: list[hangs.Job] = []

    def start(self, *args, **kwargs) -> hangs.Job:
        job = hangs.start(*args, **kwargs)
        self.jobs.append(job)
        self.pids += job.pids()
        return job


@pytest.fixture(scope="module")
def launcher():
    started = hangs.launcher()
    yield started
    started.close()
    assert not _alive(started.pid), "the launcher outlived its close()"


@pytest.fixture
def no_orphans(launcher):
    tracker = _Tracker()
    yield tracker
    for job in tracker.jobs:
        job.close()
    time.sleep(0.1)
    left = [pid for pid in tracker.pids if _alive(pid)]
    assert not left, f"ranks still alive after the test: {left}"


def _hung(job: hangs.Job, timeout_s: float = 8.0) -> str:
    with pytest.raises(hangs.Hung) as err:
        job.join(timeout_s)
    return str(err.value)


def test_a_healthy_job_finishes_and_its_ranks_agree(no_orphans):
    job = no_orphans.start("healthy", seed=1)
    job.join(30)
    status = job.status()
    assert [r["code"] for r in status] == [0] * job.world and [r["step"] for r in status] == [job.steps - 1] * job.world
    seqs = job.collectives()
    assert hangs.agree(seqs) is None and len({len(s) for s in seqs}) == 1, seqs
    seen = sorted(i for rank in job.examples_seen() for i in rank)
    assert seen == list(range(job.n_examples)), "a healthy job trains on every example once"
    assert all("exited" in s for s in job.stacks()), "a finished rank has no stack to dump"
    times = [t for rank in job.timeline() for t, _ in rank]
    assert times and 0 <= min(times) and max(times) < 30, \
        f"timeline gives seconds since the job's first event, not clock times: {min(times)}..{max(times)}"


def test_a_skipped_collective_hangs_and_the_sequences_disagree(no_orphans):
    job = no_orphans.start("collective-skipped", seed=1)
    message = _hung(job, 4)
    assert "did not finish within 4" in message and "job.stacks()" in message
    seqs = job.collectives()
    at = hangs.agree(seqs)
    assert at is not None, seqs
    last = sorted({s[-1][0] for s in seqs})
    assert last == ["all_reduce", "barrier"], f"the ranks wait in different collectives: {seqs}"
    stacks = job.stacks()
    assert sum("all_reduce (torch/distributed" in s for s in stacks) == 2
    assert sum("barrier (torch/distributed" in s for s in stacks) == 1


def test_a_barrier_never_reached_shows_one_rank_in_the_barrier_the_others_polling(no_orphans):
    job = no_orphans.start("barrier-unreached", seed=1)
    _hung(job, 4)
    seqs = job.collectives()
    assert hangs.agree(seqs) is None, "rank 0 is ahead by one collective, not in a different one"
    assert seqs[0][-1][0] == "barrier" and len(seqs[0]) == len(seqs[1]) + 1
    stacks = job.stacks()
    assert "barrier (torch/distributed" in stacks[0]
    assert all("_wait_for_checkpoint" in s for s in stacks[1:])
    assert all("_wait_for_checkpoint" in s for s in job.stacks("faulthandler")[1:]), "the second route sees it too"


def test_a_loader_deadlock_shows_the_worker_thread_waiting_on_its_own_lock(no_orphans):
    job = no_orphans.start("loader-deadlock", seed=1)
    _hung(job, 4)
    seqs = job.collectives()
    short = min(range(job.world), key=lambda r: len(seqs[r]))
    stacks = job.stacks()
    assert "Queue.get" in stacks[short] and "_Loader._tally" in stacks[short] and '"data-worker"' in stacks[short]
    assert all("all_reduce (torch/distributed" in s for r, s in enumerate(stacks) if r != short)
    dump = job.stacks("faulthandler")[short]
    assert "in _tally" in dump and "in next_batch" in dump


def test_a_process_group_timeout_turns_the_hang_into_an_error_naming_the_collective(no_orphans):
    job = no_orphans.start("collective-skipped", seed=1, timeout_s=2)
    with pytest.raises(RuntimeError) as err:
        job.join(20)
    assert not isinstance(err.value, hangs.Hung)
    assert "all_reduce at step" in str(err.value) or "barrier at step" in str(err.value), str(err.value)


def test_healthy_is_not_flagged_by_the_checks_that_flag_hangs(no_orphans):
    # the negative control of the tests above: the same checks on a healthy job of every seed used
    for seed in (1, 2, 3):
        job = no_orphans.start("healthy", seed=seed)
        job.join(30)
        assert hangs.agree(job.collectives()) is None
        assert job.finished() and not job.failed()


def test_a_job_says_nothing_of_its_kind_in_its_fields_or_repr(no_orphans):
    jobs = [no_orphans.start(kind, seed=4) for kind in hangs.KINDS]
    shown = {(repr(j), j.world, j.steps, j.n_examples, j.batch_size) for j in jobs}
    assert len(shown) == 1, shown
    assert len({j.token for j in jobs}) == len(jobs)


def test_ranks_die_with_their_launcher(no_orphans):
    own = hangs.Launcher()
    plan = hangs._plan("barrier-unreached", 1, "")
    token = hangs._request(own.address, {"op": "start", "plan": plan})["job"]
    pids = hangs._request(own.address, {"op": "pids", "job": token})["pids"]
    no_orphans.pids += pids + [own.pid]
    time.sleep(1)
    os.kill(own.pid, signal.SIGKILL)
    own.process.wait()
    end = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids), "a rank outlived its launcher"
    own.close()


def test_within_budget_cuts_off_a_detector_that_waits_forever(no_orphans):
    job = no_orphans.start("loader-deadlock", seed=2, budget_s=1.0)
    started = time.monotonic()
    with pytest.raises(AssertionError, match="did not return within"):
        hangs.within_budget(lambda j: j.join(1e6), slack_s=0.5)(job)
    assert time.monotonic() - started < 5
    assert hangs.within_budget(lambda j: j.world)(job) == 3, "control: a quick answer comes back"


def test_a_handle_works_in_a_sealed_graded_call_where_processes_are_refused(no_orphans):
    from course.exercises.isolation import run_apart

    job = no_orphans.start("barrier-unreached", seed=3)

    def look(j):
        time.sleep(1.5)
        stacks = j.stacks()
        try:
            os.fork()
            forked = "forked"
        except PermissionError:
            forked = "refused"
        return [forked, sum("_wait_for_checkpoint" in s for s in stacks), [r["exited"] for r in j.status()]]

    [outcome] = run_apart(look, [job], lambda case, value: value)
    assert outcome.get() == ["refused", 2, [False] * 3]


def test_shard_problems_flags_the_default_plan_and_accepts_a_merged_last_batch():
    n, batch, world = 31, 6, 3
    plan = hangs.default_shards(n, batch, world)
    assert any("empty" in p for p in hangs.shard_problems(plan, n, batch, world))
    ids = list(range(n))
    steps = [ids[i:i + batch] for i in range(0, n - n % batch, batch)]
    steps[-1] += ids[n - n % batch:]
    merged = [[s[r::world] for r in range(world)] for s in steps]
    assert hangs.shard_problems(merged, n, batch, world) == []
    dropped = [[s[r::world] for r in range(world)] for s in [ids[i:i + batch] for i in range(0, n - n % batch, batch)]]
    assert any("never used" in p for p in hangs.shard_problems(dropped, n, batch, world))


def test_shard_problems_wants_the_batch_size_kept_and_accepts_a_padded_last_batch():
    """One example per rank per step (red team 14) has no empty shard and uses every example once, but
    trains on batches of ``world``, not ``batch_size``: refused. Padding the short last batch with
    repeated examples (as DistributedSampler does) keeps every other step whole: accepted."""
    n, batch, world = 31, 6, 3
    round_robin = [[[(k + r) % n] for r in range(world)] for k in range(0, n, world)]
    found = hangs.shard_problems(round_robin, n, batch, world)
    assert any("keeps the batch size" in p for p in found), found
    assert not any("empty" in p or "never used" in p or "more than twice" in p for p in found), found
    ids = list(range(n))
    steps = [ids[i:i + batch] for i in range(0, n, batch)]
    steps[-1] = steps[-1] + ids[:world - len(steps[-1])]
    padded = [[s[r::world] for r in range(world)] for s in steps]
    assert hangs.shard_problems(padded, n, batch, world) == []


def test_a_merged_plan_fixes_the_skipped_collective(no_orphans):
    job0 = no_orphans.start("collective-skipped", seed=5)
    n, batch, world = job0.n_examples, job0.batch_size, job0.world
    ids = list(range(n))
    steps = [ids[i:i + batch] for i in range(0, n - n % batch, batch)]
    steps[-1] += ids[n - n % batch:]
    job = no_orphans.start("collective-skipped", seed=5, shards=[[s[r::world] for r in range(world)] for s in steps])
    job.join(30)
    assert sorted(i for r in job.examples_seen() for i in r) == ids
    _hung(job0, 1)


def test_the_faulthandler_watchdog_dumps_a_stuck_rank_and_stays_quiet_on_a_healthy_job(no_orphans):
    stuck = no_orphans.start("loader-deadlock", seed=1, watchdog_s=1.0)
    healthy = no_orphans.start("healthy", seed=1, watchdog_s=1.0)
    healthy.join(30)
    _hung(stuck, 3)
    dumps = stuck.watchdog()
    short = min(range(stuck.world), key=lambda r: len(stuck.collectives()[r]))
    assert "Timeout (0:00:01)!" in dumps[short] and "in _tally" in dumps[short], dumps[short][:300]
    assert all("in all_reduce" in d for r, d in enumerate(dumps) if r != short)
    assert healthy.watchdog() == ["", "", ""], "a healthy job's ranks never stall for a second"


def test_the_launcher_runs_only_the_packages_code(tmp_path, monkeypatch):
    """A launcher started after a notebook put a ``sitecustomize`` on ``PYTHONPATH`` does not run it
    (red team, run 11: it ran inside the launcher and told the ranks' plans). Control: a plain
    Python started with the same environment runs it."""
    import subprocess
    import sys

    marker = tmp_path / "ran"
    (tmp_path / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert marker.exists(), "control: the planted sitecustomize should run in a plain Python"
    marker.unlink()
    launcher = hangs.Launcher()
    try:
        assert launcher.alive()
    finally:
        launcher.close()
    assert not marker.exists(), "the launcher ran a sitecustomize from the notebook's PYTHONPATH"
