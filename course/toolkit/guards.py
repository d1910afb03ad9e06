"""Two guards for code that runs someone else's function: warnings that do not reach stderr, and
functions switched off for the length of a block.

* ``captured_warnings()``: every warning raised in the block is recorded, then printed once to
  stdout (a broken pipeline rightly makes torch warn; on stderr that would fail a graded cell).
* ``switched_off(*functions)``: inside the block each function raises ``SwitchedOff`` however it is
  reached (its module, its class, a reference saved earlier): its code object is swapped.

The course's grading (``course.exercises.grading``) is built on them; the lesson and reference
checks below it use ``captured_warnings`` when they train a pipeline that warns.
"""

from __future__ import annotations

import types
import warnings
from contextlib import contextmanager
from typing import Callable

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


def _functions(objs) -> list[types.FunctionType]:
    """Each of ``objs`` as ``_function`` gives it, followed by the functions of ``course`` it wraps:
    ``functools.wraps`` and ``torch.no_grad()`` leave the wrapped function under ``__wrapped__``, and
    switching off the wrapper alone left it one attribute away (red team 14: a generator that called
    ``course.reference.parts.generate.__wrapped__`` ran while ``generate`` was switched off). The
    attribute is read from the function's own ``__dict__`` and followed only to a plain function whose
    module is one of ``course`` (a library function a course function wraps stays on)."""
    out: list[types.FunctionType] = []
    for obj in objs:
        fn = _function(obj)
        while all(fn is not seen for seen in out):
            out.append(fn)
            inner = fn.__dict__.get("__wrapped__")
            module = inner.__globals__.get("__name__") if type(inner) is types.FunctionType else None
            if type(module) is not str or not (module == "course" or module.startswith("course.")):
                break
            fn = inner
    return out


@contextmanager
def switched_off(*functions: Callable):
    """Inside the block, each of ``functions`` (module functions or methods of a class) raises
    ``SwitchedOff`` when called, however it is reached: through its module, its class, or a
    reference saved earlier, and so does every function of ``course`` it wraps (``_functions``).
    Restored on exit, also after an error. A copy made earlier (``types.FunctionType(f.__code__,
    ...)``) is another function and is not switched off: the grading kernel and a graded call's
    process refuse to make such a copy of a ``course`` function (docs/grading-integrity.md)."""
    fns = _functions(functions)
    saved = [(fn, fn.__code__) for fn in fns]
    try:
        for fn in fns:
            fn.__code__ = _raiser(fn)
        yield
    finally:
        for fn, code in saved:
            fn.__code__ = code
