"""The grading kernel's guard warms torch up once, before any test: a graded call's process
(course.exercises.isolation.run_apart) must not import what a first optimizer step imports
(``torch._dynamo``), and if the kernel has not, the first graded call imports it twice (in its
process, and again in the kernel after it), about a second each."""
import json
import os
import subprocess
import sys

from autograder import grading

PROBE = """
import json, sys
from IPython.core.interactiveshell import InteractiveShell
from autograder import kernel_guard
shell = InteractiveShell.instance()
kernel_guard.install(shell)
seen = {"after_install": "torch._dynamo" in sys.modules}
import course
from course.exercises import isolation
seen["after_import"] = "torch._dynamo" in sys.modules
seen["warmed"] = isolation._warmed[0]
print(json.dumps(seen))
"""


def _probe(**env) -> dict:
    full = {k: v for k, v in os.environ.items() if k not in ("COURSE_STUDENT_ID", "COURSE_GUARD")}
    full.update(env, PYTHONPATH=str(grading.REPO))
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=grading.REPO, env=full, text=True,
                         capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_warm_when_course_is_imported_with_the_student_id():
    seen = _probe(COURSE_STUDENT_ID="learner-1")
    assert seen == {"after_install": True, "after_import": True, "warmed": True}, seen


def test_warm_when_the_notebook_imports_course_later():
    seen = _probe()
    assert seen == {"after_install": False, "after_import": True, "warmed": True}, seen


def test_no_guard_no_warm_up_control():
    """Negative control: without the guard, importing course imports no torch._dynamo."""
    seen = _probe(COURSE_GUARD="0")
    assert seen == {"after_install": False, "after_import": False, "warmed": False}, seen
