"""Opening a solution notebook in JupyterLab and closing it leaves its file as it was.

JupyterLab saves a notebook it opened as soon as it counts as changed (autosave), and it counts
as changed when the kernel reports ``language_info``: the file gained that metadata, git showed
every opened solution as modified, and tests/test_release.py failed ("out of date, cells
differing: []"). Here each ``solutions/<a>/<a>.ipynb`` (a copy in the server's root) is opened
on the course kernel, nothing is run, File > Save Notebook does now what autosave does later,
and the file must be byte for byte what it was. The server runs with the course's pre-save hook
(``autograder.execute_notebooks.lab_pre_save``), as ``make lab`` and ``make lab-instructor`` do.
"""
from __future__ import annotations

import json
import shutil

import pytest

import lab_page as lp
from autograder import grading

KERNEL_DISPLAY = "Python 3 (debug course)"


def _difference(before: bytes, after: bytes) -> str:
    old, new = json.loads(before), json.loads(after)
    keys = sorted(k for k in set(old["metadata"]) | set(new["metadata"])
                  if old["metadata"].get(k) != new["metadata"].get(k))
    cells = [i for i, (x, y) in enumerate(zip(old["cells"], new["cells"])) if x != y]
    lines = [(i, a, b) for i, (a, b) in enumerate(zip(before.decode().splitlines(),
                                                      after.decode().splitlines())) if a != b]
    return (f"notebook metadata changed: {keys}; cells changed: {cells[:10]}; other fields: "
            f"{sorted(k for k in set(old) | set(new) if k not in ('metadata', 'cells') and old.get(k) != new.get(k))}; "
            f"first differing line: {lines[:1]}")


@pytest.mark.parametrize("assignment", grading.assignments())
def test_opening_and_saving_a_solution_changes_nothing(assignment, page, lab):
    rel = f"opened/solutions/{assignment}/{assignment}.ipynb"
    path = lab.root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(grading.source_path(assignment), path)
    before = path.read_bytes()
    lp.open_notebook(page, lab, rel, f"open-{assignment}", KERNEL_DISPLAY)  # kernel idle
    mtime = path.stat().st_mtime_ns
    lp.menu(page, "File", "Save Notebook")
    for _ in range(150):
        if path.stat().st_mtime_ns != mtime:
            break
        page.wait_for_timeout(200)
    else:
        raise AssertionError(f"File > Save Notebook did not write {rel} in 30 s")
    page.wait_for_timeout(300)  # let the write finish
    after = path.read_bytes()
    assert after == before, f"opening and saving {rel} in JupyterLab changed it: " \
                            f"{_difference(before, after)}"
