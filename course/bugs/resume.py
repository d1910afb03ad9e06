"""Bugs of notebook 07 (family ``resume``): a resumed or re-run training that silently is not what its config says.

Registered in the catalogue of ``course.bugs`` when ``course`` is imported. Every bug swaps the
pipeline's ``restore`` part (how ``course.reference.train.resume`` puts a loaded checkpoint into a fresh run)
for real resume code that gets one thing wrong, so ``course.exercises.mystery.draw`` can hide each of them:

``stale-lr-resume``: the plain ``optimizer.load_state_dict`` + ``scheduler.load_state_dict``. Both
restore the *checkpoint's* hyperparameters (``lr``, ``initial_lr``, weight decay) and the scheduler's
``base_lrs``, so a run resumed with a new learning rate trains at the old one. With an unchanged
config it resumes bit for bit, which is why it survives every test that does not change the config.

``stale-schedule-resume``: the half-fix: the current ``lr`` is set from the new config, but the
scheduler's ``base_lrs`` stay the checkpoint's, so one step later the old rate is back.

``optimizer-state-dropped``: the optimizer is rebuilt and its state (Adam's moments and step counts)
is not loaded. ``scheduler-dropped``: the schedule starts again at step 0 (warm-up again).
``rng-dropped``: the torch RNG is left as a fresh start seeds it (dropout masks differ).
``data-cursor-reset``: the data stream starts again at its first batch (an iterator rebuilt on resume).
``weights-only-resume``: only the weights (and step) are loaded: optimizer, schedule and RNG are fresh.
"""

from __future__ import annotations

from ..reference.parts import _restore
from ..reference.pipeline import Pipeline
from .registry import bug


def _stale_lr(run, ckpt):
    _restore(run, ckpt, config=False)


def _stale_schedule(run, ckpt):
    _restore(run, ckpt, schedule_config=False)


def _no_optimizer_state(run, ckpt):
    _restore(run, ckpt, optimizer=False)


def _no_scheduler(run, ckpt):
    _restore(run, ckpt, scheduler=False)


def _no_rng(run, ckpt):
    _restore(run, ckpt, rng=False)


def _cursor_reset(run, ckpt):
    _restore(run, ckpt, cursor=False)


def _weights_only(run, ckpt):
    _restore(run, ckpt, optimizer=False, scheduler=False, rng=False, config=False)


@bug("resume", "a run resumed with a new learning rate logs and trains at the old one: yesterday's curve again")
def stale_lr_resume(pipe: Pipeline) -> Pipeline:
    """The resume loads the optimizer's and the scheduler's state dicts as they are, which restores the
    checkpoint's learning rate (param groups' ``lr`` and ``initial_lr``, the scheduler's ``base_lrs``)
    over the new configuration."""
    return pipe.replace(restore=_stale_lr)


@bug("resume", "a run resumed with a new learning rate uses it for one step, then the old one again")
def stale_schedule_resume(pipe: Pipeline) -> Pipeline:
    """The resume sets each param group's ``lr`` from the new configuration but leaves the scheduler's
    ``base_lrs`` from the checkpoint, so the next ``scheduler.step()`` brings the old rate back."""
    return pipe.replace(restore=_stale_schedule)


@bug("resume", "the resumed run departs from the unbroken one one step after the resume: a fresh optimizer")
def optimizer_state_dropped(pipe: Pipeline) -> Pipeline:
    """The resume loads the weights and the schedule but not the optimizer's state: Adam's moments and
    step counts start from zero (a checkpoint that saved only ``model.state_dict()`` and the step)."""
    return pipe.replace(restore=_no_optimizer_state)


@bug("resume", "the learning rate warms up again after the resume")
def scheduler_dropped(pipe: Pipeline) -> Pipeline:
    """The resume loads the optimizer's state but not the scheduler's: the schedule restarts at step 0."""
    return pipe.replace(restore=_no_scheduler)


@bug("resume", "with dropout, the resumed run departs at its first step: other dropout masks")
def rng_dropped(pipe: Pipeline) -> Pipeline:
    """The resume does not restore the torch RNG state: dropout draws from the seed's fresh stream."""
    return pipe.replace(restore=_no_rng)


@bug("resume", "the resumed run trains on its first batches again")
def data_cursor_reset(pipe: Pipeline) -> Pipeline:
    """The resume restores the step but not the data cursor: the batch stream starts again from its
    first batch (a data iterator rebuilt on resume, without skipping what was consumed)."""
    return pipe.replace(restore=_cursor_reset)


@bug("resume", "the resumed run departs at once: fresh optimizer, schedule and RNG")
def weights_only_resume(pipe: Pipeline) -> Pipeline:
    """The resume loads the weights and the step only: optimizer state, schedule and RNG are fresh."""
    return pipe.replace(restore=_weights_only)
