# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (debug course)
#     language: python
#     name: debug-course
# ---

# %% [markdown]
# # 10 · AMP and memory: fp16 NaNs, memory that grows
#
# **What you learn.**
# * fp16 and bf16 are not two sizes of one thing: fp16 has more precision than bf16 (11 significant bits) and far less range (its largest
#   finite value is 65504), bf16 keeps practically float32's range and loses precision (8 significant bits).
# * What autocast does on CPU with bf16 (which dtype each op runs in, printed by this torch build),
#   and why bf16 needs no scaler.
# * GradScaler's mechanics on CPU (`torch.amp.GradScaler("cpu")`): the scale, the skipped step on an
#   inf gradient, backoff and growth, and what `scaler.step(...)` returns. You write a scaled update
#   that reports its skips (graded).
# * fp16 that overflows, run on CPU (`torch.autocast("cpu", dtype=torch.float16)`): the NaN loss,
#   three hypotheses tested against a healthy control, and the fix, compared without a scaler, with
#   one, and in bf16.
# * Debug a **mystery in fp16**: a test that the run overflows, where the overflow starts (the loss,
#   the model, or the updates), and the fix at that place (graded, on CPU).
# * The list-of-losses leak, measured on CPU: what a kept loss really holds after backward, what a
#   graph nobody runs backward on holds, and the fix (`.item()` / `torch.no_grad()`).
# * Debug a **mystery training loop** whose memory grows: a test, the cause, the fix (graded).
# * On a GPU kernel only (what needs CUDA), code to run there: step times, the caching allocator
#   (allocated against reserved, `empty_cache`, peaks per phase), memory-history snapshots (one graded
#   GPU exercise). This notebook's saved outputs come from a CPU, where those cells only say they
#   skipped; what one run on a GPU showed is summarised at the start of that section.
#
# **Time.** Under 40 seconds of computation on a laptop CPU (`make bench` times every notebook on
# yours). **GPU:** optional. On a kernel without CUDA each GPU cell that runs something prints one line, "needs a CUDA
# GPU: skipped", and the GPU test is reported by the grader as "not graded: needs a GPU kernel"
# (never as passed, never as zero).

# %%
import torch
import matplotlib.pyplot as plt

torch.set_num_threads(1)  # tiny models: one thread is fastest and does not fight other processes
_ = torch.manual_seed(0)  # returns the generator; assigned so it is not printed
from course.lessons import amp
from course.exercises.record import reveal

print("CUDA available:", torch.cuda.is_available())

# %% [markdown]
# ## Two 16-bit formats
#
# Both store 16 bits. fp16 spends 5 on the exponent and 10 on the mantissa; bf16 spends 8 on the
# exponent (float32's) and 7 on the mantissa. `torch.finfo` says what that means:

# %%
for name, f in amp.dtype_facts().items():
    print(f"{name:>9}: largest {f['max']:.4g}, smallest normal {f['tiny']:.3g}, gap above 1 (eps) {f['eps']:.3g}")

# %% [markdown]
# **Predict.** 65504 is fp16's largest finite value. What does `torch.tensor(65519.0).half()` give,
# and `torch.tensor(65520.0).half()`? Write two numbers (or `inf`).

# %%
prediction = None  # your guess: (fp16 of 65519, fp16 of 65520), e.g. (65504.0, 65504.0)

# %%
measured = (torch.tensor(65519.0).half().item(), torch.tensor(65520.0).half().item())
reveal("fp16 of 65519 and of 65520", prediction, measured)

# %% [markdown]
# Rounding goes to the nearest representable value: below 65520 that is 65504, from 65520 on it is
# inf. Overflow is per element: one activation or one gradient element past the edge is inf, whatever
# the norm of the rest. bf16 does not overflow there, but it cannot tell 256 from 257:

# %%
for x in (65520.0, 257.0, 1 + 2 ** -8, 1e-8):
    t = torch.tensor(x)
    print(f"{x:>12.8g}: fp16 {t.half().item():>12.8g}   bf16 {t.bfloat16().item():>12.8g}")

# %% [markdown]
# Drag the slider: a value, and what each format stores of it (relative error). Where fp16 prints
# `inf` or `0`, it ran out of range; where bf16's relative error is near 2^-8 ≈ 0.004 (half its eps of 2^-7,
# printed 0.00781 above: round-to-nearest), it ran out of precision.

# %% tags=["demo"]
# NBVAL_IGNORE_OUTPUT
import math

import ipywidgets as widgets
from course.toolkit.textview import with_text


def rounding(log10_value):
    x = torch.tensor(10.0 ** log10_value, dtype=torch.float64)
    lines = [f"value 10^{log10_value:g} = {x.item():.6g}"]
    for dtype in (torch.float16, torch.bfloat16):
        stored = x.to(dtype).double()
        rel = ((stored - x).abs() / x).item()
        lines.append(f"{str(dtype)[6:]:>9}: stores {stored.item():.6g} (relative error {rel:.2e})")
    return "\n".join(lines)


log10_slider = widgets.FloatSlider(value=2.0, min=-9.0, max=6.0, step=0.05, description="log10_value")
rounding_box = widgets.interactive(lambda log10_value: print(rounding(log10_value)), log10_value=log10_slider)
# without a live frontend (a saved notebook, a terminal) the box reads as its current state in words
with_text(rounding_box, lambda: "\n".join(rounding(v) for v in (-8.0, -1.0, math.log10(257), math.log10(7e4)))
          + "\n(a few values; move the slider in JupyterLab for the rest)")

# %% [markdown]
# The same in one picture: the relative rounding error of each format from 1e-9 to 1e6, with fp16's
# largest finite value and smallest normal value marked.

# %% tags=["demo"]
xs = torch.logspace(-9, 6, 600, dtype=torch.float64)
fig, ax = plt.subplots(figsize=(7, 3))
for dtype in (torch.float16, torch.bfloat16):
    err = ((xs.to(dtype).double() - xs).abs() / xs).clamp(max=1.0)
    ax.loglog(xs, err.clamp(min=1e-6), label=str(dtype)[6:])
ax.axvline(65504, color="k", ls="--", lw=0.8, label="fp16 max 65504")
ax.axvline(torch.finfo(torch.float16).tiny, color="gray", ls=":", lw=0.8, label="fp16 smallest normal")
ax.set_xlabel("value")
ax.set_ylabel("relative rounding error (clamped to [1e-6, 1])")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Autocast on CPU with bf16
#
# Inside `torch.autocast("cpu", dtype=torch.bfloat16)` each op runs in a dtype that autocast chooses
# for it, from lists that differ by device; the model's parameters are not converted.
#
# **Predict.** Inside autocast, the course model's logits come out in some dtype, and
# `F.cross_entropy` of them in some dtype. Which two?

# %%
prediction = None  # your guess: (dtype of the logits, dtype of the loss), e.g. ("bfloat16", "bfloat16")

# %%
from course import ModelConfig, Pipeline

BASE = Pipeline().replace(n_symbols=8, seq_len=16, model=ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                          n_train=512, n_val=64, batch_size=16, steps=20, lr=1e-2, warmup=5)
model = BASE.build_model(0)
batch = BASE.collate(BASE.windows("train")[:16], BASE.language().PAD)
with torch.autocast("cpu", dtype=torch.bfloat16):
    logits = model(batch.inputs)
    loss = BASE.loss_fn(logits, batch)
reveal("dtypes under bf16 autocast (logits, loss)", prediction,
       (str(logits.dtype)[6:], str(loss.dtype)[6:]))
print("parameters stay", next(model.parameters()).dtype)

# %% [markdown]
# Autocast runs the ops on its lower-precision list (matmuls, linear layers) in bf16 and casts the
# ops on its float32 list (cross-entropy among them) up to float32. The lists differ by device: on
# CPU, softmax, log-softmax and layer norm are on neither, so they run in the dtype of their input
# (bf16 after a linear layer); CUDA's float32 list has softmax, log_softmax and layer_norm too. The
# parameters stay float32: autocast casts on the fly.
#
# Which ops CPU autocast keeps in float32 is a fact of this torch build, so print it rather than trust
# a list: each op applied to a bf16 linear output inside `torch.autocast("cpu", dtype=torch.bfloat16)`.

# %%
import torch.nn.functional as F

torch.manual_seed(0)
lin, x_in = torch.nn.Linear(32, 8), torch.randn(4, 32)
with torch.autocast("cpu", dtype=torch.bfloat16):
    h = lin(x_in)
    outs = {"linear": h, "softmax": F.softmax(h, -1), "log_softmax": F.log_softmax(h, -1),
            "layer_norm": F.layer_norm(h, h.shape[-1:]), "cross_entropy": F.cross_entropy(h, torch.zeros(4, dtype=torch.long))}
for name, t in outs.items():
    print(f"{name:>13}: {str(t.dtype)[6:]}")

# %% [markdown]
# bf16's range is practically float32's (largest 3.39e+38 against 3.403e+38, printed above), so gradients of a bf16 run do not overflow where float32's would not:
# bf16 training needs no GradScaler. fp16 does: small gradients underflow to zero in fp16, so the loss
# is multiplied by a large *scale* before backward and the gradients divided by it before the step.
#
# ## GradScaler's mechanics, on CPU
#
# `torch.amp.GradScaler("cpu", init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5,
# growth_interval=2000)` (the defaults; `torch.cuda.amp.GradScaler` is the deprecated spelling). Per
# step: `scaler.scale(loss).backward()`, `scaler.step(optimizer)` (unscales, and **skips
# `optimizer.step()` if any gradient is inf or NaN**), `scaler.update()` (halves the scale after a
# skip; doubles it after `growth_interval` clean steps in a row). The toy below has a linear model
# whose gradient is its input; step 2 gets an inf input.
#
# **Predict.** `scaler.step(optimizer)` returns something. On a clean step and on the skipped step,
# what does it return?

# %%
prediction = None  # your guess: (return on a clean step, return on the skipped step)

# %%
scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16, growth_interval=3)
returns, scales, moved = [], [], []
for step in range(8):
    toy, opt, toy_loss = amp.toy_problem(seed=step, poison=(step == 2))
    before = toy.weight.detach().clone()
    scaler.scale(toy_loss).backward()
    returns.append(scaler.step(opt))
    scaler.update()
    scales.append(scaler.get_scale())
    moved.append(bool((toy.weight != before).any()))
reveal("scaler.step's return (clean step 0, skipped step 2)", prediction, (returns[0], returns[2]))
print("weights moved per step:", moved)
print("scale after each update:", scales)

# %% [markdown]
# Both `None`: `scaler.step` returns whatever `optimizer.step()` returned, and when it skips, nothing.
# The skip shows only in the weights (unchanged) and in the scale (halved across `update()`); after
# `growth_interval` clean steps the scale doubles again. The picture:

# %% tags=["demo"]
fig, ax = plt.subplots(figsize=(6, 2.8))
ax.step(range(len(scales)), scales, where="post", label="scale after update()")
ax.axhline(2.0 ** 16, color="gray", ls=":", lw=0.8, label="init_scale 65536")
ax.scatter([i for i, m in enumerate(moved) if not m], [scales[i] for i, m in enumerate(moved) if not m],
           color="r", zorder=3, label="skipped step")
ax.set_xlabel("step")
ax.set_ylabel("loss scale")
ax.set_yscale("log", base=2)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# `update()` is not optional. A loop that forgets it does not skip silently: the scaler refuses the
# second `step()` of the same optimizer. One toy model and its optimizer, two clean steps, and no
# `update()` between them:

# %%
forgot = torch.amp.GradScaler("cpu")
toy, opt, _ = amp.toy_problem(seed=0)
for step in range(2):
    toy_loss = toy(torch.ones(1, 6)).sum()
    forgot.scale(toy_loss).backward()
    try:
        forgot.step(opt)
        print(f"step {step}: stepped")
    except RuntimeError as refusal:
        print(f"step {step}: RuntimeError: {refusal}")

# %% [markdown]
# ### Exercise: a scaled update that reports its skips
#
# Write `amp_step(model, optimizer, scaler, loss, clip) -> bool`: one update under the scaler, with
# gradient clipping to total norm `clip` (`torch.nn.utils.clip_grad_norm_`), returning `True` when
# the optimizer step was skipped and `False` when it ran. Clip the **unscaled** gradients
# (`scaler.unscale_(optimizer)` first: clipping scaled gradients to `clip` clips the real ones to
# `clip / scale`). Leave the gradients cleared (`optimizer.zero_grad()`) at the end. Graded on fresh
# toy problems with plain SGD: a clean step must move the weights by the clipped gradient (to within rtol 1e-4, atol 1e-5) and
# return `False`; a poisoned step must leave them unchanged, halve the scale and return `True`. The
# hidden tests include a step whose loss is finite but whose *scaled* gradient overflows float32: the
# scaler skips it too, so the answer is what the scaler did, not whether the loss was finite.
# `amp.scaled_step` is switched off while yours runs.

# %% nbgrader={"grade": false, "grade_id": "amp_step", "locked": false, "schema_version": 3, "solution": true}
def amp_step(model, optimizer, scaler, loss, clip):
    ### BEGIN SOLUTION
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    return scaler.get_scale() < scale
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_amp_step", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import torch as _torch
from course.lessons import amp as _amp
from course.exercises.grading import graded_calls as _graded_calls


def _toys(seeds, clip, labels=None):
    """(label, poisoned, case) for each seed, clean then poisoned; a case is amp_step's arguments."""
    toys = []
    for s, name in zip(seeds, labels or [f"toy {s}" for s in seeds]):
        for poison in (False, True):
            m, o, l = _amp.toy_problem(s, poison=poison)
            toys.append((name, poison, (m, o, _torch.amp.GradScaler("cpu", init_scale=2.0 ** (10 + s % 7)), l, clip)))
    return toys


def _step(case):
    """Apart, where this cell's data does not exist: one amp_step, and what the checks read of it."""
    m, o, sc, l, clip = case
    w0 = m.weight.detach().clone()
    got = amp_step(m, o, sc, l, clip)
    try:
        truth = bool(got)
    except Exception:  # noqa: BLE001 (a check that needs it says what came back)
        truth = None
    return {"is_bool": isinstance(got, bool) or type(got).__name__ == "bool_", "truth": truth, "repr": repr(got),
            "dw": (w0 - m.weight.detach()).tolist(), "unmoved": _torch.equal(m.weight.detach(), w0),
            "scale": sc.get_scale(), "cleared": all(p.grad is None or not p.grad.any() for p in m.parameters())}


def _check_amp_step(toys, results):
    """The checks, here, on what the steps did apart (this kernel's toys are as built)."""
    for (name, poison, (m, o, sc, l, clip)), got in zip(toys, results):
        assert got["is_bool"], "amp_step must return True or False"
        if poison:
            assert got["truth"], f"{name}: the gradient held inf, but amp_step returned {got['repr']} (compare the scale across update())"
            assert got["unmoved"], f"{name}: the weights moved on a step with an inf gradient"
            assert got["scale"] == sc.get_scale() / 2, f"{name}: the scale should halve after a skipped step (did you call update()?)"
        else:
            assert not got["truth"], f"{name}: a clean step was reported as skipped"
            g = _torch.autograd.grad(l, m.weight)[0]
            want = g * min(1.0, clip / (g.norm().item() + 1e-6))
            assert _torch.allclose(_torch.tensor(got["dw"], dtype=want.dtype), want, rtol=1e-4, atol=1e-5), \
                f"{name}: the weights moved by the wrong amount (clip the unscaled gradients to norm {clip})"
        assert got["cleared"], f"{name}: gradients left uncleared"


_toys0 = _toys([0, 1, 2], clip=1.0)
_check_amp_step(_toys0, _graded_calls(_step, [_t[2] for _t in _toys0], off=(_amp.scaled_step,)))
### BEGIN HIDDEN TESTS
import random as _random
from course.exercises.grading import hidden_seed as _hidden_seed

_rng = _random.Random(_hidden_seed("h-10-stp"))
_toys1 = _toys([_rng.randrange(2**62) for _ in range(3)], clip=_rng.uniform(0.2, 0.8),
               labels=[f"random toy {i} (a small clip)" for i in (1, 2, 3)])
_toys1 += _toys([_rng.randrange(2**62)], clip=_rng.uniform(60.0, 200.0), labels=["random toy 4 (a clip above its norm)"])
_over = []
for _ in range(12):  # toys whose loss is finite and whose gradient times 2**127 overflows float32
    _s = _rng.randrange(2**62)
    _m, _o, _l = _amp.toy_problem(_s)
    _g = _torch.autograd.grad(_l, _m.weight, retain_graph=True)[0]
    if _torch.isfinite(_l) and not _torch.isfinite(_g * 2.0 ** 127).all():
        _over.append((_m, _o, _torch.amp.GradScaler("cpu", init_scale=2.0 ** 127), _l, 1.0))
    if len(_over) == 2:
        break  # two overflowing toys drawn
assert len(_over) == 2, "grader: too few overflowing toys drawn"
_got = _graded_calls(_step, [_t[2] for _t in _toys1] + _over, off=(_amp.scaled_step,))
_check_amp_step(_toys1, _got[:len(_toys1)])
for _i, _r in enumerate(_got[len(_toys1):]):  # a finite loss whose scaled gradient overflows: the scaler skips this step too
    assert _r["truth"], (f"random overflowing toy {_i + 1}: the loss was finite but its scaled gradient overflowed, "
                         f"so the scaler skipped the step; amp_step returned {_r['repr']}: report what the scaler did "
                         "(its scale across update()), not the loss")
    assert _r["unmoved"], \
        f"random overflowing toy {_i + 1}: the weights moved on a step the scaler skipped"
### END HIDDEN TESTS

# %% [markdown]
# ## fp16 that overflows, run on CPU
#
# This torch runs fp16 autocast on CPU too (`torch.autocast("cpu", dtype=torch.float16)`, with
# `torch.amp.GradScaler("cpu")`), so the headline symptom of this notebook can be produced, tested
# and fixed here. First, that autocast really computes in fp16 on CPU and the scaler really skips:

# %%
torch.manual_seed(0)
lin16 = torch.nn.Linear(4, 4)
with torch.autocast("cpu", dtype=torch.float16):
    print("a Linear under CPU fp16 autocast returns", lin16(torch.randn(2, 4)).dtype)
chk_scaler = torch.amp.GradScaler("cpu")
toy, opt, toy_loss = amp.toy_problem(seed=0, poison=True)
print("poisoned toy step skipped:", amp.scaled_step(toy, opt, chk_scaler, toy_loss), "| scale now", chk_scaler.get_scale())

# %% [markdown]
# ### The symptom
#
# The course model trained 4 steps under fp16 autocast, no scaler, with one change you are about to
# find (`amp.precision_run` records each step's loss, whether the scaler skipped, the scale, and
# whether the weights are finite):

# %%
BROKEN_SCALE = 1e6  # what the broken model does; the tests below use it only to build the broken model
sym = amp.precision_run(BASE, dtype=torch.float16, steps=4, seed=0, logit_scale=BROKEN_SCALE, label="broken fp16, no scaler")
print(sym.summary())
print("losses:", sym.losses, "| first non-finite step:", sym.first_nonfinite())

# %% [markdown]
# Three hypotheses, each with a test that can come out either way and a healthy control (the same
# model without the change) that must pass it:
#
# 1. **The learning rate** blows the weights up. Test: the first loss is computed before any update,
#    so if it is already non-finite the updates did not cause it; and a run at `lr=0` should then be
#    non-finite too.
# 2. **A bad batch** (a corrupt input). Test: other batches in fp16, and those same batches in float32.
# 3. **Range**: some value exceeds fp16's 65504. Test: the largest absolute output of each module in
#    float32 (`amp.activation_peaks`, forward hooks), against 65504 (`amp.over_fp16`).

# %%
for ls, name in ((BROKEN_SCALE, "broken"), (1.0, "healthy control")):
    r = amp.precision_run(BASE, dtype=torch.float16, steps=4, seed=0, logit_scale=ls, lr=0.0, label=f"{name}, lr=0")
    print(r.summary(), "| first non-finite step:", r.first_nonfinite())

# %% [markdown]
# The broken run is non-finite from step 0 at `lr=0`: not the learning rate. (Its weights still go
# NaN at `lr=0`: AdamW's update is `lr` times a NaN, and 0 × NaN is NaN.) Next, the batches:

# %%
for run_dtype, ls, name in ((torch.float16, BROKEN_SCALE, "broken, other batches"), (None, BROKEN_SCALE, "broken fp32, same"),
                            (torch.float16, 1.0, "healthy, other batches")):
    r = amp.precision_run(BASE, dtype=run_dtype, steps=4, seed=0, batch_seed=5, logit_scale=ls, label=name)
    print(r.summary())

# %% [markdown]
# These runs say less than they seem to: with no scaler the first NaN reaches the weights, so after
# step 0 every loss is NaN whatever the batch. Each batch's loss on a fresh model, no update, says more:

# %%
from course.reference.train import batch_at

fresh_net = amp.ScaledLogits(BASE.build_model(0), BROKEN_SCALE)
with torch.no_grad():
    for step in range(4):
        b = batch_at(BASE, 5, step)
        with torch.autocast("cpu", dtype=torch.float16):
            loss16 = BASE.loss_fn(fresh_net(b.inputs), b).float().item()
        loss32 = BASE.loss_fn(fresh_net(b.inputs), b).item()
        print(f"broken model, batch {step} of seed 5, no update: fp16 loss {loss16:.4g}, float32 loss {loss32:.4g}")

# %% [markdown]
# Every one of these batches is non-finite in fp16 and finite in float32 before any update: not a
# bad batch, something about fp16. The range test, on one batch, broken against healthy:

# %%
from course.reference.train import batch_at

probe_batch = batch_at(BASE, 0, 0)
probe_model = BASE.build_model(0)
for ls, name in ((BROKEN_SCALE, "broken"), (1.0, "healthy control")):
    peaks = amp.activation_peaks(probe_model, probe_batch.inputs, logit_scale=ls)
    print(f"{name:>15}: head output peak {peaks['head']:.3g}, logits peak {peaks['logits']:.3g}, "
          f"over fp16's max: {amp.over_fp16(peaks)}")

# %% [markdown]
# The head's output is small, and no leaf module's peak exceeds 65504 (`amp.over_fp16` names only the logits); the
# logits the loss sees are beyond 65504, so the cause sits between the head and the loss: a multiply of the logits (here a
# factor of `BROKEN_SCALE`, a stand-in for a temperature of 1e-6 where 1 was meant). The multiply
# overflows fp16 in the forward pass (the logits peak printed above, 3.35e+05, is over 65504), and the
# loss is NaN.
#
# ### The fixes, compared with the same detector
#
# A scaler is not the fix: it scales the *loss* before backward, and this overflow happens before
# the loss exists. bf16 has the range, so it hides the symptom, and the loss it trains on is still
# enormous. The fix at the right depth removes the multiply; then fp16 with a scaler trains like
# float32. All real runs, 4 steps each:

# %%
runs = [sym,  # the symptom's run: broken, fp16, no scaler
        amp.precision_run(BASE, dtype=torch.float16, use_scaler=True, steps=4, logit_scale=BROKEN_SCALE, label="broken fp16, scaler"),
        amp.precision_run(BASE, dtype=torch.bfloat16, steps=4, logit_scale=BROKEN_SCALE, label="broken bf16"),
        amp.precision_run(BASE, dtype=torch.float16, use_scaler=True, steps=4, label="fixed fp16, scaler"),
        amp.precision_run(BASE, dtype=None, steps=4, label="fixed fp32")]
for r in runs:
    print(r.summary())
print("scale after each step, broken fp16 with scaler:", runs[1].scales)
print("weights finite after step 0, broken fp16 without a scaler:", runs[0].weights_finite[0])

# %% [markdown]
# What the printout shows: without a scaler the NaN loss reaches the weights on the first step; with
# one every step is skipped and the scale halves each time, because no loss scale undoes an overflow in
# the forward pass (a skip on every step is what this symptom looks like under a scaler); bf16 stays finite, with a last
# loss of 1.6e+05, as enormous as the broken model's in float32 on other batches above (1.572e+05); with the multiply removed, fp16 with a scaler skips nothing and its
# last loss is the one float32 prints.

# %% [markdown]
# ## Exercise: a mystery in fp16
#
# Six pipelines drawn by `course.exercises.mystery.draw` from the family `fp16-overflow`: each is healthy or
# carries one bug that makes its run go inf or NaN under fp16 autocast, and nothing you can read says
# which (every part is an opaque `<part>`, every setting the healthy value). The bugs of this family
# put the overflow in one of three places:
#
# * **`"loss"`**: between the model's output and the loss (something done to the logits);
# * **`"model"`**: inside the model (something the model computes from the first step, a layer's
#   output or the attention scores inside a layer, that fp16 cannot hold);
# * **`"updates"`**: created by the updates (without a scaler, step 0's loss is finite; the weights
#   then grow until fp16 overflows).
#
# The tests above tell these apart: the loss of step 0, computed before any update; the model's own
# output under fp16 autocast; float32 against fp16. (`amp.activation_peaks` sees the attention
# scores too, through each attention's `score_probe` module.)
#
# Your tools are the ones above: `amp.precision_run(pipe, dtype, use_scaler, steps, seed, lr=...)`
# on the pipeline itself, `pipe.build_model(seed)` (the model as the pipeline prepares it),
# `batch_at(pipe, seed, step)`, `pipe.loss_fn`, forward hooks (`amp.activation_peaks`), float32
# against fp16.

# %%
from course.exercises import mystery

torch.manual_seed(0)
from course.exercises.sets import SETS

FP16_MYSTERIES = SETS["10_amp_memory/fp16"]  # the candidates, the base (BASE) and the seeds; the tests draw the same
FP16_CANDIDATES = FP16_MYSTERIES.candidates
fp16_mysteries = FP16_MYSTERIES.draws()
print(repr(fp16_mysteries["fp16 mystery 1"].loss_fn), repr(fp16_mysteries["fp16 mystery 1"].prepare), "(every part looks like this)")

# %% [markdown]
# What each does under fp16 autocast without a scaler, 6 steps on seed 0:

# %% tags=["demo"]
for name, p in fp16_mysteries.items():
    print(amp.precision_run(p, torch.float16, steps=6, seed=0, label=name).summary())

# %% [markdown]
# A skip under a scaler is not by itself a bug. The scaler's first scale is 65536, and a healthy
# run's scaled gradient can overflow fp16 in its first steps: the scaler skips each such step and
# halves the scale, until the scaled gradients fit, and the run goes on. Three healthy pipelines that
# differ only in their language, under fp16 with a scaler:

# %%
for lang in (0, 2, 7231):
    r = amp.precision_run(BASE.replace(language_seed=lang), torch.float16, use_scaler=True, steps=6, seed=0,
                          label=f"healthy, language {lang}")
    print(r.summary(), "| skipped per step:", r.skipped)

# %% [markdown]
# ### (a) A test that fp16 overflows
#
# Write `detect_fp16(pipe) -> bool`: `True` if `pipe`'s training goes non-finite under fp16 autocast
# (whichever of the three places the overflow starts in), `False` for a healthy draw. Return a bool
# (Python, numpy or torch). The runs are deterministic on CPU: a healthy draw stays finite (without a
# scaler; with one, it may skip its first steps, as above). Graded like a test suite: firing on every
# broken draw, including bugs of this family you have not seen (other factors, other layers, another
# way to get the learning rate wrong), so an overflow that starts a few steps in must be caught too;
# quiet on healthy draws and on a pipeline whose fp16 run stays finite though something else is
# wrong with it (the hidden test has one: this is a test of the overflow, not of every bug).
# `amp.overflow_problems`, `amp.over_fp16`, `amp.reference_twin` and `mystery.reveal`/`draw`/`make`/
# `touched` are switched off while it runs. Keep it to a second or so a call: a test cell has 120
# seconds in all, and the test cell calls your function 13 times (7 of them in its hidden part).

# %% nbgrader={"grade": false, "grade_id": "detect_fp16", "locked": false, "schema_version": 3, "solution": true}
def detect_fp16(pipe):
    ### BEGIN SOLUTION
    run = amp.precision_run(pipe, torch.float16, steps=6, seed=0)
    return run.first_nonfinite() is not None
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_fp16_detect", "locked": true, "points": 3, "schema_version": 3, "solution": false}
from course.exercises.sets import SETS as _SETS
from course.exercises import mystery as _mystery
from course.lessons import amp as _amp
from course.exercises.grading import assert_detector as _assert_detector
from course import ModelConfig as _MC, Pipeline as _Pipeline
_pbase = _Pipeline().replace(n_symbols=8, seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                             n_train=512, n_val=64, batch_size=16, steps=20, lr=1e-2, warmup=5)
_OFF = (_mystery.reveal, _mystery.draw, _mystery.make, _mystery.touched, _amp.overflow_problems, _amp.over_fp16,
        _amp.reference_twin)
_fp16_mysteries = _SETS["10_amp_memory/fp16"].draws()  # the notebook's `fp16_mysteries`, drawn again here
_answers = {name: _mystery.reveal(p) for name, p in _fp16_mysteries.items()}
_assert_detector(detect_fp16, {n: p for n, p in _fp16_mysteries.items() if _answers[n] == "healthy"},
                 {n: p for n, p in _fp16_mysteries.items() if _answers[n] != "healthy"}, "fp16 test", off=_OFF)
### BEGIN HIDDEN TESTS
# healthy draw 5 of this salt skips its first two steps under a GradScaler (the scaler finding its
# scale); the lr-zero draw is broken in another way (no update moves the weights) and stays finite
_healthy = {f"healthy draw {s}": _mystery.hidden("healthy", s, _pbase, salt="h-10-p1h") for s in (2, 5)}
_healthy["a draw whose weights never move"] = _mystery.hidden("lr-zero", 6, _pbase, salt="h-10-p1h")
_broken = {b: _mystery.hidden(b, 4 + i, _pbase, salt="h-10-p1d") for i, b in enumerate(
    ("logit-multiplier", "qkv-weights-scaled", "lr-hardcoded", "lr-hundredfold"))}
_assert_detector(detect_fp16, _healthy, _broken, "fp16 test (unseen draws)", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ### (b) Where the overflow starts
#
# Write `name_fp16_cause(pipe) -> str`, returning exactly one of `"healthy"`, `"loss"`, `"model"` and
# `"updates"` (the three places above). Each hypothesis predicts something the others do not: test
# those predictions, with a healthy draw as your control. Graded on the draws above and on fresh
# draws, including bugs of these kinds you have not run (another layer of the model among them); the
# same functions are switched off.

# %% nbgrader={"grade": false, "grade_id": "name_fp16_cause", "locked": false, "schema_version": 3, "solution": true}
def name_fp16_cause(pipe):
    ### BEGIN SOLUTION
    first = amp.precision_run(pipe, torch.float16, steps=6, seed=0).first_nonfinite()
    if first is None:
        return "healthy"
    if first > 0:  # step 0's loss comes before any update
        return "updates"
    from course.reference.train import batch_at

    model = pipe.build_model(0)  # the model as the pipeline prepares it, before any update
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
        logits = model(batch_at(pipe, 0, 0).inputs)
    return "loss" if bool(torch.isfinite(logits).all()) else "model"
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_fp16_cause", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.exercises.sets import SETS as _SETS
from course.exercises import mystery as _mystery
from course.lessons import amp as _amp
from course.exercises.grading import assert_names as _assert_names
from course import ModelConfig as _MC, Pipeline as _Pipeline
_pbase = _Pipeline().replace(n_symbols=8, seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                             n_train=512, n_val=64, batch_size=16, steps=20, lr=1e-2, warmup=5)
_OFF = (_mystery.reveal, _mystery.draw, _mystery.make, _mystery.touched, _amp.overflow_problems, _amp.over_fp16,
        _amp.reference_twin)
_PLACE = {"healthy": "healthy", "logit-temperature": "loss", "logit-multiplier": "loss", "mlp-weights-scaled": "model",
          "qkv-weights-scaled": "model", "lr-hundredfold": "updates", "lr-hardcoded": "updates"}
_fp16_mysteries = _SETS["10_amp_memory/fp16"].draws()  # the notebook's `fp16_mysteries`, drawn again here
_assert_names(name_fp16_cause, {n: (p, _PLACE[_mystery.reveal(p)]) for n, p in _fp16_mysteries.items()}, "fp16 cause",
              off=_OFF)
### BEGIN HIDDEN TESTS
_cases = {f"fresh draw {_i}": (_mystery.hidden(_b, 20 + _i, _pbase, salt="h-10-p2c"), _PLACE[_b]) for _i, _b in enumerate(
    ("healthy", "logit-multiplier", "qkv-weights-scaled", "lr-hardcoded", "mlp-weights-scaled", "logit-temperature",
     "lr-hundredfold"))}
_assert_names(name_fp16_cause, _cases, "fp16 cause (fresh draws)", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ### (c) The fix
#
# Write `fix_fp16(pipe) -> Pipeline`: replace the broken part, and only it, with a correct one:
# `loss_fn` (logits, batch) -> the mean token cross-entropy (`course.toolkit.batch.token_cross_entropy` is
# the reference), `prepare` (model) -> the model as initialised (the reference returns it unchanged),
# or `optimizer_factory` (params, lr, weight_decay) -> AdamW at the `lr` and `weight_decay` it is
# passed. Use your `name_fp16_cause` to know which. A healthy draw may come back unchanged. Graded by
# behaviour: the fixed pipeline is trained under fp16 autocast with a `GradScaler` for 6 steps (the
# hidden test on a seed that is not in this notebook), and must stay finite, skip no more steps than
# the same settings with the reference parts, and end where that reference run ends: each step's
# loss within 0.001 and the weights within a relative 1e-5. A correct part computes what the
# reference computes, so it meets that; taking the broken loss in float32, a learning rate or weight
# decay that is not the one passed, or another optimizer does not. `amp.overflow_problems`,
# `amp.over_fp16` and `amp.reference_twin` are switched off while your fix runs.

# %% nbgrader={"grade": false, "grade_id": "fix_fp16", "locked": false, "schema_version": 3, "solution": true}
def fix_fp16(pipe):
    ### BEGIN SOLUTION
    from course.toolkit.batch import token_cross_entropy

    cause = name_fp16_cause(pipe)
    if cause == "loss":
        return pipe.replace(loss_fn=token_cross_entropy)
    if cause == "model":
        return pipe.replace(prepare=lambda model: model)
    if cause == "updates":
        return pipe.replace(optimizer_factory=lambda params, lr, weight_decay: torch.optim.AdamW(
            params, lr=lr, weight_decay=weight_decay))
    return pipe
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_fp16_fix", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.exercises import mystery as _mystery
from course.lessons import amp as _amp
from course.exercises.grading import captured_warnings as _cw
from course import ModelConfig as _MC, Pipeline as _Pipeline
_pbase = _Pipeline().replace(n_symbols=8, seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                             n_train=512, n_val=64, batch_size=16, steps=20, lr=1e-2, warmup=5)
_OFF = (_amp.overflow_problems, _amp.over_fp16, _amp.reference_twin)


def _still_overflows(fixed, seed):
    with _cw():
        found = _amp.overflow_problems(fixed, seed=seed)
    return "the fixed pipeline under fp16 with a scaler, on a fresh seed: " + "; ".join(found) if found else None


### BEGIN HIDDEN TESTS
_mystery.check_fix(fix_fp16, [_mystery.hidden(b, 40 + i, _pbase, salt="h-10-p3f") for i, b in enumerate(
    ("logit-multiplier", "qkv-weights-scaled", "lr-hardcoded", "mlp-weights-scaled"))],
    lambda fixed: _still_overflows(fixed, 13), "fp16 fix (fresh draws)", off=_OFF)
### END HIDDEN TESTS
_mystery.check_fix(fix_fp16, [_mystery.make(b, 30 + i, _pbase) for i, b in enumerate(
    ("logit-temperature", "mlp-weights-scaled", "lr-hundredfold"))], lambda fixed: _still_overflows(fixed, 7),
    "fp16 fix", off=_OFF)

# %% [markdown]
# The loop closed on the draws above: the same test that saw each symptom, re-run on each draw after
# your fix (the reference check `amp.overflow_problems` beside it, on seed 3).

# %% tags=["demo"]
for name, p in fp16_mysteries.items():
    fixed = fix_fp16(p)
    print(f"{name}: detect before {bool(detect_fp16(p))}, after {bool(detect_fp16(fixed))}; "
          f"check after the fix: {'; '.join(amp.overflow_problems(fixed, seed=3)) or 'nothing found'}")

# %% [markdown]
# ## The list-of-losses leak, measured on CPU
#
# "Keep `loss` in a list and memory grows" is true, but what exactly grows? `amp.SavedTensors` counts
# the bytes of every tensor autograd packs for backward, through `saved_tensors_hooks`: activations,
# and also parameters saved by the ops that use them and the same tensor packed by two ops, each
# counted every time. So it overcounts shared storage, can undercount a saved view of a larger tensor
# (the view pins its whole base), and misses graph nodes: a growth meter, not a bound. For a test of growth that is what matters, since a graph that is freed drops all of it. A
# weak reference to each step's loss says whether the loss itself is still alive. `amp.run(pipe,
# steps)` trains under bf16 autocast and calls two parts of the pipeline each step: `keep_loss`
# (what the history keeps; reference `loss.item()`) and `monitor` (a loss on a fixed probe batch;
# reference: under `torch.no_grad()`, as a float).
#
# What the meter counts, on one linear layer and one product: the layer packs its input *and* its
# weight, and `x * x` packs `x` twice.

# %%
torch.manual_seed(0)
lin, x_in = torch.nn.Linear(32, 8), torch.randn(4, 32, requires_grad=True)
with amp.SavedTensors() as meter:
    y_out = lin(x_in)
    print(f"after lin(x): {meter.count} packed, {meter.bytes} bytes (input {x_in.numel() * 4}, weight {lin.weight.numel() * 4})")
    z_out = x_in * x_in
    print(f"after x * x:  {meter.count} packed, {meter.bytes} bytes (x counted twice, one storage)")
del y_out, z_out

# %% [markdown]
# **Predict.** A loop that appends the loss *tensor* to its history after `loss.backward()`: after 6
# steps, how many bytes saved for backward are still alive?

# %%
prediction = None  # your guess: a number of bytes after 6 steps

# %%
from course.bugs import inject

kept_loss = amp.run(inject(BASE, "loss-kept-with-graph"), steps=6, seed=1)
reveal("saved bytes alive after 6 steps, loss tensors kept", prediction, kept_loss.saved_bytes[-1])
print("step losses still referenced after each step:", kept_loss.losses_alive)

# %% [markdown]
# Zero: backward frees a graph's saved tensors (that is why a second backward raises). What the list
# keeps is every loss and the chain of autograd nodes behind it: small per step, and still a leak.
# The big one is a graph **nobody runs backward on**: a loss computed for monitoring with autograd
# on, kept as a tensor.

# %%
kept_monitor = amp.run(inject(BASE, "monitor-kept-with-graph"), steps=6, seed=1)
healthy = amp.run(BASE, steps=6, seed=1)
for name, r in {"healthy": healthy, "loss tensors kept": kept_loss, "monitor graph kept": kept_monitor}.items():
    print(f"{name:>18}: saved bytes per step {r.saved_bytes}, losses alive {r.losses_alive}")

# %% tags=["demo"]
fig, ax = plt.subplots(figsize=(6, 2.8))
for name, r in {"healthy": healthy, "loss tensors kept": kept_loss, "monitor graph kept": kept_monitor}.items():
    ax.plot(range(1, 7), [b / 1e6 for b in r.saved_bytes], marker="o", label=name)
ax.axhline(0, color="gray", ls=":", lw=0.8)
ax.set_xlabel("step")
ax.set_ylabel("saved-for-backward MB alive")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# `torch.profiler` with `profile_memory=True` sees the same growth from the allocator's side, with somewhat different numbers (the meter counts each packing): each
# op's "self CPU memory" is what it allocated minus what it freed. Summed over a profiled run, it is
# what the run left allocated: about zero for the healthy loop, and growing with the steps when the
# monitor keeps its graph (the run's own records, returned here, are part of what is left).

# %% tags=["demo"]
import os

# kineto, the profiler's C++ library, writes "USDT: ... profiler_start" and "profiler_stop" to stderr
# on every run; it reads its log level once, at the first profile, and 6 silences them (5 does not)
os.environ["KINETO_LOG_LEVEL"] = "6"
from torch.profiler import ProfilerActivity, profile

for name, pipe_ in {"healthy": BASE, "monitor graph kept": inject(BASE, "monitor-kept-with-graph")}.items():
    for steps in (2, 4):
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            kept_run = amp.run(pipe_, steps=steps, seed=1)
        left = sum(e.self_cpu_memory_usage for e in prof.key_averages())
        print(f"{name:>18}, {steps} steps: the profiler says {left / 1e6:.2f} MB left allocated")
        del kept_run  # freed before the next profile, so that one does not count it as freed

# %% [markdown]
# ### The loop closed
#
# The fix at the right depth is in the part that keeps the graph: `.item()` for the history, and the
# monitor under `torch.no_grad()` returning a float. The same meters, re-run:

# %%
both_broken = inject(BASE, "monitor-kept-with-graph", "loss-kept-with-graph")
both_fixed = both_broken.replace(keep_loss=lambda loss: loss.detach().item(), monitor=amp.monitor_no_grad)
for name, pipe_ in {"before the fix": both_broken, "after the fix": both_fixed}.items():
    r = amp.run(pipe_, steps=6, seed=1)
    print(f"{name}: saved bytes per step {r.saved_bytes}, losses alive {r.losses_alive}")
    print("  problems found:", "; ".join(amp.memory_problems(r)) or "none")

# %% [markdown]
# ## Exercise: a mystery training loop
#
# Below are six pipelines drawn by `course.exercises.mystery.draw`: each is healthy or carries one bug of the
# family `amp-memory`, and nothing you can read says which (every part is an opaque `<part>`). Run
# them with `amp.run(pipe, steps, seed)` and read the run's records: `saved_bytes` and
# `losses_alive` per step, and `kept`, `monitor`, `monitor_expected`, `losses`.

# %%
from course.exercises import mystery

from course.exercises.sets import SETS

MYSTERIES = SETS["10_amp_memory/leak"]  # the candidates, the base (BASE) and the seeds; the tests draw the same
CANDIDATES = MYSTERIES.candidates
mysteries = MYSTERIES.draws()
print(repr(mysteries["mystery 1"].keep_loss), repr(mysteries["mystery 1"].monitor), "(every part looks like this)")

# %% tags=["demo"]
for name, p in mysteries.items():
    r = amp.run(p, steps=4, seed=0)
    print(f"{name}: saved bytes {r.saved_bytes}, losses alive {r.losses_alive}")

# %% [markdown]
# ### (a) A test that memory grows
#
# Write `detect(pipe) -> bool`: `True` if memory grows over the steps of `amp.run(pipe, ...)` (saved
# activations or step losses kept alive from step to step), `False` for a healthy draw. Return a
# Python bool. Nothing here is noisy: the meters are deterministic, so a healthy run shows flat zeros.
# Graded like a test suite: quiet on healthy draws, firing on every broken one, including bugs of
# this family you have not seen. `amp.memory_problems`, `amp.growth` and `mystery.reveal`/`draw`/
# `make`/`touched` are switched off while it runs.

# %% nbgrader={"grade": false, "grade_id": "detect", "locked": false, "schema_version": 3, "solution": true}
def detect(pipe):
    ### BEGIN SOLUTION
    r = amp.run(pipe, steps=4, seed=0)
    return r.saved_bytes[-1] > r.saved_bytes[0] or r.losses_alive[-1] > r.losses_alive[0]
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_detect", "locked": true, "points": 3, "schema_version": 3, "solution": false}
from course.exercises.sets import SETS as _SETS
from course.exercises import mystery as _mystery
from course.lessons import amp as _amp
from course.exercises.grading import assert_detector as _assert_detector
from course import ModelConfig as _MC, Pipeline as _Pipeline
_mbase = _Pipeline().replace(n_symbols=8, seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                             n_train=512, n_val=64, batch_size=16, steps=20, lr=1e-2, warmup=5)
_OFF = (_mystery.reveal, _mystery.draw, _mystery.make, _mystery.touched, _amp.memory_problems, _amp.growth)
_mysteries = _SETS["10_amp_memory/leak"].draws()  # the notebook's `mysteries`, drawn again here
_answers = {name: _mystery.reveal(p) for name, p in _mysteries.items()}
_assert_detector(detect, {n: p for n, p in _mysteries.items() if _answers[n] == "healthy"},
                 {n: p for n, p in _mysteries.items() if _answers[n] != "healthy"}, "memory test", off=_OFF)
### BEGIN HIDDEN TESTS
_healthy = {f"healthy draw {s}": _mystery.hidden("healthy", s, _mbase, salt="h-10-d2e") for s in (1, 2)}
_broken = {b: _mystery.hidden(b, 4 + i, _mbase, salt="h-10-d2e") for i, b in enumerate(
    ("monitor-logits-kept", "loss-kept-with-graph", "monitor-kept-with-graph"))}
_assert_detector(detect, _healthy, _broken, "memory test (unseen draws)", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ### (b) Name the cause
#
# Write `name_cause(pipe) -> str`, returning exactly one of `"healthy"`, `"history"` (the step losses
# stay referenced: what the loop keeps of each loss holds its graph) and `"monitor"` (saved
# activations grow: the monitor's forward builds a graph nobody frees). Graded on the draws above and
# on fresh draws, including a bug of these kinds you have not run; the same functions are switched
# off.

# %% nbgrader={"grade": false, "grade_id": "name_cause", "locked": false, "schema_version": 3, "solution": true}
def name_cause(pipe):
    ### BEGIN SOLUTION
    r = amp.run(pipe, steps=4, seed=0)
    if r.saved_bytes[-1] > r.saved_bytes[0]:
        return "monitor"
    if r.losses_alive[-1] > r.losses_alive[0]:
        return "history"
    return "healthy"
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_cause", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.exercises.sets import SETS as _SETS
from course.exercises import mystery as _mystery
from course.lessons import amp as _amp
from course.exercises.grading import assert_names as _assert_names
from course import ModelConfig as _MC, Pipeline as _Pipeline
_mbase = _Pipeline().replace(n_symbols=8, seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                             n_train=512, n_val=64, batch_size=16, steps=20, lr=1e-2, warmup=5)
_OFF = (_mystery.reveal, _mystery.draw, _mystery.make, _mystery.touched, _amp.memory_problems, _amp.growth)
_KIND = {"healthy": "healthy", "loss-kept-with-graph": "history", "monitor-kept-with-graph": "monitor",
         "monitor-logits-kept": "monitor"}
_mysteries = _SETS["10_amp_memory/leak"].draws()  # the notebook's `mysteries`, drawn again here
_assert_names(name_cause, {n: (p, _KIND[_mystery.reveal(p)]) for n, p in _mysteries.items()}, "cause", off=_OFF)
### BEGIN HIDDEN TESTS
_cases = {f"fresh draw {_i}": (_mystery.hidden(_b, 20 + _i, _mbase, salt="h-10-c7f"), _KIND[_b]) for _i, _b in enumerate(
    ("healthy", "monitor-logits-kept", "loss-kept-with-graph", "monitor-kept-with-graph"))}
_assert_names(name_cause, _cases, "cause (fresh draws)", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ### (c) The fix
#
# Write `fix(pipe) -> Pipeline`: replace the broken part, and only it (`pipe.replace(keep_loss=...)`
# or `pipe.replace(monitor=...)`), with a correct one: `keep_loss(loss)` returns a number equal to
# the loss; `monitor(model, batch, loss_fn)` returns `loss_fn(model(batch.inputs), batch)` as a
# number, without building a graph. Yours or the reference (`amp.keep_float`, `amp.monitor_no_grad`):
# the work here is knowing which part is broken (use your `name_cause`), and replacing both parts
# changes one that was not broken. A healthy draw may come back unchanged. Graded by behaviour: the
# fixed pipeline is run on a fresh seed and must keep nothing alive, keep numbers equal to the
# losses, and report the probe's loss. `amp.memory_problems` and `amp.growth` are switched off while
# your fix runs.

# %% nbgrader={"grade": false, "grade_id": "fix", "locked": false, "schema_version": 3, "solution": true}
def fix(pipe):
    ### BEGIN SOLUTION
    cause = name_cause(pipe)
    if cause == "history":
        return pipe.replace(keep_loss=lambda loss: loss.detach().item())

    def monitor(model, batch, loss_fn):
        with torch.no_grad():
            return loss_fn(model(batch.inputs), batch).item()

    if cause == "monitor":
        return pipe.replace(monitor=monitor)
    return pipe
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_fix", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.exercises import mystery as _mystery
from course.lessons import amp as _amp
from course.exercises.grading import captured_warnings as _cw
from course import ModelConfig as _MC, Pipeline as _Pipeline
_mbase = _Pipeline().replace(n_symbols=8, seq_len=16, model=_MC(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
                             n_train=512, n_val=64, batch_size=16, steps=20, lr=1e-2, warmup=5)
_OFF = (_amp.memory_problems, _amp.growth)


def _still_leaks(fixed, seed):
    with _cw():
        found = _amp.memory_problems(_amp.run(fixed, steps=4, seed=seed))
    return "the fixed loop on a fresh seed: " + "; ".join(found) if found else None


### BEGIN HIDDEN TESTS
_mystery.check_fix(fix, [_mystery.hidden(b, 40 + i, _mbase, salt="h-10-f3a") for i, b in enumerate(
    ("monitor-logits-kept", "loss-kept-with-graph", "monitor-kept-with-graph"))],
    lambda fixed: _still_leaks(fixed, 13), "fix (fresh draws)", off=_OFF)
### END HIDDEN TESTS
_mystery.check_fix(fix, [_mystery.make(b, 30 + i, _mbase) for i, b in enumerate(
    ("loss-kept-with-graph", "monitor-kept-with-graph"))], lambda fixed: _still_leaks(fixed, 7), "fix", off=_OFF)

# %% [markdown]
# ## On a GPU kernel only
#
# The rest needs CUDA (the kernel "Python 3 (debug course, GPU)", `make gpu-kernel`). On a kernel
# without it, each cell that runs something prints one line, and the one GPU test is reported by the
# grader as "not graded: needs a GPU kernel". The model is bigger here, so that memory and time are
# worth measuring.
#
# The outputs saved here come from a CPU. This section was run once on an NVIDIA H200 with PyTorch
# 2.11 (not the 2.13 the course pins), its code copied into a script rather than run as these cells:
# every cell ran without error, bf16 and fp16 steps were faster than fp32 for this model, and the
# `peak_bytes` solution below passed its test on every seed tried, while four wrong answers (no base
# subtracted, allocated-after instead of the peak, no reset of the peak, current-after) failed on
# every one.

# %%
GPU = torch.cuda.is_available()
if GPU:
    GPU_BASE = BASE.replace(model=ModelConfig(n_ctx=128, d_model=512, n_head=8, n_layer=4, d_mlp=2048), seq_len=128)
    gpu_model = GPU_BASE.build_model(0).cuda()
    gpu_batch = GPU_BASE.collate(GPU_BASE.windows("train")[:64], GPU_BASE.language().PAD)
    print("GPU:", torch.cuda.get_device_name(), f"{sum(p.numel() for p in gpu_model.parameters()) / 1e6:.1f}M parameters")
else:
    print(amp.SKIP_LINE)

# %% [markdown]
# ### fp32, bf16 and fp16 step times
#
# Median time per training step, printed in ms (CUDA events, after a warm-up), fp16 with a GradScaler.

# %% tags=["demo"]
if GPU:
    for name, sec in amp.cuda_step_times(gpu_model, gpu_batch.inputs, gpu_batch.targets).items():
        print(f"{name}: {sec * 1e3:.2f} ms per step")
else:
    print(amp.SKIP_LINE)

# %% [markdown]
# ### Allocated against reserved, and the peak of each phase
#
# `memory_allocated` counts tensors alive; `memory_reserved` what PyTorch's caching allocator holds
# from the driver (freed blocks stay reserved for reuse). `nvidia-smi` shows neither: it shows the
# process's total, which is reserved plus the CUDA context plus memory outside the caching allocator
# (NCCL buffers, other libraries); cuBLAS workspaces come from the caching allocator. `empty_cache` hands unused reserved blocks back. `reset_peak_memory_stats` before a phase and
# `max_memory_allocated` after it give that phase's peak.

# %% tags=["demo"]
if GPU:
    opt_g = torch.optim.AdamW(gpu_model.parameters(), lr=1e-4)
    xg, yg = gpu_batch.inputs.cuda(), gpu_batch.targets.cuda()
    state = {}

    def forward():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            state["loss"] = torch.nn.functional.cross_entropy(gpu_model(xg).flatten(0, 1), yg.flatten())

    def backward():
        state.pop("loss").backward()

    def step():
        opt_g.step()
        opt_g.zero_grad(set_to_none=True)

    peaks = amp.phase_peaks({"forward": forward, "backward": backward, "optimizer": step})
    for phase, v in peaks.items():
        print(f"{phase:>9}: peak {v['peak'] / 2**20:8.1f} MiB, allocated after {v['allocated'] / 2**20:8.1f} MiB, "
              f"reserved {v['reserved'] / 2**20:8.1f} MiB")
    torch.cuda.empty_cache()
    print(f"after empty_cache: allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB, "
          f"reserved {torch.cuda.memory_reserved() / 2**20:.1f} MiB")
else:
    print(amp.SKIP_LINE)

# %% [markdown]
# ### The list-of-losses leak in a memory snapshot
#
# `torch.cuda.memory._record_memory_history(max_entries=...)` records a stack trace for every
# allocation; `torch.cuda.memory._snapshot()` returns the live blocks with their traces, and
# `_dump_snapshot(path)` writes the same as a pickle for https://pytorch.org/memory_viz. These are
# private functions: their names and format change between releases (this is PyTorch 2.13). Here a
# monitor keeps its probe loss with the graph, six steps; `amp.snapshot_growth` sums the live bytes
# by where they were made: the innermost line of a course or notebook file (C++, torch and library
# frames skipped) and the notebook line that ran it. A snapshot says where memory was allocated, not
# what keeps it alive: the lines name the model's forward, and the leak is read from the fact that a
# forward's activations are still live after its step. In the H200 run (PyTorch 2.11, CUDA 13.0) the
# three largest lines were the model's attention and MLP lines, each called from this cell's
# `kept.append(...)`.

# %% tags=["demo"]
if GPU:
    import os
    import tempfile
    kept = []
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    for _ in range(6):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            kept.append(torch.nn.functional.cross_entropy(gpu_model(xg).flatten(0, 1), yg.flatten()))
    snap = torch.cuda.memory._snapshot()
    path = os.path.join(tempfile.mkdtemp(), "leak.pickle")
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)
    for size, where in amp.snapshot_growth(snap):
        print(f"{size / 2**20:8.1f} MiB live, allocated at {where}")
    kept.clear()
    torch.cuda.empty_cache()
    print(f"snapshot written ({os.path.getsize(path) / 2**20:.1f} MiB); after clearing the list: "
          f"allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB")
else:
    print(amp.SKIP_LINE)

# %% [markdown]
# ### GPU exercise: the peak of one phase
#
# Write `peak_bytes(fn) -> int`: the most bytes of CUDA memory allocated *above what was allocated
# before* at any moment while `fn()` runs, including tensors `fn` creates and frees again. Use
# `torch.cuda.synchronize`, `torch.cuda.reset_peak_memory_stats`, `torch.cuda.memory_allocated` and
# `torch.cuda.max_memory_allocated`. Graded on a GPU kernel only, on functions with fresh random sizes
# (within the allocator's rounding: 2 MiB); `amp.phase_peaks` is switched off.

# %% nbgrader={"grade": false, "grade_id": "peak_bytes", "locked": false, "schema_version": 3, "solution": true}
def peak_bytes(fn):
    ### BEGIN SOLUTION
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_peak_bytes", "locked": true, "points": 2, "schema_version": 3, "solution": false} tags=["gpu"]
import os as _os
import random as _random
import torch as _torch
from course.lessons import amp as _amp
from course.exercises.grading import captured_warnings as _cw, switched_off as _off


def _check_peak(seed):
    rng = _random.Random(seed)
    n1, n2 = rng.randrange(2, 40) * 2**20, rng.randrange(2, 40) * 2**20

    def fn():
        a = _torch.empty(n1, dtype=_torch.uint8, device="cuda")
        del a
        b = _torch.empty(n2, dtype=_torch.uint8, device="cuda")
        del b

    with _off(_amp.phase_peaks), _cw():  # int() too: a returned object's __int__ runs switched off
        got = int(peak_bytes(fn))
    want = max(n1, n2)
    assert abs(got - want) <= 2 * 2**20, \
        f"peak_bytes of a function that allocates and frees two buffers is off by {abs(got - want) / 2**20:.1f} MiB"


if _torch.cuda.is_available():
    _held = _torch.empty(8 * 2**20, dtype=_torch.uint8, device="cuda")  # memory allocated before must not count
    _check_peak(1)
    ### BEGIN HIDDEN TESTS
    from course.exercises.grading import hidden_seed as _hidden_seed
    _check_peak(_hidden_seed("h-10-pkb"))
    _check_peak(_hidden_seed("h-10-pkb") + 1)
    ### END HIDDEN TESTS
    del _held
elif _os.environ.get("NBGRADER_EXECUTION") == "autograde":  # graded as a GPU test without CUDA
    raise AssertionError("this GPU test was graded on a kernel without CUDA")
else:
    print(_amp.SKIP_LINE)

# %% [markdown]
# ## What each test can and cannot prove
#
# * **`torch.finfo` and a cast** prove what a format can store; they do not say where a model's
#   values sit. Overflow in fp16 is per element: a norm below 65504 proves nothing.
# * **GradScaler's skip** shows as the scale falling across `update()` and unchanged weights;
#   `scaler.step` returns `None` either way. A skip now and then is the scaler working; a skip every
#   step means inf/NaN that scaling does not cause, such as a forward pass that already overflows
#   fp16 (a loop with no `update()` does not skip: its second `step()` raises `RuntimeError`, shown above).
# * **bf16 needs no scaler** because of its range; it still rounds to 8 significant bits (about 2 to 3
#   decimal digits). A loss that differs from fp32 in the third digit is *consistent* with that
#   rounding, not shown healthy: a bug that moves the loss by less hides inside it. The test that can
#   fail compares against fp32 on the same weights and batches, op by op or step by step, with a
#   tolerance set by bf16's rounding, and a control (two fp32 runs, or fp32 against itself).
# * **The saved-tensor meter** counts every tensor packed for backward while its graph lives
#   (each packing in full, parameters and duplicates included: it overcounts shared storage and can
#   undercount a saved view of a larger tensor: a growth meter, not a bound); it does not
#   see graph nodes without saved tensors (a kept loss after backward), which the weak reference to
#   each loss shows. Neither sees a leak outside autograd (a list of detached tensors that grows).
# * **On CUDA**, `memory_allocated` is tensors alive and `memory_reserved` what the allocator holds
#   (`nvidia-smi` adds the context and memory outside the allocator). A growing allocated count is
#   not by itself a leak: the optimizer's state appears on its first step, caches fill, longer
#   sequences need more; it is one when it keeps growing at a steady state (same shapes, after the
#   first steps) and the snapshot names what holds it. A growing reserved count with flat allocated is
#   fragmentation or caching. The snapshot names the stack that allocated what is alive; its format is private.
# * **The fix** is checked by the meters that saw the growth, re-run flat (the graders use fresh seeds).
