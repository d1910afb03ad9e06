"""A module of ``course`` that the submission imports first is recorded as its own code left it.

The grading kernel's guard records the package (``course.exercises.pristine``) right after each
import of one of its modules, from the import hook's ``exec_module``. There the module's import has
not returned yet, so ``pristine.record()`` took it for a module still being imported and left it for
later: after the submission's next line. Red team 13 imported ``course.exercises.sets`` in an answer
cell and changed the 12 set's base pipeline in place; the planted base was then recorded as the
original, and nothing put it back before the hidden draws (6 of 6 mystery points on 12). Here a real
grading kernel imports the set in one cell and changes it in the same cell: what ``pristine`` sees
must name the change.
"""
import json
import os
import subprocess
import sys

from autograder import grading
from guard_kernel_driver import PREAMBLE

DRIVER = PREAMBLE + r'''
out, err = run(
    "from course.exercises.sets import SETS\n"
    "object.__setattr__(SETS['12_lr_instability'].base, 'warmup', 999)\n")
assert not err, err
out, err = run("from course.exercises import pristine\nprint(__import__('json').dumps(pristine.changed()))")
client.stop_channels()
kernel.kill()
print(out.strip().splitlines()[-1])
'''


def test_a_set_changed_right_after_its_first_import_is_seen():
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_STUDENT_ID", "COURSE_GUARD")}
    env["PYTHONPATH"] = str(grading.REPO)
    out = subprocess.run([sys.executable, "-c", DRIVER], cwd=grading.REPO, env=env, text=True,
                         capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    changed = json.loads(out.stdout.strip().splitlines()[-1])
    assert "a Pipeline's fields (changed in place)" in changed, (
        f"the guard recorded the set after the submission had changed it: pristine sees {changed}")
