"""The grader's secret for the hidden draws of the test cell that is running.

A hidden test draws its cases with a salt written in the test cell (``salt="h-04-v2d"``). The text of
a test cell can reach a learner (a submission's own code reads the kernel's history or a frame and
prints it into the feedback; a classmate passes it on), and whoever knows a salt can rebuild those
draws at home and answer them from a table. So while a submission is graded, the grading kernel's
guard (``autograder.kernel_guard``) puts a secret of the grader's in ``CURRENT`` before each test
cell and empties it after; every function that draws with a salt (``course.exercises.mystery``'s
``draw``, ``make`` and ``hidden``, ``course.lessons.hangs``' ``start`` and ``draw``) passes the salt
through ``mixed`` first. The secret is one per test cell of the course (``autograder.draw_key``: a
keyed hash of the course's key, the assignment and the test's id), the same for every submission,
so a table built from the repository's salts answers nothing, and another course's key draws other
cases; a secret that leaks is worth a table for that test in the same course.

Outside grading (JupyterLab, nbval, Validate) ``CURRENT`` holds ``""`` and every draw is the one the
notebook shows. A draw without a salt (the notebooks' visible mysteries) is never mixed.

The secret reaches the kernel in the test cell's request (its metadata), never in a cell's text,
and the guard takes it out of the request at the test's start, after its checks. A graded call's
process (``course.exercises.isolation``) empties the box before the learner's function runs there:
a hidden draw was mixed in the kernel (``mystery.hidden`` stores the mixed salt).

Limits: the secret is in the kernel while its test cell runs, so learner code that runs then can
read it: the finalizer of an object the kernel lets go of during the test (no test cell calls a
learner's function in the kernel but notebook 10's GPU test; ``check_fix`` runs the fix apart:
``docs/grading-integrity.md``, ``tests/test_guard_secret_reach.py``). The box is empty again before
the next cell.
"""

from __future__ import annotations

# One list, never rebound: the guard holds this object and writes its only item.
CURRENT: list = [""]


def mixed(salt: str) -> str:
    """``salt`` joined with the grader's secret of the running test; ``salt`` itself when either is
    empty (a visible draw, or no grading)."""
    extra = CURRENT[0] if CURRENT and type(CURRENT[0]) is str else ""
    return f"{salt}|grader:{extra}" if salt and extra else salt
