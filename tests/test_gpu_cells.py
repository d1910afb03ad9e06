"""GPU test cells (tagged ``gpu``) through the real autograde path, on a toy course.

A grader without CUDA must leave a GPU test unrun and record it as "not graded: needs a GPU kernel"
(nbgrader: no automatic score, needs a manual grade) in the autograded notebook, the class report,
``make summary`` and the gradebook: never as passed, never as a silent zero. The negative control is
the same test cell without the tag: it runs and fails as usual. ``GRADE_KERNEL=gpu`` says the kernel
has CUDA: the tagged cell is then run and graded normally (here it fails: no CUDA on this machine,
which is what a GPU test does on a CPU kernel).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder import class_runner, database, grading, toy_course
from autograder.sandboxed_execute import NOT_GRADED_GPU, gpu_cells

A = "toy"
NEEDS_CUDA = "raise RuntimeError('this test needs CUDA')"


@pytest.fixture(scope="module")
def gpu_root(tmp_path_factory):
    """The toy course with two more tests that fail without CUDA: test_gpu (tagged ``gpu``) and
    test_gpu_unmarked (the same cell, untagged), released again."""
    root = tmp_path_factory.mktemp("gpu") / "course"
    proc = subprocess.run([sys.executable, "-m", "autograder.toy_course", str(root)], cwd=grading.REPO,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, proc.stdout
    path = grading.source_path(A, root)
    nb = nbformat.read(path, as_version=4)
    answer = toy_course._cell("code", "def on_gpu():\n    ### BEGIN SOLUTION\n    return 'cuda'\n    ### END SOLUTION",
                              "gpu_answer", solution=True)
    marked = toy_course._cell("code", NEEDS_CUDA, "test_gpu", grade=True, locked=True, points=3)
    marked.metadata["tags"] = ["gpu"]
    unmarked = toy_course._cell("code", NEEDS_CUDA, "test_gpu_unmarked", grade=True, locked=True, points=1)
    nb.cells += [answer, marked, unmarked]
    nbformat.write(nb, path)
    # no CUDA kernel here: under GRADE_KERNEL=gpu grade on the ordinary sandboxed kernel (the test
    # shows that the GPU cell is then run and graded, not what CUDA does)
    with open(root / grading.CONFIG_FILE, "a", encoding="utf-8") as f:
        f.write('\nc.SandboxedExecute.gpu_kernel_name = "debug-course-sandboxed"\n')
    (root / "gradebook.db").unlink()
    grading.nbgrader(root, "generate_assignment", A, "--force")
    return root


def grade(root, student, env_extra=None):
    folder = Path(root) / "submitted" / student / A
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{A}.ipynb").write_text(grading.source_path(A, root).read_text(encoding="utf-8"), encoding="utf-8")
    env = dict(os.environ)
    env.pop(database.ENV, None)
    env.pop("GRADE_KERNEL", None)
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, "-m", "autograder.grade_class", A, "--root", str(root), "--students", student],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=grading.REPO, env=env,
                          stdin=subprocess.DEVNULL)
    report = json.loads((Path(root) / class_runner.REPORTS / f"{A}.json").read_text(encoding="utf-8"))["students"]
    return proc, report[student]


def gradebook(root, student):
    from nbgrader.api import Gradebook

    with Gradebook(database.db_url(root), "debug-course") as gb:
        sub = gb.find_submission(A, student)
        return {g.name: (g.auto_score, float(g.score), bool(g.needs_manual_grade)) for nb in sub.notebooks for g in nb.grades}


def test_the_tag_is_read_from_the_source_notebook(gpu_root):
    assert gpu_cells(nbformat.read(grading.source_path(A, gpu_root), as_version=4)) == {"test_gpu"}


def test_a_gpu_cell_is_not_graded_without_cuda_and_says_so_everywhere(gpu_root):
    proc, entry = grade(gpu_root, "alice")
    assert entry["state"] == class_runner.GRADED, proc.stdout
    book = gradebook(gpu_root, "alice")
    # the GPU test: no automatic score, flagged for a person; not passed, not a silent zero
    assert book["test_gpu"][0] is None and book["test_gpu"][2], book["test_gpu"]
    # the negative control: the same cell without the tag ran and failed as usual
    assert book["test_gpu_unmarked"] == (0.0, 0.0, False), book["test_gpu_unmarked"]
    # every CPU test is graded as usual
    assert book["test_square"] == (1.0, 1.0, False) and book["test_cube"] == (2.0, 2.0, False)
    # the autograded notebook (so the feedback) shows the line, not the test's output
    nb = json.loads((gpu_root / "autograded" / "alice" / A / f"{A}.ipynb").read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if grading.nbgrader_meta(c).get("grade_id") == "test_gpu")
    texts = [o.get("text", "") for o in cell["outputs"]]
    assert "".join("".join(t) if isinstance(t, list) else t for t in texts).strip() == NOT_GRADED_GPU
    # the class report
    assert entry["cells"]["test_gpu"].get("not_graded") == NOT_GRADED_GPU
    assert f"{NOT_GRADED_GPU}: test_gpu" in entry["reason"]
    assert "test_gpu " not in entry["reason"].split("lost points:")[-1].split(";")[0] + " "
    assert "test_gpu_unmarked 0/1" in entry["reason"]
    assert not entry["cells"]["test_gpu_unmarked"].get("not_graded")
    # make summary
    env = dict(os.environ)
    env.pop(database.ENV, None)
    summary = subprocess.run([sys.executable, "-m", "autograder.summary", A, "--root", str(gpu_root)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=grading.REPO, env=env)
    text = summary.stdout
    assert summary.returncode == 0, text
    row = next(line for line in text.splitlines() if line.startswith("alice"))
    assert "n/g" in row.split(), text
    section = text.split(f"-- {NOT_GRADED_GPU} (1)")[1].split("--")[0]
    assert "alice: test_gpu" in section, text
    manual = text.split("-- needs manual grade")[1]
    assert "test_gpu," not in manual and not manual.rstrip().endswith("test_gpu"), text
    assert class_runner.NOT_GRADED_GPU == NOT_GRADED_GPU


def test_grade_kernel_gpu_grades_the_gpu_cell_normally(gpu_root):
    proc, entry = grade(gpu_root, "bob", {"GRADE_KERNEL": "gpu"})
    assert entry["state"] == class_runner.GRADED, proc.stdout
    book = gradebook(gpu_root, "bob")
    assert book["test_gpu"] == (0.0, 0.0, False), book["test_gpu"]  # it ran: no CUDA here, so it failed
    assert not entry["cells"]["test_gpu"].get("not_graded")


def test_a_gpu_test_left_unrun_is_out_of_every_denominator_and_one_that_ran_is_in(gpu_root):
    """A correct CPU submission reads full marks over the points a CPU grader can award: the class
    summary's "of", the export's max_score and the feedback's "Score: x / y" leave the unrun GPU
    test's 3 points out. The control: the same cell graded under GRADE_KERNEL=gpu counts as usual."""
    import csv
    import re

    from nbgrader.api import Gradebook

    for student, extra in (("carol", None), ("dave", {"GRADE_KERNEL": "gpu"})):
        proc, entry = grade(gpu_root, student, extra)
        assert entry["state"] == class_runner.GRADED, proc.stdout
    with Gradebook(database.db_url(gpu_root), "debug-course") as gb:
        full = gb.find_assignment(A).max_score
    want = {"carol": full - 3, "dave": full}
    env = {k: v for k, v in os.environ.items() if k != database.ENV}
    summary = subprocess.run([sys.executable, "-m", "autograder.summary", A, "--root", str(gpu_root)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=grading.REPO, env=env)
    header = next(line.split() for line in summary.stdout.splitlines() if line.startswith("student"))
    out = tmp = Path(gpu_root) / "grades.csv"
    grading.nbgrader(gpu_root, "export", "--to", str(tmp))
    exported = {r["student_id"]: r for r in csv.DictReader(out.open(encoding="utf-8"))}
    for student, of in want.items():
        row = next(line.split() for line in summary.stdout.splitlines() if line.startswith(student + " "))
        assert float(row[header.index("of")]) == of, f"{student}: the summary's 'of' column\n{summary.stdout}"
        assert float(exported[student]["max_score"]) == of, exported[student]
        assert float(exported[student]["not_graded_gpu"]) == full - of, exported[student]
        grading.nbgrader(gpu_root, "generate_feedback", A, "--student", student, "--force")
        html = (Path(gpu_root) / "feedback" / student / A / f"{A}.html").read_text(encoding="utf-8")
        top = re.search(r"\(Score: ([\d.]+) / ([\d.]+)\)", html)
        assert top and float(top.group(2)) == of, f"{student}: the feedback's score line {top and top.group(0)}"
