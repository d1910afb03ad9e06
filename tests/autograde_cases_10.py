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
P_DETECT, P_CAUSE, P_FIX = "test_fp16_detect", "test_fp16_cause", "test_fp16_fix"

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

# ----- the fp16 mystery: detect_fp16 ------------------------------------------------------------------
# Another way: the scaler's view: a healthy fp16 run with a GradScaler skips at most its first steps
# (the scaler finding its scale), a broken one skips most of them.
_P_DETECT_ALT = """def detect_fp16(pipe):
    r = amp.precision_run(pipe, torch.float16, use_scaler=True, steps=8, seed=3)
    return bool(sum(r.skipped) >= 4)
"""

# Realistic wrong: any skip under a scaler is called an overflow; a healthy draw whose first steps
# overflow the scaler's first scale (and are skipped, as designed) is called broken.
_P_DETECT_ANY_SKIP = """def detect_fp16(pipe):
    r = amp.precision_run(pipe, torch.float16, use_scaler=True, steps=6, seed=0)
    return any(r.skipped)
"""

# Realistic wrong: looks at the first step only (the loss before any update), so an overflow that
# the updates build up a few steps in is missed.
_P_DETECT_FIRST_STEP = """def detect_fp16(pipe):
    r = amp.precision_run(pipe, torch.float16, steps=1, seed=0)
    return r.first_nonfinite() is not None
"""

# Realistic wrong: looks for the overflow in float32 (a loss far above ln V): a layer whose output
# only fp16 cannot hold is invisible there.
_P_DETECT_FLOAT32 = """def detect_fp16(pipe):
    import math
    r = amp.precision_run(pipe, None, steps=6, seed=0)
    return bool(max(r.losses) > 3 * math.log(pipe.language().vocab_size))
"""

# Realistic wrong: allows one skip at the start, as one healthy run above shows; the hidden healthy
# draw skips two.
_P_DETECT_ONE_SKIP = """def detect_fp16(pipe):
    r = amp.precision_run(pipe, torch.float16, use_scaler=True, steps=6, seed=0)
    return sum(r.skipped) > 1
"""

# Realistic wrong: a float32 run against the same settings with the reference parts (a twin built by
# hand): it finds a bug, any bug, not the overflow: the hidden pipeline whose weights never move (and
# whose fp16 run is finite) sets it off.
_P_DETECT_AGAINST_TWIN = """def detect_fp16(pipe):
    import dataclasses
    from course.reference.pipeline import PARTS, Pipeline
    twin = Pipeline(**{f.name: getattr(pipe, f.name) for f in dataclasses.fields(Pipeline)
                       if f.name not in PARTS and f.name != "bugs"})
    a = amp.precision_run(pipe, None, steps=3, seed=0).losses
    b = amp.precision_run(twin, None, steps=3, seed=0).losses
    return any(abs(x - y) > 1e-4 or x != x for x, y in zip(a, b))
"""

# ----- name_fp16_cause ------------------------------------------------------------------------------
# Another way: float32 against fp16 at step 0 (a loss that is huge in float32 is the loss's own
# doing), and the learning-rate test (lr=0) for the updates.
_P_NAME_ALT = """def name_fp16_cause(pipe):
    if amp.precision_run(pipe, torch.float16, steps=6, seed=1).first_nonfinite() is None:
        return "healthy"
    if amp.precision_run(pipe, torch.float16, steps=6, seed=1, lr=0.0).first_nonfinite() is None:
        return "updates"
    first32 = amp.precision_run(pipe, None, steps=1, seed=1).losses[0]
    return "loss" if first32 > 100 else "model"
"""

# Realistic wrong: judges from step 0 alone (a finite first loss is called healthy), so the updates
# are never named.
_P_NAME_FIRST_STEP = """def name_fp16_cause(pipe):
    r16 = amp.precision_run(pipe, torch.float16, steps=1, seed=0)
    if r16.first_nonfinite() is None:
        return "healthy"
    r32 = amp.precision_run(pipe, None, steps=1, seed=0)
    return "loss" if r32.losses[0] > 100 else "model"
"""

_P_NAME_READS_SETTINGS = """def name_fp16_cause(pipe):
    return ["healthy", "loss", "model", "updates"][pipe.language_seed % 4]
"""

# ----- fix_fp16 -------------------------------------------------------------------------------------
# Another way: a loss written by hand in float32, a preparation that returns the model as built, and
# AdamW with its betas spelled out.
_P_FIX_ALT = """def fix_fp16(pipe):
    import torch.nn.functional as F

    def loss(logits, batch):
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch.targets.reshape(-1),
                               ignore_index=-100)

    def factory(params, lr, weight_decay):
        return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), weight_decay=weight_decay)

    place = name_fp16_cause(pipe)
    if place == "loss":
        return pipe.replace(loss_fn=loss)
    if place == "model":
        return pipe.replace(prepare=lambda m: m)
    if place == "updates":
        return pipe.replace(optimizer_factory=factory)
    return pipe
"""

# Realistic wrong: "compute the loss in float32": the broken loss, given float32 logits, is finite
# and enormous; the model and optimizer bugs are handled right.
_P_FIX_FLOAT32_LOSS = """def fix_fp16(pipe):
    place = name_fp16_cause(pipe)
    if place == "loss":
        broken = pipe.loss_fn
        return pipe.replace(loss_fn=lambda logits, batch: broken(logits.float(), batch))
    if place == "model":
        return pipe.replace(prepare=lambda m: m)
    if place == "updates":
        return pipe.replace(optimizer_factory=lambda p, lr, wd: torch.optim.AdamW(p, lr=lr, weight_decay=wd))
    return pipe
"""

# Realistic wrong: a safe learning rate written in, not the pipeline's.
_P_FIX_OWN_LR = """def fix_fp16(pipe):
    place = name_fp16_cause(pipe)
    if place == "loss":
        from course.toolkit.batch import token_cross_entropy
        return pipe.replace(loss_fn=token_cross_entropy)
    if place == "model":
        return pipe.replace(prepare=lambda m: m)
    if place == "updates":
        return pipe.replace(optimizer_factory=lambda p, lr, wd: torch.optim.AdamW(p, lr=1e-3))
    return pipe
"""

# Realistic wrong: AdamW at the rate passed, but with its own default weight decay (0.01), not the
# pipeline's.
_P_FIX_DEFAULT_DECAY = _P_FIX_OWN_LR.replace("AdamW(p, lr=1e-3)", "AdamW(p, lr=lr)")
assert _P_FIX_DEFAULT_DECAY != _P_FIX_OWN_LR

# Degenerate: every part that could be broken is replaced, the healthy ones too.
_P_FIX_ALL_PARTS = """def fix_fp16(pipe):
    from course.toolkit.batch import token_cross_entropy
    return pipe.replace(loss_fn=token_cross_entropy, prepare=lambda m: m,
                        optimizer_factory=lambda p, lr, wd: torch.optim.AdamW(p, lr=lr, weight_decay=wd))
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
    # the fp16 mystery (fix_fp16 calls name_fp16_cause)
    Case(A, "fp16_detect_by_skips", {"detect_fp16": _P_DETECT_ALT}, set()),
    Case(A, "fp16_detect_first_step", {"detect_fp16": _P_DETECT_FIRST_STEP}, {P_DETECT}),
    Case(A, "fp16_detect_any_skip", {"detect_fp16": _P_DETECT_ANY_SKIP}, {P_DETECT}),
    Case(A, "fp16_detect_one_skip_allowed", {"detect_fp16": _P_DETECT_ONE_SKIP}, {P_DETECT}),
    Case(A, "fp16_detect_against_twin", {"detect_fp16": _P_DETECT_AGAINST_TWIN}, {P_DETECT}),
    Case(A, "fp16_detect_in_float32", {"detect_fp16": _P_DETECT_FLOAT32}, {P_DETECT}),
    Case(A, "fp16_detect_always_true", {"detect_fp16": "def detect_fp16(pipe):\n    return True\n"}, {P_DETECT}),
    Case(A, "fp16_detect_delegates",
         {"detect_fp16": "def detect_fp16(pipe):\n    return bool(amp.overflow_problems(pipe))\n"}, {P_DETECT}),
    Case(A, "fp16_cause_float32_and_lr0", {"name_fp16_cause": _P_NAME_ALT}, set()),
    Case(A, "fp16_cause_first_step", {"name_fp16_cause": _P_NAME_FIRST_STEP}, {P_CAUSE, P_FIX}),
    Case(A, "fp16_cause_reads_settings", {"name_fp16_cause": _P_NAME_READS_SETTINGS}, {P_CAUSE, P_FIX}),
    Case(A, "fp16_fix_other_parts", {"fix_fp16": _P_FIX_ALT}, set()),
    Case(A, "fp16_fix_float32_loss", {"fix_fp16": _P_FIX_FLOAT32_LOSS}, {P_FIX}),
    Case(A, "fp16_fix_own_lr", {"fix_fp16": _P_FIX_OWN_LR}, {P_FIX}),
    Case(A, "fp16_fix_default_weight_decay", {"fix_fp16": _P_FIX_DEFAULT_DECAY}, {P_FIX}),
    Case(A, "fp16_fix_all_parts", {"fix_fp16": _P_FIX_ALL_PARTS}, {P_FIX}),
    Case(A, "fp16_fix_returns_pipe", {"fix_fp16": "def fix_fp16(pipe):\n    return pipe\n"}, {P_FIX}),
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
