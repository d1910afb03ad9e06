"""Who is working: the name a learner types, or the student id the grader passes in.

A draw keyed by identity (the capstone's) must come from the grader, not from the notebook: a
notebook copied from a classmate still says the classmate's name. So the class runner
(``autograder.sandboxed_execute``) starts each grading kernel with the nbgrader student id in the
environment variable ``COURSE_STUDENT_ID``, and the kernel guard imports this module before any
submitted code runs: ``GRADED_ID`` is read once, then, and the guard puts it back before every
test cell, so a submission that edits the environment or rebinds the name changes nothing a test
sees. Outside grading (JupyterLab, nbval, Validate) the variable is unset and ``GRADED_ID`` is None.

Limits: like every guarded name, only code written to defeat the guard (see
``autograder.kernel_guard``) could change what a test cell reads.
"""

from __future__ import annotations

import os

ENV = "COURSE_STUDENT_ID"
GRADED_ID: str | None = os.environ.get(ENV) or None


def identity(typed: str) -> str:
    """The grader's student id while a submission is graded; otherwise ``typed`` (the name the
    learner wrote in the notebook). Raises ValueError for a blank name outside grading."""
    if GRADED_ID:
        return GRADED_ID
    name = str(typed).strip()
    if not name:
        raise ValueError("type a name (your student id, if your course is graded) to get your draw")
    return name
