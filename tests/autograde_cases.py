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

from autograder.grading import Case

# Each replacement keeps the solution's function name and signature, so it is exactly one wrong answer.
_CHECK_BATCH_WITHOUT_TYPES = """def check_batch(batch, vocab_size):
    x, y, pad = batch.inputs, batch.targets, batch.pad_id
    scored = y != IGNORE
    if not scored.any():
        raise ValueError("no target is scored")
    if (y[scored] == pad).any():
        raise ValueError("padding scored")
    real_next = x[:, 1:] != pad
    if ((y[:, :-1] != x[:, 1:]) & scored[:, :-1] & real_next).any():
        raise ValueError("targets are not the inputs shifted by one")
    if (real_next & ~scored[:, :-1]).any():
        raise ValueError("a target before a real token is not scored")
"""

_DIAGNOSE_UPDATES_FIRST = """def diagnose(p, seed=0):
    V = p.language().vocab_size
    if fires(reference_check_batch, batch_at(p, seed, 0), V):
        return "targets-misaligned"
    cause = one_step_report(p, seed).cause()
    if cause != "ok":
        return cause
    model = p.build_model(seed)
    if future_sensitivity(model, V) > 0:
        return "future-visible"
    if past_sensitivity(model, V) == 0:
        return "context-masked"
    if position_sensitivity(model, V) == 0:
        return "positions-unused"
    return "ok"
"""

CHECK_BATCH_TESTS = {"test_check_batch_visible", "test_check_batch_types", "test_check_batch_mask"}
DIAGNOSE_TESTS = {"test_diagnose_visible", "test_diagnose_updates", "test_diagnose_context"}

CASES: list[Case] = [
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
    # 01: one wrong formula per baseline.
    Case("01_baselines", "log2_uniform",
         {"baselines": "import math\n\ndef uniform_loss(V):\n    return math.log2(V)\n\n"
                       "from course.baselines import unigram_entropy as masked_unigram_entropy\n"},
         {"test_uniform_loss"}),
    Case("01_baselines", "entropy_counts_ignored",
         {"baselines": "import math\n\ndef uniform_loss(V):\n    return math.log(V)\n\n"
                       "def masked_unigram_entropy(targets):\n"
                       "    p = torch.bincount(targets.flatten() % 1000).double()\n"
                       "    p = p[p > 0] / p.sum()\n"
                       "    return -(p * p.log()).sum().item()\n"},
         {"test_masked_unigram_entropy"}),
    # 01: the batch check graded by mutation: always raising or never raising earns nothing there,
    # and a check without the dtype/shape/range clauses loses only the cell that tests them.
    Case("01_baselines", "check_always_raises",
         {"check_batch": "def check_batch(batch, vocab_size):\n    raise ValueError('bug')\n"},
         CHECK_BATCH_TESTS),
    Case("01_baselines", "check_never_raises",
         {"check_batch": "def check_batch(batch, vocab_size):\n    return None\n"},
         CHECK_BATCH_TESTS),
    Case("01_baselines", "check_delegates",
         {"check_batch": "from course.checks import check_batch as _pkg_check\n\n"
                         "def check_batch(batch, vocab_size):\n    _pkg_check(batch, vocab_size)\n"},
         {"test_check_batch_types", "test_check_batch_mask"}),
    Case("01_baselines", "check_without_types", {"check_batch": _CHECK_BATCH_WITHOUT_TYPES},
         {"test_check_batch_types"}),
    # 01: a namer that always answers "ok", and one that runs the update test first (so a model whose
    # position embedding gets no gradient is called "no-grad", not "positions-unused").
    Case("01_baselines", "diagnose_always_ok",
         {"diagnose": "def diagnose(p, seed=0):\n    return 'ok'\n"}, DIAGNOSE_TESTS),
    Case("01_baselines", "diagnose_updates_first", {"diagnose": _DIAGNOSE_UPDATES_FIRST},
         {"test_diagnose_context"}),
]

# Each later notebook keeps its cases in tests/autograde_cases_<NN>.py (a list named CASES), so the
# notebooks' authors do not edit one shared file.
for _module in sorted(Path(__file__).parent.glob("autograde_cases_*.py")):
    CASES += importlib.import_module(_module.stem).CASES
