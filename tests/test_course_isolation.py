"""course.exercises.isolation: a graded call runs where the answer does not exist, and only data comes back.

Each route a work-free answer has taken to a mystery's answer gets a test that the route is closed
in a graded call, beside a control that the same code reaches the answer in the kernel itself (so
the test would fail if the route were open)."""
import gc
import os
import sys

import pytest
import torch

from course import Pipeline
from course.exercises import mystery
from course.exercises.grading import SwitchedOff, assert_detector, assert_names
from course.exercises.isolation import Sealed, private_helpers, run_apart

SMALL = Pipeline().replace(steps=5, n_train=256, n_val=64)


@pytest.fixture(scope="module")
def draws():
    return {"healthy": mystery.make("healthy", 1, SMALL), "broken": mystery.make("lr-zero", 2, SMALL)}


def mystery_falls(fixed):
    """A symptom: the fixed pipeline's loss falls in a few steps (``training_moves``)."""
    from course.reference.diagnose import training_moves
    return training_moves(fixed, seed=3, steps=12, window=4)


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
    with pytest.raises(TypeError, match="unsupported operand"):  # the type the grader's own checks raise too
        assert_names(lambda case: str(case + "x"), {"a": (0, "x"), "b": (1, "y")})
    with pytest.raises(RuntimeError, match="UnicodeDecodeError"):  # one that takes other arguments
        assert_names(lambda case: b"\xff".decode(), {"a": (0, "x"), "b": (1, "y")})


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


def test_a_switched_off_wrapper_stops_the_course_function_it_wraps_apart():
    """In a graded call's process too, ``generate.__wrapped__`` (the function ``torch.no_grad()``
    wraps) is off with ``generate`` (red team 14). Control: the kernel's copy runs (and fails on None)."""
    from course.reference import parts
    out = run_apart(lambda case: parts.generate.__wrapped__(None, None, 1), [()], lambda case, v: v,
                    off=[parts.generate])
    with pytest.raises(SwitchedOff):
        out[0].get()
    with pytest.raises(AttributeError):
        parts.generate.__wrapped__(None, None, 1)


def test_a_graded_call_cannot_read_the_tests_secret():
    """The grader's secret of the running test is in ``course.toolkit.salts`` while the test runs; the
    hidden draws were mixed with it in the kernel, so the graded call's process empties the box before
    the learner's function runs (red team, run 12: a detector read it there and rebuilt every hidden
    draw from the test cells in the repository). Control: the same function in the kernel reads it."""
    from course.toolkit import salts
    secret = "the-test-" + "secret-31c7"
    salts.CURRENT[:] = [secret]
    try:
        peek = lambda case: salts.CURRENT[0]  # noqa: E731
        [apart] = run_apart(peek, [()], lambda case, v: v)
        assert peek(()) == secret, "control: the kernel's own box holds the secret"
        assert apart.get() == "", f"the graded call read the test's secret: {apart.get()!r}"
        assert salts.CURRENT == [secret], "the kernel's box is the kernel's: the test goes on with it"
        draw = mystery.hidden("healthy", 3, salt="h-x")
        assert draw.salt.endswith(secret), "a hidden draw made in the kernel carries the mixed salt"
    finally:
        salts.CURRENT[:] = [""]


def test_check_fix_trains_the_pipeline_the_fix_decided_and_reports_what_the_symptom_found(draws):
    """The symptom trains, in the graded call's process, a plain ``Pipeline`` made of the fields the
    fix returned: the replaced part, and the draw's own objects everywhere else. What it finds fails
    the draw with its words; a fix that returns no ``Pipeline`` or changes nothing fails first."""
    import course.reference.pipeline

    broken, parent = draws["broken"], os.getpid()

    def symptom(fixed):
        ours = (type(fixed) is Pipeline and fixed.optimizer_factory is course.reference.pipeline.adamw
                and fixed.loss_fn is broken.loss_fn and os.getpid() != parent)
        return None if ours else f"trained something else, in process {os.getpid()}"
    right = lambda p: p.replace(optimizer_factory=course.reference.pipeline.adamw)  # noqa: E731
    mystery.check_fix(right, [broken], symptom)
    with pytest.raises(AssertionError, match="draw 0: the symptom's words"):
        mystery.check_fix(right, [broken], lambda fixed: "the symptom's words")
    with pytest.raises(AssertionError, match="must return a Pipeline"):
        mystery.check_fix(lambda p: "fixed", [broken], symptom)
    with pytest.raises(AssertionError, match="left every broken part"):
        mystery.check_fix(lambda p: p, [broken], symptom)


def test_no_code_of_the_fix_runs_in_the_kernel(draws, tmp_path):
    """The fix and the symptom's training of its parts run only in the graded call's process, so
    nothing of the fix's runs where the test's answers are: a fix that is right there and wrong
    here passes, and neither it nor its part ever ran in this process. Control: called here, both
    write this process's id."""
    import course.reference.pipeline

    log, parent = tmp_path / "pids", os.getpid()

    def part(*args, **kwargs):
        with open(log, "a") as f:
            f.write(f"part {os.getpid()}\n")
        return course.reference.pipeline.adamw(*args, **kwargs)

    def two_faced(p):
        with open(log, "a") as f:
            f.write(f"fix {os.getpid()}\n")
        return p.replace(optimizer_factory=part) if os.getpid() != parent else p
    mystery.check_fix(two_faced, [draws["broken"]], mystery_falls)
    ran = log.read_text().split()
    assert "fix" in ran and "part" in ran and str(parent) not in ran, f"learner code ran in the kernel: {ran}"
    two_faced(draws["broken"])
    part([torch.nn.Parameter(torch.zeros(1))], 0.1, 0.0)
    assert f"fix {parent}" in log.read_text() and f"part {parent}" in log.read_text(), "control: here, both run here"


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
    # apart it cannot read the registry and guesses; the kernel's re-run could read it, too late:
    # what the fix changed is judged on its guess, before the re-run
    import course.reference.pipeline

    def sneaky(p):
        try:
            fields = mystery._SECRETS[id(p)][1].touched
        except KeyError:
            return p.replace(loss_fn=course.toolkit.batch.token_cross_entropy)
        return p.replace(**{f: getattr(Pipeline(), f) for f in fields})
    assert sneaky(draws["broken"]).optimizer_factory is course.reference.pipeline.adamw  # the kernel's answer
    with pytest.raises(AssertionError, match="the part 'loss_fn' was not broken"):
        mystery.check_fix(sneaky, [draws["broken"]], lambda fixed: None)


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
    messages = set()
    for pipe in draws.values():
        with pytest.raises(TypeError) as info:
            pipe.update()
        assert "0 positional arguments, not 1" in str(info.value)
        messages.add(str(info.value))
    assert len(messages) == 1, "every draw's part must refuse the same wrong call with the same words"


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


# ----- routes of a red team's pass on notebook 12 (issue 31): a part finished at the recursion
# limit, line numbers through a passed exception, a part's stack need, keywords and generators --

def _finish_at_the_recursion_limit(gen) -> bool:
    """Resume ``gen`` one or a few frames below the recursion limit, where CPython raises
    RecursionError as it enters the generator's frame: no handler of the generator's own runs, and
    the generator is finished. True once it is."""
    def resume_below(j):
        def deep(n):
            try:
                r = deep(n + 1)
            except RecursionError:
                r = j
            if r == 0:
                try:
                    gen.send(((0, 1), {}))
                except BaseException:  # noqa: BLE001
                    pass
            return r - 1
        deep(0)
    for j in range(8):
        resume_below(j)
        if not gen.gi_suspended and not gen.gi_running:
            return True
    return False


def _target(step, every):  # a function only one part holds: its reference count is the route
    return False


def _count_after_finishing(pipe):
    before = sys.getrefcount(_target)
    finished = _finish_at_the_recursion_limit(mystery._part_generator(pipe.eval_due))
    return [finished, sys.getrefcount(_target) - before]


def test_a_part_finished_at_the_recursion_limit_frees_nothing_in_a_graded_call():
    """A part's generator finished by a RecursionError as it resumes clears its frame, and the
    function's reference count drops: which function a part held would show in
    ``sys.getrefcount``. In a graded call the grader holds every part generator's frame
    (``mystery._keeper``), so the frame keeps its variables and no count changes. Control: the same
    code in the kernel, where nothing holds the frame, sees the count drop by one."""
    pipe = SMALL.replace(eval_due=mystery.Part(_target, "eval_due"))
    assert _count_after_finishing(pipe) == [True, -1], "control: the route must work where nothing holds the frame"
    pipe = SMALL.replace(eval_due=mystery.Part(_target, "eval_due"))
    [outcome] = run_apart(_count_after_finishing, [pipe], lambda case, value: value)
    assert outcome.error is None, outcome.error
    assert outcome.value == [True, 0], f"finished, change in the function's reference count: {outcome.value}"


def test_a_part_is_made_once():
    part = mystery.Part(_target, "eval_due")
    with pytest.raises(TypeError, match="made once"):
        part.__init__(len, "eval_due")  # would swap the function inside a drawn pipeline
    assert part(0, 1) is False


def _lines(tb) -> list:
    out = []
    while tb is not None:
        out.append(tb.tb_lineno)
        tb = tb.tb_next
    return out


def test_an_exception_that_passes_a_part_carries_no_line_of_it():
    """A learner's exception raised inside a part (a callback of theirs that the part's function
    calls) would read the part's line numbers off its traceback in an overridden
    ``with_traceback`` or in ``__del__``, and the lines name the function. Through a part, neither
    sees a traceback, and the caller gets a plain exception. Control: the same exception raised
    through the function called directly sees the function's line."""
    seen = []

    class Spy(NotImplementedError):
        def with_traceback(self, tb):
            seen.append(("with_traceback", _lines(tb)))
            return super().with_traceback(tb)

        def __del__(self):
            seen.append(("__del__", _lines(self.__traceback__)))

    class Quiet(Exception):
        def __del__(self):
            seen.append(("__del__", _lines(self.__traceback__)))

    def calls_back(callback):
        return callback()

    def raise_(kind):
        def callback():
            raise kind()
        return callback

    line = calls_back.__code__.co_firstlineno + 1
    for kind in (Spy, Quiet):
        seen.clear()
        try:
            calls_back(raise_(kind))
        except BaseException:  # noqa: BLE001
            pass
        assert any(line in lines for _, lines in seen), f"control: {kind.__name__} must see the line ({seen})"
    for kind, raised in ((Spy, NotImplementedError), (Quiet, RuntimeError)):
        seen.clear()
        with pytest.raises(BaseException) as info:
            mystery.Part(calls_back)(raise_(kind))
        assert type(info.value) is raised, type(info.value)
        del info
        gc.collect()
        assert all(lines == [] for _, lines in seen), f"{kind.__name__} read lines through the part: {seen}"


class _Recorder:
    """A stand-in that records every comparison made with it."""
    def __init__(self, log):
        self.log = log

    def __lt__(self, other):
        self.log.append("<")
        return False
    __gt__ = __le__ = __ge__ = __lt__

    def __radd__(self, other):
        self.log.append("+")
        return 1
    __add__ = __rmul__ = __mul__ = __rtruediv__ = __truediv__ = __radd__


def test_a_part_takes_its_arguments_by_position_and_only_its_keywords(draws):
    """A stand-in passed by keyword (``warmup=``) was not checked against the field, and recorded
    the comparisons the function made. Every call outside the field's positional arguments and
    documented keywords is refused, the same for every draw, before the function runs. Control:
    the reference schedule called directly records them."""
    from course.reference.pipeline import warmup_then_linear

    log = []
    warmup_then_linear(0, warmup=_Recorder(log), total=10)
    assert log, "control: the reference function reads the stand-in"
    log.clear()
    messages = set()
    for pipe in draws.values():
        for args, kwargs in (((0,), {"warmup": _Recorder(log), "total": 10}),
                             ((0, 5), {"total": 10}),
                             ((0, 5, 10, 1), {})):
            with pytest.raises(mystery.PartArgumentError) as info:
                pipe.schedule(*args, **kwargs)
            messages.add(str(info.value).split(":", 1)[0])
        assert pipe.schedule(0, 5, 10) > 0  # by position, as the pipeline calls it
    assert log == [] and len(messages) == 1, (log, messages)


def test_a_generator_of_parameters_is_read_before_the_function_runs():
    """A learner's generator passed as ``params`` would see how far and when the function reads it.
    The part reads it into a list first: the function gets the list. Control: called directly, the
    function gets the generator and reads it itself."""
    import torch

    events = []

    def factory(params, lr, weight_decay):
        events.append(("function starts", type(params).__name__))
        return torch.optim.SGD(params, lr=lr)

    def parameters():
        for _ in range(3):
            events.append("yield")
            yield torch.nn.Parameter(torch.zeros(1))

    factory(parameters(), 0.1, 0.0)
    assert events[0] == ("function starts", "generator"), events
    events.clear()
    mystery.Part(factory, "optimizer_factory")(parameters(), 0.1, 0.0)
    assert events == ["yield"] * 3 + [("function starts", "list")], events


def _at_stack_left(frames, fn):
    """``fn()`` called with about ``frames`` frames left before the recursion limit."""
    depth, f = 0, sys._getframe()
    while f is not None:
        depth, f = depth + 1, f.f_back
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + frames)
    try:
        return fn()
    except RecursionError as err:
        return err
    finally:
        sys.setrecursionlimit(limit)


def test_a_parts_stack_need_does_not_show():
    """Called with little stack left, a function that recurses deeper fails where a shallow one
    works, so where a part starts failing would name its function. A part refuses any call with
    less than ``PART_STACK`` frames left, the same way for every function, and with that much left
    every function of a draw runs (the next test)."""
    def deep(n=40):
        return 0 if n == 0 else deep(n - 1)

    def shallow(n=40):
        return 0

    direct = [type(_at_stack_left(30, f)).__name__ for f in (deep, shallow)]
    assert direct == ["RecursionError", "int"], f"control: {direct}"
    through = [_at_stack_left(30, mystery.Part(f)) for f in (deep, shallow)]
    assert all(type(e) is RecursionError for e in through), through
    assert str(through[0]) == str(through[1]) and "frames of stack" in str(through[0])
    assert [mystery.Part(f)() for f in (deep, shallow)] == [0, 0]


def test_every_draw_runs_well_within_a_parts_stack():
    """``PART_STACK`` must exceed what any function of any draw needs, or the refusal would itself
    tell functions apart: a training run of every drawable bug, profiled, never goes more than half
    of it below a part's frame (the deepest, about 180 frames, is the first run's lazy imports of
    torch's optimizer machinery inside a part)."""
    from course.reference.train import train
    from course.bugs import catalogue

    deepest = {}

    def measure(name):
        most = [0]

        def profile(frame, event, arg):
            if event != "call":
                return
            n, f = 0, frame
            while f is not None and f.f_code is not mystery._HOLDER_CODE:
                n, f = n + 1, f.f_back
            if f is not None and n > most[0]:
                most[0] = n
        pipe = mystery.make(name, 0, SMALL.replace(steps=2))
        sys.setprofile(profile)
        try:
            train(pipe)
        except RuntimeError:
            pass  # a bug that crashes the run (float-targets): its depth up to the crash counts
        finally:
            sys.setprofile(None)
        return most[0]

    for bug in catalogue():
        try:
            deepest[bug.name] = measure(bug.name)
        except mystery.NotOpaque:
            pass
    assert max(deepest.values()) < mystery.PART_STACK // 2, sorted(deepest.items(), key=lambda kv: -kv[1])[:5]
    print("deepest below a part:", sorted(deepest.items(), key=lambda kv: -kv[1])[:3], "of", len(deepest), "bugs")
    assert min(deepest.values()) > 0, "control: the profile must see frames below a part"


# ----- learner code the kernel runs during a test: it may read the answers, too late to change one --
class _RewritingStream:
    """A stdout planted before the test (red team, run 6): on each write it walks up to
    ``run_apart`` and tries to replace the graded call's reply (``chunks``) or its result with the
    right answers, read from the caller's labels."""

    def __init__(self, real):
        self.real, self.reached = real, []

    def write(self, text):
        import json
        f = sys._getframe(1)
        while f is not None and f.f_code.co_name != "run_apart":
            f = f.f_back
        if f is not None:
            here, caller = f.f_locals, f.f_back.f_locals
            self.reached.append(sorted(here))
            right = [bad for _, bad in caller.get("labels", [])]
            for name in ("chunks", "outcomes", "message"):
                if isinstance(here.get(name), list):
                    here[name][:] = [json.dumps({"token": here["token"],
                                                 "results": [{"value": v} for v in right]}).encode()]
        return self.real.write(text)

    def flush(self):
        return self.real.flush()


def test_a_stream_planted_before_the_test_cannot_rewrite_a_graded_answer(draws, monkeypatch):
    spy = _RewritingStream(sys.stdout)
    monkeypatch.setattr(sys, "stdout", spy)

    def says_healthy(pipe):
        print(".")  # the child's output is echoed in the kernel, through the planted stream
        return False
    with pytest.raises(AssertionError, match="did not catch: a broken draw"):
        _ask(says_healthy, draws)
    assert spy.reached and "token" in spy.reached[0], "control: the stream ran on run_apart's frame"


def test_a_fixs_parts_are_trained_where_no_frame_can_be_read(draws, tmp_path):
    """The symptom trains the fix's parts on a thread of their own whose first frame is in a sealed
    file: a part that asks for each frame above it, at every depth (where the kernel's re-run found
    ``check_fix``'s, with each draw's touched fields, and where the graded call's main thread keeps
    its reply's token), gets none. Control: the same part called here reads the frames above it."""
    import course.reference.pipeline

    log = tmp_path / "frames"

    def looks_up(*args, **kwargs):
        names = []
        for depth in range(1, 200):
            try:
                names.extend(sys._getframe(depth).f_locals)  # what a frame's variables are called
            except (Sealed, ValueError):
                pass
        with open(log, "a") as f:
            f.write(" ".join(names) + "\n")
        return course.reference.pipeline.adamw(*args, **kwargs)
    mystery.check_fix(lambda p: p.replace(optimizer_factory=looks_up), [draws["broken"]], mystery_falls)
    assert log.read_text() == "\n", f"a part read frames while trained: {log.read_text()}"
    looks_up([torch.nn.Parameter(torch.zeros(1))], 0.1, 0.0)
    assert "log" in log.read_text().splitlines()[-1].split(), "control: here the part reads the frames above it"


def test_a_copy_of_a_switched_off_function_made_apart_is_refused():
    """``types.FunctionType(f.__code__, ...)`` makes a function that ``off=`` never touched (red
    team, this stop). Made inside the graded call, the copy is refused; the package's own gates
    (copies it makes of private helpers) still work. Control: the same copy in the kernel runs."""
    import types
    from course.toolkit import preflight

    code = preflight.preflight.__code__  # read before the call: apart, __code__ is the switch's own

    def copy_of(f):
        return types.FunctionType(code, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    out = run_apart(lambda case: copy_of(preflight.preflight) is not None, [()], lambda case, v: v,
                    off=[preflight.preflight])
    with pytest.raises(Sealed, match="copying a function of the course package"):
        out[0].get()
    assert copy_of(preflight.preflight) is not None  # the kernel: no seal there


class _Sneaky(str):
    """A path or a file name whose ``startswith`` tries to walk the garbage collector."""

    def startswith(self, *args):
        _sneak("str.startswith")
        return str.startswith(self, *args)


def _sneak(where):
    try:
        gc.get_objects()
        _SNEAKED.append(f"{where}: the collector answered")
    except Sealed:
        _SNEAKED.append(f"{where}: refused")


_SNEAKED: list = []


def _code_inside_the_hook(case):
    """Three ways to get code of one's own run by the audit hook itself, where its checks are
    suspended (red team and reviewer, 2026-12-07): a rebound builtin the hook called (``len``), a
    rebound ``posixpath`` function it called to resolve an opened path, and a file name of a ``str``
    subclass whose methods it called. Returns what each route reached."""
    import builtins
    import posixpath
    import types

    _SNEAKED.clear()
    real_len, real_isabs = builtins.len, posixpath.isabs
    builtins.len = lambda x: (_sneak("builtins.len"), real_len(x))[1]
    posixpath.isabs = lambda p: (_sneak("posixpath.isabs"), real_isabs(p))[1]
    try:
        try:
            raise ValueError
        except ValueError as err:
            try:
                err.__traceback__.tb_frame  # an audited read: the hook looks at its arguments
            except Sealed:
                pass
        open(os.devnull).close()  # an audited open: the hook resolves the path
    finally:
        builtins.len, posixpath.isabs = real_len, real_isabs
    code = compile("def f():\n    import sys\n    return sys._getframe(0)\n", _Sneaky("/nowhere/sneaky.py"), "exec")
    scope: dict = {}
    exec(code, scope)
    try:
        scope["f"]()  # the hook reads the frame's file name
    except Sealed:
        pass
    types.FunctionType((lambda: 0).__code__.replace(co_filename=_Sneaky("/nowhere/y.py")), {})
    return list(_SNEAKED)


def test_no_code_of_the_learners_runs_inside_the_seals_hook():
    """The seal's audit hook suspends its own checks while it runs, so it must run nothing of
    anyone else's: a rebound builtin or ``posixpath`` function, or a method of a ``str`` subclass
    handed to it, never runs there. (Each did before 2026-12-07, and walked the garbage collector
    inside a graded call.) Control: outside the hook, the same code is refused by the seal."""
    reached = run_apart(_code_inside_the_hook, [0], lambda case, value: value)[0].get()
    assert not any("answered" in r for r in reached), f"code ran inside the seal's hook: {reached}"
    check = run_apart(lambda case: (_sneak("a call"), list(_SNEAKED))[1], [0], lambda case, value: value)[0].get()
    assert check == ["a call: refused"], "control: the seal refuses the collector to the same code"


def _plants_a_main_thread_finalizer(log):
    """A graded call that gets its finalizer run on the child's main thread after the calls (a
    reviewer's probe, 2026-12-07): the child flushes the output stream, whose buffer the call
    replaced with one that makes cyclic garbage after the collector was frozen and waits, so the
    main thread collects it. The finalizer tries to read the frames there (the reply's token)."""
    import io
    import threading
    import time
    import _thread

    def call(case):
        main = threading.main_thread().ident

        class Garbage:
            def __del__(self):
                if _thread.get_ident() != main:
                    return
                try:
                    sys._getframe(1)
                    outcome = "read a frame"
                except Sealed:
                    outcome = "refused"
                with open(log, "a") as f:
                    f.write(f"main thread: {outcome}\n")

        class Buffer(io.RawIOBase):
            def writable(self):
                return True

            def write(self, b):
                return len(b)

            def flush(self):
                for _ in range(50):
                    g = Garbage()
                    g.cycle = g
                del g
                gc.set_threshold(1)
                time.sleep(2.5)
        io.TextIOWrapper.__init__(sys.stdout, Buffer())
        return "honest"
    return call


def test_code_on_the_graded_calls_main_thread_reads_no_frame(tmp_path):
    """Once the calls have begun, no frame can be read on the graded call's main thread, whose
    frames hold the reply's token: a finalizer of the call's that runs there is refused, and the
    reply is the call's own. A reply for fewer cases than were given is refused in the kernel (a
    forged one with none had passed a constant detector). Control: here the same read succeeds."""
    log = tmp_path / "main"
    got = run_apart(_plants_a_main_thread_finalizer(log), [0], lambda case, value: value)
    assert [o.get() for o in got] == ["honest"]
    ran = log.read_text().splitlines()
    assert ran and set(ran) == {"main thread: refused"}, f"the finalizer on the main thread: {ran}"
    assert sys._getframe(0) is not None  # control: no seal here

    def forges(case):  # the reply a forger would write: the right token, no results
        return case
    from course.exercises import isolation
    real = isolation._loads
    try:
        isolation._loads = lambda text: dict(real(text), results=[])
        with pytest.raises(AssertionError, match="another number of cases"):
            run_apart(forges, [0, 1], lambda case, value: value)
    finally:
        isolation._loads = real


def _dumps_the_stack(case):
    import faulthandler
    import tempfile
    import tracemalloc
    out = []
    with tempfile.TemporaryFile() as f:
        for name, call in (("faulthandler", lambda: faulthandler.dump_traceback(f, all_threads=True)),
                           ("tracemalloc", lambda: tracemalloc.start(25))):
            try:
                call()
                out.append(f"{name}: ran")
            except Sealed:
                out.append(f"{name}: refused")
    return out


def test_a_graded_call_cannot_dump_its_stack():
    """``faulthandler`` writes every frame's file, line and function (inside a part, the bug's) with
    no audit event, and ``tracemalloc`` keeps them for each allocation: a red team read 04's and
    12's answers from such dumps (2026-12-07). In a graded call both are refused. Control: here
    both run."""
    assert run_apart(_dumps_the_stack, [0], lambda case, value: value)[0].get() == \
        ["faulthandler: refused", "tracemalloc: refused"]
    import tracemalloc
    try:
        assert _dumps_the_stack(0) == ["faulthandler: ran", "tracemalloc: ran"], "control: here they run"
    finally:
        tracemalloc.stop()


def _calls_a_part_beside_a_thread(case, join_first=False):
    import threading
    stop = threading.Event()
    watcher = threading.Thread(target=stop.wait, daemon=True)
    watcher.start()
    if join_first:
        stop.set()
        watcher.join()
    try:
        case.schedule(0, 10, 100)
        outcome = "ran"
    except Sealed as err:
        outcome = "refused: " + str(err)
    stop.set()
    watcher.join()
    return outcome


def _starts_a_thread_from_its_parameters(case):
    """The thread starts inside the part, as it reads the caller's generator of parameters."""
    import threading
    stop, started = threading.Event(), []

    def params():
        watcher = threading.Thread(target=stop.wait, daemon=True)
        watcher.start()
        started.append(watcher)
        yield torch.nn.Parameter(torch.zeros(2))
    try:
        case.optimizer_factory(params(), 0.01, 0.0)
        outcome = "ran"
    except Sealed as err:
        outcome = "refused: " + str(err)
    stop.set()
    for t in started:
        t.join()
    return outcome


def test_no_part_runs_beside_another_thread_of_the_learners(draws):
    """A thread of the learner's own, alive while a part runs, can poll ``sys.getrefcount`` of the
    catalogue's functions and see which one the part runs (a red team scored 12's hidden detect,
    name and fix cells so, 2026-12-07). In a graded call a part refuses to run while any thread but
    the calling one is alive. Controls: the same thread joined before the call, and the same code
    outside a graded call, run the part."""
    beside = run_apart(_calls_a_part_beside_a_thread, [draws["broken"]], lambda case, value: value)[0].get()
    assert beside.startswith("refused: a mystery part does not run while another thread"), beside
    joined = run_apart(lambda case: _calls_a_part_beside_a_thread(case, join_first=True), [draws["broken"]],
                       lambda case, value: value)[0].get()
    assert joined == "ran", joined
    assert _calls_a_part_beside_a_thread(draws["broken"]) == "ran", "control: outside a graded call it runs"
    # a thread started by the caller's own code inside the part (its generator of parameters, read
    # before the function runs) is alive when the function would start: refused too (a reviewer's
    # probe, 2026-12-08, when the rule was checked before the arguments were read)
    inside = run_apart(_starts_a_thread_from_its_parameters, [draws["broken"]], lambda case, value: value)[0].get()
    assert inside.startswith("refused: a mystery part does not run while another thread"), inside


def _what_a_part_lets_out(case, rebind=True, holder=None):
    """A part called with arguments its field refuses, after rebinding the names its code uses:
    the error's type and how many frames its traceback holds."""
    import builtins
    saved = {n: getattr(mystery, n) for n in ("_withheld", "_scrub", "_check_arguments", "_stack_left")}
    saved_type, saved_isinstance, saved_any = builtins.type, builtins.isinstance, builtins.any
    if rebind:
        mystery._withheld = lambda err: err
        mystery._scrub = lambda err: None
        mystery._check_arguments = lambda contract, args, kwargs: args
        mystery._stack_left = lambda frames=0: True
    try:
        part = case.schedule if holder is None else holder
        if rebind:  # and two builtins the part's own code uses on what it passes
            builtins.isinstance, builtins.any = (lambda obj, kind: True), (lambda items: False)
        try:
            part("x", "y", "z")
        finally:
            builtins.isinstance, builtins.any = saved_isinstance, saved_any
        return ["no error"]
    except BaseException as err:  # noqa: BLE001
        frames, tb = 0, err.__traceback__
        while tb is not None:
            frames, tb = frames + 1, tb.tb_next
        return [saved_type(err).__name__, frames]
    finally:
        for name, value in saved.items():
            setattr(mystery, name, value)


def test_rebinding_the_modules_names_changes_nothing_a_part_does(draws):
    """A part's own rules (its arguments' contract, its stack rule, dropping the traceback of what
    it passes) run on a private copy of ``course.exercises.mystery``'s globals made with the part:
    rebinding ``mystery._withheld`` in a graded call once let a part's traceback out, whose line
    numbers say which function it holds (found 2026-12-08). Control: a holder run on the module's
    own globals (``mystery._holder`` called directly) does change, in the same call."""
    plain = run_apart(lambda case: _what_a_part_lets_out(case, rebind=False), [draws["broken"]],
                      lambda case, value: value)[0].get()
    rebound = run_apart(_what_a_part_lets_out, [draws["broken"]], lambda case, value: value)[0].get()
    assert plain[0] == "PartArgumentError" and rebound == plain, (plain, rebound)

    def on_module_globals(case):
        def inside(step, warmup, total):
            raise ValueError(step)
        gen = mystery._holder(inside, lambda: None, mystery._contract("schedule"))
        next(gen)

        def part(*args):
            ok, value = gen.send((args, {}))
            if ok:
                return value
            raise value
        return _what_a_part_lets_out(case, holder=part)
    control = run_apart(on_module_globals, [draws["broken"]], lambda case, value: value)[0].get()
    assert control[0] == "ValueError" and control[1] > plain[1], control


def _original_of(fn):
    """What a notebook could keep of a package function before a test switches it off."""
    import types as _t
    return _t.SimpleNamespace(__code__=fn.__code__, __name__=fn.__name__, __defaults__=fn.__defaults__,
                              __closure__=fn.__closure__, __kwdefaults__=fn.__kwdefaults__)


def _copies_through_the_parts_copier(case, kept):
    """A course function that the test switched off, copied from its kept code through the copier a
    part uses."""
    import builtins as _b
    try:
        made = mystery._private_globals(template=(("f", kept),), builtin_template=tuple(vars(_b).items()),
                                        path=("f",))["f"]
        return "copied: " + type(made).__name__
    except Sealed as err:
        return "refused: " + str(err)


def test_the_parts_copier_copies_only_the_parts_own_code(draws):
    """A part copies its own code into each part it makes (``mystery._private_globals``); the seal
    and the grading kernel's guard let anyone copy exactly that code (``mystery._HOLDER_CODES``),
    and refuse a copy of any other function of the package, through the copier too: a reviewer
    copied a switched-off function that way when they trusted the copier by name (2026-12-08).
    Control: the copier's own use (a part made in the call) works."""
    from course.lessons import instability
    kept = _original_of(instability.problems)
    refused = run_apart(lambda case: _copies_through_the_parts_copier(case, kept), [draws["broken"]],
                        lambda case, value: value, off=(instability.problems,))[0].get()
    assert refused.startswith("refused: copying a function of the course package"), refused
    made = run_apart(lambda case: type(mystery.Part(lambda x: x, None)).__name__, [draws["broken"]],
                     lambda case, value: value)[0].get()
    assert made == "Part", made
