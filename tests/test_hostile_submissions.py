"""A class of broken, careless and hostile submissions, autograded by ``nbgrader autograde`` with
this repository's configuration (sandboxed kernel, limits, monkeypatch guard).

Two cheap assignments (no torch in ``toy``; ``guarded`` imports torch for the monkeypatch cases)
are graded once per module, each class in one ``nbgrader autograde`` run, so every case also
shows that the rest of the class is graded: ``good`` is in the same batch and must get full marks.
Expectations are per test cell (``EXPECT``: grade_id -> earns its points?) plus the error name a
reader of the autograded notebook finds (the reason an instructor or a class summary can state:
CellTimeoutError, OutputLimitError, KernelDied, NotRun, GradingIntegrityError, MemoryError, ...).
The toy class runs with short limits for speed (6 s per cell, 1.5 GB address space, 64 processes,
200 kB output per cell); the guarded class (torch) with the configured ones.
"""
import json
import socket
from pathlib import Path

import nbformat
import pytest

from autograder import grading, sandbox, toy_course
from autograder.kernel_guard import MARK

LIMITS = ["--SandboxedExecute.timeout=6", "--SandboxedExecute.memory_mb=1536",
          "--SandboxedExecute.max_processes=64", "--SandboxedExecute.max_output_bytes=200000"]
SQ = "def square(x):\n    return x * x"


def probe_code(root: Path, port: int) -> str:
    """Student code that tries to read and write what it must not, printing LEAK or BLOCKED."""
    return SQ + f"""
import os, socket
root = {str(root)!r}
for what, path in [("solutions", root + "/solutions/toy/toy.ipynb"), ("gradebook", root + "/gradebook.db"),
                   ("hidden tests", "toy.ipynb"), ("hidden tests (relative)", "../../../autograded/snoop/toy/toy.ipynb")]:
    try:
        print("LEAK read", what, len(open(path, "rb").read()))
    except OSError as err:
        print("BLOCKED read", what, type(err).__name__)
for what, path in [("gradebook", root + "/gradebook.db"), ("other student", root + "/submitted/good/toy/toy.ipynb")]:
    try:
        with open(path, "ab") as f:
            f.write(b"HOSTILE-MARKER")
        print("LEAK write", what)
    except OSError as err:
        print("BLOCKED write", what, type(err).__name__)
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2)
    print("LEAK network")
except OSError as err:
    print("BLOCKED network", type(err).__name__)
"""


def toy_cases(root, port):
    """student -> (edits by grade_id, {test grade_id: earns points?}, error name expected somewhere)."""
    full = {"test_square": True, "test_cube": True}
    return {
        "good": ({}, full, None),
        "wrong": ({"square": "def square(x):\n    return 2 * x"},
                  {"test_square": False, "test_cube": True}, "AssertionError"),
        "loop_in_function": ({"square": "def square(x):\n    while True:\n        pass"},
                             {"test_square": False, "test_cube": False}, "CellTimeoutError"),
        "loop_after": ({"cube": "def cube(x):\n    return x ** 3\nwhile True:\n    pass"},
                       {"test_square": True, "test_cube": False}, "CellTimeoutError"),
        "memory_bomb": ({"square": SQ + "\ndef _bomb():\n    hog = []\n    for _ in range(100):\n"
                                        "        hog.append(bytearray(50 * 2**20))\n_bomb()"},
                        full, "MemoryError"),
        "fork_bomb": ({"square": SQ + "\nimport os, time\nn = 0\nwhile n < 400:\n    if os.fork() == 0:\n"
                                      "        time.sleep(60)\n        os._exit(0)\n    n += 1"},
                      None, "BlockingIOError"),
        "kernel_dies": ({"square": SQ + "\nimport os\nos._exit(1)"},
                        {"test_square": False, "test_cube": False}, "KernelDied"),
        "output_flood": ({"square": SQ + "\nfor i in range(3_000_000):\n    print('x' * 100)"},
                         {"test_square": False, "test_cube": False}, "OutputLimitError"),
        "output_blob": ({"square": SQ + "\nimport sys\nsys.stdout.write('y' * 150_000_000)"},
                        None, None),
        "snoop": ({"square": probe_code(root, port)}, full, None),
        "tampered_test": ({"test_square": "pass", "square": "def square(x):\n    return 0"},
                          {"test_square": False, "test_cube": True}, "AssertionError"),
        "deleted_test": ({"test_cube": None, "cube": "def cube(x):\n    return 0"},
                         {"test_square": True, "test_cube": False}, "AssertionError"),
    }


GUARDED_SOURCE = [
    ("setup", "import math\nimport torch", dict(locked=True)),
    ("halve", "def halve(t):\n    ### BEGIN SOLUTION\n    return t / 2\n    ### END SOLUTION",
     dict(solution=True)),
    ("test_allclose", "assert torch.allclose(halve(torch.tensor([2.0, 4.0])), torch.tensor([1.0, 2.0]))",
     dict(grade=True, locked=True, points=1)),
    ("test_assert_close", "from torch.testing import assert_close\n"
                          "assert_close(halve(torch.tensor([6.0])), torch.tensor([3.0]))",
     dict(grade=True, locked=True, points=1)),
    ("test_isclose", "value = float(halve(torch.tensor(5.0)))\nassert math.isclose(value, 2.5)",
     dict(grade=True, locked=True, points=1)),
    ("test_builtins", "out = halve(torch.tensor([-8.0]))\nassert isinstance(out, torch.Tensor), 'a tensor'\n"
                      "assert abs(float(out) + 4.0) < 1e-6",
     dict(grade=True, locked=True, points=1)),
]
WRONG = "def halve(t):\n    return t"
GUARD_CASES = {
    # student -> (source of the answer cell, what the autograded notebook must name)
    "patch_allclose": (WRONG + "\ntorch.allclose = lambda *a, **k: True", "restored what the submission "
                       "had replaced: torch.allclose"),
    "patch_assert_close": (WRONG + "\nimport torch.testing\ntorch.testing.assert_close = lambda *a, **k: None",
                           "torch.testing.assert_close"),
    "patch_isclose": (WRONG + "\nmath.isclose = lambda *a, **k: True", "math.isclose"),
    "patch_abs": (WRONG + "\nimport builtins\nbuiltins.abs = lambda x: 0\n"
                          "builtins.AssertionError = type('Quiet', (Exception,), {})",
                  "builtins.abs, builtins.AssertionError"),
    # replacing isinstance breaks the kernel's own messaging: it stops answering, the rest is not run
    "patch_isinstance": ("import builtins\nbuiltins.isinstance = lambda *a: True\n"
                         "class Fake:\n    def __float__(self):\n        return -4.0\n"
                         "def halve(t):\n    return Fake()", "CellTimeoutError"),
    "shadow_abs": (WRONG + "\ndef abs(x):\n    return 0", "global abs (shadows the builtin)"),
    "patch_import": (WRONG + "\nimport builtins, types\n_real = builtins.__import__\n"
                             "def _fake(name, *a, **k):\n    if name == 'torch.testing':\n"
                             "        return types.SimpleNamespace(assert_close=lambda *a, **k: None)\n"
                             "    return _real(name, *a, **k)\nbuiltins.__import__ = _fake",
                     "builtins.__import__"),
    # patched inside the graded function, while the test runs: the test is void
    "patch_in_call": ("def halve(t):\n    import math\n    math.isclose = lambda *a, **k: True\n    return t",
                      "GradingIntegrityError: something this test relies on was replaced while it ran "
                      "(math.isclose)"),
}


def _notebook(cells, name):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = toy_course.KERNELSPEC
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = [toy_course._cell("markdown", f"# {name}")] + [
        toy_course._cell("code", src, gid, **kw) for gid, src, kw in cells]
    return nb


def _grade(root, assignment, source, submissions, limits=()):
    folder = root / "solutions" / assignment
    folder.mkdir(parents=True)
    nbformat.write(source, folder / f"{assignment}.ipynb")
    grading.nbgrader(root, "generate_assignment", assignment, "--force")
    src = json.loads((folder / f"{assignment}.ipynb").read_text())
    for student, nb in submissions(src).items():
        sub = root / "submitted" / student / assignment
        sub.mkdir(parents=True)
        (sub / f"{assignment}.ipynb").write_text(json.dumps(nb))
    return grading.nbgrader(root, "autograde", assignment, "--force", *limits, check=False).stdout


class Run:
    def __init__(self, root, assignment, log):
        self.root, self.assignment, self.log = root, assignment, log

    def scores(self, student):
        return grading.scores(self.root, self.assignment, student)

    def outputs(self, student):
        """grade_id (or cell index) -> text of its error names/values and streams."""
        path = self.root / "autograded" / student / self.assignment / f"{self.assignment}.ipynb"
        nb = json.loads(path.read_text())
        found = {}
        for i, cell in enumerate(nb["cells"]):
            key = grading.nbgrader_meta(cell).get("grade_id") or i
            found[key] = "".join(f"{o['ename']}: {o['evalue']}\n" if o["output_type"] == "error" else
                                 "".join(o.get("text", "")) for o in cell.get("outputs", []))
        return found


@pytest.fixture(scope="module")
def listener():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(5)
    sock.settimeout(0.1)
    yield sock
    sock.close()


@pytest.fixture(scope="module")
def toy_class(tmp_path_factory, listener):
    assert sandbox.probe() is None, sandbox.probe()
    sandbox.install()
    root = grading.make_course_copy(tmp_path_factory.mktemp("hostile"), [])
    cases = toy_cases(root, listener.getsockname()[1])
    log = _grade(root, "toy", toy_course.toy_notebook(),
                 lambda src: {s: grading.edit_cells(src, edits) for s, (edits, _, _) in cases.items()}, LIMITS)
    return Run(root, "toy", log), cases


@pytest.fixture(scope="module")
def guarded_class(tmp_path_factory):
    sandbox.install()
    root = grading.make_course_copy(tmp_path_factory.mktemp("guarded"), [])
    source = _notebook(GUARDED_SOURCE, "guarded")

    def submissions(src):
        subs = {"good": src, "wrong": grading.edit_cells(src, {"halve": WRONG})}
        subs.update({s: grading.edit_cells(src, {"halve": code}) for s, (code, _) in GUARD_CASES.items()})
        return subs
    return Run(root, "guarded", _grade(root, "guarded", source, submissions))


def _case_ids():
    return list(toy_cases(Path("/x"), 0))


@pytest.mark.parametrize("student", _case_ids())
def test_bad_submission_gets_a_score_and_a_reason(toy_class, student):
    """Every submission is graded in the same batch: each test cell has a score (no "needs manual
    grade"), the expected cells earn their points and the others 0, and the reason is visible."""
    run, cases = toy_class
    _, expect, reason = cases[student]
    try:
        scores = run.scores(student)
    except Exception as err:  # nbgrader.api.MissingEntry
        pytest.fail(f"{student} has no grades ({err}); log:\n{run.log[-3000:]}")
    outs = run.outputs(student)
    for gid in ("test_square", "test_cube"):
        score, max_score, manual = scores[gid]
        assert not manual, f"{student}/{gid} needs manual grade; outputs {outs.get(gid)!r}"
        if expect is not None:
            assert (score == max_score) == expect[gid], \
                f"{student}/{gid}: {score}/{max_score}, expected {'full' if expect[gid] else 0}; " \
                f"outputs {outs.get(gid)!r}"
    if reason:
        assert any(reason in text for text in outs.values()), f"{student}: no {reason} in {outs}"
    size = (run.root / "autograded" / student / "toy" / "toy.ipynb").stat().st_size
    assert size < 1_000_000, f"{student}: autograded notebook is {size} bytes"


def test_not_run_cells_say_why(toy_class):
    """After a limit stops a notebook, the later test cells carry a NotRun error naming the cause."""
    run, _ = toy_class
    assert "NotRun: not run: cell" in run.outputs("loop_after")["test_cube"]
    assert "kernel died" in run.outputs("kernel_dies")["test_square"]


def test_snoop_is_blocked(toy_class, listener):
    """The submission that reads solutions/gradebook/hidden tests, writes the gradebook and another
    student's submission and opens a socket to the host: all blocked, nothing changed on the host."""
    run, _ = toy_class
    out = run.outputs("snoop")["square"]
    assert "LEAK" not in out and out.count("BLOCKED") == 7, out
    assert b"HOSTILE-MARKER" not in (run.root / "gradebook.db").read_bytes()
    assert b"HOSTILE-MARKER" not in (run.root / "submitted/good/toy/toy.ipynb").read_bytes()
    with pytest.raises(OSError):
        listener.accept()


def test_timeout_is_in_the_feedback(toy_class):
    """The feedback HTML of a timed-out submission says the cell ran past the limit."""
    run, _ = toy_class
    grading.nbgrader(run.root, "generate_feedback", "toy", "--force", "--student=loop_after")
    page = (run.root / "feedback/loop_after/toy/toy.html").read_text()
    assert "CellTimeoutError" in page and "ran longer than 6 s" in page


@pytest.mark.parametrize("student", ["good", "wrong", *GUARD_CASES])
def test_monkeypatching_does_not_pass(guarded_class, student):
    """A submission whose answer is wrong but which replaces what a test relies on loses that
    test; the grader's note or a GradingIntegrityError says what was replaced."""
    run = guarded_class
    scores = run.scores(student)
    auto = [g for g, _, kw in GUARDED_SOURCE if kw.get("grade")]
    earned = {g for g in auto if scores[g][0] == scores[g][1] and not scores[g][2]}
    outs = run.outputs(student)
    if student == "good":
        assert earned == set(auto), f"the solution lost {set(auto) - earned}: {outs}\n{run.log[-2000:]}"
        assert not any(MARK in t or "restored" in t for t in outs.values()), outs
        return
    assert not earned, f"{student} earned {sorted(earned)} with a wrong answer: {outs}"
    if student != "wrong":
        seen = GUARD_CASES[student][1]
        assert any(seen in text for text in outs.values()), f"{student}: no {seen!r} in {outs}"
