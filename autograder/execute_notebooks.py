"""Rebuild solution notebooks from their text sources and execute them (``make solutions``).

    python -m autograder.execute_notebooks solutions/*/*.ipynb

Contract, per notebook path ``<dir>/<a>.ipynb`` given:
- If the jupytext text file ``<dir>/<a>.py`` exists, it is the source: the notebook is rebuilt
  from it (its cells, their nbgrader metadata and the header's kernelspec), without jupytext
  metadata (nbgrader would copy that into the release). Cell ids are made deterministic (the
  grade_id, else a hash of the cell's type and source), so rebuilding an unchanged text file
  changes no id and no release. Without a text file the notebook itself is executed.
- Every cell runs with nbclient on the ``debug-course`` kernel, with ``<dir>`` as working
  directory. A cell that raises stops the run and the file is left unchanged (a cell meant to
  raise needs the ``raises-exception`` tag); the exit status is then 1.
- Before saving, what changes on every run is removed so diffs show real changes only:
  ``stderr`` stream outputs (progress bars, warnings), per-cell timing metadata
  (``metadata.execution``), widget state (``metadata.widgets``) and widget views (their text/plain
  stays); consecutive stdout chunks are merged. Other outputs are kept as they are.
- The ``.py`` twin is the source, so an edit made in the ``.ipynb`` (JupyterLab's Create
  Assignment panel: a cell's type, points, grade id) would be overwritten. Before executing
  anything, each notebook's grading metadata (per cell id: cell type, nbgrader type, grade_id,
  points) is compared with what the twin gives. A value that differs is the twin's own change
  when the ``.ipynb`` still holds what a build or the last commit put there (the record
  ``.build/solutions/<a>.grading.json`` next to the course root, written by each build, and
  ``git show HEAD:``); for a cell neither knows, when the ``.py`` is newer than the ``.ipynb``.
  Otherwise the ``.ipynb`` was edited: nothing runs, each such cell and field is printed, and
  the exit status is 2. Copy the change into ``<a>.py``, or discard it with
  ``--discard-notebook-edits`` (or ``COURSE_DISCARD_NOTEBOOK_EDITS=1 make solutions``).
  ``--check`` only compares.
- ``lab_pre_save`` is a Jupyter server pre-save hook (``make lab``, ``make lab-instructor``,
  tests/browser): it drops the notebook metadata a kernel or JupyterLab adds on opening
  (``VOLATILE_METADATA``: ``language_info``, which names the exact Python version, and widget
  state), so opening and closing a notebook leaves its file as it was.
"""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
from nbclient.exceptions import CellExecutionError

from . import machine
from .kernel_polls import CourseNotebookClient

KERNEL_NAME = "debug-course"
CELL_TIMEOUT = 600  # seconds; a solution cell is never expected to get near it


def from_text(text: Path) -> nbformat.NotebookNode:
    """The notebook that jupytext reads from ``text``, minus jupytext metadata, with ids that
    depend only on the cells (jupytext draws random ones)."""
    nb = jupytext.read(text)
    nb.metadata.pop("jupytext", None)
    seen = set()
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        base = grade_id or hashlib.sha1(f"{cell.cell_type}\n{cell.source}".encode()).hexdigest()[:8]
        cell_id, n = base, 1
        while cell_id in seen:
            n += 1
            cell_id = f"{base}-{n}"
        seen.add(cell_id)
        cell.id = cell_id
    return nb


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# Notebook-level metadata that a kernel or JupyterLab adds and nbgrader does not use: builds drop
# it, the Lab pre-save hook drops it, the release comparison (tests/test_release.py) ignores it.
VOLATILE_METADATA = ("language_info", "widgets")


def strip_volatile(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Make ``nb`` (in place) the same on every run of the same code: drop stderr streams, cell
    timing metadata, widget state and widget views (random model ids pointing at that state; the
    output's text/plain stays), and merge consecutive stdout chunks (split where the kernel
    happened to flush)."""
    # language_info: the kernel records its exact Python version there; a patch release elsewhere
    # would change the saved notebook and so the committed release. Jupyter fills it in again
    # when a notebook runs.
    for key in VOLATILE_METADATA:
        nb.metadata.pop(key, None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        outputs = []
        for out in cell.outputs:
            if out.output_type == "stream":
                if out.name == "stderr":
                    continue
                if outputs and outputs[-1].output_type == "stream" and outputs[-1].name == out.name:
                    outputs[-1].text += out.text
                    continue
            elif WIDGET_VIEW in out.get("data", {}):
                del out.data[WIDGET_VIEW]
            outputs.append(out)
        cell.outputs = outputs
    return nb


def lab_pre_save(model: dict, path: str, contents_manager=None, **kwargs) -> None:
    """Jupyter server pre-save hook (``--ContentsManager.pre_save_hook=``
    ``autograder.execute_notebooks.lab_pre_save``): remove ``VOLATILE_METADATA`` from a notebook
    before it is written. JupyterLab marks a notebook changed as soon as its kernel reports
    ``language_info`` and autosaves it; without this, merely opening a solution notebook changed
    the file and the committed release no longer matched it."""
    if model.get("type") == "notebook" and isinstance(model.get("content"), dict):
        metadata = model["content"].get("metadata", {})
        for key in VOLATILE_METADATA:
            metadata.pop(key, None)


# ------------------------------------------------- edits made in the .ipynb instead of the twin

def _panel_type(meta: dict) -> str:
    """The cell type as nbgrader's Create Assignment panel names it."""
    if meta.get("task"):
        return "Manually graded task"
    if meta.get("grade") and meta.get("solution"):
        return "Manually graded answer"
    if meta.get("solution"):
        return "Autograded answer"
    if meta.get("grade"):
        return "Autograder tests"
    if meta.get("locked"):
        return "Read-only"
    return "-"


def grading_view(nb: dict) -> dict[str, dict]:
    """cell id -> what grading reads from the cell and the Create Assignment panel edits: the
    notebook cell type, the nbgrader type, grade_id (nbgrader cells) and points (graded cells)."""
    view = {}
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        entry = {"cell type": cell["cell_type"], "nbgrader type": _panel_type(meta)}
        if entry["nbgrader type"] != "-":
            entry["grade_id"] = meta.get("grade_id")
        if meta.get("grade") or meta.get("task"):
            points = meta.get("points")
            entry["points"] = float(points) if isinstance(points, (int, float)) else points
        view[cell.get("id")] = entry
    return view


def record_path(path: Path) -> Path:
    """Where a build of ``<root>/solutions/<a>/<a>.ipynb`` records its grading view:
    ``<root>/.build/solutions/<a>.grading.json`` (git-ignored; never inside solutions/<a>/, which
    nbgrader would copy into the release)."""
    return path.parent.parent.parent / ".build" / "solutions" / f"{path.stem}.grading.json"


def _baselines(path: Path) -> list[dict]:
    """Grading views the .ipynb is known to have had from a build: the last build's record and
    the committed version (``git show HEAD:``), where available."""
    views = []
    try:
        views.append(json.loads(record_path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        pass
    try:
        head = subprocess.run(["git", "-C", str(path.parent), "show", f"HEAD:./{path.name}"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              timeout=60)
        if head.returncode == 0:
            views.append(grading_view(json.loads(head.stdout)))
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    return views


def notebook_edits(path: Path) -> list[str]:
    """For notebook ``path`` with a twin ``path.with_suffix('.py')``: one line per cell and field
    whose value in the .ipynb was set there (not by a build) and differs from the twin's."""
    text = path.with_suffix(".py")
    if not (text.exists() and path.exists()):
        return []
    current = grading_view(json.loads(path.read_text(encoding="utf-8")))
    twin = grading_view(from_text(text))
    bases = _baselines(path)
    ipynb_newer = path.stat().st_mtime > text.stat().st_mtime
    found = []
    for n, (cid, mine) in enumerate(current.items()):
        theirs = twin.get(cid)
        if theirs == mine:
            continue
        known = [b[cid] for b in bases if cid in b]
        if not known and not ipynb_newer:
            continue  # a cell no build recorded, and the twin was edited last: the twin's
        gid = mine.get("grade_id")
        name = f"cell {n} (" + (f"grade_id {gid}" if gid == cid else
                                f"id {cid}" + (f", grade_id {gid}" if gid else "")) + ")"
        if theirs is None:
            if mine["nbgrader type"] != "-" and mine not in known:
                found.append(f"{name}: {mine['nbgrader type']} in {path.name}, "
                             f"no cell with this id in {text.name}")
            continue
        for field in [f for f in ("cell type", "nbgrader type", "grade_id", "points")
                      if mine.get(f) != theirs.get(f)]:
            if not any(k.get(field) == mine.get(field) for k in known):
                found.append(f"{name}: {field} is {mine.get(field)!r} in {path.name} but "
                             f"{theirs.get(field)!r} in {text.name}")
    return found


def execute(path: Path) -> None:
    """(Re)build notebook ``path`` from its text twin if any, run it top to bottom, save it; for a
    solution notebook, record this machine as the one its outputs come from (``autograder.machine``)."""
    text = path.with_suffix(".py")
    nb = from_text(text) if text.exists() else nbformat.read(path, as_version=4)
    # store_widget_state stays on: with it off, nbclient 0.11 raises KeyError in
    # output_widget.py when an Output widget receives output. The state is stripped below.
    client = CourseNotebookClient(nb, kernel_name=KERNEL_NAME, timeout=CELL_TIMEOUT, record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    nbformat.write(strip_volatile(nb), path)
    if path.parent.parent == machine.REPO / "solutions":  # a solution notebook: note where its outputs came from
        machine.record(path.stem)
    if text.exists():
        record = record_path(path)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(grading_view(nb), indent=1, sort_keys=True), encoding="utf-8")


DISCARD_ENV = "COURSE_DISCARD_NOTEBOOK_EDITS"


def main(argv: list[str]) -> int:
    """Execute each notebook path in ``argv``; return 1 if any failed, 2 when a notebook holds
    edits its twin lacks (nothing is executed then), else 0. Flags: ``--check`` (compare only),
    ``--discard-notebook-edits`` (build anyway; also ``$COURSE_DISCARD_NOTEBOOK_EDITS=1``)."""
    check_only = "--check" in argv
    discard = "--discard-notebook-edits" in argv or os.environ.get(DISCARD_ENV, "") not in ("", "0")
    argv = [a for a in argv if a not in ("--check", "--discard-notebook-edits")]
    if not discard:
        edits = {name: notebook_edits(Path(name).resolve()) for name in argv}
        edits = {name: lines for name, lines in edits.items() if lines}
        if edits:
            for name, lines in edits.items():
                twin = Path(name).with_suffix(".py").name
                print(f"REFUSING to rebuild {name}: it was edited (e.g. in JupyterLab's Create "
                      f"Assignment panel) and {twin}, its source, says otherwise:", file=sys.stderr)
                for line in lines:
                    print(f"  {line}", file=sys.stderr)
            print(f"Make the same change in the .py file (the source; `make solutions` rebuilds "
                  f"the .ipynb from it), or discard the notebook's edits with "
                  f"`{DISCARD_ENV}=1 make solutions`. Nothing was executed.", file=sys.stderr)
            return 2
    if check_only:
        print(f"{len(argv)} notebook(s) agree with their text sources")
        return 0
    failed = []
    for name in argv:
        print(f"executing {name}", flush=True)
        try:
            execute(Path(name).resolve())
        except CellExecutionError as err:
            print(f"FAILED {name}:\n{err}", file=sys.stderr)
            failed.append(name)
    if failed:
        print(f"{len(failed)} notebook(s) failed: {' '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
