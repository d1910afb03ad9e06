"""The Execute preprocessor of ``nbgrader autograde``: student code only in the sandboxed kernel.

nbgrader_config.py puts ``SandboxedExecute`` in place of nbgrader's ``Execute`` in
``Autograde.autograde_preprocessors`` (``nbgrader validate`` keeps plain ``Execute`` and the normal
kernel). On top of ``Execute`` it:
- refuses to run (raises, so nbgrader records the submission as failed) unless the sandbox works
  here (``autograder.sandbox.probe``), or COURSE_ALLOW_UNSANDBOXED=1 is set;
- starts the kernel ``debug-course-sandboxed`` on the ipc transport, with its connection file and
  sockets in a private temporary folder (removed afterwards), and passes the resource limits;
- leaves unrun the untouched demonstrations that nothing run after them needs (cells tagged
  ``demo`` in the source notebook: ``autograder.demo_cells``; only their imports run, and their
  output says so); ``SandboxedExecute.skip_demos = False`` runs every cell;
- stops the run at the first cell that breaks a limit: a cell past ``timeout`` (CellTimeoutError),
  a cell printing more than ``max_output_bytes`` (OutputLimitError, interrupted), a kernel that
  dies (KernelDied: CPU limit, os._exit, crash) or stops answering (CellTimeoutError: no output
  within ``iopub_timeout``, e.g. after replacing a builtin the kernel itself needs). Every later code cell gets a ``NotRun`` error
  output, so every later test cell scores 0, and the reason is in the notebook and the feedback;
- around each autograder-test cell, asks the kernel's guard (``kernel_guard``) to restore what the
  test relies on and IPython's execution path (its notes go on top of the test's output), takes
  the guard's report out of the test cell's own output, and fails the test (GradingIntegrityError)
  if the submission changed how IPython runs cells (a replaced method or helper, a transformer
  that rewrites the test, a wrapped guard hook), if something the test relies on was replaced
  while it ran, or if the guard does not answer before, at the start of, or after the test;
- with a course key (``autograder.draw_key``), sends each test's secret in the test cell's own
  request (its metadata, ``kernel_guard.SECRET_METADATA``), never in a cell's text, tells the guard's
  pre stage only that one is coming (``keyed``), and fails a test whose guard did not take it.
- passes the nbgrader student id to the kernel (``COURSE_STUDENT_ID``; ``course.exercises.identity`` reads it
  once, at kernel start, and the guard keeps it): a draw keyed by identity (the capstone) comes
  from the grader, not from what the notebook says;
- GPU tests: a test cell tagged ``gpu`` in the source notebook (by grade_id, so a submission cannot
  untag it) runs only when the grading kernel has CUDA: ``GRADE_KERNEL=gpu`` says it has (and
  ``GRADE_KERNEL=cpu`` that it has not); otherwise the kernel is asked (``torch.cuda``, after the
  cells before it ran), and on a host without ``/dev/nvidia*`` the answer is no without asking.
  Without CUDA the cell is not run: its output is the one line ``not graded: needs a GPU kernel``
  and nbgrader records no automatic score for it (``auto_score`` None, so ``needs_manual_grade``):
  never passed, never a silent zero. ``make summary`` and the class report say why.
Error names a reader of the autograded notebook can rely on: CellTimeoutError, OutputLimitError,
KernelDied, NotRun, GradingIntegrityError (plus the student's own, e.g. MemoryError).
"""
from __future__ import annotations

import ast
import asyncio
import hashlib
import json
import os
import shutil
import tempfile

import nbformat
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import ensure_async, run_sync
from nbformat.v4 import new_code_cell, new_output
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import Execute
from traitlets import Bool, Integer, Unicode

from autograder import demo_cells, draw_key, sandbox
from autograder.kernel_polls import SlicedPolls
from autograder.kernel_guard import PRELOAD_ENV, SECRET_METADATA
from autograder.gpu_points import NOT_GRADED_GPU  # the line a GPU test left unrun gets (one source)

_PROBED: dict[str, str | None] = {}

GPU_TAG = "gpu"
GPU_KERNEL_NAME = "debug-course-gpu-sandboxed"
# grade_ids of the notebook being graded whose GPU test was left unrun (no CUDA). nbgrader's
# SaveAutoGrades runs after this preprocessor in the same process and scores a code cell from its
# outputs (nbgrader.utils.determine_grade): for these cells it must record no score at all.
_UNGRADED_GPU: set[str] = set()


def _determine_grade(cell, log=None):
    meta = cell.get("metadata", {}).get("nbgrader", {})
    if cell.get("cell_type") == "code" and meta.get("grade") and not meta.get("solution") \
            and meta.get("grade_id") in _UNGRADED_GPU:
        return None, float(meta["points"])
    return _nbgrader_determine_grade(cell, log)


import nbgrader.utils as _nbgrader_utils  # noqa: E402

if getattr(_nbgrader_utils.determine_grade, "__name__", "") != "_determine_grade":
    _nbgrader_determine_grade = _nbgrader_utils.determine_grade
    _nbgrader_utils.determine_grade = _determine_grade
else:  # imported twice (reload): keep the original from the first import
    _nbgrader_determine_grade = _nbgrader_utils.determine_grade.__globals__["_nbgrader_determine_grade"]


def gpu_cells(nb) -> set[str]:
    """grade_ids of the test cells tagged ``gpu`` in a notebook (a NotebookNode or a plain dict)."""
    found = set()
    for c in nb["cells"]:
        meta = c.get("metadata", {}).get("nbgrader", {})
        if c.get("cell_type") == "code" and meta.get("grade") and not meta.get("solution") \
                and GPU_TAG in c.get("metadata", {}).get("tags", []):
            found.add(meta.get("grade_id"))
    return found


def grade_kernel_has_cuda() -> bool | None:
    """True / False when ``GRADE_KERNEL`` (gpu / cpu) or the host decides it; None: ask the kernel."""
    kind = os.environ.get("GRADE_KERNEL", "").strip().lower()
    if kind in ("gpu", "cpu"):
        return kind == "gpu"
    if not (os.path.exists("/dev/nvidiactl") or any(n.startswith("nvidia") for n in _listdir("/dev"))):
        return False
    return None


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _error(ename: str, evalue: str):
    return new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def _names(source: str) -> list[str]:
    """Every bare name a test cell's code uses (the names a submission could shadow)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return sorted(found)


def _stores(source: str) -> list[str]:
    """The names a test cell's top-level code binds (the guard frees their old values first, so a
    finalizer of the submission's never runs when the test rebinds one): assignment targets, loop,
    ``with`` and ``except`` names, names an ``import`` binds (``import a.b`` binds ``a``), the names
    of functions and classes it defines, and ``match`` captures; not the names bound inside a
    function, class or lambda it defines (red team, run 9: ``from ... import mystery as _mystery``
    rebound a finalizer's object on the test's frames)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = set()
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)

    def visit(node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, ast.alias):
            found.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            found.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            found.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            found.add(node.rest)
        if isinstance(node, scopes):
            # a definition's decorators, defaults and bases run here; its body does not
            for part in ([*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]
                         if not isinstance(node, (ast.ClassDef, ast.Lambda)) else
                         [*node.decorator_list, *node.bases, *node.keywords] if isinstance(node, ast.ClassDef)
                         else [*node.args.defaults, *node.args.kw_defaults]):
                if part is not None:
                    visit(part)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    for node in tree.body:
        visit(node)
    found.discard("*")
    return sorted(found)


HIDDEN_MARK = "BEGIN HIDDEN TESTS"  # nbgrader's ClearHiddenTests.begin_test_delimeter


def pre_payload(source: str, keyed: bool) -> dict:
    """What the guard's control cell before a test carries (``kernel_guard``): the names the test
    binds, its sha256, what the kernel keeps of it afterwards (its text in the compile cache, by
    sha256, and, for a test with hidden parts, the names it stores), and whether a secret comes with
    the test's own request (never the secret itself)."""
    return {"names": _names(source), "stores": _stores(source),
            "sha": hashlib.sha256(source.encode()).hexdigest(),
            "text_sha": hashlib.sha256(source.rstrip("\n").encode()).hexdigest(),
            "forget": _stores(source) if HIDDEN_MARK in source else [],
            "keyed": keyed}


def _is_test(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def imports_course(nb) -> bool:
    """Whether a code cell of ``nb`` imports the ``course`` package (an ``import`` or ``from ...
    import`` of ``course`` or a module under it, anywhere in the cell); a cell that does not parse
    as Python (an IPython magic, or one past the parser's limits) counts as one that does.

    The grader asks it of the assignment's source notebook and of the notebook it is about to run
    (after nbgrader put the source's test cells back: it re-adds a deleted one and restores an
    edited one), and imports the package before any submitted code if either says yes
    (``kernel_guard.PRELOAD_ENV``). A submission can add an import, never take the source's
    away; every notebook of this course imports course, in its test cells too. A notebook that
    never does (a toy course's) is spared that import, and torch with it (about 2.4 s a kernel)."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except demo_cells.UNPARSEABLE:
            return True
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            if any(n == "course" or n.startswith("course.") for n in names):
                return True
    return False


class SandboxedExecute(SlicedPolls, Execute):
    kernel_name = Unicode(sandbox.KERNEL_NAME, help="the sandboxed kernelspec").tag(config=True)
    gpu_kernel_name = Unicode(GPU_KERNEL_NAME, help="the sandboxed kernelspec used under GRADE_KERNEL=gpu "
                              "(make gpu-kernel registers it)").tag(config=True)
    cpu_seconds = Integer(600, help="RLIMIT_CPU of the kernel (whole run)").tag(config=True)
    memory_mb = Integer(8192, help="RLIMIT_AS of the kernel, MiB").tag(config=True)
    max_processes = Integer(256, help="RLIMIT_NPROC (processes and threads)").tag(config=True)
    max_file_mb = Integer(64, help="RLIMIT_FSIZE, MiB").tag(config=True)
    tmp_mb = Integer(256, help="size of each tmpfs the kernel can write, MiB").tag(config=True)
    max_output_bytes = Integer(2_000_000, help="output bytes a cell may print").tag(config=True)
    guard = Bool(True, help="run the monkeypatch guard around test cells").tag(config=True)
    skip_demos = Bool(True, help="leave untouched demo cells that no later cell needs unrun "
                      "(autograder/demo_cells.py)").tag(config=True)

    # -- kernel start -------------------------------------------------------------------------
    def preprocess(self, nb, resources=None, km=None):
        key = os.environ.get("COURSE_BWRAP", "bwrap")
        if key not in _PROBED:
            _PROBED[key] = sandbox.probe()
        reason = _PROBED[key]
        if reason is not None:
            if os.environ.get(sandbox.ALLOW_ENV) != "1":
                raise RuntimeError(
                    f"refusing to autograde without the sandbox: {reason}. Student code would run "
                    f"as the grader, able to read solutions and write the gradebook. Fix the "
                    f"machine (make sandbox), or set {sandbox.ALLOW_ENV}=1 to grade unprotected.")
            self.log.warning("grading WITHOUT the sandbox (%s=1): %s", sandbox.ALLOW_ENV, reason)
        self._stopped = None
        # the nbgrader student id, for the kernel's environment (course.exercises.identity reads it)
        self._student = str((resources or {}).get("nbgrader", {}).get("student") or "")
        source = self._source_notebook(resources)
        self._preload = imports_course(nb) or (source is not None and imports_course(source))
        self._skip = self._demo_cells(nb, resources) if self.skip_demos else set()
        _UNGRADED_GPU.clear()
        self._gpu_tests = self._gpu_tests_of(nb, resources)
        # the course's key of hidden draws (autograder.draw_key): each test cell's secret is mixed
        # into its salted draws; without a key the draws are the test cells' own
        self._assignment = str((resources or {}).get("nbgrader", {}).get("assignment") or "")
        self._key = draw_key.course_key(CourseDirectory(config=self.config).root)
        if self._key is None:
            self.log.warning("no key of hidden draws (%s or .draw_key in the course root): hidden draws "
                             "are the ones written in the test cells (make draw-key)", draw_key.ENV)
        self._cuda = grade_kernel_has_cuda() if self._gpu_tests else False
        self._private = tempfile.mkdtemp(prefix="course-kernel-")
        try:
            return super().preprocess(nb, resources, km)
        finally:
            shutil.rmtree(self._private, ignore_errors=True)

    def _demo_cells(self, nb, resources) -> set[int]:
        """The cells of this submission that need not run (``autograder.demo_cells``), judged
        against the assignment's source notebook; none when it cannot be read."""
        info = (resources or {}).get("nbgrader", {})
        if not info.get("assignment"):  # not run by nbgrader (a direct call): nothing to compare with
            return set()
        course = CourseDirectory(config=self.config)
        path = os.path.join(course.format_path(course.source_directory, ".", info.get("assignment", "")),
                            f"{info.get('notebook', '')}.ipynb")
        try:
            source = nbformat.read(path, as_version=4)
        except (OSError, ValueError) as err:
            self.log.warning("demo cells not skipped: cannot read the source notebook %s (%s)", path, err)
            return set()
        return demo_cells.skippable(nb.cells, demo_cells.demo_sources(source))

    def _gpu_tests_of(self, nb, resources) -> set[str]:
        """The GPU tests, by grade_id, as the source notebook tags them (the submission's own tags
        when there is no source to read: a direct call)."""
        source = self._source_notebook(resources)
        return gpu_cells(source if source is not None else nb)

    def _source_notebook(self, resources):
        info = (resources or {}).get("nbgrader", {})
        if not info.get("assignment"):
            return None
        course = CourseDirectory(config=self.config)
        path = os.path.join(course.format_path(course.source_directory, ".", info.get("assignment", "")),
                            f"{info.get('notebook', '')}.ipynb")
        try:
            return nbformat.read(path, as_version=4)
        except (OSError, ValueError):
            return None

    def _kernel_has_cuda(self, index: int) -> bool:
        """Ask the kernel once whether torch sees a CUDA device."""
        probe = new_code_cell("print('course-cuda:', bool(__import__('torch').cuda.is_available()))")
        cell = self.nb.cells[index]
        try:
            self.execute_cell(probe, index, store_history=False)
        except Exception:  # noqa: BLE001 (no answer is no CUDA)
            return False
        finally:
            self.nb.cells[index] = cell
        return any(o.get("output_type") == "stream" and "course-cuda: True" in o.get("text", "")
                   for o in probe.get("outputs", []))

    def create_kernel_manager(self):
        if os.environ.get("GRADE_KERNEL", "").strip().lower() == "gpu":
            self.kernel_name = self.gpu_kernel_name
        km = super().create_kernel_manager()
        km.transport = "ipc"
        km.connection_file = os.path.join(self._private, "kernel.json")
        km.ip = os.path.join(self._private, "ipc")
        km.shutdown_wait_time = 2.0
        return km

    async def async_start_new_kernel(self, **kwargs):
        env = dict(kwargs.pop("env", None) or os.environ)
        env.pop(draw_key.ENV, None)  # the key of hidden draws stays with the grader, sandbox or not
        env.update({"COURSE_SANDBOX_CPU_S": str(self.cpu_seconds),
                    "COURSE_SANDBOX_MEMORY_MB": str(self.memory_mb),
                    "COURSE_SANDBOX_NPROC": str(self.max_processes),
                    "COURSE_SANDBOX_FILE_MB": str(self.max_file_mb),
                    "COURSE_SANDBOX_TMP_MB": str(self.tmp_mb),
                    "COURSE_GUARD": "1" if self.guard else "0",
                    "COURSE_STUDENT_ID": getattr(self, "_student", ""),
                    PRELOAD_ENV: "1" if getattr(self, "_preload", True) else "0"})
        if os.environ.get("GRADE_KERNEL", "").strip().lower() == "gpu":
            env["COURSE_SANDBOX_GPU"] = "1"  # the device nodes in, no address-space limit (sandbox.py)
        return await super().async_start_new_kernel(env=env, **kwargs)

    start_new_kernel = run_sync(async_start_new_kernel)  # nbclient binds the base method otherwise

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        """A test cell runs with ``store_history=False``: its text, hidden tests included, never
        enters the kernel's input history, where a later cell of the submission could read it. Its
        request carries the test's secret in its metadata (``kernel_guard.SECRET_METADATA``), for
        the guard to take out at the test's start."""
        if getattr(self, "_unstored", False):
            store_history = False
        secret = getattr(self, "_secret", "")
        session = self.kc.session
        session.metadata = {SECRET_METADATA: secret} if secret else {}
        try:
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        finally:
            session.metadata = {}

    execute_cell = run_sync(async_execute_cell)

    # -- cells --------------------------------------------------------------------------------
    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code" or not cell.source.strip():
            return cell, resources
        if self._stopped:
            cell.outputs = [_error("NotRun", f"not run: {self._stopped}")]
            return cell, resources
        if index in self._skip:  # an untouched demonstration: only its imports run
            source, code = cell.source, demo_cells.imports(cell.source)
            outputs = []
            if code:
                cell.source = code
                cell, resources = self._run_cell(cell, resources, index)
                outputs = [o for o in cell.outputs if o.output_type == "error"]
                cell.source = source
            cell.outputs = [new_output("stream", name="stdout", text=demo_cells.NOTE)] + outputs
            cell.execution_count = None
            return cell, resources
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if _is_test(cell) and gid in self._gpu_tests:
            if self._cuda is None:
                self._cuda = self._kernel_has_cuda(index)
            if not self._cuda:
                cell.outputs = [new_output("stream", name="stdout", text=NOT_GRADED_GPU + "\n")]
                cell.execution_count = None
                _UNGRADED_GPU.add(gid)
                return cell, resources
        return self._run_cell(cell, resources, index)

    def _run_cell(self, cell, resources, index):
        test = _is_test(cell) and self.guard
        restored, void = [], []
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        # the test's secret travels in the test cell's own request (its metadata), which the kernel
        # reads once the guard has put everything back; never in a cell's text (see kernel_guard)
        secret = draw_key.cell_secret(self._key, self._assignment, gid) if test else ""
        if test:
            report = self._guard(f"pre {json.dumps(pre_payload(cell.source, bool(secret)))}", index)
            if report is None or report.get("stage") != "pre":
                why = report.get("error", "") if report else ""
                cell.outputs = [_error("GradingIntegrityError", "the grading guard did not answer "
                                       f"before this test (was it disabled?{' ' + why if why else ''}); "
                                       "the test was not run")]
                return cell, resources
            restored = report.get("restored", [])
            notes = [("the grader restored what the submission had replaced", restored),
                     ("the grader removed the submission's", report.get("removed", [])),
                     ("the grader ran this test without the submission's own hooks (put back after "
                      "the test)", report.get("suspended", []))]
            void = list(report.get("tampered", []))
        self._timed_out = False
        self._cell_bytes, self._over = 0, False
        self._unstored = test  # a test cell runs outside the input history (In, _i, the history file)
        self._secret = secret
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            status = self._exit_status()
            if test:
                self._test_report(cell)
            self._stopped = f"the kernel died in cell {index}{status}"
            cell.outputs.append(_error("KernelDied", f"the kernel died while running this cell"
                                       f"{status} (a CPU-time or memory limit, os._exit, a crash); "
                                       "the cells after it were not run"))
            return cell, resources
        except CellTimeoutError as err:  # no output at all within iopub_timeout: a wedged kernel
            if test:
                self._test_report(cell)
            self._stopped = f"the kernel stopped answering in cell {index}"
            cell.outputs.append(_error("CellTimeoutError", "the kernel stopped answering while "
                                       f"running this cell ({str(err).splitlines()[1][:120]}); the "
                                       "cells after it were not run"))
            return cell, resources
        finally:
            self._unstored = False
            self._secret = ""
        if self._timed_out:
            self._stopped = f"cell {index} ran past the {self.timeout} s time limit"
        elif self._over:
            self._stopped = f"cell {index} printed more than {self.max_output_bytes} bytes"
            cell.outputs.append(_error("OutputLimitError", f"this cell printed more than "
                                       f"{self.max_output_bytes} bytes; the autograder interrupted "
                                       "it and did not run the cells after it"))
        problems = self._test_report(cell, keyed=bool(secret)) if test else []
        if test and not self._stopped:
            report = self._guard("post", index)
            void += problems + ((report or {}).get("rewrote") or [])
            if void:
                cell.outputs.append(_error("GradingIntegrityError", "the submission changed how IPython "
                                           f"runs cells ({'; '.join(void)}); the grader restored it, "
                                           "and this test is void"))
            changed = None if report is None or report.get("stage") != "post" else report.get("changed", [])
            if changed is None or changed:
                why = (report or {}).get("error")
                what = ", ".join(changed) if changed else \
                    f"the guard failed: {why}" if why else "the guard did not answer"
                cell.outputs.append(_error("GradingIntegrityError", "something this test relies on "
                                           f"was replaced while it ran ({what}); the test is void"))
        if test:
            text = "".join(f"[autograder] before this test, {what}: {', '.join(names)}\n"
                           for what, names in notes if names)
            if text:
                cell.outputs.insert(0, new_output("stream", name="stdout", text=text))
        return cell, resources

    def _test_report(self, cell, keyed: bool = False) -> list[str]:
        """Take the guard's line(s) out of a test cell's output: what it found when the test
        started (a list of problems; one if the guard did not see the test start, or twice, or,
        when the grader sent the test a secret (``keyed``), did not take it)."""
        reports = []
        for out in cell.outputs:
            if out.get("output_type") != "stream" or out.get("name") != "stdout" \
                    or "course-guard: " not in out.get("text", ""):
                continue
            kept = []
            for line in out["text"].splitlines(keepends=True):
                if line.startswith("course-guard: "):
                    try:
                        reports.append(json.loads(line[len("course-guard: "):]))
                    except ValueError:
                        reports.append({"stage": "garbled"})
                else:
                    kept.append(line)
            out["text"] = "".join(kept)
        cell.outputs = [o for o in cell.outputs if o.get("output_type") != "stream" or o.get("text")]
        tests = [r for r in reports if r.get("stage") == "test"]
        if len(reports) != 1 or len(tests) != 1:
            errors = [r["error"] for r in reports if r.get("error")]
            return [f"the grading guard did not see this test start as expected ({len(reports)} reports"
                    f"{': ' + '; '.join(errors) if errors else ''})"]
        problems = list(tests[0].get("tampered", []))
        if keyed and tests[0].get("keyed") is not True:
            problems.append("the grader's secret for this test's hidden draws did not reach the guard")
        return problems

    def _guard(self, stage: str, index: int) -> dict | None:
        """Send a guard control cell; the report, or None when there is none."""
        probe = new_code_cell(f"{kernel_guard_mark()} {stage}")
        cell = self.nb.cells[index]
        try:
            self.execute_cell(probe, index, store_history=False)
        except DeadKernelError:
            return None
        finally:
            self.nb.cells[index] = cell  # nbclient stores the cell it ran at that index
        for out in probe.get("outputs", []):
            text = out.get("text", "") if out.get("output_type") == "stream" else ""
            for line in text.splitlines():
                if line.startswith("course-guard: "):
                    try:
                        return json.loads(line[len("course-guard: "):])
                    except ValueError:
                        return None
        return None

    def _exit_status(self) -> str:
        try:
            code = self.km.provisioner.process.poll()
        except AttributeError:
            return ""
        if code is None:
            return ""
        if code < 0:
            return f" (killed by signal {-code})"
        return f" (exit status {code}{', killed by signal %d' % (code - 128) if code > 128 else ''})"

    # -- limits -------------------------------------------------------------------------------
    async def _async_handle_timeout(self, timeout, cell=None):
        self._timed_out = True
        self.error_on_timeout = {
            "ename": "CellTimeoutError",
            "evalue": f"this cell ran longer than {timeout} s and was stopped",
            "traceback": [f"CellTimeoutError: this cell ran longer than {timeout} s and was "
                          "stopped; the autograder did not run the cells after it"]}
        return await super()._async_handle_timeout(timeout, cell)

    def output(self, outs, msg, display_id, cell_index):
        content = msg.get("content", {})
        size = len(content.get("text", "")) + sum(len(str(v)) for v in content.get("data", {}).values())
        self._cell_bytes = getattr(self, "_cell_bytes", 0) + size
        if self._cell_bytes > self.max_output_bytes:
            if not self._over:
                self._over = True
                try:
                    asyncio.get_running_loop().create_task(ensure_async(self.km.interrupt_kernel()))
                except RuntimeError:
                    pass
            return None
        return super().output(outs, msg, display_id, cell_index)


def kernel_guard_mark() -> str:
    from autograder import kernel_guard
    return kernel_guard.MARK

