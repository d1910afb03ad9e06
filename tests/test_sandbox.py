"""The autograder's sandboxed kernel, driven directly through SandboxedExecute (no nbgrader app).

Each test runs a tiny notebook the way ``nbgrader autograde`` runs a submission, in a working
folder laid out like ``autograded/<student>/<assignment>/`` inside a fake course root, and checks
one protection by what the cells print or raise. What the whole class gets through nbgrader is in
tests/test_hostile_submissions.py.
"""
import json
import os
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from traitlets.config.loader import PyFileConfigLoader

from autograder import grading, sandbox
from autograder.sandboxed_execute import SandboxedExecute

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bubblewrap is Linux-only")


@pytest.fixture(scope="module", autouse=True)
def kernelspec():
    """The sandboxed kernelspec is registered (make sandbox does it; idempotent)."""
    sandbox.install()


@pytest.fixture
def course(tmp_path):
    """A fake course root with a secret solution, a gradebook and another student's submission."""
    (tmp_path / "solutions" / "a").mkdir(parents=True)
    (tmp_path / "solutions" / "a" / "a.ipynb").write_text("SECRET-SOLUTION")
    (tmp_path / "gradebook.db").write_text("GRADEBOOK")
    (tmp_path / "submitted" / "other" / "a").mkdir(parents=True)
    (tmp_path / "submitted" / "other" / "a" / "a.ipynb").write_text("OTHER-STUDENT")
    work = tmp_path / "autograded" / "me" / "a"
    work.mkdir(parents=True)
    (work / "a.ipynb").write_text("HIDDEN-TESTS-IN-THE-AUTOGRADED-COPY")
    (work / "data.txt").write_text("DATA-FILE")
    return tmp_path


def run(course, sources, **limits):
    """Execute code cells ``sources`` in the sandbox with cwd autograded/me/a; the outputs per cell."""
    nb = new_notebook(cells=[new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "debug-course", "display_name": "x", "language": "python"}
    ep = SandboxedExecute(timeout=limits.pop("timeout", 20), **limits)
    ep.preprocess(nb, {"metadata": {"path": str(course / "autograded" / "me" / "a")}})
    return [cell.outputs for cell in nb.cells]


def text(outputs):
    """All stream text and error names/values of one cell's outputs."""
    return "".join(o.get("text", "") if o["output_type"] == "stream" else
                   f"{o.get('ename', '')}: {o.get('evalue', '')}\n" if o["output_type"] == "error" else
                   json.dumps(o.get("data", {})) for o in outputs)


def test_sandbox_available_here():
    """bubblewrap works on this machine; everything else in this file depends on it."""
    assert sandbox.probe() is None, f"{sandbox.probe()} (run `make sandbox` as root)"


PROBE_FS = r"""
import os
root = {root!r}
for what, path in [("solutions", root + "/solutions/a/a.ipynb"), ("gradebook", root + "/gradebook.db"),
                   ("other student", root + "/submitted/other/a/a.ipynb"), ("hidden tests", "a.ipynb")]:
    try:
        print("LEAK read", what, open(path).read()[:60])
    except OSError as err:
        print("BLOCKED read", what, type(err).__name__)
for what, path in [("gradebook", root + "/gradebook.db"), ("other student", root + "/submitted/other/a/a.ipynb"),
                   ("new file in course root", root + "/pwned")]:
    try:
        with open(path, "a") as f:
            f.write("HOSTILE")
        print("LEAK write", what)
    except OSError as err:
        print("BLOCKED write", what, type(err).__name__)
print("course root holds", os.listdir(root), "cwd holds", sorted(os.listdir(".")))
print("data file:", open("data.txt").read())
open("scratch.txt", "w").write("mine")
print("own scratch:", open("scratch.txt").read())
"""


def test_student_code_cannot_touch_the_course_root(course):
    """Solutions, gradebook, other students and the autograded notebook (which carries the hidden
    tests) are neither readable nor writable; the submission's own data file and scratch are."""
    out = text(run(course, [PROBE_FS.format(root=str(course))])[0])
    assert "LEAK" not in out, out
    assert out.count("BLOCKED") == 7, out
    # only the mount-point skeleton down to the working folder, which holds no notebook
    assert "course root holds ['autograded'] cwd holds ['data.txt']" in out, out
    assert "data file: DATA-FILE" in out and "own scratch: mine" in out, out
    assert (course / "gradebook.db").read_text() == "GRADEBOOK"
    assert (course / "submitted/other/a/a.ipynb").read_text() == "OTHER-STUDENT"
    assert not (course / "pwned").exists()
    assert not (course / "autograded/me/a/scratch.txt").exists(), "scratch writes reach the host"


def test_no_network_and_no_grader_secrets(course):
    """No TCP to the host's loopback (a listener is waiting there), no outside DNS/route, and the
    grader's environment (a database password, say) is not passed in."""
    import socket
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    os.environ["COURSE_TEST_SECRET"] = "hunter2"
    try:
        out = text(run(course, [
            "import socket, os\n"
            f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2); print('LEAK tcp')\n"
            "except OSError as e:\n    print('BLOCKED tcp', type(e).__name__)\n"
            "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2); print('LEAK route')\n"
            "except OSError as e:\n    print('BLOCKED route', type(e).__name__)\n"
            "print('secret' if 'hunter2' in repr(dict(os.environ)) else 'no secret')"])[0])
        with pytest.raises(OSError):
            listener.accept()
    finally:
        listener.close()
        del os.environ["COURSE_TEST_SECRET"]
    assert "LEAK" not in out and out.count("BLOCKED") == 2 and "no secret" in out, out


@pytest.mark.skipif(os.getuid() != 0, reason="the uid drop applies when grading as root")
def test_kernel_runs_unprivileged(course):
    """As root, the kernel becomes an unprivileged uid with no capabilities and no_new_privs, so it
    cannot unmount what hides the course root or regain root through a setuid program."""
    out = text(run(course, [
        "import os\nstatus = open('/proc/self/status').read()\n"
        "print('uid', os.getuid(), 'caps', status.split('CapEff:')[1].split()[0],"
        " 'nnp', status.split('NoNewPrivs:')[1].split()[0])"])[0])
    uid = int(out.split()[1])
    assert uid != 0 and "caps 0000000000000000" in out and "nnp 1" in out, out


def test_process_limit_stops_a_fork_bomb(course):
    """RLIMIT_NPROC binds the kernel's own uid: forking stops with BlockingIOError, and grading goes
    on (while the sleeping children hold the quota, the next cell may fail to start a thread: the
    bomb costs the submission, not the grader)."""
    outs = run(course, [
        "import os, time\nn = 0\nwhile n < 400:\n    if os.fork() == 0:\n"
        "        time.sleep(30)\n        os._exit(0)\n    n += 1\nprint('forked', n)",
        "print('still alive')"], max_processes=48)
    assert "BlockingIOError" in text(outs[0]), text(outs[0])
    after = text(outs[1])
    assert "still alive" in after or "can't start new thread" in after, after


def test_memory_limit_stops_a_memory_bomb(course):
    """RLIMIT_AS: allocation past the limit raises MemoryError in the cell; the kernel lives on."""
    outs = run(course, [
        "def bomb():\n    hog = []\n    for _ in range(100):\n        hog.append(bytearray(50 * 2**20))\n"
        "    return len(hog)\nprint('allocated MB', 50 * bomb())",
        "print('still alive')"], memory_mb=1536)
    assert "MemoryError" in text(outs[0]), text(outs[0])
    assert "still alive" in text(outs[1])


def test_file_size_limit(course):
    """RLIMIT_FSIZE: writing a file past the limit fails (Python ignores SIGXFSZ: OSError EFBIG)."""
    out = text(run(course, ["open('/tmp/big', 'wb').write(b'x' * (20 * 2**20))"], max_file_mb=8)[0])
    assert "File too large" in out or "OSError" in out, out


def test_cpu_limit_kills_a_kernel_that_ignores_interrupts(course):
    """RLIMIT_CPU ends a kernel that burns CPU; the cell says the kernel died, later cells are not
    run (and so score 0 when they are tests)."""
    outs = run(course, ["while True:\n    pass", "print('after')"], cpu_seconds=2, timeout=60)
    assert "KernelDied" in text(outs[0]), text(outs[0])
    assert "NotRun" in text(outs[1]) and "after" not in text(outs[1]), text(outs[1])


def test_timeout_stops_the_notebook(course):
    """A cell past the time limit is stopped with a CellTimeoutError that says so; the cells after
    it are not run (nbgrader's default runs them, so a loop after a correct answer kept its marks)."""
    outs = run(course, ["x = 1", "while True:\n    pass", "print('after', x)"], timeout=3)
    assert "CellTimeoutError" in text(outs[1]) and "longer than 3 s" in text(outs[1]), text(outs[1])
    assert "NotRun" in text(outs[2]) and "after" not in text(outs[2]), text(outs[2])


def test_output_limit(course):
    """A cell printing far more than max_output_bytes is cut, interrupted and reported; the stored
    outputs stay small."""
    outs = run(course, ["for i in range(3_000_000):\n    print('x' * 100)", "print('after')"],
               max_output_bytes=100_000, timeout=60)
    assert "OutputLimitError" in text(outs[0]), text(outs[0])[-300:]
    assert len(json.dumps(outs[0])) < 200_000
    assert "NotRun" in text(outs[1])


def test_refuses_without_bubblewrap_unless_overridden(course, monkeypatch):
    """No sandbox on the machine: grading refuses and says why; COURSE_ALLOW_UNSANDBOXED=1 runs
    the code unprotected (the probe cell can then read the solutions, which is the point)."""
    monkeypatch.setenv("COURSE_BWRAP", "/nonexistent/bwrap")
    monkeypatch.delenv(sandbox.ALLOW_ENV, raising=False)
    with pytest.raises(RuntimeError, match="refusing to autograde without the sandbox: bubblewrap"):
        run(course, ["print('ran')"])
    monkeypatch.setenv(sandbox.ALLOW_ENV, "1")
    out = text(run(course, [PROBE_FS.format(root=str(course))])[0])
    assert "LEAK read solutions" in out, out


def test_autograde_alone_uses_the_sandbox():
    """In nbgrader_config.py, autograde executes with SandboxedExecute on the sandboxed kernel,
    while validate (the learner's button) keeps nbgrader's Execute on the normal course kernel."""
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import Execute
    from nbgrader.validator import Validator

    config = PyFileConfigLoader(grading.CONFIG_FILE, path=str(grading.REPO)).load_config()
    names = [p if isinstance(p, str) else f"{p.__module__}.{p.__name__}"
             for p in Autograde(config=config).autograde_preprocessors]
    assert names[0] == "autograder.sandboxed_execute.SandboxedExecute", names
    assert not any(n.endswith(".Execute") for n in names), names
    assert SandboxedExecute(config=config).kernel_name == sandbox.KERNEL_NAME
    assert Execute(config=config).kernel_name == grading.KERNEL_NAME
    assert Execute in Validator(config=config).preprocessors
    spec = json.loads((Path(sys.prefix) / "share/jupyter/kernels" / sandbox.KERNEL_NAME /
                       "kernel.json").read_text())
    assert spec["argv"][1].endswith("autograder/sandbox.py") and spec["interrupt_mode"] == "message"


def test_the_graded_student_id_reaches_the_kernel_and_stays(course):
    """The class runner passes nbgrader's student id into the kernel (course.exercises.identity.GRADED_ID,
    read at kernel start); a submission that edits the environment, reloads the module and rebinds
    the name changes it for its own cells only: a test cell sees the grader's id again. Without a
    student (JupyterLab, nbval) there is no id (the negative control)."""
    from nbformat.v4 import new_code_cell, new_notebook

    def graded_run(student):
        test = new_code_cell("import course.exercises.identity as ci\nprint('C', ci.GRADED_ID, ci.identity('typed'))")
        test.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True,
                                     "grade_id": "t", "points": 1, "schema_version": 3}
        nb = new_notebook(cells=[
            new_code_cell("import course.exercises.identity as ci\nprint('A', ci.GRADED_ID)"),
            new_code_cell("import os, importlib\nos.environ['COURSE_STUDENT_ID'] = 'eve'\n"
                          "importlib.reload(ci)\nci.GRADED_ID = 'eve'\nprint('B', ci.GRADED_ID, ci.identity('typed'))"),
            test])
        nb.metadata["kernelspec"] = {"name": "debug-course", "display_name": "x", "language": "python"}
        resources = {"metadata": {"path": str(course / "autograded" / "me" / "a")}}
        if student:
            resources["nbgrader"] = {"student": student}
        SandboxedExecute(timeout=30).preprocess(nb, resources)
        return [text(c.outputs) for c in nb.cells]

    a, b, c = graded_run("ada")
    assert "A ada" in a, f"the kernel did not get the student id: {a!r}"
    assert "B eve eve" in b, f"the submission's own cell should see its own edit: {b!r}"
    assert "C ada ada" in c, f"a test cell must see the grader's id, whatever the submission did: {c!r}"
    a, _, c = graded_run(None)
    assert "A None" in a and "C None typed" in c, f"without a student there is no graded id: {a!r} {c!r}"


def test_the_package_is_imported_before_submitted_code_only_where_a_cell_imports_it(course):
    """A grading kernel imports ``course`` (and torch with it) before any submitted code when a
    cell of the notebook imports it, as every course notebook's cells do (the control); a notebook
    whose cells never import it (a toy course's) starts without either, and still reads the
    grader's student id before its first cell (``course.exercises.identity``, loaded on its own)."""
    first = ("import sys\nprint('P', 'course' in sys.modules, 'torch' in sys.modules,\n"
             "      sys.modules['course.exercises.identity'].GRADED_ID)")

    def graded_run(*later):
        nb = new_notebook(cells=[new_code_cell(first)] + [new_code_cell(s) for s in later])
        nb.metadata["kernelspec"] = {"name": "debug-course", "display_name": "x", "language": "python"}
        SandboxedExecute(timeout=60).preprocess(nb, {"metadata": {"path": str(course / "autograded" / "me" / "a")},
                                                     "nbgrader": {"student": "ada"}})
        return text(nb.cells[0].outputs)

    shown = graded_run("def later():\n    from course.exercises import identity\n    return identity")
    assert "P True True ada" in shown, f"a notebook that imports course must have it imported first: {shown!r}"
    shown = graded_run("import math")
    assert "P False False ada" in shown, \
        f"a notebook that never imports course should start without it, with the id read: {shown!r}"


def test_a_source_notebook_that_imports_course_has_it_imported_first(course):
    """The grader asks the assignment's source notebook too: a submission with no cell importing
    course (its own cells removed, say) still gets the package imported before its first cell
    when the source imports it. (Without a source, the test above shows it is not.)"""
    from traitlets.config import Config

    nbformat.write(new_notebook(cells=[new_code_cell("import course")]), course / "solutions" / "a" / "a.ipynb")
    config = Config()
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.source_directory = "solutions"  # as the course's nbgrader_config.py says
    nb = new_notebook(cells=[new_code_cell("import sys\nprint('P', 'course' in sys.modules)"),
                             new_code_cell("import math")])
    nb.metadata["kernelspec"] = {"name": "debug-course", "display_name": "x", "language": "python"}
    SandboxedExecute(config=config, timeout=60).preprocess(
        nb, {"metadata": {"path": str(course / "autograded" / "me" / "a")},
             "nbgrader": {"student": "ada", "assignment": "a", "notebook": "a"}})
    shown = text(nb.cells[0].outputs)
    assert "P True" in shown, f"the source imports course, so the kernel must have it first: {shown!r}"


def test_without_the_package_a_test_still_sees_the_graders_id(course):
    """Where the package is not imported first, ``course.exercises.identity`` (loaded on its own)
    is still put back before a test cell: the submission's rebinding of ``GRADED_ID`` is undone."""
    test = new_code_cell("import sys\nprint('T', sys.modules['course.exercises.identity'].GRADED_ID)")
    test.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True,
                                 "grade_id": "t", "points": 1, "schema_version": 3}
    nb = new_notebook(cells=[
        new_code_cell("import sys\nsys.modules['course.exercises.identity'].GRADED_ID = 'eve'\n"
                      "print('S', sys.modules['course.exercises.identity'].GRADED_ID, 'torch' in sys.modules)"),
        test])
    nb.metadata["kernelspec"] = {"name": "debug-course", "display_name": "x", "language": "python"}
    SandboxedExecute(timeout=60).preprocess(nb, {"metadata": {"path": str(course / "autograded" / "me" / "a")},
                                                 "nbgrader": {"student": "ada"}})
    own, seen = text(nb.cells[0].outputs), text(nb.cells[1].outputs)
    assert "S eve False" in own, f"the submission's cell should see its own edit, without torch: {own!r}"
    assert "T ada" in seen, f"a test cell must see the grader's id: {seen!r}"


def test_every_course_notebook_makes_the_grading_kernel_import_the_package_first():
    """``imports_course`` is true for every assignment's source notebook (the grader asks it
    first), and also for its autograder-test cells alone: nbgrader puts those back in every
    submission it runs (a deleted one re-added, an edited one restored), so even a grader without
    the source would import the package before submitted code. The toy course's notebook, and
    cells that only mention the name, are the controls."""
    from autograder import toy_course
    from autograder.sandboxed_execute import imports_course

    for a in grading.assignments():
        nb = nbformat.read(grading.source_path(a), as_version=4)
        tests = [c for c in nb.cells
                 if grading.nbgrader_meta(c).get("grade") and not grading.nbgrader_meta(c).get("solution")]
        assert imports_course(new_notebook(cells=tests)), \
            f"{a}: no autograder-test cell imports course, so a submission could start its kernel without it"
    assert not imports_course(toy_course.toy_notebook())
    assert not imports_course(new_notebook(cells=[new_code_cell("import coursework\ncourse = 1\n# import course")]))
    assert imports_course(new_notebook(cells=[new_code_cell("import os, course.toolkit as t")]))
    for odd in ("%time x = 1", "-" * 200_000 + "1"):  # a magic; past the parser's limits (MemoryError)
        assert imports_course(new_notebook(cells=[new_code_cell(odd)])), "a cell that does not parse counts"
