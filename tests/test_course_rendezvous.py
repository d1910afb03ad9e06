"""Specifications of ``course.lessons.rendezvous``: the ranks of a gloo job meet with no port given to
them (rank 0's store picks one and passes it on through the job's folder), and a rank whose rank 0
never comes says so within its timeout instead of waiting for ever.

The ranks are forked from the test process (gloo on 127.0.0.1; both tests together took 3.8 s here).
"""
from __future__ import annotations

import os
import time

from course.lessons import rendezvous


def _rank(folder: str, rank: int, world: int, timeout_s: float) -> None:
    """A forked rank: join, all-reduce rank + 1, write the sum (or the error) to rank<r>.out."""
    code = 1
    try:
        import torch
        import torch.distributed as dist
        torch.set_num_threads(1)
        rendezvous.join(folder, rank, world, timeout_s)
        value = torch.tensor([rank + 1.0])
        dist.all_reduce(value)
        result = f"sum {value.item():g}"
        dist.destroy_process_group()
        code = 0
    except BaseException as err:  # noqa: BLE001 - reported to the test through the file
        result = f"{type(err).__name__}: {err}"
    with open(os.path.join(folder, f"rank{rank}.out"), "w") as f:
        f.write(result)
    os._exit(code)


def _run(folder, ranks, world, timeout_s) -> dict:
    pids = []
    for rank in ranks:
        pid = os.fork()
        if pid == 0:
            _rank(str(folder), rank, world, timeout_s)
        pids.append(pid)
    end = time.monotonic() + 30
    while pids and time.monotonic() < end:
        pids = [p for p in pids if os.waitpid(p, os.WNOHANG) == (0, 0)]
        time.sleep(0.05)
    for pid in pids:  # still running after 30 s: the rank waits for ever
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert not pids, f"ranks {ranks} were still running after 30 s"
    return {r: (folder / f"rank{r}.out").read_text() for r in ranks}


def test_three_ranks_meet_on_the_port_rank_0_wrote_and_all_reduce(tmp_path):
    out = _run(tmp_path, [0, 1, 2], world=3, timeout_s=20)
    assert out == {0: "sum 6", 1: "sum 6", 2: "sum 6"}, f"the ranks did not all-reduce 1 + 2 + 3: {out}"
    port = int((tmp_path / "port").read_text())
    assert 0 < port < 65536, f"rank 0 wrote {port!r} as its store's port"


def test_a_rank_whose_rank_0_never_starts_times_out_naming_it(tmp_path):
    start = time.monotonic()
    out = _run(tmp_path, [1], world=2, timeout_s=1.0)
    took = time.monotonic() - start
    assert out[1].startswith("TimeoutError") and "rank 0" in out[1], out[1]
    assert took < 10, f"a 1 s rendezvous timeout took {took:.1f} s to end the rank"

