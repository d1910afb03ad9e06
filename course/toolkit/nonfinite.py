"""Find the first tensor of a training step that is not finite, in the order the step makes them.

A NaN loss is the last place a NaN shows up, not the first: one inf in an embedding turns every
later tensor into NaN. ``Locator`` records the tensors of one step in the order they are computed:

1. ``input``: the tensors passed to the model (floats must be finite; integer ids must lie in
   ``[0, num_embeddings)`` of the model's first ``nn.Embedding``: the integer form of "not finite");
2. every module's output, in execution order (forward hooks), labelled by stage: ``embeddings``
   (``nn.Embedding``), ``scores`` and ``softmax`` (modules whose name ends in ``score_probe`` /
   ``softmax_probe``; ``course.reference.model.Attention`` has both), ``logits`` (the model's own output) and
   ``activations`` (everything else);
3. ``loss`` (``record_loss``), then ``grads`` (``record_grads``, in reverse registration order, which
   is roughly the order backward computes them), then ``optimizer`` state such as Adam's ``exp_avg``
   and ``exp_avg_sq`` (``record_optimizer``), then ``params`` after the update (``record_params``).
   So the optimizer state and parameters of step ``s`` are recorded *after* that step's update:
   ``when_of(step, stage)`` names the phase a finding belongs to (the decision tree's first choice).

``first_nonfinite(events)`` returns the first bad one; ``locate_step(model, optimizer, batch,
loss_fn)`` runs textbook steps of your own model (on copies) with one attached;
``course.reference.diagnose.trace(pipe)`` and ``locate(pipe)`` run the course's training loop step
by step with one attached.

The model may return logits, ``(logits, loss)`` (nanoGPT) or an output object with ``.logits``
(Hugging Face): the ``logits`` stage is read through ``course.toolkit.outputs.logits_of``, which raises
``ModelOutputError`` (naming what was returned) for anything else; module outputs that are tuples,
lists or mappings (a Hugging Face submodule's output object) are searched for tensors.

On your own model:

```python
with Locator(model, optimizer) as loc:
    loss = loss_fn(logits_of(model(x)), y)
    loc.record_loss(loss)
    loss.backward()
    loc.record_grads()
    optimizer.step()
    loc.record_optimizer()
    loc.record_params()
print(first_nonfinite(loc.events))
```

Limits: hooks see **module outputs**, not every operation. An op written inline in a ``forward``
(``x / temperature``, a hand-written softmax) is seen only through the next module output that
contains its result; to see it directly, route it through an ``nn.Identity`` named ``*_probe`` or
pass ``labels={module_name: stage}``. Hooks do not see in-place changes made after a module returns,
functional calls outside modules, or tensors inside non-tensor outputs other than tuples, lists and
mappings. ``nn.MultiheadAttention`` (inside ``nn.TransformerEncoderLayer``) calls its output
projection functionally, and an encoder layer in eval mode may take a fused fast path: hooks see
the attention block's output, not its insides.
Every integer tensor passed to the model is checked as ids: targets passed to the model itself
(nanoGPT's ``model(idx, targets)``, Hugging Face's ``labels=``) with ``-1`` or ``-100`` in them are
reported as a bad input, so under a ``Locator`` call the model on the ids alone (as ``locate_step``
does) and give the targets to the loss.
The first bad tensor is where to *start* looking, not the cause. A weight that an update makes
non-finite is recorded at stage ``params`` of that step when ``record_params`` is called after the
update (``course.reference.diagnose.trace`` does, every step); without that call it shows up first
as the output of the module that uses it, in the next forward pass. Weights that updates grow large
but keep finite are seen by nothing until something overflows, possibly steps later (a gradient, for
``lr-sign-typo``).
"""

from __future__ import annotations

import copy
import math
import types
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn as nn

from .outputs import logits_of

STAGES = ("input", "embeddings", "activations", "scores", "softmax", "logits", "loss", "grads",
          "optimizer", "params")


@dataclass
class Event:
    """One recorded tensor: at training step ``step``, stage ``stage``, produced by ``name``.

    ``limit`` is set only for integer inputs: valid ids lie in ``[0, limit)``."""

    step: int
    stage: str
    name: str
    tensor: torch.Tensor
    limit: int | None = None


@dataclass(frozen=True)
class Finding:
    """Where a step first went non-finite."""

    step: int
    stage: str
    name: str

    def __str__(self) -> str:
        return f"step {self.step}: first non-finite tensor at stage {self.stage!r} ({self.name})"


def is_bad(event: Event) -> bool:
    """True if the event's tensor holds a NaN or an inf, or (integer ids) an id outside ``[0, limit)``."""
    t = event.tensor
    if t.dtype == torch.bool or t.numel() == 0:
        return False
    if t.is_floating_point() or t.is_complex():
        return not bool(torch.isfinite(t).all())
    if event.limit is not None:
        return bool(t.min() < 0) or bool(t.max() >= event.limit)
    return False


# trace() and locate() use their own copy: graders disable the public names while a learner's code runs.
_bad = types.FunctionType(is_bad.__code__, is_bad.__globals__, "_bad")


def _any_bad(events: list[Event]) -> bool:
    """Exactly ``any(_bad(e) for e in events)``, at a fraction of the cost on a healthy step.

    A NaN or an inf anywhere in a float tensor makes its sum NaN or inf, so a finite sum proves the
    tensor finite: one reduction per tensor and one check for all of them. Only when some sum is not
    finite (a bad tensor, or huge finite values whose sum overflows) is every event checked exactly."""
    floats = [e.tensor for e in events if e.tensor.is_floating_point()]
    if floats and not bool(torch.isfinite(torch.stack([t.sum(dtype=torch.float32) for t in floats])).all()):
        return any(_bad(e) for e in events)
    return any(_bad(e) for e in events if not e.tensor.is_floating_point())


def first_nonfinite(events: list[Event]) -> Finding | None:
    """The first bad event in recording order, as a ``Finding``; ``None`` if every tensor is fine."""
    for e in events:
        if is_bad(e):
            return Finding(e.step, e.stage, e.name)
    return None


def _tensors(obj, mappings: bool = False):
    """The tensors in ``obj``, inside tuples and lists, and with ``mappings`` inside mappings too (a
    Hugging Face ModelOutput is a mapping of its tensors; module *outputs* are searched that way, the
    model's inputs are not, so a KV cache passed as a dict is not recorded as an input)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            yield from _tensors(o, mappings)
    elif mappings and isinstance(obj, Mapping):
        for o in obj.values():
            yield from _tensors(o, mappings)


class Locator:
    """Forward hooks on every module of ``model``, plus explicit records of the loss, gradients,
    optimizer state and parameters. Use as a context manager (hooks are removed on exit).

    ``events`` holds the current step's records (``new_step(step)`` clears them). Gradients,
    optimizer state and parameters are cloned (later steps change them in place); module outputs
    are kept detached, not copied. ``labels`` maps module names to stages, overriding the defaults.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
                 labels: dict[str, str] | None = None):
        self.model, self.optimizer = model, optimizer
        self.labels = dict(labels or {})
        self.step = 0
        self.events: list[Event] = []
        self._handles = []
        embeddings = [m for m in model.modules() if isinstance(m, nn.Embedding)]
        self.id_limit = embeddings[0].num_embeddings if embeddings else None
        self._names = {id(p): n for n, p in model.named_parameters()}

    # ----- hooks ------------------------------------------------------------------------------
    def stage_of(self, name: str, module: nn.Module) -> str:
        if name in self.labels:
            return self.labels[name]
        if name.endswith("score_probe"):
            return "scores"
        if name.endswith("softmax_probe"):
            return "softmax"
        if isinstance(module, nn.Embedding):
            return "embeddings"
        return "activations"

    def __enter__(self) -> "Locator":
        self._handles.append(self.model.register_forward_pre_hook(self._on_input, with_kwargs=True))
        for name, module in self.model.named_modules():
            if module is not self.model:
                self._handles.append(module.register_forward_hook(self._on_output(name, module)))
        self._handles.append(self.model.register_forward_hook(self._on_logits))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _on_input(self, module, args, kwargs):
        for i, t in enumerate(_tensors(list(args) + list(kwargs.values()))):
            limit = None if t.is_floating_point() else self.id_limit
            self.record("input", f"input[{i}]", t, limit=limit)

    def _on_output(self, name, module):
        stage = self.stage_of(name, module)

        def hook(mod, args, output):
            for t in _tensors(output, mappings=True):
                self.record(stage, name, t)
        return hook

    def _on_logits(self, module, args, output):
        out = logits_of(output)  # raises ModelOutputError, naming what the model returned
        # The last module whose output is the model's output made the logits (unless labelled).
        for e in reversed(self.events):
            if e.stage != "input" and e.tensor.data_ptr() == out.data_ptr() and e.tensor.shape == out.shape:
                if e.name not in self.labels:
                    e.stage = "logits"
                return
        self.record("logits", "output", out)

    # ----- explicit records -----------------------------------------------------------------------
    def new_step(self, step: int) -> None:
        self.step, self.events = step, []

    def record(self, stage: str, name: str, tensor: torch.Tensor, limit: int | None = None, copy: bool = False) -> None:
        t = tensor.detach()
        self.events.append(Event(self.step, stage, name, t.clone() if copy else t, limit))

    def record_loss(self, loss: torch.Tensor) -> None:
        self.record("loss", "loss", loss)

    def _params(self):
        return list(reversed(list(self.model.named_parameters())))

    def record_grads(self) -> None:
        for name, p in self._params():
            if p.grad is not None:
                self.record("grads", name, p.grad, copy=True)

    def record_optimizer(self) -> None:
        if self.optimizer is None:
            return
        for name, p in self._params():
            for key, value in self.optimizer.state.get(p, {}).items():
                if isinstance(value, torch.Tensor) and key != "step":
                    self.record("optimizer", f"{name}.{key}", value, copy=True)

    def record_params(self) -> None:
        for name, p in self._params():
            self.record("params", name, p, copy=True)


def locate_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch, loss_fn, steps: int = 1,
                labels: dict[str, str] | None = None) -> Finding | None:
    """The first non-finite tensor of ``steps`` textbook training steps of *your* model on ``batch``
    (zero_grad, forward, ``loss_fn(logits, batch)``, backward, ``optimizer.step()``), with a
    ``Locator`` attached; ``None`` if every recorded tensor stayed finite.

    It runs on deep copies of ``model`` and ``optimizer`` (copied together) and restores the torch
    RNG, so your objects are not changed. It runs this textbook step, not your loop: a clip, a
    scaler or an accumulation of yours is not in it (attach a ``Locator`` to your loop for that)."""
    m, opt = copy.deepcopy((model, optimizer))
    m.train()
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings(), Locator(m, opt, labels) as loc:
        warnings.simplefilter("ignore")
        for s in range(steps):
            loc.new_step(s)
            opt.zero_grad(set_to_none=True)
            try:
                output = m(batch.inputs)
            except Exception:
                if any(_bad(e) for e in loc.events):
                    break
                raise
            loss = loss_fn(logits_of(output), batch)
            loc.record_loss(loss)
            if loss.requires_grad:
                loss.backward()
            loc.record_grads()
            opt.step()
            loc.record_optimizer()
            loc.record_params()
            if _any_bad(loc.events):
                break
    bad = next((e for e in loc.events if _bad(e)), None)
    return None if bad is None else Finding(bad.step, bad.stage, bad.name)


# ----- the decision tree ----------------------------------------------------------------------------
# *When* a step first went non-finite, read off the first bad event's (step, stage): at step 0 the
# forward pass, the loss and the gradients are computed from the initial weights ("before any
# update"); the optimizer state and the parameters of step 0 are recorded *after* its update ("in
# the first update"); anything at a later step comes "after some updates".
WHEN = ("before any update", "in the first update", "after some updates")
_UPDATE_STAGES = ("optimizer", "params")


def when_of(step: int, stage: str) -> str:
    """Which ``WHEN`` a first bad event at ``(step, stage)`` belongs to."""
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}")
    if step > 0:
        return "after some updates"
    return "in the first update" if stage in _UPDATE_STAGES else "before any update"


def _impossible(when: str, stage: str) -> str | None:
    """Why ``(when, stage)`` cannot be a first bad event, or None if it can."""
    if when == "before any update" and stage in _UPDATE_STAGES:
        return (f"'{stage}' is recorded after the update, so it cannot go bad before any update: "
                f"at step 0 that is 'in the first update'")
    if when == "in the first update" and stage not in _UPDATE_STAGES:
        return (f"'{stage}' is computed before the update of its step: a first bad '{stage}' at "
                f"step 0 is 'before any update', at a later step 'after some updates'")
    return None


@dataclass(frozen=True)
class Advice:
    """One leaf of the NaN decision tree: the hypotheses a finding leaves, and the test that separates them.

    ``examples`` names catalogue bugs that first go non-finite there; empty for a leaf no bug reaches.
    """

    hypotheses: tuple[str, ...]
    test: str
    examples: tuple[str, ...] = ()  # catalogue bugs that end here (where course.reference.diagnose.locate puts them)


_BEFORE = "No update has run yet, so the learning rate cannot be the cause."
_FIRST = ("The loss and gradients of the initial weights were finite; the first update made the "
          "first non-finite number, so look at the optimizer's arithmetic and settings.")
_GROWTH = ("log the parameter norm per step: under Adam/AdamW a too-large LR moves each weight by at "
           "most about the LR per step, so the norm grows roughly additively (a step-to-step ratio "
           "falling towards 1), not geometrically (a constant ratio: plain SGD on a quadratic)")
TREE: dict[tuple[str, str], Advice] = {
    ("before any update", "input"): Advice(
        ("the data pipeline emits NaN/inf features, or ids outside the vocabulary (a sentinel such "
         "as -100 or -1 used as padding)",),
        "check one batch before the model sees it: min/max of the ids against the vocabulary size, "
        "torch.isfinite on float features (course.toolkit.checks.check_batch does the ids)",
        ("inputs-padded-with-ignore-index",)),
    ("before any update", "embeddings"): Advice(
        ("the embedding weights are already non-finite (bad init, a scale of 1/0, a corrupt checkpoint)",
         "the ids are fine but one row is non-finite"),
        "torch.isfinite on the embedding weight itself, and on the rows the batch uses: all rows bad "
        "points at init or scaling, one row at that token",
        ("embedding-scaled-by-inf",)),
    ("before any update", "scores"): Advice(
        ("a scale of inf in the scores (1/sqrt(0), a temperature of 0)",
         "q or k already huge (look at the module before)"),
        "compare the scores with q and k: finite q and k with non-finite scores means the scale",
        ("attention-scale-inf",)),
    ("before any update", "softmax"): Advice(
        ("a row whose every entry is masked with -inf (softmax of all -inf is 0/0 = NaN)",
         "scores with +inf (inf - inf = NaN inside softmax)"),
        "scores finite before the mask? then count the allowed keys per query row: a row with none "
        "is the bug",
        ("causal-mask-strict",)),
    ("before any update", "logits"): Advice(
        ("the output head's weights are non-finite", "a division of the logits by 0 (a temperature)"),
        "torch.isfinite on the head's weight and on its input (the previous module's output)",
        ()),
    ("before any update", "loss"): Advice(
        ("log of a probability that underflowed to 0 (log(softmax) instead of log_softmax)",
         "a cast to fp16 or a loss scale that overflows (65504 is fp16's largest value)",
         "a mean over zero scored targets (0/0)"),
        "recompute the loss from the same logits with F.cross_entropy in float32: finite means the "
        "loss code is the bug; count the scored targets",
        ("loss-scaled-in-fp16", "all-targets-ignored")),
    ("before any update", "grads"): Advice(
        ("a torch.where or mask whose unselected branch is inf/NaN: its gradient is 0 x inf = NaN",
         "sqrt, log or division at exactly 0 in a branch that is used"),
        "run backward under torch.autograd.detect_anomaly(check_nan=True) to name the op that made "
        "the first NaN gradient (it does not catch inf)",
        ("log-guarded-by-where",)),
    ("in the first update", "optimizer"): Advice(
        ("gradients so large their squares overflow in Adam's exp_avg_sq",
         "optimizer state loaded from a corrupt checkpoint"),
        "compare the largest |grad| with sqrt(float32 max) ~ 1.8e19, and check the state after loading",
        ()),
    ("in the first update", "params"): Advice(
        ("the update itself is non-finite although grads and moments are finite: Adam with eps=0 "
         "divides 0 by 0 for a parameter whose gradient is exactly 0",
         "a non-finite learning rate or weight decay"),
        "find the parameters that went bad and their gradients: all-zero gradients there point at eps",
        ("adam-eps-zero",)),
    ("after some updates", "grads"): Advice(
        ("the learning rate is far too high: weights grow each step until the backward pass overflows "
         "(the forward can still be finite)",
         "one batch is special (an outlier, a corrupt example) and the model meets it only now"),
        "rerun with the learning rate 10x lower: if the first bad step moves later or never comes, "
        "the LR is the cause; and " + _GROWTH,
        ("lr-sign-typo",)),
    ("after some updates", "params"): Advice(
        ("the learning rate is far too high: parameters grow each step until they overflow",
         "the optimizer divides by a vanishing denominator (eps=0) once a gradient becomes exactly 0"),
        "rerun with the learning rate 10x lower: if the first bad step moves later or never comes, "
        "the LR is the cause; and " + _GROWTH,
        ()),
}
_AFTER_DEFAULT = Advice(
    ("the learning rate is too high: weights or activations grow until they overflow",
     "one batch is special (an outlier, a corrupt example) and the model meets it only now",
     "a slow drift: a logit gap growing until an unstable op (log(softmax), fp16) overflows"),
    "replay the failing step's batch from the last good state: fails again -> the state or the batch; "
    "then the same batch at a 10x lower LR from the same state, and " + _GROWTH,
    ())


def advise(when: str, stage: str) -> Advice:
    """The hypotheses and the separating test for a run that first went non-finite at ``stage``.

    Raises ``ValueError`` for a combination that cannot happen (see ``when_of``)."""
    if when not in WHEN or stage not in STAGES:
        raise ValueError(f"when must be one of {WHEN}, stage one of {STAGES}")
    why = _impossible(when, stage)
    if why:
        raise ValueError(why)
    if (when, stage) in TREE:
        return TREE[(when, stage)]
    if when == "after some updates":
        return _AFTER_DEFAULT
    return Advice(("the module reported computes something unstable from finite inputs",),
                  "look at that module's input and weights; feed it the previous module's output alone", ())


def advice_text(when: str, stage: str) -> str:
    """``advise(when, stage)`` as text to print: the finding, its hypotheses and the separating test.

    Unlike ``advise``, a combination that cannot happen is not an error: the text says why it cannot.
    """
    why = _impossible(when, stage) if when in WHEN and stage in STAGES else None
    if why:
        return f"Not a possible first finding: {why}."
    a = advise(when, stage)
    lines = [f"Observed: first non-finite at stage '{stage}', {when}."]
    if when == "before any update":
        lines.append(_BEFORE)
    elif when == "in the first update":
        lines.append(_FIRST)
    lines.append("Hypotheses:")
    lines += [f"  - {h}" for h in a.hypotheses]
    lines.append(f"The test that separates them: {a.test}")
    if a.examples:
        lines.append(f"Catalogue bugs that end here: {', '.join(a.examples)}")
    return "\n".join(lines)


def tree_widget():
    """Two dropdowns (when, stage) and an Output area showing ``advice_text`` for the choice.

    The text is written into the Output's ``outputs`` directly, so the widget works (and can be
    tested) without a running kernel: setting a dropdown's value updates the Output at once. Its
    plain-text form (what a frontend without widgets shows) is the choice and its advice, not
    ``VBox(...)``.
    """
    import ipywidgets as widgets

    from .textview import with_text

    when = widgets.Dropdown(options=WHEN, value=WHEN[0], description="when")
    stage = widgets.Dropdown(options=STAGES, value="loss", description="first bad")
    out = widgets.Output(layout={"border": "1px solid #ccc", "padding": "4px"})

    def show(_=None):
        text = advice_text(when.value, stage.value)
        out.outputs = ({"output_type": "stream", "name": "stdout", "text": text + "\n"},)

    when.observe(show, names="value")
    stage.observe(show, names="value")
    show()
    box = widgets.VBox([widgets.HBox([when, stage]), out])
    box.when, box.stage, box.out = when, stage, out
    return with_text(box, lambda: f"when: {when.value}, first bad: {stage.value}\n{output_text(out)}")


def output_text(out) -> str:
    """The text shown in an ``ipywidgets.Output`` (for tests)."""
    return "".join(o.get("text", "") for o in out.outputs)


# ----- small helpers the notebook's demos use ------------------------------------------------------
def stable_rate_bound() -> float:
    """Gradient descent on f(x) = a x^2 / 2 multiplies x by (1 - eta a) each step: stable iff 0 < eta a < 2."""
    return 2.0


def quadratic_descent(eta_a: float, steps: int, x0: float = 1.0) -> list[float]:
    """|x_t| for t = 0..steps of gradient descent on a x^2 / 2 with step size eta (only eta*a matters)."""
    xs, x = [abs(x0)], x0
    for _ in range(steps):
        x = x - eta_a * x
        xs.append(abs(x) if math.isfinite(x) else float("inf"))
    return xs
