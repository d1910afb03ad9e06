"""Targeted submissions for 00_start_here (see tests/autograde_cases.py for the format)."""
from autograder.grading import Case

CASES = [
    # 00: a detector that reads the drop the wrong way round, one that always fires, a wrong record.
    Case("00_start_here", "stuck_reversed",
         {"loss_is_stuck": "def loss_is_stuck(losses, window=20, min_drop=0.05):\n"
                           "    return sum(losses[-window:]) / window - sum(losses[:window]) / window < min_drop\n"},
         {"test_loss_is_stuck"}),
    Case("00_start_here", "stuck_always",
         {"loss_is_stuck": "def loss_is_stuck(losses, window=20, min_drop=0.05):\n    return True\n"},
         {"test_loss_is_stuck"}),
    Case("00_start_here", "record_guessed",
         {"diagnosis_record": "from course.record import Diagnosis\n\ndef diagnosis_record():\n"
                              "    return Diagnosis('flat loss', ['no updates', 'no signal'], 'one step',\n"
                              "                     'unchanged tensors', 'no-step')\n"},
         {"test_diagnosis_record"}),
]
