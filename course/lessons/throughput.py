"""Throughput (notebook 06): where a step's time goes, and what makes tokens/s drop at step N.

* **Phases.** ``course.reference.train.train_steps`` times each step in seven phases (``course.toolkit.phases.PHASES``:
  data, fwd, bwd, opt, log, ckpt, eval) into ``run.phases``. ``step_times(run)`` adds them up;
  ``stacked_plot`` draws them per step; ``tokens_per_second`` turns them into throughput, counting
  either **scored target tokens** (real work) or **padded positions** (what the hardware did).
* **Traces from a seeded cost model.** ``traced(pipe, seed)`` trains ``pipe`` for ``TRACE_STEPS``
  steps under ``course.toolkit.phases.CostModel`` (documented there): phase times that do not depend on this
  machine or how busy it is, with healthy noise (+-15% per phase, and a few isolated slow steps).
  Bugs of the ``throughput`` family charge their modelled costs to it. Grading uses these traces.
* **A regression check.** ``regressions(run, baseline)`` compares each phase, step by step, with a
  healthy baseline trace of the same shape; ``slow_phase`` names the phase. Both are the package's
  own answers to the notebook's exercise, switched off while a learner's answer is graded.
* **The async-save race.** ``AsyncSaver`` serialises a snapshot on a background thread; ``hold`` (a
  ``threading.Event``) makes the thread wait until the trainer has run more steps, so the race is
  forced, not left to luck. ``live_state`` hands the thread the live tensors (the bug);
  ``snapshot`` copies them at the step (the fix); ``model_first`` copies the model at the step and
  hands the optimizer's state over live (a save that copies lazily, part by part). ``race`` runs the
  schedule, compares the saved tensors with a copy of the state at the requested step, bit for bit,
  and says for each saved tensor (and the saved learning rate) after which step's update it was.
* **FLOPs and a utilisation.** ``counted_flops`` (``torch.utils.flop_counter.FlopCounterMode``),
  ``rule_flops`` (6 N per position plus attention), ``matmul_peak`` (a timed matmul on this machine: a
  *measured* rate, lower than the hardware's peak, so FLOPs/s divided by it is not MFU, which divides
  by the peak).
* **What a synchronous save costs the step after it.** ``after_save`` times a run on the real clock
  and takes the medians of the saving steps, of the step right after each, and of the others.
  Two controls split ``course.bugs.throughput.SyncCheckpoint`` in its halves: ``SaveWithoutDisk``
  (the same ``torch.save`` into memory, no modelled disk) and ``DiskWithoutSave`` (the modelled
  disk's wait for the bytes the bug writes, ``saved_bytes``, with nothing serialised).
* **What instrumentation costs.** ``overhead`` alternates blocks of steps with per-layer telemetry
  on and off in one run and compares the medians.
"""

from __future__ import annotations

import copy
import io
import statistics
import threading
import time
import weakref
from dataclasses import dataclass, field

import torch

from ..toolkit.textview import html_text, with_text
from ..toolkit.batch import next_token_batch
from ..toolkit.phases import PHASES, CostModel, charge, eval_on_schedule, log_nothing, no_checkpoint
from ..reference.pipeline import Pipeline
from ..bugs.throughput import DISK_BYTES_PER_S

TRACE_STEPS = 24
CAUSES = ("healthy", "data", "eval", "checkpoint", "logging")
PHASE_CAUSE = {"data": "data", "eval": "eval", "ckpt": "checkpoint", "log": "logging"}
# where each cause lives, and the reference value of that field
REFERENCES = {"checkpoint": {"checkpoint": no_checkpoint}, "eval": {"eval_due": eval_on_schedule},
              "logging": {"log_step": log_nothing}, "data": {"batches": None, "collate": next_token_batch}}


# ----- phases -------------------------------------------------------------------------------------
def step_times(run) -> list[float]:
    """Seconds per step: the sum of the phases."""
    return [sum(v) for v in zip(*(run.phases[p] for p in PHASES))]


def positions(pipe: Pipeline) -> int:
    """Positions a step computes (batch x window length), padding included."""
    return pipe.batch_size * pipe.seq_len


def tokens_per_second(run, real: bool = True) -> list[float]:
    """Per step: scored target tokens per second (``real``), or padded positions per second."""
    work = run.history["tokens"] if real else [positions(run.pipe)] * len(run.history["tokens"])
    return [w / t for w, t in zip(work, step_times(run))]


def stacked_plot(run, ax=None, title: str = "", unit: float = 1e3):
    """Phase times per step, stacked (milliseconds)."""
    import matplotlib.pyplot as plt

    ax = ax or plt.gca()
    steps = run.history["step"][:len(run.phases["data"])]
    ax.stackplot(steps, *[[t * unit for t in run.phases[p]] for p in PHASES], labels=PHASES)
    ax.axhline(statistics.median(step_times(run)) * unit, color="black", linestyle=":", linewidth=1,
               label="median step")
    ax.set_xlabel("step")
    ax.set_ylabel("time per step (ms)")
    if title:
        ax.set_title(title)
    return ax


def phase_medians(run) -> dict[str, float]:
    return {p: statistics.median(run.phases[p]) for p in PHASES}


# ----- traces from the cost model -----------------------------------------------------------------
_TRACES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def n_params(pipe: Pipeline) -> int:
    return sum(p.numel() for p in pipe.build_model(0).parameters())


def traced(pipe: Pipeline, seed: int = 0, steps: int = TRACE_STEPS):
    """``pipe`` trained for ``steps`` steps from ``seed``, timed by a ``CostModel`` whose noise is seeded
    by ``seed`` and the pipeline's own data seeds (remembered: a second call is free). No evaluation
    is scheduled (``eval_every=0``)."""
    from ..reference.train import start, train_steps

    key = (seed, steps)
    cache = _TRACES.setdefault(pipe, {})
    if key not in cache:
        model_seed = hash((seed, pipe.language_seed, pipe.data_seed, pipe.val_seed)) % 2**31
        clock = CostModel(model_seed, positions(pipe), n_params(pipe))
        run = start(pipe, seed)
        cache[key] = train_steps(run, steps, eval_every=0, clock=clock)
    return cache[key]


def regressions(run, baseline, factor: float = 3.0, floor: float = 1e-3, min_steps: int = 4) -> dict[str, int]:
    """Phases that are slow in ``run`` on at least ``min_steps`` steps, with the number of such steps.

    A step is slow in a phase when that phase takes more than ``factor`` x the baseline's median of
    the phase plus ``floor`` seconds. One or two slow steps are noise (a busy machine); a regression
    repeats (periodic), persists (from a step on) or grows."""
    ref = phase_medians(baseline)
    found = {}
    for p in PHASES:
        n = sum(t > factor * ref[p] + floor for t in run.phases[p])
        if n >= min_steps:
            found[p] = n
    return found


def slow_phase(run, baseline) -> str:
    """The cause of ``CAUSES`` whose phase has the largest excess over the baseline, or ``"healthy"``."""
    found = regressions(run, baseline)
    if not found:
        return "healthy"
    ref = phase_medians(baseline)
    excess = {p: sum(max(0.0, t - ref[p]) for t in run.phases[p]) for p in found}
    return PHASE_CAUSE.get(max(excess, key=excess.get), "healthy")


def problems(pipe: Pipeline, baseline_pipe: Pipeline, seed: int = 0) -> list[str]:
    """What ``regressions`` finds in ``traced(pipe, seed)`` against ``traced(baseline_pipe, seed)``."""
    found = regressions(traced(pipe, seed), traced(baseline_pipe, seed))
    return [f"the {p} phase is slow on {n} of {TRACE_STEPS} steps" for p, n in found.items()]


# ----- the async-save race ------------------------------------------------------------------------
def live_state(model, optimizer) -> dict:
    """What a checkpoint holds, as the live objects: ``model.state_dict()`` and
    ``optimizer.state_dict()`` share storage with the tensors that training updates in place."""
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}


def snapshot(model, optimizer) -> dict:
    """The same dictionary, with every tensor copied now (the fix)."""
    return copy.deepcopy(live_state(model, optimizer))


def model_first(model, optimizer) -> dict:
    """A half-done copy: the model's tensors copied now, the optimizer's state dict handed over live
    (its tensors, Adam's moments and step counts, are read when the write reaches them). This is what
    a save that copies lazily, part by part, holds when training moves on before it finishes."""
    return {"model": copy.deepcopy(model.state_dict()), "optimizer": optimizer.state_dict()}


class AsyncSaver:
    """Serialise checkpoints on background threads, so the training thread does not wait.

    ``save(model, optimizer, step, hold)`` calls ``take(model, optimizer)`` on the calling thread (at
    the step), then a thread serialises what it returned with ``torch.save``. If ``hold`` (a
    ``threading.Event``) is given, the thread waits for it first: the caller decides when the write
    happens, which makes a race reproducible. ``join()`` waits for every write; ``load(step)`` reads
    one back."""

    def __init__(self, take=live_state):
        self.take = take
        self.saved: dict[int, bytes] = {}
        self.threads: list[threading.Thread] = []

    def save(self, model, optimizer, step: int, hold: threading.Event | None = None) -> None:
        state = self.take(model, optimizer)

        def write():
            if hold is not None:
                hold.wait(timeout=60)
            buffer = io.BytesIO()
            torch.save(state, buffer)
            self.saved[step] = buffer.getvalue()

        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        self.threads.append(thread)

    def join(self) -> None:
        for t in self.threads:
            t.join()
        self.threads.clear()

    def load(self, step: int) -> dict:
        return torch.load(io.BytesIO(self.saved[step]), weights_only=False)


def _tensors(tree, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a nested checkpoint dictionary, by path."""
    out = {}
    if isinstance(tree, torch.Tensor):
        out[prefix] = tree
    elif isinstance(tree, dict):
        for k, v in tree.items():
            out.update(_tensors(v, f"{prefix}/{k}"))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            out.update(_tensors(v, f"{prefix}/{i}"))
    return out


@dataclass
class RaceResult:
    step: int  # the step the checkpoint was requested at
    steps_after: int  # steps trained before the background write was let go
    differ: list[str] = field(default_factory=list)  # tensors that differ from the state at `step`
    missing: list[str] = field(default_factory=list)  # tensors of the state the checkpoint lacks
    compared: int = 0
    run_changed: bool = False  # did taking the snapshot change the training run?
    # for each saved tensor: the number of updates of the state it equals (save_at .. save_at +
    # steps_after), or None if it equals none of them
    from_step: dict[str, int | None] = field(default_factory=dict)
    lr_from: int | None = None  # the same for the saved param group's learning rate (a float)

    @property
    def exact(self) -> bool:
        return not self.differ and not self.missing and self.compared > 0 and not self.run_changed


def race(pipe: Pipeline, take, save_at: int = 4, steps_after: int = 3, seed: int = 0) -> RaceResult:
    """The adversarial schedule: train ``save_at`` steps, ask an ``AsyncSaver(take)`` for a
    checkpoint, train ``steps_after`` more steps while its thread waits on an ``Event``, then let it
    write. The checkpoint is compared, tensor by tensor (``torch.equal``), with a deep copy of
    ``live_state`` taken at the requested step, and the run's final parameters with a run that saved
    nothing (a snapshot must not change training). Deep copies of the state after every later update
    give each saved tensor's provenance (``from_step``; ``None``: equal to no state the run passed
    through) and the saved learning rate's (``lr_from``). When two states are equal in a tensor (a
    frozen one), the earliest step is named."""
    from ..reference.train import start, train_steps

    run = start(pipe, seed)
    train_steps(run, save_at, eval_every=0)
    reference = copy.deepcopy(live_state(run.model, run.optimizer))
    states = {save_at: _tensors(reference)}  # the state after each update, for provenance
    lrs = {save_at: reference["optimizer"]["param_groups"][0].get("lr")}
    saver, hold = AsyncSaver(take), threading.Event()
    saver.save(run.model, run.optimizer, run.step, hold)
    for _ in range(steps_after):
        train_steps(run, 1, eval_every=0)
        now = copy.deepcopy(live_state(run.model, run.optimizer))
        states[run.step], lrs[run.step] = _tensors(now), now["optimizer"]["param_groups"][0].get("lr")
    hold.set()
    saver.join()
    loaded = saver.load(save_at) if save_at in saver.saved else {}
    saved = _tensors(loaded)
    expected = states[save_at]
    result = RaceResult(save_at, steps_after, compared=len(expected))
    for name, t in expected.items():
        if name not in saved:
            result.missing.append(name)
        elif saved[name].shape != t.shape or not torch.equal(saved[name], t):
            result.differ.append(name)
    for name, t in saved.items():
        result.from_step[name] = next((k for k, st in states.items() if name in st and st[name].shape == t.shape
                                       and torch.equal(st[name], t)), None)
    try:
        lr = loaded["optimizer"]["param_groups"][0]["lr"]
        result.lr_from = next((k for k, v in lrs.items() if v == lr), None)
    except (KeyError, IndexError, TypeError):
        result.lr_from = None
    control = start(pipe, seed)
    train_steps(control, save_at + steps_after, eval_every=0)
    result.run_changed = not all(torch.equal(a, b) for a, b in zip(run.model.parameters(), control.model.parameters()))
    return result


def resume_from(pipe: Pipeline, state: dict, scheduler_state: dict, step: int, seed: int = 0):
    """A fresh run of ``pipe`` continued from a checkpoint ``state`` (``{"model", "optimizer"}``), the
    scheduler's state and the step (the data cursor) it was taken at. The pipelines of this notebook
    have no dropout, so no RNG state is needed."""
    from ..reference.train import start

    run = start(pipe, seed)
    run.model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    run.scheduler.load_state_dict(scheduler_state)
    run.step = step
    return run


def same_parameters(a, b) -> bool:
    """Bit-identical parameters of two models."""
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


# ----- FLOPs and a measured matmul rate -------------------------------------------------------------
def counted_flops(pipe: Pipeline, seed: int = 0) -> tuple[int, dict]:
    """FLOPs of one training step's forward and backward, counted by ``FlopCounterMode`` (a matmul of
    (M, K) by (K, N) is 2 M N K; elementwise ops, softmax and layer norm count 0), and the count per
    operator."""
    from torch.utils.flop_counter import FlopCounterMode

    from ..reference.train import batch_at

    model = pipe.build_model(seed)
    batch = batch_at(pipe, seed, 0)
    with FlopCounterMode(display=False) as counter:
        pipe.loss_fn(model(batch.inputs), batch).backward()
    per_op = {str(op).split(".")[-1] if "." in str(op) else str(op): n
              for op, n in counter.get_flop_counts().get("Global", {}).items()}
    return counter.get_total_flops(), per_op


def rule_flops(pipe: Pipeline) -> dict[str, float]:
    """The rule of thumb per training step: 6 N per position (N: the parameters of the matmuls, i.e.
    without the embedding tables), plus attention's two T x T matmuls per layer (QK^T and AV, 2 x 2 T d
    FLOPs per position forward), times 3 for forward plus backward. Positions include padding."""
    model = pipe.build_model(0)
    n_matmul = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and not n.startswith(("tok", "pos")))
    pos = positions(pipe)
    T, d, L = pipe.seq_len, pipe.model.d_model, pipe.model.n_layer
    six_n = 6 * n_matmul * pos
    attention = 3 * L * 2 * 2 * T * d * pos
    return {"N": n_matmul, "6N": six_n, "attention": attention, "total": six_n + attention}


def matmul_peak(n: int = 256, repeats: int = 20, rounds: int = 5) -> float:
    """This machine's float32 matmul rate in FLOP/s on the current number of threads: the best of
    ``rounds`` timings of ``repeats`` (n x n) @ (n x n) products (2 n^3 FLOPs each).

    A *measured* rate at one size, not the hardware's peak (the data-sheet FLOP/s for the dtype,
    which larger matmuls approach and never pass). Model FLOPs/s divided by it is a utilisation of
    this rate; MFU (Chowdhery et al. 2022, PaLM, appendix B) divides by the peak, so it is lower."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(repeats):
            torch.mm(a, b)
        best = min(best, (time.perf_counter() - t0) / repeats)
    return 2 * n ** 3 / best


# ----- profiler and instrumentation cost ----------------------------------------------------------
def profile_steps(run, wait: int = 1, warmup: int = 1, active: int = 3):
    """Profile ``wait + warmup + active`` steps of ``run`` with ``torch.profiler.schedule``; returns
    the profiler (read it with ``key_averages()``)."""
    import os

    from torch.profiler import ProfilerActivity, profile, schedule

    from ..reference.train import train_steps

    # kineto (the profiler's C++ side) prints two lines to stderr per profile at its default level;
    # level 6 silences them (and its error messages). It takes effect only before the first profile
    # of the process, and a value already set is kept.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")

    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=wait, warmup=warmup, active=active)) as prof:
        for _ in range(wait + warmup + active):
            train_steps(run, 1, eval_every=0)
            prof.step()
    return prof


def loop_extras(run, repeats: int = 50) -> dict[str, float]:
    """Median seconds of the loop's own telemetry inside two phases, timed apart on ``run``'s model:
    ``bwd`` holds the gradient norm (one ``vector_norm`` per gradient, stacked, and an ``.item()``) and
    the clipping when the pipeline clips; ``opt`` holds two flat copies of every parameter (before and
    after the update, for ``rel_update``). The norms of those copies are taken after the ``opt`` lap
    and are charged to no phase. One backward pass is run first so the gradients exist; the
    parameters are not updated."""
    from ..reference.train import _flat, batch_at

    pipe, model = run.pipe, run.model
    params = list(model.parameters())
    batch = batch_at(pipe, run.seed, run.step + run.data_offset)
    model.zero_grad(set_to_none=True)
    pipe.loss_fn(model(batch.inputs), batch).backward()
    grads = [p.grad for p in params if p.grad is not None]
    bwd, opt = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item()
        if pipe.clip is not None:
            torch.nn.utils.clip_grad_norm_(params, pipe.clip)
        bwd.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        _flat(params)
        _flat(params)
        opt.append(time.perf_counter() - t0)
    model.zero_grad(set_to_none=True)
    return {"bwd": statistics.median(bwd), "opt": statistics.median(opt)}


# ----- a synchronous save, split in its halves --------------------------------------------------
def _state(run) -> dict:
    return {"model": run.model.state_dict(), "optimizer": run.optimizer.state_dict()}


@dataclass(frozen=True)
class SaveWithoutDisk:
    """A control for ``SyncCheckpoint``: the same ``torch.save`` into memory every ``every`` steps,
    without the modelled disk's wait."""
    every: int

    def __call__(self, run) -> None:
        if run.step % self.every == 0:
            torch.save(_state(run), io.BytesIO())


@dataclass(frozen=True)
class DiskWithoutSave:
    """The other control for ``SyncCheckpoint``: every ``every`` steps, the modelled disk's wait
    for ``nbytes`` (``DISK_BYTES_PER_S``), with nothing serialised. ``saved_bytes`` gives the size
    the bug writes."""
    every: int
    nbytes: int

    def __call__(self, run) -> None:
        if run.step % self.every == 0:
            charge(self.nbytes / DISK_BYTES_PER_S)


def saved_bytes(pipe: Pipeline, seed: int = 0) -> int:
    """The size of ``torch.save`` of the model and optimizer state after one step of ``pipe`` (from
    then on it does not change: Adam's moments exist from the first step)."""
    from ..reference.train import start, train_steps

    run = train_steps(start(pipe.replace(checkpoint=no_checkpoint), seed), 1, eval_every=0)
    buffer = io.BytesIO()
    torch.save(_state(run), buffer)
    return buffer.tell()


def after_save(pipe: Pipeline, every: int, steps: int = 64, seed: int = 0) -> dict[str, float]:
    """``pipe`` trained ``steps`` steps from ``seed`` on the real clock. Step times (the sum of the
    phases, seconds): the median of the steps whose checkpoint call saves (every ``every``-th), of
    the step right after each, and of the others (the first step left out), with the others'
    quartiles (``q1``, ``q3``). A pipeline that saves nothing gives the same positions' noise."""
    from ..reference.train import start, train_steps

    times = step_times(train_steps(start(pipe, seed), steps, eval_every=0))
    saving = [s for s in range(1, len(times)) if (s + 1) % every == 0]  # run.step after step s is s + 1
    after = [s + 1 for s in saving if s + 1 < len(times)]
    others = [s for s in range(1, len(times)) if s not in saving and s not in after]
    q1, _, q3 = statistics.quantiles([times[s] for s in others], n=4)
    return {"saving": statistics.median(times[s] for s in saving), "after": statistics.median(times[s] for s in after),
            "others": statistics.median(times[s] for s in others), "q1": q1, "q3": q3}


def overhead(run, blocks: int = 6, block: int = 8) -> dict[str, float]:
    """Per-layer telemetry (``course.toolkit.telemetry``: a clone of every parameter before the update, then
    seven statistics per parameter tensor, eight ``.item()`` calls since ``rel_update`` takes two)
    switched on and off in alternating blocks of one run; the median step time of each
    and their ratio."""
    from ..toolkit.telemetry import Telemetry
    from ..reference.train import train_steps

    named = [(n, p) for n, p in run.model.named_parameters() if p.requires_grad]
    tel = Telemetry([n for n, _ in named])
    plain_pipe = run.pipe
    on_pipe = plain_pipe.replace(update=tel.wrap(plain_pipe.update, [p for _, p in named]))
    times = {"off": [], "on": []}
    try:
        for i in range(blocks):
            mode = "on" if i % 2 else "off"
            run.pipe = on_pipe if mode == "on" else plain_pipe
            first = len(run.phases["data"])
            train_steps(run, block, eval_every=0)
            times[mode] += step_times(run)[first + 1:]  # the first step of a block pays the switch
    finally:
        run.pipe = plain_pipe
    off, on = statistics.median(times["off"]), statistics.median(times["on"])
    return {"off": off, "on": on, "ratio": on / off}


# ----- a widget -----------------------------------------------------------------------------------
def interval_explorer(traces: dict):
    """A slider over checkpoint intervals (the keys of ``traces``: runs traced under the cost model);
    each position shows that run's stacked phases and a summary: its mean and median step, and how
    many of its steps take over twice the median step of the reference run, the last key's (the
    longest interval). Returns a ``VBox`` with ``.slider``, ``.summary`` and ``.output``; its plain
    text (where no live widget shows) is the summary of every interval, one line each
    (``interval_summary``)."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    keys = list(traces)
    slider = widgets.SelectionSlider(options=keys, value=keys[0], description="save every",
                                     style={"description_width": "initial"}, continuous_update=False)
    summary, output = widgets.HTML(), widgets.Output()

    def update(change=None) -> None:
        run = traces[slider.value]
        summary.value = interval_summary(traces, slider.value)
        output.clear_output(wait=True)
        with output:
            fig, ax = plt.subplots(figsize=(7, 3))
            stacked_plot(run, ax, title=f"synchronous checkpoint every {slider.value} steps (cost model)")
            ax.legend(fontsize=7, ncol=4)
            plt.show()

    slider.observe(update, names="value")
    update()
    box = widgets.VBox([slider, summary, output])
    box.slider, box.summary, box.output = slider, summary, output
    return with_text(box, lambda: "\n".join(interval_summary(traces, k) for k in keys))


def interval_summary(traces: dict, key) -> str:
    """One line on the run ``traces[key]`` (a checkpoint every ``key`` steps): its mean and median step
    time, and how many of its steps take over twice the median step of the reference run, the last
    key's (the longest interval), whose median the line states."""
    ref_key = list(traces)[-1]
    ref = statistics.median(step_times(traces[ref_key]))
    times = step_times(traces[key])
    return (f"save every {key} steps: mean step {1e3 * statistics.mean(times):.2f} ms, "
            f"median {1e3 * statistics.median(times):.2f} ms; {sum(t > 2 * ref for t in times)} of {len(times)} "
            f"steps over twice the median step of the save-every-{ref_key} run ({1e3 * ref:.2f} ms)")
