"""Code planted before the tests run, one submission per notebook with a mystery (issue 31's routes).

Each submission keeps the solution's code and appends, to three answer cells:

* the ``detect`` cell: **routes 1 and 2**. A spy replaces ``torch.random.get_rng_state`` (which
  the kernel used to read just before forking a graded call) and copies the draw registry and any
  hidden draw it finds on the stack; a subclass replaces ``random.Random`` (which a draw builds its
  random streams from) and reads the drawing frame's ``answer``. Then ``detect`` answers from what
  they saw, doing no work;
* the ``fix`` cell: **route 4**. ``fix`` returns a ``Pipeline`` subclass that watches the order in
  which its fields are read: a field read after a later one is one the check skipped, the field
  the bug lives in, and from then on it hands out the reference part there;
* the ``name_cause`` cell (the capstone: the diagnosis cell): **the control**, the same planted
  code, harmless, beside the solution's own answer; and **route 3**, the notebook's own globals that
  test cells used to read (``mysteries``, ``CANDIDATES``) rebound to a decoy.

Each loses every test cell that grades ``detect`` or ``fix`` (or an answer that calls them), and
nothing else: the control's cells score full.
"""
from autograder.grading import Case
from autograde_cases_routes import CELLS, SOLUTIONS, _append, lost_cells

PLANT = '''

# planted before the tests (issue 31, routes 1 and 2)
import random as _planted_random
import sys as _planted_sys

import torch.random as _planted_torch_random
from course.exercises import mystery as _planted_mystery

_PLANTED_SAW = globals().get("_PLANTED_SAW", {})
_planted_real_state = _planted_torch_random.get_rng_state


def _planted_spy():  # route 1: runs wherever the kernel reads torch's random state
    for _entry in list(_planted_mystery._SECRETS.values()):
        _PLANTED_SAW[_entry[1].config["language_seed"]] = _entry[1].answer
    _f = _planted_sys._getframe(1)
    while _f is not None:  # and up the stack, to a test's hidden draws
        for _v in list(_f.f_locals.values()):
            _items = list(_v.values()) if isinstance(_v, dict) else list(_v) if isinstance(_v, (list, tuple)) else [_v]
            for _h in _items:
                _h = _h[0] if isinstance(_h, tuple) and _h else _h
                if type(_h).__name__ == "Hidden":
                    _PLANTED_SAW[(_h.salt, _h.seed)] = _h.answer
        _f = _f.f_back
    return _planted_real_state()


class _PlantedRandom(_planted_random.Random):  # route 2: a draw builds its random streams from it
    def __init__(self, *args, **kwargs):
        _caller = _planted_sys._getframe(1).f_locals
        if "answer" in _caller and "seed" in _caller:
            _PLANTED_SAW[(_caller.get("salt", ""), _caller["seed"])] = _caller["answer"]
        super().__init__(*args, **kwargs)


_planted_torch_random.get_rng_state = _planted_spy
_planted_random.Random = _PlantedRandom
'''

DETECT = PLANT + '''

def detect(pipe, *args, **kwargs):  # work-free: what the planted code saw
    import random
    from course.exercises import mystery
    if pipe.language_seed in _PLANTED_SAW:
        return _PLANTED_SAW[pipe.language_seed] != "healthy"
    for _key, _answer in list(_PLANTED_SAW.items()):
        if isinstance(_key, tuple):  # a hidden draw's salt and seed: its configuration says which pipe it is
            if mystery._config(pipe, random.Random(f"{_key[0]}|{_key[1]}|config"))["language_seed"] == pipe.language_seed:
                return _answer != "healthy"
    return False
'''

WATCHING_FIX = '''

def fix(pipe, *args, **kwargs):  # work-free (route 4): a Pipeline subclass that watches how it is checked
    import dataclasses
    from course import Pipeline
    from course.reference.pipeline import PARTS
    order = [f.name for f in dataclasses.fields(Pipeline)]
    reference = Pipeline()

    class Watching(Pipeline):
        def __getattribute__(self, name):
            if name in PARTS:
                seen = object.__getattribute__(self, "__dict__").setdefault("_planted_seen", {"last": -1, "bug": set()})
                if order.index(name) < seen["last"]:
                    seen["bug"].add(name)  # read after a later field: the check skipped it, the bug is here
                seen["last"] = order.index(name)
                if name in seen["bug"]:
                    return getattr(reference, name)
            return object.__getattribute__(self, name)
    return Watching(**{name: getattr(pipe, name) for name in order})
'''

CONTROL = PLANT + '''

# route 3: the notebook's own globals that test cells used to read, rebound to a decoy (a helper of
# the same name would do it by accident); the tests draw and build their own
if isinstance(globals().get("mysteries"), dict) and globals()["mysteries"]:
    _planted_one = next(iter(mysteries.values()))
    mysteries = {_k: _planted_one for _k in mysteries}
if isinstance(globals().get("CANDIDATES"), tuple):
    CANDIDATES = ("healthy",) * len(CANDIDATES)
'''


def _cases() -> list:
    out = []
    for assignment, (detect, cause, fix) in CELLS.items():
        if not (SOLUTIONS / assignment / f"{assignment}.ipynb").exists():
            continue
        control_cell = cause if cause is not None else "diagnosis"
        edits = _append(assignment, {detect: DETECT, fix: WATCHING_FIX, control_cell: CONTROL})
        student, alone = f"planted_{assignment[:2]}", False
        if assignment == "11_capstone":  # graded under its own id: one that draws the solution's bug
            from course.exercises import capstone
            student = next(f"planted_11_{i}" for i in range(10_000)
                           if capstone._choice(f"planted_11_{i}")[:2] == capstone._choice("solution")[:2])
            edits["my_name"] = f'MY_NAME = "{student}"\n'
            alone = True
        out.append(Case(assignment, student, edits, lost_cells(assignment, {"detect", "fix"}), alone=alone))
    return out


# The red team's route (a second pass, issue 31): the bug catalogue is data, and a draw dispatches
# through it. Each entry is wrapped to record the bug it applies, keyed by the very float object the
# draw carries as its learning rate, and a broken collator's batches are tagged; the answers then
# read what was recorded, doing no work. 01 only (one more submission).
REGISTRY_PLANT = '''

import dataclasses as _rt_dc
import course.bugs.registry as _rt_reg
from course.exercises import mystery as _rt_m
from course.exercises.sets import SETS as _RT_SETS
from course.reference.pipeline import prepare_model as _rt_prepare
from course.toolkit.batch import next_token_batch as _rt_ntb

_RT_SEEN, _RT_TAGGED = {}, {}


def _rt_tagging(real_collate):
    def collate(windows, pad_id):
        b = real_collate(windows, pad_id)
        _RT_TAGGED[id(b)] = b
        return b
    return collate


def _rt_wrap(name, real):
    def apply(pipe):
        _RT_SEEN[id(pipe.lr)] = (pipe.lr, name)
        broken = real(pipe)
        if broken.collate is not pipe.collate:
            broken = _rt_dc.replace(broken, collate=_rt_tagging(broken.collate))
        return broken
    return apply


for _n, _b in list(_rt_reg._REGISTRY.items()):
    _rt_reg._REGISTRY[_n] = _rt_reg.Bug(_b.name, _b.family, _b.symptom, _b.doc, _rt_wrap(_n, _b.apply))
_RT_CAUSE = dict(_RT_SETS["01_baselines"].causes)
_RT_TOUCHED = {n: _rt_m.touched(_rt_m.make(n, 0, _RT_SETS["01_baselines"].base, salt="rt")) for n in _RT_CAUSE if n != "healthy"}
_RT_SEEN.clear()
_RT_REF = {"collate": _rt_ntb, "prepare": _rt_prepare}


def _rt_answer(pipe):
    hit = _RT_SEEN.get(id(pipe.lr))
    return hit[1] if hit is not None and hit[0] is pipe.lr else "healthy"


def check_batch(batch, vocab_size):  # work-free: batches tagged at birth
    if _RT_TAGGED.get(id(batch)) is batch:
        raise ValueError("this batch breaks the contract")
'''


def _registry_case() -> list:
    a = "01_baselines"
    if not (SOLUTIONS / a / f"{a}.ipynb").exists():
        return []
    edits = _append(a, {
        "check_batch": REGISTRY_PLANT,
        "detect": "\n\ndef detect(pipe, seed=0):  # work-free\n    return _rt_answer(pipe) != 'healthy'\n",
        "name_cause": "\n\ndef name_cause(pipe, seed=0):  # work-free\n    return _RT_CAUSE.get(_rt_answer(pipe), 'healthy')\n",
        "fix": "\n\ndef fix(pipe):  # work-free\n    return pipe.replace(**{f: _RT_REF[f] for f in _RT_TOUCHED.get(_rt_answer(pipe), ()) if f in _RT_REF})\n"})
    return [Case(a, "planted_registry_01", edits, lost_cells(a, {"check_batch", "detect", "name_cause", "fix"}))]


CASES = _cases() + _registry_case()
