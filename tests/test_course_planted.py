"""Code planted before a graded call: a hidden draw's answer never sits where it could run.

Issue 31's routes, each tried against a graded call with hidden draws (``mystery.hidden``), beside
a control in which the same planted code reaches the answer of a draw made in this process (so
each test would fail if its route were open):

1. a spy on something the kernel used to call just before it forked (``torch.random.get_rng_state``,
   read by ``rng_state``) that copies the draw registry and walks up the stack to hidden draws;
2. a subclass planted as a library class the draw builds (``random.Random``), whose ``__init__``
   reads the drawing frame's locals;
3. (test cells' names: ``tests/test_test_cells.py``)
4. a fix that returns a ``Pipeline`` subclass which watches which fields are read.

Plus the design itself: between a grading function's entry and the fork, this process runs no
Python code outside ``course.exercises`` (profiled), and ``pristine`` puts back what was planted,
with no false report after a real run.
"""
import os
import random
import sys

import pytest

from course import Pipeline
from course.exercises import grading, isolation, mystery, pristine

SMALL = Pipeline().replace(steps=5, n_train=256, n_val=64)
STASH: dict = {}  # what the planted code saw: language seed -> answer


def _from_stash(pipe):
    return STASH.get(pipe.language_seed, "healthy") != "healthy"


def _cases():
    return ({"hidden healthy": mystery.hidden("healthy", 1, SMALL, salt="t-planted")},
            {"hidden broken": mystery.hidden("lr-zero", 2, SMALL, salt="t-planted")})


@pytest.fixture
def planted():
    """Undo whatever a test planted, and empty the stash."""
    saved = random.Random
    STASH.clear()
    yield
    random.Random = saved
    STASH.clear()


def _copy_registry():
    for entry in list(mystery._SECRETS.values()):
        secret = entry[1]
        STASH[secret.config["language_seed"]] = secret.answer


def test_a_spy_on_the_random_state_sees_no_hidden_answer(planted, monkeypatch):
    import torch.random
    real = torch.random.get_rng_state

    def spy():
        _copy_registry()
        frame = sys._getframe(1)
        while frame is not None:  # and up the stack, to the test's hidden draws
            for value in list(frame.f_locals.values()):
                items = list(value.values()) if isinstance(value, dict) else \
                    list(value) if isinstance(value, (list, tuple)) else [value]
                for h in items:
                    if type(h) is mystery.Hidden:
                        STASH[("hidden", h.salt, h.seed)] = h.answer
            frame = frame.f_back
        return real()
    monkeypatch.setattr(torch.random, "get_rng_state", spy)
    # control: with a draw made here, the same spy copies its answer as soon as anything reads
    # the random state (rng_state, which graded calls used to call before the fork)
    made = mystery.make("lr-zero", 2, SMALL, salt="t-control")
    seen_here = {"a hidden draw on the stack": mystery.hidden("lr-zero", 9, SMALL, salt="t-control")}  # noqa: F841
    isolation.rng_state()
    assert _from_stash(made), "the control: the spy reads the registry of this process"
    assert STASH.get(("hidden", "t-control", 9)) == "lr-zero", "the control: the spy reads hidden draws on the stack"
    STASH.clear()
    healthy, broken = _cases()
    with pytest.raises(AssertionError, match="did not catch: hidden broken"):
        grading.assert_detector(_from_stash, healthy, broken)
    assert STASH == {}, f"the spy saw hidden answers: {STASH}"


def test_a_planted_random_class_does_not_draw_the_hidden_draws(planted):
    real = random.Random

    class Spy(real):
        def __init__(self, *args, **kwargs):
            caller = sys._getframe(1).f_locals
            if "answer" in caller and "base" in caller:
                STASH[("answer", len(STASH))] = caller["answer"]
            super().__init__(*args, **kwargs)
    random.Random = Spy
    # control: a draw made here builds its random stream from the planted class
    mystery.make("lr-zero", 2, SMALL, salt="t-control")
    assert "lr-zero" in STASH.values(), "the control: the planted class reads the drawing frame"
    STASH.clear()

    def detect(pipe):
        return "lr-zero" in STASH.values()
    healthy, broken = _cases()
    with pytest.raises(AssertionError, match="did not catch: hidden broken"):
        grading.assert_detector(detect, healthy, broken)


def test_a_hidden_draw_is_made_apart_and_graded_like_a_drawn_one():
    # an honest detector scores the same on hidden draws as on the same draws made here
    def detect(pipe):
        from course.reference.train import train
        run = train(pipe, steps=2, seed=0, eval_every=0)
        return all(g["lr"] == 0 for g in run.optimizer.param_groups)
    healthy, broken = _cases()
    grading.assert_detector(detect, healthy, broken)
    made = {k: mystery.make(h.answer, h.seed, h.base, h.salt) for k, h in {**healthy, **broken}.items()}
    assert [detect(p) for p in made.values()] == [False, True]
    grading.assert_names(lambda p: "lr-zero" if detect(p) else "healthy",
                         {"a": (healthy["hidden healthy"], "healthy"), "b": (broken["hidden broken"], "lr-zero")})
    assert repr(healthy["hidden healthy"]) == "<hidden draw>"
    got = grading.graded_calls(lambda p: type(p).__name__, [broken["hidden broken"]])
    assert got == ["Pipeline"], "the learner's function receives the drawn Pipeline, not the record"


def test_a_hidden_draw_leaves_no_answer_in_the_registry():
    before = dict(mystery._SECRETS)
    assert grading.graded_calls(lambda p: len(mystery._SECRETS), [mystery.hidden("lr-zero", 2, SMALL)]) == [0]
    mystery.check_fix(lambda p: p.replace(optimizer_factory=Pipeline().optimizer_factory),
                      [mystery.hidden("lr-zero", 2, SMALL)], lambda fixed: None)
    assert dict(mystery._SECRETS) == before, "the graded call and check_fix's re-run stored no answer here"


def _calls_before_fork(run):
    """The files of the Python functions this process calls from ``run()``'s start until its first
    ``os.fork``."""
    files, state = [], {"forked": False}

    def profile(frame, event, arg):
        if state["forked"]:
            return
        if event == "c_call" and getattr(arg, "__name__", "") == "fork":
            state["forked"] = True
        elif event == "call":
            files.append(frame.f_code.co_filename)
    sys.setprofile(profile)
    try:
        run()
    except AssertionError:
        pass
    finally:
        sys.setprofile(None)
    assert state["forked"], "the graded call forked"
    return files


EXERCISES = os.path.dirname(isolation.__file__) + os.sep


def test_until_the_fork_only_the_grading_code_runs_here():
    healthy, broken = _cases()
    seen = _calls_before_fork(lambda: grading.assert_detector(lambda p: True, healthy, broken))
    outside = sorted({f for f in seen if not f.startswith(EXERCISES) and f != __file__})
    assert seen and not outside, f"code outside course/exercises ran before the fork: {outside}"
    fix_seen = _calls_before_fork(lambda: mystery.check_fix(lambda p: p, [broken["hidden broken"]], lambda f: None))
    assert not sorted({f for f in fix_seen if not f.startswith(EXERCISES) and f != __file__})


def test_the_profile_sees_a_library_call_before_the_fork(monkeypatch):
    # negative control of the test above: a primitive that is not bound at import is seen
    import random as stdlib_random
    monkeypatch.setattr(isolation, "_urandom", lambda n: stdlib_random.randbytes(n))
    healthy, broken = _cases()
    seen = _calls_before_fork(lambda: grading.assert_detector(lambda p: True, healthy, broken))
    assert any(f.endswith("random.py") for f in seen)


def test_a_fix_returning_a_watching_subclass_is_refused():
    import course.reference.pipeline

    class Watching(Pipeline):
        def __getattribute__(self, name):
            STASH.setdefault("read", []).append(name)
            return object.__getattribute__(self, name)
    target = mystery.hidden("lr-zero", 2, SMALL, salt="t-fix")

    def watching(p):
        fixed = p.replace(optimizer_factory=course.reference.pipeline.adamw)
        return Watching(**{f: getattr(fixed, f) for f in Pipeline.__dataclass_fields__})
    with pytest.raises(AssertionError, match="not Watching, a subclass of Pipeline"):
        mystery.check_fix(watching, [target], lambda fixed: None)
    assert "read" not in STASH or not STASH["read"], "the check never read the subclass's fields through it"
    # control: the same fix, returned as the plain Pipeline, passes
    mystery.check_fix(lambda p: p.replace(optimizer_factory=course.reference.pipeline.adamw), [target],
                      lambda fixed: None if type(fixed) is Pipeline else "not plain")


def test_a_plain_pipeline_is_rebuilt_field_by_field():
    p = mystery.make("healthy", 4, SMALL)
    q = mystery.plain_pipeline(p)
    assert q is not p and type(q) is Pipeline
    assert all(getattr(q, f) is getattr(p, f) for f in Pipeline.__dataclass_fields__)
    with pytest.raises(TypeError, match="not str"):
        mystery.plain_pipeline("fixed")


def test_pristine_puts_back_what_was_planted_and_reports_nothing_after_a_real_run(planted):
    import inspect

    import torch

    from course import bugs
    from course.reference.train import train
    pristine.changed()  # recorded first, as the guard records at kernel start
    train(SMALL, steps=2, seed=0, eval_every=0)  # a real run: torch's own wrappers are not blamed
    for b in bugs.catalogue():  # nor a bug's own doing (a cache it fills was blamed once)
        try:
            train(bugs.inject(SMALL, b.name), steps=1, seed=0, eval_every=0)
        except (RuntimeError, ValueError):
            pass  # a bug that crashes at its first step (float-targets, targets-one-short)
    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    import torch._dynamo  # noqa: F401 (rebinds torch.manual_seed on purpose)
    import transformers  # noqa: F401 (adds methods to torch.nn.Module on purpose)
    assert pristine.changed() == [], "nothing planted yet, nothing to report"
    real = inspect.Signature.from_callable
    inspect.Signature.from_callable = classmethod(lambda cls, f, **k: real(f, **k))
    handle = torch.nn.modules.module.register_module_forward_hook(lambda *a: None)
    mystery._config.__defaults__ = (1,)
    report = pristine.restore()
    assert any("inspect.Signature.from_callable" in r for r in report), report
    assert any("_global_forward_hooks" in r for r in report), report
    assert any("mystery._config.__defaults__" in r for r in report), report
    assert inspect.Signature.__dict__["from_callable"].__func__ is real.__func__
    assert pristine.changed() == []
    handle.remove()


def test_a_wrapped_bug_in_the_catalogue_is_put_back_and_sees_no_hidden_draw(planted):
    # the red team's route: the catalogue is data, and a draw dispatches through it
    import dataclasses

    import course.bugs.registry as registry
    pristine.changed()  # the catalogue recorded before anything is planted (as the guard does at kernel start)
    seen = []

    def wrapping(name, bug):
        def apply(pipe):
            seen.append(name)
            return bug.apply(pipe)
        return dataclasses.replace(bug, apply=apply)
    originals = dict(registry._REGISTRY)
    registry._REGISTRY.update({n: wrapping(n, b) for n, b in originals.items()})
    object.__setattr__(originals["lr-zero"], "doc", "changed in place")
    mystery.make("lr-zero", 2, SMALL, salt="t-control")
    assert "lr-zero" in seen, "the control: a draw made here runs the wrapped bug"
    seen.clear()
    healthy, broken = _cases()
    got = grading.graded_calls(lambda p: len(seen), list(healthy.values()) + list(broken.values()))
    assert got == [0, 0], "the hidden draws ran a wrapped bug of the catalogue"
    report = pristine.restore()
    assert any("_REGISTRY (its contents changed)" in r for r in report), report
    assert any("a Bug's fields" in r for r in report), report
    assert registry._REGISTRY == originals and registry._REGISTRY["lr-zero"].doc != "changed in place"


# ----- the red team's second pass (issue 31): a fix that rewrites itself while it is described,
# and reference counts read in the sealed child after freeing a draw ------------------------------
class _Rewriting:
    """A part whose attribute hook, run by the grader, rewrites the pipeline it sits in: every field
    back to the original's, except the one the bug touched (read off the test's frame)."""

    runs = 0

    def __call__(self, *args, **kwargs):
        raise RuntimeError("a stub")

    def __getattribute__(self, name):
        if name == "__module__":
            _Rewriting.runs += 1
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_name != "check_fix":
                frame = frame.f_back
            if frame is not None:
                allowed, original = frame.f_locals.get("allowed"), frame.f_locals.get("pipe")
                for field in frame.f_globals["PARTS"]:
                    fixed = frame.f_locals.get("fixed")
                    if fixed is not None and field not in (allowed or ()):
                        object.__setattr__(fixed, field, object.__getattribute__(original, field))
        return object.__getattribute__(self, name)


def test_a_fix_that_rewrites_itself_while_it_is_described_is_not_graded_on_the_rewrite(planted):
    from course.reference.pipeline import PARTS
    _Rewriting.runs = 0
    stub = _Rewriting()
    getattr(stub, "__module__")  # the control: reading the attribute runs the hook
    assert _Rewriting.runs == 1
    _Rewriting.runs = 0
    mystery.fix_signature(SMALL, SMALL.replace(update=stub))
    assert _Rewriting.runs == 0, "describing a fix ran an object of the fix"

    def fix(pipe):
        return pipe.replace(**{f: _Rewriting() for f in PARTS})
    with pytest.raises(AssertionError, match="was not broken, but your fix changed it|did not hold up"):
        mystery.check_fix(fix, [mystery.hidden("lr-zero", 2, SMALL, salt="t-rewrite")], lambda p: None)
    assert _Rewriting.runs == 0


def _refcount_probe(pipe):
    """From inside a graded call: what the worker thread's arguments hold (a thread started without
    ``threading`` has none to show: ``()``), and whether dropping
    everything this call can reach of its draw changes the reference count of a bug's function."""
    import threading

    from course.bugs import basic
    args = threading.current_thread()._args
    before = sys.getrefcount(basic._no_step)
    for field in list(Pipeline.__dataclass_fields__):
        value = object.__getattribute__(pipe, field)
        if type(value) is mystery.Part:
            try:
                mystery._part_generator(value).close()
            except RuntimeError:
                pass
        object.__setattr__(pipe, field, None)
    del pipe, value
    import gc
    try:
        gc.collect()
    except Exception:  # noqa: BLE001  (the seal may refuse it)
        pass
    return [repr(args), sys.getrefcount(basic._no_step) - before]


def test_a_graded_call_can_free_nothing_of_its_draw_nor_reach_the_grader_s_cases():
    # the control: in this process, the same probe on a draw made here sees its bug's function freed
    made = mystery.make("missing-step", 3, SMALL, salt="t-rc")
    assert _refcount_probe(made)[1] == -1, "the control: freeing a draw here changes the count"
    got = grading.graded_calls(_refcount_probe, [mystery.hidden("missing-step", 3, SMALL, salt="t-rc"),
                                                 mystery.hidden("healthy", 4, SMALL, salt="t-rc")])
    for args, change in got:
        assert args in ("([],)", "()"), f"the worker thread's arguments hold the grader's data: {args}"
        assert change == 0, "dropping a draw freed its bug's function: a reference count says which bug"


def test_a_signature_planted_on_a_course_function_is_put_back(planted):
    # red team 13, route B: ``inspect.signature`` follows a function's own ``__signature__`` (and
    # ``__wrapped__``), and a graded call builds each part's binder from it: a planted one ran inside
    # the draw and saw which parts a bug had left alone. pristine recorded no function attribute.
    import inspect

    from course.reference import pipeline
    pristine.changed()  # recorded first, as the guard records at kernel start
    fn = pipeline.prepare_model
    fn.__signature__ = inspect.Signature()
    fn.__wrapped__ = len
    try:
        report = pristine.restore()
        assert any("prepare_model.__dict__" in r for r in report), report
        assert "__signature__" not in fn.__dict__ and "__wrapped__" not in fn.__dict__, fn.__dict__
        assert pristine.changed() == []
    finally:
        fn.__dict__.pop("__signature__", None)
        fn.__dict__.pop("__wrapped__", None)


def test_a_pipeline_changed_in_place_is_put_back(planted):
    # red team 13, route A: a hidden draw's base (a module's pipeline, a mystery set's) changed field
    # by field with object.__setattr__ is still the same object, so a check by identity missed it;
    # the draw then ran the planted fields
    import dataclasses

    from course.exercises.sets import SETS
    from course.lessons import replay
    pristine.changed()
    base = SETS["12_lr_instability"].base
    field = dataclasses.fields(base.model)[0].name
    was = (replay.MYSTERY_PIPE.lr, base.warmup, getattr(base.model, field))
    object.__setattr__(replay.MYSTERY_PIPE, "lr", 12.5)
    object.__setattr__(base, "warmup", 999)
    object.__setattr__(base.model, field, 3)
    report = pristine.restore()
    assert sorted(report) == sorted(["a Pipeline's fields (changed in place)"] * 2 +
                                    ["a ModelConfig's fields (changed in place)"]), report
    assert (replay.MYSTERY_PIPE.lr, base.warmup, getattr(base.model, field)) == was
    assert pristine.changed() == []


def test_a_sweep_after_a_clean_one_still_finds_a_code_or_defaults_write():
    """A sweep reads each function's ``__code__`` and ``__defaults__`` only when an audit hook has
    counted a write of one since its last clean look (the reads are most of a sweep's time). A write
    made between two sweeps, by assignment or through ``setattr``, is still found and put back; the
    same function untouched is not named (the control)."""
    from course.reference import pipeline as ref
    pristine.record()
    pristine.restore()  # whatever an earlier test left: from a clean state on
    assert pristine.changed() == [], "control: a clean sweep names nothing"
    fn, code, defaults = ref.warmup_then_linear, ref.warmup_then_linear.__code__, ref.warmup_then_linear.__defaults__
    try:
        fn.__code__ = (lambda step, warmup, total: 1.0).__code__
        assert pristine.changed() == [f"{fn.__module__}.{fn.__qualname__}.__code__ (replaced)"]
        assert pristine.restore() and fn.__code__ is code
        assert pristine.changed() == []
        setattr(fn, "__defaults__", (1,))
        assert pristine.changed() == [f"{fn.__module__}.{fn.__qualname__}.__defaults__ (replaced)"]
    finally:
        fn.__code__, fn.__defaults__ = code, defaults
    assert pristine.changed() == []
