"""`make solutions` (autograder/execute_notebooks.py) never silently reverts an edit made in the .ipynb.

The jupytext twin ``solutions/<a>/<a>.py`` is the source; the ``.ipynb`` is rebuilt from it. An
edit made in the notebook instead (JupyterLab's Create Assignment panel: points, a cell's type)
was overwritten by the next ``make solutions`` without a word. Now the build refuses, before
running anything, and names the cell and field. Each test writes a toy course's twin and its
notebook built from it (not executed: the check reads cells and metadata only), in a folder
outside git; no kernel starts. Also: the Jupyter pre-save hook that keeps a notebook opened in
JupyterLab unchanged.
"""
import json
import os

import jupytext
import nbformat
import pytest

from autograder import execute_notebooks as ex
from autograder import toy_course

A = "toy"


@pytest.fixture
def toy(tmp_path):
    """solutions/toy/toy.py and toy.ipynb built from it, the .ipynb not newer than the .py."""
    folder = tmp_path / "solutions" / A
    folder.mkdir(parents=True)
    text, path = folder / f"{A}.py", folder / f"{A}.ipynb"
    jupytext.write(toy_course.toy_notebook(), text, fmt="py:percent")
    nbformat.write(ex.from_text(text), path)
    os.utime(text, (1_000_000_100, 1_000_000_100))
    os.utime(path, (1_000_000_000, 1_000_000_000))
    return path


def _edit_ipynb(path, grade_id, **meta):
    """What the Create Assignment panel does: change the cell's nbgrader metadata, save (now)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)
    cell["metadata"]["nbgrader"].update(meta)
    path.write_text(json.dumps(nb, indent=1), encoding="utf-8")


def _edit_twin(path, grade_id, **meta):
    """What an author does: change the cell's metadata in the .py source (saved now)."""
    text = path.with_suffix(".py")
    nb = jupytext.read(text)
    next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
         ).metadata["nbgrader"].update(meta)
    jupytext.write(nb, text, fmt="py:percent")


def _run(capsys, *args):
    code = ex.main(list(map(str, args)))
    return code, capsys.readouterr().err


def test_refuses_when_the_notebook_has_other_points_than_its_source(toy, capsys):
    _edit_ipynb(toy, "test_cube", points=3)
    before = toy.read_bytes()
    code, err = _run(capsys, toy)  # a full build: it must stop before executing anything
    assert code == 2, err
    assert "test_cube" in err and "points is 3.0 in toy.ipynb but 2.0 in toy.py" in err, err
    assert toy.read_bytes() == before, "the refused build changed the notebook"


def test_refuses_when_the_panel_changed_a_cell_type(toy, capsys):
    _edit_ipynb(toy, "explain", grade=False)  # "Manually graded answer" -> "Autograded answer"
    code, err = _run(capsys, "--check", toy)
    assert code == 2, err
    assert "explain" in err and ("nbgrader type is 'Autograded answer' in toy.ipynb but "
                                 "'Manually graded answer' in toy.py") in err, err


def test_passes_when_notebook_and_source_agree(toy, capsys):
    assert _run(capsys, "--check", toy) == (0, "")


def test_passes_when_the_panel_edit_was_copied_into_the_source(toy, capsys):
    _edit_ipynb(toy, "test_cube", points=3)
    _edit_twin(toy, "test_cube", points=3)
    assert _run(capsys, "--check", toy)[0] == 0


def test_a_change_made_in_the_source_after_a_build_is_the_sources(toy, capsys):
    """The build records what it wrote: the .ipynb still holding it means the .py changed."""
    record = ex.record_path(toy)
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps(ex.grading_view(json.loads(toy.read_text(encoding="utf-8")))))
    _edit_twin(toy, "test_cube", points=5)
    os.utime(toy)  # the notebook newer than its source: only the record tells who changed what
    assert _run(capsys, "--check", toy)[0] == 0


def test_discarding_the_notebook_edits_is_explicit(toy, capsys, monkeypatch):
    _edit_ipynb(toy, "test_cube", points=3)
    monkeypatch.setenv(ex.DISCARD_ENV, "1")
    assert _run(capsys, "--check", toy)[0] == 0


def test_lab_pre_save_hook_drops_what_opening_a_notebook_adds():
    model = {"type": "notebook", "content": {
        "metadata": {"kernelspec": {"name": "debug-course"}, "language_info": {"name": "python"},
                     "widgets": {"state": {}}}, "cells": []}}
    ex.lab_pre_save(model=model, path="solutions/a/a.ipynb", contents_manager=None)
    assert model["content"]["metadata"] == {"kernelspec": {"name": "debug-course"}}
    other = {"type": "file", "content": "text"}
    ex.lab_pre_save(model=other, path="a.txt")
    assert other == {"type": "file", "content": "text"}
