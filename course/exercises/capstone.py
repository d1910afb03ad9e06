"""The capstone (notebook 11): a mystery run of one's own, drawn from the learner's identity.

Each learner gets one bug from across the course's families, opaque like every mystery pipeline
(``course.exercises.mystery.make``), keyed by who they are: ``draw_for(name)``. The name is the nbgrader student
id while graded (``course.exercises.identity``), so the grader computes the draw itself and a notebook copied
from a classmate is graded against the copier's own draw.

* ``FAMILIES``: the capstone's families, in the order the notebook prints them. Each ``Family`` holds
  its candidate bugs (names of ``course.bugs``), the base pipeline its notebook's mystery uses, a
  behavioural ``symptom(pipe, seed) -> str | None`` (trains or exercises the pipeline on ``seed``;
  ``None`` when nothing is wrong: the grader's check of a fix, and the unit tests' check that each
  draw shows its bug) and ``show(pipe)``, which prints and plots what the learner sees first.
* ``draw_for(name, attempt=0)``: the family from one SHA-256 of the name, the bug within it from a
  second, the draw's seed from a third; the configuration (seeds, learning rate, warm-up) then comes
  from ``course.exercises.mystery``'s own configuration stream, independent of the bug. ``attempt > 0`` gives
  a fresh practice draw (family, bug and configuration by the same hashes of the name and attempt,
  so two attempts can draw the same bug).
* ``grading_draws(name, salt)``: fresh draws of the same bug (other configurations) and healthy draws
  of the same base, for grading a detector; ``healthy_twin(pipe)``: the draw's own settings with every
  part the reference one (a negative control a learner may use).
* For the grader and the instructor only, switched off while learner code runs (``SWITCHED_OFF``):
  ``answer_family``, ``reference_fix`` (replace the touched parts with the base's healthy ones),
  ``summary_row`` (student id -> (family, bug), for ``autograder.summary``), ``draw_for`` and
  ``grading_draws``.

Limits. The families' bases differ in their fixed settings (steps, training-set size, batch size,
model), so the *family* can be read off a draw's settings by someone who compares them with
``FAMILIES``; within a family every bug and the healthy draw share the base, so nothing static tells
the bug (``course.exercises.mystery.signature`` is equal). More generally, the learner's own draw lives in
their kernel, and anything their notebook runs at the top level can read a fixed fact about it (its
family, through the settings or the registry). So no point rests on such a fact alone: the
notebook's hidden family test also requires the learner's own ``detect`` to tell a fresh draw of the
bug from a healthy draw of the same recipe, and every detector and fix is graded on fresh draws too,
apart from the kernel (``course.exercises.isolation``). Outside a test cell, nothing stops a learner from
calling ``summary_row`` on their own name (as with ``course.exercises.mystery.reveal`` in every notebook).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from dataclasses import dataclass
from typing import Callable

import torch

from . import mystery
from ..reference.diagnose import training_moves  # the no-updates family's check (notebook 00's)
from ..reference.model import ModelConfig
from ..toolkit.textview import html_text, with_text
from ..reference.pipeline import PARTS, Pipeline, healthy_twin

ASSIGNMENT = "11_capstone"
SALT = "capstone"  # the salt of every learner's draw (hidden tests use others)


@dataclass(frozen=True)
class Family:
    """One capstone family: its name, what it looks like, its bugs, base pipeline, symptom and view."""

    name: str
    looks_like: str  # the symptom in a few words, as the printed list shows it
    notebook: str  # where its tools are taught
    bugs: tuple[str, ...]
    base: Pipeline
    symptom: Callable[[Pipeline, int], str | None]
    show: Callable[[Pipeline], None]


# ----- small helpers ------------------------------------------------------------------------------
_SMALL_MODEL = ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64)


def _run(pipe: Pipeline, seed: int, steps: int):
    """A fresh run of ``pipe`` from ``seed``, ``steps`` steps, no evaluation; warnings go to stdout."""
    from .grading import captured_warnings
    from ..reference.train import start, train_steps

    with captured_warnings():
        return train_steps(start(pipe, seed), steps, eval_every=0)


def _loss_figure(curves: dict, pipe: Pipeline, title: str, ylim=None):
    import matplotlib.pyplot as plt

    from ..toolkit.plots import loss_plot

    lang = pipe.language()
    lines = {"uniform ln(V)": lang.uniform_loss, "window floor": lang.loss_floor(pipe.seq_len)}
    loss_plot(curves, lines, title=title, ylim=ylim)
    plt.tight_layout()
    plt.show()


def _mean(xs) -> float:
    xs = [x for x in xs if math.isfinite(x)]
    return sum(xs) / len(xs) if xs else float("nan")


def _show_curve(steps: int, title: str, ylim=None):
    def show(pipe: Pipeline) -> None:
        run = _run(pipe, 0, steps)
        losses = run.history["loss"]
        print(f"{len(losses)} step{'s' if len(losses) != 1 else ''} from seed 0: loss {losses[0]:.4f} at the first step, "
              f"{_mean(losses[-10:]):.4f} over the last 10" + (f"; the loop stopped: {run.stopped}" if run.stopped else ""))
        _loss_figure({"your draw": losses}, pipe, title, ylim)
    return show


# ----- wrong gradient (notebook 03) ----------------------------------------------------------------
def wrong_gradient_symptom(pipe: Pipeline, seed: int = 5) -> str | None:
    """Notebook 03's check of a fix: every check of ``course.toolkit.preflight`` on a fresh seed (loss at
    init, a mean loss, updates, gradients reset, the overfit and its no-step control)."""
    from ..reference.diagnose import preflight_pipeline

    report = preflight_pipeline(pipe, seed=seed, overfit_steps=40)
    return None if report.ok else f"on seed {seed} the pre-flight checks fail: {report.failed()}"


def _show_overfit(pipe: Pipeline) -> None:
    from ..toolkit.overfit import fit_floor, tiny_batch
    from ..reference.diagnose import overfit_pipe
    from ..reference.train import batch_at

    batch = tiny_batch(batch_at(pipe, 0, 0), 8)
    losses = overfit_pipe(pipe, batch, 40)
    lang = pipe.language()
    print(f"the tiny-batch overfit (8 examples, 40 steps of the pipeline's own step): loss {losses[0]:.4f} -> "
          f"{losses[-1]:.4f}; ln(V) = {lang.uniform_loss:.4f}; lowest possible on this batch {fit_floor(batch):.4f}")
    _loss_figure({"overfit of 8 examples": losses}, pipe, "your draw: the tiny-batch overfit")


# ----- non-finite (notebook 02) --------------------------------------------------------------------
NONFINITE_HORIZON = 25


def nonfinite_symptom(pipe: Pipeline, seed: int = 101) -> str | None:
    """Notebook 02's check of a fix: ``NONFINITE_HORIZON`` steps on ``seed`` stay finite (the loop's
    own finite check) and the loss falls by 0.1."""
    run = _run(pipe, seed, NONFINITE_HORIZON)
    if run.stopped:
        return f"training went {run.stopped}"
    first, last = run.history["loss"][0], _mean(run.history["loss"][-5:])
    if not last < first - 0.1:
        return f"training stayed finite but the loss did not fall by 0.1 ({first:.3f} -> {last:.3f})"
    return None


# ----- late spike (notebook 04) --------------------------------------------------------------------
def spike_symptom(pipe: Pipeline, seed: int = 7) -> str | None:
    """Notebook 04's check (``course.lessons.replay.spike_symptom``): no loss-spike alert in a fresh run and
    the data stream still ordinary data."""
    from ..lessons.replay import spike_symptom as check

    return check(pipe, seed)


# ----- validation (notebook 05) --------------------------------------------------------------------
def validation_symptom(pipe: Pipeline, seed: int = 7) -> str | None:
    """Notebook 05's check (``course.lessons.valgap.problems``): like with like, overlap, overfitting, shift."""
    from ..lessons.valgap import problems

    found = problems(pipe, seed=seed)
    return "; ".join(found) if found else None


def _show_validation(pipe: Pipeline) -> None:
    from ..reference.train import evaluate
    from ..lessons.valgap import trained

    run = trained(pipe)
    losses = run.history["loss"]
    print(f"trained {len(losses)} steps from seed 0: training loss (logged, last 10 steps) {_mean(losses[-10:]):.4f}; "
          f"validation loss by the pipeline's own eval path {evaluate(run.model, pipe):.4f}")
    _loss_figure({"training loss": losses}, pipe, "your draw: training loss; validation printed above")


# ----- throughput (notebook 06) --------------------------------------------------------------------
def throughput_symptom(pipe: Pipeline, seed: int = 7) -> str | None:
    """Notebook 06's check (``course.lessons.throughput.problems``): under the seeded cost model, no phase is
    slow on several steps against the healthy twin's trace (same settings, reference parts)."""
    from ..lessons.throughput import problems

    found = problems(pipe, healthy_twin(pipe), seed=seed)
    return "; ".join(found) if found else None


def _show_throughput(pipe: Pipeline) -> None:
    import matplotlib.pyplot as plt

    from ..lessons.throughput import stacked_plot, step_times, traced

    fig, axes = plt.subplots(1, 2, figsize=(11, 3), sharey=True)
    for ax, (label, p) in zip(axes, (("your draw", pipe), ("healthy twin (same settings)", healthy_twin(pipe)))):
        run = traced(p)
        stacked_plot(run, ax, title=label)
        print(f"{label}: median step {sorted(step_times(run))[len(step_times(run)) // 2] * 1e3:.2f} ms "
              f"(cost model), slowest {max(step_times(run)) * 1e3:.2f} ms")
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    plt.show()


# ----- resume (notebook 07) ------------------------------------------------------------------------
def resume_symptom(pipe: Pipeline, seed: int = 5) -> str | None:
    """Notebook 07's check (``course.reference.checkpoint.resume_check``): a split run equals the unbroken one
    bit for bit, and a run resumed with a new learning rate uses the new configuration's rates."""
    from ..reference.checkpoint import resume_check

    found = resume_check(pipe, seed=seed)
    return "; ".join(found) if found else None


def _run_resumed(pipe: Pipeline, data: bytes, steps: int):
    import io

    from .grading import captured_warnings
    from ..reference.train import resume, train_steps

    with captured_warnings():
        return train_steps(resume(pipe, io.BytesIO(data)), steps, eval_every=0)


def _show_resume(pipe: Pipeline) -> None:
    from ..reference.checkpoint import differences, split_run

    unbroken = _run(pipe, 0, 16)
    resumed, data = split_run(pipe, 0, 8, 8)
    d = differences(unbroken, resumed)
    print("trained 16 steps straight, and 8 + save + resume + 8: " +
          (", ".join(f"{k} departs at step {v}" if k != "parameters" else f"parameters differ by {v:.1e}"
                     for k, v in d.items()) or "identical in every logged value and parameter"))
    new = pipe.replace(lr=pipe.lr / 2)
    moved = _run_resumed(new, data, 8)
    want = _run(new, 0, 16).history["lr"][8:]
    print(f"resumed at step 8 with the learning rate halved: the loop used {moved.history['lr'][8]:.4g} at step 8, "
          f"{moved.history['lr'][-1]:.4g} at step 15; the new configuration schedules {want[0]:.4g} and {want[-1]:.4g}")
    _loss_figure({"unbroken": unbroken.history["loss"], "saved at 8 and resumed": resumed.history["loss"]},
                 pipe, "your draw: a run with a save and resume against the unbroken run")


# ----- generation (notebook 08) --------------------------------------------------------------------
def generation_symptom(pipe: Pipeline, seed: int = 3) -> str | None:
    """Notebook 08's consistency checks (``course.lessons.generate.consistency_problems``) on a freshly
    initialised model of seed ``seed``: future perturbation, cached against recomputed logits, the
    sampler against known logits."""
    from ..lessons.generate import consistency_problems

    found = consistency_problems(pipe, seed=seed)
    return "; ".join(found) if found else None


def _show_generation(pipe: Pipeline) -> None:
    from ..lessons.generate import chain_score
    from ..reference.train import evaluate

    run = _run(pipe, 0, 150)
    lang = pipe.language()
    prompts = lang.sample(128, 4, seed=77)
    greedy = pipe.generate(run.model, prompts, 12, greedy=True)
    warm = pipe.generate(run.model, prompts, 12, temperature=0.7, seed=0)
    print(f"trained 150 steps: teacher-forced validation loss {evaluate(run.model, pipe):.3f} "
          f"(window floor {lang.loss_floor(pipe.seq_len):.3f})")
    print(f"its generated text under the true chain, nats per token (entropy rate {lang.entropy_rate:.3f}): "
          f"greedy {chain_score(lang, greedy, 4).nll:.3f}, T = 0.7 {chain_score(lang, warm, 4).nll:.3f}")
    print("first greedy rows (prompt | generated):")
    for row in greedy[:3].tolist():
        print("  ", " ".join(map(str, row[:4])), "|", " ".join(map(str, row[4:])))


# ----- evaluation (notebook 09) --------------------------------------------------------------------
@functools.lru_cache(maxsize=4)
def _harness_model(seed: int, trained: bool):
    from ..lessons.harness import MODEL, train_model
    from ..reference.model import TinyGPT

    if trained:
        return train_model(steps=250, seed=seed)
    torch.manual_seed(seed)
    return TinyGPT(MODEL).eval()


def evaluation_symptom(pipe: Pipeline, seed: int = 31) -> str | None:
    """Notebook 09's check: every harness stage against its specification (``course.lessons.harness.problems``)
    on a fresh task and a freshly initialised model of seed ``seed``, and fresh items scored exactly as
    the healthy twin's harness scores them."""
    from ..lessons.harness import make_task, problems, run

    model, items = _harness_model(seed, False), make_task(40, seed=seed)
    found = problems(pipe, model, items)
    if not found:
        ours, ref = run(model, pipe, items, 3), run(model, healthy_twin(pipe), items, 3)
        if not (torch.equal(ours.lls, ref.lls) and torch.equal(ours.lengths, ref.lengths)):
            found = ["fresh items are scored differently from the reference harness"]
    return "; ".join(found) if found else None


def _show_evaluation(pipe: Pipeline) -> None:
    from ..lessons.harness import chain_scores, heldout_loss, make_task, run, token_floor

    model = _harness_model(0, True)
    task = make_task(100, seed=0)
    chain_acc = float((chain_scores(task)[0].argmax(-1) == torch.tensor([it.gold for it in task.items])).double().mean())
    print(f"the harness model (250 steps): held-out loss {heldout_loss(model):.3f} nats per token "
          f"(floor {token_floor():.3f}); the true chain answers {chain_acc:.2f} of the 100 items")
    for k in (0, 3):
        r = run(model, pipe, task, num_fewshot=k)
        print(f"your draw's harness, {k}-shot: acc {r.acc:.3f}, acc_norm {r.acc_norm:.3f}")


# ----- data / batch (notebook 01) ------------------------------------------------------------------
def batch_symptom(pipe: Pipeline, seed: int = 31) -> str | None:
    """Notebook 01's check (``course.reference.diagnose.held_out_symptom``): trained on ``seed``, the held-out
    loss is neither below the exact chain's loss on the same windows nor stalled above the floor."""
    from ..reference.diagnose import held_out_symptom

    return held_out_symptom(pipe, seed=seed)


# ----- the table ----------------------------------------------------------------------------------
FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("batch", "the held-out loss stalls above its floor, or falls below what the data allows",
           "01_baselines", ("targets-shifted-twice", "unshifted-targets"),
           Pipeline(n_symbols=8, seq_len=16, batch_size=32, steps=200, n_train=2048, n_val=128, warmup=20),
           batch_symptom, _show_curve(200, "your draw: 200 steps")),
    Family("no-updates", "the loss does not move", "00_start_here",
           ("missing-step", "lr-zero", "requires-grad-off", "clip-to-zero"),
           Pipeline(seq_len=16, model=_SMALL_MODEL, n_train=512, n_val=64, batch_size=16, steps=40, warmup=5),
           training_moves, _show_curve(40, "your draw: 40 steps")),
    Family("wrong-gradient", "the loss moves, but not as a correct gradient would move it", "03_overfit_controls",
           ("zero-grad-forgotten", "loss-broadcast"),
           Pipeline(seq_len=16, model=_SMALL_MODEL, batch_size=8, n_train=256, n_val=64),
           wrong_gradient_symptom, _show_overfit),
    Family("non-finite", "the loss or the gradients go NaN or inf", "02_nan_decision_tree",
           ("causal-mask-strict", "loss-scaled-in-fp16", "adam-eps-zero", "lr-sign-typo"),
           Pipeline(seq_len=8, model=ModelConfig(n_ctx=8, d_model=32, n_head=2, n_layer=2, d_mlp=96),
                    batch_size=32, n_train=1024, steps=200),
           nonfinite_symptom, _show_curve(NONFINITE_HORIZON, f"your draw: {NONFINITE_HORIZON} steps")),
    Family("late-spike", "a healthy run, then a loss spike late in the run", "04_late_spike",
           ("corrupted-shard", "garbled-shard", "lr-burst"),
           Pipeline(seq_len=16, model=_SMALL_MODEL, n_symbols=8, steps=200, n_train=2048, n_val=64,
                    batch_size=32, warmup=20),
           spike_symptom, _show_curve(75, "your draw: 75 steps")),
    Family("validation", "training improves, validation does not agree", "05_validation_gap",
           ("dropout-left-on-in-eval", "train-set-too-small", "val-from-another-source", "val-overlaps-train"),
           Pipeline(seq_len=16, model=dataclasses.replace(_SMALL_MODEL, dropout=0.1), n_train=2048, n_val=256,
                    batch_size=16, steps=45, lr=3e-2, warmup=10),
           validation_symptom, _show_validation),
    Family("throughput", "steps get slower", "06_throughput",
           ("sync-checkpoint-every-k", "eval-every-step", "item-per-parameter-logging", "data-source-stalls"),
           Pipeline(seq_len=16, model=_SMALL_MODEL, n_train=2048, n_val=128, batch_size=16, steps=48, lr=3e-2,
                    warmup=10),
           throughput_symptom, _show_throughput),
    Family("resume", "a resumed run is not the run it continues", "07_stale_resume",
           ("stale-lr-resume", "optimizer-state-dropped", "scheduler-dropped", "data-cursor-reset"),
           Pipeline(seq_len=16, model=dataclasses.replace(_SMALL_MODEL, dropout=0.1), n_train=1024, n_val=64,
                    batch_size=16, steps=40, lr=1e-2, warmup=5),
           resume_symptom, _show_resume),
    Family("generation", "a good loss, poor generated text", "08_generation",
           ("kv-cache-position-offset", "kv-cache-not-appended", "first-position-logits", "temperature-after-softmax"),
           Pipeline(n_symbols=8, seq_len=16, model=_SMALL_MODEL, n_train=4096, n_val=256, batch_size=32, steps=300,
                    lr=3e-2, warmup=10),
           generation_symptom, _show_generation),
    Family("evaluation", "a good model, a weak task score", "09_eval_harness",
           ("option-without-delimiter", "fewshot-count-ignored", "template-differs-from-training",
            "truncation-cuts-question"),
           Pipeline(), evaluation_symptom, _show_evaluation),
)}
FAMILY_NAMES = tuple(FAMILIES)
FAMILY_OF = {bug: f.name for f in FAMILIES.values() for bug in f.bugs}


def print_families() -> None:
    """The list a learner names their family from: name, what it looks like, the notebook. A family's
    candidate bugs: ``print_candidates(family)``."""
    for f in FAMILIES.values():
        print(f"{f.name!r:>18}: {f.looks_like} (notebook {f.notebook})")


def print_candidates(family: str) -> None:
    """The candidate causes of ``family`` (one of ``FAMILY_NAMES``): each of its bugs (``FAMILIES[family].bugs``)
    with the catalogue's one-line symptom (``course.bugs.get(name)``; its ``.doc`` says more). They are
    the competing hypotheses a diagnosis record weighs, besides a healthy pipeline; they share the
    family's symptom, so only a test tells them apart. Prints nothing about any draw."""
    from ..bugs import get

    if family not in FAMILIES:
        raise KeyError(f"no family {family!r}; the families are {FAMILY_NAMES}")
    print(f"{family!r}: {FAMILIES[family].looks_like}; its candidate bugs:")
    for name in FAMILIES[family].bugs:
        print(f"  {name}: {get(name).symptom}")


# ----- drawing ------------------------------------------------------------------------------------
def _number(name: str, attempt: int, what: str) -> int:
    digest = hashlib.sha256(f"{SALT}|{what}|{name}|{attempt}".encode("utf-8")).hexdigest()
    return int(digest, 16)


def _choice(name: str, attempt: int = 0) -> tuple[str, str, int]:
    """(family, bug, seed) of the draw of ``name``: three independent SHA-256 hashes."""
    name = str(name)
    family = FAMILY_NAMES[_number(name, attempt, "family") % len(FAMILY_NAMES)]
    bugs = FAMILIES[family].bugs
    return family, bugs[_number(name, attempt, "bug") % len(bugs)], _number(name, attempt, "seed") % 1_000_000


def draw_for(name: str, attempt: int = 0) -> Pipeline:
    """The opaque mystery pipeline of ``name`` (a student id, or any name for self-study); the same
    name gives the same draw, ``attempt > 0`` a fresh practice draw. Raises ValueError for a blank
    name. Switched off while a learner's code is graded."""
    if not str(name).strip():
        raise ValueError("draw_for needs a name")
    family, bug, seed = _choice(name, attempt)
    return mystery.make(bug, seed, FAMILIES[family].base, salt=SALT)


def grading_draws(name: str, salt: str, n_broken: int = 2, n_healthy: int = 2,
                  attempt: int = 0) -> tuple[dict, dict]:
    """(healthy, broken): ``n_healthy`` healthy draws of the base of ``name``'s family and
    ``n_broken`` fresh draws of ``name``'s bug, each with a configuration of its own (seeds from
    ``salt``): the cases a detector is graded on, besides the learner's own draw. Hidden draws
    (``mystery.Hidden``): made inside the graded call."""
    family, bug, _ = _choice(name, attempt)
    base = FAMILIES[family].base
    seeds = [_number(f"{name}|{salt}", attempt, f"grading {i}") % 1_000_000 for i in range(n_broken + n_healthy)]
    broken = {f"a fresh draw of your bug ({i + 1})": mystery.hidden(bug, s, base, salt=salt)
              for i, s in enumerate(seeds[:n_broken])}
    healthy = {f"a healthy draw of the same recipe ({i + 1})": mystery.hidden(mystery.HEALTHY, s, base, salt=salt)
               for i, s in enumerate(seeds[n_broken:])}
    return healthy, broken


def fresh_draws(pipe: Pipeline, salt: str, n: int = 2) -> list[mystery.Hidden]:
    """``n`` fresh draws of ``pipe``'s bug on its family's base, configurations from ``salt``: the
    draws a fix is graded on besides the learner's own. Hidden draws (``mystery.Hidden``): made
    inside the graded call (and by ``check_fix`` again in the kernel, after it)."""
    bug = mystery.reveal(pipe)
    base = FAMILIES[FAMILY_OF[bug]].base
    return [mystery.hidden(bug, _number(salt, i, "fix") % 1_000_000, base, salt=salt) for i in range(n)]


_CONFIG_FIELDS = ("language_seed", "data_seed", "val_seed", "lr", "warmup")  # drawn per draw (course.exercises.mystery)


def _recipe(pipe: Pipeline) -> tuple:
    return tuple((f.name, getattr(pipe, f.name)) for f in dataclasses.fields(Pipeline)
                 if f.name not in PARTS and f.name != "bugs" and f.name not in _CONFIG_FIELDS)


def show(pipe: Pipeline) -> None:
    """Print and plot what a learner sees first of ``pipe``: the view of the family whose recipe
    (the fixed settings of its base) ``pipe`` has, so it works on a draw and on a fixed draw alike.
    Trains or exercises the pipeline on seed 0; a few seconds at most."""
    recipe = _recipe(pipe)
    for fam in FAMILIES.values():
        if _recipe(fam.base) == recipe:
            return fam.show(pipe)
    raise ValueError("show needs a capstone draw (or a fix of one): this pipeline's settings are no capstone recipe")


# ----- the notebook's practice widget ---------------------------------------------------------------
def practice_explorer(name: str, attempts: int = 6):
    """A widget for practising the first step, naming a family from a symptom, on draws that are not
    graded: a drop-down over practice attempts 1..``attempts`` of ``name`` (``draw_for(name, k)``), a
    drop-down for a guess among ``FAMILY_NAMES``, a button that says whether the guess is right (and
    which notebook's tools the draw needs), and an Output area where the chosen draw's ``show`` runs.

    Nothing runs until a draw is chosen (each choice trains or runs that draw: a few seconds). Attempt
    0, the graded draw, is never offered. Returns a ``VBox`` with ``.attempt``, ``.guess``,
    ``.check``, ``.verdict`` and ``.output`` attributes."""
    import ipywidgets as widgets

    if attempts < 1:
        raise ValueError("practice_explorer needs at least one practice attempt")
    choices = [("pick a practice draw", 0)] + [(f"practice draw {k}", k) for k in range(1, attempts + 1)]
    attempt = widgets.Dropdown(options=choices, value=0, description="draw")
    guess = widgets.Dropdown(options=FAMILY_NAMES, value=FAMILY_NAMES[0], description="your family")
    check = widgets.Button(description="check my family")
    verdict = widgets.HTML("choose a practice draw, read its symptom, then name its family")
    output = widgets.Output()

    def on_attempt(change=None) -> None:
        output.clear_output()
        verdict.value = "read the symptom below, then name its family"
        if attempt.value:
            with output:
                print(f"practice draw {attempt.value} of {name!r} (not graded):")
                show(draw_for(name, attempt.value))

    def on_check(button=None) -> None:
        if not attempt.value:
            verdict.value = "choose a practice draw first"
            return
        family = FAMILIES[answer_family(draw_for(name, attempt.value))]
        if guess.value == family.name:
            verdict.value = f"<b>right</b>: {family.name!r} (its tools: notebook {family.notebook})"
        else:
            verdict.value = (f"<b>not {guess.value!r}</b>: this draw is {family.name!r} ({family.looks_like}; "
                             f"notebook {family.notebook}). Which test would have told the two apart?")
        with output:
            print(f"your guess {guess.value!r}: {'right' if guess.value == family.name else 'wrong'}")

    attempt.observe(on_attempt, names="value")
    check.on_click(on_check)
    box = widgets.VBox([widgets.HBox([attempt, guess, check]), verdict, output])
    box.attempt, box.guess, box.check, box.verdict, box.output = attempt, guess, check, verdict, output
    return with_text(box, lambda: f"practice draw {attempt.value}: {html_text(verdict.value)}"
                              " (choose draws and check guesses in JupyterLab)")


# ----- for the grader, the unit tests and the instructor (switched off while learner code runs) ----
def answer_family(pipe: Pipeline) -> str:
    """The capstone family of a drawn pipeline (``"healthy"`` for a healthy draw)."""
    bug = mystery.reveal(pipe)
    return mystery.HEALTHY if bug == mystery.HEALTHY else FAMILY_OF[bug]


def family_of(pipe: Pipeline) -> Family:
    """The ``Family`` whose base ``pipe`` was drawn on (by its answer; for the grader)."""
    return FAMILIES[answer_family(pipe)]


def reference_fix(pipe: Pipeline) -> Pipeline:
    """The fix a solution writes: every field the bug touched replaced by the base's healthy part,
    everything else kept (the same objects). A healthy draw comes back unchanged."""
    fields = mystery.touched(pipe)
    if not fields:
        return pipe
    base = family_of(pipe).base
    return pipe.replace(**{f: getattr(base, f) for f in fields})


def summary_row(student_id: str) -> tuple[str, str]:
    """(family, bug) of the draw of ``student_id`` (attempt 0): the instructor's summary column."""
    family, bug, _ = _choice(student_id)
    return family, bug


# What a test cell switches off while learner code runs (course.exercises.grading.switched_off): the answer
# (``SWITCHED_OFF``), and the package checks that would answer "is this pipeline broken?" for some
# family (``PACKAGE_CHECKS``: each family's symptom, each family's first view ``show``, since its
# printout compared with a healthy twin's tells the two apart, and the notebooks' reference checks).
# The tools the notebooks teach with (train_steps, split_run, differences, traced, overfit_pipe,
# healthy_twin, ...) stay on.
SWITCHED_OFF = (answer_family, family_of, reference_fix, summary_row, draw_for, grading_draws,
                fresh_draws, practice_explorer, _choice, mystery.reveal, mystery.touched, mystery.draw, mystery.make)


def _package_checks() -> tuple:
    from ..toolkit import baselines, checks, nonfinite, preflight
    from ..reference import checkpoint, diagnose
    from ..lessons import amp, generate, harness, instability, replay, throughput, valgap
    from ..toolkit.alerts import AlertPolicy

    return tuple(f.symptom for f in FAMILIES.values()) + tuple(dict.fromkeys(f.show for f in FAMILIES.values())) + (show,) + (
        diagnose.held_out_symptom, diagnose.finite_and_falling, amp.overflow_problems,
        instability.problems, checks.check_batch, checks.update_report, checks.position_sensitivity,
        checks.past_sensitivity, checks.future_sensitivity, diagnose.locate, nonfinite.first_nonfinite,
        preflight.preflight, diagnose.preflight_pipeline, replay.spike_symptom, replay.spike_alerts,
        AlertPolicy.observe, valgap.problems, valgap.eval_path_check, throughput.problems, throughput.regressions,
        throughput.slow_phase, checkpoint.resume_check, generate.consistency_problems, generate.generator_problems,
        harness.problems)


PACKAGE_CHECKS = _package_checks()


def switched_off_names() -> list[str]:
    """Everything switched off while a capstone answer is graded (``SWITCHED_OFF + PACKAGE_CHECKS``),
    each once, sorted: ``module.qualname``, or ``FAMILIES['family'].show`` for a view or symptom
    made inside this module (a view several families share is listed under the first)."""
    by_family = {}
    for fam in FAMILIES.values():
        by_family.setdefault(fam.symptom, f"FAMILIES[{fam.name!r}].symptom")
        by_family.setdefault(fam.show, f"FAMILIES[{fam.name!r}].show")
    names = []
    for f in SWITCHED_OFF + PACKAGE_CHECKS:
        qualname = getattr(f, "__qualname__", repr(f))
        names.append(by_family[f] if "<locals>" in qualname and f in by_family else f"{f.__module__}.{qualname}")
    return sorted(set(names))
