"""Notebook 10: mixed precision (autocast, GradScaler) and memory, on CPU and, where there is one, a GPU.

What runs everywhere (CPU included):

* ``dtype_facts``: range and precision of float16, bfloat16 and float32 (``torch.finfo``).
* ``scaled_step``: the reference update under ``torch.amp.GradScaler`` (scale, backward, unscale,
  clip, step, update), returning whether the optimizer step was skipped. ``scaler.step`` itself
  returns what ``optimizer.step()`` returned (``None`` for the built-in optimizers) whether it
  stepped or not: a skip shows as the scale falling across ``update()``.
* ``SavedTensors``: a meter of the bytes of every tensor autograd packs for backward, by a
  ``saved_tensors_hooks`` pair; deterministic, so it works as a test on CPU. It counts each packing
  (parameters, and a tensor saved by two ops twice): it overcounts shared storage, can undercount a
  saved view of a larger tensor (the view pins its whole base) and misses graph nodes: a growth
  meter, not a bound.
* ``run``: a short bf16-autocast training loop on a ``Pipeline`` that calls the two parts of
  notebook 10, ``keep_loss`` (what the loop keeps of each step's loss for its history) and
  ``monitor`` (a loss on a fixed probe batch each step), and records per step the saved bytes still
  alive and how many of the step losses are still referenced.

* ``precision_run``, ``ScaledLogits``, ``activation_peaks``, ``over_fp16``: fp16 autocast training on
  CPU (torch supports ``torch.autocast("cpu", dtype=torch.float16)`` and ``GradScaler("cpu")``),
  with and without a scaler, against bf16, and the per-module peaks that show which output outgrows
  fp16's 65504; ``overflow_problems`` (with ``reference_twin``): the check of a fix for the
  ``fp16-overflow`` mystery family (``course.bugs.precision``).

GPU only (each raises ``RuntimeError`` without CUDA): ``cuda_step_times``, ``phase_peaks`` and
``snapshot_growth``, used by notebook 10's GPU sections.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field

import torch

from ..reference.parts import keep_float, monitor_no_grad, probe_loss  # noqa: F401  (the pipeline's keep_loss and monitor parts)
# the same settings with every reference part, to compare a fixed pipeline's run against (one function
# with capstone.healthy_twin: switching off one switches off both)
from ..reference.pipeline import healthy_twin as reference_twin

SKIP_LINE = "needs a CUDA GPU: skipped"


def has_cuda() -> bool:
    return torch.cuda.is_available()


# ----- formats -------------------------------------------------------------------------------------
def dtype_facts() -> dict[str, dict[str, float]]:
    """Largest finite value, smallest normal, and epsilon (gap above 1) of each format."""
    return {str(d).replace("torch.", ""): {"max": float(torch.finfo(d).max), "tiny": float(torch.finfo(d).tiny),
                                           "eps": float(torch.finfo(d).eps)}
            for d in (torch.float16, torch.bfloat16, torch.float32)}


# ----- GradScaler ----------------------------------------------------------------------------------
def scaled_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler, loss: torch.Tensor,
                clip: float | None = None) -> bool:
    """One update under a GradScaler; True if the optimizer step was skipped (non-finite gradients).

    Clipping happens on unscaled gradients (``unscale_`` first), so ``clip`` is in the units of the
    loss, not of the scaled loss."""
    scaler.scale(loss).backward()
    if clip is not None:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    before = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return scaler.get_scale() < before


def toy_problem(seed: int, poison: bool = False, dim: int = 6):
    """A linear model, plain SGD (lr 1) and a loss whose gradient has a known global norm; with
    ``poison`` one input is inf, so the loss and the gradient hold an inf. Returns (model, optimizer, loss)."""
    g = torch.Generator().manual_seed(seed)
    model = torch.nn.Linear(dim, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.randn(1, dim, generator=g))
    x = torch.randn(dim, generator=g) * (1 + 4 * torch.rand(1, generator=g))
    if poison:
        x[int(torch.randint(dim, (1,), generator=g))] = float("inf")
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    loss = (model.weight[0] * x).sum()  # gradient wrt the weight is x
    return model, optimizer, loss


# ----- fp16 overflow, run on CPU ---------------------------------------------------------------------
FP16_MAX = 65504.0


class ScaledLogits(torch.nn.Module):
    """``model``'s logits times ``factor``: the stand-in for a model whose outputs outgrow fp16 (a
    temperature of 1e-6 where 1 was meant, a missing 1/sqrt(d) that compounds). Under fp16 autocast
    the multiply runs in fp16, so a logit above ``65504 / factor`` in size becomes inf."""

    def __init__(self, model: torch.nn.Module, factor: float):
        super().__init__()
        self.model, self.factor = model, factor

    def forward(self, ids):
        return self.model(ids) * self.factor


@dataclass
class PrecisionRun:
    label: str
    losses: list = field(default_factory=list)  # each step's loss as computed (float, maybe inf/NaN)
    skipped: list = field(default_factory=list)  # True where the scaler skipped optimizer.step()
    scales: list = field(default_factory=list)  # the scale after update() (1.0 without a scaler)
    weights_finite: list = field(default_factory=list)  # every parameter finite after the step
    weights: torch.Tensor | None = None  # every parameter after the last step, flattened (float32)

    def first_nonfinite(self) -> int | None:
        """The first step whose loss is inf or NaN (None if every loss is finite). Step 0's loss is
        computed before any update, so a non-finite one there is not caused by the learning rate."""
        return next((i for i, v in enumerate(self.losses) if not math.isfinite(v)), None)

    def summary(self) -> str:
        bad = sum(not math.isfinite(v) for v in self.losses)
        return (f"{self.label:>22}: non-finite losses {bad}/{len(self.losses)}, skipped steps {sum(self.skipped)}, "
                f"final scale {self.scales[-1]:g}, weights finite at the end {self.weights_finite[-1]}, "
                f"last loss {self.losses[-1]:.4g}")


def precision_run(pipe, dtype=torch.float16, use_scaler: bool = False, steps: int = 8, seed: int = 0,
                  logit_scale: float = 1.0, lr: float | None = None, batch_seed: int | None = None,
                  label: str = "") -> PrecisionRun:
    """``steps`` training steps of ``pipe``'s model on CPU under ``torch.autocast("cpu", dtype)``
    (``dtype=None``: float32, no autocast), with ``torch.amp.GradScaler("cpu")`` when ``use_scaler``
    and the logits times ``logit_scale`` (``ScaledLogits``). ``lr`` overrides the optimizer's learning
    rate (0 moves finite weights by nothing, to test whether the updates cause what is seen; a NaN
    gradient still makes AdamW's weights NaN, since 0 x NaN is NaN); ``batch_seed``
    draws other batches than ``seed``. Records per step the loss, the skip, the scale and whether the
    weights are finite. The pipeline's ``update`` (clipping, schedule) is not called: the optimizer
    steps through the scaler, so this tests the precision, not the pipeline's update."""
    from ..reference.train import batch_at
    model = pipe.build_model(seed)
    net = ScaledLogits(model, logit_scale) if logit_scale != 1.0 else model
    optimizer = pipe.make_optimizer(model, pipe)
    if lr is not None:
        for g in optimizer.param_groups:
            g["lr"] = lr
    scaler = torch.amp.GradScaler("cpu", enabled=use_scaler)
    out = PrecisionRun(label or f"{dtype}, scaler {use_scaler}")
    for step in range(steps):
        batch = batch_at(pipe, seed if batch_seed is None else batch_seed, step)
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = pipe.loss_fn(net(batch.inputs), batch)
        before = scaler.get_scale() if use_scaler else 1.0
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        out.losses.append(loss.detach().float().item())
        out.scales.append(scaler.get_scale() if use_scaler else 1.0)
        out.skipped.append(bool(use_scaler and out.scales[-1] < before))
        out.weights_finite.append(all(bool(torch.isfinite(p).all()) for p in model.parameters()))
    out.weights = torch.cat([p.detach().float().flatten() for p in model.parameters()])
    return out


def activation_peaks(model: torch.nn.Module, inputs, logit_scale: float = 1.0) -> dict[str, float]:
    """The largest absolute value each leaf module outputs (and ``"logits"``: the model's output
    times ``logit_scale``), in float32 without autocast, by forward hooks. A peak above
    ``FP16_MAX`` is one that fp16 cannot hold; below it says only that these inputs stay in range
    (a product or a sum inside an op can still overflow)."""
    peaks, hooks = {}, []

    def hook(name):
        def record(_mod, _inp, out):
            if torch.is_tensor(out) and out.is_floating_point():
                peaks[name] = max(peaks.get(name, 0.0), out.detach().abs().max().item())
        return record

    for name, mod in model.named_modules():
        if name and not list(mod.children()):
            hooks.append(mod.register_forward_hook(hook(name)))
    try:
        with torch.no_grad():
            peaks["logits"] = (model(inputs) * logit_scale).abs().max().item()
    finally:
        for h in hooks:
            h.remove()
    return peaks


def over_fp16(peaks: dict[str, float]) -> list[str]:
    """The names in ``activation_peaks``'s result whose peak fp16 cannot hold (above 65504)."""
    return [name for name, v in peaks.items() if not v <= FP16_MAX]


def overflow_problems(pipe, seed: int = 0, steps: int = 6, atol: float = 1e-3, rtol_weights: float = 1e-5) -> list[str]:
    """Notebook 10's check of an fp16 fix: ``pipe`` trained ``steps`` steps under fp16 autocast with a
    ``GradScaler`` on ``seed`` must keep its losses and weights finite, skip no more steps than its
    reference twin (``reference_twin``, run the same way: a healthy run can skip its first step while
    the scaler's first scale, 65536, overflows a gradient), and end where the twin ends: every step's
    loss within ``atol`` and the final weights within ``rtol_weights`` of the twin's largest weight.
    A part that computes what the reference part computes meets that (its run is the same run, to
    rounding); a fix that only hides the overflow (the broken loss taken in float32) or changes the
    optimizer's settings (a learning rate or weight decay other than the ones passed) does not. It
    says nothing about parts the run does not call (the pipeline's ``update``, evaluation)."""
    got = precision_run(pipe, torch.float16, use_scaler=True, steps=steps, seed=seed)
    want = precision_run(reference_twin(pipe), torch.float16, use_scaler=True, steps=steps, seed=seed)
    found = []
    if got.first_nonfinite() is not None:
        found.append(f"the loss is non-finite from step {got.first_nonfinite()} under fp16 autocast")
    if sum(got.skipped) > sum(want.skipped):
        found.append(f"the scaler skipped {sum(got.skipped)} of {steps} steps, the reference parts {sum(want.skipped)}")
    if not all(got.weights_finite):
        found.append("the weights are not finite after the run")
    if not found:
        worst = max(range(steps), key=lambda i: abs(got.losses[i] - want.losses[i]))
        if abs(got.losses[worst] - want.losses[worst]) > atol:
            found.append(f"at step {worst} the loss is {got.losses[worst]:.6g} where the same settings with "
                         f"the reference parts give {want.losses[worst]:.6g}")
        elif got.weights.shape != want.weights.shape:
            found.append("the model has other parameters than the same settings with the reference parts")
        else:
            moved = ((got.weights - want.weights).abs().max() / want.weights.abs().max()).item()
            if moved > rtol_weights:
                found.append(f"after {steps} steps the weights differ from the reference parts' by {moved:.2g} "
                             f"of the largest weight (the optimizer's settings are not the ones passed?)")
    return found


# ----- memory kept for backward --------------------------------------------------------------------
class _Held:
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor


class SavedTensors:
    """Inside ``with meter:``, every tensor autograd packs for backward is counted while its graph
    holds it: ``meter.bytes`` and ``meter.count`` are what is alive now. Backward frees a graph's
    saved tensors; a graph nobody runs backward on holds them until its last reference goes.

    Limits: each packing counts in full, so a parameter saved by the op that uses it, or one tensor
    saved by two ops, adds its bytes each time (it overcounts shared storage, not a count of distinct storages or of
    activations alone); a saved view counts its own size though it pins its whole base storage, so
    it can undercount; graph nodes without saved tensors are not counted: a growth meter, not a bound; tensors packed outside ``with meter:`` or kept
    outside autograd (a list of detached tensors) are not seen."""

    def __init__(self):
        self.bytes = 0
        self.count = 0
        self._hooks = None

    def _pack(self, t):
        # detached: a packed object that held the tensor itself would hold its grad_fn, a cycle
        # through the graph that keeps a dropped graph (an output saved by its own node) alive
        held = _Held(t.detach())
        n = t.numel() * t.element_size()
        self.bytes += n
        self.count += 1
        weakref.finalize(held, self._release, n)
        return held

    def _release(self, n):
        self.bytes -= n
        self.count -= 1

    def __enter__(self):
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda held: held.tensor)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        return False


# ----- the parts of notebook 10 and the loop that calls them ----------------------------------------
@dataclass
class MemoryRun:
    losses: list = field(default_factory=list)  # each step's training loss, float
    kept: list = field(default_factory=list)  # what keep_loss returned, as the loop keeps it
    monitor: list = field(default_factory=list)  # what monitor returned, as the loop keeps it
    monitor_expected: list = field(default_factory=list)  # the probe loss computed the reference way
    saved_bytes: list = field(default_factory=list)  # bytes saved for backward still alive after each step
    losses_alive: list = field(default_factory=list)  # step losses still referenced after each step


def run(pipe, steps: int = 6, seed: int = 0, autocast: bool = True) -> MemoryRun:
    """``steps`` training steps of ``pipe`` under bf16 autocast on CPU (no scaler: bf16 has float32's
    range), calling its ``keep_loss`` and ``monitor`` parts each step, with the memory meters."""
    from ..reference.train import batch_at
    model = pipe.build_model(seed)
    optimizer = pipe.make_optimizer(model, pipe)
    probe = pipe.collate(pipe.windows("val")[:16], pipe.language().PAD)
    out, refs = MemoryRun(), []
    with SavedTensors() as meter:
        for step in range(steps):
            batch = batch_at(pipe, seed, step)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = pipe.loss_fn(model(batch.inputs), batch)
            refs.append(weakref.ref(loss))
            loss.backward()
            pipe.update(optimizer)
            optimizer.zero_grad(set_to_none=True)
            out.losses.append(loss.detach().item())
            out.kept.append(pipe.keep_loss(loss))
            out.monitor.append(pipe.monitor(model, probe, pipe.loss_fn))
            with torch.no_grad():  # the reference, inline (grading switches off monitor_no_grad)
                out.monitor_expected.append(probe_loss(model, probe, pipe.loss_fn).item())
            del loss
            out.saved_bytes.append(meter.bytes)
            out.losses_alive.append(sum(r() is not None for r in refs))
    return out


def growth(values: list) -> float:
    """Last minus first of a per-step series (0 for a flat one)."""
    return float(values[-1] - values[0])


def _number(x) -> float:
    return x.detach().item() if torch.is_tensor(x) else float(x)


def memory_problems(r: MemoryRun) -> list[str]:
    """The reference check of a run: nothing grows, the history holds numbers equal to the losses,
    and the monitor says what the probe's loss is."""
    found = []
    if growth(r.saved_bytes) > 0:
        found.append(f"saved-for-backward bytes grow by {growth(r.saved_bytes):.0f} over the run")
    if growth(r.losses_alive) > 0:
        found.append(f"{r.losses_alive[-1]} step losses are still referenced after the run")
    if any(torch.is_tensor(k) and k.requires_grad for k in r.kept + r.monitor):
        found.append("the history keeps tensors that require grad")
    if any(abs(_number(k) - v) > 1e-5 for k, v in zip(r.kept, r.losses)):
        found.append("the kept losses are not the step losses")
    if any(abs(_number(m) - e) > 1e-4 for m, e in zip(r.monitor, r.monitor_expected)):
        found.append("the monitor does not report the probe batch's loss")
    return found


# ----- GPU only --------------------------------------------------------------------------------------
def _need_cuda():
    if not torch.cuda.is_available():
        raise RuntimeError(SKIP_LINE)


def cuda_step_times(model: torch.nn.Module, inputs, targets, steps: int = 20) -> dict[str, float]:
    """Median seconds per training step on CUDA in fp32, bf16 autocast, and fp16 autocast with a
    GradScaler (events, after a warm-up of 3 steps)."""
    _need_cuda()
    model = model.cuda()
    inputs, targets = inputs.cuda(), targets.cuda()
    times = {}
    for name, dtype in (("fp32", None), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        scaler = torch.amp.GradScaler("cuda", enabled=dtype is torch.float16)
        per = []
        for i in range(steps + 3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
                loss = torch.nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            end.record()
            torch.cuda.synchronize()
            if i >= 3:
                per.append(start.elapsed_time(end) / 1000)
        times[name] = sorted(per)[len(per) // 2]
    return times


def phase_peaks(phases: dict) -> dict[str, dict[str, int]]:
    """For each ``name: fn`` run in order: bytes allocated after it, reserved after it, and the peak
    allocated during it (``reset_peak_memory_stats`` before each)."""
    _need_cuda()
    out = {}
    for name, fn in phases.items():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        out[name] = {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
                     "peak": torch.cuda.max_memory_allocated()}
    return out


def _library_roots() -> tuple[str, ...]:
    """Folders whose files are Python's or an installed library's, not the learner's or the course's."""
    import sysconfig
    paths = sysconfig.get_paths()
    return tuple({paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)})


def snapshot_growth(snapshot: dict, top: int = 3) -> list[tuple[int, str]]:
    """From ``torch.cuda.memory._snapshot()``: the live bytes per allocating site, largest first.
    A site is the innermost Python frame of a course or notebook file (where the tensor was made,
    e.g. a line of the model's forward) and, when another such frame called it, the outermost one
    (the notebook's line that ran it): "model.py:127 <- cell.py:9". Frames of torch, of installed
    libraries and of Python's standard library are skipped, and so are C++ frames, which without
    symbols read ``??:0`` (seen on an H200 with torch 2.11). A block with no frame left reads
    "(no python frame)". The site says where memory was allocated, not what keeps it alive."""
    roots = _library_roots()
    per = {}
    for seg in snapshot.get("segments", []):
        for block in seg.get("blocks", []):
            if block.get("state") != "active_allocated":
                continue
            mine = [f for f in block.get("frames", []) if f.get("filename", "").endswith(".py")
                    and "site-packages" not in f["filename"] and "/torch/" not in f["filename"]
                    and not f["filename"].startswith(roots)]
            ends = mine[:1] + mine[-1:] if len(mine) > 1 else mine
            key = " <- ".join(f"{f['filename'].rsplit('/', 1)[-1]}:{f.get('line', '?')}" for f in ends) or "(no python frame)"
            per[key] = per.get(key, 0) + block.get("size", 0)
    return sorted(((b, k) for k, b in per.items()), reverse=True)[:top]
