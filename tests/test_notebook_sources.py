"""Each solution notebook is generated from its jupytext text file: the two must say the same thing.

``solutions/<a>/<a>.py`` (percent format) is what authors edit and review; ``make solutions`` turns it
into ``solutions/<a>/<a>.ipynb`` and executes it. If someone edits one and not the other, the
autograder and nbval would be testing a notebook nobody reviewed.
"""

from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
TEXT_FILES = sorted(ROOT.glob("solutions/*/*.py"))


def _cells(nb):
    return [(c.cell_type, c.source, c.metadata.get("nbgrader")) for c in nb.cells]


def test_every_solution_notebook_has_its_text_source():
    notebooks = sorted(ROOT.glob("solutions/*/*.ipynb"))
    assert notebooks, "no solution notebooks found"
    missing = [str(n.relative_to(ROOT)) for n in notebooks if not n.with_suffix(".py").exists()]
    assert not missing, f"solution notebooks without a jupytext .py source: {missing}"


@pytest.mark.parametrize("text", TEXT_FILES, ids=lambda p: p.parent.name)
def test_solution_notebook_matches_its_text_source(text):
    expected = _cells(jupytext.read(text))
    actual = _cells(nbformat.read(text.with_suffix(".ipynb"), as_version=4))
    for i, (want, got) in enumerate(zip(expected, actual)):
        assert want == got, (
            f"{text.with_suffix('.ipynb').name} cell {i} differs from {text.name}; run `make solutions`\n"
            f"text source: {want}\nnotebook:    {got}"
        )
    assert len(expected) == len(actual), f"{len(expected)} cells in {text.name}, {len(actual)} in the notebook; run `make solutions`"


@pytest.mark.parametrize("text", TEXT_FILES, ids=lambda p: p.parent.name)
def test_solution_notebook_names_the_course_kernel(text):
    nb = nbformat.read(text.with_suffix(".ipynb"), as_version=4)
    assert nb.metadata.get("kernelspec", {}).get("name") == "debug-course", "the notebook must run on the debug-course kernel"
    assert "jupytext" not in nb.metadata, "no jupytext pairing metadata: nbgrader would copy it into the student version"


@pytest.mark.parametrize("text", TEXT_FILES, ids=lambda p: p.parent.name)
def test_every_demo_cell_is_left_unrun_when_the_solution_is_graded(text):
    """A cell tagged ``demo`` is skipped by the autograder only when nothing run after it reads a
    name it assigns (autograder/demo_cells.py). A tag on a cell that something needs does nothing
    but mislead: name the cell and what needs it."""
    from autograder import demo_cells

    nb = nbformat.read(text.with_suffix(".ipynb"), as_version=4)
    demos = demo_cells.demo_sources(nb)
    skipped = demo_cells.skippable(nb.cells, demos)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and cell.source in demos and i not in skipped:
            bound = demo_cells.binds(cell.source) or set()
            needs = [(j, sorted(bound & (demo_cells.reads(c.source) or bound)))
                     for j, c in enumerate(nb.cells[i + 1:], i + 1)
                     if c.cell_type == "code" and j not in skipped and bound & (demo_cells.reads(c.source) or bound)]
            pytest.fail(f"{text.name}: cell {i} is tagged demo but would run when graded: "
                        f"later cells read what it assigns {needs[:3]} (untag it, or move what they "
                        f"need into a cell of its own)")
