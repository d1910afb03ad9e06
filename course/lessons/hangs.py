"""Training jobs that hang, on real gloo ranks, and a handle to look inside a running one.

A *job* is ``world`` (3) ranks, real ``torch.distributed`` processes (gloo over TCP on
127.0.0.1), training one linear model data-parallel: per step each rank takes its shard of the
global batch from a data-loading worker (a thread and a queue, as a DataLoader's prefetching does),
computes its gradient, all-reduces ``[gradient, example count, loss]`` (one collective), steps;
every ``ckpt_every`` steps rank 0 writes a checkpoint that the other ranks read, around a
``barrier``; after the last step every rank meets at a final ``barrier``. Three hangs can be put in:

* ``collective-skipped``: a rank whose shard is empty (the uneven last batch) skips the step, so it
  issues the final ``barrier`` while the others wait in the step's ``all_reduce``;
* ``barrier-unreached``: at one checkpoint rank 0 enters the barrier before writing the file that
  the other ranks wait for before *their* barrier: rank 0 waits in the barrier, the others poll;
* ``loader-deadlock``: one rank's data worker takes its own (non-reentrant) lock again at one step;
  that rank waits forever on its queue, the others in the step's ``all_reduce``.

The **handle** (``Job``) gives, while the job runs: each rank's progress (last finished step and
seconds since it last made progress, ``status``/``timeline``), the sequence of collectives each
rank *issued* (recorded by the rank loop before each call, so ranks can be checked to agree),
every rank's stack by ``py-spy dump --pid`` or by ``faulthandler`` (a signal-triggered dump, or a
watchdog armed with ``dump_traceback_later`` that writes one when a rank stops making progress), a
deadline wait (``join``) that raises ``Hung`` instead of waiting forever, and ``close`` that ends
every rank. A process-group timeout (``timeout_s``) turns a hang into an error that names the
collective, the step and the rank.

**Where the ranks come from: the launcher.** Ranks are forked by one launcher process
(``python -m course.lessons.hangs <socket>``, started by the first ``start``/``launcher()`` call),
which imports torch once and then serves requests on a Unix socket: start a job, and for a job
token, its status, collectives, stacks, pids, close. The caller keeps only the socket's address
and the job's token (a random hex string); every request has a deadline. So a ``Job`` works where
no process may be created: in a graded call's sealed child (``course.exercises.isolation``),
which refuses ``fork``, ``exec`` and ``subprocess.Popen``, the handle still talks to the launcher
started before the seal. What a job is (its plan: which rank stalls, where, how) is sent once to
the launcher and kept there and in its ranks' memory; the protocol has no request that returns it.
A handle's fields (world, steps, examples, batch size, budget) are drawn independently of the bug;
the ranks' argv is the launcher's, their environment is the launcher's, their files are named by
rank only, and their functions are the same in every job: a stack shows *where* a rank waits, never
which hang was put in. Limits: the launcher and the ranks are ordinary processes of the caller's
user, so code outside a sealed call (a cell, or a process a notebook left running) can read their
memory (``/proc/<pid>/mem``, ``py-spy dump --locals``); grading starts hidden jobs from the test cell
with a salt (as ``mystery`` does), and a process left running reads them too. Timing decides a hang
only by absence of progress: on a machine loaded enough to stall a healthy rank for ``stall_s``,
a detector can be fooled; the step is milliseconds, the stall thresholds seconds.

Every rank ends: ranks get ``SIGKILL`` when the launcher dies (``PR_SET_PDEATHSIG``), the launcher
exits when its caller does (its stdin closes), ``close`` kills a job's ranks and waits for them,
and ``Batch`` closes every job it started whatever happens. Nothing a rank prints reaches the
caller's streams (rank logs go to the job's folder).
"""

from __future__ import annotations

import atexit
import json
import math
import os
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

CAUSES = ("collective-skipped", "barrier-unreached", "loader-deadlock")
HEALTHY = "healthy"
KINDS = (HEALTHY,) + CAUSES


class Hung(TimeoutError):
    """A wait on a job ran out of time: the job is still running (or stuck)."""


class LauncherError(RuntimeError):
    """The launcher did not answer in time, or refused a request."""


# ----- the plan: what the launcher is told, never returned ------------------------------------------

def default_shards(n_examples: int, batch_size: int, world: int) -> list[list[list[int]]]:
    """``[step][rank] -> example ids``: consecutive global batches of ``batch_size`` (the last one
    shorter when ``n_examples`` is not a multiple), each split across ranks by stride
    (``batch[rank::world]``). A last batch with fewer examples than ranks leaves some shards empty."""
    batches = [list(range(i, min(i + batch_size, n_examples))) for i in range(0, n_examples, batch_size)]
    return [[b[r::world] for r in range(world)] for b in batches]


def _rng(seed: int, salt: str, stream: str) -> random.Random:
    return random.Random(f"{stream}|{seed}|{salt}")


def _settings(seed: int, salt: str) -> dict:
    """The job's public settings, from their own stream (the same distribution for every kind). The
    last global batch always holds fewer examples than ranks."""
    rng = _rng(seed, salt, "settings")
    world = 3
    batch = rng.choice((6, 9, 12))
    full = rng.randint(6, 9)
    n = batch * full + rng.randint(1, world - 1)
    return {"world": world, "n_examples": n, "batch_size": batch, "ckpt_every": rng.choice((2, 3)),
            "seed": rng.randrange(10_000)}


def _plan(kind: str, seed: int, salt: str, shards=None, timeout_s: float = 300.0, watchdog_s: float = 0.0) -> dict:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    s = _settings(seed, salt)
    shards = shards if shards is not None else default_shards(s["n_examples"], s["batch_size"], s["world"])
    steps = len(shards)
    rng = _rng(seed, salt, "fault")
    ckpts = [k for k in range(steps - 1) if (k + 1) % s["ckpt_every"] == 0 and k >= 1]
    return {**s, "steps": steps, "shards": shards, "timeout_s": float(timeout_s), "watchdog_s": float(watchdog_s),
            "skip_empty": kind == "collective-skipped",
            "late_write_at": rng.choice(ckpts) if kind == "barrier-unreached" else -1,
            "relock_at": (rng.randint(1, steps - 2), rng.randrange(s["world"])) if kind == "loader-deadlock" else (-1, -1)}


# ----- inside a rank ------------------------------------------------------------------------------

class _Record:
    """A rank's log, one line per event, flushed at once: ``P step t ids`` when a step is done,
    ``C name step t`` before a collective is issued, ``E message`` when the rank fails."""

    def __init__(self, path: str):
        self.f = open(path, "w", buffering=1)

    def write(self, *fields) -> None:
        self.f.write(" ".join(str(x) for x in fields) + "\n")


class _Collectives:
    """The rank loop's collectives, each recorded before it is issued; an error (the process
    group's timeout, a peer gone) becomes a ``RuntimeError`` naming the collective."""

    def __init__(self, rank: int, record: _Record):
        self.rank, self.record, self.count = rank, record, 0

    def _issue(self, name: str, step: int, call: Callable[[], None]) -> None:
        self.count += 1
        self.record.write("C", name, step, f"{time.time():.4f}")
        started = time.monotonic()
        try:
            call()
        except RuntimeError as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise RuntimeError(f"rank {self.rank}: {name} at step {step} (its collective #{self.count}) failed "
                               f"after {time.monotonic() - started:.1f} s (wall): {first}") from None

    def all_reduce(self, tensor, step: int) -> None:
        import torch.distributed as dist
        self._issue("all_reduce", step, lambda: dist.all_reduce(tensor))

    def barrier(self, step: int) -> None:
        import torch.distributed as dist
        self._issue("barrier", step, lambda: dist.barrier())


class _Loader:
    """A data-loading worker: a thread that reads each step's shard into a queue that holds two.
    It holds ``lock`` while it reads; ``_tally`` (its bookkeeping) takes the lock too."""

    def __init__(self, shard_ids: list[list[int]], data, relock_step: int):
        import queue
        self.ids, self.data, self.relock_step = shard_ids, data, relock_step
        self.lock = threading.Lock()
        self.queue: "queue.Queue" = queue.Queue(maxsize=2)
        self.seen = 0
        threading.Thread(target=self._work, name="data-worker", daemon=True).start()

    def _tally(self, n: int) -> None:
        with self.lock:
            self.seen += n

    def _work(self) -> None:
        x, y = self.data
        for step, ids in enumerate(self.ids):
            with self.lock:
                batch = (x[ids], y[ids], ids)
                if step == self.relock_step:
                    self._tally(len(ids))  # under the lock it already holds
            if step != self.relock_step:
                self._tally(len(ids))
            self.queue.put(batch)

    def next_batch(self):
        return self.queue.get()


def _wait_for_checkpoint(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.005)


def _checkpoint(rank: int, step: int, folder: str, model, coll: _Collectives, late_write: bool) -> None:
    """Rank 0 writes the model, the others wait until its file exists, and all meet at a barrier."""
    import torch
    path = os.path.join(folder, f"ckpt-{step}.pt")
    if rank == 0:
        if not late_write:
            torch.save(model.state_dict(), path + ".tmp")
            os.replace(path + ".tmp", path)
        coll.barrier(step)
        if late_write:
            torch.save(model.state_dict(), path + ".tmp")
            os.replace(path + ".tmp", path)
    else:
        _wait_for_checkpoint(path)
        coll.barrier(step)


def _arm(plan: dict, watchdog) -> None:
    """Re-arm the watchdog: if this rank finishes no step for ``watchdog_s`` seconds, faulthandler
    writes every thread's stack to ``rank<r>.watchdog`` (once; re-armed by the next step)."""
    import faulthandler
    if plan["watchdog_s"] > 0:
        faulthandler.dump_traceback_later(plan["watchdog_s"], repeat=False, file=watchdog)


def _train(rank: int, plan: dict, folder: str, record: _Record, watchdog=None) -> None:
    import torch
    gen = torch.Generator().manual_seed(plan["seed"])
    x = torch.randn(plan["n_examples"], 4, generator=gen)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1 * torch.randn(plan["n_examples"], generator=gen)
    torch.manual_seed(plan["seed"])
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    coll = _Collectives(rank, record)
    relock_step, relock_rank = plan["relock_at"]
    loader = _Loader([s[rank] for s in plan["shards"]], (x, y), relock_step if rank == relock_rank else -1)
    _arm(plan, watchdog)
    for step in range(plan["steps"]):
        xb, yb, ids = loader.next_batch()
        if len(ids) == 0 and plan["skip_empty"]:
            continue  # nothing to train on here: on to the next step
        opt.zero_grad()
        loss = ((model(xb).squeeze(-1) - yb) ** 2).sum()
        if len(ids):
            loss.backward()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads] + [torch.tensor([float(len(ids)), loss.item()])])
        coll.all_reduce(flat, step)
        count = max(flat[-2].item(), 1.0)
        torch.nn.utils.vector_to_parameters(flat[:-2] / count, grads)
        for p, g in zip(model.parameters(), grads):
            p.grad = g
        opt.step()
        record.write("P", step, f"{time.time():.4f}", ",".join(map(str, ids)) or "-")
        _arm(plan, watchdog)
        if (step + 1) % plan["ckpt_every"] == 0 and step < plan["steps"] - 1:
            _checkpoint(rank, step, folder, model, coll, step == plan["late_write_at"])
    coll.barrier(plan["steps"])


def _rank_main(rank: int, plan: dict, folder: str) -> None:
    """One rank's process (forked from the launcher): never returns."""
    import faulthandler
    code = 1
    record = None
    try:
        log = os.open(os.path.join(folder, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(log, 1)
        os.dup2(log, 2)
        try:  # die with the launcher
            import ctypes
            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except Exception:  # noqa: BLE001 - not Linux: the launcher's close still kills the rank
            pass
        stacks = open(os.path.join(folder, f"rank{rank}.stack"), "w")
        faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
        record = _Record(os.path.join(folder, f"rank{rank}.events"))
        import torch
        from course.lessons import rendezvous
        torch.set_num_threads(1)
        rendezvous.join(folder, rank, plan["world"], plan["timeout_s"])
        watchdog = open(os.path.join(folder, f"rank{rank}.watchdog"), "w")
        _train(rank, plan, folder, record, watchdog)
        faulthandler.cancel_dump_traceback_later()
        code = 0
    except BaseException as err:  # noqa: BLE001 - reported in the record, then the process ends
        if record is not None:
            record.write("E", f"{type(err).__name__}: {err}".splitlines()[0])
        import traceback
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


# ----- the launcher process -----------------------------------------------------------------------

@dataclass
class _Running:
    folder: str
    world: int
    pids: list[int]
    started: float
    exit: dict = field(default_factory=dict)  # pid -> exit code


def _read_events(folder: str, rank: int) -> list[list[str]]:
    try:
        with open(os.path.join(folder, f"rank{rank}.events")) as f:
            return [line.split(" ", 3) for line in f.read().splitlines() if line]
    except FileNotFoundError:
        return []


def _status(job: _Running) -> list[dict]:
    now = time.time()
    out = []
    for rank, pid in enumerate(job.pids):
        events = _read_events(job.folder, rank)
        done = [e for e in events if e[0] == "P"]
        last = max([float(e[2]) for e in done] + [job.started])
        error = next((e[1] if len(e) < 3 else " ".join(e[1:]) for e in events if e[0] == "E"), None)
        out.append({"rank": rank, "step": int(done[-1][1]) if done else -1, "idle_s": round(now - last, 3),
                    "exited": pid in job.exit, "code": job.exit.get(pid), "error": error})
    return out


def _py_spy() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.path.exists(here) else (shutil.which("py-spy") or "py-spy")


def _stacks(job: _Running, how: str) -> list[str]:
    out = []
    for rank, pid in enumerate(job.pids):
        if pid in job.exit:
            out.append(f"rank {rank} has exited (code {job.exit[pid]})")
            continue
        if how == "py-spy":
            try:
                done = subprocess.run([_py_spy(), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=15,
                                      env={**os.environ, "NO_COLOR": "1", "CLICOLOR": "0", "TERM": "dumb"})
                text = done.stdout if done.returncode == 0 else f"py-spy failed: {done.stderr.strip()}"
                text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # py-spy colours its output on some terminals
            except subprocess.TimeoutExpired:
                text = "py-spy did not answer in 15 s"
            out.append(text)
        else:
            path = os.path.join(job.folder, f"rank{rank}.stack")
            before = os.path.getsize(path) if os.path.exists(path) else 0
            os.kill(pid, signal.SIGUSR1)
            end = time.monotonic() + 5
            text = ""
            while time.monotonic() < end:
                time.sleep(0.05)
                with open(path) as f:
                    f.seek(before)
                    text = f.read()
                if text.count("File ") and text.endswith("\n"):
                    time.sleep(0.05)
                    with open(path) as f:
                        f.seek(before)
                        text = f.read()
                    break
            out.append(text or "faulthandler wrote nothing in 5 s")
    return out


def _start_ranks(plan: dict, inherited: list) -> _Running:
    folder = tempfile.mkdtemp(prefix="job-")
    pids = []
    for rank in range(plan["world"]):
        pid = os.fork()
        if pid == 0:
            try:
                for sock in inherited:  # the launcher's sockets: a rank must not hold a caller's connection open
                    sock.close()
                os.close(0)
            finally:
                _rank_main(rank, plan, folder)
        pids.append(pid)
    return _Running(folder, plan["world"], pids, time.time())


def _end(job: _Running) -> None:
    for pid in job.pids:
        if pid not in job.exit:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for pid in job.pids:
        if pid not in job.exit:
            try:
                _, status = os.waitpid(pid, 0)
                job.exit[pid] = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                job.exit[pid] = None
    shutil.rmtree(job.folder, ignore_errors=True)


def _preload() -> None:
    """Import, once, in the launcher, what a rank imports (torch, its distributed package, what an
    optimizer's first step loads), so that forked ranks start training at once. No torch op runs
    here: the launcher starts no thread pool that a fork would copy half-made."""
    import importlib
    for name in ("torch", "torch.distributed", "torch.optim", "torch._dynamo", "torch.distributed.tensor",
                 "numpy", "faulthandler", "queue", "ctypes"):
        importlib.import_module(name)


def _serve(address: str) -> None:
    """The launcher's loop: one JSON request per connection, one JSON answer. Ends on ``shutdown``
    or when its stdin closes (its caller is gone), killing every rank it started."""
    _preload()
    jobs: dict[str, _Running] = {}
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(16)
    print("ready", flush=True)
    try:
        while True:
            ready, _, _ = select.select([listener, sys.stdin], [], [], 0.05)
            for job in jobs.values():  # reap what exited
                for pid in job.pids:
                    if pid not in job.exit:
                        done, status = os.waitpid(pid, os.WNOHANG)
                        if done:
                            job.exit[pid] = os.waitstatus_to_exitcode(status)
            if sys.stdin in ready and not sys.stdin.buffer.read1(1):
                return
            if listener not in ready:
                continue
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(5)
                try:
                    request = json.loads(_recv_all(conn))
                    answer = _answer(request, jobs, [listener, conn])
                except Exception as err:  # noqa: BLE001 - the caller gets the error, the launcher goes on
                    answer = {"error": f"{type(err).__name__}: {err}"}
                conn.sendall(json.dumps(answer).encode())
                if request.get("op") == "shutdown":
                    return
    finally:
        for job in jobs.values():
            _end(job)
        listener.close()
        try:
            os.unlink(address)
        except OSError:
            pass


def _answer(request: dict, jobs: dict, inherited: list) -> dict:
    op = request.get("op")
    if op == "start":
        token = os.urandom(12).hex()
        jobs[token] = _start_ranks(request["plan"], inherited)
        return {"job": token}
    if op == "shutdown":
        return {"ok": True}
    job = jobs.get(request.get("job"))
    if job is None:
        return {"error": "no such job (closed, or never started here)"}
    if op == "status":
        return {"status": _status(job)}
    if op == "events":
        return {"events": [_read_events(job.folder, r) for r in range(job.world)]}
    if op == "stacks":
        return {"stacks": _stacks(job, request.get("how", "py-spy"))}
    if op == "pids":
        return {"pids": job.pids}
    if op == "watchdog":
        out = []
        for rank in range(job.world):
            try:
                with open(os.path.join(job.folder, f"rank{rank}.watchdog")) as f:
                    out.append(f.read())
            except FileNotFoundError:
                out.append("")
        return {"watchdog": out}
    if op == "close":
        _end(job)
        del jobs[request["job"]]
        return {"ok": True}
    return {"error": f"unknown request {op!r}"}


def _recv_all(conn: socket.socket) -> bytes:
    chunks = []
    while True:
        block = conn.recv(1 << 16)
        if not block:
            return b"".join(chunks)
        chunks.append(block)


def _request(address: str, message: dict, timeout_s: float = 30.0) -> dict:
    """One request to the launcher at ``address``; ``LauncherError`` if it does not answer within
    ``timeout_s`` or answers with an error."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            s.connect(address)
            s.sendall(json.dumps(message).encode())
            s.shutdown(socket.SHUT_WR)
            answer = json.loads(_recv_all(s) or b"{}")
    except (OSError, ValueError) as err:
        raise LauncherError(f"the job launcher did not answer ({type(err).__name__}: {err})") from None
    if "error" in answer:
        raise LauncherError(answer["error"])
    return answer


class Launcher:
    """The launcher process, seen from its caller: ``start(plan)`` returns a job token; ``close()``
    ends the launcher and every rank it started (also at the caller's exit). It runs isolated
    (``python -I``) with only the variables of ``LAUNCHER_ENV``, so it and its ranks run this
    module's code whatever a notebook put in its environment."""

    def __init__(self, ready_timeout_s: float = 60.0):
        self.folder = tempfile.mkdtemp(prefix="launcher-")
        self.address = os.path.join(self.folder, "socket")
        log = open(os.path.join(self.folder, "launcher.log"), "w")
        # isolated (-I: no PYTHONPATH, no user site, no script folder on the path) and with an
        # environment of named variables only (no LD_PRELOAD, no PYTHON*): what runs in the launcher
        # and its ranks is the package's code, whatever a notebook put in os.environ (red team,
        # run 11: a sitecustomize on PYTHONPATH ran inside a restarted launcher)
        self.process = subprocess.Popen([sys.executable, "-I", "-m", "course.lessons.hangs", self.address],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                        env=_launcher_env(),
                                        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        log.close()
        ready, _, _ = select.select([self.process.stdout], [], [], ready_timeout_s)
        if not ready or self.process.stdout.readline().strip() != b"ready":
            self.close()
            raise LauncherError(f"the job launcher did not start in {ready_timeout_s} s "
                                f"(log: {os.path.join(self.folder, 'launcher.log')})")
        atexit.register(self.close)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """End the launcher (it kills every rank it started first), waiting at most 10 s, then kill it."""
        if self.process.poll() is None:
            try:
                _request(self.address, {"op": "shutdown"}, timeout_s=10)
                self.process.wait(timeout=10)
            except (LauncherError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None and not stream.closed:
                stream.close()
        shutil.rmtree(self.folder, ignore_errors=True)


_LAUNCHER: list[Launcher] = []
LAUNCHER_ENV = ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "OMP_NUM_THREADS",
                "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _launcher_env() -> dict:
    """The launcher's environment: only the variables of ``LAUNCHER_ENV`` that are set here."""
    return {k: os.environ[k] for k in LAUNCHER_ENV if k in os.environ}


def launcher() -> Launcher:
    """The launcher this process uses, started on first use (a few seconds: it imports torch)."""
    if not _LAUNCHER or not _LAUNCHER[0].alive():
        _LAUNCHER[:] = [Launcher()]
    return _LAUNCHER[0]


# ----- the handle ---------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Job:
    """A handle on a running job. Its fields are the job's public settings (the same distribution
    for every kind of job); ``budget_s`` is the time a detector may spend on it. Every method is a
    request to the launcher with a deadline: none waits on a rank."""

    address: str = field(repr=False)
    token: str = field(repr=False)
    world: int
    steps: int
    n_examples: int
    batch_size: int
    budget_s: float = 4.0

    def __repr__(self) -> str:
        return (f"<job: {self.world} ranks, {self.steps} steps, {self.n_examples} examples, "
                f"batch {self.batch_size}, budget {self.budget_s} s>")

    def status(self) -> list[dict]:
        """Per rank: ``step`` (the last step it finished, -1 before the first), ``idle_s`` (seconds
        since it finished a step, or since the job started), ``exited``, ``code`` (exit code, 0 for
        a rank that finished) and ``error`` (the first line of its error, or None)."""
        return _request(self.address, {"op": "status", "job": self.token})["status"]

    def finished(self) -> bool:
        """True once every rank has exited with code 0."""
        return all(r["exited"] and r["code"] == 0 for r in self.status())

    def failed(self) -> bool:
        """True once some rank has exited with an error."""
        return any(r["exited"] and r["code"] != 0 for r in self.status())

    def collectives(self) -> list[list[tuple[str, int]]]:
        """Per rank, every collective it issued so far, in order: ``(name, step)``, recorded before
        the call, so the last one of a stuck rank is the one it waits in."""
        events = _request(self.address, {"op": "events", "job": self.token})["events"]
        return [[(e[1], int(e[2])) for e in rank if e[0] == "C"] for rank in events]

    def timeline(self) -> list[list[tuple[float, int]]]:
        """Per rank, ``(seconds since the first event of any rank, step)`` for every finished step."""
        events = _request(self.address, {"op": "events", "job": self.token})["events"]
        # a step's line is ("P", step, time, ids); a collective's ("C", name, step, time)
        times = [float(e[2] if e[0] == "P" else e[3]) for rank in events for e in rank if e[0] in "PC"]
        t0 = min(times) if times else 0.0
        return [[(float(e[2]) - t0, int(e[1])) for e in rank if e[0] == "P"] for rank in events]

    def examples_seen(self) -> list[list[int]]:
        """Per rank, the example ids of every step it finished, concatenated."""
        events = _request(self.address, {"op": "events", "job": self.token})["events"]
        return [[int(i) for e in rank if e[0] == "P" and e[3] != "-" for i in e[3].split(",")] for rank in events]

    def stacks(self, how: str = "py-spy") -> list[str]:
        """Every rank's stack, all threads: ``how="py-spy"`` runs ``py-spy dump --pid`` on each rank
        (no locals); ``how="faulthandler"`` sends each rank ``SIGUSR1``, whose ``faulthandler``
        handler writes the dump (CPython's own format, the innermost call first). A rank that
        exited says so instead. py-spy has up to 15 s per rank, faulthandler up to 5 s."""
        if how not in ("py-spy", "faulthandler"):
            raise ValueError("how is 'py-spy' or 'faulthandler'")
        return _request(self.address, {"op": "stacks", "job": self.token, "how": how}, timeout_s=60)["stacks"]

    def watchdog(self) -> list[str]:
        """Per rank, what its faulthandler watchdog wrote ("" when nothing): with ``watchdog_s`` set
        at ``start``, a rank that finishes no step for that long dumps every thread's stack
        (``faulthandler.dump_traceback_later``), with no one asking. The dump is taken inside the
        rank, so it needs no permission to read another process."""
        return _request(self.address, {"op": "watchdog", "job": self.token})["watchdog"]

    def pids(self) -> list[int]:
        """The ranks' process ids."""
        return _request(self.address, {"op": "pids", "job": self.token})["pids"]

    def join(self, timeout_s: float) -> None:
        """Wait at most ``timeout_s`` for every rank to finish. Raises ``Hung`` (naming each rank's
        step and idle time) if they have not, ``RuntimeError`` (naming the rank's error) if one
        failed. Never waits longer than ``timeout_s`` plus one request."""
        end = time.monotonic() + timeout_s
        while True:
            status = self.status()
            errors = [f"rank {r['rank']}: {r['error'] or 'exit code %s' % r['code']}"
                      for r in status if r["exited"] and r["code"] != 0]
            if errors:
                raise RuntimeError("the job failed: " + "; ".join(errors))
            if all(r["exited"] for r in status):
                return
            if time.monotonic() > end:
                where = ", ".join(f"rank {r['rank']} at step {r['step']} (idle {r['idle_s']:.1f} s (wall))" for r in status)
                raise Hung(f"the job did not finish within {timeout_s} s: {where}. It is still running: "
                           "look at job.stacks() to see where each rank waits, then job.close()")
            time.sleep(0.05)

    def close(self) -> None:
        """Kill every rank of the job and wait for them (a closed job answers no more requests)."""
        try:
            _request(self.address, {"op": "close", "job": self.token})
        except LauncherError as err:
            if "no such job" not in str(err):
                raise


def start(kind: str = HEALTHY, seed: int = 0, salt: str = "", shards: list | None = None,
          timeout_s: float = 300.0, budget_s: float = 4.0, watchdog_s: float = 0.0) -> Job:
    """Start a job of ``kind`` (``KINDS``) with the settings of ``seed``/``salt``. ``shards``
    (``[step][rank] -> ids``) replaces ``default_shards``; ``timeout_s`` is the process group's
    timeout (the default is long enough that a hang stays a hang); ``watchdog_s`` > 0 arms each
    rank's faulthandler watchdog (``Job.watchdog``). Returns at once. A salt is joined with the
    grader's secret of the running test (``course.toolkit.salts``; nothing outside grading)."""
    from ..toolkit.salts import mixed  # here, not at the top: notebook 13's saved dumps name lines above
    plan = _plan(kind, seed, mixed(salt), shards, timeout_s, watchdog_s)
    address = launcher().address
    token = _request(address, {"op": "start", "plan": plan})["job"]
    return Job(address, token, plan["world"], plan["steps"], plan["n_examples"], plan["batch_size"], budget_s)


def draw_kind(seed: int, salt: str = "", candidates=KINDS) -> str:
    """The kind a mystery ``seed`` draws among ``candidates`` (its own stream, not the settings'),
    with ``salt`` joined to the grader's secret as in ``start``."""
    from ..toolkit.salts import mixed
    return _rng(seed, mixed(salt), "kind").choice(list(candidates))


def draw(seed: int, salt: str = "", candidates=KINDS, budget_s: float = 4.0) -> Job:
    """A mystery job: ``start(draw_kind(seed, salt, candidates), seed, salt)``."""
    return start(draw_kind(seed, salt, candidates), seed, salt, budget_s=budget_s)


class Batch:
    """``with Batch() as jobs:`` — ``jobs.start(...)``/``jobs.draw(...)`` as the functions above;
    every job started through it is closed on exit, whatever happened."""

    def __init__(self):
        self.jobs: list[Job] = []

    def start(self, *args, **kwargs) -> Job:
        self.jobs.append(start(*args, **kwargs))
        return self.jobs[-1]

    def draw(self, *args, **kwargs) -> Job:
        self.jobs.append(draw(*args, **kwargs))
        return self.jobs[-1]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for job in self.jobs:
            job.close()
        return False


# ----- evidence helpers used by the lessons ---------------------------------------------------------

def agree(sequences: list[list[tuple[str, int]]]) -> int | None:
    """The first position at which the ranks' issued collectives differ (by name), or None when
    every rank's sequence is a prefix of the longest one's. A rank that issued fewer collectives
    is not a disagreement by itself (it may be slower, or stuck outside any collective)."""
    longest = max(sequences, key=len)
    for i, (name, _) in enumerate(longest):
        if any(i < len(s) and s[i][0] != name for s in sequences):
            return i
    return None


_FAULTHANDLER_FRAME = re.compile(r'\s+File "(.+)", line (\d+) in (.+)')


def _short(path: str) -> str:
    """A frame's file as py-spy shows it: from the package folder on (``torch/...``, ``course/...``)."""
    for marker in ("site-packages/", "/course/"):
        if marker in path:
            return ("course/" if marker == "/course/" else "") + path.split(marker, 1)[1]
    return os.path.basename(path)


def brief(stack: str, keep: int = 3) -> str:
    """A stack dump shortened to what says where a rank waits: each thread's header (without its id),
    its innermost frame (where it waits) and its ``keep`` innermost frames in the course's own code
    (what the training loop was doing); library frames in between are dropped. Reads ``py-spy dump``
    and ``faulthandler`` dumps (both list the innermost frame first); frames are written the py-spy
    way, ``function (file:line)``, with files from their package folder on."""
    out, first, left = [], False, 0
    for line in stack.splitlines():
        frame = _FAULTHANDLER_FRAME.match(line)
        if frame:
            path, number, name = frame.groups()
            line = f"    {name} ({_short(path)}:{number})"
        if line.startswith("Thread "):  # py-spy: 'Thread 521 (idle): "MainThread"'; the id changes from run to run
            ident, _, rest = line[len("Thread "):].partition(" ")
            out.append("thread " + (rest if not rest.startswith("(most recent") else "(faulthandler)"))
            first, left = True, keep
        elif line.startswith("Current thread "):
            out.append("thread (faulthandler, the one that was running)")
            first, left = True, keep
        elif line.startswith("    ") and (first or (left and "course/" in line)):
            out.append(line)
            left -= 0 if first else 1
            first = False
    return "\n".join(out) if out else stack.strip()


def within_budget(detect: Callable[[Job], object], slack_s: float = 3.0) -> Callable[[Job], object]:
    """``detect`` as a grader calls it: in a thread, waited for at most ``job.budget_s + slack_s``;
    a call that has not returned by then raises ``AssertionError`` (the thread is left to the
    graded call's process, which is thrown away)."""
    def call(job: Job):
        box: dict = {}

        def run():
            try:
                box["value"] = detect(job)
            except BaseException as err:  # noqa: BLE001 - raised again in the caller's thread
                box["error"] = err
        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join(job.budget_s + slack_s)
        if worker.is_alive():
            raise AssertionError(f"your function did not return within the job's budget of {job.budget_s} s "
                                 f"(+{slack_s} s): it must decide in time, never wait for a job to end")
        if "error" in box:
            raise box["error"]
        return box["value"]
    return call


def shard_problems(shards, n_examples: int, batch_size: int, world: int) -> list[str]:
    """What is wrong with a shard plan (``[step][rank] -> ids``) as a fix of an uneven last batch:
    an empty shard, an example never used or used more than twice, a step other than the last that
    does not hold ``batch_size`` examples (the fix keeps the batch size: a plan of a few examples per
    step passed the other rules while changing how the job trains; red team 14), a step with more
    than ``batch_size + world`` examples, ids outside ``range(n_examples)`` or not ints. [] when none."""
    problems = []
    if not isinstance(shards, (list, tuple)) or not shards:
        return ["the plan must be a non-empty list of steps"]
    counts = [0] * n_examples
    for step, ranks in enumerate(shards):
        if not isinstance(ranks, (list, tuple)) or len(ranks) != world:
            return [f"step {step}: one list of ids per rank ({world}) is needed"]
        total = 0
        for rank, ids in enumerate(ranks):
            if not isinstance(ids, (list, tuple)) or not all(type(i) is int and 0 <= i < n_examples for i in ids):
                return [f"step {step}, rank {rank}: ids must be ints in range({n_examples})"]
            if not ids:
                problems.append(f"step {step}: rank {rank}'s shard is empty")
            total += len(ids)
            for i in ids:
                counts[i] += 1
        if total > batch_size + world:
            problems.append(f"step {step}: {total} examples, more than batch_size + world = {batch_size + world}")
        elif step < len(shards) - 1 and total != batch_size:
            problems.append(f"step {step}: {total} examples; every step but the last keeps the batch size "
                            f"({batch_size})")
    never = [i for i, c in enumerate(counts) if c == 0]
    twice = [i for i, c in enumerate(counts) if c > 2]
    if never:
        problems.append(f"{len(never)} examples never used (first: {never[:5]})")
    if twice:
        problems.append(f"{len(twice)} examples used more than twice (first: {twice[:5]})")
    return problems


if __name__ == "__main__":
    _serve(sys.argv[1])
