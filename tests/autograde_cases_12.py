"""Targeted submissions for 12_lr_instability (see tests/autograde_cases.py for the format).

Every graded exercise has an alternative correct answer (full marks), a realistic wrong answer and a
degenerate one (a constant, a delegation to the package function that is switched off, or one that
reads the pipeline's settings), each with the exact test cells it must lose. ``fix`` calls the
learner's ``name_cause``, so a wrong ``name_cause`` loses the fix cell too.
"""
from autograder.grading import Case

A = "12_lr_instability"
CLIP, CHANGE = "test_clipped_fraction", "test_real_change"
DETECT, CAUSE, FIX = "test_mystery_detect", "test_mystery_cause", "test_mystery_fix"

# ----- clipped_fraction ----------------------------------------------------------------------------
# A float32 mean (1/3 is 0.33333334 there): within the stated 1e-6 (a learner's answer that an exact
# comparison in the visible test once failed).
_CLIP_TENSOR = """def clipped_fraction(grad_norms, threshold):
    t = torch.as_tensor([float(g) for g in grad_norms])
    if t.numel() == 0:
        return 0.0
    return ((t > threshold) | ~torch.isfinite(t)).float().mean()
"""

# Realistic wrong: NaN compares False, so a NaN norm is not counted (inf still is, being > threshold).
_CLIP_NAN_UNCOUNTED = """def clipped_fraction(grad_norms, threshold):
    norms = [float(g) for g in grad_norms]
    return sum(g > threshold for g in norms) / len(norms) if norms else 0.0
"""

# Realistic wrong: >= where the specification (and clip_grad_norm_) says >.
_CLIP_AT_THRESHOLD = """def clipped_fraction(grad_norms, threshold):
    norms = [float(g) for g in grad_norms]
    return sum(not math.isfinite(g) or g >= threshold for g in norms) / len(norms) if norms else 0.0
"""

# ----- real_change ---------------------------------------------------------------------------------
_CHANGE_STATISTICS = """import statistics

def real_change(baseline, candidate):
    b, c = [float(x) for x in baseline], [float(x) for x in candidate]
    widest = max(max(v) - min(v) for v in (b, c))
    return statistics.fmean(b) - statistics.fmean(c) > widest
"""

# Realistic wrong: the means alone, no noise.
_CHANGE_MEANS_ONLY = """def real_change(baseline, candidate):
    b, c = [float(x) for x in baseline], [float(x) for x in candidate]
    return sum(c) / len(c) < sum(b) / len(b)
"""

# Realistic wrong: the baseline's range only (the candidate's own spread ignored).
_CHANGE_BASELINE_RANGE = """def real_change(baseline, candidate):
    b, c = [float(x) for x in baseline], [float(x) for x in candidate]
    return sum(b) / len(b) - sum(c) / len(c) > max(b) - min(b)
"""

# ----- detect --------------------------------------------------------------------------------------
# Another method: the loss of the first steps, against the healthy twin's on the same seed, bit for
# bit (the same parts compute the same floats); a crash counts as broken.
_DETECT_LOSSES = """from course.reference.train import start, train_steps


def _first_losses(p, steps=3):
    run = start(p, 0)
    train_steps(run, steps, eval_every=10**9)
    return run.history["loss"]


def detect(pipe):
    try:
        return _first_losses(pipe) != _first_losses(healthy_twin(pipe))
    except Exception:
        return True
"""

# Realistic wrong: the final loss against the twin's with a margin. The optimizer bugs at some
# rates end within the margin (the loss is noisy evidence), so a broken draw goes unseen.
_DETECT_FINAL_LOSS = """def detect(pipe):
    try:
        mine = train(pipe, seed=0, eval_every=10**9).final_val_loss
        ref = train(healthy_twin(pipe), seed=0, eval_every=10**9).final_val_loss
    except Exception:
        return True
    return not mine <= ref + 0.05
"""

# Realistic wrong: the used rate only (warm-up is what this notebook is about), not the optimizer's
# constants nor the initial weights.
_DETECT_RATE_ONLY = """def detect(pipe):
    try:
        mine, ref = instability.used(pipe), instability.used(healthy_twin(pipe))
    except Exception:
        return True
    return any(abs(a - b) > 1e-6 * b for a, b in zip(mine["lr"], ref["lr"]))
"""

# ----- name_cause ----------------------------------------------------------------------------------
# Another method: swap one part at a time for the reference and see which swap makes the first
# losses equal to the twin's (the ablation of notebook 00).
_NAME_SWAP = """from course.reference.train import start, train_steps
from course.reference.pipeline import Pipeline as _Reference


def _first_losses(p, steps=3):
    run = start(p, 0)
    train_steps(run, steps, eval_every=10**9)
    return run.history["loss"]


def name_cause(pipe):
    ref = _first_losses(healthy_twin(pipe))
    if _first_losses(pipe) == ref:
        return "healthy"
    for field, cause in (("schedule", "schedule"), ("optimizer_factory", "optimizer"), ("prepare", "init")):
        if _first_losses(pipe.replace(**{field: getattr(_Reference(), field)})) == ref:
            return cause
    return "schedule"
"""

# Realistic wrong: the used rate, then "it trains worse: the optimizer". The too-small
# initialisation is named an optimizer bug, and so the fix replaces the wrong part.
_NAME_NO_INIT = """def name_cause(pipe):
    mine, ref = instability.used(pipe), instability.used(healthy_twin(pipe))
    if any(abs(a - b) > 1e-6 * b for a, b in zip(mine["lr"], ref["lr"])):
        return "schedule"
    if mine["rel_update"] != ref["rel_update"]:
        return "optimizer"
    return "healthy"
"""

# Degenerate: reads the settings (every setting shows the healthy value).
_NAME_SETTINGS = """def name_cause(pipe):
    if pipe.warmup <= 1:
        return "schedule"
    if pipe.lr > 0.03:
        return "optimizer"
    return "healthy"
"""

# ----- fix -----------------------------------------------------------------------------------------
_FIX_FROM_REFERENCE = """from course import Pipeline as _Pipeline

_FIELD = {"schedule": "schedule", "optimizer": "optimizer_factory", "init": "prepare"}


def fix(pipe):
    field = _FIELD.get(name_cause(pipe))
    return pipe if field is None else pipe.replace(**{field: getattr(_Pipeline(), field)})
"""

# Realistic wrong: every suspect part replaced, broken or not (changes parts that were not broken).
_FIX_ALL_PARTS = """import course.reference.pipeline as _ref


def fix(pipe):
    return pipe.replace(schedule=_ref.warmup_then_linear, optimizer_factory=_ref.adamw, prepare=_ref.prepare_model)
"""

# Degenerate: the base pipeline (loses the draw's own configuration).
_FIX_BASE = """def fix(pipe):
    return SETS["12_lr_instability"].base
"""

# ----- a red team's pass on this notebook (issue 31), each a zero-work route that scored every
# detect and name point here, hidden draws included, before the fix it names. Their control is the
# solution (the same cells, doing the work: full marks).
# (a) A part's generator resumed at the recursion limit is finished (no handler of its own runs) and
# clears its frame; the reference functions' reference counts then say which part held them.
# Closed: the graded call's process holds each part generator's frame (mystery._keeper).
_FINISHED_PART = """import sys
from course.exercises import mystery as _m
from course.reference import pipeline as _ref
from course.bugs import instability as _bugs

def _finish(gen):
    def below(j):
        def deep(n):
            try:
                r = deep(n + 1)
            except RecursionError:
                r = j
            if r == 0:
                try:
                    gen.send(((0, 1, 2), {}))
                except BaseException:
                    pass
            return r - 1
        deep(0)
    for j in range(8):
        below(j)
        if not gen.gi_suspended:
            return

def _held(part, fn):
    before = sys.getrefcount(fn)
    _finish(_m._part_generator(part))
    return sys.getrefcount(fn) < before

def _by_refcount(pipe):
    if not _held(pipe.schedule, _ref.warmup_then_linear):
        return "schedule"
    if not _held(pipe.optimizer_factory, _ref.adamw):
        return "optimizer"
    if _held(pipe.prepare, _bugs._ScaledAfter):  # an instance holds its class
        return "init"
    return "healthy"

def detect(pipe):
    return _by_refcount(pipe) != "healthy"
"""

# (c) A stand-in passed by keyword was not checked against the field's contract: it records the
# comparisons and products the schedule makes with `warmup` (none when warm-up is skipped, a product
# when it is counted in examples); the optimizer and the initialisation are told apart by what the
# parts return and do to a model of the caller's (allowed: tests of the part). Closed: a part
# takes its field's arguments by position and only its documented keywords (mystery._check_arguments).
_KEYWORD_STANDIN = """import torch
from course.reference import pipeline as _ref

class _Rec:
    def __init__(self, log):
        self.log = log
    def _r(self, op):
        self.log.append(op)
        return 1
    def __lt__(self, o): return self._r("<") and False
    def __gt__(self, o): return self._r(">") and False
    def __le__(self, o): return self._r("<=") and False
    def __ge__(self, o): return self._r(">=") and False
    def __mul__(self, o): return self._r("*")
    __rmul__ = __mul__
    def __rtruediv__(self, o): return self._r("/")
    __truediv__ = __rtruediv__

def _by_standin(pipe):
    log = []
    try:
        pipe.schedule(0, warmup=_Rec(log), total=100)
    except TypeError:
        pass
    if not log or "*" in log:
        return "schedule"
    opt = pipe.optimizer_factory([torch.nn.Parameter(torch.zeros(1))], 1e-3, 0.0)
    ref = _ref.adamw([torch.nn.Parameter(torch.zeros(1))], 1e-3, 0.0)
    if opt.defaults != ref.defaults:
        return "optimizer"
    mine, theirs = pipe.build_model(0), pipe.build_model(0)
    pipe.prepare(mine)
    _ref.prepare_model(theirs)
    scale = lambda m: torch.cat([p.detach().flatten() for p in m.parameters() if p.dim() >= 2]).std()
    if abs(scale(mine) / scale(theirs) - 1) > 0.01:
        return "init"
    return "healthy"

def detect(pipe):
    return _by_standin(pipe) != "healthy"
"""


# (d) A thread of the learner's own, alive while the call's own thread runs a part with plain data,
# polls sys.getrefcount of every function of course.bugs: a running function is held by its frame,
# so its count rises while it runs (a red team's prototype, 2026-12-07). No behaviour is compared.
# Closed: in a graded call a part refuses to run while another thread is alive (the seal's thread rule).
_REFCOUNT_POLLER = """import sys as _sys, threading as _threading, time as _time, types as _types
import torch

def _poll_candidates():
    out = []
    for name, module in sorted(_sys.modules.items()):
        if not name.startswith("course.bugs.") or module is None:
            continue
        for key, value in sorted(vars(module).items()):
            if type(value) is _types.FunctionType and value.__module__ == name:
                out.append(value)
            elif isinstance(value, type) and value.__module__ == name and \\
                    type(value.__dict__.get("__call__")) is _types.FunctionType:
                out.append(value.__dict__["__call__"])
    return out

_POLLED = _poll_candidates()

def _by_poller(pipe):
    base = [_sys.getrefcount(f) for f in _POLLED]
    state, hits = {"field": None, "stop": False}, []
    def poll():
        while not state["stop"]:
            field = state["field"]
            if field is not None and any(_sys.getrefcount(f) > b + 1 for f, b in zip(_POLLED, base)):
                if state["field"] is field:
                    hits.append(field)
    old = _sys.getswitchinterval()
    _sys.setswitchinterval(1e-6)
    watcher = _threading.Thread(target=poll)
    watcher.start()
    try:
        params = [torch.nn.Parameter(torch.zeros(2, 2))]
        calls = {"schedule": (20000, lambda: pipe.schedule(3, 5, 60)),
                 "optimizer_factory": (1500, lambda: pipe.optimizer_factory(params, 0.01, 0.0)),
                 "prepare": (600, lambda: pipe.prepare(torch.nn.Linear(2, 2)))}
        for field, (n, call) in calls.items():
            state["field"] = None
            _time.sleep(0.01)
            state["field"] = field
            for _ in range(n):
                if field in hits:
                    break
                try:
                    call()
                except Exception:
                    pass
        state["field"] = None
    finally:
        state["stop"] = True
        watcher.join()
        _sys.setswitchinterval(old)
    for field, cause in (("schedule", "schedule"), ("optimizer_factory", "optimizer"), ("prepare", "init")):
        if field in hits:
            return cause
    return "healthy"

def detect(pipe):
    return _by_poller(pipe) != "healthy"
"""

# (e) The part's own code read this module's names as it ran: rebound in the graded call
# (mystery._withheld, _scrub), a part's error came out with its traceback, whose line numbers say
# which function failed; a table of them is made here from draws of the learner's own (found
# 2026-12-08). Closed: a part runs on a private copy of the names its code reads, made with it.
_REBINDS_PART_INTERNALS = """import torch
from course.exercises import mystery as _my
from course.exercises.sets import SETS as _SETS

class _Boom(torch.nn.Module):  # fails wherever an initialisation walks it
    def apply(self, fn):
        raise ValueError("boom")
    def modules(self):
        raise ValueError("boom")
    def named_modules(self, *args, **kwargs):
        raise ValueError("boom")
    def parameters(self, recurse=True):
        raise ValueError("boom")
    def named_parameters(self, *args, **kwargs):
        raise ValueError("boom")

def _lines(pipe):
    saved = _my._withheld, _my._scrub
    _my._withheld, _my._scrub = (lambda err: err), (lambda err: None)
    out = []
    try:
        for call in (lambda: pipe.schedule(2 ** 2000, 1, 1),  # too large for a float
                     lambda: pipe.optimizer_factory([], 0.01, 0.0),  # an empty parameter list
                     lambda: pipe.prepare(_Boom())):
            numbers, tb = [], None
            try:
                call()
            except BaseException as err:
                tb = err.__traceback__
            while tb is not None:
                numbers.append(tb.tb_lineno)
                tb = tb.tb_next
            out.append(tuple(numbers[2:]))  # below the caller's own frames
    finally:
        _my._withheld, _my._scrub = saved
    return tuple(out)

_SET = _SETS["12_lr_instability"]
_CAUSE_OF = dict(_SET.causes) | {"healthy": "healthy"}
_LINES = {}
for _bug in _CAUSE_OF:
    for _seed in (3, 4):
        try:
            _LINES.setdefault(_lines(_my.make(_bug, _seed, _SET.base)), _bug)
        except Exception:
            pass

def _by_lines(pipe):
    return _CAUSE_OF.get(_LINES.get(_lines(pipe)), "healthy")

def detect(pipe):
    return _by_lines(pipe) != "healthy"
"""



def _solution_cell(grade_id: str) -> str:
    """The solution's source of one answer cell."""
    from autograde_cases_routes import _source
    from autograder.grading import nbgrader_meta
    return next("".join(c["source"]) for c in _source(A)["cells"] if nbgrader_meta(c).get("grade_id") == grade_id)


def _harmless(route: str) -> str:
    """A route's code with its own ``detect`` renamed, so it answers nothing."""
    return route.replace("def detect(pipe):", "def _route_detect(pipe):")


CASES = [
    # clipped_fraction
    Case(A, "clip_tensor_mean", {"clipped_fraction": _CLIP_TENSOR}, set()),
    Case(A, "clip_nan_uncounted", {"clipped_fraction": _CLIP_NAN_UNCOUNTED}, {CLIP}),
    Case(A, "clip_at_threshold", {"clipped_fraction": _CLIP_AT_THRESHOLD}, {CLIP}),
    Case(A, "clip_delegates",
         {"clipped_fraction": "def clipped_fraction(grad_norms, threshold):\n"
                              "    return instability.clipped_fraction(grad_norms, threshold)\n"}, {CLIP}),
    # real_change
    Case(A, "change_statistics", {"real_change": _CHANGE_STATISTICS}, set()),
    Case(A, "change_means_only", {"real_change": _CHANGE_MEANS_ONLY}, {CHANGE}),
    Case(A, "change_baseline_range", {"real_change": _CHANGE_BASELINE_RANGE}, {CHANGE}),
    Case(A, "change_delegates",
         {"real_change": "def real_change(baseline, candidate):\n"
                         "    return instability.real_change(baseline, candidate)\n"}, {CHANGE}),
    # detect
    Case(A, "detect_first_losses", {"detect": _DETECT_LOSSES}, set()),
    Case(A, "detect_final_loss", {"detect": _DETECT_FINAL_LOSS}, {DETECT}),
    Case(A, "detect_rate_only", {"detect": _DETECT_RATE_ONLY}, {DETECT}),
    Case(A, "detect_always", {"detect": "def detect(pipe):\n    return True\n"}, {DETECT}),
    Case(A, "detect_delegates",
         {"detect": "def detect(pipe):\n    return bool(instability.problems(pipe))\n"}, {DETECT}),
    # name_cause (the fix calls it)
    Case(A, "name_by_swapping_parts", {"name_cause": _NAME_SWAP}, set()),
    Case(A, "name_without_init", {"name_cause": _NAME_NO_INIT}, {CAUSE, FIX}),
    Case(A, "name_reads_settings", {"name_cause": _NAME_SETTINGS}, {CAUSE, FIX}),
    # fix
    Case(A, "fix_from_reference_pipeline", {"fix": _FIX_FROM_REFERENCE}, set()),
    Case(A, "fix_all_parts", {"fix": _FIX_ALL_PARTS}, {FIX}),
    Case(A, "fix_returns_base", {"fix": _FIX_BASE}, {FIX}),
    # a red team's routes (above), each closed: it loses every cell it answers
    Case(A, "redteam5_finished_part",
         {"detect": _FINISHED_PART, "name_cause": "def name_cause(pipe):\n    return _by_refcount(pipe)\n"},
         {DETECT, CAUSE, FIX}),
    Case(A, "redteam5_keyword_standin",
         {"detect": _KEYWORD_STANDIN, "name_cause": "def name_cause(pipe):\n    return _by_standin(pipe)\n"},
         {DETECT, CAUSE, FIX}),
    Case(A, "redteam6_refcount_poller",
         {"detect": _REFCOUNT_POLLER, "name_cause": "def name_cause(pipe):\n    return _by_poller(pipe)\n"},
         {DETECT, CAUSE, FIX}),
    # their control: both routes' code planted beside the solution's own detect, answering nothing
    Case(A, "redteam6_routes_planted_harmless",
         {"detect": _solution_cell("detect") + "\n\n" + _harmless(_REFCOUNT_POLLER) + "\n\n"
                    + _harmless(_REBINDS_PART_INTERNALS)}, set()),
    Case(A, "rebinds_part_internals",
         {"detect": _REBINDS_PART_INTERNALS, "name_cause": "def name_cause(pipe):\n    return _by_lines(pipe)\n"},
         {DETECT, CAUSE, FIX}),
]
