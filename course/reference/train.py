"""The reference training loop, instrumented.

Every step records what a debugger asks for first: the loss, the learning rate the optimizer
actually used, the gradient norm before clipping, the parameter norm, the relative size of the update
``||delta theta|| / ||theta||``, whether loss, gradients and parameters are finite, the number of
scored tokens, and the wall time of each phase (data, forward+backward, optimizer).

A run can be saved and resumed: the checkpoint holds the model, optimizer, scheduler, torch RNG and
the data cursor (the step: the batch at step ``s`` is a pure function of the run's seed and ``s``),
so a resumed run continues bit-for-bit as if it had never stopped.

The loop only calls the parts of a ``Pipeline``; it knows nothing of any bug.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Callable

import torch
from tqdm import tqdm

from ..toolkit.batch import Batch
from ..toolkit.phases import PHASES, CostModel, WallClock, active, charge
from .pipeline import Pipeline

HISTORY_KEYS = (
    "step", "loss", "lr", "grad_norm", "param_norm", "rel_update", "finite",
    "tokens", "t_data", "t_fwd_bwd", "t_opt",
)


@dataclass
class Run:
    """A training run in progress: the live objects and what has been recorded so far."""

    pipe: Pipeline
    seed: int
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    step: int = 0  # the next step to run; also the data cursor
    history: dict = field(default_factory=lambda: {k: [] for k in HISTORY_KEYS})
    val: dict = field(default_factory=lambda: {"step": [], "loss": []})
    stopped: str | None = None  # why the run stopped early, if it did
    data_offset: int = 0  # batches skipped so far: step s trains on data index s + data_offset
    # seconds per step of each phase of course.toolkit.phases.PHASES (data, fwd, bwd, opt, log, ckpt, eval)
    phases: dict = field(default_factory=lambda: {k: [] for k in PHASES})

    @property
    def final_val_loss(self) -> float:
        return self.val["loss"][-1] if self.val["loss"] else float("nan")


def start(pipe: Pipeline, seed: int = 0) -> Run:
    """A fresh run: model initialised from ``seed``, optimizer and schedule built by the pipeline."""
    model = pipe.build_model(seed)
    optimizer = pipe.make_optimizer(model, pipe)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: pipe.schedule(s, pipe.warmup, pipe.steps)
    )
    torch.manual_seed(seed)  # the RNG that dropout draws from during training
    return Run(pipe, seed, model, optimizer, scheduler)


def batch_at(pipe: Pipeline, seed: int, step: int) -> Batch:
    """The training batch of step ``step``: epoch-wise shuffles of the training windows, seeded.

    ``step`` is the data index (the optimizer step unless batches were skipped, see
    ``Run.data_offset``). A pipeline whose ``batches`` part is set gets its batches from it instead."""
    if pipe.batches is not None:
        return pipe.batches(pipe, seed, step)
    return pipe.collate(windows_at(pipe, seed, step), pipe.language().PAD)


def windows_at(pipe: Pipeline, seed: int, step: int) -> torch.Tensor:
    """The raw token windows that ``batch_at(pipe, seed, step)`` collates (for checks that need the
    examples behind a batch, such as a prompt/answer mask gate)."""
    windows = pipe.windows("train")
    n, B = len(windows), pipe.batch_size
    per_epoch = n // B
    if per_epoch == 0:
        raise ValueError(f"batch_size {B} is larger than the {n} training windows")
    epoch, i = divmod(step, per_epoch)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
    return windows[order[i * B:(i + 1) * B]]


@torch.no_grad()
def evaluate(model: torch.nn.Module, pipe: Pipeline, split: str = "val", batch_size: int = 256) -> float:
    """Mean loss per scored target on a whole split, in eval mode, with the pipeline's own parts
    (its ``eval_mode`` and ``eval_loss_fn``, which default to ``model.eval()`` and ``loss_fn``)."""
    was_training = model.training
    pipe.eval_mode(model)
    loss_fn = pipe.loss_fn if pipe.eval_loss_fn is None else pipe.eval_loss_fn
    windows = pipe.windows(split)
    charge(windows[:, :-1].numel() * CostModel.FWD_PER_POS, modelled_only=True)  # a cost model's view of the work
    total, count = 0.0, 0
    for i in range(0, len(windows), batch_size):
        batch = pipe.collate(windows[i:i + batch_size], pipe.language().PAD)
        n = int(batch.scored.sum())
        total += loss_fn(model(batch.inputs), batch).item() * n
        count += n
    model.train(was_training)
    return total / count if count else float("nan")


def _flat(params) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params])


def train_steps(run: Run, n: int, eval_every: int = 100, progress: bool = False, stop_on_nonfinite: bool = True,
                on_step: Callable | None = None, clock=None) -> Run:
    """Run ``n`` more steps of ``run`` in place, recording every step; returns ``run``.

    ``on_step(run, step, batch)``, if given, is called after each step is recorded and before any
    evaluation (e.g. to log the batch's data index or the optimizer's state).

    Each step is timed in the phases of ``course.toolkit.phases.PHASES`` into ``run.phases`` (and the
    older keys ``t_data``, ``t_fwd_bwd`` = fwd + bwd, ``t_opt`` of ``run.history``), read from
    ``clock`` (default ``course.toolkit.phases.WallClock()``; a ``CostModel`` gives seeded, machine-free
    times). After the update the loop calls the pipeline's ``log_step(run, step, loss)`` and
    ``checkpoint(run)`` parts, then evaluates if ``eval_due(run.step, eval_every)``."""
    pipe, model, opt = run.pipe, run.model, run.optimizer
    params = [p for p in model.parameters()]
    model.train()
    clock = WallClock() if clock is None else clock
    ph = run.phases
    bar = tqdm(range(n), desc="training", file=sys.stderr, disable=not progress, mininterval=0.5)
    with active(clock):
        for _ in bar:
            s = run.step
            clock.lap()
            batch = batch_at(pipe, run.seed, s + run.data_offset)
            t_data = clock.lap("data")
            logits = model(batch.inputs)
            loss = pipe.loss_fn(logits, batch)
            t_fwd = clock.lap("fwd")
            opt.zero_grad(set_to_none=True)
            if loss.requires_grad:
                loss.backward()
            grads = [p.grad for p in params if p.grad is not None]
            grad_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item() if grads else 0.0
            if pipe.clip is not None and grads:
                torch.nn.utils.clip_grad_norm_(params, pipe.clip)
            t_bwd = clock.lap("bwd")
            lr_used = opt.param_groups[0]["lr"]
            before = _flat(params)
            pipe.update(opt)
            run.scheduler.step()
            after = _flat(params)
            t_opt = clock.lap("opt")
            before_norm = torch.linalg.vector_norm(before).item()
            finite = math.isfinite(loss.item()) and math.isfinite(grad_norm) and bool(torch.isfinite(after).all())
            h = run.history
            h["step"].append(s)
            h["loss"].append(loss.item())
            h["lr"].append(lr_used)
            h["grad_norm"].append(grad_norm)
            h["param_norm"].append(torch.linalg.vector_norm(after).item())
            h["rel_update"].append(torch.linalg.vector_norm(after - before).item() / max(before_norm, 1e-12))
            h["finite"].append(finite)
            h["tokens"].append(int(batch.scored.sum()))
            h["t_data"].append(t_data)
            h["t_fwd_bwd"].append(t_fwd + t_bwd)
            h["t_opt"].append(t_opt)
            run.step += 1
            if on_step is not None:
                on_step(run, s, batch)
            clock.lap()  # what on_step costs is the caller's, not the loop's
            pipe.log_step(run, s, loss)
            t_log = clock.lap("log")
            pipe.checkpoint(run)
            t_ckpt = clock.lap("ckpt")
            if pipe.eval_due(run.step, eval_every):
                run.val["step"].append(run.step)
                run.val["loss"].append(evaluate(model, pipe))
            t_eval = clock.lap("eval")
            for k, v in zip(PHASES, (t_data, t_fwd, t_bwd, t_opt, t_log, t_ckpt, t_eval)):
                ph[k].append(v)
            if not finite and stop_on_nonfinite:
                run.stopped = f"non-finite at step {s}"
                break
    bar.close()
    return run


def train(pipe: Pipeline, steps: int | None = None, seed: int = 0, eval_every: int = 100, progress: bool = False) -> Run:
    """Train a fresh run of ``pipe`` for ``steps`` (default ``pipe.steps``) and evaluate at the end."""
    run = start(pipe, seed)
    steps = pipe.steps if steps is None else steps
    train_steps(run, steps, eval_every=eval_every, progress=progress)
    if not run.val["step"] or run.val["step"][-1] != run.step:
        run.val["step"].append(run.step)
        run.val["loss"].append(evaluate(run.model, pipe))
    return run


# ----- checkpoints --------------------------------------------------------------------------------
def checkpoint_state(run: Run) -> dict:
    """Everything a bit-identical resume needs: weights, optimizer, scheduler, RNG and data cursor
    (the dict ``save_checkpoint`` writes and ``resume`` hands to the pipeline's ``restore`` part)."""
    return {
        "model": run.model.state_dict(),
        "optimizer": run.optimizer.state_dict(),
        "scheduler": run.scheduler.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "step": run.step,
        "data_offset": run.data_offset,
        "seed": run.seed,
        "history": run.history,
        "val": run.val,
    }


def save_checkpoint(run: Run, path) -> None:
    """Everything a bit-identical resume needs: weights, optimizer, scheduler, RNG and data cursor.
    A plain ``torch.save`` (``course.reference.checkpoint.save`` writes atomically and keeps the last good one)."""
    torch.save(checkpoint_state(run), path)


def resume(pipe: Pipeline, path) -> Run:
    """Rebuild the run saved at ``path`` (a path or a file object) for ``pipe``; training continues
    from the saved step. A fresh run of ``pipe`` is started and the pipeline's ``restore`` part puts
    the saved state into it (the reference, ``course.reference.checkpoint.restore_state``, keeps ``pipe``'s
    learning rate and hyperparameters rather than the checkpoint's)."""
    ckpt = torch.load(path, weights_only=False)
    run = start(pipe, ckpt["seed"])
    pipe.restore(run, ckpt)
    return run
