"""The committed release notebooks are exactly what nbgrader makes from the solutions, and leak nothing.

For each assignment found in solutions/ (``COURSE_ROOT`` may point at another course root, e.g. a
toy one from ``python -m autograder.toy_course``), ``nbgrader generate_assignment`` runs in a
throw-away course root with its own gradebook; the result must equal notebooks/<a>/ file for
file (notebooks compared as JSON, less the notebook metadata a kernel or JupyterLab adds and
nbgrader does not use, ``execute_notebooks.VOLATILE_METADATA``) and hold no hidden-test or
solution text of the source. The sources are generated as JupyterLab leaves them after opening
them (``language_info`` added): opening a notebook must not make the release look out of date.
"""
import json
import platform

import pytest

from autograder import grading
from autograder.execute_notebooks import VOLATILE_METADATA

ASSIGNMENTS = grading.assignments()
# What ipykernel reports and JupyterLab saves into a notebook it opened (the version is this
# machine's: another one writes its own).
LANGUAGE_INFO = {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                 "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                 "pygments_lexer": "ipython3", "version": platform.python_version()}


def _as_lab_saves(path):
    nb = _load(path)
    nb["metadata"]["language_info"] = LANGUAGE_INFO
    path.write_text(json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n",
                    encoding="utf-8")


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """assignment -> folder of its freshly generated release, from copies of the sources opened and
    saved as JupyterLab does. One nbgrader run generates every assignment (its assignment id is a
    glob): each run spends seconds starting up, so one run per assignment cost about 50 s more."""
    root = grading.make_course_copy(tmp_path_factory.mktemp("release"), ASSIGNMENTS)
    for a in ASSIGNMENTS:
        _as_lab_saves(grading.source_path(a, root))
    grading.nbgrader(root, "generate_assignment", "*", "--force")
    return {a: root / "notebooks" / a for a in ASSIGNMENTS}


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.is_file() and ".ipynb_checkpoints" not in p.parts)


def _load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _comparable(nb):
    """``nb`` without the notebook metadata that kernels and JupyterLab add (VOLATILE_METADATA)."""
    return {**nb, "metadata": {k: v for k, v in nb["metadata"].items() if k not in VOLATILE_METADATA}}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_committed_release_is_generated_release(generated, assignment):
    fresh = generated[assignment]
    committed = grading.release_path(assignment).parent
    hint = f"notebooks/{assignment}/ is out of date: run `make release` and commit notebooks/"
    assert committed.is_dir(), hint
    assert _files(committed) == _files(fresh), hint
    for name in _files(fresh):
        if name.endswith(".ipynb"):
            new, old = _comparable(_load(fresh / name)), _comparable(_load(committed / name))
            differing = [i for i, (x, y) in enumerate(zip(new["cells"], old["cells"])) if x != y]
            other = sorted(k for k in set(new) | set(old) if k != "cells" and new.get(k) != old.get(k))
            meta = sorted(k for k in set(new["metadata"]) | set(old["metadata"])
                          if new["metadata"].get(k) != old["metadata"].get(k))
            assert new == old, f"{hint} (cells differing: {differing[:10]}, " \
                               f"cell counts {len(new['cells'])} vs {len(old['cells'])}, " \
                               f"other fields differing: {other}, notebook metadata: {meta})"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
@pytest.mark.parametrize("markers", [grading.HIDDEN, grading.SOLUTION], ids=["hidden", "solution"])
def test_release_leaks_no_hidden_tests_or_solutions(generated, assignment, markers):
    source = _load(grading.source_path(assignment))
    secret = grading.secret_lines(source, markers)
    paths = [grading.release_path(assignment), generated[assignment] / f"{assignment}.ipynb"]
    for path in [p for p in paths if p.exists()]:  # a missing release fails the test above
        released = {ln.strip() for cell in _load(path)["cells"]
                    for ln in "".join(cell["source"]).splitlines()}
        leaked = sorted(secret & released)
        assert not leaked, f"{path} shows text from {markers[0]} regions: {leaked[:5]}"
        text = path.read_text(encoding="utf-8")
        assert markers[0] not in text and markers[1] not in text, f"{path} keeps a marker"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_notebooks_name_the_course_kernel(assignment):
    """Lab opens a notebook on the kernel its metadata names: it must be the course kernel."""
    for path in [grading.source_path(assignment), grading.release_path(assignment)]:
        if path.exists():
            name = _load(path)["metadata"].get("kernelspec", {}).get("name")
            assert name == grading.KERNEL_NAME, f"{path} names kernel {name!r}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_deleted_grade_cells_can_be_restored(assignment):
    """With add_missing_cells, nbgrader puts a deleted grade cell back after the nbgrader cell that
    precedes it in the source, looking that cell up among the submission's grade and solution
    cells only (nbgrader/preprocessors/overwritecells.py, add_missing_grade_cells): if it is a
    read-only (locked) or task cell, the lookup raises KeyError and that submission is not graded.
    So the nbgrader cell before each grade cell must be a grade or solution cell."""
    previous, bad = None, []
    for cell in _load(grading.source_path(assignment))["cells"]:
        meta = grading.nbgrader_meta(cell)
        if not any(meta.get(k) for k in ("grade", "solution", "locked", "task")):
            continue  # not recorded in the gradebook
        if meta.get("grade") and previous is not None and not (
                previous.get("grade") or previous.get("solution")):
            bad.append(f"{previous['grade_id']} -> {meta['grade_id']}")
        previous = meta
    assert not bad, f"read-only or task cell right before a grade cell (drop its lock or put a " \
                    f"solution/grade cell between): {bad}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solutions_are_executed(assignment):
    """Strict nbval compares only cells that were executed when saved: an unexecuted solution
    notebook would pass it without checking a single output."""
    cells = _load(grading.source_path(assignment))["cells"]
    unexecuted = [i for i, c in enumerate(cells) if c["cell_type"] == "code"
                  and c["source"] and c.get("execution_count") is None]
    assert not unexecuted, f"solutions/{assignment}: code cells {unexecuted[:10]} have not run; " \
                           f"run `make solutions` and commit"
