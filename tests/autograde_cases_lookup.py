"""A learner who ran the repository's test cells offline answers from a table of their inputs.

Red team 14 (2026-12-06) ran the text of 01's and 03's test cells, hidden parts included, with a
recorder in place of the grading helpers, kept each input's expected answer, and submitted answers
that look their input up: 8 points of 01 and 14 of 03 with no work. The cure is the one the mystery
draws have: a hidden part draws its inputs under the grader's secret
(``course.exercises.grading.hidden_seed``), so in a course with a key the inputs graded are not the
ones the text gives (``tests/test_test_cells.py`` checks that every hidden part does).

Each answer cell here is the solution's cell, then the attack: it runs every test cell that reads
one of the cell's answers (their text, carried base64 so this submission's feedback shows no
hidden-test line) with the grading helpers swapped for in-process recorders and the solution's
functions recording each call's arguments and result, and rebinds each answer to a lookup in that
table. It runs before any test cell, when the grader's secret is empty: the same table the text
gives offline. ``lookup_<nn>_table_only`` falls back to a wrong answer (``None``) where the table
has no entry; under the course key it loses every cell that grades those answers (each has a salted
hidden part), and without a key it would score them all (the red team's result).
``lookup_<nn>_table_then_solution`` is its control: the same table, falling back to the solution,
full marks. Graded with a key: these assignments are in ``tests/test_autograde.py``'s ``KEYED``.

A second way to answer from data, found while closing the first (2026-12-06): a test cell's
variables are the notebook's globals while it runs, and an answer the test calls in the kernel
could read them. 01's hidden entropy test built its list of (label, input, expected) before calling
the learner's function, and a ``masked_unigram_entropy`` that finds its input in that list and
returns the entry's expected value scored the cell (2/2, with a key). Every test cell now calls the
learner's code only through graded calls (``tests/test_test_cells.py``), whose forked child deletes
the cell's data. That deletion had a hole of its own: IPython runs a cell one statement at a time,
and the child deleted only the running statement's names, so a dict of (input, expected) built by an
earlier statement survived there. ``reads_test_globals_00`` (a wrong default made up for by the
test's labelled training runs) and ``reads_test_globals_02`` (a namer that finds its pipeline in the
test's dict of expected stages) scored that way, 00's stuck-loss cell and 4 points of 02's hidden
cells; with the whole cell's data deleted they lose every cell their answers are graded in.
``reads_test_globals_01`` is the entropy answer, with a table for the visible inputs: it loses the
cell. ``reads_test_globals_00_control`` is 00's search beside the right default: full marks.
"""
import base64
import json

from autograder.grading import Case, nbgrader_meta
from autograde_cases_replay import _test_sources
from autograde_cases_routes import SOLUTIONS, _source, lost_cells

# assignment: {answer cell: the functions it defines that the table answers}
ANSWERS = {
    "01_baselines": {"baselines": ("uniform_loss", "masked_unigram_entropy"), "check_batch": ("check_batch",)},
    "03_overfit_controls": {"collate_sft": ("collate_sft",), "mask_gate": ("mask_gate",),
                            "dependency_test": ("leaks",)},
}

LOOKUP = '''

# ---- the attack: the test cells' text run offline, each input's answer kept, then looked up ------
import base64 as _lk_b64, contextlib as _lk_cl, copy as _lk_copy, dataclasses as _lk_dc, json as _lk_json
import torch as _lk_torch
from course.exercises import grading as _lk_grading
from course.toolkit import guards as _lk_guards

_LK_SOURCES = _lk_json.loads(_lk_b64.b64decode({packed!r}))
_LK_NAMES = {names!r}
_LK_FALLBACK = {fallback}
_LK_TABLE = globals().setdefault("_LK_TABLE", {{}})


def _lk_key(x):
    if isinstance(x, _lk_torch.Tensor):
        return ("tensor", str(x.dtype), tuple(x.shape), repr(x.detach().cpu().tolist()))
    if isinstance(x, _lk_torch.nn.Module):
        return ("module", type(x).__name__, repr(x))
    if _lk_dc.is_dataclass(x) and not isinstance(x, type):
        return (type(x).__name__,) + tuple(_lk_key(getattr(x, f.name)) for f in _lk_dc.fields(x))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__,) + tuple(_lk_key(v) for v in x)
    if isinstance(x, dict):
        return ("dict",) + tuple(sorted((repr(k), _lk_key(v)) for k, v in x.items()))
    return ("value", repr(x))


def _lk_recording(name, solution):
    def record(*args, **kwargs):
        key = (name, _lk_key((args, kwargs)))
        try:
            out = solution(*args, **kwargs)
        except Exception as err:
            _LK_TABLE[key] = ("raise", type(err), str(err))
            raise
        _LK_TABLE[key] = ("return", _lk_copy.deepcopy(out))
        return out
    return record


def _lk_each(fn, cases):
    out = []
    for case in cases:
        try:
            out.append(fn(case))
        except Exception:
            out.append(None)
    return out


def _lk_detector(detect, healthy, broken, *args, **kwargs):
    _lk_each(detect, [*healthy.values(), *broken.values()])


def _lk_names(name, cases, *args, **kwargs):
    _lk_each(name, [case for case, _ in cases.values()])


def _lk_calls(fn, cases, *args, **kwargs):
    return _lk_each(fn, list(cases))


def _lk_off(*args, **kwargs):
    return _lk_cl.nullcontext()


_lk_saved = (_lk_grading.assert_detector, _lk_grading.assert_names, _lk_grading.graded_calls,
             _lk_grading.switched_off, _lk_guards.switched_off)
_lk_grading.assert_detector, _lk_grading.assert_names, _lk_grading.graded_calls = _lk_detector, _lk_names, _lk_calls
_lk_grading.switched_off = _lk_guards.switched_off = _lk_off
try:
    _lk_ns = {{**globals(), **{{n: _lk_recording(n, globals()[n]) for n in _LK_NAMES}}}}
    for _lk_source in _LK_SOURCES:
        try:
            exec(_lk_source, dict(_lk_ns))
        except Exception:
            pass
finally:
    (_lk_grading.assert_detector, _lk_grading.assert_names, _lk_grading.graded_calls,
     _lk_grading.switched_off, _lk_guards.switched_off) = _lk_saved


def _lk_lookup(name, fallback):
    def answer(*args, **kwargs):  # work-free: the table, or the fallback
        found = _LK_TABLE.get((name, _lk_key((args, kwargs))))
        if found is None:
            return fallback(*args, **kwargs)
        if found[0] == "raise":
            raise found[1](found[2])
        return _lk_copy.deepcopy(found[1])
    return answer


for _lk_name in _LK_NAMES:
    globals()[_lk_name] = _lk_lookup(_lk_name, _LK_FALLBACK if _LK_FALLBACK is not None else globals()[_lk_name])
'''


def _tests_reading(assignment: str, names: tuple) -> list[str]:
    """The text of every autograder-test cell that mentions one of ``names``."""
    return [src for src in _test_sources(assignment) if any(n in src for n in names)]


def _cases() -> list:
    out = []
    for assignment, cells in ANSWERS.items():
        if not (SOLUTIONS / assignment / f"{assignment}.ipynb").exists():
            continue
        solution = {nbgrader_meta(c).get("grade_id"): "".join(c["source"]) for c in _source(assignment)["cells"]}
        lost = lost_cells(assignment, {n for names in cells.values() for n in names})
        for kind, fallback, expect in (("table_only", "lambda *args, **kwargs: None", lost),
                                       ("table_then_solution", "None", set())):
            edits = {}
            for cell, names in cells.items():
                packed = base64.b64encode(json.dumps(_tests_reading(assignment, names)).encode()).decode()
                edits[cell] = solution[cell] + LOOKUP.format(packed=packed, names=names, fallback=fallback)
            out.append(Case(assignment, f"lookup_{assignment[:2]}_{kind}", edits, expect))
    return out


READS_TEST_GLOBALS_01 = """import math
import torch

def uniform_loss(V):
    return math.log(V)

# the visible inputs, answered by hand
_VISIBLE = {"[[0, 1, -100, -100]]": math.log(2),
            "[[2, 2, -100, 2], [5, -100, -100, -100]]": -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))}

def masked_unigram_entropy(targets):  # work-free: the test's own (label, input, expected) list
    for value in list(globals().values()):
        for item in (value if isinstance(value, list) else ()):
            if isinstance(item, tuple) and len(item) == 3 and torch.is_tensor(item[1]) \\
                    and item[1].shape == targets.shape and torch.equal(item[1], targets):
                return float(item[2])
    return _VISIBLE.get(str(targets.tolist()), float("nan"))
"""

# 00: a wrong default (min_drop 0.9: every short healthy run looks stuck) that the hand-written
# curves do not catch, made up for by the test's own training runs: a loss history found among the
# test cell's dicts is answered by its key. The dicts were stored by earlier statements of the cell,
# which IPython runs one at a time, and a graded call's child used to forget only the running
# statement's names: there this answer scored. The child now forgets the whole cell's data.
READS_TEST_GLOBALS_00 = """def loss_is_stuck(losses, window=20, min_drop={min_drop}):
    for value in list(globals().values()):  # the test's {{label: loss history}} dicts
        for label, history in (value.items() if isinstance(value, dict) else ()):
            if history is losses and isinstance(label, str):
                return label not in ("reference", "healthy")
    first = sum(losses[:window]) / window
    last = sum(losses[-window:]) / window
    return first - last < min_drop
"""

# 02: a namer that does no work: it finds the pipeline it is given among the test cell's dicts of
# (input..., expected) and answers the entry's expected stage. The hidden forward and update cells
# keep those dicts at top level, built by earlier statements: before the child forgot the whole
# cell's data, this scored both (4 points) with no work.
READS_TEST_GLOBALS_02 = """def first_nonfinite_stage(p, steps=20, seed=0):
    def holds(t):
        return any(x is p or (isinstance(x, tuple) and holds(x)) for x in t)
    for value in list(globals().values()):
        for entry in (value.values() if isinstance(value, dict) else ()):
            if isinstance(entry, tuple) and len(entry) >= 2 and holds(entry[:-1]):
                return entry[-1]
    return None
"""

CASES = _cases() + [
    Case("02_nan_decision_tree", "reads_test_globals_02", {"first_stage": READS_TEST_GLOBALS_02},
         lost_cells("02_nan_decision_tree", {"first_nonfinite_stage"})),  # the mystery cells use it too
    Case("01_baselines", "reads_test_globals_01", {"baselines": READS_TEST_GLOBALS_01}, {"test_masked_unigram_entropy"}),
    Case("00_start_here", "reads_test_globals_00", {"loss_is_stuck": READS_TEST_GLOBALS_00.format(min_drop=0.9)},
         {"test_loss_is_stuck"}),
    # its control: the same search beside the right default scores full
    Case("00_start_here", "reads_test_globals_00_control",
         {"loss_is_stuck": READS_TEST_GLOBALS_00.format(min_drop=0.05)}, set()),
]
