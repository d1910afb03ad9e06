"""The course as a learner uses it: every notebook run in JupyterLab, in headless Chromium.

Notebooks are discovered, not listed: every ``solutions/<a>/<a>.ipynb`` and every released
``notebooks/<a>/<a>.ipynb`` (``autograder.grading``). For each one the page opens it on the course
kernel, saves it as opened (the file must not change: ``lab_page.check_open_save_unchanged``),
runs Run > Run All Cells, saves it, and checks:

- solution notebooks, as a learner who finished them has them (``_finished``: the hidden tests
  taken out, as in the release; nbval runs them in this same kernel): no cell ends with an error
  and every code cell ran; at least one plot, and
  every image the kernel sent is decoded on the page; every widget renders, and changing one of
  its controls through the page (slider drag or arrow keys, drop-down, button, checkbox) changes
  its Output area. A notebook that uses ipywidgets but shows no widget fails; one that does not
  use them is reported as having none.
- student notebooks (untouched releases): Run All stops with NotImplementedError and nothing
  else; whatever ran before it (plots, widgets) renders and responds.
- nbgrader's JupyterLab extension: the Assignments view loads; the Validate toolbar button
  reports NotImplementedError failures on an untouched release and success on the solution.
  Validation executes the whole notebook again (about as long as a run), so by default only the
  first assignment is validated; ``BROWSER_VALIDATE=all`` validates every one.

One screenshot per notebook goes to ``.screenshots/`` (git-ignored), with the widget (or the
first error of a student notebook) in view; ``.screenshots/summary.txt`` (``summary-gw<N>.txt``
per worker under pytest-xdist) lists what each run did.
"""
from __future__ import annotations

import io
import os
import re
import shutil
import time

import nbformat
import pytest
from nbgrader.preprocessors import ClearHiddenTests

import lab_page as lp
from autograder import grading

KERNEL_DISPLAY = "Python 3 (debug course)"
ASSIGNMENTS = grading.assignments()
RELEASED = [a for a in ASSIGNMENTS if grading.release_path(a).exists()]
VALIDATED = ASSIGNMENTS if os.environ.get("BROWSER_VALIDATE") == "all" else ASSIGNMENTS[:1]


@pytest.fixture(scope="session")
def report(screenshots):
    """Lines for .screenshots/summary.txt; under pytest-xdist each worker writes its own
    summary-<worker>.txt (workers share the folder, not the list)."""
    lines = []
    yield lines
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    name = f"summary-{worker}.txt" if worker else "summary.txt"
    (screenshots / name).write_text("\n".join(lines) + "\n")


def _say(capsys, report, line):
    report.append(line)
    with capsys.disabled():
        print(f"\n    {line}", end="")


def _widget_checks(page, run, capsys, report, required: bool) -> None:
    lp.check_widgets_render(page, run)
    if required:
        lp.check_widget_shown(run)
    if run.widget_views == 0:
        _say(capsys, report, f"{run.path}: no widget shown")
        return
    for line in lp.check_widgets_respond(page, run):
        _say(capsys, report, f"{run.path}: {line}")


def _written(nb) -> str:
    """The text ``nbformat.write`` gives a notebook: how the repository's notebooks are written."""
    out = io.StringIO()
    nbformat.write(nb, out)
    return out.getvalue()


def _finished(lab, assignment: str) -> str:
    """The server's copy of ``solutions/<a>/<a>.ipynb`` replaced by the notebook a learner has
    when they finished it: the solution's cells with the hidden tests taken out by nbgrader's own
    ``ClearHiddenTests``, as the release is made. A learner never runs a hidden test in JupyterLab;
    nbval runs every one in this same kernel (``make test-notebooks``) and the grader in its own,
    so here they would only repeat work (a third of a solution's run in Chromium, 2026-12-07).
    Metadata and layout are the committed file's (ClearHiddenTests would drop a ``celltoolbar``
    key, which no solution has), so opening and saving it checks what it checked on the solution;
    that holds only if the committed file is what nbformat writes, which is asserted."""
    text = grading.source_path(assignment).read_text(encoding="utf-8")
    nb = nbformat.reads(text, as_version=4)
    assert _written(nb) == text, (f"solutions/{assignment}/{assignment}.ipynb is not laid out as "
                                  "nbformat writes it: make solutions")
    nb, _ = ClearHiddenTests().preprocess(nb, {})
    rel = f"solutions/{assignment}/{assignment}.ipynb"
    (lab.root / rel).write_text(_written(nb), encoding="utf-8")
    return rel


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solution_notebook_runs_renders_and_responds(assignment, page, lab, screenshots,
                                                     capsys, report):
    relpath = _finished(lab, assignment)
    run = lp.run_notebook(page, lab, relpath, f"sol-{assignment}", KERNEL_DISPLAY)
    _say(capsys, report, f"{relpath}: Run All took {run.seconds:.0f} s; "
         f"{run.saved_images()} images, {run.widget_views} widget views")
    for line in run.slow_cells():
        _say(capsys, report, f"{relpath}: {line}")
    lp.check_no_errors(run)
    lp.check_plots(run, at_least=1)
    _widget_checks(page, run, capsys, report, required=True)
    widget = page.locator(lp.WIDGET_VIEW)
    lp.screenshot_at(page, widget if widget.count() else page.locator(lp.IMAGE),
                     screenshots / f"solutions-{assignment}.png")


@pytest.mark.parametrize("assignment", RELEASED)
def test_student_notebook_stops_only_at_exercises(assignment, page, lab, screenshots,
                                                  capsys, report):
    relpath = f"notebooks/{assignment}/{assignment}.ipynb"
    run = lp.run_notebook(page, lab, relpath, f"stu-{assignment}", KERNEL_DISPLAY)
    _say(capsys, report, f"{relpath}: Run All took {run.seconds:.0f} s, stopped at "
         f"{run.errors()[:1]}; {run.saved_images()} images, {run.widget_views} widget views")
    lp.check_only_not_implemented(run)
    lp.check_plots(run, at_least=0)
    _widget_checks(page, run, capsys, report, required=False)
    first_error = page.locator(".jp-OutputArea-output", has_text="NotImplementedError")
    lp.screenshot_at(page, first_error, screenshots / f"notebooks-{assignment}.png")


def _fresh_copy(lab, kind: str, assignment: str) -> str:
    """An untouched copy of the repository's notebook inside the server's root."""
    src = (grading.source_path if kind == "solutions" else grading.release_path)(assignment)
    rel = f"validate/{kind}/{assignment}/{assignment}.ipynb"
    (lab.root / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, lab.root / rel)
    return rel


def _validation_errors(page) -> list[str]:
    """The error text of each failed cell in the Validate dialog (source and error alternate)."""
    blocks = page.locator("#validation-message .jp-RenderedText").all_inner_texts()
    return [b.strip() for b in blocks[1::2]]


@pytest.mark.parametrize("assignment", [a for a in VALIDATED if a in RELEASED])
def test_validate_reports_exercises_on_untouched_release(assignment, page, lab, screenshots,
                                                         capsys, report):
    rel = _fresh_copy(lab, "notebooks", assignment)
    lp.open_notebook(page, lab, rel, f"val-stu-{assignment}", KERNEL_DISPLAY)
    t0 = time.monotonic()
    kind, text = lp.validate(page)
    errors = _validation_errors(page)
    page.screenshot(path=str(screenshots / f"validate-notebooks-{assignment}.png"))
    _say(capsys, report, f"Validate {rel}: {kind} in {time.monotonic() - t0:.0f} s, "
         f"{len(errors)} failed cells")
    assert kind == "validation-failed", (
        f"Validate on the untouched {rel} should list failing cells; it showed ({kind}): "
        f"{text[:1500]}")
    wrong = [e for e in errors if "NotImplementedError" not in e]
    assert errors and not wrong, (
        f"Validate on the untouched {rel}: every failure should be NotImplementedError; "
        f"others: {wrong[:3]}")
    lp.close_dialog(page)


@pytest.mark.parametrize("assignment", VALIDATED)
def test_validate_passes_on_solution(assignment, page, lab, screenshots, capsys, report):
    rel = _fresh_copy(lab, "solutions", assignment)
    lp.open_notebook(page, lab, rel, f"val-sol-{assignment}", KERNEL_DISPLAY)
    t0 = time.monotonic()
    kind, text = lp.validate(page)
    page.screenshot(path=str(screenshots / f"validate-solutions-{assignment}.png"))
    _say(capsys, report, f"Validate {rel}: {kind} in {time.monotonic() - t0:.0f} s")
    assert kind == "validation-success", (
        f"Validate on the solution {rel} should pass; it showed ({kind}): {text[:1500]}")
    lp.close_dialog(page)


def test_assignments_view_loads(page, lab, screenshots, capsys, report):
    page.goto(lab.url("/lab/workspaces/assignments"))
    page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").wait_for(timeout=60_000)
    text = lp.open_assignment_list(page)
    page.screenshot(path=str(screenshots / "assignments-view.png"))
    _say(capsys, report, "Assignments view: " + re.sub(r"\s+", " ", text)[:200])
    for heading in ("Released assignments", "Downloaded assignments", "Submitted assignments"):
        assert heading in text, f"nbgrader's Assignments view lacks {heading!r}: {text[:800]!r}"
    assert "Traceback" not in text and "error" not in text.lower(), (
        f"nbgrader's Assignments view shows an error: {text[:1500]!r}")
