"""The Execute preprocessor of ``nbgrader autograde``: student code only in the sandboxed kernel.

nbgrader_config.py puts ``SandboxedExecute`` in place of nbgrader's ``Execute`` in
``Autograde.autograde_preprocessors`` (``nbgrader validate`` keeps plain ``Execute`` and the normal
kernel). On top of ``Execute`` it:
- refuses to run (raises, so nbgrader records the submission as failed) unless the sandbox works
  here (``autograder.sandbox.probe``), or COURSE_ALLOW_UNSANDBOXED=1 is set;
- starts the kernel ``debug-course-sandboxed`` on the ipc transport, with its connection file and
  sockets in a private temporary folder (removed afterwards), and passes the resource limits;
- stops the run at the first cell that breaks a limit: a cell past ``timeout`` (CellTimeoutError),
  a cell printing more than ``max_output_bytes`` (OutputLimitError, interrupted), a kernel that
  dies (KernelDied: CPU limit, os._exit, crash) or stops answering (CellTimeoutError: no output
  within ``iopub_timeout``, e.g. after replacing a builtin the kernel itself needs). Every later code cell gets a ``NotRun`` error
  output, so every later test cell scores 0, and the reason is in the notebook and the feedback;
- around each autograder-test cell, asks the kernel's monkeypatch guard (``kernel_guard``) to
  restore what the test relies on, and fails the test (GradingIntegrityError) if something it
  relies on was replaced while it ran, or if the guard does not answer.
Error names a reader of the autograded notebook can rely on: CellTimeoutError, OutputLimitError,
KernelDied, NotRun, GradingIntegrityError (plus the student's own, e.g. MemoryError).
"""
from __future__ import annotations

import ast
import asyncio
import json
import os
import shutil
import tempfile

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import ensure_async, run_sync
from nbformat.v4 import new_code_cell, new_output
from nbgrader.preprocessors import Execute
from traitlets import Bool, Integer, Unicode

from autograder import sandbox

_PROBED: dict[str, str | None] = {}


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


def _is_test(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


class SandboxedExecute(Execute):
    kernel_name = Unicode(sandbox.KERNEL_NAME, help="the sandboxed kernelspec").tag(config=True)
    cpu_seconds = Integer(600, help="RLIMIT_CPU of the kernel (whole run)").tag(config=True)
    memory_mb = Integer(8192, help="RLIMIT_AS of the kernel, MiB").tag(config=True)
    max_processes = Integer(256, help="RLIMIT_NPROC (processes and threads)").tag(config=True)
    max_file_mb = Integer(64, help="RLIMIT_FSIZE, MiB").tag(config=True)
    tmp_mb = Integer(256, help="size of each tmpfs the kernel can write, MiB").tag(config=True)
    max_output_bytes = Integer(2_000_000, help="output bytes a cell may print").tag(config=True)
    guard = Bool(True, help="run the monkeypatch guard around test cells").tag(config=True)

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
        self._private = tempfile.mkdtemp(prefix="course-kernel-")
        try:
            return super().preprocess(nb, resources, km)
        finally:
            shutil.rmtree(self._private, ignore_errors=True)

    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        km.transport = "ipc"
        km.connection_file = os.path.join(self._private, "kernel.json")
        km.ip = os.path.join(self._private, "ipc")
        km.shutdown_wait_time = 2.0
        return km

    async def async_start_new_kernel(self, **kwargs):
        env = dict(kwargs.pop("env", None) or os.environ)
        env.update({"COURSE_SANDBOX_CPU_S": str(self.cpu_seconds),
                    "COURSE_SANDBOX_MEMORY_MB": str(self.memory_mb),
                    "COURSE_SANDBOX_NPROC": str(self.max_processes),
                    "COURSE_SANDBOX_FILE_MB": str(self.max_file_mb),
                    "COURSE_SANDBOX_TMP_MB": str(self.tmp_mb),
                    "COURSE_GUARD": "1" if self.guard else "0"})
        return await super().async_start_new_kernel(env=env, **kwargs)

    start_new_kernel = run_sync(async_start_new_kernel)  # nbclient binds the base method otherwise

    # -- cells --------------------------------------------------------------------------------
    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code" or not cell.source.strip():
            return cell, resources
        if self._stopped:
            cell.outputs = [_error("NotRun", f"not run: {self._stopped}")]
            return cell, resources
        test = _is_test(cell) and self.guard
        restored = []
        if test:
            report = self._guard(f"pre {json.dumps(_names(cell.source))}", index)
            if report is None:
                cell.outputs = [_error("GradingIntegrityError", "the grading guard did not answer "
                                       "before this test (was it disabled?); the test was not run")]
                return cell, resources
            restored = report.get("restored", [])
        self._timed_out = False
        self._cell_bytes, self._over = 0, False
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            status = self._exit_status()
            self._stopped = f"the kernel died in cell {index}{status}"
            cell.outputs.append(_error("KernelDied", f"the kernel died while running this cell"
                                       f"{status} (a CPU-time or memory limit, os._exit, a crash); "
                                       "the cells after it were not run"))
            return cell, resources
        except CellTimeoutError as err:  # no output at all within iopub_timeout: a wedged kernel
            self._stopped = f"the kernel stopped answering in cell {index}"
            cell.outputs.append(_error("CellTimeoutError", "the kernel stopped answering while "
                                       f"running this cell ({str(err).splitlines()[1][:120]}); the "
                                       "cells after it were not run"))
            return cell, resources
        if self._timed_out:
            self._stopped = f"cell {index} ran past the {self.timeout} s time limit"
        elif self._over:
            self._stopped = f"cell {index} printed more than {self.max_output_bytes} bytes"
            cell.outputs.append(_error("OutputLimitError", f"this cell printed more than "
                                       f"{self.max_output_bytes} bytes; the autograder interrupted "
                                       "it and did not run the cells after it"))
        if test and not self._stopped:
            report = self._guard("post", index)
            changed = None if report is None else report.get("changed", [])
            if changed is None or changed:
                what = ", ".join(changed) if changed else "the guard did not answer"
                cell.outputs.append(_error("GradingIntegrityError", "something this test relies on "
                                           f"was replaced while it ran ({what}); the test is void"))
        if restored:
            note = ("[autograder] before this test, the grader restored what the submission had "
                    f"replaced: {', '.join(restored)}\n")
            cell.outputs.insert(0, new_output("stream", name="stdout", text=note))
        return cell, resources

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

