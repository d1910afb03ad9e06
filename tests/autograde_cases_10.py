"""Targeted submissions for 10_amp_memory (see tests/autograde_cases.py for the format).

Every graded CPU exercise has an alternative correct answer (full marks), a realistic wrong answer
and a degenerate one (a constant, a delegation to the package function that is switched off, or one
that reads the pipeline's settings), each with the exact test cells it must lose. ``fix`` calls
``name_cause``, so a wrong namer loses the fix too. The GPU exercise (``peak_bytes``,
``test_peak_bytes``, tagged ``gpu``) is not graded on a grader without CUDA: its cases are in
``GPU_CASES``, which ``make test-gpu`` grades on a GPU kernel (GRADE_KERNEL=gpu).
"""
import os

from autograder.grading import Case

A = "10_amp_memory"
STEP, DETECT, CAUSE, FIX, PEAK = "test_amp_step", "test_mystery_detect", "test_mystery_cause", "test_fix", "test_peak_bytes"

# ----- amp_step ------------------------------------------------------------------------------------
# Another way: skip detected from the gradients themselves (non-finite after unscale_), clip by hand.
_STEP_ALT = """def amp_step(model, optimizer, scaler, loss, clip):
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    finite = all(bool(torch.isfinite(g).all()) for g in grads)
    if finite:
        total = torch.sqrt(sum((g.double() ** 2).sum() for g in grads)).item()
        if total > clip:
            for g in grads:
                g.mul_(clip / (total + 1e-6))
    scaler.step(optimizer)
    scaler.update()
    for p in model.parameters():
        p.grad = None
    return not finite
"""

# Realistic wrong: clips the scaled gradients (no unscale_ first): the clean step moves by clip/scale.
_STEP_CLIP_SCALED = """def amp_step(model, optimizer, scaler, loss, clip):
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    return scaler.get_scale() < scale
"""

# Realistic wrong: trusts scaler.step's return value (None whether it skipped or not).
_STEP_RETURN_VALUE = """def amp_step(model, optimizer, scaler, loss, clip):
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    skipped = scaler.step(optimizer) is None
    scaler.update()
    optimizer.zero_grad()
    return skipped
"""

# ----- detect --------------------------------------------------------------------------------------
_DETECT_ALT = """def detect(pipe):
    short = amp.run(pipe, steps=2, seed=5)
    long = amp.run(pipe, steps=5, seed=5)
    return bool(long.saved_bytes[-1] > short.saved_bytes[-1] or long.losses_alive[-1] > 1)
"""

# Realistic wrong: watches only the bytes saved for backward (misses kept losses after backward).
_DETECT_BYTES_ONLY = """def detect(pipe):
    r = amp.run(pipe, steps=4, seed=0)
    return r.saved_bytes[-1] > r.saved_bytes[0]
"""

# ----- name_cause ----------------------------------------------------------------------------------
_NAME_ALT = """def name_cause(pipe):
    r = amp.run(pipe, steps=3, seed=2)
    grows = [b - a for a, b in zip(r.saved_bytes, r.saved_bytes[1:])]
    if min(grows) > 0:
        return "monitor"
    return "history" if r.losses_alive[-1] == len(r.losses_alive) else "healthy"
"""

# Realistic wrong: names the cause by the type of what the loop keeps: a monitor that keeps its
# logits in a list of its own returns a float, and is called healthy.
_NAME_BY_HISTORY_TYPE = """def name_cause(pipe):
    r = amp.run(pipe, steps=3, seed=0)
    if any(torch.is_tensor(x) for x in r.kept):
        return "history"
    if any(torch.is_tensor(x) for x in r.monitor):
        return "monitor"
    return "healthy"
"""

_NAME_READS_SETTINGS = """def name_cause(pipe):
    return ["healthy", "history", "monitor"][pipe.data_seed % 3]
"""

# ----- fix -----------------------------------------------------------------------------------------
# Another way: a detach-then-float history, and a monitor that switches grad off with set_grad_enabled.
_FIX_ALT = """def fix(pipe):
    def keep(loss):
        return float(loss.detach())

    def monitor(model, batch, loss_fn):
        with torch.set_grad_enabled(False):
            return float(loss_fn(model(batch.inputs), batch))

    cause = name_cause(pipe)
    return {"history": lambda: pipe.replace(keep_loss=keep),
            "monitor": lambda: pipe.replace(monitor=monitor)}.get(cause, lambda: pipe)()
"""

# Realistic wrong: replaces both parts, the one that was not broken too.
_FIX_BOTH_PARTS = """def fix(pipe):
    return pipe.replace(keep_loss=amp.keep_float, monitor=amp.monitor_no_grad)
"""

# Realistic wrong: a monitor that stops the leak by reporting nothing useful.
_FIX_MONITOR_ZERO = """def fix(pipe):
    cause = name_cause(pipe)
    if cause == "history":
        return pipe.replace(keep_loss=lambda loss: loss.item())
    if cause == "monitor":
        return pipe.replace(monitor=lambda model, batch, loss_fn: 0.0)
    return pipe
"""

# Realistic wrong: reports whether the loss was finite, not whether the scaler skipped the step; a
# finite loss whose scaled gradient overflows is skipped by the scaler and reported as a step.
_STEP_REPORTS_LOSS = """def amp_step(model, optimizer, scaler, loss, clip):
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    return not bool(torch.isfinite(loss))
"""

CASES = [
    # amp_step
    Case(A, "step_skip_from_gradients", {"amp_step": _STEP_ALT}, set()),
    Case(A, "step_clips_scaled_gradients", {"amp_step": _STEP_CLIP_SCALED}, {STEP}),
    Case(A, "step_reports_the_loss", {"amp_step": _STEP_REPORTS_LOSS}, {STEP}),
    Case(A, "step_trusts_return_value", {"amp_step": _STEP_RETURN_VALUE}, {STEP}),
    Case(A, "step_delegates",
         {"amp_step": "def amp_step(model, optimizer, scaler, loss, clip):\n"
                      "    return amp.scaled_step(model, optimizer, scaler, loss, clip)\n"}, {STEP}),
    # detect
    Case(A, "detect_two_lengths", {"detect": _DETECT_ALT}, set()),
    Case(A, "detect_bytes_only", {"detect": _DETECT_BYTES_ONLY}, {DETECT}),
    Case(A, "detect_always_true", {"detect": "def detect(pipe):\n    return True\n"}, {DETECT}),
    Case(A, "detect_delegates",
         {"detect": "def detect(pipe):\n    return bool(amp.memory_problems(amp.run(pipe)))\n"}, {DETECT}),
    # name_cause (fix calls it)
    Case(A, "cause_other_measure", {"name_cause": _NAME_ALT}, set()),
    Case(A, "cause_by_history_type", {"name_cause": _NAME_BY_HISTORY_TYPE}, {CAUSE, FIX}),
    Case(A, "cause_reads_settings", {"name_cause": _NAME_READS_SETTINGS}, {CAUSE, FIX}),
    # fix
    Case(A, "fix_other_parts", {"fix": _FIX_ALT}, set()),
    Case(A, "fix_both_parts", {"fix": _FIX_BOTH_PARTS}, {FIX}),
    Case(A, "fix_monitor_zero", {"fix": _FIX_MONITOR_ZERO}, {FIX}),
    Case(A, "fix_returns_pipe", {"fix": "def fix(pipe):\n    return pipe\n"}, {FIX}),
]

# Graded only where the grading kernel has CUDA (make test-gpu); on CPU test_peak_bytes is "not graded".
GPU_CASES = [
    Case(A, "peak_without_reset",
         {"peak_bytes": "def peak_bytes(fn):\n    base = torch.cuda.memory_allocated()\n    fn()\n"
                        "    return torch.cuda.memory_allocated() - base\n"}, {PEAK}),
    Case(A, "peak_delegates",
         {"peak_bytes": "def peak_bytes(fn):\n    return amp.phase_peaks({'f': fn})['f']['peak']\n"}, {PEAK}),
]

if os.environ.get("GRADE_KERNEL", "").strip().lower() == "gpu":  # make test-gpu
    CASES += GPU_CASES
