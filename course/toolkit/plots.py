"""Loss plots that always carry their reference lines."""

from __future__ import annotations

import matplotlib.pyplot as plt

LINE_STYLES = {"uniform ln(V)": ":", "unigram H(pi)": "--", "window floor": "-."}


def loss_plot(curves: dict[str, list[float]], baselines: dict[str, float], ax=None, title: str = "", ylim=None):
    """Plot each named loss curve against the step, with a grey horizontal line per baseline.

    ``baselines`` is usually ``pipe.language().baselines(pipe.seq_len)``. Returns the axes.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    for label, losses in curves.items():
        ax.plot(range(len(losses)), losses, label=label, linewidth=1.2)
    for label, value in baselines.items():
        ax.axhline(value, color="grey", linestyle=LINE_STYLES.get(label, "-"), linewidth=1)
        ax.annotate(f"{label} = {value:.3f}", (1.0, value), xycoords=("axes fraction", "data"),
                    xytext=(4, 0), textcoords="offset points", va="center", fontsize=8, color="grey")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats per scored token)")
    if ylim is not None:
        ax.set_ylim(*ylim)
    if title:
        ax.set_title(title)
    ax.legend(loc="best", fontsize=8)
    return ax
