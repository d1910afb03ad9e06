"""Helpers the notebooks' test cells use to grade a learner's work.

The contract every graded exercise follows (docs/authors.md, "The exercise standard"):

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

* **A graded call runs apart** (``course.exercises.isolation.run_apart``): ``assert_detector``,
  ``assert_names`` and ``course.exercises.mystery.check_fix`` call the learner's function in a forked, sealed
  process that holds no answer, and get back only plain data.

What these cannot stop: code outside a graded call runs in the kernel itself, so code written to undo
them (for example, rebuilding a function from a code object copied before the test ran) is not
prevented here. The grading sandbox (``autograder/``: its guard refuses a copy of a ``course``
function, not one rebuilt under another file name) and the reviewer's eyes are the other layers.
"""

from __future__ import annotations

import hashlib
import types
import warnings
from contextlib import contextmanager
from typing import Callable, Iterable

import torch

from ..toolkit.guards import SwitchedOff, _function, _raiser, captured_warnings, switched_off  # noqa: F401
from ..toolkit.salts import mixed as _mixed
from .isolation import run_apart

REJECTIONS: tuple[type[BaseException], ...] = (ValueError, AssertionError)


def hidden_seed(salt: str) -> int:
    """The seed of a hidden test's own inputs (a random batch, a sequence, a value): ``salt`` mixed
    with the grader's secret of the running test (``course.toolkit.salts.mixed``), hashed to an int
    in ``[0, 2**63)`` that ``random.Random`` and ``torch.Generator.manual_seed`` both take.

    Outside grading, or in a course without a key, the secret is empty and the seed is the salt's
    own, the same on every run: the notebook's outputs and nbval see the inputs the text describes.
    Graded under a course key, each test cell draws inputs the repository's text does not give, so
    an answer that looks its input up in a table made from that text finds nothing. A test must
    pass the reference on every seed (the expected values come from a reference, not a literal).
    """
    if type(salt) is not str or not salt:
        raise ValueError("hidden_seed needs a non-empty salt, written in the test cell")
    return int.from_bytes(hashlib.sha256(_mixed(salt).encode()).digest()[:8], "big") >> 1


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


def assert_detector(detect: Callable[[object], bool], healthy: dict[str, object], broken: dict[str, object],
                    what: str = "detector", off: Iterable[Callable] = ()) -> None:
    """Fail, naming every misclassified case, unless ``detect`` is False on all healthy cases and
    True on all broken ones. Both dicts must be non-empty, so a constant answer cannot pass.
    ``detect`` must return a bool (``True``/``False``, numpy and torch bools included). It runs
    apart, where no answer exists (``course.exercises.isolation.run_apart``), with the package functions in
    ``off`` and their private helpers switched off; the first exception it raised (broken cases
    first, then healthy ones, each in their dict's order) is raised here again."""
    if not healthy or not broken:
        raise ValueError("a detector is graded on healthy and broken cases together")
    labels = [(name, True) for name in broken] + [(name, False) for name in healthy]
    cases = list(broken.values()) + list(healthy.values())
    outcomes = run_apart(detect, cases, lambda case, value: _as_bool(value, what), off=off)
    said = [o.get() for o in outcomes]
    missed = [name for (name, bad), fired in zip(labels, said) if bad and not fired]
    false_alarms = [name for (name, bad), fired in zip(labels, said) if not bad and fired]
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
    must hold at least two different answers, so a constant cannot pass. ``name`` runs apart, where
    no answer exists (``course.exercises.isolation.run_apart``), with the package functions in ``off`` and
    their private helpers switched off; only the strings it returned come back."""
    assert len({e for _, e in cases.values()}) > 1, "grade a namer on cases with different answers"
    outcomes = run_apart(name, [case for case, _ in cases.values()], lambda case, got: _to_data(got), off=off)
    wrong = []
    for (label, (_, expected)), outcome in zip(cases.items(), outcomes):
        got = _from_data(outcome.get())
        if isinstance(got, _Unsendable) or got != expected:
            shown = str(got) if isinstance(got, _Unsendable) else repr(got)
            wrong.append(f"{label}: expected {expected!r}, got {shown}" if show_expected
                         else f"{label}: you answered {shown}")
    assert not wrong, f"your {what} named some cases wrongly: " + "; ".join(wrong)


class _Unsendable(str):
    """What a namer returned that is not plain data: its type and repr (never equal to an answer)."""


def _to_data(value, depth=0):
    """``value`` as JSON data that keeps tuples apart from lists (None, bool, int, float, str and
    containers of them); anything else becomes its description."""
    if value is None:
        return value
    for kind in (bool, str, int, float):  # subclasses too (numpy's float64, a str enum)
        if isinstance(value, kind):
            return kind(value)
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return _to_data(value.item(), depth + 1)
    if depth < 6 and isinstance(value, (list, tuple)):
        return {"tuple" if isinstance(value, tuple) else "list": [_to_data(v, depth + 1) for v in value]}
    return {"unsendable": f"{type(value).__name__} {repr(value)[:80]}"}


def _from_data(data):
    if isinstance(data, dict):
        if "tuple" in data:
            return tuple(_from_data(v) for v in data["tuple"])
        if "list" in data:
            return [_from_data(v) for v in data["list"]]
        return _Unsendable(data.get("unsendable", "?"))
    return data


def graded_calls(fn: Callable, cases: list, send: Callable[[object], object] | None = None,
                 off: Iterable[Callable] = ()) -> list:
    """``[send(fn(case)) for case in cases]``, computed apart, where no answer exists
    (``course.exercises.isolation.run_apart``), with the package functions in ``off`` and their private
    helpers switched off. ``send`` turns a result into plain data in that process (default: the
    result itself, which must then be JSON data); the first exception a call raised is raised
    here again. For a call of learner code that ``assert_detector``, ``assert_names`` and
    ``course.exercises.mystery.check_fix`` do not cover (a diagnosis record: ``send=course.exercises.record.as_data``)."""
    send = send or sendable
    return [o.get() for o in run_apart(fn, list(cases), lambda case, value: send(value), off=off)]


def tensor_data(value) -> dict:
    """``value`` as plain data for a graded call to send back, when the learner's code should have
    returned a tensor: ``{"dtype": "int64", "shape": [2, 3], "values": [...]}`` (the values
    flattened, as Python numbers), or ``{"type": "module.Name"}`` (``"Name"`` for a builtin type) for
    anything that is not a tensor.
    ``tensor_from_data`` rebuilds it in the test, which can then compare dtype, shape and values
    (``torch.equal`` alone ignores the dtype: an int64 batch equals its float copy)."""
    if not isinstance(value, torch.Tensor):
        kind = type(value)
        return {"type": kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"}
    return {"dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape),
            "values": value.detach().flatten().tolist()}


def tensor_from_data(data: dict):
    """The tensor that ``tensor_data`` described, with its dtype and shape. Raises TypeError naming
    what was returned instead when it was not a tensor."""
    if "dtype" not in data:
        raise TypeError(f"expected a torch.Tensor, got {data.get('type', '?')}")
    return torch.tensor(data["values"], dtype=getattr(torch, data["dtype"])).reshape(data["shape"])


def sendable(value):
    """``value`` if it is plain data (None, bool, int, float, str, and lists, tuples and dicts of
    them), else a description of what it was: what ``graded_calls`` sends back by default."""
    def plain(v, depth=0):
        if v is None or type(v) in (bool, int, float, str):
            return True
        if depth < 4 and type(v) in (list, tuple):
            return all(plain(x, depth + 1) for x in v)
        if depth < 4 and type(v) is dict:
            return all(type(k) is str and plain(x, depth + 1) for k, x in v.items())
        return False
    return value if plain(value) else {"not_plain_data": f"{type(value).__name__} {repr(value)[:80]}"}


