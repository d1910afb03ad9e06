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
# * Run the counterexamples behind the usual advice: `log(softmax)` against `F.cross_entropy`, anomaly
#   mode on two backward passes, the gradient of a `torch.where` guard, fp16 against bf16, gradient
#   clipping with NaN and inf, and when a learning rate is the cause.
#   Before each one you write down what you expect; the cell after it prints your guess beside what
#   happened.
# * Use a decision tree: from *when* and *where* a run went non-finite to the hypotheses and the one
#   test that separates them; fix the notebook's two broken runs at the right depth and re-run them.
# * Debug a **mystery pipeline** yourself: write the test that detects its symptom, name the cause,
#   and fix it; all three are graded on pipelines you have not seen.
#
# **Time.** Every cell runs on a laptop CPU in seconds; the last cell prints how long the whole
# notebook took on yours. **GPU:** not needed anywhere.

# %%
import math
import time

import torch
import torch.nn.functional as F
import matplotlib.pyplot as plt

from course.exercises.record import reveal

_notebook_start = time.perf_counter()
torch.set_num_threads(1)  # tiny models: one thread is fastest and does not fight other processes
_ = torch.manual_seed(0)  # returns the generator; assigned so it is not printed

# %% [markdown]
# ## The symptom
#
# Two broken variants of the course's pipeline, trained with the instrumented loop, which stops at the
# first step whose loss, gradient norm or parameters are not finite. One is NaN from the first step;
# the other trains for several steps first, with a loss that explodes. The cell prints at which step
# each one stopped; for the second that step depends on the machine (float rounding differs from one
# CPU to another), so yours may differ from the saved output.

# %%
from course import Pipeline, IGNORE
from course.bugs import inject
from course.reference.train import start, train_steps

pipe = Pipeline()
LOCATE_STEPS = 40  # how far the runs below look: the second run stops well before on the machines tried
runs = {name: train_steps(start(inject(pipe, name), seed=0), LOCATE_STEPS, eval_every=0)
        for name in ("causal-mask-strict", "lr-sign-typo")}
for name, run in runs.items():
    h = run.history
    print(f"{name:>20}: configured LR {run.pipe.lr:g}; {run.stopped or 'finite'} (after {len(h['loss']) - 1} finite steps); "
          f"loss at each step: {[f'{x:.3g}' for x in h['loss']]}")

# %% [markdown]
# **Predict.** The second run uses AdamW with a huge learning rate. Does its parameter norm grow
# *geometrically* (the same factor each step, as gradient descent on a quadratic does) or
# *additively* (about the same increase each step)?

# %% tags=["demo"]
prediction = None  # your guess: "geometric" or "additive"

# %% [markdown]
# The second run's configured learning rate (printed above) is huge: an exponent whose minus sign was
# lost. The loop's telemetry records the rate each step actually **used**: the warm-up ramps it up from a fraction of that.
# Its parameter norm grows until the run stops; over the same steps a healthy run's barely moves. The
# plot is on a log scale, where geometric growth (a constant factor per step) would be a straight line.

# %% tags=["demo"]
typo = runs["lr-sign-typo"].history
used = typo["lr"]
healthy = train_steps(start(pipe, seed=0), len(typo["loss"]), eval_every=0)
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(healthy.history["param_norm"], "o-", label=f"reference (LR used {healthy.history['lr'][0]:.2g} to {healthy.history['lr'][-1]:.2g})")
ax.plot(typo["param_norm"], "s-", label=f"lr-sign-typo (LR used {used[0]:.3g} to {used[-1]:.3g}; stops when non-finite)")
ax.axhline(healthy.history["param_norm"][0], color="grey", linestyle=":", label="norm at initialisation")
ax.set_yscale("log")
ax.set_xlabel("step")
ax.set_ylabel("parameter norm after the step")
ax.set_title(f"Configured LR {runs['lr-sign-typo'].pipe.lr:g}, warmed up over {runs['lr-sign-typo'].pipe.warmup} steps")
ax.legend(fontsize=7)
plt.show()

# %% [markdown]
# The ratio of each step's parameter norm to the previous one, and the increase, say which:

# %% tags=["demo"]
norms = typo["param_norm"]
print(" step   LR used   param norm   ratio to previous   increase")
for s in range(1, len(norms)):
    if math.isfinite(norms[s]):
        print(f"{s:5d} {used[s]:9.4g} {norms[s]:12.4g} {norms[s] / norms[s - 1]:19.3f} {norms[s] - norms[s - 1]:10.3g}")
    else:
        print(f"{s:5d} {used[s]:9.4g} {norms[s]:12.4g}   (non-finite: the run stops)")
finite = [n for n in norms if math.isfinite(n)]
ratios = [b / a for a, b in zip(finite, finite[1:])]
increases = [b - a for a, b in zip(finite, finite[1:])]
# geometric: the growth factor's excess over 1 stays about the same; additive: the increase does
growth_spread = max(r - 1 for r in ratios) / min(r - 1 for r in ratios)
increase_spread = max(increases) / min(increases)
verdict = "additive" if increase_spread < growth_spread else "geometric"
reveal("the growth of the parameter norm: geometric or additive", prediction,
       f"{verdict}: the increase per step stays between {min(increases):.2g} and {max(increases):.2g} "
       f"(a spread of x{increase_spread:.1f}), while the ratio to the previous step falls from {ratios[0]:.2f} "
       f"to {ratios[-1]:.2f} (its excess over 1 spreads x{growth_spread:.1f})")

# %% [markdown]
# Additive, roughly: the ratio falls towards 1 while the increase per step stays of the same order,
# even though the LR used keeps rising. Adam and AdamW divide each gradient by its own running scale, so a
# step moves each weight by at most about the LR whatever the gradient's size: a diverging run grows
# roughly **additively**. Geometric growth is the picture of plain gradient descent on a quadratic
# (Counterexample 6 below), not of Adam. What finally overflows here is the backward pass (the locator
# below says which tensor), after the weights have grown for several steps.
#
# ## "NaN at step 1, lower the learning rate"?
#
# **Predict.** `causal-mask-strict` is NaN from its first step. Train it for one step at a learning
# rate of 0: how many of the model's parameter tensors hold a NaN or an inf after that step?

# %% tags=["demo"]
prediction = None  # your guess: a count of parameter tensors (the reveal prints how many there are)

# %% tags=["demo"]
bad_params = {}
for lr in (1e-2, 1e-6, 0.0):
    first = train_steps(start(inject(pipe, "causal-mask-strict").replace(lr=lr), seed=0), 1, eval_every=0)
    params = list(first.model.parameters())
    bad_params[lr] = sum(not bool(torch.isfinite(q).all()) for q in params)
    print(f"lr = {lr:g}: loss at step 0 = {first.history['loss'][0]}; "
          f"parameter tensors with a NaN or an inf after the step: {bad_params[lr]} of {len(params)}")
reveal(f"parameter tensors non-finite after one step at lr = 0 (of {len(params)})", prediction, bad_params[0.0])

# %% [markdown]
# The loss of step 0 is computed with the initial weights, which no learning rate has touched, so a
# loss that is NaN **before any update** has a cause that a lower learning rate cannot remove. Not even
# a learning rate of 0 keeps the weights clean: the NaN gradients fill AdamW's running averages, and
# the update multiplies them by the rate, `0 x NaN = NaN`.

# %% [markdown]
# ## The first non-finite tensor
#
# `course.toolkit.nonfinite.Locator` hooks every module of a model (forward hooks, in execution order) and
# records, after the forward pass, the loss, the gradients, and **after the update** the optimizer
# state and the parameters. `trace(pipe)` runs the training loop with it attached and returns the
# records (`Event`s) of the first step where anything went bad, or of the last step it ran if nothing
# did (20 steps unless you pass `steps`); `locate(pipe)` returns the first bad one, or `None`. TinyGPT routes its attention scores and weights through two identity modules (`score_probe`,
# `softmax_probe`) so hooks can see them.

# %% tags=["demo"]
from course.reference.diagnose import trace, locate
from course.toolkit.nonfinite import STAGES

events = trace(inject(pipe, "causal-mask-strict"))
print(f"{len(events)} tensors recorded at step {events[0].step}; the first twelve:")
for e in events[:12]:
    print(f"  {e.stage:>11}  {e.name:<28} finite: {bool(torch.isfinite(e.tensor).all())}")

# %% [markdown]
# Every later tensor is NaN too, including the loss, every gradient and every parameter after the
# update. Only the *first* one points at the cause. Four bugs, four different first stages, and the
# lr-sign-typo run from the symptom (each located over `LOCATE_STEPS` steps, so that the lr-sign-typo
# run has room to go bad on any machine tried):

# %% tags=["demo"]
located = {name: locate(inject(pipe, name), steps=LOCATE_STEPS) for name in
           ("embedding-scaled-by-inf", "causal-mask-strict", "log-guarded-by-where", "adam-eps-zero", "lr-sign-typo")}
for name, found in located.items():
    print(f"{name:>24}: {found}")
print(f"{'reference':>24}: {locate(pipe, steps=5)}")

# %% [markdown]
# `adam-eps-zero` goes bad at step 0 in the *parameters*: they are recorded after step 0's update, so
# the forward pass, the loss and the gradients of the initial weights were all finite and the first
# update made the NaN. `lr-sign-typo` goes bad at a later step in a *gradient*: the weights grew for
# several updates until the backward pass overflowed.
#
# ## Counterexample 1: log(softmax) against F.cross_entropy
#
# Two logits, 1000 and -1000, and the target is the second.
#
# **Predict**: what does the naive `-log(softmax(logits))[target]` give, and what does
# `F.cross_entropy` give? Write your guess (a number, `inf`, `nan`, or an error) into `prediction`.

# %% tags=["demo"]
prediction = None  # your guess: (naive, F.cross_entropy), each a number, inf, nan or "error"

# %% tags=["demo"]
logits2 = torch.tensor([[1000.0, -1000.0]])
target2 = torch.tensor([1])
naive = -torch.log(torch.softmax(logits2, dim=-1))[0, 1]
stable = F.cross_entropy(logits2, target2)
reveal("CE of logits (1000, -1000), target the second: (naive, F.cross_entropy)", prediction,
       (naive.item(), stable.item()))

# %% [markdown]
# The exact loss is `logsumexp(1000, -1000) - (-1000)`, here computed in float64:

# %% tags=["demo"]
print(f"exact loss: {torch.logsumexp(logits2.double(), dim=-1).item() + 1000.0}")

# %% [markdown]
# The naive form computes the target's probability first: `exp(-2000)` is far below float32's
# smallest positive number, so `softmax` rounds it to 0, and `-log(0)` is inf. `F.cross_entropy`
# works in log space (`logits - logsumexp(logits)`) and never forms that probability.

# %% [markdown]
# ## Exercise 1: a stable loss
#
# Write `stable_token_loss(logits, targets)`: the mean cross-entropy over the targets that are not
# `IGNORE`, for float32 logits of shape `(..., V)` and integer targets of shape `(...)`; return a
# 0-dimensional float tensor. It must stay finite however far apart the logits are, and its gradient
# too. Accepted: exactly 2000.0 on the logits (1000, -1000); elsewhere within `rtol=1e-5, atol=1e-4`
# of `F.cross_entropy` and gradients within `atol=1e-6`. (Subtract the row maximum before `exp`, or use
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
import builtins as _builtins

import torch
import torch.nn.functional as F

from course import IGNORE
from course.exercises.grading import graded_calls as _graded_calls

def _probe(case):  # in the graded call's process: your loss on (logits, targets), then its gradient
    logits, targets = case
    v = stable_token_loss(logits, targets)
    sent = {"is_tensor": isinstance(v, torch.Tensor), "type": type(v).__name__}
    if sent["is_tensor"]:
        sent.update(value=v.detach().tolist(), dtype=str(v.dtype), numel=v.numel())
    if logits.requires_grad:
        try:
            v.backward()
        except Exception as err:  # raised again below, where the test calls backward()
            sent["backward_error"] = [type(err).__name__, str(err)]
        sent["grad"] = None if logits.grad is None else logits.grad.tolist()
    return sent

def _rebuilt(sent):  # the tensor your function returned, rebuilt from what came back
    if not sent["is_tensor"]:
        raise TypeError(f"stable_token_loss returned a {sent['type']}, not a tensor")
    return torch.tensor(sent["value"], dtype=getattr(torch, sent["dtype"].removeprefix("torch.")))

def _backward(sent):  # what your result's backward() raised in the graded call, raised here
    if "backward_error" in sent:
        name, message = sent["backward_error"]
        kind = getattr(_builtins, name, None)
        if isinstance(kind, type) and issubclass(kind, Exception):
            raise kind(message)
        raise RuntimeError(f"{name}: {message}")

_g = torch.Generator().manual_seed(0)
_l, _t = torch.randn(5, 7, generator=_g), torch.randint(0, 7, (5,), generator=_g)
# the whole contract: logits of shape (..., V), IGNORE targets left out of the mean, the gradient
_l3 = torch.randn(2, 3, 7, generator=_g).requires_grad_(True)
_t3 = torch.randint(0, 7, (2, 3), generator=_g)
_t3[0, 0] = IGNORE
_sents = _graded_calls(_probe, [(torch.tensor([[1000.0, -1000.0]]), torch.tensor([1])), (_l, _t), (_l3, _t3)])
assert _sents[0]["is_tensor"] and _sents[0]["numel"] == 1, f"return a 0-dimensional tensor, not {_sents[0]['type']}"
_v = _rebuilt(_sents[0])
assert _v.item() == 2000.0, f"CE of logits (1000, -1000) with the target on the second must be 2000, got {_v.item()}: is a probability rounded to 0 before the log?"
_mine = _rebuilt(_sents[1])
assert torch.allclose(_mine, F.cross_entropy(_l, _t), rtol=1e-5, atol=1e-4), \
    f"on ordinary logits it must equal F.cross_entropy: got {_mine.item():.6f}, expected {F.cross_entropy(_l, _t).item():.6f}"
_mine = _rebuilt(_sents[2])
_lr = _l3.detach().clone().requires_grad_(True)
_ref = F.cross_entropy(_lr.flatten(0, 1), _t3.flatten())  # ignore_index is IGNORE (-100) by default
assert torch.allclose(_mine.detach(), _ref.detach(), rtol=1e-5, atol=1e-4), \
    f"on logits of shape (2, 3, 7) with one IGNORE target: got {_mine.item():.6f}, expected {_ref.item():.6f}: flatten the leading dimensions, and leave IGNORE targets out of the mean"
_backward(_sents[2])
_ref.backward()
_grad = None if _sents[2]["grad"] is None else torch.tensor(_sents[2]["grad"], dtype=_l3.dtype)
assert _grad is not None and torch.allclose(_grad, _lr.grad, atol=1e-6), \
    "the gradient with respect to the logits differs from F.cross_entropy's: is the result detached, or computed with .item()?"
### BEGIN HIDDEN TESTS
import random as _random

from course.exercises.grading import hidden_seed as _hidden_seed
_rng = _random.Random(_hidden_seed("h-02-stlh"))
_g = torch.Generator().manual_seed(_rng.getrandbits(62))
_drawn = []  # (scale, logits, targets)
for _scale in (1.0, 1e3, 1e5):  # random 3-d logits and targets, random IGNORE positions (at least one, not all)
    _shape, _V = (_rng.randint(2, 4), _rng.randint(3, 7)), _rng.randint(5, 16)
    if _scale == 1.0:
        _l = torch.randn(*_shape, _V, generator=_g)
    else:  # far apart: a random order of values at least _scale / (2 V) apart, so float32 rounding cannot move the
        # softmax (near ties at this scale would leave even F.cross_entropy's own gradient uncertain beyond 1e-6)
        _rank = torch.rand(*_shape, _V, generator=_g).argsort(-1).float()
        _l = (_rank + 0.5 * torch.rand(*_shape, _V, generator=_g) - _V / 2) * (_scale / _V)
    _l = _l.requires_grad_(True)
    _t = torch.randint(0, _V, _shape, generator=_g)
    _ignored = torch.rand(_shape, generator=_g) < 0.3
    _one, _other = _rng.sample(range(_t.numel()), 2)
    _ignored.view(-1)[_one], _ignored.view(-1)[_other] = True, False
    _t[_ignored] = IGNORE
    _drawn.append((_scale, _l, _t))
_sents = _graded_calls(_probe, [(_l, _t.clone()) for _scale, _l, _t in _drawn])  # a copy: the references below read the targets drawn
for (_scale, _l, _t), _sent in zip(_drawn, _sents):
    _mine = _rebuilt(_sent)
    _ref = F.cross_entropy(_l.detach().flatten(0, 1), _t.flatten())
    assert torch.isfinite(_mine), f"loss not finite at logit scale {_scale:g} (3-d logits, some IGNORE targets)"
    assert torch.allclose(_mine.detach(), _ref, rtol=1e-5, atol=1e-4), \
        f"wrong value at logit scale {_scale:g} on 3-d logits with some IGNORE targets: are they left out of the mean?"
    _backward(_sent)
    _lr = _l.detach().clone().requires_grad_(True)
    F.cross_entropy(_lr.flatten(0, 1), _t.flatten()).backward()
    _grad = None if _sent["grad"] is None else torch.tensor(_sent["grad"], dtype=_l.dtype)
    assert torch.isfinite(_grad).all() and torch.allclose(_grad, _lr.grad, atol=1e-6), \
        f"wrong or non-finite gradient at logit scale {_scale:g}"
### END HIDDEN TESTS

# %% [markdown]
# ## Counterexample 2: anomaly mode on two backward passes
#
# `torch.autograd.detect_anomaly(check_nan=True)` checks what each backward function returns, and
# its warning on stderr carries the traceback of the forward op that made a bad value (silenced in
# the cell below; the error names the backward function). Two backward passes at `x = 0`: `x / x` and
# `sqrt(x)`.
#
# **Predict**: for each, does anomaly mode raise, and if not, what is `x.grad`?

# %% tags=["demo"]
prediction = None  # your guess: (0/0: "raises" or a gradient, sqrt(0): "raises" or a gradient)

# %% tags=["demo"]
import warnings

warnings.filterwarnings("ignore", message="Anomaly Detection has been enabled")  # torch's notice, at every entry
warnings.filterwarnings("ignore", message="Error detected in")  # the forward traceback it adds; the error says enough
x = torch.zeros(1, requires_grad=True)
try:
    with torch.autograd.detect_anomaly(check_nan=True):
        (x / x).sum().backward()
    div_result = f"no error, gradient {x.grad.item()}"
except RuntimeError as err:
    div_result = f"raises: {str(err).splitlines()[0]}"
x = torch.zeros(1, requires_grad=True)
with torch.autograd.detect_anomaly(check_nan=True):
    x.sqrt().sum().backward()
sqrt_result = f"no error, gradient {x.grad.item()}"
reveal("anomaly mode on backward at x = 0: (0/0, sqrt(0))", prediction, (div_result, sqrt_result))

# %% [markdown]
# The 0/0 is caught. The derivative of `sqrt` at 0, `1 / (2 sqrt(0))`, is `1/0 = inf`, and anomaly mode
# raises on NaN only: an inf gradient passes without an error.
#
# ## Counterexample 3: a `torch.where` guard
#
# `torch.where(p > 0, p.log(), 0)` has a finite value everywhere, `p = 0` included.
#
# **Predict**: at `p = (0, 0.5)`, is the gradient of `torch.where(p > 0, p.log(), 0).sum()` at `p = 0`
# finite, inf or NaN?

# %% tags=["demo"]
prediction = None  # your guess: "finite", "inf" or "nan"

# %% tags=["demo"]
p = torch.tensor([0.0, 0.5], requires_grad=True)
value = torch.where(p > 0, p.log(), torch.zeros_like(p))
value.sum().backward()
reveal(f"gradient of where(p > 0, log p, 0) at p = 0 (the value is {value.tolist()})",
       prediction, f"{p.grad[0].item()} (and {p.grad[1].item()} at p = 0.5)")

# %% [markdown]
# Backward still runs through `p.log()` at `p = 0`, where the derivative is `1/0 = inf`, and multiplies
# it by the 0 that `where` sends to the unselected branch: `0 x inf = NaN`. The fix is to make the
# *input* safe before the op, so that no branch ever computes `log(0)`: a second `where` inside
# (`p.log()` is evaluated on 1 wherever the result will be discarded).
#
# ## Exercise 2: a safe log
#
# Write `safe_log(p)` for a float tensor `p >= 0` of any shape: `log(p)` where `p > 0` and `0` where
# `p == 0` (same shape and dtype), with a finite gradient everywhere (`1/p` where `p > 0`, `0` where
# `p == 0`). Values and gradients are compared with `torch.allclose` at its default tolerance.

# %% nbgrader={"grade": false, "grade_id": "safe_log", "locked": false, "schema_version": 3, "solution": true}
def safe_log(p):
    ### BEGIN SOLUTION
    positive = p > 0
    return torch.where(positive, torch.where(positive, p, torch.ones_like(p)).log(), torch.zeros_like(p))
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_safe_log", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import builtins as _builtins
import math

import torch

from course.exercises.grading import graded_calls as _graded_calls

def _probe(case):  # in the graded call's process: your safe_log of p, then the gradient of the leaf
    p, leaf, weight = case
    out = safe_log(p)
    sent = {"is_tensor": isinstance(out, torch.Tensor), "type": type(out).__name__,
            "shape_repr": str(getattr(out, "shape", None)), "dtype_repr": str(getattr(out, "dtype", type(out)))}
    if sent["is_tensor"]:
        sent.update(value=out.detach().tolist(), shape=list(out.shape), dtype=str(out.dtype),
                    requires_grad=out.requires_grad)
    try:
        (out.sum() if weight is None else (out * weight).sum()).backward()
    except Exception as err:  # raised again below, where the test calls backward()
        sent["backward_error"] = [type(err).__name__, str(err)]
    sent["grad"] = None if leaf.grad is None else leaf.grad.tolist()
    return sent

def _rebuilt(sent):  # the tensor your function returned, rebuilt from what came back
    if not sent["is_tensor"]:
        raise TypeError(f"safe_log returned a {sent['type']}, not a tensor")
    return torch.tensor(sent["value"], dtype=getattr(torch, sent["dtype"].removeprefix("torch.")))

def _backward(sent):  # what the backward() of your result raised in the graded call, raised here
    if "backward_error" in sent:
        name, message = sent["backward_error"]
        kind = getattr(_builtins, name, None)
        if isinstance(kind, type) and issubclass(kind, Exception):
            raise kind(message)
        raise RuntimeError(f"{name}: {message}")

def _grad(sent, leaf):  # the gradient of the leaf after your result's backward(), or None
    return None if sent["grad"] is None else torch.tensor(sent["grad"], dtype=leaf.dtype)

_p = torch.tensor([0.0, 0.5, 1.0], requires_grad=True)
# any shape and dtype, and the gradient's values: 1/p where p > 0, 0 where p == 0
_p2 = torch.tensor([[0.0, 0.25], [2.0, 0.0]], dtype=torch.float64, requires_grad=True)
_sents = _graded_calls(_probe, [(_p, _p, None), (_p2, _p2, None)])
assert _sents[0]["is_tensor"] and torch.Size(_sents[0]["shape"]) == _p.shape, "safe_log must return a tensor of the input's shape"
assert _sents[0]["requires_grad"], "safe_log must be differentiable in p: compute it from p with torch operations"
_backward(_sents[0])
_out = _rebuilt(_sents[0])
assert torch.allclose(_out.detach(), torch.tensor([0.0, math.log(0.5), 0.0])), \
    f"safe_log([0, 0.5, 1]) must be [0, log 0.5, 0], got {_out.tolist()}"
assert torch.isfinite(_grad(_sents[0], _p)).all(), \
    f"the gradient must be finite, got {_grad(_sents[0], _p).tolist()}: is log still evaluated at 0 in a branch?"
_p = _p2
assert _sents[1]["is_tensor"] and torch.Size(_sents[1]["shape"]) == _p.shape and _sents[1]["dtype"] == str(_p.dtype), \
    f"on a 2x2 float64 input safe_log must return a 2x2 float64 tensor, got {_sents[1]['shape_repr']} {_sents[1]['dtype_repr']}"
_backward(_sents[1])
_out = _rebuilt(_sents[1])
assert torch.allclose(_out.detach(), torch.tensor([[0.0, math.log(0.25)], [math.log(2.0), 0.0]], dtype=torch.float64)), \
    f"safe_log([[0, 0.25], [2, 0]]) must be [[0, log 0.25], [log 2, 0]], got {_out.tolist()}"
assert torch.allclose(_grad(_sents[1], _p), torch.tensor([[0.0, 4.0], [0.5, 0.0]], dtype=torch.float64)), \
    f"the gradient must be 1/p where p > 0 and 0 where p == 0, got {_grad(_sents[1], _p).tolist()}"
### BEGIN HIDDEN TESTS
import random as _random

from course.exercises.grading import hidden_seed as _hidden_seed
_rng = _random.Random(_hidden_seed("h-02-slgh"))
_g = torch.Generator().manual_seed(_rng.getrandbits(62))
_R, _C = _rng.randint(3, 6), _rng.randint(5, 12)
_logits = torch.randn(_R, _C, generator=_g)
_masked = torch.rand(_R, _C, generator=_g) < 0.3  # masked logits: probability exactly 0
_col = _rng.randrange(_C)
_masked[:, _col] = True  # a masked column, and in every row a kept entry
_masked[torch.arange(_R), torch.tensor([(_col + 1 + _rng.randrange(_C - 1)) % _C for _ in range(_R)])] = False
_logits[_masked] = float("-inf")
_logits = _logits.requires_grad_(True)
_q = _logits.softmax(-1)
_weight = torch.randn(_R, _C, generator=_g)  # the gradient is taken of (safe_log(q) * _weight).sum()
# a random input of random shape and dtype, zeros at random places: the values and the gradient
_dtype = _rng.choice((torch.float32, torch.float64))
_shape = tuple(_rng.randint(1, 5) for _ in range(_rng.randint(1, 3)))
_p = torch.rand(_shape, generator=_g, dtype=_dtype) * 3 + 0.05
_zero = torch.rand(_shape, generator=_g) < 0.4
_zero.view(-1)[_rng.randrange(_p.numel())] = True  # at least one exact 0
_p = _p.masked_fill(_zero, 0.0).requires_grad_(True)
# and a hand-written one
_p4 = torch.tensor([0.0, 0.25, 0.0, 2.0], requires_grad=True)
_sents = _graded_calls(_probe, [(_q, _logits, _weight), (_p, _p, None), (_p4, _p4, None)])
assert _sents[0]["is_tensor"] and torch.Size(_sents[0]["shape"]) == _q.shape, "safe_log must return a tensor of the input's shape (2-d input from a softmax)"
_out = _rebuilt(_sents[0])
assert torch.equal(_out[_masked].detach(), torch.zeros(int(_masked.sum()))), "log of an exact 0 must be 0 (2-d input from a softmax)"
assert torch.allclose(_out[~_masked].detach(), _q[~_masked].detach().log()), "wrong value where p > 0 (2-d input from a softmax)"
_backward(_sents[0])
assert torch.isfinite(_grad(_sents[0], _logits)).all(), "a zero probability poisons the gradient of the logits"
assert _sents[1]["is_tensor"] and torch.Size(_sents[1]["shape"]) == _p.shape and _sents[1]["dtype"] == str(_p.dtype), \
    f"on a random {_dtype} input of {len(_shape)} dimensions safe_log must return a tensor of its shape and dtype"
_backward(_sents[1])
_out = _rebuilt(_sents[1])
_pd = _p.detach()
assert torch.allclose(_out.detach(), torch.where(_zero, torch.zeros_like(_pd), _pd.masked_fill(_zero, 1.0).log())), \
    f"wrong values on a random {_dtype} input with zeros: log p where p > 0, 0 where p == 0"
assert _grad(_sents[1], _p) is not None and torch.allclose(_grad(_sents[1], _p), torch.where(_zero, torch.zeros_like(_pd), 1 / _pd.masked_fill(_zero, 1.0))), \
    f"wrong gradient on a random {_dtype} input with zeros: 1/p where p > 0, 0 where p == 0"
_p = _p4
_backward(_sents[2])
assert torch.allclose(_grad(_sents[2], _p), torch.tensor([0.0, 4.0, 0.0, 0.5])), \
    f"the gradient must be 1/p where p > 0 and 0 where p == 0, got {_grad(_sents[2], _p).tolist()}"
### END HIDDEN TESTS

# %% [markdown]
# ## Counterexample 4: fp16 overflows, bf16 keeps the range and loses precision
#
# Both are 16 bits. fp16 spends 5 on the exponent: its largest finite value is 65504, and a value
# far enough beyond it rounds to inf. bf16 keeps float32's 8 exponent bits (its largest value is
# printed below) and keeps only 8 significant bits, so it rounds coarsely.
#
# **Predict**: which of 65504, 65519, 65520 and 70000 stay finite when cast to fp16?

# %% tags=["demo"]
prediction = None  # your guess: the ones that stay finite, e.g. [65504]

# %% tags=["demo"]
edge = torch.tensor([65504.0, 65519.0, 65520.0, 70000.0])
cast = edge.half().float()
print(f"{edge.tolist()} cast to fp16: {cast.tolist()}")
reveal("the values that stay finite in fp16", prediction, [int(v) for v, c in zip(edge.tolist(), cast) if torch.isfinite(c)])
print(f"largest finite: fp16 {torch.finfo(torch.float16).max:g}, bf16 {torch.finfo(torch.bfloat16).max:.3g}, "
      f"float32 {torch.finfo(torch.float32).max:.3g}")
big = torch.tensor([60000.0, 70000.0, 1e6])
print(f"{big.tolist()} in bf16: {big.bfloat16().float().tolist()}")
fine = torch.tensor([1.0 + 2**-10, 257.0])
print(f"1 + 2^-10 and 257 in fp16: {fine.half().float().tolist()}, in bf16: {fine.bfloat16().float().tolist()}")

# %% [markdown]
# A value a little past fp16's largest still rounds down to it; at or past the halfway point to the
# next (unrepresentable) step, 65520, it rounds to inf: the reveal above shows which side each value
# fell on. bf16 keeps 60000, 70000 and 1e6 finite, rounded coarsely (in steps of 256 near 60000). A product that fits float32 easily overflows in fp16: the catalogue's `loss-scaled-in-fp16` multiplies an fp16 loss by a static
# loss scale of 2^16.

# %% tags=["demo"]
print(f"loss 2.9 x 2^16 in fp16: {(torch.tensor(2.9).half() * 65536.0).item()}, "
      f"in bf16: {(torch.tensor(2.9).bfloat16() * 65536.0).item()}")
print(f"locator: {locate(inject(pipe, 'loss-scaled-in-fp16'))}")

# %% [markdown]
# ## Counterexample 5: clipping a non-finite gradient
#
# `clip_grad_norm_` returns the total norm before clipping and only scales down. With
# `error_if_nonfinite=True` it raises when that norm is not finite. With the default (`False`) it
# scales every gradient by `max_norm / total_norm`.
#
# **Predict**: three gradients `[1, 2]`, `[3, bad]`, `[0.5, 0.5]`, clipped to norm 1 with the default
# settings. How many of the six entries are NaN afterwards when `bad` is NaN, and when it is inf?

# %% tags=["demo"]
prediction = None  # your guess: (NaN entries with a NaN, NaN entries with an inf), e.g. (1, 1)

# %% tags=["demo"]
def three_grads(bad):
    ps = [torch.nn.Parameter(torch.zeros(2)) for _ in range(3)]
    for p, g in zip(ps, ([1.0, 2.0], [3.0, bad], [0.5, 0.5])):
        p.grad = torch.tensor(g)
    return ps

try:
    torch.nn.utils.clip_grad_norm_(three_grads(float("nan")), 1.0, error_if_nonfinite=True)
except RuntimeError as err:
    print(f"error_if_nonfinite=True: {str(err).splitlines()[0][:90]}...")
after = {}
for bad in (float("nan"), float("inf")):
    ps = three_grads(bad)
    norm = torch.nn.utils.clip_grad_norm_(ps, 1.0)
    after[str(bad)] = [p.grad.tolist() for p in ps]
    print(f"one grad {bad}: total norm before clipping {norm.item()}")
    print(f"  gradients after clipping: {after[str(bad)]}")
reveal("NaN entries after clip_grad_norm_(max_norm=1): (with a NaN, with an inf)", prediction,
       tuple(sum(math.isnan(v) for g in after[k] for v in g) for k in ("nan", "inf")))

# %% [markdown]
# A NaN anywhere makes every gradient NaN; an inf makes the factor `1/inf = 0`, so the finite gradients
# become 0 and the inf one `inf x 0 = NaN`.
#
# ## Counterexample 6: when the learning rate *is* the cause
#
# On `f(x) = a x^2 / 2` gradient descent multiplies `x` by `1 - eta a` at each step, so it converges iff
# `|1 - eta a| < 1`, i.e. `0 < eta a < 2`; beyond 2 it diverges geometrically (a constant factor per
# step: this is where geometric growth belongs). A divergence from a too-large step needs *updates*:
# it cannot make the loss of the initial weights non-finite.
#
# **Predict**: starting from `x_0 = 1`, what is `|x_30|` at `eta a = 2` exactly?

# %% tags=["demo"]
prediction = None  # your guess: |x_30| at eta a = 2

# %% tags=["demo"]
from course.toolkit.nonfinite import quadratic_descent

reveal("|x_30| of gradient descent at eta a = 2, from x_0 = 1", prediction, quadratic_descent(2.0, 30)[-1])

# %% tags=["demo"]
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
for edge_ in (0.0, 2.0):
    bx.axvline(edge_, color="red", linestyle="--", linewidth=1)
bx.set_xlabel("eta a")
bx.set_ylabel("factor per step")
bx.set_title("Stable iff 0 < eta a < 2 (red lines)")
bx.legend(fontsize=7)
plt.show()

# %% tags=["demo"]
for r in rates:
    print(f"eta a = {r}: |x_30| = {quadratic_descent(r, 30)[-1]:.3g}")

# %% [markdown]
# At `eta a = 2` the factor is `-1`: `x` flips sign every step and never shrinks. The straight lines of
# the diverging rates on the log plot are geometric growth; compare the bending curve of the
# lr-sign-typo run under AdamW at the top of the notebook.
#
# ## The decision tree
#
# Pick *when* the run first went non-finite and *which stage* the locator reported; the box below
# shows the hypotheses that fit and the test that separates them. *When* has three answers, read off
# the first bad event's step and stage (`course.toolkit.nonfinite.when_of`): at step 0 the forward pass, the
# loss and the gradients come from the initial weights (**before any update**); the optimizer state
# and parameters of step 0 are recorded after its update (**in the first update**); anything at a
# later step comes **after some updates**. A combination that cannot happen (parameters "before any
# update") says so. The tree is plain data (`course.toolkit.nonfinite.TREE`, read through
# `advise(when, stage)`), so you can read it, test it, and extend it for your own runs.

# %% tags=["demo"]
# NBVAL_IGNORE_OUTPUT
from course.toolkit.nonfinite import tree_widget

tree_widget()

# %% [markdown]
# ## Closing the loop on the two broken runs
#
# **The NaN from the first step.** The locator said `softmax` at step 0, before any update. The tree:

# %% tags=["demo"]
from course.toolkit.nonfinite import advice_text, when_of

found = locate(runs["causal-mask-strict"].pipe)
print(f"locator: {found}\n")
print(advice_text(when_of(found.step, found.stage), found.stage))

# %% [markdown]
# The separating test: count the keys each query row of the attention mask allows. The model's mask
# is built by `course.reference.model.attention_mask(kind, T, S)` from the pipeline's `model.attention` setting:

# %% tags=["demo"]
from course.reference.model import attention_mask

broken_pipe = runs["causal-mask-strict"].pipe
T = 6
for kind in (broken_pipe.model.attention, pipe.model.attention):
    print(f"attention={kind!r}: keys allowed per query row (T={T}): {attention_mask(kind, T, T).sum(-1).tolist()}")

# %% [markdown]
# Row 0 allows no key at all: softmax over a row of `-inf` is `0/0`. The fix at the right depth is the
# mask itself (`<=`, a query sees its own position), not a `nan_to_num` on the loss or a lower learning
# rate. Re-run with the same detector that located it, the locator, over the same `LOCATE_STEPS` steps:

# %% tags=["demo"]
import dataclasses

fixed_mask = broken_pipe.replace(model=dataclasses.replace(broken_pipe.model, attention="causal"))
print(f"locator, broken mask: {locate(broken_pipe, steps=LOCATE_STEPS)}")
print(f"locator, fixed mask:  {locate(fixed_mask, steps=LOCATE_STEPS)}")

# %% [markdown]
# **The run that exploded.** The locator put it at a gradient after some updates; the tree's test is a
# lower learning rate. A fix at the wrong depth first: clip the gradients harder (the pipeline already
# clips at norm 1). Adam divides each gradient by its own running scale, so scaling all gradients down
# does not shrink the update, which still grows with the LR used. The locator on the clipped run
# (the step where it goes bad moves with the clip and with the machine; whether it goes bad is the
# point):

# %% tags=["demo"]
typo_pipe = runs["lr-sign-typo"].pipe
found = located["lr-sign-typo"]  # the locator's finding above: this pipeline, LOCATE_STEPS steps, seed 0
print(f"locator: {found} ({when_of(found.step, found.stage)})")
clipped = locate(typo_pipe.replace(clip=1e-3), steps=LOCATE_STEPS)
print(f"locator, clip 1e-3 instead of {typo_pipe.clip}: {clipped}"
      f"{'' if clipped is None else ' (' + when_of(clipped.step, clipped.stage) + ')'}")

# %% [markdown]
# The fix at the right depth drops the mistyped rate and puts back the recipe's (`pipe.lr`). Re-run
# with the same locator over the same `LOCATE_STEPS` steps:

# %% tags=["demo"]
fixed_lr = typo_pipe.replace(lr=pipe.lr)
print(f"locator, LR {fixed_lr.lr:g}: {locate(fixed_lr, steps=LOCATE_STEPS)}")

# %% [markdown]
# ## Exercise 3: name where and when
#
# Write `first_nonfinite_stage(p, steps=20, seed=0)`. Run `trace(p, steps, seed)`; it returns the events
# (`e.step`, `e.stage`, `e.name`, `e.tensor`, `e.limit`) of the first step where something went bad, in
# the order they were computed, or, when nothing went bad in `steps` steps, the events of the last
# step. Return the tuple `(stage, step)` (a `str` and an `int`) of the
# **first** bad event, or `None` if every tensor is fine. A floating-point tensor is bad if it holds a
# NaN or an inf (huge finite values are fine); an integer tensor of ids is bad if an id lies outside
# `[0, e.limit)` (when `e.limit` is not `None`); boolean and empty tensors are never bad.
#
# The hidden tests use broken pipelines whose first bad stage you have not seen in this notebook. In
# every test cell the package's own `locate`, `first_nonfinite` and `is_bad` are switched off
# (calling them raises `SwitchedOff`): write the logic yourself; `trace` stays available.

# %% nbgrader={"grade": false, "grade_id": "first_stage", "locked": false, "schema_version": 3, "solution": true}
def first_nonfinite_stage(p, steps=20, seed=0):
    ### BEGIN SOLUTION
    for e in trace(p, steps, seed):
        t = e.tensor
        if t.is_floating_point():
            bad = not bool(torch.isfinite(t).all())
        else:
            bad = e.limit is not None and t.numel() > 0 and t.dtype != torch.bool \
                and bool((t < 0).any() or (t >= e.limit).any())
        if bad:
            return (e.stage, e.step)
    return None
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_first_stage_visible", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import course.toolkit.nonfinite as _nf
import course.reference.diagnose as _diag
from course import Pipeline as _Pipeline
from course.bugs import inject as _inject
from course.exercises.grading import assert_names

_pipe = _Pipeline()  # the notebook's `pipe`, built here
assert_names(first_nonfinite_stage, {
    "reference": (_pipe, None),
    "embedding-scaled-by-inf": (_inject(_pipe, "embedding-scaled-by-inf"), ("embeddings", 0)),
    "causal-mask-strict": (_inject(_pipe, "causal-mask-strict"), ("softmax", 0)),
    "log-guarded-by-where": (_inject(_pipe, "log-guarded-by-where"), ("grads", 0)),
    "adam-eps-zero": (_inject(_pipe, "adam-eps-zero"), ("params", 0)),
    # ids outside [0, e.limit): the padding id -100 given to the model as input
    "inputs-padded-with-ignore-index": (_inject(_pipe.replace(min_len=4), "inputs-padded-with-ignore-index"), ("input", 0)),
}, what="first non-finite stage", off=(_diag.locate, _nf.first_nonfinite, _nf.is_bad))
# a run that goes bad after some updates, traced over 40 steps: where the package's locator puts it
_typo = _inject(_pipe, "lr-sign-typo")
_typo_found = _diag.locate(_typo, steps=40)
assert _typo_found is not None and _typo_found.step > 0, "grader fixture changed"
assert_names(lambda c: first_nonfinite_stage(c, 40, 0), {
    "reference, 40 steps": (_pipe, None),
    "lr-sign-typo, 40 steps": (_typo, (_typo_found.stage, _typo_found.step)),
}, what="first non-finite stage", off=(_diag.locate, _nf.first_nonfinite, _nf.is_bad))
### BEGIN HIDDEN TESTS
import random as _random

from course.exercises.grading import hidden_seed as _hidden_seed
_rng = _random.Random(_hidden_seed("h-02-fsvh"))
# random seeds: the reference, two of this cell's bugs, and padded inputs one window a step, a third of
# them padded: the first bad input comes at a step the seed decides (or not within the steps: None)
_runs = {"reference, a random seed": (_pipe, 1, _rng.randrange(2**31))}
for _bug in _rng.sample(["embedding-scaled-by-inf", "causal-mask-strict", "log-guarded-by-where", "adam-eps-zero"], 2):
    _runs[f"{_bug}, a random seed"] = (_inject(_pipe, _bug), 1, _rng.randrange(2**31))
_runs["inputs-padded-with-ignore-index, one window a step, a random seed"] = (
    _inject(_pipe.replace(min_len=31, batch_size=1, n_train=64), "inputs-padded-with-ignore-index"), 6, _rng.randrange(2**31))
_want = {}
for _k, (_p, _n, _s) in _runs.items():
    _f = _diag.locate(_p, steps=_n, seed=_s)  # the package's locator, before yours runs
    _want[_k] = ((_p.replace(bugs=()), _n, _s), None if _f is None else (_f.stage, _f.step))
assert_names(lambda c: first_nonfinite_stage(*c), _want, what="first non-finite stage",
             off=(_diag.locate, _nf.first_nonfinite, _nf.is_bad))
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: forward stages you have not seen, on a smaller language.

# %% nbgrader={"grade": true, "grade_id": "test_first_stage_forward", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
from course import Pipeline as _Pipeline
from course.bugs import inject as _inject
import course.toolkit.nonfinite as _nf
import course.reference.diagnose as _diag
from course.exercises.grading import assert_names as _assert_names, hidden_seed as _hidden_seed
_small = _Pipeline(n_symbols=8, seq_len=12, n_train=512, data_seed=7)
_cases = {"reference": _small,
          "attention-scale-inf": _inject(_small, "attention-scale-inf"),
          "loss-scaled-in-fp16": _inject(_small, "loss-scaled-in-fp16"),
          "inputs-padded-with-ignore-index": _inject(_small.replace(min_len=4), "inputs-padded-with-ignore-index")}
_base = _hidden_seed("h-02-fsfw")
for _try in range(4):  # a random run seed; the next one if this one does not show each stage at step 0
    _seed = (_base + _try) % 2**31
    _expected = {}
    for _k, _p in _cases.items():
        _f = _diag.locate(_p, steps=5, seed=_seed)
        _expected[_k] = (_p.replace(bugs=()), _seed, None if _f is None else (_f.stage, _f.step))
    if [e[2] for e in _expected.values()] == [None, ("scores", 0), ("loss", 0), ("input", 0)]:
        break  # a suitable draw
assert [e[2] for e in _expected.values()] == [None, ("scores", 0), ("loss", 0), ("input", 0)], "grader fixture changed"
# one window a step, a third of them with padded inputs: the first bad input comes at a step the seed decides (or not in 5 steps)
_one = _inject(_small.replace(min_len=11, batch_size=1, n_train=64), "inputs-padded-with-ignore-index")
_f = _diag.locate(_one, steps=5, seed=_seed)
_expected["inputs-padded-with-ignore-index, one window a step"] = (_one.replace(bugs=()), _seed,
                                                                   None if _f is None else (_f.stage, _f.step))
_assert_names(lambda c: first_nonfinite_stage(c[0], 5, c[1]),
              {k: ((p, s), want) for k, (p, s, want) in _expected.items()}, what="first non-finite stage",
              off=(_diag.locate, _nf.first_nonfinite, _nf.is_bad))
### END HIDDEN TESTS

# %% [markdown]
# Hidden tests: runs that go bad in or after the first update, on a smaller pipeline.

# %% nbgrader={"grade": true, "grade_id": "test_first_stage_updates", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
from course import Pipeline as _Pipeline
from course.bugs import inject as _inject
import course.toolkit.nonfinite as _nf
import course.reference.diagnose as _diag
from course.exercises.grading import assert_names as _assert_names, hidden_seed as _hidden_seed
from course.reference.model import ModelConfig as _ModelConfig
_smaller = _Pipeline(seq_len=16, model=_ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=2, d_mlp=96),
                    batch_size=32, n_train=1024)
_cases = {"reference": _smaller.replace(lr=3e-2),
          "adam-eps-zero": _inject(_smaller, "adam-eps-zero"),
          "lr-sign-typo": _inject(_smaller, "lr-sign-typo")}


def _fixture_holds(expected):  # the reference stays finite, adam-eps-zero breaks in the first update, the typo later
    return (expected["reference"][1] is None and expected["adam-eps-zero"][1] == ("params", 0)
            and expected["lr-sign-typo"][1] is not None and expected["lr-sign-typo"][1][1] > 0)


_base = _hidden_seed("h-02-fsup")
for _try in range(4):  # a random run seed; the next one if the fixture does not hold on it
    _seed = (_base + _try) % 2**31
    _expected = {}
    for _k, _p in _cases.items():
        _f = _diag.locate(_p, steps=20, seed=_seed)
        _expected[_k] = (_p.replace(bugs=()), None if _f is None else (_f.stage, _f.step))
    if _fixture_holds(_expected):
        break  # a suitable draw
assert _fixture_holds(_expected), "grader fixture changed"
_assert_names(lambda c: first_nonfinite_stage(c[0], 20, c[1]),
              {k: ((p, _seed), want) for k, (p, want) in _expected.items()}, what="first non-finite stage",
              off=(_diag.locate, _nf.first_nonfinite, _nf.is_bad))
### END HIDDEN TESTS

# %% [markdown]
# ## The mystery pipelines
#
# Below are six pipelines drawn by `course.exercises.mystery.draw` from this notebook's bugs
# (`embedding-scaled-by-inf`, `causal-mask-strict`, `loss-scaled-in-fp16`, `log-guarded-by-where`,
# `adam-eps-zero`, `lr-sign-typo`) and `"healthy"`, each on a small pipeline with its own seeds,
# learning rate and warm-up. They are **opaque**: every part is a `Part` whose repr is `<part>`, every
# other setting is the base's, and the configuration is drawn independently of the bug, so
# nothing you can read off a pipeline tells which one it is. Only running it does. Here is what the
# course's loop shows for each over the first `HORIZON` steps:

# %%
from course.exercises import mystery
from course.toolkit.batch import next_token_batch
from course.reference.model import ModelConfig
from course.reference.pipeline import adamw, apply_update, build_optimizer, prepare_model, set_eval_mode
from course.toolkit.batch import token_cross_entropy
from course.reference.train import start, train_steps, batch_at

from course.exercises.sets import SETS

MYSTERIES = SETS["02_nan_decision_tree"]  # the candidates, the base and the seeds; the tests draw the same
CANDIDATES, MYSTERY_BASE = MYSTERIES.candidates, MYSTERIES.base
HORIZON = 25  # steps
# the reference part of each replaceable field (a mystery pipeline wraps even its healthy parts)
REFERENCE_PARTS = {"collate": next_token_batch, "loss_fn": token_cross_entropy, "optimizer_factory": adamw,
                   "make_optimizer": build_optimizer, "prepare": prepare_model, "update": apply_update,
                   "val_source": None, "eval_loss_fn": None, "eval_mode": set_eval_mode, "batches": None}
mysteries = MYSTERIES.draws()
for label, m in mysteries.items():
    run = start(m, seed=0)
    train_steps(run, HORIZON, eval_every=0)
    losses = run.history["loss"]
    print(f"{label:>4}: {run.stopped or f'finite for {HORIZON} steps'}; loss {[f'{x:.3g}' for x in losses[:6]]}"
          f"{' ... ' + format(losses[-1], '.3g') if len(losses) > 6 else ''}")
parts_seen = {tuple(f for f in mystery.signature(m) if f[0] in mystery.PART_FIELDS) for m in mysteries.values()}
print(f"parts as seen from outside (course.exercises.mystery.signature), the same for all six: {len(parts_seen) == 1}: "
      f"{next(iter(parts_seen))[:2]} ...")

# %% [markdown]
# ### Mystery (a): a test that detects the symptom
#
# Write `detect(pipe) -> bool`: `True` if training `pipe` for `HORIZON` steps from seed 0 (the course's
# loop: `course.reference.train.start(pipe, 0)`, batches `batch_at(pipe, 0, step)`) produces any non-finite
# tensor (the ids given to the model, a module output, the loss, a gradient, the optimizer state or
# a parameter), else `False`. Return a Python `bool` (a numpy or 0-d torch bool is accepted too);
# a pipeline that crashes under your test is broken (catch the exception around its own calls and
# return `True`), while an exception that leaves `detect` is no answer and fails the cell. Reuse your `first_nonfinite_stage` on `trace`, or write
# your own loop with your own checks.
#
# Graded like a test suite, on the visible draws and then on draws with configurations you have not
# seen (a hidden salt): it must be `False` on healthy draws and on a pipeline broken in a way that
# stays finite (a different symptom), and `True` on every bug of this notebook and on a non-finite bug
# from another notebook. While it runs, `locate`, `first_nonfinite`, `is_bad`, `advise`,
# `advice_text`, `course.reference.train.train` and `course.reference.train.train_steps` are switched off.

# %% nbgrader={"grade": false, "grade_id": "mystery_detect", "locked": false, "schema_version": 3, "solution": true}
def detect(pipe):
    ### BEGIN SOLUTION
    try:
        return first_nonfinite_stage(pipe, HORIZON, 0) is not None
    except Exception:  # a pipeline that crashes under the test is broken
        return True
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_detect_visible", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import course.toolkit.nonfinite as _nf
import course.reference.diagnose as _diag
import course.reference.train as _train
from course.exercises import mystery as _mystery
from course.exercises.grading import assert_detector
from course.exercises.sets import SETS as _SETS

_SET = _SETS["02_nan_decision_tree"]  # the notebook's mysteries, drawn again here
_OFF = (_diag.locate, _nf.first_nonfinite, _nf.is_bad, _nf.advise, _nf.advice_text, _train.train, _train.train_steps)
_seen = {k: (m, _mystery.reveal(m)) for k, m in _SET.draws().items()}


def _crashing_update(optimizer):  # a part that raises: a pipeline that crashes under your test is broken
    raise RuntimeError("this pipeline's update crashes")


_quiet = {k: m for k, (m, a) in _seen.items() if a == "healthy"}
_quiet["finite but broken (no optimizer step)"] = _mystery.make("missing-step", 70, _SET.base)
_loud = {k: m for k, (m, a) in _seen.items() if a != "healthy"}
_loud["a pipeline that crashes"] = _SET.base.replace(update=_crashing_update)
assert_detector(detect, _quiet, _loud, what="detect", off=_OFF)
### BEGIN HIDDEN TESTS
assert_detector(detect, {"a fresh healthy draw": _mystery.hidden("healthy", 61, _SET.base, "h-02-v3d")},
                {"a fresh broken draw": _mystery.hidden(_SET.candidates[1], 62, _SET.base, "h-02-v3d")}, what="detect", off=_OFF)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_mystery_detect_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
import course.toolkit.nonfinite as _nf
import course.reference.diagnose as _diag
import course.reference.train as _train
from course.exercises import mystery as _mystery
from course.exercises.grading import assert_detector as _assert_detector
from course.exercises.sets import SETS as _SETS
_OFF = (_diag.locate, _nf.first_nonfinite, _nf.is_bad, _nf.advise, _nf.advice_text, _train.train, _train.train_steps)
_SET = _SETS["02_nan_decision_tree"]
_salt = "h-02-d7e1"
_quiet = {"healthy draw A": _mystery.hidden("healthy", 1, _SET.base, _salt),
          "healthy draw B": _mystery.hidden("healthy", 2, _SET.base, _salt),
          "finite but broken (no optimizer step)": _mystery.hidden("missing-step", 3, _SET.base, _salt)}
_loud = {f"a draw of a bug ({i})": _mystery.hidden(b, 10 + i, _SET.base, _salt)
         for i, b in enumerate(_SET.candidates[1:] + ("all-targets-ignored",))}
_assert_detector(detect, _quiet, _loud, what="detect", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ### Mystery (b): name the cause
#
# Write `name_cause(pipe) -> str`: exactly one of `CANDIDATES` (`"healthy"` or a bug's name), decided
# from the first non-finite tensor of `HORIZON` steps at seed 0: *where* (the stage) and *when* (before
# any update, in the first update, after some updates). That is the decision tree, applied by you:
# its `Catalogue bugs that end here` lines, and the locator outputs earlier in this notebook, say where
# each of these bugs first shows. The scaffold gets the stage and step with your Exercise 3.
#
# Graded on the visible draws and on fresh draws of every candidate with configurations you have not
# seen. The same package functions as in (a) are switched off while it runs.

# %% nbgrader={"grade": false, "grade_id": "mystery_cause", "locked": false, "schema_version": 3, "solution": true}
def name_cause(pipe):
    found = first_nonfinite_stage(pipe, HORIZON, 0)  # your Exercise 3: (stage, step) or None
    if found is None:
        return "healthy"
    stage, step = found
    ### BEGIN SOLUTION
    if step > 0:
        return "lr-sign-typo"  # after some updates
    if stage in ("optimizer", "params"):
        return "adam-eps-zero"  # in the first update
    return {"embeddings": "embedding-scaled-by-inf", "softmax": "causal-mask-strict",
            "loss": "loss-scaled-in-fp16", "grads": "log-guarded-by-where"}[stage]
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_cause_visible", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import course.toolkit.nonfinite as _nf
import course.reference.diagnose as _diag
import course.reference.train as _train
from course.exercises import mystery as _mystery
from course.exercises.grading import assert_names
from course.exercises.sets import SETS as _SETS

_SET = _SETS["02_nan_decision_tree"]  # the notebook's mysteries, drawn again here
_OFF = (_diag.locate, _nf.first_nonfinite, _nf.is_bad, _nf.advise, _nf.advice_text, _train.train, _train.train_steps)
_seen = {k: (m, _mystery.reveal(m)) for k, m in _SET.draws().items()}
# two more visible draws, of the two bugs the six mysteries above do not hold
_seen.update({f"extra draw {i}": (_mystery.make(b, 71 + i, _SET.base), b)
              for i, b in enumerate(("embedding-scaled-by-inf", "log-guarded-by-where"))})
assert_names(name_cause, _seen, what="name_cause", off=_OFF)
### BEGIN HIDDEN TESTS
assert_names(name_cause, {f"fresh draw {i}": (_mystery.hidden(b, 63 + i, _SET.base, "h-02-v3c"), b)
                          for i, b in enumerate(("healthy", _SET.candidates[-1]))}, what="name_cause", off=_OFF)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_mystery_cause_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
import course.toolkit.nonfinite as _nf
import course.reference.diagnose as _diag
import course.reference.train as _train
from course.exercises import mystery as _mystery
from course.exercises.grading import assert_names as _assert_names
from course.exercises.sets import SETS as _SETS
_OFF = (_diag.locate, _nf.first_nonfinite, _nf.is_bad, _nf.advise, _nf.advice_text, _train.train, _train.train_steps)
_SET = _SETS["02_nan_decision_tree"]
_salt = "h-02-c4a9"
_fresh = {f"a fresh draw ({i})": (_mystery.hidden(b, 20 + i, _SET.base, _salt), b) for i, b in enumerate(_SET.candidates)}
_assert_names(name_cause, _fresh, what="name_cause", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ### Mystery (c): the fix
#
# Write `fix(pipe) -> Pipeline` for a broken draw: return `pipe.replace(<field>=<reference part>)`,
# changing **only** the field the bug lives in, to its reference part from `REFERENCE_PARTS` (for
# example `pipe.replace(update=REFERENCE_PARTS["update"])`); every other field must stay the very same
# object or value, so returning a fresh `Pipeline()`, lowering a learning rate or replacing every
# suspicious part is wrong. Which field? Use `name_cause`, or the part swap of notebook 00: replace one
# part at a time with its reference and run your `detect` again, after checking that `detect` is
# `False` on the draw's healthy twin (`course.reference.pipeline.healthy_twin`).
#
# A bug that this notebook fixed as a *setting* above lives in a *part* in a mystery, as notebook 00's
# mystery section explains: the attention mask (`model.attention`, the fix of `causal-mask-strict`)
# is set by the `prepare` part, and the learning rate (`lr-sign-typo`) is given to the optimizer by the
# `optimizer_factory` part. The mystery's settings read healthy values, so the fix replaces the part,
# never the setting.
#
# Graded by behaviour on fresh draws of each bug (never on a healthy one), with
# `course.exercises.mystery.check_fix`: the fixed pipeline is trained for `HORIZON` steps on a fresh seed by the
# course's loop, and `fix_symptom` below (the same finite check that stops the loop, plus a falling
# loss) must find nothing. While your `fix` runs, the functions of (a) and `mystery.reveal`, `draw`,
# `make`, `touched` are switched off.

# %%
from course.reference.diagnose import finite_and_falling


def fix_symptom(p, seed=101):
    """The symptom check for a fixed pipeline: None if training it for `HORIZON` steps stays finite
    and the loss falls by more than 0.1, else the problem (`finite_and_falling`, which the tests call)."""
    return finite_and_falling(p, seed, steps=HORIZON)

# %% nbgrader={"grade": false, "grade_id": "mystery_fix", "locked": false, "schema_version": 3, "solution": true}
def fix(pipe):
    ### BEGIN SOLUTION
    field = {"embedding-scaled-by-inf": "prepare", "causal-mask-strict": "prepare",
             "loss-scaled-in-fp16": "loss_fn", "log-guarded-by-where": "loss_fn",
             "adam-eps-zero": "optimizer_factory", "lr-sign-typo": "optimizer_factory"}[name_cause(pipe)]
    return pipe.replace(**{field: REFERENCE_PARTS[field]})
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_mystery_fix_visible", "locked": true, "points": 2, "schema_version": 3, "solution": false}
import course.toolkit.nonfinite as _nf
import course.reference.diagnose as _diag
import course.reference.train as _train
from course.exercises import mystery as _mystery
from course.exercises.sets import SETS as _SETS

_SET = _SETS["02_nan_decision_tree"]
_fixed_ok = _diag.finite_and_falling  # runs after your fix, switched on again
_OFF = (_diag.locate, _nf.first_nonfinite, _nf.is_bad, _nf.advise, _nf.advice_text, _train.train, _train.train_steps)
### BEGIN HIDDEN TESTS
# two bugs of different parts: no one repair made to every pipeline fixes both
_mystery.check_fix(fix, [_mystery.hidden(b, 65 + i, _SET.base, "h-02-v3f") for i, b in enumerate(("lr-sign-typo", "causal-mask-strict"))],
                   _fixed_ok, what="fix", off=_OFF)
### END HIDDEN TESTS
_mystery.check_fix(fix, [_mystery.make(b, 40 + i, _SET.base)
                         for i, b in enumerate(("causal-mask-strict", "lr-sign-typo", "log-guarded-by-where"))],
                   _fixed_ok, what="fix", off=_OFF)

# %% nbgrader={"grade": true, "grade_id": "test_mystery_fix_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# hidden tests run here
### BEGIN HIDDEN TESTS
import functools as _functools
import course.toolkit.nonfinite as _nf
import course.reference.diagnose as _diag
import course.reference.train as _train
from course.exercises import mystery as _mystery
from course.exercises.sets import SETS as _SETS
_OFF = (_diag.locate, _nf.first_nonfinite, _nf.is_bad, _nf.advise, _nf.advice_text, _train.train, _train.train_steps)
_SET = _SETS["02_nan_decision_tree"]
_salt = "h-02-f08b"
_mystery.check_fix(fix, [_mystery.hidden(b, 30 + i, _SET.base, _salt) for i, b in enumerate(_SET.candidates[1:])],
                   _functools.partial(_diag.finite_and_falling, seed=202), what="fix", off=_OFF)
### END HIDDEN TESTS

# %% [markdown]
# ## What these tests can and cannot prove
#
# * The locator proves **where a step first produced** a non-finite tensor among the tensors it sees:
#   module outputs, the loss, gradients, optimizer state, parameters. It does not see operations
#   written inline between modules (route them through a probe module), and the first bad tensor is
#   where to start, not the cause. A weight that an update makes non-finite is caught at once, at stage
#   `optimizer` or `params` of that step (`adam-eps-zero` showed `params`; optimizer state is recorded
#   first, so an update that also breaks a state tensor shows there); weights that earlier updates grew large but kept
#   finite are not, and the first bad tensor is then whatever overflows later (a gradient, for
#   `lr-sign-typo`), steps after the cause.
# * "Non-finite before any update" proves the learning rate is not the cause. "Non-finite after some
#   updates" does not prove it is: rerun the failing step from the last good state at a lower rate.
# * A parameter norm that grows for several steps before the NaN fits a too-large learning rate; under
#   Adam it grows roughly additively, so a constant growth factor is not the thing to look for.
# * A stable loss equal to `F.cross_entropy` on ordinary logits and finite on (1000, -1000) is evidence that the
#   loss is not the source of an overflow on such inputs (evidence, not proof: a batch with every target
#   `IGNORE` still gives 0/0); it says nothing about where the logits came from.
# * Anomaly mode proves which backward op first returned NaN; silence does not prove the gradients are
#   finite (inf passes, as `sqrt(0)` showed).
# * A finite forward pass proves nothing about the backward pass (`torch.where`).
# * Clipping with the default settings hides nothing and repairs nothing: with a NaN gradient every
#   gradient becomes NaN; with an inf, the finite gradients become 0 and the inf one NaN. `error_if_nonfinite=True` turns that into an error you can catch.
# * The quadratic proves when a fixed step size diverges on one curvature; a network has many
#   curvatures that change as it trains, so the bound is a picture, not a number to compute.
# * Your mystery `detect` proves a pipeline goes non-finite within `HORIZON` steps at one seed; a
#   quiet `detect` says nothing about step `HORIZON + 1` or another seed. A fix that passes
#   `fix_symptom` kept every other part and trained finite and falling on a fresh seed: evidence the
#   broken part was the cause, not a proof that no other bug is left.

# %% tags=["demo"]
# NBVAL_IGNORE_OUTPUT
print(f"this notebook ran in {time.perf_counter() - _notebook_start:.0f} s")
