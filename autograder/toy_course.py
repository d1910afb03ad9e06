"""Write a tiny toy course root, to try the build and grading machinery without the real notebooks.

    python -m autograder.toy_course DIR
    COURSE_ROOT=DIR python -m pytest tests/test_release.py tests/test_autograde.py

writes DIR/solutions/toy/toy.py (jupytext percent format, never released), builds and executes
DIR/solutions/toy/toy.ipynb from it as ``make solutions`` does, copies this repository's
nbgrader_config.py to DIR and runs ``nbgrader generate_assignment toy`` there, so
DIR/notebooks/toy/toy.ipynb is its release. The toy source notebook has what the real ones have: a read-only setup cell, two autograded answers
with visible tests and hidden-test blocks, a demo that prints a wall time and writes to stderr,
and a manually graded markdown answer. ``CASES`` are its targeted submissions.
"""
import shutil
import sys
from pathlib import Path

import jupytext
import nbformat

from autograder import execute_notebooks, grading
from autograder.grading import Case

KERNELSPEC = {"name": "debug-course", "display_name": "Python 3 (debug course)", "language": "python"}


def _cell(kind, source, grade_id=None, grade=False, solution=False, locked=False, points=None):
    cell = nbformat.v4.new_code_cell(source) if kind == "code" else nbformat.v4.new_markdown_cell(source)
    if grade_id:
        meta = {"schema_version": 3, "grade": grade, "solution": solution, "locked": locked,
                "grade_id": grade_id}
        if grade:
            meta["points"] = points
        cell.metadata["nbgrader"] = meta
    return cell


def toy_notebook() -> nbformat.NotebookNode:
    """The toy source notebook (grade ids: setup, square, test_square, note, cube, test_cube, explain)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNELSPEC
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = [
        _cell("markdown", "# Toy assignment\nA stand-in for the real notebooks."),
        _cell("code", "import math\nimport sys", "setup", locked=True),
        _cell("code", "def square(x):\n    ### BEGIN SOLUTION\n    return x * x\n    ### END SOLUTION",
              "square", solution=True),
        _cell("code", "assert square(3) == 9, 'square(3) should be 9'\n"
                      "### BEGIN HIDDEN TESTS\nassert square(-4) == 16, 'negative input'\n"
                      "assert square(0.5) == 0.25  # hidden-only-line\n### END HIDDEN TESTS",
              "test_square", grade=True, locked=True, points=1),
        _cell("markdown", "Now write `cube`.", "note", locked=True),
        _cell("code", "def cube(x):\n    ### BEGIN SOLUTION\n    return x ** 3\n    ### END SOLUTION",
              "cube", solution=True),
        _cell("code", "assert cube(2) == 8\n### BEGIN HIDDEN TESTS\nassert cube(-1) == -1\n"
                      "assert math.isclose(cube(1.5), 3.375)  # hidden-cube-line\n### END HIDDEN TESTS",
              "test_cube", grade=True, locked=True, points=2),
        _cell("code", "print('demo: square(12) =', square(12))\n"
                      "print('time: 0.42 s (wall)')\nprint('progress...', file=sys.stderr)"),
        _cell("markdown", "Why does `square(-4)` equal `square(4)`?\n\n### BEGIN SOLUTION\n"
                          "Because (-x)(-x) = x x: the sign cancels.\n### END SOLUTION",
              "explain", grade=True, solution=True, points=1),
    ]
    return nb


# What nbgrader must make of targeted edits of the toy solution (tests/test_autograde.py runs these
# when the toy is the course under test).
CASES = [
    Case("toy", "wrong_square", {"square": "def square(x):\n    return 2 * x"}, {"test_square"}),
    # passes the visible test, fails a hidden one: the whole test cell scores 0
    Case("toy", "hidden_fail", {"square": "def square(x):\n    return x * abs(x)"}, {"test_square"}),
    # an edited test cell is restored from the gradebook
    Case("toy", "tampered_test", {"test_cube": "pass"}, set()),
    # a deleted test cell is added back (OverwriteCells.add_missing_cells)
    Case("toy", "deleted_test", {"test_square": None}, set()),
    # a deleted answer cell: its test fails, the rest is graded
    Case("toy", "deleted_answer", {"cube": None}, {"test_cube"}),
    # a deleted read-only cell is NOT restored: what needs it fails
    Case("toy", "deleted_setup", {"setup": None}, {"test_cube"}),
]


def main(argv: list[str]) -> int:
    """Write, execute and release the toy course under argv[0]; print that directory."""
    root = Path(argv[0]).resolve()
    folder = root / "solutions" / "toy"
    folder.mkdir(parents=True, exist_ok=True)
    jupytext.write(toy_notebook(), folder / "toy.py", fmt="py:percent")
    execute_notebooks.execute(folder / "toy.ipynb")  # builds toy.ipynb from toy.py
    shutil.copy(grading.REPO / grading.CONFIG_FILE, root / grading.CONFIG_FILE)
    grading.nbgrader(root, "generate_assignment", "toy", "--force")
    print(root)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
