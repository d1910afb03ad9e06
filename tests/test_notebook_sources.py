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
