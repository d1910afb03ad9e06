"""Replay a batch from the last good state, and rewind-and-skip as logged containment (notebook 04).

What a loop must save so a spike can be replayed later: checkpoints every ``k`` steps (model,
optimizer, scheduler, RNG and data cursor: ``course.reference.train.save_checkpoint``) and, per step, the
identity of the batch it trained on (its data index: ``step + run.data_offset``). With both, the
question "was it this batch, or the state it met?" becomes an experiment: resume the checkpoint just
before the spike, and train on the same data index, or on another one.

Rewind-and-skip (PaLM, Chowdhery et al. 2022, section 5.1): when a spike appeared, they restarted
from a checkpoint about 100 steps before it and skipped about 200-500 data batches; they report
that replaying those batches from an earlier checkpoint did not spike, so they attribute spikes to a
batch meeting a particular parameter state. That is an empirical workaround reported for one family
of runs, not a recipe and not a fix: skipping changes the data the model sees, so every skip here is
logged (where, how many, and a digest of the tokens that were left out).

Contract: everything is deterministic on CPU for a fixed seed; a replay from a checkpoint is
bit-identical to the original run over the same data indices.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..reference.model import ModelConfig
from ..reference.pipeline import Pipeline
from ..reference.train import Run, batch_at, resume, save_checkpoint, start, train_steps

# A small, fast version of the reference recipe (one layer, 16-token windows, 32 windows a batch):
# 360 steps take about 3 s on one CPU thread. Its schedule runs to step 1000, so the learning rate
# is still high (between 1e-2 and 6e-3) over the steps notebook 04 trains.
SPIKE_PIPE = Pipeline().replace(
    seq_len=16,
    model=ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
    n_train=8192,
    n_val=256,
    batch_size=32,
    steps=1000,
    warmup=20,
)


@dataclass
class StepLog:
    """An ``on_step`` callback for ``train_steps`` that records, per step, what a spike is correlated
    with and the history does not hold: the batch's data index; Adam's state after the step, as the
    mean of its second moment ``exp_avg_sq`` over every parameter (``adam_v``) and the mean size of
    the step it takes per coordinate in units of the learning rate, ``|m_hat| / (sqrt(v_hat) + eps)``
    (``adam_step``: about 1 when the gradient keeps its sign, small when it is noise); and the largest
    share of one token among the batch's inputs (``top_token_share``: 1.0 for one repeated token)."""

    step: list = field(default_factory=list)
    batch: list = field(default_factory=list)
    adam_v: list = field(default_factory=list)
    adam_step: list = field(default_factory=list)
    top_token_share: list = field(default_factory=list)

    def __call__(self, run: Run, step: int, batch) -> None:
        self.step.append(step)
        self.batch.append(step + run.data_offset)
        states = [s for s in run.optimizer.state.values() if "exp_avg_sq" in s]
        if states:
            group = run.optimizer.param_groups[0]
            (b1, b2), eps = group["betas"], group["eps"]
            t = float(states[0]["step"])
            v = torch.cat([s["exp_avg_sq"].reshape(-1) for s in states])
            m = torch.cat([s["exp_avg"].reshape(-1) for s in states])
            m_hat, v_hat = m / (1 - b1 ** t), v / (1 - b2 ** t)
            self.adam_v.append(v.mean().item())
            self.adam_step.append((m_hat.abs() / (v_hat.sqrt() + eps)).mean().item())
        else:
            self.adam_v.append(float("nan"))
            self.adam_step.append(float("nan"))
        counts = torch.bincount(batch.inputs.reshape(-1))
        self.top_token_share.append(counts.max().item() / batch.inputs.numel())


def checkpoint_path(folder, step: int) -> Path:
    return Path(folder) / f"step{step:06d}.pt"


def train_with_checkpoints(pipe: Pipeline, steps: int, folder, every: int, seed: int = 0, log: StepLog | None = None,
                           eval_every: int = 0, progress: bool = False) -> Run:
    """Train a fresh run for ``steps`` steps, saving a checkpoint at step 0 and every ``every`` steps
    (a checkpoint named ``step000300.pt`` holds the state *before* step 300 runs)."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    run = start(pipe, seed)
    while run.step < steps:
        if run.step % every == 0:
            save_checkpoint(run, checkpoint_path(folder, run.step))
        train_steps(run, min(every - run.step % every, steps - run.step), eval_every=eval_every,
                    progress=progress, on_step=log)
    return run


def checkpoints(folder) -> dict[int, Path]:
    """The checkpoints saved in ``folder``, by the step they resume at."""
    return {int(p.stem[4:]): p for p in sorted(Path(folder).glob("step*.pt"))}


def last_good(folder, step: int) -> int:
    """The latest checkpoint step at or before ``step`` (its state has not yet seen step ``step``)."""
    good = [s for s in checkpoints(folder) if s <= step]
    if not good:
        raise ValueError(f"no checkpoint at or before step {step} in {folder}")
    return max(good)


def replay(pipe: Pipeline, folder, from_step: int, steps: int, skip: int = 0, log: StepLog | None = None) -> Run:
    """Resume the checkpoint of ``from_step`` and train ``steps`` steps; with ``skip`` > 0 the data
    cursor first jumps over ``skip`` batches, so the same state meets different data."""
    run = resume(pipe, checkpoint_path(folder, from_step))
    run.data_offset += skip
    return train_steps(run, steps, eval_every=0, on_step=log)


def data_digest(pipe: Pipeline, seed: int, indices) -> str:
    """A short SHA-256 of the input tokens of the batches at ``indices``, in order."""
    h = hashlib.sha256()
    for i in indices:
        h.update(batch_at(pipe, seed, i).inputs.numpy().tobytes())
    return h.hexdigest()[:16]


def token_counts(pipe: Pipeline, seed: int, indices) -> torch.Tensor:
    """How often each token id appears among the inputs of the batches at ``indices``."""
    V = pipe.language().vocab_size
    total = torch.zeros(V, dtype=torch.long)
    for i in indices:
        total += torch.bincount(batch_at(pipe, seed, i).inputs.reshape(-1), minlength=V)
    return total


@dataclass(frozen=True)
class Skip:
    """One logged skip: at optimizer step ``at_step`` the data cursor jumped over data indices
    ``first`` to ``first + n - 1``; ``digest`` identifies the tokens left out."""

    at_step: int
    first: int
    n: int
    reason: str
    digest: str

    def __str__(self) -> str:
        return (f"at step {self.at_step}: skipped data indices {self.first}..{self.first + self.n - 1} "
                f"({self.n} batches, digest {self.digest}): {self.reason}")


def rewind_and_skip(pipe: Pipeline, folder, spike_step: int, rewind: int, n_skip: int, steps: int,
                    log: StepLog | None = None) -> tuple[Run, list[Skip]]:
    """Resume the last checkpoint at or before ``spike_step - rewind``, skip the next ``n_skip``
    batches of the data stream (logged), then train ``steps`` steps. Returns the run and the skip log."""
    at = last_good(folder, spike_step - rewind)
    run = resume(pipe, checkpoint_path(folder, at))
    first = run.step + run.data_offset
    skip = Skip(at, first, n_skip, f"loss spike at step {spike_step}; rewound {spike_step - at} steps",
                data_digest(pipe, run.seed, range(first, first + n_skip)))
    run.data_offset += n_skip
    train_steps(run, steps, eval_every=0, on_step=log)
    return run, [skip]


# ----- a data stream that quarantines batches that fail a check ------------------------------------
@dataclass(frozen=True)
class Quarantined:
    """One logged decision: the batch at data index ``index`` of the source was left out, and why."""

    index: int
    reason: str

    def __str__(self) -> str:
        return f"quarantined data index {self.index}: {self.reason}"


@dataclass(eq=False)
class Quarantine:
    """A ``batches`` part that checks every batch of a source stream before the loop may train on it
    and removes the ones that fail: data index ``i`` of the guarded stream is the ``i``-th source
    batch that passed ``check`` (``check(batch)`` returns a reason to reject it, or None). Every
    rejection is logged once in ``log``. ``source`` is a ``batches`` part; None means the reference
    stream (``course.reference.train.batch_at`` of the pipeline without its ``batches`` part).

    Removing batches shifts every later data index: until the first rejection the guarded stream is
    the source stream, so a run resumed from a checkpoint saved before it continues identically."""

    source: object
    check: object
    log: list = field(default_factory=list)
    _clean: dict = field(default_factory=dict, repr=False)
    _next: dict = field(default_factory=dict, repr=False)

    def _source_batch(self, pipe: Pipeline, seed: int, index: int):
        if self.source is None:
            return batch_at(pipe.replace(batches=None), seed, index)
        return self.source(pipe, seed, index)

    def __call__(self, pipe: Pipeline, seed: int, index: int):
        clean = self._clean.setdefault(seed, [])
        while len(clean) <= index:
            src = self._next.get(seed, 0)
            reason = self.check(self._source_batch(pipe, seed, src))
            if reason:
                self.log.append(Quarantined(src, reason))
            else:
                clean.append(src)
            self._next[seed] = src + 1
        return self._source_batch(pipe, seed, clean[index])


# ----- the mystery exercise of notebook 04 ---------------------------------------------------------
# A still smaller schedule for mystery draws, over 8 symbols so the model has learned most of the
# language by step 60: the late-spike bugs strike at 30% of ``steps`` (step 60),
# so MYSTERY_STEPS steps show a spike if there is one; one such run takes about half a second.
MYSTERY_PIPE = SPIKE_PIPE.replace(n_symbols=8, steps=200, n_train=2048, n_val=64)
MYSTERY_STEPS = 75
MYSTERY_CANDIDATES = ("healthy", "corrupted-shard", "garbled-shard", "lr-burst")


def spike_alerts(pipe: Pipeline, seed: int = 0, steps: int = MYSTERY_STEPS, loss_ratio: float = 1.4,
                 window: int = 10) -> list:
    """The loss-spike alerts of ``course.toolkit.alerts.AlertPolicy`` (``loss_ratio``, ``window``) over a
    fresh run of ``pipe`` (seed ``seed``, ``steps`` steps): the detector the mystery exercise grades
    a fix with. Switched off while a learner's detector is graded."""
    from ..toolkit.alerts import AlertPolicy, replay_alerts
    from ..reference.train import start, train_steps

    run = train_steps(start(pipe, seed), steps, eval_every=0)
    return [a for a in replay_alerts(AlertPolicy(loss_ratio=loss_ratio, window=window), run.history)
            if a.kind == "loss-spike"]


def spike_symptom(pipe: Pipeline, seed: int = 0) -> str | None:
    """A behavioural check of a fixed mystery pipeline (for ``course.exercises.mystery.check_fix``): None if a
    fresh run (seed ``seed``) raises no loss-spike alert and at least 90% of its first
    ``MYSTERY_STEPS`` batches are ordinary data, i.e. batches of the reference stream (among its first
    ``MYSTERY_STEPS + 2 * SHARD_LEN``, so removing a few bad batches is allowed, replacing the ordinary
    data is not); else what is wrong."""
    from ..bugs.spike import SHARD_LEN

    if pipe.batches is not None:
        reference = pipe.replace(batches=None)

        def key(batch):
            return batch.inputs.numpy().tobytes() + batch.targets.numpy().tobytes()

        ordinary = {key(batch_at(reference, seed, i)) for i in range(MYSTERY_STEPS + 2 * SHARD_LEN)}
        same = len({key(batch_at(pipe, seed, i)) for i in range(MYSTERY_STEPS)} & ordinary)  # distinct ones
        if same < 0.9 * MYSTERY_STEPS:
            return (f"only {same} of the first {MYSTERY_STEPS} batches of the fixed pipeline are ordinary data: "
                    "a fix may remove bad batches, not replace the data that was not broken")
    alerts = spike_alerts(pipe, seed)
    if alerts:
        return f"a fresh run of the fixed pipeline still spikes: {alerts[0]}"
    return None
