"""After a test cell, the grading kernel keeps nothing of it that the submission's next cell could read.

A red team's tenth pass (2026-12-06) read the hidden test cells of 04 and 12 from the kernel's input
history in a later answer cell, printed them into its feedback, and answered its next submission
from a table. The grader now runs a test cell outside the input history (``SandboxedExecute``), and
the guard's control cell after the test (``autograder.kernel_guard``) drops the data a test with
hidden parts bound (a name the notebook had gets its old value back; an import stays), the test's
text and the grader's control cells from IPython's compile cache, and the last exception; the box of
the test's secret (``course.toolkit.salts``, filled from the test request's metadata) is empty again.

Each test drives a real IPython shell with the guard installed, the way the grader does (control
cell, test cell, control cell), in a subprocess, then looks from a later cell for any trace of the
test. The negative control leaves out the control cell after the test: the same search finds them.
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
SENTINEL = "h-sen" + "tinel-77"
SECRET = "the-cell-" + "secret-5f1e"
test = ("import course.toolkit.salts as _salts\n"
        "### BEGIN HIDDEN TESTS\n"
        f"_seen = _salts.CURRENT[0]\n_draws = {{{SENTINEL!r}: 1}}\nkeep_me = {{{SENTINEL!r}: 2}}\n"
        "from os.path import join as _join\n"
        f"assert _seen == {SECRET!r}, 'the test did not get its secret'\n"
        f"raise AssertionError({SENTINEL!r} + ' failed')\n"
        "### END HIDDEN TESTS\n")
try:
    run("x = 1\nkeep_me = 5")
    run(f"{MARK} pre {json.dumps(pre_payload(test, keyed=True))}", store_history=False)
    _, error = run(test, store_history=False, secret=SECRET)
    ran_with_secret = SENTINEL in error
    if sys.argv[1] == "post":
        run(f"{MARK} post", store_history=False)
    # a later cell of the submission looks for the test (its own text names neither string)
    found, _ = run("""
import linecache, sys
from course.toolkit import salts
_want = ("h-sen" + "tinel-77", "the-cell-" + "secret-5f1e")
_found = set()
for _name, _entry in list(linecache.cache.items()):
    if any(w in "".join(_entry[2]) for w in _want):
        _found.add("linecache")
if any(any(w in s for w in _want) for s in In):
    _found.add("In")
for _k in ("_draws", "_seen"):
    if _k in globals():
        _found.add("name " + _k)
if any(w in repr(getattr(sys, "last_value", "")) for w in _want):
    _found.add("sys.last_value")
if salts.CURRENT[0]:
    _found.add("the secret in course.toolkit.salts")
if globals().get("keep_me") != 5:
    _found.add("the notebook's keep_me not put back")
if "_join" not in globals():
    _found.add("the test's import dropped")
print("FOUND", sorted(_found))
""")
    found = eval(found.split("FOUND", 1)[1])
finally:
    client.stop_channels()
    kernel.kill()
print(json.dumps({"ran_with_secret": ran_with_secret, "found": found}))
'''


def _drive(stage: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_STUDENT_ID", "COURSE_GUARD")}
    env["PYTHONPATH"] = str(grading.REPO)
    out = subprocess.run([sys.executable, "-c", DRIVER, stage], cwd=grading.REPO, env=env, text=True,
                         capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def after_the_post_stage():
    return _drive("post")


def test_the_test_ran_with_its_secret(after_the_post_stage):
    assert after_the_post_stage["ran_with_secret"], "the guard did not put the test's secret in the box"


def test_a_later_cell_finds_nothing_of_the_test(after_the_post_stage):
    assert after_the_post_stage["found"] == [], \
        f"a later cell of the submission could still read the test through: {after_the_post_stage['found']}"


def test_control_without_the_post_stage_the_search_finds_the_test():
    seen = _drive("none")
    assert seen["ran_with_secret"]
    assert set(seen["found"]) >= {"linecache", "name _draws", "name _seen", "sys.last_value",
                                  "the secret in course.toolkit.salts"}, seen["found"]
