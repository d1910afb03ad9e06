"""Each notebook's visible mysteries: the candidate bugs, the base pipeline and the seeds.

One source for the notebook, which draws the mysteries the learner investigates from it, and for
its test cells, which draw the same ones again: a test cell never reads the notebook's own
``mysteries`` or ``CANDIDATES``, since a learner may rebind them, even by accident
(``tests/test_test_cells.py``). The draws are deterministic (``course.exercises.mystery.draw``),
so the test cell grades the very mysteries the notebook showed, as new objects.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..reference.model import ModelConfig
from ..reference.pipeline import Pipeline
from . import mystery


@dataclass(frozen=True)
class MysterySet:
    """The visible mysteries of one notebook: ``draws()`` gives ``{label: drawn pipeline}``."""
    candidates: tuple[str, ...]
    base: Pipeline
    seeds: tuple[int, ...]
    label: str = "mystery {}"
    causes: tuple[tuple[str, str], ...] = ()  # (bug, the name a learner's namer must give it), where graded

    def cause(self, bug: str) -> str:
        """The name a namer must give ``bug`` (KeyError for a bug the set does not name)."""
        return dict(self.causes)[bug]

    def draws(self) -> dict[str, Pipeline]:
        """The visible draws, labelled as the notebook labels them."""
        return {self.label.format(s): mystery.draw(self.candidates, seed=s, base=self.base) for s in self.seeds}


_TINY_MODEL = ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64)
_TINY_DROPOUT_MODEL = ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64, dropout=0.1)
# notebook 10's BASE: both its mysteries draw on it
_AMP_BASE = Pipeline().replace(n_symbols=8, seq_len=16, model=_TINY_MODEL, n_train=512, n_val=64, batch_size=16,
                               steps=20, lr=1e-2, warmup=5)

SETS = {
    "01_baselines": MysterySet(
        candidates=("healthy", "healthy", "missing-step", "lr-zero", "no-positions", "attend-self-only",
                    "targets-shifted-twice", "unshifted-targets", "causal-mask-off"),
        base=Pipeline(n_symbols=8, seq_len=16, batch_size=32, steps=200, n_train=2048, n_val=128, warmup=20),
        seeds=tuple(range(14)),
        causes=(("healthy", "healthy"), ("missing-step", "no-step"), ("lr-zero", "lr-zero"),
                ("requires-grad-off", "requires-grad-off"), ("optimizer-on-stale-model", "not-in-optimizer"),
                ("embedding-not-in-optimizer", "not-in-optimizer"), ("clip-to-zero", "grads-vanish"),
                ("no-positions", "positions-unused"), ("attend-self-only", "context-masked"),
                ("causal-mask-off", "future-visible"), ("targets-shifted-twice", "targets-misaligned"),
                ("unshifted-targets", "targets-misaligned"))),
    "02_nan_decision_tree": MysterySet(
        candidates=("healthy", "embedding-scaled-by-inf", "causal-mask-strict", "loss-scaled-in-fp16",
                    "log-guarded-by-where", "adam-eps-zero", "lr-sign-typo"),
        base=Pipeline(seq_len=8, model=ModelConfig(n_ctx=8, d_model=32, n_head=2, n_layer=2, d_mlp=96),
                      batch_size=32, n_train=1024, steps=200),
        seeds=(0, 1, 2, 3, 6, 10), label="m{}"),
    "05_validation_gap": MysterySet(
        candidates=("healthy", "eval-label-smoothing", "dropout-left-on-in-eval", "train-set-too-small",
                    "val-from-another-source", "val-overlaps-train"),
        base=Pipeline().replace(seq_len=16, model=_TINY_DROPOUT_MODEL, n_train=2048, n_val=256, batch_size=16, steps=45, lr=3e-2, warmup=10),
        seeds=(1, 2, 6, 7, 9, 10, 11)),
    "06_throughput": MysterySet(
        candidates=("healthy", "sync-checkpoint-every-k", "eval-every-step", "item-per-parameter-logging",
                    "data-source-stalls"),
        base=Pipeline().replace(seq_len=16, model=_TINY_MODEL, n_train=2048, n_val=128, batch_size=16, steps=48,
                                lr=3e-2, warmup=10),
        seeds=(1, 2, 3, 6, 7, 9)),
    "07_stale_resume": MysterySet(
        candidates=("healthy", "stale-lr-resume", "optimizer-state-dropped", "scheduler-dropped", "rng-dropped",
                    "data-cursor-reset"),
        base=Pipeline().replace(seq_len=16, model=_TINY_DROPOUT_MODEL, n_train=1024, n_val=64, batch_size=16, steps=40, lr=1e-2, warmup=5),
        seeds=(1, 2, 6, 7, 9, 10, 11)),
    "08_generation": MysterySet(
        candidates=("healthy", "causal-mask-off", "kv-cache-position-offset", "kv-cache-not-appended",
                    "first-position-logits", "temperature-after-softmax"),
        base=Pipeline().replace(n_symbols=8, seq_len=16, model=_TINY_MODEL, n_train=4096, n_val=256, batch_size=32,
                                steps=300, lr=3e-2, warmup=10),
        seeds=(1, 2, 4, 6, 7, 9, 10)),
    "09_eval_harness": MysterySet(
        candidates=("healthy", "option-without-delimiter", "fewshot-count-ignored", "template-differs-from-training",
                    "truncation-cuts-question", "prompt-tokens-scored", "norm-by-token-count"),
        base=Pipeline(),
        seeds=(1, 2, 3, 6, 10, 11, 13, 19)),
    "10_amp_memory/fp16": MysterySet(
        candidates=("healthy", "logit-temperature", "mlp-weights-scaled", "lr-hundredfold"),
        base=_AMP_BASE,
        seeds=(1, 2, 3, 6, 7, 10), label="fp16 mystery {}"),
    "10_amp_memory/leak": MysterySet(
        candidates=("healthy", "loss-kept-with-graph", "monitor-kept-with-graph"),
        base=_AMP_BASE,
        seeds=(1, 2, 3, 5, 9, 10)),
    "12_lr_instability": MysterySet(
        candidates=("healthy", "healthy", "warmup-skipped", "adam-eps-large", "init-too-small"),
        base=Pipeline().replace(n_symbols=8, seq_len=16, model=_TINY_MODEL, n_train=2048, n_val=128, batch_size=32,
                                steps=60, lr=3e-2, warmup=10),
        seeds=(0, 2, 6, 9, 11, 5),
        causes=(("healthy", "healthy"), ("warmup-skipped", "schedule"), ("warmup-in-examples", "schedule"),
                ("adam-eps-large", "optimizer"), ("adam-beta2-low", "optimizer"), ("init-too-small", "init"))),
}
