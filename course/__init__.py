"""Shared machinery of the course *Debugging neural-network training runs*.

* ``course.reference.data``: the Markov language with exact baselines, batches, a small real text;
* ``course.reference.model``: a tiny causal transformer with positions and a KV cache;
* ``course.reference.pipeline``: the reference recipe as replaceable parts;
* ``course.reference.train``: the instrumented loop, evaluation, checkpoints;
* ``course.bugs``: the catalogue of injectable bugs;
* ``course.toolkit.checks`` and ``course.toolkit.baselines``: the diagnostic tools;
* ``course.toolkit.plots`` and ``course.exercises.record``: loss plots with reference lines, the diagnosis record.
* ``course.toolkit.nonfinite``: the first-non-finite locator and the NaN decision tree (notebook 02);
* ``course.toolkit.overfit``, ``course.toolkit.preflight``, ``course.lessons.sft``, ``course.lessons.adapters``, ``course.toolkit.telemetry``:
  overfit controls, the pre-flight, SFT masks, adapters, per-layer telemetry (notebook 03);
* ``course.toolkit.alerts``, ``course.lessons.replay``, ``course.lessons.distributed``: the alert policy, replay and
  rewind-and-skip, two gloo ranks with a checksum (notebook 04);
* ``course.toolkit.overlap``, ``course.lessons.valgap``: the overlap audit and the validation-gap tests (notebook 05).
* ``course.toolkit.phases``, ``course.lessons.throughput``: phase timing, the cost model, the async-save race (06);
* ``course.lessons.manifest``, ``course.reference.checkpoint``: run manifests, atomic checkpoints, restore (07);
* ``course.lessons.generate``: generation on the KV cache and its consistency checks (08);
* ``course.lessons.harness``: a multiple-choice evaluation harness and its statistics (09);
* ``course.exercises.capstone``, ``course.exercises.identity``: the capstone's families and the draw keyed by a name (11).
"""

from .toolkit.batch import IGNORE, Batch
from .reference.data import MarkovLanguage
from .reference.model import ModelConfig, TinyGPT
from .reference.pipeline import Pipeline
from . import bugs  # noqa: E402,F401  (registers every bug family in the catalogue)
from .exercises import isolation as _isolation, mystery as _mystery  # noqa: E402,F401  (bound at import: the grading kernel imports course first)

__all__ = ["IGNORE", "Batch", "MarkovLanguage", "ModelConfig", "TinyGPT", "Pipeline"]
