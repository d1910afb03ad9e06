"""A copy of a course function made in an answer cell, or for it by a package function, is refused
in the grading kernel.

A test's ``off=`` switches a package function off, in the graded call's process, by replacing the
``__code__`` of that function object. A copy made earlier, ``types.FunctionType(f.__code__, ...)``, is
another object: it kept the package's code and answered for the learner inside the graded call (red
team, this stop: 20 points in 00, 01, 04, 09 and 10). The guard's audit hook refuses such a copy made
outside the package. Controls: the same copy of a function defined in the notebook is made, and so is
one of a course function in a kernel without the guard.
"""
import os
import subprocess
import sys

import pytest

from autograder import grading
from guard_kernel_driver import PREAMBLE

CELLS = r'''
out, err = run(
    "import types\n"
    "from course.toolkit.alerts import AlertPolicy\n"
    "f = AlertPolicy.observe\n"
    "copy = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)\n"
    "print('made')\n")
print("COURSE", repr(err))
out, err = run(
    "import functools, torch\n"
    "from course.toolkit import checks\n"
    "o = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)\n"
    "o.step = functools.partial(types.FunctionType, f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)\n"
    "checks._optimizer_steps(o)\n"
    "copy = o.step()\n"
    "print('made')\n")
print("THROUGH", repr(err))
out, err = run(
    "def mine(x):\n    return x + 1\n"
    "copy = types.FunctionType(mine.__code__, globals())\n"
    "print(copy(1))\n")
print("MINE", repr(out.strip()), repr(err))
client.stop_channels()
kernel.kill()
'''


def _drive(guard: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_STUDENT_ID", "COURSE_GUARD")}
    env["PYTHONPATH"] = str(grading.REPO)
    if not guard:
        env["COURSE_GUARD"] = "0"
    out = subprocess.run([sys.executable, "-c", PREAMBLE + CELLS], cwd=grading.REPO, env=env, text=True,
                         capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.mark.parametrize("guard", [True, False], ids=["guard", "control-no-guard"])
def test_a_copy_of_a_course_function_is_refused_while_grading(guard):
    out = _drive(guard)
    lines = {ln.split(" ", 1)[0]: ln for ln in out.splitlines() if ln.startswith(("COURSE", "THROUGH", "MINE"))}
    # a copy made by the notebook, and one made for it by a package function that calls what the
    # notebook handed it (checks._optimizer_steps wraps an optimizer's step and calls it)
    for route in ("COURSE", "THROUGH"):
        if guard:
            assert "copying a function of the course package" in lines[route], \
                f"the grading kernel let a copy of AlertPolicy.observe be made ({route}): {lines[route]}"
        else:
            assert lines[route] == f"{route} ''", f"without the guard the copy is made ({route}): {lines[route]}"
    assert lines["MINE"] == "MINE '2' ''", f"a copy of the notebook's own function must work: {lines['MINE']}"
