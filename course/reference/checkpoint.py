"""Checkpoints that survive failure, and a resume that keeps the new configuration (notebook 07).

**The restore.** ``restore_state(run, ckpt)`` is the reference ``restore`` part of a ``Pipeline``
(written in ``course.reference.parts`` with the pipeline's other defaults, and imported here):
``course.reference.train.resume`` starts a fresh run from the pipeline and hands it the loaded checkpoint. It
puts back everything a bit-identical continuation needs (weights, optimizer moments and step counts,
the scheduler's position, the torch RNG, the data cursor, the history), but the *configuration*
(learning rate, weight decay, betas, and the scheduler's base rates) comes from the pipeline:
``optimizer.load_state_dict`` replaces every param-group hyperparameter with the checkpoint's, and
a scheduler's state restores ``base_lrs``, so a plain load trains a resumed run at the old learning
rate whatever the new config says (the stale resume). With an unchanged configuration both give the
same floats, bit for bit.

**Writing.** ``atomic_save`` serialises to memory, writes a temporary file in the destination's
folder, flushes and ``fsync``s it, then ``os.replace``s it over the destination (atomic on POSIX) and
``fsync``s the folder: a reader sees the old file or the new one, never half of one. ``save`` keeps
numbered checkpoints and a ``LATEST`` pointer, and deletes old ones only after the new one is
complete; ``latest_good`` finds the newest checkpoint that loads. ``new_run_dir`` gives every run a
directory of its own, so a fresh run never resumes, overwrites or deletes another run's state.

**Checking.** ``split_run`` trains a run in two pieces with a save and a resume between them;
``differences`` compares two runs in every logged value and every parameter; ``resume_check`` is the
grader's check of a pipeline's resume (switched off while a learner's own check is graded).
``kill_during_save`` kills a real subprocess with SIGKILL while it is writing a checkpoint.
"""

from __future__ import annotations

import io
import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .parts import _restore, restore_state  # noqa: F401  (the reference restore part, defined with the pipeline's parts)

TIMING_PREFIX = "t_"  # history keys that are wall times: never compared


# ----- restoring a run ----------------------------------------------------------------------------
# ----- comparing runs -----------------------------------------------------------------------------
def logged_keys(history: dict) -> list[str]:
    """The keys of a run's history that are compared (everything but wall times)."""
    return [k for k in history if not k.startswith(TIMING_PREFIX)]


def differences(a, b) -> dict[str, int | float]:
    """Where run ``b`` departs from run ``a``: for each logged value (history key, and ``"val"``), the
    first step whose value differs, bit for bit; for ``"parameters"``, the largest absolute difference
    (only if nonzero). An empty dict means the runs are the same in everything they logged and in every
    parameter."""
    out: dict[str, int | float] = {}
    for k in logged_keys(a.history):
        x, y = a.history[k], b.history.get(k)
        if x != y:
            steps = a.history["step"]
            first = next((i for i, (u, v) in enumerate(zip(x, y or [])) if u != v), min(len(x), len(y or [])))
            out[k] = steps[first] if first < len(steps) else first
    if a.val != b.val:
        out["val"] = next((s for s, u, v in zip(a.val["step"], a.val["loss"], b.val["loss"]) if u != v),
                          a.val["step"][-1] if a.val["step"] else 0)
    sa, sb = a.model.state_dict(), b.model.state_dict()
    worst = max((float((sa[k] - sb[k]).abs().max()) for k in sa), default=0.0)
    if worst != 0.0:
        out["parameters"] = worst
    return out


def to_memory(run) -> io.BytesIO:
    """The run's checkpoint (``course.reference.train.save_checkpoint``) in memory, ready for ``resume``."""
    from .train import save_checkpoint

    buf = io.BytesIO()
    save_checkpoint(run, buf)
    buf.seek(0)
    return buf


def split_run(pipe, seed: int, first: int, then: int, resume_pipe=None, eval_every: int = 0):
    """Train ``first`` steps, checkpoint (in memory), resume with ``resume_pipe`` (default ``pipe``),
    train ``then`` more. Returns ``(resumed_run, checkpoint_bytes)``."""
    from .train import resume, start, train_steps

    run = train_steps(start(pipe, seed), first, eval_every=eval_every)
    buf = to_memory(run)
    data = buf.getvalue()
    resumed = resume(pipe if resume_pipe is None else resume_pipe, io.BytesIO(data))
    train_steps(resumed, then, eval_every=eval_every)
    return resumed, data


def resume_check(pipe, seed: int = 0, first: int = 8, then: int = 8, lr_factor: float = 0.5) -> list[str]:
    """The resume-correctness check; an empty list means it passed. The grader's check (switched off
    while a learner's own check is graded).

    1. a run split ``first + then`` with a save and resume equals the unbroken run in every logged
       value and every parameter, bit for bit;
    2. resumed with the learning rate multiplied by ``lr_factor``, the learning rates the loop used
       after the resume are the new configuration's schedule (a fresh run's ``history["lr"]``).
    """
    from .train import start, train_steps

    found = []
    straight = train_steps(start(pipe, seed), first + then, eval_every=0)
    split, data = split_run(pipe, seed, first, then)
    diff = differences(straight, split)
    if diff:
        found.append("the split run departs from the unbroken one: " +
                     ", ".join(f"{k} at {v}" if k != "parameters" else f"parameters by {v:.2e}" for k, v in diff.items()))
    new = pipe.replace(lr=pipe.lr * lr_factor)
    from .train import resume
    moved = train_steps(resume(new, io.BytesIO(data)), then, eval_every=0)
    want = train_steps(start(new, seed), first + then, eval_every=0).history["lr"][first:]
    got = moved.history["lr"][first:]
    if got != want:
        i = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), 0)
        found.append(f"resumed with lr x{lr_factor}, the loop used {got[i]:.4g} at step {first + i} where the new config "
                     f"schedules {want[i]:.4g}")
    return found


# ----- writing checkpoints that survive a crash ------------------------------------------------------
def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_save(obj, path, chunk: int = 1 << 14, on_partial=None) -> Path:
    """``torch.save(obj)`` to ``path`` so that ``path`` is never half-written: serialise in memory,
    write a temporary file beside it (``<name>.<random>.tmp``), flush and fsync it, ``os.replace`` it
    over ``path``, fsync the folder. ``on_partial(tmp_path, n_bytes)``, if given, is called once after
    the first chunk is on disk (for tests that crash the writer there)."""
    path = Path(path)
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for i in range(0, len(data), chunk):
                f.write(data[i:i + chunk])
                if i == 0 and on_partial is not None:
                    f.flush()
                    os.fsync(f.fileno())
                    on_partial(tmp, f.tell())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    return path


class Interrupted(RuntimeError):
    """Raised by ``naive_save`` where a real process would have been killed."""


def naive_save(obj, path, stop_after: int | None = None, chunk: int = 1 << 14) -> Path:
    """``torch.save`` straight into ``path`` (what most training scripts do). ``stop_after``: stop
    writing after that many bytes and raise ``Interrupted``, leaving the file as a killed process
    would (a simulation in this process; ``kill_during_save`` kills a real one)."""
    path = Path(path)
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    with open(path, "wb") as f:
        for i in range(0, len(data), chunk):
            if stop_after is not None and i >= stop_after:
                f.flush()
                raise Interrupted(f"stopped after writing {i} bytes")
            f.write(data[i:i + chunk])
    return path


def loads(path) -> bool:
    """Does ``path`` hold a checkpoint that ``torch.load`` reads?"""
    try:
        torch.load(path, weights_only=False)
        return True
    except Exception:
        return False


def checkpoint_name(step: int) -> str:
    return f"step-{step:06d}.pt"


def save(run, folder, keep: int = 2, on_partial=None) -> Path:
    """Save ``run`` into ``folder`` as ``step-NNNNNN.pt`` (atomically), then point ``LATEST`` at it
    (atomically), then delete all but the newest ``keep`` checkpoints: the last good checkpoint is
    never removed before a newer one is complete."""
    from .train import checkpoint_state

    folder = Path(folder)
    path = atomic_save(checkpoint_state(run), folder / checkpoint_name(run.step), on_partial=on_partial)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="LATEST.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(path.name)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / "LATEST")
    _fsync_dir(folder)
    for old in sorted(folder.glob("step-*.pt"))[:-keep]:
        old.unlink()
    return path


def latest_good(folder) -> Path | None:
    """The newest checkpoint in ``folder`` that loads: the one ``LATEST`` names, else the newest
    ``step-*.pt`` that ``torch.load`` reads; ``None`` if there is none. Temporary files are ignored."""
    folder = Path(folder)
    candidates = []
    pointer = folder / "LATEST"
    if pointer.exists():
        candidates.append(folder / pointer.read_text().strip())
    candidates += sorted(folder.glob("step-*.pt"), reverse=True)
    for path in candidates:
        if path.exists() and loads(path):
            return path
    return None


def new_run_dir(root, name: str = "run") -> Path:
    """A directory for a fresh run that no other run has used: ``root/<name>-<date>-<time>-<k>``,
    created with ``os.mkdir`` (which fails rather than reuse an existing directory)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for k in range(1000):
        path = root / f"{name}-{stamp}-{k}"
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"no free run directory under {root}")


# ----- a real crash: SIGKILL during a save -------------------------------------------------------------
@dataclass
class KillReport:
    """What a SIGKILL in the middle of ``save`` left behind."""

    returncode: int  # -9: killed by SIGKILL
    partial: str  # the temporary file the child was writing
    partial_bytes: int  # bytes of it on disk when it was killed
    partial_exists: bool
    partial_loads: bool
    latest_good: Path | None  # what a resume finds afterwards
    files: list[str]  # the folder's files after the kill


def _signal_and_block(tmp: str, n_bytes: int) -> None:
    print(f"PARTIAL {tmp} {n_bytes}", flush=True)
    sys.stdin.readline()  # blocks: the parent kills this process here
    raise SystemExit("not killed")


def _child(folder: str, steps: int) -> None:
    """The child of ``kill_during_save``: resume the latest good checkpoint of ``folder`` with the
    pickled pipeline, train ``steps`` steps, and save, stopping once part of the file is written."""
    from .train import resume, train_steps

    torch.set_num_threads(1)
    with open(Path(folder) / "pipe.pkl", "rb") as f:
        pipe = pickle.load(f)
    run = train_steps(resume(pipe, latest_good(folder)), steps, eval_every=0)
    save(run, folder, on_partial=_signal_and_block)


def kill_during_save(pipe, folder, steps: int, timeout: float = 120.0) -> KillReport:
    """Start a real Python process that resumes the latest good checkpoint in ``folder``, trains
    ``steps`` steps and saves with ``save``; when it reports the first chunk of the new checkpoint on
    disk (it then blocks, so the moment is deterministic), kill it with SIGKILL and report what is
    left. ``pipe`` must pickle (parts that are module-level functions)."""
    folder = Path(folder)
    with open(folder / "pipe.pkl", "wb") as f:
        pickle.dump(pipe, f)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-c", f"from course.reference.checkpoint import _child; _child({str(folder)!r}, {steps})"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if ready else ""  # the child prints one line, then blocks
        if not line.startswith("PARTIAL "):
            proc.kill()
            raise RuntimeError(f"the child did not reach the save: {proc.stderr.read()[-2000:]}")
        _, tmp, n = line.split()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()
    (folder / "pipe.pkl").unlink()
    tmp_path = Path(tmp)
    return KillReport(proc.returncode, tmp_path.name, int(n), tmp_path.exists(),
                      tmp_path.exists() and loads(tmp_path), latest_good(folder),
                      sorted(p.name for p in folder.iterdir()))


# ----- the notebook's explorer ----------------------------------------------------------------------
def divergence_explorer(curves: dict, first_step: int):
    """A widget: a slider over the names of ``curves`` (what the resume dropped), a summary line and a
    plot of ``|loss(resumed) - loss(unbroken)|`` per step after the resume (log scale).

    ``curves[name]`` holds ``"step"`` and ``"diff"`` (equal-length lists, precomputed) and ``"first"``
    (the first step that differs, or None). Returns a ``VBox`` with ``.slider``, ``.summary`` and
    ``.output`` attributes."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    keys = list(curves)
    slider = widgets.SelectionSlider(options=keys, value=keys[0], description="resume drops",
                                     style={"description_width": "initial"}, continuous_update=False)
    summary = widgets.HTML()
    output = widgets.Output()

    def describe(key) -> str:
        c = curves[key]
        if c["first"] is None:
            return f"<b>{key}</b>: identical to the unbroken run at every step"
        return (f"<b>{key}</b>: first differs at step <b>{c['first']}</b> "
                f"({c['first'] - first_step} steps after the resume); largest loss difference {max(c['diff']):.2e}")

    def draw(key) -> None:
        c = curves[key]
        output.clear_output(wait=True)
        with output:
            fig, ax = plt.subplots(figsize=(6, 3.2))
            shown = [max(d, 1e-12) for d in c["diff"]]
            ax.semilogy(c["step"], shown, ".-", label="|loss(resumed) - loss(unbroken)|")
            ax.axhline(1e-12, color="grey", linestyle=":", label="floor drawn for 0 (bit-identical)")
            ax.axvline(first_step, color="black", linestyle="--", label="resume")
            ax.set_ylim(1e-13, 10)
            ax.set_xlabel("step")
            ax.set_ylabel("loss difference (nats)")
            ax.set_title(f"resume drops: {key}")
            ax.legend(fontsize=8)
            plt.show()

    def update(change=None) -> None:
        summary.value = describe(slider.value)
        draw(slider.value)

    slider.observe(update, names="value")
    update()
    box = widgets.VBox([slider, summary, output])
    box.slider, box.summary, box.output = slider, summary, output
    return box
