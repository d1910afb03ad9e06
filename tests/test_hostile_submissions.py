"""A class of broken, careless and hostile submissions, autograded by ``nbgrader autograde`` with
this repository's configuration (sandboxed kernel, limits, monkeypatch guard).

Two cheap assignments (no torch in ``toy``; ``guarded`` imports torch for the monkeypatch cases)
are graded once per module, each class in one ``nbgrader autograde`` run, so every case also
shows that the rest of the class is graded: ``good`` is in the same batch and must get full marks.
Expectations are per test cell (``EXPECT``: grade_id -> earns its points?) plus the error name a
reader of the autograded notebook finds (the reason an instructor or a class summary can state:
CellTimeoutError, OutputLimitError, KernelDied, NotRun, GradingIntegrityError, MemoryError, ...).
The toy class also holds the submissions that install hooks on IPython's execution path
(``SHELL_HOOKS``: input/AST transformers, callbacks, a custom exception handler, a tracer, replaced
methods, a wrapped guard), which must score 0 with the reason named, and one (``hook_harmless``)
that uses the same families harmlessly and keeps full marks.
The toy class runs with short limits for speed (6 s per cell, 1.5 GB address space, 64 processes,
200 kB output per cell); the guarded class (torch) with the configured ones.
"""
import json
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from autograder import draw_key, grading, sandbox, toy_course
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
                   ("the key of hidden draws", root + "/.draw_key"),
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
import ctypes, subprocess, sys
def read_kernel():  # a process of the submission's opens the kernel's memory (what py-spy reads)
    return subprocess.run([sys.executable, "-c", f"open('/proc/{{os.getpid()}}/mem', 'rb')"],
                          capture_output=True).returncode == 0
print("LEAK read the kernel's memory" if read_kernel() else "BLOCKED read the kernel's memory")
prctl = ctypes.CDLL(None).prctl
prctl(4, 1, 0, 0, 0)  # control: PR_SET_DUMPABLE 1, as the kernel would be without the guard
print("CONTROL the kernel's memory", "readable" if read_kernel() else "unreadable", "once dumpable")
prctl(4, 0, 0, 0, 0)
"""


UNTOUCHED_SQ = "def square(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
UNTOUCHED_CUBE = "def cube(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
SOLVED_CUBE = "def cube(x):\n    return x ** 3"
IP = "ip = get_ipython()\n"
# A hook the submission installs on IPython's execution path, one per family (tests/ issue 16):
# student -> (first lines of the answer cell, solved?, text the autograded notebook must show).
# Without the shell guard each of these earns the test cells' points; with it, they score 0.
SHELL_HOOKS = {
    # the line, on the untouched release: every later cell, the tests too, becomes `pass`
    "hook_input_post": ("get_ipython().input_transformers_post.append(lambda lines: ['pass\\n'])", False,
                        "input transformer (post) <lambda> rewrote its code"),
    # on a solved notebook: rewriting a test cell voids it even where the answer is right
    "hook_input_cleanup": ("get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\n'])",
                           True, ("GradingIntegrityError: the submission changed how IPython runs cells",
                                  "input transformer (cleanup) <lambda> rewrote its code")),
    "hook_ast": ("import ast\nclass Blank(ast.NodeTransformer):\n    def visit_Module(self, node):\n"
                 "        node.body = [ast.Pass()]\n        return node\nget_ipython().ast_transformers.append(Blank())",
                 True, "AST transformer Blank rewrote its code"),
    # hooks IPython lets a notebook add for its own cells, suspended around each test (one student
    # for the three families, to keep the class small): a callback that clears the failing test's
    # output, a handler that swallows every exception, a tracer that jumps over assert lines
    "hook_suspended": ("from IPython.display import clear_output\n"
                       "get_ipython().events.register('post_run_cell', lambda result: clear_output())\n"
                       "get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)\n"
                       "import sys, linecache\ndef skip(frame, event, arg):\n    if event == 'line':\n"
                       "        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)\n"
                       "        if line.lstrip().startswith('assert'):\n            for n in range(1, 5):\n"
                       "                try:\n                    frame.f_lineno += n\n                    break\n"
                       "                except ValueError:\n                    pass\n    return skip\n"
                       "sys.settrace(skip)", False,
                       ("without the submission's own hooks (put back after the test): post_run_cell callback",
                        "custom exception handler (set_custom_exc for Exception)",
                        "the grader removed the submission's: sys.settrace(skip)")),
    # IPython's own methods replaced: on the instance (error display, run_cell) and in the class
    "hook_replaced": ("get_ipython().showtraceback = lambda *a, **k: None\n" + IP +
                      "_run = ip.run_cell\ndef run_cell(raw, *a, **k):\n"
                      "    return _run(raw if raw.startswith('#') else 'pass', *a, **k)\nip.run_cell = run_cell\n"
                      "type(ip).transform_cell = lambda self, raw: raw if raw.startswith('#') else 'pass\\n'",
                      False, ("shell.showtraceback (replaced on the instance)",
                              "shell.run_cell (replaced on the instance)",
                              "ZMQInteractiveShell.transform_cell (added to the class)")),
    # code of the submission's that would run in the kernel during a test without being called by
    # it, on the test's frames: a fork handler (inside every graded call's fork) and a thread of its own
    "hook_fork_handler": ("import os\nos.register_at_fork(before=lambda: None)", True, "(a fork handler)"),
    "hook_thread": ("import threading, time\ndef watch():\n    while True:\n        time.sleep(0.05)\n"
                    "threading.Thread(target=watch, daemon=True).start()", True,
                    "a thread running watch (started by the submission)"),
    # the guard's own pre_run_cell hook, wrapped: the wrapper tampers again after the guard checked
    "hook_guard_wrapped": (IP + "guard = ip.events.callbacks['pre_run_cell'][-1]\n"
                           "ip.events.unregister('pre_run_cell', guard)\ndef wrapper(info):\n    guard(info)\n"
                           "    ip.input_transformers_post[:] = [lambda lines: ['pass\\n']]\n"
                           "ip.events.register('pre_run_cell', wrapper)", False,
                           "the guard's hook was called by wrapper (wrapped)"),
}
# ordinary uses of the same families, on a solved notebook: full marks, nothing voided
HARMLESS_HOOKS = (IP + "ip.input_transformers_post.append(lambda lines: lines)\n"
                  # a rich-traceback library's move: the error display replaced (restored, noted)
                  "_show = ip.showtraceback\nip.showtraceback = lambda *a, **k: _show(*a, **k)\n"
                  "import ast\nclass Nothing(ast.NodeTransformer):\n    pass\nip.ast_transformers.append(Nothing())\n"
                  "runs = []\nip.events.register('post_run_cell', lambda result: runs.append(1))\n"
                  "ip.events.register('pre_execute', lambda: None)\n"
                  "def zero_handler(self, etype, value, tb, tb_offset=None):\n"
                  "    self.showtraceback((etype, value, tb), tb_offset=tb_offset)\n"
                  "ip.set_custom_exc((ZeroDivisionError,), zero_handler)\n"
                  "import sys\nsys.settrace(lambda frame, event, arg: None)\n"
                  # a garbage-collector callback and a signal handler: suspended while a test runs
                  "import gc, signal\ngc.callbacks.append(lambda phase, info: None)\n"
                  "signal.signal(signal.SIGUSR2, lambda *a: None)\n" + SQ)


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
        # bytes(n), not bytearray(n): both take n bytes of address space, which the 1.5 GB limit
        # refuses; bytearray also writes every page it takes, up to 1.4 GB, which took this cell past
        # its 6 s limit on a fresh clone with both cores busy (2026-12-07). tests/test_sandbox.py's
        # bomb writes its pages, under a 20 s limit
        "memory_bomb": ({"square": SQ + "\ndef _bomb():\n    hog = []\n    for _ in range(100):\n"
                                        "        hog.append(bytes(50 * 2**20))\n_bomb()"},
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
        "hook_harmless": ({"square": HARMLESS_HOOKS}, full, None),
        **{student: ({"square": hook + "\n" + (SQ if solved else UNTOUCHED_SQ),
                      "cube": SOLVED_CUBE if solved else UNTOUCHED_CUBE},
                     {"test_square": False, "test_cube": False}, reason)
           for student, (hook, solved, reason) in SHELL_HOOKS.items()},
    }


GUARDED_SOURCE = [
    ("setup", "import math\nimport torch", dict(locked=True)),
    # the solution's first optimizer step imports torch._dynamo, which rebinds torch.manual_seed
    # itself, during the first test: not the submission's patch (issue 11)
    ("halve", "def halve(t):\n    ### BEGIN SOLUTION\n    w = torch.zeros(1, requires_grad=True)\n"
              "    (2 * w).sum().backward()\n    torch.optim.SGD([w], lr=0.1).step()\n"
              "    return t / 2\n    ### END SOLUTION",
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
    # garbage made while the guard puts things back (after its collection): an object whose
    # finalizer, run by the guard's restore of math.isclose, makes a cycle with a finalizer of its
    # own, which looks for a test cell on the stack (and, until it finds one, leaves another
    # cycle for the next collection); frozen with the rest before the test, the last one is never
    # collected, so ``seen`` stays empty (without the pre stage's gc.freeze it is collected in the
    # test, and halve answers right)
    "finalizer_after_restore": ("import gc, linecache, math, sys\nseen = []\nclass Late:\n    def __init__(self):\n"
                                "        self.me = self\n    def __del__(self, seen=seen):\n"
                                "        f = sys._getframe(1)\n        while f is not None:\n"
                                "            if 'halve(torch.' + 'tensor' in ''.join(linecache.getlines(f.f_code.co_filename)):\n"
                                "                seen.append(1)\n            f = f.f_back\n"
                                "        if not seen:\n            Late()\n"
                                "class Drop:\n    def __del__(self, Late=Late):\n        Late()\n"
                                "_drop = Drop()\nmath.isclose = lambda *a, _keep=_drop, **k: True\ndel _drop\n"
                                "gc.set_threshold(50)\n"
                                "def halve(t):\n    return t / 2 if seen else t", "math.isclose"),
    "patch_abs": (WRONG + "\nimport builtins\nbuiltins.abs = lambda x: 0\n"
                          "builtins.AssertionError = type('Quiet', (Exception,), {})",
                  "builtins.abs, builtins.AssertionError"),
    # replacing isinstance breaks the kernel's own messaging: it stops answering, the rest is not run
    "patch_isinstance": ("import builtins\nbuiltins.isinstance = lambda *a: True\n"
                         "class Fake:\n    def __float__(self):\n        return -4.0\n"
                         "def halve(t):\n    return Fake()", "CellTimeoutError"),
    "shadow_abs": (WRONG + "\ndef abs(x):\n    return 0", "global abs (shadows the builtin)"),
    # a right answer that empties the grader's secret for the test's hidden draws while the test
    # runs, so that draws made after it are the ones the test cell's text describes: void
    "salt_emptied": ("def halve(t):\n    from course.toolkit import salts\n    salts.CURRENT[0] = ''\n"
                     "    return t / 2", "the grader's salt for this test's hidden draws"),
    "patch_import": (WRONG + "\nimport builtins, types\n_real = builtins.__import__\n"
                             "def _fake(name, *a, **k):\n    if name == 'torch.testing':\n"
                             "        return types.SimpleNamespace(assert_close=lambda *a, **k: None)\n"
                             "    return _real(name, *a, **k)\nbuiltins.__import__ = _fake",
                     "builtins.__import__"),
    # a real patch of torch.manual_seed is still named, torch._dynamo imported after it or not; a
    # guarded module the notebook imports only later (course.exercises.mystery) is guarded too
    "patch_seed_mystery": (WRONG + "\ntorch.manual_seed = lambda *a, **k: None\nimport torch._dynamo\n"
                           "import course.exercises.mystery\ncourse.exercises.mystery.check_fix = lambda *a, **k: None",
                           ("torch.manual_seed", "course.exercises.mystery.check_fix")),
    # a stdout of the submission's (red team, run 6: the grader echoes a graded call's output there,
    # on the test's frames): put back before every test, and named
    "rebind_stdout": (WRONG + "\nimport sys\nclass Tee:\n    def __init__(self, real):\n        self.real = real\n"
                              "    def write(self, s):\n        return self.real.write(s)\n"
                              "    def flush(self):\n        return self.real.flush()\n"
                              "sys.stdout = Tee(sys.stdout)", "sys.stdout (rebound)"),
    # a right answer that rebinds stdout, or swaps a package function's code, while the test runs:
    # the test is void (the kernel runs learner code during a test only where check_fix re-runs a fix)
    "rebind_stdout_in_call": ("def halve(t):\n    import io, sys\n    sys.stdout = io.StringIO()\n    return t / 2",
                              ("sys.stdout (rebound)", "replaced while it ran")),
    "swap_code_in_call": ("def halve(t):\n    import course.exercises.mystery as m\n"
                          "    m.kept_problems.__code__ = (lambda *a, **k: []).__code__\n    return t / 2",
                          ("course.exercises.mystery.kept_problems.__code__", "replaced while it ran")),
    # an object planted in the kernel's own stream (red team, run 7: sys.stdout.echo): the guard's
    # report, written as the test cell starts, ran it with the test's source on the stack. Here it
    # makes a wrong halve right once it has seen a test; put back before every test, it never does
    "stream_echo": ("import sys\nseen = []\nclass Echo:\n    def write(self, s):\n"
                    "        f = sys._getframe(1)\n        while f is not None:\n"
                    "            if 'allclose(halve' in str(f.f_locals.get('cell', '')):\n"
                    "                seen.append(1)\n            f = f.f_back\n        return len(s)\n"
                    "    def flush(self):\n        pass\nsys.stdout.echo = Echo()\n"
                    "def halve(t):\n    return t / 2 if seen else t", "sys.stdout.echo (replaced)"),
    # code that waits to run during the test: a timer thread, a callback on the kernel's event loop
    "timer_thread": (WRONG + "\nimport threading\nthreading.Timer(600, lambda: None).start()",
                     "a thread that will run"),
    "loop_callback": (WRONG + "\nimport asyncio\nasyncio.get_event_loop().call_later(600, lambda: None)",
                      "a callback scheduled on the kernel's event loop"),
    # what the import machinery reads when a test imports a module it already has: a ModuleSpec of
    # the submission's class, whose _initializing ran on the test's frames at the test's import
    # line (red team, run 8); planted before the tests (put back), or during one (void)
    "spec_spy": ("import sys, linecache, importlib.machinery, torch.testing\nseen = []\n"
                 "class Spec(importlib.machinery.ModuleSpec):\n    @property\n    def _initializing(self):\n"
                 "        f = sys._getframe(1)\n"
                 "        if 'assert_close(halve' in ''.join(linecache.getlines(f.f_code.co_filename)):\n"
                 "            seen.append(1)\n        return False\n"
                 "    @_initializing.setter\n    def _initializing(self, value):\n        pass\n"
                 "real = torch.testing.__spec__\nspy = Spec(real.name, real.loader, origin=real.origin)\n"
                 "spy.submodule_search_locations = real.submodule_search_locations\n"
                 "torch.testing.__spec__ = spy\n"
                 "def halve(t):\n    return t / 2 if seen else t", "torch.testing.__spec__ (replaced)"),
    "spec_in_call": ("def halve(t):\n    import math, importlib.machinery\n"
                     "    class Spec(importlib.machinery.ModuleSpec):\n        pass\n"
                     "    math.__spec__ = Spec('math', None)\n    return t / 2",
                     ("math.__spec__ (replaced)", "replaced while it ran")),
    # an object with a finalizer bound to a name the test rebinds by importing: dropped by the
    # test's own import line, its __del__ ran on the test's frames (red team, run 9); the guard now
    # drops it before the test, where no test is on the stack
    "finalizer_import": ("import sys, linecache\nseen = []\nclass Trigger:\n    def __del__(self):\n"
                         "        f = sys._getframe(1)\n        while f is not None:\n"
                         "            if 'assert_close(halve' in ''.join(linecache.getlines(f.f_code.co_filename)):\n"
                         "                seen.append(1)\n            f = f.f_back\n"
                         "assert_close = Trigger()\n"
                         "def halve(t):\n    return t / 2 if seen else t", None),
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


def _toy_class(tmp, port):
    root = grading.make_course_copy(tmp, [])
    draw_key.write_key(root, b"a key of the hostile class")  # for the snoop to reach for
    cases = toy_cases(root, port)
    log = _grade(root, "toy", toy_course.toy_notebook(),
                 lambda src: {s: grading.edit_cells(src, edits) for s, (edits, _, _) in cases.items()}, LIMITS)
    return Run(root, "toy", log), cases


def _guarded_class(tmp):
    root = grading.make_course_copy(tmp, [])
    draw_key.write_key(root, b"a key of the guarded class")  # each test gets a secret (salt_emptied)
    source = _notebook(GUARDED_SOURCE, "guarded")

    def submissions(src):
        subs = {"good": src, "wrong": grading.edit_cells(src, {"halve": WRONG})}
        subs.update({s: grading.edit_cells(src, {"halve": code}) for s, (code, _) in GUARD_CASES.items()})
        return subs
    # a cell limit of 30 s, not the course's 120: patch_isinstance's kernel stops answering, and the
    # limit is how long the class waits for it (every other cell here takes well under a second)
    return Run(root, "guarded", _grade(root, "guarded", source, submissions, ["--SandboxedExecute.timeout=30"]))


@pytest.fixture(scope="module")
def classes(tmp_path_factory, listener):
    """Both classes, graded at the same time (two ``nbgrader autograde`` runs, one thread each):
    each run spends much of its time waiting on its kernels (cell limits, kernels that stop
    answering), so together they take little more than the longer one alone. Each is still one
    batch of its own."""
    assert sandbox.probe() is None, sandbox.probe()
    sandbox.install()
    with ThreadPoolExecutor(max_workers=2) as pool:
        toy = pool.submit(_toy_class, tmp_path_factory.mktemp("hostile"), listener.getsockname()[1])
        guarded = pool.submit(_guarded_class, tmp_path_factory.mktemp("guarded"))
        yield {"toy": toy, "guarded": guarded}


@pytest.fixture(scope="module")
def toy_class(classes):
    return classes["toy"].result()


@pytest.fixture(scope="module")
def guarded_class(classes):
    return classes["guarded"].result()


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
    for text in (reason,) if isinstance(reason, str) else reason or ():
        assert any(text in out for out in outs.values()), f"{student}: no {text!r} in {outs}"
    size = (run.root / "autograded" / student / "toy" / "toy.ipynb").stat().st_size
    assert size < 1_000_000, f"{student}: autograded notebook is {size} bytes"


def test_not_run_cells_say_why(toy_class):
    """After a limit stops a notebook, the later test cells carry a NotRun error naming the cause."""
    run, _ = toy_class
    assert "NotRun: not run: cell" in run.outputs("loop_after")["test_cube"]
    assert "kernel died" in run.outputs("kernel_dies")["test_square"]


def test_snoop_is_blocked(toy_class, listener):
    """The submission that reads solutions/gradebook/hidden tests/the key of hidden draws, writes the
    gradebook and another student's submission, opens a socket to the host and opens the kernel's
    memory from a process of its own (what py-spy needs: red team, run 11): all blocked, nothing
    changed on the host (the course's key file was there to read). Control: once the submission
    makes the kernel dumpable again, the same process opens it."""
    run, _ = toy_class
    out = run.outputs("snoop")["square"]
    assert "LEAK" not in out and out.count("BLOCKED") == 9, out
    assert "CONTROL the kernel's memory readable once dumpable" in out, out
    assert (run.root / draw_key.KEY_FILE).is_file(), "the key was there to read"
    assert b"HOSTILE-MARKER" not in (run.root / "gradebook.db").read_bytes()
    assert b"HOSTILE-MARKER" not in (run.root / "submitted/good/toy/toy.ipynb").read_bytes()
    with pytest.raises(OSError):
        listener.accept()


def test_harmless_hooks_cost_nothing(toy_class):
    """Ordinary uses of IPython's hooks (a do-nothing input or AST transformer, counting callbacks,
    a custom handler for another exception, a tracer) keep full marks and void nothing; they are
    suspended around each test and put back for the notebook's own cells."""
    run, _ = toy_class
    outs = run.outputs("hook_harmless")
    assert not any("GradingIntegrityError" in text for text in outs.values()), outs
    assert "put back after the test" in outs["test_square"], outs
    assert "restored what the submission had replaced" in outs["test_square"] and \
        "showtraceback" in outs["test_square"], outs


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
    if student != "wrong" and GUARD_CASES[student][1] is not None:  # (None: nothing to name)
        seen = GUARD_CASES[student][1]
        for text in (seen,) if isinstance(seen, str) else seen:
            assert any(text in out for out in outs.values()), f"{student}: no {text!r} in {outs}"
