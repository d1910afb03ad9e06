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


# ----- the second red-team pass (issue 31), their code as they submitted it, on notebook 00 ---------
# A fix of stubs whose attribute hook rewrote the returned pipeline while the grader described it
# (10 of 12 notebooks' fix points), and a detector that read the worker thread's arguments in the
# sealed child, freed the other cases and read the answer off reference counts (most detect and
# name points of 00-09). Both now lose every cell they attack.
RT2_FIXSWAP = '\nimport sys as _sys, dataclasses as _dc\nfrom course.reference.pipeline import PARTS as _PARTS, Pipeline as _RP\n\nclass _Stub:\n    """A placeholder part. While the grader describes the fix (fix_signature, in the kernel\'s\n    re-run), it rewrites the returned Pipeline: untouched fields back to the originals, broken\n    fields to the reference defaults."""\n    def __init__(self, field):\n        object.__setattr__(self, "_f", field)\n    def __call__(self, *a, **k):\n        raise RuntimeError("stub part")\n    def __getattribute__(self, name):\n        if name == "__module__":\n            try:\n                _swap()\n            except BaseException:\n                pass\n        return object.__getattribute__(self, name)\n\ndef _swap():\n    f = _sys._getframe(1)\n    sig = chk = None\n    while f is not None:\n        if f.f_code.co_name == "fix_signature" and sig is None:\n            sig = f\n        if f.f_code.co_name == "check_fix":\n            chk = f\n            break\n        f = f.f_back\n    if sig is None or chk is None:\n        return\n    original, fixed = sig.f_locals["original"], sig.f_locals["fixed"]\n    allowed = chk.f_locals.get("allowed")\n    if allowed is None:\n        from course.exercises.mystery import touched\n        allowed = touched(original)\n    ref = _RP()\n    for name in _PARTS:\n        value = getattr(ref, name) if name in allowed else object.__getattribute__(original, name)\n        object.__setattr__(fixed, name, value)\n\ndef fix(pipe):\n    return pipe.replace(**{f: _Stub(f) for f in _PARTS})\n'

RT2_RC_CORE = '\n# ---- no debugging below: the answer is read off reference counts of the package\'s functions ----\nimport sys as _sys, gc as _gc, types as _types, threading as _th\nfrom course.exercises import mystery as _my\nfrom course.exercises.isolation import Outcome as _Outcome\n\n\ndef _rc_cands():\n    out = []\n    for name, m in sorted(_sys.modules.items()):\n        if isinstance(m, _types.ModuleType) and name.startswith(("course", "torch.optim", "functools")):\n            for k, v in sorted(vars(m).items()):\n                if callable(v) and not isinstance(v, _types.ModuleType):\n                    out.append((f"{name}.{k}", v))\n    out += [("bool.True", True), ("bool.False", False)] + [(f"str.{k}", k) for k in ("causal", "self", "strict", "none")]\n    return out\n_RC_C = _rc_cands()\n_RC_IGN = {"course.exercises.mystery._Secret", "course.exercises.mystery._pop"}\ndef _rc_measure():\n    return [_sys.getrefcount(o) for _, o in _RC_C]\ndef _rc_delta(r1, r2):\n    return {_RC_C[i][0]: a - b for i, (a, b) in enumerate(zip(r1, r2)) if a != b and _RC_C[i][0] not in _RC_IGN\n            and not _RC_C[i][0].startswith(("course.exercises.isolation.", "course.toolkit.guards.", "course.exercises.record."))}\n_RC_TABLE = {}\n_RC_H = [None]\ndef _rc_key(d):\n    h = _RC_H[0] or {}\n    x = {k: d.get(k, 0) - h.get(k, 0) for k in set(d) | set(h) if d.get(k, 0) != h.get(k, 0)}\n    f, t = x.get("bool.False", 0), x.get("bool.True", 0)\n    if not (f + t == 0 and abs(f) == 1):  # bools are noisy: keep only the exact swap of one flag\n        x.pop("bool.False", None); x.pop("bool.True", None)\n    return frozenset(x.items())\ndef _rc_learn(bugs, bases, seeds=(3, 4)):\n    """in the kernel, outside any test: fingerprints of draws I make myself"""\n    for base in bases:\n        for bug in ["healthy"] + [b for b in bugs if b != "healthy"]:\n            for seed in seeds:\n                try:\n                    holder = [_my.make(bug, seed, base, "rc")]\n                except Exception:\n                    continue\n                t = _my.touched(holder[0])\n                _gc.collect(); r1 = _rc_measure(); holder.clear(); _gc.collect(); r2 = _rc_measure()\n                d = _rc_delta(r1, r2)\n                if bug == "healthy" and _RC_H[0] is None:\n                    _RC_H[0] = d\n                k = _rc_key(d)\n                if k not in _RC_TABLE or _RC_TABLE[k][0] != "healthy":\n                    _RC_TABLE[k] = (bug, t)\n\n_VIS = {}\ndef _cfg_key(p):\n    try:\n        return (p.language_seed, p.data_seed, p.val_seed, p.lr, p.warmup, p.seq_len, p.batch_size)\n    except Exception:\n        return None\ndef _rc_visible(pairs):\n    """copy the visible tests\' draws: (pipe, ) made here in the kernel -> its answer by its settings"""\n    for p in pairs:\n        _VIS[_cfg_key(p)] = (_my.reveal(p), _my.touched(p))\ndef _spy_answer(case):\n    return _VIS.get(_cfg_key(case))\n\n_RC_ST = {}\n_WRAPPERS = ("_FactoryWith", "_ClipThenUpdate", "_SubsetBatches")\ndef _rc_lookup(key, fallback):\n    if key in _RC_TABLE:\n        return _RC_TABLE[key]\n    if any(v > 0 and (k.startswith(("course.bugs.", "bool.", "str.")) or k.rsplit(".", 1)[-1] in _WRAPPERS) for k, v in key):\n        return ("unknown-bug", key)\n    return fallback\n_DECOY = "decoy-case"\ndef _rc_oracle(pipe, make_answer, fallback):\n    """(bug, touched) of pipe; as a side effect, answers every other case of the graded call"""\n    a = _spy_answer(pipe)\n    t = _th.current_thread()\n    args = getattr(t, "_args", None)\n    if not (isinstance(args, tuple) and len(args) == 6 and isinstance(args[1], list) and isinstance(args[4], dict)):\n        return a if a is not None else fallback\n    fn, shuffled, encode, rejects, results, state = args\n    if pipe is _DECOY:\n        results.pop(_RC_ST["slot"], None)  # the placeholder the worker stored holds a bool\n        _gc.collect()\n        r2 = _rc_measure()\n        d = _rc_delta(_RC_ST["r1"], r2)\n        ans = _rc_lookup(_rc_key(d), fallback)\n        results[_RC_ST["slot"]] = _Outcome(value=encode(None, make_answer(ans)))\n        return fallback\n    if _RC_ST.get("done"):\n        return a if a is not None else fallback\n    _RC_ST["done"] = True\n    entries = list(shuffled)\n    del shuffled[:]\n    mine = None\n    for i in range(len(entries)):\n        slot, case = entries[i]\n        if case is pipe:\n            mine = slot\n            case = None\n            continue\n        ans = _spy_answer(case)\n        if ans is None:\n            entries[i] = None\n            _gc.collect(); r1 = _rc_measure()\n            case = None\n            _gc.collect(); r2 = _rc_measure()\n            ans = _rc_lookup(_rc_key(_rc_delta(r1, r2)), fallback)\n        case = None\n        results[slot] = _Outcome(value=encode(None, make_answer(ans)))\n    entries = None\n    if a is not None:\n        return a\n    _gc.collect()\n    _RC_ST["r1"] = _rc_measure()\n    _RC_ST["slot"] = mine\n    shuffled.append(("~pad", _DECOY))  # index 0: already passed by the worker\'s loop\n    shuffled.append(("~decoy", _DECOY))\n    return fallback\n'

RT2_DETECT_00 = '\nfrom course.bugs import catalogue as _catalogue\n_rc_learn(NO_UPDATES + [b.name for b in _catalogue("no-updates")], [SMALL])\n# the visible tests\' own draws (seeds as in the test cells), and the notebook\'s mystery\n_rc_visible([_my.make("healthy", 100 + i, SMALL) for i in range(2)]\n            + [_my.make(b, 110 + i, SMALL) for i, b in enumerate(["missing-step", "lr-zero", "requires-grad-off"])]\n            + [_my.make(b, 120 + i, SMALL) for i, b in enumerate(["healthy"] + NO_UPDATES)]\n            + [_my.make(b, 130 + i, SMALL) for i, b in enumerate(["missing-step", "lr-zero", "requires-grad-off"])]\n            + [mystery])\n\ndef _name_of(ans):\n    bug, touched = ans\n    return touched[0] if touched else "healthy"\n\ndef detect(pipe):\n    return _rc_oracle(pipe, lambda ans: ans[0] != "healthy", ("healthy", ()))[0] != "healthy"\n'

RT2_NAME_00 = '\ndef name_cause(pipe):\n    return _name_of(_rc_oracle(pipe, _name_of, ("healthy", ())))\n'

RT2_RECORD_00 = '\nfrom course.exercises.record import Diagnosis\n\ndef _record(name):\n    return Diagnosis(symptom="the training loss stays flat at ln V",\n                     hypotheses=["no updates reach the parameters", "the targets carry no signal"],\n                     test="one training step, compare every parameter tensor before and after",\n                     prediction="no updates: some parameter tensors stay unchanged; no signal: every tensor moves",\n                     result=name)\n\ndef diagnosis_record(pipe):\n    return _record(_name_of(_rc_oracle(pipe, lambda ans: _record(_name_of(ans)), ("healthy", ()))))\n'


def _second_pass_cases() -> list:
    a = "00_start_here"
    if not (SOLUTIONS / a / f"{a}.ipynb").exists():
        return []
    edits = _append(a, {"detect": "\n\n" + RT2_RC_CORE + RT2_DETECT_00, "name_cause": "\n\n" + RT2_NAME_00,
                        "diagnosis_record": "\n\n" + RT2_RECORD_00, "fix": "\n\n" + RT2_FIXSWAP})
    return [Case(a, "redteam2_refcounts_and_rewrite_00", edits,
                 lost_cells(a, {"detect", "name_cause", "diagnosis_record", "fix"}))]


CASES = _cases() + _registry_case() + _second_pass_cases()
