"""Shared machinery of the course *Debugging neural-network training runs*.

Four layers and the bug catalogue (``tests/test_layout.py`` checks who may import whom, and that
no import, inside functions included, closes a cycle):

* ``course.toolkit``: works on any model and run (a model, a batch, a loss function, an
  optimizer), imports only itself. ``batch`` (the batch contract, ``IGNORE``, the next-token loss),
  ``outputs`` (the logits adapter), ``checks`` and ``baselines``, ``nonfinite`` (the locator and
  the NaN decision tree), ``overfit`` and ``preflight``, ``telemetry``, ``alerts``, ``overlap``,
  ``phases`` (phase clocks, the cost model), ``plots``, ``guards`` (warnings to stdout, functions
  switched off), ``salts`` (the grader's secret mixed into hidden draws while a test is graded).
* ``course.reference``: the course's own run; imports the toolkit and itself. ``data`` (the Markov
  language with exact baselines), ``model`` (a tiny causal transformer with a KV cache),
  ``pipeline`` (the recipe as replaceable parts) and ``parts`` (the healthy defaults of the later
  notebooks' parts), ``train`` (the instrumented loop), ``checkpoint`` (atomic save, restore, the
  resume check), ``diagnose`` (the toolkit's checks on a ``Pipeline``, which train it).
* ``course.lessons``: one module per notebook topic that is not toolkit: ``sft`` and ``adapters``
  (03), ``replay`` and ``distributed`` (04), ``valgap`` (05), ``throughput`` (06), ``manifest``
  (07), ``generate`` (08), ``harness`` (09), ``amp`` (10).
* ``course.bugs``: the catalogue of injectable bugs, one module per family.
* ``course.exercises``: the exercise and grading machinery: ``mystery``, ``sets`` (each notebook's
  visible mysteries), ``grading``, ``isolation`` and ``pristine`` (what a graded call runs on),
  ``capstone`` and ``identity`` (11), ``record`` (the diagnosis record).

Re-exported here: ``IGNORE``, ``Batch``, ``MarkovLanguage``, ``ModelConfig``, ``TinyGPT``,
``Pipeline``. Everything else is imported by its full path (``from course.toolkit import checks``).
"""

from .toolkit.batch import IGNORE, Batch
from .reference.data import MarkovLanguage
from .reference.model import ModelConfig, TinyGPT
from .reference.pipeline import Pipeline
from . import bugs  # noqa: E402,F401  (registers every bug family in the catalogue)
from .exercises import isolation as _isolation, mystery as _mystery  # noqa: E402,F401  (bound at import: the grading kernel imports course first)

__all__ = ["IGNORE", "Batch", "MarkovLanguage", "ModelConfig", "TinyGPT", "Pipeline"]
