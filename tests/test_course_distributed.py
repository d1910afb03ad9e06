"""Specifications of ``course.lessons.distributed``: the checksum tells replicas apart (and a plain sum would
not), two real gloo ranks agree until one skips an update, the all-reduce verdict matches a direct
comparison of the parameters, and a failing or slow rank ends the call promptly with no child left.

Each ``run_ranks`` call starts two Python processes, forked from a fork server that imports torch
once, at the first call (a few seconds on an idle 2-core machine); later calls fork in well under a
second. The file makes four such calls.
"""

from __future__ import annotations

import os
import time

import pytest
import torch

from course.lessons.distributed import RankFailed, checksum, run_ranks


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_checksum_sees_a_tiny_change_and_a_swap_that_a_plain_sum_misses():
    model = torch.nn.Linear(4, 3)
    a = checksum(model)
    with torch.no_grad():
        model.weight[1, 2] += 1e-6
    assert not torch.equal(checksum(model), a), "a change of 1e-6 in one weight left the checksum unchanged"
    with torch.no_grad():
        model.weight[1, 2] -= 1e-6
        w = model.weight.clone()
        model.weight[0, 0], model.weight[2, 3] = w[2, 3], w[0, 0]
    b = checksum(model)
    assert b[0] == pytest.approx(a[0].item(), abs=1e-12), "control: the plain sum cannot see a swap"
    assert b[1] != a[1], "the position-weighted sum must see two values swapped"


@pytest.fixture(scope="module")
def replicas():
    return run_ranks({"agree": [], "skip": [(1, 3)]}, steps=6)


def test_ranks_that_all_step_stay_bit_identical(replicas):
    r = replicas["agree"]
    assert r.agree == [True] * 6 and r.max_param_diff == [0.0] * 6
    assert r.checksums[0] == r.checksums[1]
    assert r.first_disagreement() is None


def test_a_rank_that_skips_one_update_diverges_and_the_checksum_allreduce_sees_it(replicas):
    r = replicas["skip"]
    assert r.skipped[1] == [False, False, False, True, False, False] and not any(r.skipped[0])
    assert r.agree == [True, True, True, False, False, False], r.agree
    assert r.first_disagreement() == 3
    # the verdict matches a direct comparison of the parameters at every step
    assert [d == 0.0 for d in r.max_param_diff] == r.agree, r.max_param_diff
    assert r.max_param_diff[5] > r.max_param_diff[3] > 0, "the replicas should drift further apart after the skip"


def test_a_rank_that_raises_ends_the_call_promptly_with_its_name_and_no_orphans():
    t0 = time.monotonic()
    with pytest.raises(RankFailed, match=r"rank 1 failed: RuntimeError: injected failure on rank 1 at step 2") as info:
        run_ranks({"crash": []}, steps=6, fail=(1, 2), timeout_s=20, deadline_s=120)
    assert time.monotonic() - t0 < 90, "a failing rank took too long to be reported"
    assert len(info.value.pids) == 2 and all(_gone(p) for p in info.value.pids), "a child process outlived the call"


def test_ranks_past_the_deadline_are_killed():
    t0 = time.monotonic()
    with pytest.raises(RankFailed, match="not done after") as info:
        # ranks forked from a warm fork server start in milliseconds: enough steps that they cannot finish
        run_ranks({"slow": []}, steps=100, deadline_s=0.1)
    assert time.monotonic() - t0 < 30
    assert all(_gone(p) for p in info.value.pids)
