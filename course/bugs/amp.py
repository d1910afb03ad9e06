"""Bugs of notebook 10 (family ``amp-memory``): memory that grows with every step.

Each swaps one of the two parts that ``course.lessons.amp.run`` calls each step:

* ``loss-kept-with-graph`` (``keep_loss``): the history keeps the loss tensor itself. Backward has
  freed its saved activations, so the bytes saved for backward do not grow, but every step's loss
  (and the graph's nodes behind it) stays referenced.
* ``monitor-kept-with-graph`` (``monitor``): the probe-batch loss is computed with autograd on and
  kept as a tensor: nobody runs backward on it, so every forward's saved activations stay alive.
* ``monitor-logits-kept`` (``monitor``): the monitor returns a float, but keeps the probe logits
  (with their graph) in a list of its own "for later inspection": the same growth, no tensor in the
  history.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..reference.parts import probe_loss
from ..reference.pipeline import Pipeline
from .registry import bug


def _keep_tensor(loss):
    return loss


def _monitor_with_graph(model, batch, loss_fn):
    return probe_loss(model, batch, loss_fn)


@dataclass(frozen=True, eq=False)
class _MonitorKeepingLogits:
    store: list = field(default_factory=list)

    def __call__(self, model, batch, loss_fn):
        logits = model(batch.inputs)
        self.store.append(logits)
        return loss_fn(logits, batch).detach().item()


@bug("amp-memory", "step losses stay referenced: the history keeps the loss tensors")
def loss_kept_with_graph(pipe: Pipeline) -> Pipeline:
    """``history.append(loss)`` instead of ``loss.item()``."""
    return pipe.replace(keep_loss=_keep_tensor)


@bug("amp-memory", "saved activations grow every step: the monitor's graph is kept")
def monitor_kept_with_graph(pipe: Pipeline) -> Pipeline:
    """The probe loss computed without ``torch.no_grad()`` and kept as a tensor."""
    return pipe.replace(monitor=_monitor_with_graph)


@bug("amp-memory", "saved activations grow every step: the monitor keeps its logits")
def monitor_logits_kept(pipe: Pipeline) -> Pipeline:
    """The monitor keeps each probe's logits (with autograd on) in a list of its own."""
    return pipe.replace(monitor=_MonitorKeepingLogits())
