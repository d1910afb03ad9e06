"""A driver script's start for a real grading kernel with the guard installed, as the grader runs it.

``PREAMBLE`` is Python source: it starts the sandboxed kernel with ``autograder/kernel_guard.py``
(``sandbox.kernel_command``), connects a client, and defines ``run(code, store_history=True)``,
which executes one cell and returns ``(stdout, the last error's value)``; ``secret=`` sends a test
cell's secret in the request's metadata, as ``autograder.sandboxed_execute`` does. A test appends what it
drives (control cells, test cells, later cells) and runs the whole script in a subprocess
(``tests/test_guard_forgets.py``, ``tests/test_guard_secret_reach.py``); the script must stop the
client and kill ``kernel`` at its end.
"""

PREAMBLE = r'''
import hashlib, json, os, subprocess, sys, tempfile
from jupyter_client import BlockingKernelClient
from jupyter_client.connect import write_connection_file
from autograder import kernel_guard, sandbox
from autograder.sandboxed_execute import pre_payload

folder = tempfile.mkdtemp()
# unix sockets in a private folder, as the grader's kernels use: TCP ports chosen here could be taken
# by another process before the kernel binds them (a guard kernel died before its first reply once,
# with three test workers on two cores)
path, _ = write_connection_file(os.path.join(folder, "kernel.json"), transport="ipc",
                                ip=os.path.join(folder, "ipc"))
kernel = subprocess.Popen(sandbox.kernel_command(["-f", path], str(sandbox.GUARD_FILE)),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
client = BlockingKernelClient()
client.load_connection_file(path)
client.start_channels()
client.wait_for_ready(timeout=120)


def run(code, store_history=True, secret=""):
    # a test cell's secret travels in its request's metadata, as the grader sends it
    client.session.metadata = {kernel_guard.SECRET_METADATA: secret} if secret else {}
    try:
        msg_id = client.execute(code, store_history=store_history)
    finally:
        client.session.metadata = {}
    out, error = "", ""
    while True:
        msg = client.get_iopub_msg(timeout=120)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            out += content["text"]
        elif kind == "error":
            error = content["evalue"]
        elif kind == "status" and content["execution_state"] == "idle":
            return out, error
'''
