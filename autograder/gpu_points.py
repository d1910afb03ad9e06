"""Points a grader without CUDA could not grade: kept out of a submission's denominator.

A test cell tagged ``gpu`` runs only on a grading kernel with CUDA (``autograder.sandboxed_execute``);
elsewhere it prints ``NOT_GRADED_GPU`` and nbgrader records no automatic score for it. Its points
are then neither earned nor lost: the class summary, the export and the feedback give a score over
the points this grader could award, and name the cells left for a GPU grader.

* ``gpu_tests(root, assignment)``: the grade ids of the source notebook's test cells tagged ``gpu``.
* ``unrun(grades, gpu)``: of a submission's grades (grade id -> an object or tuple with
  ``auto_score`` and ``manual_score``), the GPU tests with neither score: not graded.
* ``CpuGradedExport``: nbgrader's CSV export with ``max_score`` lowered by each submission's unrun
  GPU points, and a column ``not_graded_gpu`` (those points). Set by ``nbgrader_config.py``.
* ``GpuPointsApart``: a feedback preprocessor, after nbgrader's ``GetGrades``: the notebook's
  ``max_score`` lowered the same way, and each unrun GPU test shown at 0 of 0 (its output says why).

A GPU test that a GPU grader ran, or that a person graded by hand, counts as usual everywhere.
"""
from __future__ import annotations

import json
from pathlib import Path

from nbgrader.api import MissingEntry
from nbgrader.plugins.export import CsvExportPlugin
from nbgrader.preprocessors import NbGraderPreprocessor

from autograder import grading

NOT_GRADED_GPU = "not graded: needs a GPU kernel"
_GPU: dict = {}


def gpu_tests(root, assignment: str) -> set:
    """grade_ids of the source notebook's test cells tagged ``gpu`` (cached per root)."""
    key = (str(root), assignment)
    if key not in _GPU:
        try:
            nb = json.loads(grading.source_path(assignment, Path(root)).read_text(encoding="utf-8"))
            _GPU[key] = {grading.nbgrader_meta(c).get("grade_id") for c in nb.get("cells", [])
                         if "gpu" in c.get("metadata", {}).get("tags", []) and grading.nbgrader_meta(c).get("grade")}
        except (OSError, ValueError):
            _GPU[key] = set()
    return _GPU[key]


def _scores(grade) -> tuple:
    if isinstance(grade, tuple):  # autograder.summary's rows: (score, max, needs_manual, auto, manual)
        return grade[3], grade[4]
    return grade.auto_score, grade.manual_score


def unrun(grades: dict, gpu: set) -> list[str]:
    """The GPU tests among ``grades`` that have neither an automatic nor a manual score."""
    return [gid for gid, g in grades.items() if gid in gpu and _scores(g) == (None, None)]


class CpuGradedExport(CsvExportPlugin):
    """nbgrader's CSV export, with each submission's ``max_score`` over the points its grader could
    award (``not_graded_gpu``: the points of its GPU tests left unrun)."""

    def export(self, gradebook) -> None:
        super().export(gradebook)
        dest = Path(self.to or "grades.csv")
        root = Path(getattr(getattr(self.parent, "coursedir", None), "root", "") or ".")
        lines = dest.read_text(encoding="utf-8").splitlines()
        keys = lines[0].split(",")
        out = [lines[0] + ",not_graded_gpu"]
        for line in lines[1:]:
            row = dict(zip(keys, line.split(",")))
            try:
                sub = gradebook.find_submission(row["assignment"], row["student_id"])
            except MissingEntry:  # nothing submitted: nothing graded, nothing set apart
                apart = 0.0
            else:
                grades = {g.name: g for nb in sub.notebooks for g in nb.grades}
                apart = sum(grades[gid].max_score for gid in unrun(grades, gpu_tests(root, row["assignment"])))
            row["max_score"] = str(float(row["max_score"]) - apart)
            out.append(",".join(row[k] for k in keys) + f",{apart}")
        dest.write_text("\n".join(out) + "\n", encoding="utf-8")


def _only_line(cell) -> str:
    outs = cell.get("outputs", [])
    if len(outs) != 1 or outs[0].get("output_type") != "stream":
        return ""
    text = outs[0].get("text", "")
    return ("".join(text) if isinstance(text, list) else text).strip()


class GpuPointsApart(NbGraderPreprocessor):
    """After ``GetGrades``: a GPU test left unrun (its one output line is ``NOT_GRADED_GPU`` and its
    grade has no score) counts 0 of 0, and the notebook's ``max_score`` drops by its points."""

    def preprocess(self, nb, resources):
        from nbgrader.api import Gradebook

        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gb:
            for cell in nb.cells:
                meta = cell.get("metadata", {}).get("nbgrader", {})
                if not meta.get("grade") or _only_line(cell) != NOT_GRADED_GPU:
                    continue
                grade = gb.find_grade(meta["grade_id"], info["notebook"], info["assignment"], info["student"])
                if unrun({grade.name: grade}, {grade.name}):
                    info["max_score"] = info["max_score"] - grade.max_score
                    meta["score"], meta["points"] = 0.0, 0.0
        return nb, resources
