"""Helpers the notebooks' test cells use to grade a learner's work.

The contract every graded exercise follows (README, "The exercise standard"):

* **A detector is graded like a test suite** (``assert_detector``): quiet on every healthy case,
  firing on every broken one, in the same cell, so an answer that always (or never) fires scores 0.
* **A check rejects by raising one of the exceptions its specification names** (``fires``, default
  ``ValueError`` and ``AssertionError``). Any other exception is a crash, not a rejection: the test
  fails and says so, instead of crediting a check that fell over on an input it did not expect.
* **The package function that would solve an exercise is switched off** while the learner's code
  runs (``switched_off``). It swaps the function's code object, so a reference kept in the solution
  cell (``_orig = f``) is switched off too.
* **A warning never costs points.** nbgrader scores a test cell with any stderr output 0; every call
  of learner code here runs under ``captured_warnings``, which prints each warning to stdout (so the
  feedback still shows it) instead of stderr.

What these cannot stop: learner code runs in the same interpreter, so code written to undo them (for
example, rebuilding a function from a code object copied before the test ran) is not prevented. The
grading sandbox (``autograder/``) and the reviewer's eyes are the other layers.
"""

from __future__ import annotations

import types
import warnings
from contextlib import contextmanager
from typing import Callable, Iterable

REJECTIONS: tuple[type[BaseException], ...] = (ValueError, AssertionError)


class SwitchedOff(RuntimeError):
    """Raised by a package function while it is switched off for grading."""


@contextmanager
def captured_warnings():
    """Run the block with every warning recorded, then print each one to stdout.

    A broken pipeline rightly makes torch warn (a scheduler stepped without an optimizer step, a
    tensor copied with ``torch.tensor``); on stderr that warning would cost the learner the cell.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught
    seen = set()
    for w in caught:
        line = f"{w.category.__name__}: {w.message}"
        if line not in seen:
            seen.add(line)
            print(f"[warning, not counted against you] {line}")


# The old name: notebooks written before ``captured_warnings`` call it ``quiet``.
quiet = captured_warnings


def fires(check: Callable, *args, rejects: tuple[type[BaseException], ...] = REJECTIONS, **kwargs) -> bool:
    """True if ``check(*args, **kwargs)`` rejects its input (raises one of ``rejects``), False if it
    returns normally.

    ``NotImplementedError`` propagates, so an unfinished exercise reports as unfinished. Any other
    exception is a crash and fails the test with a message naming it: a check that falls over on an
    input is not a check that caught something.
    """
    try:
        check(*args, **kwargs)
    except NotImplementedError:
        raise
    except rejects:
        return True
    except SwitchedOff:
        raise
    except Exception as err:
        accepted = " or ".join(e.__name__ for e in rejects)
        raise AssertionError(f"your check crashed with {type(err).__name__}: {err}. "
                             f"A rejection must raise {accepted}; fix the crash first") from None
    return False


def _raiser(fn: types.FunctionType) -> types.CodeType:
    """A code object that raises ``SwitchedOff`` and has exactly ``fn``'s free variables, so it can
    replace ``fn.__code__`` (Python requires the closure to match). It runs with ``fn``'s globals,
    so the exception class is placed there under a private name."""
    names = fn.__code__.co_freevars
    message = f"{fn.__module__}.{fn.__qualname__} is switched off while your answer is graded: write it yourself"
    src = "def _outer():\n"
    src += "".join(f"    {n} = None\n" for n in names)
    src += "    def _switched_off(*args, **kwargs):\n"
    if names:
        src += f"        ({', '.join(names)},)\n"
    src += f"        raise _course_grading_SwitchedOff({message!r})\n"
    src += "    return _switched_off\n"
    scope: dict = {}
    exec(src, scope)
    fn.__globals__["_course_grading_SwitchedOff"] = SwitchedOff
    return scope["_outer"]().__code__


def _function(obj) -> types.FunctionType:
    fn = getattr(obj, "__func__", obj)
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"can only switch off Python functions, not {obj!r}")
    return fn


@contextmanager
def switched_off(*functions: Callable):
    """Inside the block, each of ``functions`` (module functions or methods of a class) raises
    ``SwitchedOff`` when called, however it is reached: through its module, its class, or a
    reference saved earlier. Restored on exit, also after an error."""
    fns = [_function(f) for f in functions]
    saved = [(fn, fn.__code__) for fn in fns]
    try:
        for fn in fns:
            fn.__code__ = _raiser(fn)
        yield
    finally:
        for fn, code in saved:
            fn.__code__ = code


def assert_detector(detect: Callable[[object], bool], healthy: dict[str, object], broken: dict[str, object],
                    what: str = "detector", off: Iterable[Callable] = ()) -> None:
    """Fail, naming every misclassified case, unless ``detect`` is False on all healthy cases and
    True on all broken ones. Both dicts must be non-empty, so a constant answer cannot pass.
    ``detect`` must return a bool (``True``/``False``, numpy and torch bools included). The package
    functions in ``off`` are switched off while it runs."""
    if not healthy or not broken:
        raise ValueError("a detector is graded on healthy and broken cases together")
    with captured_warnings(), switched_off(*off):
        missed = [name for name, case in broken.items() if not _as_bool(detect(case), what)]
        false_alarms = [name for name, case in healthy.items() if _as_bool(detect(case), what)]
    problems = []
    if missed:
        problems.append(f"your {what} did not catch: {', '.join(missed)}")
    if false_alarms:
        problems.append(f"your {what} raised a false alarm on healthy cases: {', '.join(false_alarms)}")
    assert not problems, "; ".join(problems)


def _as_bool(value, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if type(value).__name__ in ("bool_", "bool") or (hasattr(value, "dtype") and getattr(value, "numel", lambda: 0)() == 1
                                                       and "bool" in str(value.dtype)):
        return bool(value)
    raise AssertionError(f"your {what} must return True or False, not {value!r}")


def assert_names(name: Callable[[object], str], cases: dict[str, tuple[object, str]], what: str = "diagnosis",
                 off: Iterable[Callable] = (), show_expected: bool = False) -> None:
    """Fail unless ``name(case) == expected`` for every ``(case, expected)``; the message lists each
    miss with the learner's answer. The expected answer is shown only with ``show_expected`` (the
    feedback reaches the learner: a mystery's answer, hidden draws' above all, must not). The cases
    must hold at least two different answers, so a constant cannot pass. The package functions in
    ``off`` are switched off while ``name`` runs."""
    assert len({e for _, e in cases.values()}) > 1, "grade a namer on cases with different answers"
    wrong = []
    with captured_warnings(), switched_off(*off):
        for label, (case, expected) in cases.items():
            got = name(case)
            if got != expected:
                wrong.append(f"{label}: expected {expected!r}, got {got!r}" if show_expected
                             else f"{label}: you answered {got!r}")
    assert not wrong, f"your {what} named some cases wrongly: " + "; ".join(wrong)
