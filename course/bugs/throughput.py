"""Bugs of notebook 06 (family ``throughput``): a run that slows down at a step.

Registered in the catalogue of ``course.bugs`` when ``course`` is imported.

Each bug swaps one part of the pipeline for one that does extra work in one phase of the step. Work
that this small CPU model cannot make expensive for real (writing to a slow disk, a device
synchronisation, a stalled data server) is **charged** with ``course.toolkit.phases.charge``: the wall clock
sleeps that long, the seeded cost model (``course.toolkit.phases.CostModel``) adds it to the phase. The costs
are module constants below, so a notebook can state them. Where a bug has a setting (how often it
checkpoints, when the data source starts stalling), it is derived from the pipeline's ``data_seed``,
so draws with different seeds slow down at different steps.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import torch

from ..toolkit.batch import next_token_batch
from ..toolkit.phases import charge
from .registry import bug

DISK_BYTES_PER_S = 16e6  # a slow shared disk: 16 MB/s
SYNC_SECONDS = 2e-4  # one device synchronisation (what .item() waits for on an accelerator)
SEND_PER_ENTRY = 2e-4  # sending one history entry to a dashboard
STALL_SECONDS = 8e-3  # a data server that has started to stall, per batch
COLLATE_PER_PAIR = 2e-6  # a collate that compares every pair of positions of every window


def checkpoint_interval(pipe) -> int:
    """How often ``sync-checkpoint-every-k`` saves: every 3 to 5 steps, by the pipeline's data seed."""
    return 3 + pipe.data_seed % 3


def stall_start(pipe) -> int:
    """The data index from which ``data-source-stalls`` stalls: 6 to 17, by the data seed."""
    return 6 + pipe.data_seed % 12


@dataclass(frozen=True)
class SyncCheckpoint:
    """Serialise the model and optimizer on the training thread every ``every`` steps, into a buffer
    in memory (no file is written; the buffer is freed on return), then charge the write of that many
    bytes to a slow disk (``DISK_BYTES_PER_S``) with ``course.toolkit.phases.charge``: a sleep on the
    real clock, an added cost under the cost model."""
    every: int

    def __call__(self, run) -> None:
        if run.step % self.every:
            return
        buffer = io.BytesIO()
        torch.save({"model": run.model.state_dict(), "optimizer": run.optimizer.state_dict()}, buffer)
        charge(buffer.tell() / DISK_BYTES_PER_S)


def _evaluate_always(step: int, eval_every: int) -> bool:
    return True


def _item_per_parameter(run, step: int, loss) -> None:
    for p in run.model.parameters():
        for t in (p, p.grad):
            if t is not None:
                torch.linalg.vector_norm(t).item()
                charge(SYNC_SECONDS)


def _send_whole_history(run, step: int, loss) -> None:
    losses = run.history["loss"]
    torch.tensor(losses).median().item()
    charge(SEND_PER_ENTRY * len(losses))


@dataclass(frozen=True)
class StallingBatches:
    """The reference batch stream, with a stall on every batch from data index ``start`` on."""
    start: int

    def __call__(self, pipe, seed: int, step: int):
        from ..reference.train import windows_at
        batch = pipe.collate(windows_at(pipe, seed, step), pipe.language().PAD)
        if step >= self.start:
            charge(STALL_SECONDS)
        return batch


def _collate_quadratic(windows: torch.Tensor, pad_id: int):
    batch = next_token_batch(windows, pad_id)
    B, T = batch.inputs.shape
    real = batch.inputs != pad_id
    (real.unsqueeze(2) & real.unsqueeze(1)).sum()  # every pair of positions, of every window
    charge(COLLATE_PER_PAIR * B * T * T)
    return batch


@bug("throughput", "periodic slow steps: the checkpoint phase of every k-th step")
def sync_checkpoint_every_k(pipe):
    """Serialises the model and optimizer on the training thread every 3-5 steps (the interval
    follows the data seed) and charges the write to a slow disk (``SyncCheckpoint``): each save stalls
    its own step. Under the cost model only that step pays; on the real clock the step after a save
    can be slower too (notebook 06 measures it against controls)."""
    return pipe.replace(checkpoint=SyncCheckpoint(checkpoint_interval(pipe)))


@bug("throughput", "every step slower: the eval phase runs on every step")
def eval_every_step(pipe):
    """The evaluation schedule says yes on every step: the whole validation split is evaluated after
    each update, whatever ``eval_every`` says."""
    return pipe.replace(eval_due=_evaluate_always)


@bug("throughput", "every step slower: the logging phase")
def item_per_parameter_logging(pipe):
    """Logs the norm of every parameter and its gradient with ``.item()`` each step: one device
    synchronisation per tensor (modelled: ``SYNC_SECONDS`` each)."""
    return pipe.replace(log_step=_item_per_parameter)


@bug("throughput", "steps get slower and slower: the logging phase grows with the step")
def log_whole_history_every_step(pipe):
    """Re-sends the whole loss history to a dashboard every step (``SEND_PER_ENTRY`` per entry): the
    logging phase grows linearly, so tokens/s decays over the run."""
    return pipe.replace(log_step=_send_whole_history)


@bug("throughput", "tokens/s drops at step N and stays down: the data phase")
def data_source_stalls(pipe):
    """The data source starts stalling at a step between 6 and 17 (by the data seed): every batch
    from then on waits ``STALL_SECONDS``."""
    return pipe.replace(batches=StallingBatches(stall_start(pipe)))


@bug("throughput", "every step slower: the data phase, more so on long windows")
def collate_quadratic_in_length(pipe):
    """The collate function compares every pair of positions of every window (to build a mask that
    nothing uses): its cost grows with the square of the window length."""
    return pipe.replace(collate=_collate_quadratic)
