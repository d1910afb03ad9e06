"""An alert policy for a training run: what to watch each step, what to compare it with, when to speak.

Contract. Call ``policy.observe(step, loss, grad_norm=None, tokens_per_s=None, val_loss=None)`` once
per training step, in step order; pass ``val_loss`` only on steps where validation ran, and leave out
what you do not measure (``None`` is "not measured", never an alert). It returns the list of
``Alert`` raised at that step (usually empty). Each alert compares one value with the run's **own
recent history**, never with a universal band (a gradient norm of 3 is normal for one model and a
disaster for another):

| kind | fires when | default |
|---|---|---|
| ``non-finite`` | any value passed at this step is NaN or +-inf | always on |
| ``loss-spike`` | loss > ``loss_ratio`` x median of the last ``window`` finite training losses | 1.5 x, window 20 |
| ``grad-spike`` | grad_norm > ``grad_ratio`` x median of the last ``window`` finite gradient norms | 3.0 x |
| ``throughput-drop`` | tokens_per_s < (1 - ``throughput_drop``) x median of the last ``window`` finite throughputs | 0.5 (half speed) |
| ``val-gap`` | val_loss - median of the last ``window`` finite training losses > ``val_gap`` | 0.3 nats |
| ``val-plateau`` | this is the ``patience``-th finite validation loss in a row that is not below the best so far by ``min_delta`` | patience 3, min_delta 1e-3 |

The ratio alerts and the gap wait until ``min_history`` finite values of what they compare with
have been seen (default 5), so the first steps of a run cannot fire them.

Rules that make the policy usable on a real run:

* **Cooldown, per kind.** After an alert of a kind fires at step ``s``, that kind stays silent
  until step ``s + cooldown`` (default 10; 0 disables it). A suppressed alert does not restart the
  cooldown. Kinds do not share a cooldown: a gradient spike right after a loss spike still fires.
* **A non-finite step is quarantined.** If any value passed at a step is not finite, ``observe``
  returns exactly one ``non-finite`` alert (its ``fields`` name the culprits) and nothing else, and
  changes no state: no running statistic takes any of that step's values (finite ones included),
  the best validation loss and the plateau counter stay as they were, no cooldown starts. And it
  **bypasses the cooldown**: every non-finite step alerts, however many come in a row.

Limits: the policy sees only the numbers it is given, one step at a time; a slow drift that never
exceeds a ratio of its own recent median never fires; the median of a short window is noisy, so
tune the ratios on your run's healthy history (the notebook's widget does this on a recorded run).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field

KINDS = ("non-finite", "loss-spike", "grad-spike", "throughput-drop", "val-gap", "val-plateau")
FIELDS = ("loss", "grad_norm", "tokens_per_s", "val_loss")


@dataclass(frozen=True)
class Alert:
    """One alert: its step and kind, the value that fired it and what that value was compared with
    (``reference``: the threshold it crossed; NaN for ``non-finite``)."""

    step: int
    kind: str
    value: float = math.nan
    reference: float = math.nan
    fields: tuple[str, ...] = ()  # for non-finite: which values were not finite

    def __str__(self) -> str:
        if self.kind == "non-finite":
            return f"step {self.step}: non-finite {', '.join(self.fields)}"
        return f"step {self.step}: {self.kind} ({self.value:.4g} vs threshold {self.reference:.4g})"


@dataclass
class AlertPolicy:
    """The reference policy (see the module docstring for the contract). Its state is public so a
    learner's own ``observe`` can be written from the same parts: ``non_finite``, ``candidates``,
    ``in_cooldown``, ``record_fired``, ``update``."""

    window: int = 20
    min_history: int = 5
    loss_ratio: float = 1.5
    grad_ratio: float = 3.0
    throughput_drop: float = 0.5
    val_gap: float = 0.3
    patience: int = 3
    min_delta: float = 1e-3
    cooldown: int = 10
    # state
    losses: deque = field(default=None, repr=False)
    grads: deque = field(default=None, repr=False)
    throughputs: deque = field(default=None, repr=False)
    best_val: float = math.inf
    evals_since_best: int = 0
    last_fired: dict = field(default_factory=dict)

    def __post_init__(self):
        self.losses = deque(maxlen=self.window)
        self.grads = deque(maxlen=self.window)
        self.throughputs = deque(maxlen=self.window)

    # ----- the parts -------------------------------------------------------------------------------
    @staticmethod
    def non_finite(**values) -> tuple[str, ...]:
        """The names of the values given (not None) that are NaN or infinite, in ``FIELDS`` order."""
        return tuple(k for k in FIELDS if values.get(k) is not None and not math.isfinite(values[k]))

    def _median(self, values) -> float | None:
        return statistics.median(values) if len(values) >= self.min_history else None

    def candidates(self, step, loss=None, grad_norm=None, tokens_per_s=None, val_loss=None) -> list[Alert]:
        """Every alert the (finite) values of this step would raise against the state *before* this
        step, cooldown ignored. Changes nothing."""
        found = []
        ref = self._median(self.losses)
        if loss is not None and ref is not None and loss > self.loss_ratio * ref:
            found.append(Alert(step, "loss-spike", loss, self.loss_ratio * ref))
        ref = self._median(self.grads)
        if grad_norm is not None and ref is not None and grad_norm > self.grad_ratio * ref:
            found.append(Alert(step, "grad-spike", grad_norm, self.grad_ratio * ref))
        ref = self._median(self.throughputs)
        if tokens_per_s is not None and ref is not None and tokens_per_s < (1 - self.throughput_drop) * ref:
            found.append(Alert(step, "throughput-drop", tokens_per_s, (1 - self.throughput_drop) * ref))
        if val_loss is not None:
            ref = self._median(self.losses)
            if ref is not None and val_loss - ref > self.val_gap:
                found.append(Alert(step, "val-gap", val_loss, ref + self.val_gap))
            improved = val_loss < self.best_val - self.min_delta
            if not improved and self.evals_since_best + 1 >= self.patience:
                found.append(Alert(step, "val-plateau", val_loss, self.best_val - self.min_delta))
        return found

    def in_cooldown(self, alert: Alert) -> bool:
        """True if an alert of the same kind fired less than ``cooldown`` steps before this one."""
        last = self.last_fired.get(alert.kind)
        return last is not None and alert.step - last < self.cooldown

    def record_fired(self, alert: Alert) -> None:
        """Start the cooldown of ``alert``'s kind."""
        self.last_fired[alert.kind] = alert.step

    def update(self, loss=None, grad_norm=None, tokens_per_s=None, val_loss=None) -> None:
        """Advance the state with this step's values (call only when all of them are finite)."""
        for value, store in ((loss, self.losses), (grad_norm, self.grads), (tokens_per_s, self.throughputs)):
            if value is not None:
                store.append(value)
        if val_loss is not None:
            if val_loss < self.best_val - self.min_delta:
                self.best_val, self.evals_since_best = val_loss, 0
            else:
                self.evals_since_best += 1

    # ----- the reference orchestration -------------------------------------------------------------
    def observe(self, step, loss=None, grad_norm=None, tokens_per_s=None, val_loss=None) -> list[Alert]:
        """The alerts raised at ``step`` (see the contract above)."""
        values = dict(loss=loss, grad_norm=grad_norm, tokens_per_s=tokens_per_s, val_loss=val_loss)
        bad = self.non_finite(**values)
        if bad:
            return [Alert(step, "non-finite", fields=bad)]
        fired = [a for a in self.candidates(step, **values) if not self.in_cooldown(a)]
        for a in fired:
            self.record_fired(a)
        self.update(**values)
        return fired


def replay_alerts(policy: AlertPolicy, history: dict, val: dict | None = None, observe=None) -> list[Alert]:
    """Feed a recorded run (``Run.history`` and optionally ``Run.val``) through ``policy`` step by
    step and return every alert. ``observe(policy, step, **values)`` defaults to ``policy.observe``.
    Throughput is not fed (wall times differ between runs); a validation loss recorded after step
    ``s`` (``val["step"] == s + 1``) is passed with step ``s``."""
    observe = observe or (lambda p, step, **v: p.observe(step, **v))
    vals = dict(zip([s - 1 for s in val["step"]], val["loss"])) if val else {}
    alerts = []
    for step, loss, grad in zip(history["step"], history["loss"], history["grad_norm"]):
        alerts += observe(policy, step, loss=loss, grad_norm=grad, val_loss=vals.get(step))
    return alerts


# ----- an explorer widget --------------------------------------------------------------------------
def alert_explorer(history: dict, val: dict | None = None, baselines: dict | None = None, title: str = ""):
    """A widget over a recorded run: sliders for the loss and gradient ratios, the window and the
    cooldown; its ``Output`` shows the loss curve with every alert marked, and the list of alerts.

    Returns ``(box, controls, output)``: ``controls`` maps names to the sliders, so a test can set
    ``controls["cooldown"].value`` and read ``output.outputs`` (no kernel needed). The output is
    written with ``Output.outputs`` directly, so it also works without a running kernel.
    """
    import base64
    import io

    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    controls = {
        "loss_ratio": widgets.FloatSlider(value=1.5, min=1.05, max=3.0, step=0.05, description="loss ratio"),
        "grad_ratio": widgets.FloatSlider(value=3.0, min=1.1, max=10.0, step=0.1, description="grad ratio"),
        "window": widgets.IntSlider(value=20, min=5, max=100, step=5, description="window"),
        "cooldown": widgets.IntSlider(value=10, min=0, max=100, step=1, description="cooldown"),
    }
    output = widgets.Output()

    def render(_=None):
        policy = AlertPolicy(**{k: c.value for k, c in controls.items()})
        alerts = replay_alerts(policy, history, val)
        lines = [f"{len(alerts)} alerts with {', '.join(f'{k}={c.value}' for k, c in controls.items())}"]
        lines += [str(a) for a in alerts[:12]] + ([f"... and {len(alerts) - 12} more"] if len(alerts) > 12 else [])
        fig, ax = plt.subplots(figsize=(7, 3.2))
        ax.plot(history["step"], history["loss"], linewidth=1, label="training loss")
        for name, value in (baselines or {}).items():
            ax.axhline(value, color="grey", linestyle=":", linewidth=1)
            ax.annotate(name, (history["step"][0], value), fontsize=7, color="grey", va="bottom")
        colours = {"loss-spike": "tab:red", "grad-spike": "tab:orange", "val-gap": "tab:purple",
                   "val-plateau": "tab:brown", "non-finite": "black", "throughput-drop": "tab:green"}
        loss_at = dict(zip(history["step"], history["loss"]))
        for kind in colours:
            steps = [a.step for a in alerts if a.kind == kind]
            if steps:
                ax.scatter(steps, [loss_at[s] for s in steps], color=colours[kind], s=25, zorder=3, label=kind)
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (nats)")
        ax.set_title(title or "alerts fired on the recorded run")
        ax.legend(fontsize=7, loc="upper left")
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=72, bbox_inches="tight")
        plt.close(fig)
        output.outputs = (
            {"output_type": "stream", "name": "stdout", "text": "\n".join(lines) + "\n"},
            {"output_type": "display_data", "metadata": {},
             "data": {"image/png": base64.b64encode(buf.getvalue()).decode("ascii"), "text/plain": "<Figure>"}},
        )

    for c in controls.values():
        c.observe(render, names="value")
    render()
    return widgets.VBox([widgets.HBox(list(controls.values())[:2]), widgets.HBox(list(controls.values())[2:]), output]), controls, output
