"""Helpers the notebooks' test cells use to grade a learner's detector like a test suite.

A detector is graded on both sides at once: it must stay quiet on every healthy case and fire on every
broken one. A detector that always fires, or never does, fails every graded cell that uses
``assert_detector``, because each such cell holds healthy and broken cases together.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Callable


@contextmanager
def quiet():
    """Silence warnings while graded code runs.

    nbgrader scores a test cell 0 if it writes anything to stderr, even when every assertion
    passes; a broken pipeline rightly makes torch warn (for example, a scheduler stepped without an
    optimizer step), and that warning must not cost the learner the cell.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def fires(check: Callable, *args, **kwargs) -> bool:
    """True if ``check(*args)`` raises (an ``Exception``), False if it returns normally.

    ``NotImplementedError`` is not an answer: it propagates, so an unfinished exercise reports as
    unfinished rather than as a check that fires on everything.
    """
    try:
        check(*args, **kwargs)
    except NotImplementedError:
        raise
    except Exception:
        return True
    return False


def assert_detector(detect: Callable[[object], bool], healthy: dict[str, object], broken: dict[str, object], what: str = "detector") -> None:
    """Fail, naming every misclassified case, unless ``detect`` is False on all healthy cases and
    True on all broken ones. Both dicts must be non-empty, so a constant answer cannot pass."""
    if not healthy or not broken:
        raise ValueError("a detector is graded on healthy and broken cases together")
    with quiet():
        missed = [name for name, case in broken.items() if not detect(case)]
        false_alarms = [name for name, case in healthy.items() if detect(case)]
    problems = []
    if missed:
        problems.append(f"your {what} did not catch: {', '.join(missed)}")
    if false_alarms:
        problems.append(f"your {what} raised a false alarm on healthy cases: {', '.join(false_alarms)}")
    assert not problems, "; ".join(problems)


def assert_names(name: Callable[[object], str], cases: dict[str, tuple[object, str]], what: str = "diagnosis") -> None:
    """Fail unless ``name(case) == expected`` for every ``(case, expected)``; the message lists each miss."""
    wrong = []
    for label, (case, expected) in cases.items():
        with quiet():
            got = name(case)
        if got != expected:
            wrong.append(f"{label}: expected {expected!r}, got {got!r}")
    assert len({e for _, e in cases.values()}) > 1, "grade a namer on cases with different answers"
    assert not wrong, f"your {what} named some cases wrongly: " + "; ".join(wrong)
