"""Targeted submissions that tests/test_autograde.py autogrades (the data; the test is generic).

Each ``Case(assignment, student, edits, expect_lost)``: a copy of the assignment's SOLUTION
notebook with the source of each cell named by grade_id in ``edits`` replaced (``None`` deletes
the cell), submitted as ``student``; the autograder-test cells in ``expect_lost`` must score 0
and every other autograder-test cell full marks. Student names must be unique per assignment
and differ from "solution" and "release_untouched". A case whose assignment is not in
solutions/ yet is skipped. Example (the toy course of ``python -m autograder.toy_course``,
whose own cases are in ``autograder/toy_course.py``):

    Case(assignment="toy", student="wrong_square",
         edits={"square": "def square(x):\\n    return 2 * x"},
         expect_lost={"test_square"}),
"""
import importlib
from pathlib import Path

CASES: list = []

# Each notebook keeps its cases in tests/autograde_cases_<NN>.py (a list named CASES), so the
# notebooks' authors do not edit one shared file.
for _module in sorted(Path(__file__).parent.glob("autograde_cases_*.py")):
    CASES += importlib.import_module(_module.stem).CASES
