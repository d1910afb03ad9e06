"""Phase clocks for the training loop, and the healthy parts of notebook 06 (throughput).

The loop in ``course.reference.train`` times every step in seven **phases**, in this order:

    data  -> fwd  -> bwd  -> opt  -> log  -> ckpt  -> eval

(``data``: fetching and collating the batch; ``fwd``: the forward pass and the loss; ``bwd``:
backward, the gradient norm and clipping; ``opt``: the optimizer and scheduler step, and two flat
copies of the parameters for the update size; ``log``: the
pipeline's ``log_step`` part; ``ckpt``: its ``checkpoint`` part; ``eval``: evaluation, when its
``eval_due`` part says so). It reads the time from a **clock** with one method, ``lap(phase)``:
the seconds since the previous lap.

* ``WallClock`` (the default) is ``time.perf_counter``: real seconds on this machine.
* ``CostModel`` is a **seeded model** of a step's cost, for grading that must never depend on how
  busy the machine is. Documented in full in its docstring.

Code that models a cost it does not really pay here (a slow disk, a device synchronisation, a
stalled data server) calls ``charge(seconds)``: under the wall clock it sleeps that long, under the
cost model it adds the seconds to the current phase. Work that *is* done for real but must cost the
same on every machine (evaluating windows) calls ``charge(seconds, modelled_only=True)``: the wall
clock ignores it (the real work took real time), the cost model adds it.

This module imports nothing else of ``course``, so ``course.reference.pipeline`` can use its defaults.
"""

from __future__ import annotations

import math
import random
import time
from contextlib import contextmanager

PHASES = ("data", "fwd", "bwd", "opt", "log", "ckpt", "eval")


class WallClock:
    """Real time: ``lap(phase)`` is the ``time.perf_counter()`` seconds since the last lap."""

    def __init__(self):
        self._last = time.perf_counter()

    def lap(self, phase: str | None = None) -> float:
        now = time.perf_counter()
        elapsed, self._last = now - self._last, now
        return elapsed

    def charge(self, seconds: float, modelled_only: bool = False) -> None:
        if not modelled_only and seconds > 0:
            time.sleep(seconds)


class CostModel:
    """A seeded model of what each phase of a step costs, in seconds.

    For a step of ``B`` windows of ``T`` positions (padded positions included: the hardware does
    the work whether a target is scored or not) and a model of ``n_params`` parameters:

    | phase | healthy cost (before noise) |
    |---|---|
    | ``data`` | ``DATA_PER_POS`` x B x T |
    | ``fwd`` | ``FWD_PER_POS`` x B x T |
    | ``bwd`` | 2 x the forward cost (backward does about twice the matmul work) |
    | ``opt`` | ``OPT_PER_PARAM`` x n_params |
    | ``log`` | ``LOG_BASE`` (one scalar logged per step) |
    | ``ckpt`` | 0 (the healthy run does not checkpoint inside the step) |
    | ``eval`` | 0, plus ``FWD_PER_POS`` per position evaluated (a forward pass) |

    **Noise.** Each phase's cost is multiplied by ``exp(N(0, sigma))`` (``sigma`` 0.15: about
    +-15%), and on a fraction ``hiccup`` (0.04) of steps one of the five phases a healthy step
    runs (``data`` to ``log``), chosen at random, is slowed ``U(3, 8)`` times: a healthy run on a shared machine has isolated slow steps, and a detector
    must stay quiet on them. The first step is 3 times slower in ``fwd`` and ``bwd`` (first-call
    allocation). Everything is drawn from ``random.Random(seed)``: the same seed gives the same trace.

    **Charges.** ``charge(seconds)`` adds to the phase being timed (a modelled disk, device sync or
    stalled data source), noise-free.
    """

    DATA_PER_POS = 2e-6
    FWD_PER_POS = 6e-6
    OPT_PER_PARAM = 2e-8
    LOG_BASE = 5e-5

    def __init__(self, seed: int, positions: int, n_params: int, sigma: float = 0.15, hiccup: float = 0.04):
        self.rng = random.Random(seed)
        self.sigma, self.hiccup = sigma, hiccup
        fwd = self.FWD_PER_POS * positions
        self.base = {"data": self.DATA_PER_POS * positions, "fwd": fwd, "bwd": 2 * fwd,
                     "opt": self.OPT_PER_PARAM * n_params, "log": self.LOG_BASE, "ckpt": 0.0, "eval": 0.0}
        self._pending = 0.0
        self._step = -1
        self._slow: tuple[str, float] | None = None

    def lap(self, phase: str | None = None) -> float:
        if phase is None:  # the start of a step
            self._pending = 0.0
            return 0.0
        if phase == PHASES[0]:
            self._step += 1
            self._slow = None
            if self.rng.random() < self.hiccup:
                self._slow = (self.rng.choice(PHASES[:5]), self.rng.uniform(3, 8))
        cost = self.base[phase] * math.exp(self.rng.gauss(0.0, self.sigma))
        if self._step == 0 and phase in ("fwd", "bwd"):
            cost *= 3
        if self._slow is not None and self._slow[0] == phase:
            cost *= self._slow[1]
        cost += self._pending
        self._pending = 0.0
        return cost

    def charge(self, seconds: float, modelled_only: bool = False) -> None:
        self._pending += seconds


_ACTIVE: list = []


@contextmanager
def active(clock):
    """Make ``clock`` the one ``charge`` reaches while the block runs (the loop does this)."""
    _ACTIVE.append(clock)
    try:
        yield clock
    finally:
        _ACTIVE.pop()


def charge(seconds: float, modelled_only: bool = False) -> None:
    """Charge a modelled cost to the running loop's clock (sleeps under the wall clock, unless
    ``modelled_only``); outside a training loop, behaves like the wall clock."""
    if _ACTIVE:
        _ACTIVE[-1].charge(seconds, modelled_only)
    elif not modelled_only and seconds > 0:
        time.sleep(seconds)


# ----- the healthy parts of notebook 06 -------------------------------------------------------------
def log_nothing(run, step: int, loss) -> None:
    """The reference ``log_step`` part: the loop already records one scalar per quantity per step."""
    return None


def no_checkpoint(run) -> None:
    """The reference ``checkpoint`` part: nothing is saved inside the step (save between runs, or
    asynchronously from a copy: ``course.lessons.throughput.AsyncSaver``)."""
    return None


def eval_on_schedule(step: int, eval_every: int) -> bool:
    """The reference ``eval_due`` part: evaluate after every ``eval_every``-th step (never if 0)."""
    return bool(eval_every) and step % eval_every == 0
