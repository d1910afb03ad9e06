"""What a kernel's start costs, cold and forked from a process that has already imported the course.

    .venv/bin/python benchmarks/kernel_start.py [--runs 3]

Prints, for each way, the seconds from the request to a kernel that has answered a first cell
importing what every grading kernel imports (torch, the course, ``torch._dynamo``), and the CPU
seconds the kernel process itself used by then:

- cold: ``python -m ipykernel_launcher``, a new interpreter that imports everything itself (what
  every kernel of nbval, JupyterLab and the grader does today);
- forked: ``os.fork()`` of this process after it imported the same modules once, the child starting
  ``IPKernelApp`` on its own connection file.

Limits: a measurement, not a design. Both kernels are plain ones, on loopback TCP, without the
grading sandbox (bubblewrap), its resource limits or the guard; a grading kernel forked this way
would still need its own namespaces, mounts, user and limits set up in the child, and a process
that never ran submitted code to fork from. The forked child's CPU leaves out what the parent
spent importing (once, printed first) and counts the pages it copies on write; its seconds include
the client's own polling (jupyter_client waits up to 0.2 s between reads), so they are an upper bound.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from jupyter_client import BlockingKernelClient
from jupyter_client.connect import write_connection_file

IMPORTS = "import torch, course, torch._dynamo"


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _serve_kernel(connection_file: str) -> None:
    from ipykernel.kernelapp import IPKernelApp

    app = IPKernelApp.instance()
    app.initialize(["-f", connection_file])
    app.start()


def _time_one(forked: bool) -> tuple[float, float]:
    """(seconds to a kernel that ran IMPORTS, the kernel's CPU seconds by then)."""
    folder = tempfile.mkdtemp(prefix="kernel-start-")
    connection_file = os.path.join(folder, "kernel.json")
    write_connection_file(connection_file, ip="127.0.0.1")
    began = time.perf_counter()
    if forked:
        pid = os.fork()
        if pid == 0:
            try:
                null = os.open(os.devnull, os.O_WRONLY)  # as the cold kernel's output: discarded
                os.dup2(null, 1)
                os.dup2(null, 2)
                _serve_kernel(connection_file)
            finally:
                os._exit(0)
    else:
        pid = subprocess.Popen([sys.executable, "-m", "ipykernel_launcher", "-f", connection_file],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid
    client = BlockingKernelClient(connection_file=connection_file)
    client.load_connection_file()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        reply = client.execute_interactive(IMPORTS, timeout=120)
        assert reply["content"]["status"] == "ok", reply["content"]
        seconds, cpu = time.perf_counter() - began, _cpu_seconds(pid)
    finally:
        client.shutdown()
        client.stop_channels()
        _reap(pid)
        shutil.rmtree(folder, ignore_errors=True)
    return seconds, cpu


def _reap(pid: int, wait_s: float = 10.0) -> None:
    """Wait for the kernel to exit after its shutdown request; kill it if it has not within wait_s."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    cold = [_time_one(forked=False) for _ in range(runs)]
    began = time.perf_counter()
    exec(IMPORTS)  # the parent's one import, before any fork
    import ipykernel.kernelapp  # noqa: F401
    print(f"forked: the parent imported once in {time.perf_counter() - began:.2f} s")
    forked = [_time_one(forked=True) for _ in range(runs)]
    for name, rows in (("cold", cold), ("forked", forked)):
        for seconds, cpu in rows:
            print(f"{name:6s} {seconds:5.2f} s to a kernel that ran {IMPORTS!r}; its CPU {cpu:5.2f} s")


if __name__ == "__main__":
    main()
