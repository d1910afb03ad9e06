"""course.exercises.isolation: a graded call runs where the answer does not exist, and only data comes back.

Each route a work-free answer has taken to a mystery's answer gets a test that the route is closed
in a graded call, beside a control that the same code reaches the answer in the kernel itself (so
the test would fail if the route were open)."""
import gc
import os
import sys

import pytest

from course import Pipeline
from course.exercises import mystery
from course.exercises.grading import SwitchedOff, assert_detector, assert_names
from course.exercises.isolation import Sealed, private_helpers, run_apart

SMALL = Pipeline().replace(steps=5, n_train=256, n_val=64)


@pytest.fixture(scope="module")
def draws():
    return {"healthy": mystery.make("healthy", 1, SMALL), "broken": mystery.make("lr-zero", 2, SMALL)}


def _ask(detect, draws):
    assert_detector(detect, {"a healthy draw": draws["healthy"]}, {"a broken draw": draws["broken"]})


def reads_registry(pipe):
    return mystery._SECRETS[id(pipe)][1].answer != "healthy"


def walks_gc(pipe):
    for o in gc.get_objects():
        if isinstance(o, dict) and isinstance(o.get(id(pipe)), tuple) and len(o[id(pipe)]) == 2:
            return o[id(pipe)][1].answer != "healthy"
    return False


def opens_a_part(pipe):
    import inspect  # a library's helper reads the generator's frame for us
    inner = inspect.getgeneratorlocals(pipe.optimizer_factory._Part__gen)["fn"]
    return inner is not Pipeline().optimizer_factory


def walks_frames(pipe):
    import inspect  # a library's helper hands out the frames above us
    for info in inspect.stack(0):
        for v in info.frame.f_locals.values():
            if isinstance(v, dict):
                for label, case in v.items():
                    if case is pipe:
                        return "broken" in str(label)
    return False


def _in_a_frame_that_holds_the_cases(route, draws):
    cases = {"a broken draw": draws["broken"], "a healthy draw": draws["healthy"]}  # noqa: F841 (read by walks_frames)
    return route(draws["broken"]), route(draws["healthy"])


@pytest.mark.parametrize("route", [reads_registry, walks_gc, opens_a_part, walks_frames])
def test_each_route_reaches_the_answer_in_the_kernel_itself(route, draws):
    # the control: the same code, called here, reads the answer, so the next test can fail
    assert _in_a_frame_that_holds_the_cases(route, draws) == (True, False)


@pytest.mark.parametrize("route", [reads_registry, walks_gc, opens_a_part, walks_frames])
def test_no_route_reaches_the_answer_in_a_graded_call(route, draws):
    with pytest.raises((KeyError, Sealed)):
        _ask(route, draws)


def test_a_part_holds_its_function_in_no_attribute():
    part = mystery.Part(len)
    assert part([1, 2]) == 2 and repr(part) == "<part>"
    assert not hasattr(part, "__dict__") and not hasattr(part, "_Part__fn")
    with pytest.raises(TypeError):
        import pickle
        pickle.dumps(part)


def test_a_parts_exception_carries_no_trace_of_its_insides():
    def inside(x):
        raise ValueError("bad input")
    with pytest.raises(RuntimeError) as info:
        mystery.Part(inside)(1)
    assert "bad input" not in str(info.value) and info.value.__cause__ is None and info.value.__context__ is None
    names = []
    tb = info.value.__traceback__
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert "inside" not in names and "_holder" not in names, names


def test_parts_that_fail_differently_fail_alike():
    """What a function read first (its error's type and message) would name it: two parts whose
    functions fail in different ways raise the same error with the same message. Control: called
    directly, the two functions' errors differ."""
    def reads_history(run):
        return run.history

    def reads_model(run):
        return run.model.parameters()

    direct = []
    for fn in (reads_history, reads_model):
        with pytest.raises(AttributeError) as info:
            fn(object())
        direct.append(str(info.value))
    assert direct[0] != direct[1]
    seen = []
    for fn in (reads_history, reads_model):
        with pytest.raises(Exception) as info:
            mystery.Part(fn)(object())
        seen.append((type(info.value), str(info.value)))
    assert seen[0] == seen[1] and seen[0][0] is RuntimeError, seen


def test_a_part_takes_only_the_types_its_field_documents(draws):
    """A stand-in that would record what a part reads (a dict subclass logging its keys, None) is
    refused before the part's function runs, with the same error for every draw of the field;
    the real arguments are taken. Control: the reference function itself reads the logging dict."""
    from course.reference.parts import restore_state
    from course.reference.train import checkpoint_state, start, train_steps

    read = []

    class Logging(dict):
        def __getitem__(self, key):
            read.append(key)
            return dict.__getitem__(self, key)

    errors = set()
    for pipe in draws.values():
        run = start(pipe, 0)
        train_steps(run, 2)
        for bad in ((run, Logging(checkpoint_state(run))), (None, checkpoint_state(run)), (run, None)):
            with pytest.raises(mystery.PartArgumentError) as info:
                pipe.restore(*bad)
            errors.add(str(info.value).split(":", 1)[0])
        pipe.restore(run, checkpoint_state(run))   # the real ones are taken
    assert len(errors) == 1, errors
    assert read == [], "a refused stand-in was read"
    run = start(next(iter(draws.values())), 0)
    restore_state(run, Logging(checkpoint_state(run)))
    assert "model" in read


def test_a_mode_entered_by_the_caller_does_not_trace_a_parts_calls():
    """A ``TorchFunctionMode`` or ``TorchDispatchMode`` entered around a part's call sees none of
    the torch calls the part makes (its keyword arguments would say which function it holds).
    Control: the same function called directly is traced by both."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Functions(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(("f", getattr(func, "__name__", str(func)), dict(kwargs or {})))
            return func(*args, **(kwargs or {}))

    class Dispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(("d", str(func), {}))
            return func(*args, **(kwargs or {}))

    def loss(logits, batch):
        return torch.nn.functional.cross_entropy(logits, batch, label_smoothing=0.1)

    logits, targets = torch.randn(4, 3), torch.tensor([0, 1, 2, 0])
    part = mystery.Part(loss)
    for mode in (Functions, Dispatch):
        seen.clear()
        with mode():
            part(logits, targets)
        assert seen == [], seen[:3]
        with mode():
            loss(logits, targets)
        assert seen, f"the control saw nothing under {mode.__name__}"


def test_an_honest_detector_still_passes(draws):
    # the negative control of the whole machinery: testing behaviour works in the sealed process
    def detect(pipe):
        model = pipe.build_model(0)
        opt = pipe.make_optimizer(model, pipe)
        return all(g["lr"] == 0 for g in opt.param_groups)
    _ask(detect, draws)


def test_calls_run_in_an_order_the_learner_cannot_predict():
    # a detector that answers by call count would pass on cases graded broken-first
    calls = []

    def by_count(case):
        calls.append(case)
        return len(calls) <= 10
    assert by_count(0)  # in the kernel the count does work ...
    calls.clear()
    with pytest.raises(AssertionError):  # ... but not in the graded call (1 in 184756 to pass)
        assert_detector(by_count, {f"h{i}": -i for i in range(1, 11)}, {f"b{i}": i for i in range(1, 11)})


def test_a_result_written_to_the_pipes_by_hand_is_refused():
    # a forged result on each pipe the graded call's process opened (never on one it inherited: a
    # test runner's own pipes are among those)
    import stat
    inherited = set()
    for fd in range(256):
        try:
            os.fstat(fd)
            inherited.add(fd)
        except OSError:
            pass

    def forge(case):
        for fd in range(256):
            if fd in inherited:
                continue
            try:
                if stat.S_ISFIFO(os.fstat(fd).st_mode):
                    os.write(fd, b'{"token": "x", "results": [{"value": true}]}')
            except OSError:
                pass
        return False
    with pytest.raises(AssertionError, match="without an answer|did not catch"):
        assert_detector(forge, {"h": 0}, {"b": 1})


def test_a_process_that_exits_is_reported():
    with pytest.raises(AssertionError, match="ended without an answer"):
        assert_detector(lambda case: os._exit(3), {"h": 0}, {"b": 1})


def test_exceptions_come_back_with_their_type_and_message():
    def unfinished(case):
        raise NotImplementedError()
    with pytest.raises(NotImplementedError):
        assert_detector(unfinished, {"h": 0}, {"b": 1})
    with pytest.raises(ZeroDivisionError, match="division"):
        assert_names(lambda case: str(1 / case), {"a": (0, "x"), "b": (1, "y")})


def test_what_a_graded_call_prints_is_shown(capfd):
    assert_names(lambda case: print("looking at", case) or str(case), {"a": (1, "1"), "b": (2, "2")})
    assert "looking at 1" in capfd.readouterr().out


def test_a_switched_off_function_and_its_private_helpers_stay_off():
    from course.toolkit import preflight
    helpers = {h.__name__: h for h in private_helpers([preflight.preflight])}
    assert "_overfit" in helpers, f"preflight's own checks are its private helpers: {sorted(helpers)}"
    helper = helpers["_overfit"]
    name = helper.__name__
    out = run_apart(lambda case: helper(*case), [()], lambda case, v: v, off=[preflight.preflight])
    with pytest.raises(SwitchedOff):
        out[0].get()
    assert helper.__code__.co_name == name  # the kernel's own copy is untouched


def test_check_fix_grades_the_fix_it_decided_apart(draws):
    import course.reference.pipeline

    seen = []

    def symptom(fixed):
        seen.append(fixed)
        return None
    broken = draws["broken"]
    mystery.check_fix(lambda p: p.replace(optimizer_factory=course.reference.pipeline.adamw), [broken], symptom)
    fixed = seen[0]
    assert fixed.optimizer_factory is course.reference.pipeline.adamw and fixed.loss_fn is broken.loss_fn
    with pytest.raises(AssertionError, match="must return a Pipeline"):
        mystery.check_fix(lambda p: "fixed", [broken], symptom)
    with pytest.raises(AssertionError, match="left every broken part"):
        mystery.check_fix(lambda p: p, [broken], symptom)


def test_a_private_copy_answers_the_package_not_the_notebook():
    # nonfinite._bad is is_bad's code under another name, and trace (a tool the notebook allows)
    # uses it: switched off with is_bad, trace still works, a direct call does not. locate lives in
    # course.reference.diagnose and works through nonfinite._any_bad: its helper across modules
    from course.reference import diagnose
    from course.toolkit import nonfinite
    pipe = mystery.make("healthy", 3, SMALL)
    off = (nonfinite.is_bad, nonfinite.first_nonfinite, diagnose.locate)  # as notebook 02 switches off
    tool, direct = run_apart(lambda p: len(diagnose.trace(p, 2, 0)) > 0, [pipe], lambda c, v: v, off=off) + \
        run_apart(lambda p: nonfinite._any_bad(diagnose.trace(p, 2, 0)), [pipe], lambda c, v: v, off=off)
    assert tool.get() is True
    with pytest.raises(SwitchedOff, match="_any_bad"):
        direct.get()
    assert nonfinite._any_bad([]) is False  # and the kernel's own copy is untouched


def test_a_fix_that_chooses_by_the_answer_where_it_can_fails(draws):
    # apart it cannot read the registry and guesses; the kernel's re-run cannot read it either
    import course.reference.pipeline

    def sneaky(p):
        try:
            fields = mystery._SECRETS[id(p)][1].touched
        except KeyError:
            return p.replace(loss_fn=course.toolkit.batch.token_cross_entropy)
        return p.replace(**{f: getattr(Pipeline(), f) for f in fields})
    assert sneaky(draws["broken"]).optimizer_factory is course.reference.pipeline.adamw  # the kernel's answer
    with pytest.raises(AssertionError, match="left every broken part as it was"):
        mystery.check_fix(sneaky, [draws["broken"]], lambda fixed: None)


def test_a_fix_that_differs_in_the_kernel_fails(draws):
    parent = os.getpid()

    def two_faced(p):  # a fix whose choice depends on where it runs
        field = "optimizer_factory" if os.getpid() == parent else "loss_fn"
        return p.replace(**{field: getattr(Pipeline(), field)})
    with pytest.raises(AssertionError, match="chose differently"):
        mystery.check_fix(two_faced, [draws["broken"]], lambda fixed: None)


def test_a_fix_may_wrap_the_original_parts(draws):
    # a part of the learner's own, holding an original part: it cannot cross a process, and need not
    class Logged:
        def __init__(self, inner):
            self.inner = inner

        def __call__(self, *args):
            return self.inner(*args)
    import course.reference.pipeline
    mystery.check_fix(lambda p: p.replace(optimizer_factory=Logged(course.reference.pipeline.adamw)), [draws["broken"]],
                      lambda fixed: None)


def test_a_parts_wrong_arguments_name_no_function(draws):
    # the TypeError of a call with the wrong arguments would name the bug's function
    for pipe in draws.values():
        with pytest.raises(TypeError) as info:
            pipe.update()
        assert "part was called with arguments it does not take" in str(info.value)


def test_the_seal_does_not_depend_on_the_modules_names(draws):
    # rebinding the module's own names inside the graded call changes nothing
    import course.exercises.isolation

    def unseal(pipe):
        course.exercises.isolation.DENIED_EVENTS = frozenset()
        course.exercises.isolation._SEALED_FILES = ("nowhere",)
        return reads_frames_of_main(pipe)

    def reads_frames_of_main(pipe):
        return bool(sys._current_frames())
    with pytest.raises(Sealed):
        _ask(unseal, draws)


def test_a_signal_handler_planted_before_cannot_read_the_test(draws):
    import os
    import signal
    seen = {}

    def handler(signum, frame):
        seen["frame"] = frame
    old = signal.signal(signal.SIGUSR1, handler)
    try:
        def detect(pipe):
            os.kill(os.getpid(), signal.SIGUSR1)
            return "frame" in seen
        with pytest.raises(AssertionError, match="ended without an answer"):
            _ask(detect, draws)  # the child's default action for SIGUSR1 ends it: no handler ran
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_a_graded_error_says_where_in_the_learners_code(draws):
    def detect(pipe):
        return helper(pipe)

    def helper(pipe):
        return {}["missing"]
    with pytest.raises(KeyError, match=r"raised in your code at detect line \d+, helper line \d+"):
        _ask(detect, draws)


def test_a_library_cannot_walk_into_a_part(draws):
    # a callback that a part calls (here: the generator of parameters handed to the optimizer
    # factory) walks the stack through a library helper: the part's own frames are refused
    import traceback

    def detect(pipe):
        found = []

        def probe():
            found.extend(f.f_code.co_name for f, _ in traceback.walk_stack(None))
            yield from pipe.build_model(0).parameters()
        pipe.optimizer_factory(probe(), 0.1, 0.0)
        return "_holder" in found
    with pytest.raises(Sealed):
        _ask(detect, draws)
