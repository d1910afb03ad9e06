"""The grader's secret for the hidden draws of the test cell that is running.

A hidden test draws its cases with a salt written in the test cell (``salt="h-04-v2d"``). The text of
a test cell can reach a learner (a submission's own code reads the kernel's history or a frame and
prints it into the feedback; a classmate passes it on), and whoever knows a salt can rebuild those
draws at home and answer them from a table. So while a submission is graded, the grading kernel's
guard (``autograder.kernel_guard``) puts a secret of the grader's in ``CURRENT`` before each test
cell and empties it after; every function that draws with a salt (``course.exercises.mystery``'s
``draw``, ``make`` and ``hidden``, ``course.lessons.hangs``' ``start`` and ``draw``) passes the salt
through ``mixed`` first. The secret is different for every test cell of every submission
(``autograder.draw_key``: a keyed hash of the course's key, the student, the submission's cells and
the test's id), so a table of one grading's hidden draws identifies nothing in the next one.

Outside grading (JupyterLab, nbval, Validate) ``CURRENT`` holds ``""`` and every draw is the one the
notebook shows. A draw without a salt (the notebooks' visible mysteries) is never mixed.

Limits: the secret is in the kernel while its test cell runs, so learner code that the test calls in
the kernel (``check_fix``'s re-run of a fix) can read it; it is that test's and that submission's
alone, and it is gone before the next cell.
"""

from __future__ import annotations

# One list, never rebound: the guard holds this object and writes its only item.
CURRENT: list = [""]


def mixed(salt: str) -> str:
    """``salt`` joined with the grader's secret of the running test; ``salt`` itself when either is
    empty (a visible draw, or no grading)."""
    extra = CURRENT[0] if CURRENT and type(CURRENT[0]) is str else ""
    return f"{salt}|grader:{extra}" if salt and extra else salt
