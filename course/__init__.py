"""Shared machinery of the course *Debugging neural-network training runs*.

* ``course.data``: the Markov language with exact baselines, batches, a small real text;
* ``course.model``: a tiny causal transformer with positions and a KV cache;
* ``course.pipeline``: the reference recipe as replaceable parts;
* ``course.train``: the instrumented loop, evaluation, checkpoints;
* ``course.bugs``: the catalogue of injectable bugs;
* ``course.checks`` and ``course.baselines``: the diagnostic tools;
* ``course.plots`` and ``course.record``: loss plots with reference lines, the diagnosis record.
* ``course.nonfinite``: the first-non-finite locator and the NaN decision tree (notebook 02);
* ``course.overfit``, ``course.preflight``, ``course.sft``, ``course.adapters``, ``course.telemetry``:
  overfit controls, the pre-flight, SFT masks, adapters, per-layer telemetry (notebook 03);
* ``course.alerts``, ``course.replay``, ``course.distributed``: the alert policy, replay and
  rewind-and-skip, two gloo ranks with a checksum (notebook 04);
* ``course.overlap``, ``course.valgap``: the overlap audit and the validation-gap tests (notebook 05).
* ``course.phases``, ``course.throughput``: phase timing, the cost model, the async-save race (06);
* ``course.manifest``, ``course.checkpoint``: run manifests, atomic checkpoints, restore (07);
* ``course.generate``: generation on the KV cache and its consistency checks (08);
* ``course.harness``: a multiple-choice evaluation harness and its statistics (09);
* ``course.capstone``, ``course.identity``: the capstone's families and the draw keyed by a name (11).
"""

from .data import IGNORE, Batch, MarkovLanguage
from .model import ModelConfig, TinyGPT
from .pipeline import Pipeline
from . import bugs  # noqa: E402,F401  (registers every bug family in the catalogue)
from . import isolation, mystery  # noqa: E402,F401  (bound at import: the grading kernel imports course first)

__all__ = ["IGNORE", "Batch", "MarkovLanguage", "ModelConfig", "TinyGPT", "Pipeline"]
