"""Two data-parallel ranks with real ``torch.distributed`` (gloo, two processes on this machine).

``run_ranks`` starts ``world`` processes with ``torch.multiprocessing`` (start method
``forkserver``, so it works from a notebook: the worker is this module's ``_worker``, importable by
the children), joined over TCP on 127.0.0.1 (``rendezvous``: rank 0 listens on a port the system
picks and passes its number on through a file). The fork server is a fresh Python
process that imports torch (and what an optimizer's first use imports) once, when the first call
needs it or when ``start_fork_server`` asks for it earlier; every rank of every later call is forked
from it, so a call does not pay for importing torch in each child (``spawn`` would, on every call).
Each rank builds the same model from the same seed, trains on its half of every batch, averages
gradients with ``all_reduce`` (what DDP does), clips and steps. A *skip* ``(rank, step)`` makes that
rank leave out its optimizer update at that step, the way a rank-local decision (a local spike
alert, a local "skip this batch" rule) would. After every step each rank computes a parameter
checksum and all-reduces it with MAX and MIN: the two results are equal exactly when every rank
computed the same checksum. Different checksums prove the replicas differ; equal ones do not prove
they agree (see below). Every rank also saves its parameters per step, so the checksum's verdict can
be checked against a direct comparison.

The checksum is two float64 numbers, the plain sum and a sum weighted by a fixed pseudo-random weight
per position (so moving a value to another position changes it). It detects disagreement; it
cannot say which replica is right, it covers the parameters only (not the optimizer state), and
different parameter vectors can share a checksum: changing four weights at positions i, i+d, i+2d,
i+3d by +a, -a, -a, +a leaves both sums unchanged, often to the last bit (notebook 04 finds one).

Shutdown is part of the contract: ``init_process_group`` and every collective have a timeout; each
rank calls ``destroy_process_group`` in ``finally``; the parent waits at most ``deadline_s`` and then
kills what is left; a rank that raises makes ``run_ranks`` raise ``RankFailed`` naming it, after every
child has exited. Children write their stdout/stderr to log files, never to the caller's streams
(under nbgrader any stderr in a test cell scores it 0).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from . import rendezvous

WORLD = 2


class RankFailed(RuntimeError):
    """A rank raised or died; ``pids`` are the child processes, all exited when this is raised."""

    def __init__(self, message: str, pids: list[int]):
        super().__init__(message)
        self.pids = pids


def checksum(model: torch.nn.Module) -> torch.Tensor:
    """float64 ``[sum(theta), sum(w_i * theta_i)]`` over every parameter, ``w_i`` in [0.5, 1.5)
    fixed per position (a golden-ratio sequence)."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()
    w = (torch.arange(flat.numel(), dtype=torch.float64) * 0.6180339887498949) % 1.0 + 0.5
    return torch.stack([flat.sum(), (w * flat).sum()])


def replicas_agree(model: torch.nn.Module) -> bool:
    """Collective (every rank must call it): True on every rank iff all ranks' checksums are equal."""
    import torch.distributed as dist

    hi, lo = checksum(model), checksum(model)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    return bool(torch.equal(hi, lo))


_PRELOAD = ["course.lessons.distributed", "torch.distributed", "torch._dynamo"]


def start_fork_server() -> None:
    """Start the fork server the ranks are forked from, if it is not running: it returns at once and
    the server imports torch in the background (a notebook calls it early so that the import overlaps
    other work). The server preloads this module, ``torch.distributed`` and ``torch._dynamo``
    (imported lazily by an optimizer's first use); the preload list only matters when the server
    starts, so setting it again while one runs changes nothing."""
    import multiprocessing.forkserver as forkserver

    forkserver.set_forkserver_preload(_PRELOAD)
    forkserver.ensure_running()


def _pipe():
    from .replay import SPIKE_PIPE

    return SPIKE_PIPE.replace(n_train=512, batch_size=16)


def _train_scenarios(rank, world, scenarios, steps, fail, seed):
    """The ranks' training loop (runs inside a process group): returns scenario name -> rows."""
    import torch.distributed as dist

    from ..reference.train import batch_at

    pipe = _pipe()
    results = {}
    for name, skips in scenarios.items():
        model = pipe.build_model(seed)
        opt = pipe.make_optimizer(model, pipe)
        rows = []
        for step in range(steps):
            if fail is not None and tuple(fail) == (rank, step):
                raise RuntimeError(f"injected failure on rank {rank} at step {step}")
            batch = batch_at(pipe, seed, step)
            mine = slice(rank, None, world)  # this rank's half of the global batch
            logits = model(batch.inputs[mine])
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.targets[mine].flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            dist.all_reduce(grads, op=dist.ReduceOp.SUM)  # one collective for every gradient
            torch.nn.utils.vector_to_parameters(grads / world, [p.grad for p in model.parameters()])
            torch.nn.utils.clip_grad_norm_(model.parameters(), pipe.clip)
            skipped = (rank, step) in {tuple(s) for s in skips}
            if not skipped:
                opt.step()
            rows.append({"step": step, "loss": loss.item(), "skipped": skipped,
                         "checksum": checksum(model).tolist(), "agree": replicas_agree(model),
                         "params": torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()})
        results[name] = rows
    return results


def _write_error(folder: Path, rank: int, err: BaseException) -> None:
    """``rank<r>.error``: the system-wide monotonic clock in ns when the error was caught, then the
    error's one-line summary (the clock orders the ranks' failures; file times are too coarse)."""
    summary = f"{type(err).__name__}: {err}".splitlines()[0]
    (folder / f"rank{rank}.error").write_text(f"{time.monotonic_ns()} {summary}")


def _worker(rank, world, folder, scenarios, steps, fail, timeout_s, seed):
    """One rank's process. Its stdout/stderr go to ``rank<r>.log``; its results to ``rank<r>.pt``; an
    exception's one-line summary to ``rank<r>.error``, then the process exits with code 1."""
    folder = Path(folder)
    log = os.open(folder / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)
    os.dup2(log, 2)
    torch.set_num_threads(1)
    import torch.distributed as dist

    code = 1
    try:
        print(f"rank {rank} started at {time.time():.2f}", flush=True)
        rendezvous.join(str(folder), rank, world, timeout_s)
        try:
            results = _train_scenarios(rank, world, scenarios, steps, fail, seed)
            torch.save(results, folder / f"rank{rank}.pt")
            code = 0
        except BaseException as err:
            # written before the process group is torn down (which resets the peers' connections),
            # so the first rank to fail writes its error first
            _write_error(folder, rank, err)
            raise
        finally:
            dist.destroy_process_group()
    except BaseException as err:  # noqa: BLE001 - reported to the parent, then the process ends
        import traceback

        traceback.print_exc()
        if not (folder / f"rank{rank}.error").exists():
            _write_error(folder, rank, err)
    print(f"rank {rank} ends with code {code} at {time.time():.2f}", flush=True)
    # os._exit skips the interpreter's teardown of torch (seconds on a busy machine) and makes a
    # failing rank release its sockets at once, so its peers' collectives fail fast.
    os._exit(code)


@dataclass
class Replicas:
    """One scenario's record: per step, each rank's checksum, what the all-reduce said, whether each
    rank skipped, and the largest parameter difference between ranks measured directly."""

    steps: list[int]
    checksums: list[list[list[float]]]  # [rank][step] -> [sum, weighted sum]
    agree: list[bool]  # the all-reduce's verdict per step (the same on every rank)
    skipped: list[list[bool]]  # [rank][step]
    max_param_diff: list[float]  # direct comparison of rank 0 and rank 1, per step

    def first_disagreement(self) -> int | None:
        return next((s for s, ok in zip(self.steps, self.agree) if not ok), None)


def run_ranks(scenarios: dict[str, list[tuple[int, int]]], steps: int = 6, fail: tuple[int, int] | None = None,
              seed: int = 0, timeout_s: float = 20.0, deadline_s: float = 120.0) -> dict[str, Replicas]:
    """Run every scenario (name -> list of ``(rank, step)`` skips) on ``WORLD`` gloo ranks, one
    process each, ``steps`` steps each; ``fail=(rank, step)`` makes that rank raise there.

    Returns name -> ``Replicas``. Raises ``RankFailed`` if a rank fails, ``TimeoutError`` (a
    ``RankFailed``) if the ranks are not done within ``deadline_s``; no child outlives the call."""
    import logging

    import torch.multiprocessing as mp

    # torch logs a warning (to stderr) when it terminates the surviving ranks after a failure; the
    # failure is reported by the exception instead
    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    level = spawn_log.level
    spawn_log.setLevel(logging.ERROR)
    folder = tempfile.mkdtemp(prefix="ranks-")
    start_fork_server()
    ctx = mp.start_processes(_worker, args=(WORLD, folder, scenarios, steps, fail, timeout_s, seed),
                             nprocs=WORLD, join=False, start_method="forkserver")
    pids = [p.pid for p in ctx.processes]
    end = time.monotonic() + deadline_s
    try:
        while not ctx.join(timeout=0.1):
            if time.monotonic() > end:
                raise RankFailed(f"ranks not done after {deadline_s} s; killed (logs in {folder})", pids)
    except mp.ProcessRaisedException as err:  # raised outside the worker's own handler
        last = str(err).strip().splitlines()[-1]
        raise RankFailed(f"rank {err.error_index} failed: {last}", pids) from None
    except mp.ProcessExitedException as err:
        exited = err
    else:
        exited = None
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
            p.join()
        spawn_log.setLevel(level)
    if exited is not None:
        # When one rank fails, its peer fails next in a collective (connection reset); both can exit
        # before the parent looks. Name the rank that failed first: the one whose error was caught
        # first by the monotonic clock (a rank records its error before tearing down its
        # connections, so a peer's error, caused by that teardown, is always recorded later).
        errors = sorted((int(when), int(f.stem[4:]), detail) for f in Path(folder).glob("rank*.error")
                        for when, detail in [f.read_text().split(" ", 1)])
        if errors:
            _, rank, detail = errors[0]
        else:
            rank, detail = exited.error_index, f"exited with code {exited.exit_code}"
        raise RankFailed(f"rank {rank} failed: {detail} (logs in {folder})", pids)
    per_rank = [torch.load(Path(folder) / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    shutil.rmtree(folder, ignore_errors=True)  # kept only when a rank failed (its logs are named above)
    out = {}
    for name in scenarios:
        rows = [per_rank[r][name] for r in range(WORLD)]
        out[name] = Replicas(
            steps=[row["step"] for row in rows[0]],
            checksums=[[row["checksum"] for row in rows[r]] for r in range(WORLD)],
            agree=[row["agree"] for row in rows[0]],
            skipped=[[row["skipped"] for row in rows[r]] for r in range(WORLD)],
            max_param_diff=[(a["params"] - b["params"]).abs().max().item() for a, b in zip(rows[0], rows[1])],
        )
    return out
