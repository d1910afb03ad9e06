"""A learner's function that a test cell calls through a graded call finds none of the test's data.

While a test cell runs, what it assigns at its top level (expected values, a list of labelled
inputs) is a notebook global, and its frame is the caller of whatever it calls. A learner's function
called in the kernel can read both (route (f) of docs/grading-integrity.md: red team 14's answer
found its input in 01's list of expected values). So every test cell calls the learner's code
through ``course.exercises.grading.graded_calls`` or the helpers built on it
(``tests/test_test_cells.py`` checks every notebook), which runs it in a forked child that deleted
the cell's data and seals frames and the garbage collector.

This drives a real grading kernel (the guard installed, a test cell with its secret, as the grader
sends it): a planted answer searches the notebook's globals, every frame above it and the garbage
collector for the test's expected value. Called apart, it finds nothing; the negative control is
the same answer called in the kernel by the same cell, which finds the value by every route.
"""
import json
import os
import subprocess
import sys

import pytest

from autograder import grading
from guard_kernel_driver import PREAMBLE

DRIVER = PREAMBLE + r'''
MARK = kernel_guard.MARK
# the planted answer: where can it see the test's expected value?
spy = r"""
import gc, sys
from course import IGNORE
def spy(x):
    want, found = "h-expec" + "ted-41", []
    if "IGNORE" in globals():
        found.append("kept: IGNORE, imported by the answer cell and the test")
    def holds(value):
        try:
            return want in repr(value)[:100000]
        except Exception:
            return False
    try:
        if any(holds(v) for k, v in list(globals().items()) if not k.startswith("__")):
            found.append("globals")
    except Exception as err:
        found.append("globals refused: " + type(err).__name__)
    try:
        frame = sys._getframe(1)
        while frame is not None:
            if any(holds(v) for v in list(frame.f_locals.values())):
                found.append("frame " + frame.f_code.co_name)
            frame = frame.f_back
    except Exception as err:
        found.append("frames refused: " + type(err).__name__)
    try:
        if any(type(o) is dict and holds(o) for o in gc.get_objects()):
            found.append("gc")
    except Exception as err:
        found.append("gc refused: " + type(err).__name__)
    return found
"""
test = r"""
import json as _json
from course import IGNORE
from course.exercises.grading import graded_calls as _graded_calls
### BEGIN HIDDEN TESTS
_cases = {3: "h-expec" + "ted-41"}  # the test's (input, expected) table
def _check():
    _expected_here = {"local": "h-expec" + "ted-41"}
    return _graded_calls(spy, [3])[0], spy(3)
_apart, _kernel = _check()
print("RESULT", _json.dumps({"apart": _apart, "kernel": _kernel}))
### END HIDDEN TESTS
"""
try:
    run(spy)
    run(f"{MARK} pre {json.dumps(pre_payload(test, keyed=True))}", store_history=False)
    out, error = run(test, store_history=False, secret="a-cell-secret")
    run(f"{MARK} post", store_history=False)
finally:
    client.stop_channels()
    kernel.kill()
assert "RESULT" in out, (out, error)
print(out.split("RESULT", 1)[1].strip().splitlines()[0])
'''


@pytest.fixture(scope="module")
def seen() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_STUDENT_ID", "COURSE_GUARD")}
    env["PYTHONPATH"] = str(grading.REPO)
    out = subprocess.run([sys.executable, "-c", DRIVER], cwd=grading.REPO, env=env, text=True,
                         capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_called_apart_the_answer_finds_none_of_the_tests_data(seen):
    leaks = [where for where in seen["apart"] if "refused" not in where and not where.startswith("kept")]
    assert not leaks, f"a graded call's answer read the test's expected value through: {leaks}"


def test_a_name_the_test_only_imports_stays_for_the_answer(seen):
    # the child deletes the test's data, not a package constant the answer reads under the same name
    assert any(where.startswith("kept: IGNORE") for where in seen["apart"]), seen["apart"]


def test_control_called_in_the_kernel_the_same_answer_finds_it(seen):
    assert {"globals", "frame <module>", "frame _check", "gc"} <= set(seen["kernel"]), seen["kernel"]
