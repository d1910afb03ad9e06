"""A pre-flight check you can point at your own model, batch, loss and optimizer before a long run.

    report = preflight(model, optimizer, batch, loss_fn)        # loss_fn(logits, batch) -> scalar
    print(report)                                                # one line per check
    report.ok, report.failed()

The model may return logits, ``(logits, loss)`` (nanoGPT) or an object with ``.logits`` (Hugging
Face): every output is read through ``course.toolkit.outputs.logits_of``, so ``loss_fn`` always receives the
logits, and ``step_fn`` receives a ``loss_fn`` that accepts the model's raw output.

``step_fn(model, optimizer, batch, loss_fn) -> float`` is one step of *your* loop (default: zero_grad,
forward, loss, backward, step); pass your own so the checks exercise the code you will run.
``course.reference.diagnose.preflight_pipeline(pipe)`` does the same for a course ``Pipeline``.

Checks, each with what a pass can and cannot prove (printed with the report):

* ``loss at init``: the first loss is finite and within ``init_tolerance`` of ln(V).
* ``loss is a mean``: the loss of the batch and of the batch stacked twice are equal (a sum, or a
  broadcast to (N, N), doubles).
* ``finite grads``: loss and every gradient are finite after one backward.
* ``update``: one step changes every trainable parameter, and the optimizer holds each one
  (``course.toolkit.checks.update_report``). Frozen tensors (``requires_grad=False``) are named in the
  measurement; with ``expect_frozen=`` (names, or a predicate on the name) a frozen tensor that is
  not expected, or an expected one that is trainable, fails the check.
* ``grads reset``: two steps at learning rate 0 on the same batch give the same gradients (a
  forgotten ``zero_grad`` doubles them). The loss is scaled by 1e-4 for this check, so gradient
  clipping, which would shrink a doubled gradient back to the same norm, cannot hide the doubling.
  The torch RNG is seeded alike before each of the two steps, so dropout (on by default in Hugging
  Face models) draws the same masks in both.
* ``overfit``: ``overfit_steps`` steps on the one batch bring the loss within ``overfit_margin`` of
  the lowest loss the batch allows (``course.toolkit.overfit.fit_floor``)...
* ``no-step control``: ...and the same run without ``optimizer.step()`` does not (else the overfit
  check proves nothing).
* ``mask``: something is scored, padding is not, and ``mask_check(batch)`` (optional, e.g. a bound
  ``course.lessons.sft.mask_gate``) does not raise.

Nothing here changes the objects it is given: every check runs on deep copies of the model and the
optimizer (copied together, so the copy of the optimizer holds the copy's parameters), and the
torch RNG is restored afterwards.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from .checks import update_report
from .batch import IGNORE, Batch, token_cross_entropy
from .outputs import logits_of, on_logits
from .overfit import fit_floor, overfit, plain_step, without_step


@dataclass
class Check:
    """One preflight check: its name, whether it passed, what it measured, what a pass proves and what it cannot."""

    name: str
    passed: bool
    measured: str
    proves: str
    cannot_prove: str

    def __str__(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'}  {self.name:<16} {self.measured}"


@dataclass
class PreflightReport:
    """The checks ``preflight`` ran, in order; ``report["name"]`` reads one, ``ok`` is true when all passed."""

    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.passed for c in self.checks)

    def failed(self) -> list[str]:
        return [c.name for c in self.checks if not c.passed]

    def __getitem__(self, name: str) -> Check:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(f"no check named {name!r}; have {[c.name for c in self.checks]}")

    def __str__(self) -> str:
        return "\n".join(str(c) for c in self.checks)

    def explain(self) -> str:
        """Each check with what its pass proves and what it cannot."""
        return "\n".join(f"{c}\n      proves: {c.proves}\n      cannot prove: {c.cannot_prove}" for c in self.checks)


def _copies(model: torch.nn.Module, optimizer: torch.optim.Optimizer):
    """Deep copies of the model and optimizer, copied together so parameters keep their identity map."""
    return copy.deepcopy((model, optimizer))


def _grads(model) -> list:
    return [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]


def preflight(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: Batch,
              loss_fn: Callable = token_cross_entropy, step_fn: Callable = plain_step, *,
              init_tolerance: float = 1.0, overfit_steps: int = 100, overfit_margin: float = 0.1,
              mask_check: Callable[[Batch], object] | None = None,
              expect_frozen=None) -> PreflightReport:
    """Run every check on copies of ``model`` and ``optimizer``; return the report. See the module doc."""
    loss_fn = on_logits(loss_fn)
    with torch.random.fork_rng(devices=[]):
        return PreflightReport([
            _loss_at_init(model, optimizer, batch, loss_fn, init_tolerance),
            _loss_is_mean(model, optimizer, batch, loss_fn),
            _finite_grads(model, optimizer, batch, loss_fn),
            _update(model, optimizer, batch, loss_fn, step_fn, expect_frozen),
            _grads_reset(model, optimizer, batch, loss_fn, step_fn),
            *_overfit(model, optimizer, batch, loss_fn, step_fn, overfit_steps, overfit_margin),
            _mask(batch, mask_check),
        ])


def _loss_at_init(model, optimizer, batch, loss_fn, tol) -> Check:
    m, _ = _copies(model, optimizer)
    m.eval()
    with torch.no_grad():
        logits = logits_of(m(batch.inputs))
        loss = float(loss_fn(logits, batch))
    ln_v = math.log(logits.shape[-1])
    ok = math.isfinite(loss) and abs(loss - ln_v) <= tol
    return Check("loss at init", ok, f"loss {loss:.4f}, ln(V) {ln_v:.4f}, difference {loss - ln_v:+.4f} (tolerance {tol})",
                 "the loss is on the scale of a per-token mean cross-entropy of a near-uniform head",
                 "that the labels or the mask are right (random labels start there too); a far value can "
                 "also be a legitimate init scale (a large head), not a bug")


def _loss_is_mean(model, optimizer, batch, loss_fn) -> Check:
    m, _ = _copies(model, optimizer)
    m.eval()
    twice = Batch(torch.cat([batch.inputs, batch.inputs]), torch.cat([batch.targets, batch.targets]), batch.pad_id)
    with torch.no_grad():
        one, two = float(loss_fn(m(batch.inputs), batch)), float(loss_fn(m(twice.inputs), twice))
    ok = math.isfinite(one) and abs(two - one) <= 1e-4 * max(1.0, abs(one))
    return Check("loss is a mean", ok, f"batch {one:.4f}, batch stacked twice {two:.4f}",
                 "the loss does not grow with the number of rows: no sum, no (N, N) broadcast",
                 "that the mean is over the right tokens (see mask), or that it is the loss you meant")


def _finite_grads(model, optimizer, batch, loss_fn) -> Check:
    m, _ = _copies(model, optimizer)
    m.train()
    for p in m.parameters():
        p.grad = None
    loss = loss_fn(m(batch.inputs), batch)
    if loss.requires_grad:
        loss.backward()
    bad = [n for n, p in m.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
    ok = math.isfinite(loss.item()) and not bad
    return Check("finite grads", ok, f"loss {loss.item():.4f}; non-finite grads in {bad if bad else 'none'}",
                 "this batch at this initialisation gives a finite loss and finite gradients",
                 "that later steps, other batches or lower precision stay finite")


def _update(model, optimizer, batch, loss_fn, step_fn, expect_frozen=None) -> Check:
    m, o = _copies(model, optimizer)
    report = update_report(m, o, lambda: step_fn(m, o, batch, loss_fn), expect_frozen=expect_frozen)
    cause = report.cause()
    stuck = report.not_in_optimizer or [n for n in report.unchanged if n not in report.frozen]
    frozen = f"; {report.frozen_summary()}" if report.frozen or report.not_frozen else ""
    return Check("update", cause == "ok", f"{cause}; not moved: {stuck if stuck else 'none'}{frozen}",
                 "one step changes every trainable parameter and the optimizer holds each one (by identity)",
                 "that the change is in a useful direction or of a sensible size")


def _grads_reset(model, optimizer, batch, loss_fn, step_fn) -> Check:
    m, o = _copies(model, optimizer)
    for g in o.param_groups:
        g["lr"] = 0.0  # the parameters stay put, so both steps see the same point

    def small_loss(logits, b):  # small gradients: clipping would rescale a doubled gradient back and hide it
        return loss_fn(logits, b) * 1e-4

    with torch.random.fork_rng(devices=[]):  # one seed before each step: dropout draws the same masks twice
        torch.manual_seed(0)
        step_fn(m, o, batch, small_loss)
        first = _grads(m)
        torch.manual_seed(0)
        step_fn(m, o, batch, small_loss)
        second = _grads(m)
    ratios = [float(b.norm() / a.norm()) for a, b in zip(first, second)
              if a is not None and b is not None and a.norm() > 0]
    same = all((a is None and b is None) or (a is not None and b is not None and torch.allclose(a, b, rtol=1e-5, atol=1e-12))
               for a, b in zip(first, second))
    worst = max(ratios, key=lambda r: abs(r - 1.0)) if ratios else float("nan")
    return Check("grads reset", same, f"grad norm at step 2 / step 1 on the same batch: {worst:.3f} (1 expected)",
                 "each step's gradient is its own: nothing accumulates across steps",
                 "that deliberate accumulation over micro-batches divides the loss correctly")


def _overfit(model, optimizer, batch, loss_fn, step_fn, steps, margin) -> list[Check]:
    floor = fit_floor(batch)
    m, o = _copies(model, optimizer)
    fit = overfit(m, o, batch, steps, loss_fn, step_fn)
    m, o = _copies(model, optimizer)
    control = overfit(m, o, batch, steps, loss_fn, without_step(step_fn))
    fitted = math.isfinite(fit[-1]) and fit[-1] <= floor + margin
    control_fitted = math.isfinite(control[-1]) and control[-1] < control[0] - 0.05 * abs(control[0])
    return [
        Check("overfit", fitted, f"loss {fit[0]:.4f} -> {fit[-1]:.4f} in {steps} steps; lowest possible {floor:.4f} (+ margin {margin})",
              "the model, loss and loop can fit these examples",
              "that the labels mean anything (shuffled labels fit as well), or that it will generalise; "
              "a miss can be a small step budget or LR, not a bug"),
        Check("no-step control", not control_fitted, f"without optimizer.step(): {control[0]:.4f} -> {control[-1]:.4f}",
              "the fall in the overfit check came from the updates",
              "anything about the updates themselves (see update)"),
    ]


def _mask(batch, mask_check) -> Check:
    scored = batch.targets != IGNORE
    pad_scored = int((scored & (batch.targets == batch.pad_id)).sum())
    problem = None
    if not scored.any():
        problem = "nothing is scored"
    elif pad_scored:
        problem = f"{pad_scored} padding targets are scored"
    elif mask_check is not None:
        try:
            mask_check(batch)
        except Exception as err:  # the gate's message says which clause failed
            problem = f"{type(err).__name__}: {err}"
    measured = f"scored {scored.float().mean().item():.1%} of targets, padding scored {pad_scored}"
    return Check("mask", problem is None, measured + (f"; {problem}" if problem else ""),
                 "the loss sees some targets, no padding, and passes the mask check given (if any)",
                 "without a mask check, that the right tokens are scored (a prompt/answer batch needs a gate)")
