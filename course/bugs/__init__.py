"""The catalogue of injectable bugs.

Each bug is a named, documented function ``Pipeline -> Pipeline`` that breaks exactly one part of the
reference pipeline, the way real code gets broken. ``inject(pipe, name)`` applies one; ``catalogue()``
lists them. Every entry says which family of symptom it belongs to, so notebooks can draw broken
pipelines by family and hidden tests can draw variants the learner has not seen.

Families, and the module of this package that holds them:

* ``no-updates``: the loss does not move, because the parameters do not change (``basic``).
* ``context-unused``: the loss falls, but stalls at or near the unigram or bigram entropy, because the
  model cannot use the tokens before the one it predicts from (``basic``).
* ``too-good``: the loss falls below the entropy rate, which no honest model can do (``basic``).
* ``bad-loss``: the loss is NaN, or measures the wrong thing (``basic``).
* ``batch``: the batch itself breaks its contract; a check on one batch catches it before any step
  (``basic``).
* ``non-finite``: a loss, activation or gradient becomes inf or NaN (notebook 02, ``nonfinite``).
* ``wrong-gradient``: parameters move, but by the wrong gradient: accumulated, mis-shaped,
  supervising the wrong tokens (notebook 03, ``fitting``), or mixing the examples of a batch
  (notebook 03, ``mixing``, which also holds one ``context-unused`` bug: a batch-mixing reshape).
* ``late-spike``: a run that is healthy until, at one step, a bad shard of data or an optimizer
  fault makes the loss jump (notebook 04, ``spike``).
* ``val-gap``: training improves while validation worsens, or the two are not measured alike
  (notebook 05, ``validation``).
* ``leakage``: validation shares data with training, so it looks better than it is (notebook 05,
  ``validation``).
* ``throughput``, ``resume``, ``generation``, ``evaluation``: the families of notebooks 06 to 09,
  each registered by its own module here.
* ``lr-instability``: a run that spikes early or trains worse than it should, from its schedule,
  its optimizer's constants or its initialisation (notebook 12, ``instability``).

To add a bug, write a function of a pipeline in the family's module, decorate it with
``@bug(family, symptom)`` (from ``.registry``) and import the module below; the training loop does
not change.
"""

from .registry import FAMILIES, Bug, bug, catalogue, get, inject

# Importing the family modules registers their bugs, so catalogue() always lists every bug.
from . import basic, fitting, nonfinite, spike, validation  # noqa: E402,F401
from . import throughput, resume, generation, evaluation  # noqa: E402,F401
from . import amp, precision  # noqa: E402,F401  (notebook 10: families "amp-memory", "fp16-overflow")
from . import instability  # noqa: E402,F401  (notebook 12: family "lr-instability")
from . import mixing  # noqa: E402,F401  (notebook 03's dependency test: "wrong-gradient", "context-unused")

__all__ = ["FAMILIES", "Bug", "bug", "catalogue", "get", "inject"]
