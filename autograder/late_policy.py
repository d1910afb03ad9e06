"""The course's late policy: nbgrader's late-submission plugin with one more method, per day.

nbgrader (0.9.6) keeps a due date per assignment in the gradebook (``nbgrader db assignment add A
--duedate="2026-12-11 17:00 UTC"``, or the Formgrader's assignment page) and, when it autogrades a
submission whose ``timestamp.txt`` (written by ``nbgrader submit``, kept by ``collect``) is after
that date, asks the plugin of ``AssignLatePenalties`` (in the course's autograde preprocessors) for
a penalty, which it stores per notebook in the gradebook (``late_submission_penalty``). The
feedback, the export and ``make summary`` show it; the score a learner sees is the score less it.

``LatePenalty`` keeps nbgrader's two methods (``none``: no penalty; ``zero``: the whole score)
and adds ``per_day``: ``per_day`` (a fraction) of the notebook's score for each day or part of a
day late, never more than the score. nbgrader's own preprocessor clamps the result to
[0, score] as well. Limits: the day count starts at the due date, whatever the learner's time
zone; a submission with no timestamp.txt is never late (nbgrader's rule).
"""
from __future__ import annotations

import math

from nbgrader.plugins import LateSubmissionPlugin
from traitlets import Enum, Float

DAY_S = 24 * 3600


class LatePenalty(LateSubmissionPlugin):
    """nbgrader's LateSubmissionPlugin plus ``penalty_method = "per_day"``."""

    penalty_method = Enum(("none", "zero", "per_day"), default_value="per_day",
                          help="none, zero (nbgrader's), or per_day: per_day of the score for each "
                               "day or part of a day late").tag(config=True)
    per_day = Float(0.1, help="fraction of the notebook's score lost per day or part of a day "
                              "late (penalty_method per_day)").tag(config=True)

    def late_submission_penalty(self, student_id: str, score: float, total_seconds_late: float):
        if self.penalty_method != "per_day":
            return super().late_submission_penalty(student_id, score, total_seconds_late)
        days = math.ceil(total_seconds_late / DAY_S)
        penalty = min(score, round(score * self.per_day * days, 6))  # 0.6, not 0.6000000000000001
        self.log.info("Late by %.0f s (%d day(s)): penalty %g of %g", total_seconds_late, days,
                      penalty, score)
        return penalty

    @staticmethod
    def describe(per_day: float) -> str:
        """The policy in one sentence (the summary and docs/instructors.md say it this way)."""
        return (f"late work loses {per_day:.0%} of its score for each day or part of a day after "
                f"the due date, never more than the score")
