"""Cheap checks that can falsify a hypothesis about a training pipeline without training it.

* ``check_batch``: the batch contract (shape, dtype, id range, next-token shift, mask fractions).
* ``update_report``: after one real step, which parameters did not change, and why (optimizer
  membership by identity, ``requires_grad``, learning rate, gradient size, whether ``step()`` ran).
  It names every frozen tensor; ``expect_frozen=`` makes a frozen tensor nobody expected a failure.
* ``position_sensitivity`` / ``past_sensitivity`` / ``future_sensitivity``: move or perturb the input
  and see which logits change, to tell "positions unused", "context masked off" and "future visible"
  apart.

``course.reference.diagnose.training_moves(pipe)`` is their counterpart that trains a course
``Pipeline`` (a few dozen steps: the loss falls and every parameter tensor moves); it is how notebook
00 and the capstone grade a fix of "no updates".

Each check says what it can prove. A passing batch check proves the batch is well formed, not that
the labels mean anything; a passing update report proves parameters move, not that they move well.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from .batch import IGNORE, Batch
from .outputs import logits_of


class BatchContractError(ValueError):
    """A batch broke its contract; the message names the clause and what to look at."""


def check_batch(batch: Batch, vocab_size: int, min_scored_fraction: float = 0.99, model: torch.nn.Module | None = None) -> dict:
    """Raise ``BatchContractError`` unless ``batch`` is a well-formed next-token batch.

    The contract: inputs and targets are 2-D ``int64`` tensors of one shape; input ids lie in
    ``[0, vocab_size)``; each target is a token id in that range or ``IGNORE``, and never the padding
    token; where a target is scored and the next input is a real token, the target *is* that next
    input (the shift by one); at least one target is scored; and, for pre-training batches, at least
    ``min_scored_fraction`` of the targets that follow a real next token are scored (pass 0 for
    batches that mask a prompt on purpose). Returns the measured fractions when the batch passes.

    With ``model``, one more clause: the model, run once on the inputs (eval mode, no gradients), gives
    logits of shape ``(B, T, vocab_size)``, read through ``course.toolkit.outputs.logits_of`` (a tensor,
    ``(logits, loss)``, or ``.logits``): one row of logits per input position, over the vocabulary the
    ids are checked against. (A nanoGPT model called without targets returns the last position only.)
    """
    x, y = batch.inputs, batch.targets
    if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
        raise BatchContractError("inputs and targets must be tensors")
    if x.dim() != 2 or x.shape != y.shape:
        raise BatchContractError(f"inputs {tuple(x.shape)} and targets {tuple(y.shape)} must be (B, T) of one shape")
    if x.dtype != torch.long or y.dtype != torch.long:
        raise BatchContractError(f"ids must be int64 (got inputs {x.dtype}, targets {y.dtype}): check the collator's casts")
    if x.numel() and (x.min() < 0 or x.max() >= vocab_size):
        raise BatchContractError(f"input ids span [{int(x.min())}, {int(x.max())}], outside [0, {vocab_size}): check padding and id offsets")
    scored = y != IGNORE
    if not scored.any():
        raise BatchContractError("no target is scored: a mean loss over zero targets is NaN; check the mask")
    ys = y[scored]
    if ys.min() < 0 or ys.max() >= vocab_size:
        raise BatchContractError(f"scored targets span [{int(ys.min())}, {int(ys.max())}], outside [0, {vocab_size})")
    if (ys == batch.pad_id).any():
        raise BatchContractError(f"{int((ys == batch.pad_id).sum())} scored targets are padding: mask them with IGNORE")
    # The shift: target t must equal input t+1 wherever both are real.
    follow = scored[:, :-1] & (x[:, 1:] != batch.pad_id)
    wrong = follow & (y[:, :-1] != x[:, 1:])
    if wrong.any():
        raise BatchContractError(
            f"{int(wrong.sum())} of {int(follow.sum())} scored targets are not the next input token: "
            "targets must be the inputs shifted left by one"
        )
    real_next = x[:, 1:] != batch.pad_id
    fraction = (scored[:, :-1] & real_next).sum().item() / max(1, real_next.sum().item())
    if fraction < min_scored_fraction:
        raise BatchContractError(
            f"only {fraction:.0%} of the targets before a real token are scored (expected at least "
            f"{min_scored_fraction:.0%}): check the mask slice"
        )
    if model is not None:
        was = model.training
        model.eval()
        try:
            with torch.no_grad():
                logits = logits_of(model(x))
        finally:
            model.train(was)
        if tuple(logits.shape) != (*x.shape, vocab_size):
            raise BatchContractError(
                f"the model's logits are {tuple(logits.shape)} for inputs {tuple(x.shape)}; expected "
                f"{(*x.shape, vocab_size)}: one row of {vocab_size} logits per input position (a model that "
                "returns only the last position, or another vocabulary size, breaks every per-token check)")
    return {"scored_fraction": scored.float().mean().item(), "pad_fraction": (x == batch.pad_id).float().mean().item()}


# ----- updates ----------------------------------------------------------------------------------------
@dataclass
class UpdateReport:
    """What one training step did to each parameter, by name."""

    not_in_optimizer: list[str] = field(default_factory=list)
    frozen: list[str] = field(default_factory=list)
    unexpected_frozen: list[str] = field(default_factory=list)  # frozen, not in ``expect_frozen``
    not_frozen: list[str] = field(default_factory=list)  # in ``expect_frozen``, but trainable
    no_grad: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    grad_norm: float = 0.0
    lrs: list[float] = field(default_factory=list)
    optimizer_stepped: bool = False
    n_params: int = 0

    @property
    def ok(self) -> bool:
        return self.cause() == "ok"

    def cause(self) -> str:
        """The most specific reason parameters did not move, or ``"ok"``; one name per cause.

        ``"grads-vanish"``: the step ran with a learning rate, but the gradients it used had a total
        norm under 1e-8 (clipped or scaled to nothing, or every target ignored). Adam divides by the
        gradient's own scale, so such a step can still nudge parameters by a rounding error; the
        gradient norm, not bit-for-bit change, is the evidence here.
        ``"no-grad"``: every unchanged tensor got no gradient at all although it is trainable and in
        the optimizer: the forward pass never used it (an unused embedding, a dead branch).
        ``"frozen-unexpected"`` / ``"trainable-unexpected"``: only with ``expect_frozen``: a tensor
        with ``requires_grad=False`` that was not expected frozen, or one expected frozen that trains.
        Without ``expect_frozen`` frozen tensors are reported (``frozen_summary``), not failed.
        """
        if self.n_params and len(self.frozen) == self.n_params:
            return "requires-grad-off"
        if self.unexpected_frozen:
            return "frozen-unexpected"
        if self.not_frozen:
            return "trainable-unexpected"
        if self.not_in_optimizer:
            return "not-in-optimizer"
        if self.lrs and max(self.lrs) == 0.0:
            return "lr-zero"
        if not self.optimizer_stepped:
            return "no-step"
        if self.grad_norm < 1e-8:
            return "grads-vanish"
        stuck = set(self.unchanged) - set(self.frozen)  # frozen on purpose is not a failure to update
        if stuck:
            return "no-grad" if stuck <= set(self.no_grad) else "unchanged"
        return "ok"

    def frozen_summary(self) -> str:
        """How many tensors are frozen, and which: ``"frozen: 2 tensors (a.weight, a.bias)"``."""
        text = (f"frozen: {len(self.frozen)} tensor{'s' if len(self.frozen) != 1 else ''} ({', '.join(self.frozen)})"
                if self.frozen else "frozen: none")
        if self.unexpected_frozen and self.unexpected_frozen == self.frozen:
            text += ", none of them expected frozen"
        elif self.unexpected_frozen:
            text += f"; not expected frozen: {', '.join(self.unexpected_frozen)}"
        if self.not_frozen:
            text += f"; expected frozen but trainable: {', '.join(self.not_frozen)}"
        return text


def _expected_frozen(expect_frozen, names: list[str]):
    """``expect_frozen`` (names, or a predicate on a parameter's name) as a predicate; unknown names raise."""
    if callable(expect_frozen):
        return expect_frozen
    if isinstance(expect_frozen, str):
        raise TypeError("expect_frozen takes a list of parameter names or a predicate, not one string")
    wanted = set(expect_frozen)
    unknown = sorted(wanted - set(names))
    if unknown:
        raise ValueError(f"expect_frozen names no parameter of the model: {unknown}")
    return wanted.__contains__


def update_report(model: torch.nn.Module, optimizer: torch.optim.Optimizer, step, expect_frozen=None) -> UpdateReport:
    """Run ``step()`` (one full training step: forward, backward, optimizer step) and report.

    Membership is checked by identity (``id`` of each tensor), not by name or shape, because the
    classic failure is an optimizer holding a different tensor of the same shape. "Changed" means
    any element differs bit-for-bit after the step.

    ``report.frozen`` names every tensor with ``requires_grad=False``. ``expect_frozen`` (parameter
    names, or a predicate ``name -> bool``) says which tensors should be frozen: ``()`` for "none",
    ``lambda n: not n.endswith((".A", ".B"))`` for a LoRA base. A frozen tensor it does not name, or a
    named one that trains, makes the report fail (``unexpected_frozen``, ``not_frozen``).
    """
    names = {id(p): n for n, p in model.named_parameters()}
    in_opt = {id(p) for g in optimizer.param_groups for p in g["params"]}
    report = UpdateReport(n_params=len(names), lrs=[g["lr"] for g in optimizer.param_groups])
    expected = None if expect_frozen is None else _expected_frozen(expect_frozen, list(names.values()))
    for n, p in model.named_parameters():
        if not p.requires_grad:
            report.frozen.append(n)
            if expected is not None and not expected(n):
                report.unexpected_frozen.append(n)
        else:
            if expected is not None and expected(n):
                report.not_frozen.append(n)
            if id(p) not in in_opt:
                report.not_in_optimizer.append(n)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    steps_before = _optimizer_steps(optimizer)
    step()
    report.optimizer_stepped = _optimizer_steps(optimizer) > steps_before
    sq = 0.0
    for n, p in model.named_parameters():
        if p.grad is None:
            report.no_grad.append(n)
        else:
            sq += p.grad.double().pow(2).sum().item()
        if torch.equal(before[n], p.detach()):
            report.unchanged.append(n)
    report.grad_norm = sq ** 0.5
    return report


def _optimizer_steps(optimizer: torch.optim.Optimizer) -> int:
    """How many times ``optimizer.step()`` has run, read from a counter wrapped around it."""
    if not hasattr(optimizer, "_course_step_count"):
        optimizer._course_step_count = 0
        original = optimizer.step

        @functools.wraps(original)  # keeps the LR scheduler's marker, so it does not warn that step was replaced
        def counted(*args, **kwargs):
            optimizer._course_step_count += 1
            return original(*args, **kwargs)

        optimizer.step = counted
    return optimizer._course_step_count


# ----- does the model use its context? ---------------------------------------------------------------
@torch.no_grad()
def _logit_change(model, ids: torch.Tensor, changed: torch.Tensor) -> torch.Tensor:
    """Max |logit change| per position between ``ids`` and ``changed`` (both (B, T))."""
    was = model.training
    model.eval()
    diff = (logits_of(model(ids)) - logits_of(model(changed))).abs().amax(dim=(0, 2))
    model.train(was)
    return diff


def position_sensitivity(model, vocab: int, seq_len: int = 8, seed: int = 0) -> float:
    """How much the logits move when the same tokens are placed at a later absolute position.

    A model that adds position embeddings moves; one that ignores them scores exactly 0.0. (Swapping
    two context tokens is *not* a test of this: a causal model without positions can still infer
    order, because each position sees a different prefix.)

    It needs a model whose forward takes ``start=`` (the absolute position of the first token), as the
    course's ``TinyGPT`` does; for another model, shift the positions its own way and compare.
    """
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (16, seq_len), generator=g)
    was = model.training
    model.eval()
    with torch.no_grad():
        diff = (logits_of(model(ids)) - logits_of(model(ids, start=seq_len))).abs().max().item()
    model.train(was)
    return diff


def past_sensitivity(model, vocab: int, seq_len: int = 8, seed: int = 0) -> float:
    """How much the last position's logits move when every earlier token is replaced."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (16, seq_len), generator=g)
    changed = ids.clone()
    changed[:, :-1] = (ids[:, :-1] + 1 + torch.randint(0, vocab - 1, (16, seq_len - 1), generator=g)) % vocab
    return _logit_change(model, ids, changed)[-1].item()


def future_sensitivity(model, vocab: int, seq_len: int = 8, seed: int = 0) -> float:
    """How much the logits of every position but the last move when only the last token changes.

    A causal model scores exactly 0.0: nothing may depend on a later token.
    """
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (16, seq_len), generator=g)
    changed = ids.clone()
    changed[:, -1] = (ids[:, -1] + 1) % vocab
    return _logit_change(model, ids, changed)[:-1].max().item()


