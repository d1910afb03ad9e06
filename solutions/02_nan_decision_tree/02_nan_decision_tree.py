# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (debug course)
#     language: python
#     name: debug-course
# ---

# %% [markdown]
# # 02 · The NaN decision tree: where did it first go non-finite?
#
# **What you learn.**
# * Locate the **first** non-finite tensor of a training step, in the order the step makes them:
#   input, embeddings, attention scores, softmax, logits, loss, then gradients, optimizer state,
#   parameters. A NaN loss is where the trouble ends, not where it starts.
# * Run the counterexamples behind the usual advice: `log(softmax)` against a stable loss, what
#   anomaly mode catches and misses, a `torch.where` that still poisons the gradient, fp16 against
#   bf16, what gradient clipping does with NaN and inf, and when a learning rate really is the cause.
# * Use a decision tree: from *when* and *where* a run went non-finite to the hypotheses and the one
#   test that separates them.
# * Write a stable loss, a safe `log`, and a diagnosis graded on broken pipelines you have not seen.
#
# **Time.** About 20 seconds of computation on a laptop CPU. **GPU:** not needed anywhere.

# %%
import math

import torch
import torch.nn.functional as F
import matplotlib.pyplot as plt

torch.set_num_threads(1)  # tiny models: one thread is fastest and does not fight other processes
_ = torch.manual_seed(0)  # returns the generator; assigned so it is not printed

# %% [markdown]
# ## The symptom
#
# Two broken variants of the course's pipeline, trained with the instrumented loop, which stops at the
# first step whose loss, gradient norm or parameters are not finite. One is NaN from the first step;
# the other trains, with a loss that explodes, for a dozen steps first.

# %%
from course import Pipeline, IGNORE
from course.bugs import inject
from course.train import train

pipe = Pipeline()
runs = {name: train(inject(pipe, name), steps=30, seed=0, eval_every=0)
        for name in ("causal-mask-strict", "lr-sign-typo")}
for name, run in runs.items():
    h = run.history
    print(f"{name:>20}: {run.stopped}; loss at each step: {[f'{x:.3g}' for x in h['loss']]}")

# %% [markdown]
# The second run's parameter norm grows geometrically before anything overflows; a healthy run's
# barely moves. The plot is on a log scale.

# %%
healthy = train(pipe, steps=30, seed=0, eval_every=0)
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(healthy.history["param_norm"], "o-", label="reference")
ax.plot(runs["lr-sign-typo"].history["param_norm"], "s-", label="lr-sign-typo (stops when non-finite)")
ax.axhline(healthy.history["param_norm"][0], color="grey", linestyle=":", label="norm at initialisation")
ax.set_yscale("log")
ax.set_xlabel("step")
ax.set_ylabel("parameter norm after the step")
ax.set_title("A learning rate of 1e5: growth before the NaN")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## "NaN at step 1, lower the learning rate"?
#
# Not when the loss is NaN **before any update**: the first loss is computed with the initial weights,
# which no learning rate has touched. The same broken pipeline at three learning rates, zero included:

# %%
for lr in (1e-2, 1e-6, 0.0):
    first = train(inject(pipe, "causal-mask-strict").replace(lr=lr), steps=1, seed=0, eval_every=0)
    print(f"lr = {lr:g}: loss at step 0 = {first.history['loss'][0]}")

# %% [markdown]
# ## The first non-finite tensor
#
# `course.nonfinite.Locator` hooks every module of a model (forward hooks, in execution order) and
# records, after the forward pass, the loss, the gradients, the optimizer state and the parameters.
# `trace(pipe)` runs the training loop with it attached and returns the records (`Event`s) of the first
# step where anything went bad; `locate(pipe)` returns the first bad one. TinyGPT routes its attention
# scores and weights through two identity modules (`score_probe`, `softmax_probe`) so hooks can see them.

# %%
from course.nonfinite import trace, locate, STAGES

events = trace(inject(pipe, "causal-mask-strict"))
print(f"{len(events)} tensors recorded at step {events[0].step}; the first twelve:")
for e in events[:12]:
    print(f"  {e.stage:>11}  {e.name:<28} finite: {bool(torch.isfinite(e.tensor).all())}")

# %% [markdown]
# Every later tensor is NaN too, including the loss, every gradient and every parameter after the
# update. Only the *first* one points at the cause. Three bugs, three different first stages:

# %%
for name in ("embedding-scaled-by-inf", "causal-mask-strict", "log-guarded-by-where"):
    print(f"{name:>24}: {locate(inject(pipe, name))}")
print(f"{'reference':>24}: {locate(pipe, steps=5)}")

# %% [markdown]
# ## Counterexample 1: log(softmax) is not log_softmax
#
# Two logits, 1000 and -1000, and the target is the second. The exact loss is
# `logsumexp(1000, -1000) - (-1000) = 2000` (to float precision). Computed naively, `softmax` rounds the
# target's probability, `exp(-2000)`, to 0, and `log(0) = -inf`:

# %%
logits2 = torch.tensor([[1000.0, -1000.0]])
target2 = torch.tensor([1])
naive = -torch.log(torch.softmax(logits2, dim=-1))[0, 1]
stable = F.cross_entropy(logits2, target2)
print(f"naive -log(softmax): {naive.item()}")
print(f"F.cross_entropy:     {stable.item()}")
assert math.isinf(naive.item()) and stable.item() == 2000.0

# %% [markdown]
# ## Exercise 1: a stable loss
#
# Write `stable_token_loss(logits, targets)`: the mean cross-entropy over the targets that are not
# `IGNORE`, for logits of shape `(..., V)` and integer targets of shape `(...)`. It must stay finite
# however far apart the logits are, and its gradient too. (Subtract the row maximum before `exp`, or use
# `log_softmax`, or `F.cross_entropy` itself: any stable form is right.)

# %% nbgrader={"grade": false, "grade_id": "stable_loss", "locked": false, "schema_version": 3, "solution": true}
def stable_token_loss(logits, targets):
    ### BEGIN SOLUTION
    logits, targets = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)
    scored = targets != IGNORE
    logp = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    picked = logp[scored].gather(-1, targets[scored].unsqueeze(-1)).squeeze(-1)
    return -picked.mean()
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_stable_loss", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.grading import quiet

with quiet():
    _v = stable_token_loss(torch.tensor([[1000.0, -1000.0]]), torch.tensor([1]))
assert _v.item() == 2000.0, f"CE of logits (1000, -1000) with the target on the second must be 2000, got {_v.item()}"
_g = torch.Generator().manual_seed(0)
_l, _t = torch.randn(5, 7, generator=_g), torch.randint(0, 7, (5,), generator=_g)
with quiet():
    _mine = stable_token_loss(_l, _t)
assert torch.allclose(_mine, F.cross_entropy(_l, _t), atol=1e-5), "on ordinary logits it must equal F.cross_entropy"
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(21)
for _scale in (1.0, 1e3, 1e5):
    _l = (torch.randn(3, 6, 11, generator=_g) * _scale).requires_grad_(True)
    _t = torch.randint(0, 11, (3, 6), generator=_g)
    _t[0, :2] = IGNORE
    with quiet():
        _mine = stable_token_loss(_l, _t)
    _ref = F.cross_entropy(_l.detach().flatten(0, 1), _t.flatten())
    assert torch.isfinite(_mine), f"loss not finite at logit scale {_scale:g}"
    assert torch.allclose(_mine.detach(), _ref, rtol=1e-5, atol=1e-4), f"wrong value at logit scale {_scale:g}"
    _mine.backward()
    _lr = _l.detach().clone().requires_grad_(True)
    F.cross_entropy(_lr.flatten(0, 1), _t.flatten()).backward()
    assert torch.isfinite(_l.grad).all() and torch.allclose(_l.grad, _lr.grad, atol=1e-6), \
        f"wrong or non-finite gradient at logit scale {_scale:g}"
### END HIDDEN TESTS

# %% [markdown]
# ## Counterexample 2: what anomaly mode catches, and what it misses
#
# `torch.autograd.detect_anomaly(check_nan=True)` raises when a backward function *returns NaN*, and
# names the forward op that made it. A 0/0 in backward is caught. But `sqrt` at 0 has an infinite
# derivative, and an inf gradient is not a NaN: no error.

# %%
x = torch.zeros(1, requires_grad=True)
try:
    with torch.autograd.detect_anomaly(check_nan=True), quiet():
        (x / x).sum().backward()
    print("0/0: no error")
except RuntimeError as err:
    print(f"0/0: anomaly mode raised: {str(err).splitlines()[0]}")

# %%
x = torch.zeros(1, requires_grad=True)
with torch.autograd.detect_anomaly(check_nan=True), quiet():
    x.sqrt().sum().backward()
print(f"sqrt(0): no error, and the gradient is {x.grad.item()}")

# %% [markdown]
# ## Counterexample 3: `torch.where` does not stop the gradient of the branch it did not pick
#
# `torch.where(p > 0, p.log(), 0)` has a finite value everywhere. Backward still runs through `p.log()`
# at `p = 0`, where the derivative is `1/0 = inf`, and multiplies it by the 0 that `where` sends to the
# unselected branch: `0 x inf = NaN`.

# %%
p = torch.tensor([0.0, 0.5], requires_grad=True)
value = torch.where(p > 0, p.log(), torch.zeros_like(p))
value.sum().backward()
print(f"value {value.tolist()}, gradient {p.grad.tolist()}")

# %% [markdown]
# The fix is to make the *input* safe before the op, so that no branch ever computes `log(0)`: a second
# `where` inside (`p.log()` is evaluated on 1 wherever the result will be discarded).
#
# ## Exercise 2: a safe log
#
# Write `safe_log(p)`: `log(p)` where `p > 0` and `0` where `p == 0`, with a finite gradient everywhere
# (`1/p` where `p > 0`, `0` where `p == 0`).

# %% nbgrader={"grade": false, "grade_id": "safe_log", "locked": false, "schema_version": 3, "solution": true}
def safe_log(p):
    ### BEGIN SOLUTION
    positive = p > 0
    return torch.where(positive, torch.where(positive, p, torch.ones_like(p)).log(), torch.zeros_like(p))
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_safe_log", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_p = torch.tensor([0.0, 0.5, 1.0], requires_grad=True)
with quiet():
    _out = safe_log(_p)
    _out.sum().backward()
assert torch.allclose(_out.detach(), torch.tensor([0.0, math.log(0.5), 0.0])), f"values {_out.tolist()}"
assert torch.isfinite(_p.grad).all(), f"the gradient must be finite, got {_p.grad.tolist()}"
### BEGIN HIDDEN TESTS
_g = torch.Generator().manual_seed(5)
_logits = torch.randn(4, 9, generator=_g)
_logits[:, 3] = float("-inf")  # a masked column: probability exactly 0
_logits = _logits.requires_grad_(True)
_q = _logits.softmax(-1)
with quiet():
    _out = safe_log(_q)
assert torch.equal(_out[:, 3].detach(), torch.zeros(4)), "log of an exact 0 must be 0"
assert torch.allclose(_out[:, :3].detach(), _q[:, :3].detach().log()), "wrong value where p > 0"
(_out * torch.randn(4, 9, generator=_g)).sum().backward()
assert torch.isfinite(_logits.grad).all(), "a zero probability poisons the gradient of the logits"
_p = torch.tensor([0.0, 0.25, 0.0, 2.0], requires_grad=True)
with quiet():
    safe_log(_p).sum().backward()
assert torch.allclose(_p.grad, torch.tensor([0.0, 4.0, 0.0, 0.5])), f"gradient {_p.grad.tolist()}"
### END HIDDEN TESTS

# %% [markdown]
# ## Counterexample 4: fp16 overflows, bf16 keeps the range and loses precision
#
# Both are 16 bits. fp16 spends 5 on the exponent: its largest value is 65504, and anything beyond
# rounds to inf. bf16 keeps float32's 8 exponent bits (largest about 3.4e38) and keeps only 8 bits of
# mantissa, so it rounds coarsely. Plain CPU tensors show both:

# %%
big = torch.tensor([60000.0, 65504.0, 70000.0, 1e6])
print(f"float32 {big.tolist()}")
print(f"fp16    {big.half().float().tolist()}   (max {torch.finfo(torch.float16).max})")
print(f"bf16    {big.bfloat16().float().tolist()}")
fine = torch.tensor([1.0 + 2**-10, 257.0])
print(f"1 + 2^-10 and 257 in fp16: {fine.half().float().tolist()}, in bf16: {fine.bfloat16().float().tolist()}")

# %% [markdown]
# A product that fits float32 easily overflows in fp16: the catalogue's `loss-scaled-in-fp16` multiplies
# an fp16 loss by a static loss scale of 2^16.

# %%
print(f"loss 2.9 x 2^16 in fp16: {(torch.tensor(2.9).half() * 65536.0).item()}, "
      f"in bf16: {(torch.tensor(2.9).bfloat16() * 65536.0).item()}")
print(f"locator: {locate(inject(pipe, 'loss-scaled-in-fp16'))}")

# %% [markdown]
# ## Counterexample 5: clipping does not repair non-finite gradients
#
# `clip_grad_norm_` returns the total norm before clipping and only scales down. With
# `error_if_nonfinite=True` it raises when that norm is not finite. With the default (`False`) it
# scales every gradient by `max_norm / total_norm`: a NaN anywhere makes every gradient NaN; an inf
# makes the factor 0, so the finite gradients become 0 and the inf one `inf x 0 = NaN`.

# %%
def three_grads(bad):
    ps = [torch.nn.Parameter(torch.zeros(2)) for _ in range(3)]
    for p, g in zip(ps, ([1.0, 2.0], [3.0, bad], [0.5, 0.5])):
        p.grad = torch.tensor(g)
    return ps

try:
    torch.nn.utils.clip_grad_norm_(three_grads(float("nan")), 1.0, error_if_nonfinite=True)
except RuntimeError as err:
    print(f"error_if_nonfinite=True: {str(err).splitlines()[0][:90]}...")
for bad in (float("nan"), float("inf")):
    ps = three_grads(bad)
    norm = torch.nn.utils.clip_grad_norm_(ps, 1.0)
    print(f"one grad {bad}: total norm {norm.item()}, grads after clipping {[p.grad.tolist() for p in ps]}")

# %% [markdown]
# ## Counterexample 6: when the learning rate *is* the cause
#
# On `f(x) = a x^2 / 2` gradient descent multiplies `x` by `1 - eta a` at each step, so it converges iff
# `|1 - eta a| < 1`, i.e. `0 < eta a < 2`; at `eta a = 2` it oscillates forever, beyond it diverges
# geometrically. A divergence from a too-large step needs *updates*: it cannot make the loss of the
# initial weights non-finite.

# %%
from course.nonfinite import quadratic_descent

rates = [0.5, 1.0, 1.9, 2.0, 2.1, 2.5]
fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.5))
for r in rates:
    ax.plot(quadratic_descent(r, 30), label=f"eta a = {r}")
ax.axhline(1.0, color="grey", linestyle=":", label="|x_0|")
ax.set_yscale("log")
ax.set_xlabel("step t")
ax.set_ylabel("|x_t|")
ax.set_title("Gradient descent on a x^2 / 2")
ax.legend(fontsize=7)
grid = torch.linspace(-0.5, 3.0, 141)
bx.plot(grid, (1 - grid).abs(), label="|1 - eta a| (growth per step)")
bx.axhline(1.0, color="grey", linestyle=":", label="growth 1")
for edge in (0.0, 2.0):
    bx.axvline(edge, color="red", linestyle="--", linewidth=1)
bx.set_xlabel("eta a")
bx.set_ylabel("factor per step")
bx.set_title("Stable iff 0 < eta a < 2 (red lines)")
bx.legend(fontsize=7)
plt.show()

# %%
for r in rates:
    print(f"eta a = {r}: |x_30| = {quadratic_descent(r, 30)[-1]:.3g}")

# %% [markdown]
# ## The decision tree
#
# Pick *when* the run first went non-finite and *which stage* the locator reported; the box below
# shows the hypotheses that fit and the test that separates them. The tree is plain data
# (`course.nonfinite.TREE`, read through `advise(when, stage)`), so you can read it, test it, and
# extend it for your own runs.

# %%
# NBVAL_IGNORE_OUTPUT
from course.nonfinite import tree_widget

tree_widget()

# %% [markdown]
# The same tree, printed for the case at the start of this notebook:

# %%
from course.nonfinite import advice_text

print(advice_text("before any update", "softmax"))

# %% [markdown]
# ## Exercise 3: name where and when
#
# Write `first_nonfinite_stage(p, steps=20, seed=0)`. Run `trace(p, steps, seed)`; it returns the events
# (`e.step`, `e.stage`, `e.name`, `e.tensor`, `e.limit`) of the first step where something went bad, in
# the order they were computed. Return `(stage, step)` of the **first** bad event, or `None` if every
# tensor is fine. A float tensor is bad if it holds a NaN or an inf; an integer tensor of ids is bad if
# an id lies outside `[0, e.limit)` (when `e.limit` is not `None`).
#
# The hidden tests use broken pipelines whose first bad stage you have not seen in this notebook. While
# they run, the package's own `locate`, `first_nonfinite` and `is_bad` are disabled: write the logic.

# %% nbgrader={"grade": false, "grade_id": "first_stage", "locked": false, "schema_version": 3, "solution": true}
def first_nonfinite_stage(p, steps=20, seed=0):
    ### BEGIN SOLUTION
    for e in trace(p, steps, seed):
        t = e.tensor
        if t.is_floating_point():
            bad = not bool(torch.isfinite(t).all())
        else:
            bad = e.limit is not None and t.numel() > 0 and bool((t < 0).any() or (t >= e.limit).any())
        if bad:
            return (e.stage, e.step)
    return None
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_first_stage_visible", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from course.grading import assert_names

assert_names(first_nonfinite_stage, {
    "reference": (pipe, None),
    "embedding-scaled-by-inf": (inject(pipe, "embedding-scaled-by-inf"), ("embeddings", 0)),
    "causal-mask-strict": (inject(pipe, "causal-mask-strict"), ("softmax", 0)),
    "log-guarded-by-where": (inject(pipe, "log-guarded-by-where"), ("grads", 0)),
}, what="first non-finite stage")

# %% [markdown]
# Hidden tests: forward stages you have not seen, on a smaller language.

# %% nbgrader={"grade": true, "grade_id": "test_first_stage_forward", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
import course.nonfinite as _nf
from course.grading import assert_names as _assert_names
_small = Pipeline(n_symbols=8, seq_len=12, n_train=512, data_seed=7)
_cases = {"reference": _small,
          "attention-scale-inf": inject(_small, "attention-scale-inf"),
          "loss-scaled-in-fp16": inject(_small, "loss-scaled-in-fp16"),
          "inputs-padded-with-ignore-index": inject(_small.replace(min_len=4), "inputs-padded-with-ignore-index")}
_expected = {}
for _k, _p in _cases.items():
    _f = _nf.locate(_p, steps=5, seed=3)
    _expected[_k] = (_p.replace(bugs=()), 3, None if _f is None else (_f.stage, _f.step))
assert [e[2] for e in _expected.values()] == [None, ("scores", 0), ("loss", 0), ("input", 0)]
_saved = {f: getattr(_nf, f).__code__ for f in ("locate", "first_nonfinite", "is_bad")}
_nf.locate.__code__ = (lambda pipe, steps=20, seed=0: None).__code__
_nf.first_nonfinite.__code__ = (lambda events: None).__code__
_nf.is_bad.__code__ = (lambda event: False).__code__
try:
    _assert_names(lambda c: first_nonfinite_stage(c[0], 5, c[1]),
                  {k: ((p, s), want) for k, (p, s, want) in _expected.items()}, what="first non-finite stage")
finally:
    for _f, _c in _saved.items():
        getattr(_nf, _f).__code__ = _c
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: runs that go bad at or after the first update.

# %% nbgrader={"grade": true, "grade_id": "test_first_stage_updates", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
import course.nonfinite as _nf
from course.grading import assert_names as _assert_names
_cases = {"reference": pipe.replace(lr=3e-2),
          "adam-eps-zero": inject(pipe, "adam-eps-zero"),
          "lr-sign-typo": inject(pipe, "lr-sign-typo")}
_expected = {}
for _k, _p in _cases.items():
    _f = _nf.locate(_p, steps=20, seed=1)
    _expected[_k] = (_p.replace(bugs=()), None if _f is None else (_f.stage, _f.step))
assert _expected["reference"][1] is None and _expected["adam-eps-zero"][1] == ("params", 0)
assert _expected["lr-sign-typo"][1] is not None and _expected["lr-sign-typo"][1][1] > 0
_saved = {f: getattr(_nf, f).__code__ for f in ("locate", "first_nonfinite", "is_bad")}
_nf.locate.__code__ = (lambda pipe, steps=20, seed=0: None).__code__
_nf.first_nonfinite.__code__ = (lambda events: None).__code__
_nf.is_bad.__code__ = (lambda event: False).__code__
try:
    _assert_names(lambda p: first_nonfinite_stage(p, 20, 1),
                  {k: (p, want) for k, (p, want) in _expected.items()}, what="first non-finite stage")
finally:
    for _f, _c in _saved.items():
        getattr(_nf, _f).__code__ = _c
### END HIDDEN TESTS

# %% [markdown]
# ## What these tests can and cannot prove
#
# * The locator proves **where a step first produced** a non-finite tensor among the tensors it sees:
#   module outputs, the loss, gradients, optimizer state, parameters. It does not see operations
#   written inline between modules (route them through a probe module), and the first bad tensor is
#   where to start, not the cause: a weight made inf by the previous update shows up first as the
#   output of the module that uses it.
# * "Non-finite before any update" proves the learning rate is not the cause. "Non-finite after some
#   updates" does not prove it is: rerun the failing step from the last good state at a lower rate.
# * A stable loss equal to `F.cross_entropy` on ordinary logits and finite on (1000, -1000) proves the
#   loss is not the source of an overflow; it says nothing about where the logits came from.
# * Anomaly mode proves which backward op first returned NaN; silence does not prove the gradients are
#   finite (inf passes, as `sqrt(0)` showed).
# * A finite forward pass proves nothing about the backward pass (`torch.where`).
# * Clipping with the default settings hides nothing and repairs nothing: non-finite gradients become
#   NaN (and finite ones 0). `error_if_nonfinite=True` turns that into an error you can catch.
# * The quadratic proves when a fixed step size diverges on one curvature; a network has many
#   curvatures that change as it trains, so the bound is a picture, not a number to compute.
