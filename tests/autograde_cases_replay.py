"""A learner who knows the text of every test cell, hidden ones included, answers from a table.

A red team's tenth pass (2026-12-06) read the hidden test cells of 04 and 12 from the grading kernel's
input history in a later answer cell, printed them into its own feedback, and on its next submission
answered every hidden draw from a table keyed by the draw's settings: 8 of 15 points on 04 and 6 of
10 on 12 with no work, where the same submission with an empty table scored 0. Whatever the route
by which a test's text leaks, the cure is that its hidden draws are not the ones the text describes:
the grader mixes a secret of each submission's into every salted draw (``course.toolkit.salts``,
``autograder.draw_key``).

These submissions carry the leak at its worst: every autograder-test cell of the source notebook,
verbatim. The ``detect`` cell runs them with the grading functions swapped for recorders, makes
each recorded draw at the top level (a hidden draw through its own record, ``_course_realize``, a
visible one through ``reveal``) and keys the answers on the draws' settings; ``detect`` and
``name_cause`` then answer from the table and do no work. Visible draws are the notebook's, so the
table answers them, and the cells that grade only visible draws keep their points: that is the
control in the same submission (without the grader's secret, ``tests/test_course_salts.py``, the
same table answers the hidden draws too). They lose exactly the cells that grade ``detect`` or
``name_cause`` on a hidden draw.

A twelfth pass (2026-12-06) found the secret itself in reach: the graded call's process still held
it in ``course.toolkit.salts``, and a detector there rebuilt every hidden draw's seeds from the
text's salts and seeds (all 9 mystery points of 04; 0 for the same submission not reading it). So
``detect`` and ``name_cause`` here also try the box, in the graded call's process, before they give
up on a draw; the graded call now empties it, and the cells they lose are the same.
"""
import base64
import json

from autograder.grading import Case, nbgrader_meta
from autograde_cases_routes import CELLS, SOLUTIONS, _append, lost_cells

ASSIGNMENTS = ("04_late_spike", "12_lr_instability")

REPLAY = '''

# ---- a leak's table: every test cell's text, run with the grading functions recording -------------
import dataclasses as _replay_dc
from course.exercises import grading as _replay_grading, mystery as _replay_mystery

_REPLAY_TABLE = {}
_REPLAY_HIDDEN = []  # each hidden draw's record as the text writes it: (answer, seed, salt, label)


def _replay_key(pipe):
    return tuple((f.name, repr(getattr(pipe, f.name))) for f in _replay_dc.fields(pipe)
                 if f.name not in _replay_mystery.PART_FIELDS and f.name != "bugs")


def _replay_note(case, label=None):
    try:
        if type(case) is _replay_mystery.Hidden:
            _REPLAY_HIDDEN.append((case.answer, case.seed, case.salt, label))
            pipe, secret = case._course_realize()
            answer = secret.answer
        else:
            pipe, answer = case, _replay_mystery.reveal(case)
    except Exception:
        return
    old = _REPLAY_TABLE.get(_replay_key(pipe), (answer, None))
    _REPLAY_TABLE[_replay_key(pipe)] = (answer, label if label is not None else old[1])


def _replay_detector(fn, healthy, broken, *args, **kwargs):
    for case in [*broken.values(), *healthy.values()]:
        _replay_note(case)


def _replay_names(fn, cases, *args, **kwargs):
    for case, expected in cases.values():
        _replay_note(case, expected)


def _replay_nothing(*args, **kwargs):
    return None


_replay_saved = (_replay_grading.assert_detector, _replay_grading.assert_names, _replay_mystery.check_fix,
                 _replay_grading.graded_calls)
_replay_grading.assert_detector, _replay_grading.assert_names = _replay_detector, _replay_names
_replay_mystery.check_fix = _replay_grading.graded_calls = _replay_nothing
try:
    for _replay_source in _REPLAY_SOURCES:
        try:
            exec(_replay_source, {"detect": None, "name_cause": None, "fix": None})
        except Exception:
            pass
finally:
    (_replay_grading.assert_detector, _replay_grading.assert_names, _replay_mystery.check_fix,
     _replay_grading.graded_calls) = _replay_saved


def _replay_from_the_box(pipe):
    """In the graded call's process: the grader's secret, if the box there held it, rebuilds each
    hidden draw's seeds from the text's salt and seed, as ``mystery._config`` draws them (red team,
    run 12: 9 of 9 mystery points on 04 before the graded call's process emptied the box)."""
    from course.toolkit import salts as _replay_salts
    import random as _replay_random
    secret = _replay_salts.CURRENT[0] if type(_replay_salts.CURRENT[0]) is str else ""
    if not secret:
        return None
    seeds = (pipe.language_seed, pipe.data_seed, pipe.val_seed)
    for answer, seed, salt, label in _REPLAY_HIDDEN:
        rng = _replay_random.Random(f"{salt}|grader:{secret}|{seed}|config")
        if (rng.randrange(1, 10_000), rng.randrange(1, 10_000), rng.randrange(10_000, 20_000)) == seeds:
            return answer, label
    return None


def _replay_find(pipe):
    return _REPLAY_TABLE.get(_replay_key(pipe)) or _replay_from_the_box(pipe)


def detect(pipe, *args, **kwargs):  # work-free: the table
    found = _replay_find(pipe)
    return found is not None and found[0] != "healthy"

'''

NAME = '''

def name_cause(pipe, *args, **kwargs):  # work-free: the table the detect cell built
    found = _replay_find(pipe)
    return found[1] if found is not None and found[1] is not None else "healthy"
'''


def _test_sources(assignment: str) -> list[str]:
    nb = json.loads((SOLUTIONS / assignment / f"{assignment}.ipynb").read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"]
            if c["cell_type"] == "code" and nbgrader_meta(c).get("grade") and not nbgrader_meta(c).get("solution")]


def _hidden_draw_cells(assignment: str) -> set[str]:
    nb = json.loads((SOLUTIONS / assignment / f"{assignment}.ipynb").read_text(encoding="utf-8"))
    return {nbgrader_meta(c)["grade_id"] for c in nb["cells"]
            if c["cell_type"] == "code" and nbgrader_meta(c).get("grade") and "hidden(" in "".join(c["source"])}


def _cases() -> list:
    out = []
    for assignment in ASSIGNMENTS:
        if not (SOLUTIONS / assignment / f"{assignment}.ipynb").exists():
            continue
        detect, cause, _ = CELLS[assignment]
        # base64: the submission's own feedback must not show hidden-test lines either (that check,
        # test_feedback_shows_no_hidden_tests, is about what grading leaks, and stays strict)
        packed = base64.b64encode(json.dumps(_test_sources(assignment)).encode()).decode()
        table = (f"\nimport base64 as _replay_b64, json as _replay_json\n"
                 f"_REPLAY_SOURCES = _replay_json.loads(_replay_b64.b64decode({packed!r}))\n" + REPLAY)
        edits = _append(assignment, {detect: table, cause: NAME})
        lost = lost_cells(assignment, {"detect", "name_cause"}) & _hidden_draw_cells(assignment)
        out.append(Case(assignment, f"replay_{assignment[:2]}_leaked_test_text", edits, lost))
    return out


CASES = _cases()
