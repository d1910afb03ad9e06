"""Per-layer telemetry over the steps of a run, judged against each layer's own history.

``Telemetry`` records, at every step, for each trainable parameter tensor (a "layer" here):

* ``weight_mean``, ``weight_std``: of the values, after the update;
* ``grad_finite``, ``grad_zero``: fractions of gradient entries that are finite / exactly zero;
* ``weight_norm``, ``grad_norm``: L2 norms (the gradient as the optimizer sees it, i.e. after clipping);
* ``rel_update``: ||w_after - w_before|| / ||w_before||.

There is no universal healthy band for these numbers: a global gradient norm grows with the number of
parameters and with the loss's reduction (sum vs mean), so "0.1 to 3" has no source. ``robust_z``
compares each value with the same layer's recent past instead (median and median absolute deviation
of a trailing window), and ``outliers`` lists the (step, layer) cells where that score is large.
It can say "this layer changed behaviour at step s"; it cannot say whether the change is a bug.

``record_model(model, optimizer, batches, loss_fn)`` records a run of your own model: it trains it in
place, one ``step_fn`` per batch (default: the textbook step of ``course.toolkit.overfit.plain_step``), with
the model's output read through ``course.toolkit.outputs.logits_of`` (logits, ``(logits, loss)`` or
``.logits``). Tensors with ``requires_grad=False`` are not recorded; ``telemetry.frozen`` names them.

``course.reference.diagnose.record(pipe, steps)`` does it over a run of a course ``Pipeline``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .outputs import on_logits

STATS = ("weight_mean", "weight_std", "grad_finite", "grad_zero", "weight_norm", "grad_norm", "rel_update")


@dataclass
class Telemetry:
    """Per-step, per-layer statistics; ``table(stat)`` is a (steps, layers) tensor."""

    names: list[str]
    steps: list[int] = field(default_factory=list)
    rows: dict = field(default_factory=lambda: {s: [] for s in STATS})
    frozen: list[str] = field(default_factory=list)  # requires_grad=False: not recorded

    def table(self, stat: str) -> torch.Tensor:
        if stat not in STATS:
            raise KeyError(f"unknown statistic {stat!r}; have {STATS}")
        return torch.tensor(self.rows[stat], dtype=torch.float64).reshape(len(self.steps), len(self.names))

    def observe(self, params: list[torch.Tensor], before: list[torch.Tensor]) -> None:
        """Record one step: ``params`` after the update (with their gradients), ``before`` the values before."""
        stats = {s: [] for s in STATS}
        for p, b in zip(params, before):
            w = p.detach()
            g = p.grad
            stats["weight_mean"].append(w.mean().item())
            stats["weight_std"].append(w.std().item() if w.numel() > 1 else 0.0)
            stats["grad_finite"].append(1.0 if g is None else torch.isfinite(g).float().mean().item())
            stats["grad_zero"].append(1.0 if g is None else (g == 0).float().mean().item())
            stats["weight_norm"].append(torch.linalg.vector_norm(w).item())
            stats["grad_norm"].append(0.0 if g is None else torch.linalg.vector_norm(g).item())
            stats["rel_update"].append(torch.linalg.vector_norm(w - b).item() / max(torch.linalg.vector_norm(b).item(), 1e-12))
        for s in STATS:
            self.rows[s].extend(stats[s])
        self.steps.append(len(self.steps))

    def wrap(self, update, params: list[torch.Tensor]):
        """A pipeline ``update`` part that records a step around the original ``update``."""

        def recording_update(optimizer):
            before = [p.detach().clone() for p in params]
            update(optimizer)
            self.observe(params, before)

        return recording_update


def record_model(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches, loss_fn, step_fn=None) -> Telemetry:
    """Train ``model`` in place, one ``step_fn(model, optimizer, batch, loss_fn)`` per batch of
    ``batches``, recording every trainable tensor after each ``optimizer.step()``; returns the
    ``Telemetry``. ``loss_fn(logits, batch)`` gets the logits whatever the model returns."""
    from .overfit import plain_step

    step_fn = step_fn or plain_step
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    tel = Telemetry([n for n, _ in named], frozen=[n for n, p in model.named_parameters() if not p.requires_grad])
    params = [p for _, p in named]
    loss_fn = on_logits(loss_fn)
    model.train()
    for batch in batches:
        before = [p.detach().clone() for p in params]
        step_fn(model, optimizer, batch, loss_fn)
        tel.observe(params, before)
    return tel


def robust_z(values: torch.Tensor, window: int = 20, min_history: int = 10) -> torch.Tensor:
    """For each step (rows of ``values``, any trailing shape), how far the value lies from the median of
    the previous ``window`` steps, in units of 1.4826 x their median absolute deviation (a robust
    standard deviation). Steps with fewer than ``min_history`` earlier values score 0."""
    values = values.double()
    z = torch.zeros_like(values)
    for s in range(min_history, values.shape[0]):
        past = values[max(0, s - window):s]
        med = past.median(dim=0).values
        mad = (past - med).abs().median(dim=0).values * 1.4826
        scale = torch.maximum(mad, 1e-3 * med.abs() + 1e-12)  # a perfectly flat history still has a scale
        z[s] = (values[s] - med) / scale
    return z


def outliers(tel: Telemetry, stat: str, threshold: float = 8.0, **kwargs) -> list[tuple[int, str, float]]:
    """(step, layer, z) where ``|robust_z|`` of ``stat`` exceeds ``threshold``, in step order."""
    z = robust_z(tel.table(stat), **kwargs)
    hits = (z.abs() > threshold).nonzero().tolist()
    return [(tel.steps[s], tel.names[l], z[s, l].item()) for s, l in hits]
