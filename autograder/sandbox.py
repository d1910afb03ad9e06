"""Start a Jupyter kernel inside a bubblewrap sandbox with resource limits (the autograder's kernel).

    python autograder/sandbox.py -f CONNECTION_FILE [kernel args...]   (the kernelspec's argv)
    python -m autograder.sandbox install     register the kernelspec ``debug-course-sandboxed``
    python -m autograder.sandbox check       say whether the sandbox can run here (exit 0 if so)

Contract of the kernel it starts (``autograder.sandboxed_execute`` drives it for ``nbgrader
autograde``; any other client must do what that one does: ipc transport, private socket folder):
- The connection file must use ``transport: ipc`` (the kernel has no network, so no loopback TCP),
  and the folder holding the ipc sockets and the connection file must be private to this kernel:
  it is the one host folder the sandbox can write.
- Inside: a read-only view of the system (/usr, /etc), of this Python and its venv and of the
  ``course`` package, and nothing else of the host: not the course root (no gradebook, no
  ``solutions/``/``source/``, no other students, no autograded notebook holding the hidden tests).
  The working directory is a private tmpfs at the path nbgrader gave (``autograded/<s>/<a>``),
  with read-only copies of that folder's non-notebook files; /tmp is a private tmpfs. Own network,
  pid, ipc and uts namespaces; no environment variables but a short list; dies with its parent.
- As root (the usual CI/grader case) the kernel drops to an unprivileged uid of its own
  (``100000 + pid``): no capabilities, so it cannot undo the mounts, and RLIMIT_NPROC binds it
  (it does not bind uid 0). As another user, bubblewrap's user namespace does the same.
- Limits (RLIMIT_*; environment variables, set by ``SandboxedExecute`` from nbgrader_config.py):
  COURSE_SANDBOX_CPU_S (CPU seconds, whole kernel), COURSE_SANDBOX_MEMORY_MB (address space),
  COURSE_SANDBOX_NPROC (processes+threads of the kernel's uid), COURSE_SANDBOX_FILE_MB (largest
  file it may write), COURSE_SANDBOX_TMP_MB (size of each tmpfs it can write).
- When bubblewrap is missing or fails, the kernel does not start (exit 3, reason on stderr),
  unless COURSE_ALLOW_UNSANDBOXED=1: then it runs with the limits only, and says so on stderr.
  COURSE_BWRAP names the bubblewrap executable (default: ``bwrap`` on PATH).
- The kernel runs ``kernel_guard.py`` at start (see that module): the monkeypatch guard.
- GPU grading (``COURSE_SANDBOX_GPU=1``, set by ``SandboxedExecute`` under ``GRADE_KERNEL=gpu``): the
  NVIDIA device nodes (``/dev/nvidia*``) are bound into the sandbox and the address-space limit is
  not set (CUDA reserves far more virtual memory than any RLIMIT_AS a CPU kernel needs); the other
  limits stay. ``install --name debug-course-gpu-sandboxed --python GPU_PYTHON`` (``make
  gpu-kernel``) registers a sandboxed kernel that runs another Python (one whose torch has CUDA).
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

KERNEL_NAME = "debug-course-sandboxed"
HERE = Path(__file__).resolve().parent
GUARD_FILE = HERE / "kernel_guard.py"
GUARD_MOUNT = "/opt/course-guard/kernel_guard.py"   # where the guard file appears in the sandbox
ALLOW_ENV = "COURSE_ALLOW_UNSANDBOXED"
DEFAULTS = {"CPU_S": 600, "MEMORY_MB": 8192, "NPROC": 256, "FILE_MB": 64, "TMP_MB": 256}
# Environment variables the kernel keeps (everything else, e.g. database passwords, is dropped).
KEEP_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONHASHSEED", "PYDEVD_DISABLE_FILE_VALIDATION",
            "NBGRADER_EXECUTION", "JPY_SESSION_NAME", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "OPENBLAS_NUM_THREADS", "MPLBACKEND", "COURSE_GUARD", "COURSE_GUARDED", "COURSE_STUDENT_ID",
            "COURSE_GUARD_PRELOAD")

# Runs first inside the sandbox, as root only: become an unprivileged uid, then exec the kernel.
INNER = ("import os,sys\nu=int(sys.argv[1])\nos.setgroups([]);os.setgid(u);os.setuid(u)\n"
         "os.execv(sys.argv[2],sys.argv[2:])")


def limits() -> dict[str, int]:
    """The resource limits in force, from COURSE_SANDBOX_* or the defaults."""
    return {k: int(os.environ.get(f"COURSE_SANDBOX_{k}", v)) for k, v in DEFAULTS.items()}


def bwrap_path() -> str | None:
    """The bubblewrap executable (COURSE_BWRAP or ``bwrap`` on PATH), or None."""
    name = os.environ.get("COURSE_BWRAP", "bwrap")
    return shutil.which(name) if os.sep not in name else (name if os.access(name, os.X_OK) else None)


def _ro_paths() -> list[str]:
    """Host paths the kernel may read: this Python (base and venv) and the ``course`` package."""
    import importlib.util
    paths = {sys.base_prefix, sys.prefix}
    spec = importlib.util.find_spec("course")
    if spec and spec.origin:
        paths.add(str(Path(spec.origin).resolve().parent))
    return sorted(os.path.realpath(p) for p in paths)


def _mkdirs(path: str, made: set) -> list[str]:
    """bwrap args creating each missing ancestor of ``path`` world-traversable (bwrap makes 0700)."""
    args, parts = [], Path(path).parts
    for i in range(2, len(parts)):
        d = str(Path(*parts[:i]))
        if d not in made:
            made.add(d)
            args += ["--perms", "0755", "--dir", d]
    return args


def bwrap_args(workdir: str, private: str, tmp_mb: int, uid: int | None) -> list[str]:
    """The bubblewrap command line (without the command) for a kernel whose working directory is
    ``workdir`` and whose sockets/connection file live in the private folder ``private``."""
    args = ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent",
            "--clearenv", "--proc", "/proc", "--dev", "/dev"]
    if gpu_requested():
        for node in gpu_devices():
            args += ["--dev-bind", node, node]
    for top in ("/bin", "/lib", "/lib64", "/lib32", "/sbin", "/usr", "/etc"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    size = str(tmp_mb * 2**20)
    args += ["--size", size, "--perms", "1777", "--tmpfs", "/tmp",
             "--size", "67108864", "--perms", "1777", "--tmpfs", "/dev/shm"]
    made = {"/tmp"}
    for path in _ro_paths():
        args += _mkdirs(path, made) + ["--ro-bind", path, path]
    args += _mkdirs(GUARD_MOUNT, made) + ["--ro-bind", str(GUARD_FILE), GUARD_MOUNT]
    args += _mkdirs(private, made) + ["--bind", private, private]
    # The working directory: an empty private tmpfs at nbgrader's path, plus read-only copies of
    # the files nbgrader put there, except notebooks (the autograded notebook holds the tests).
    args += _mkdirs(workdir, made) + ["--size", size, "--perms", "1777", "--tmpfs", workdir]
    for entry in sorted(os.listdir(workdir)):
        src = os.path.join(workdir, entry)
        if not entry.endswith(".ipynb") and entry != ".ipynb_checkpoints" and not os.path.islink(src):
            args += ["--ro-bind", src, src]
    args += ["--chdir", workdir]
    env = {k: os.environ[k] for k in KEEP_ENV if k in os.environ}
    env.update(HOME="/tmp", USER="student", LOGNAME="student", MPLCONFIGDIR="/tmp/.matplotlib",
               PATH=f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
               TMPDIR="/tmp", PYTHONDONTWRITEBYTECODE="1")
    for k, v in sorted(env.items()):
        args += ["--setenv", k, v]
    return args


def gpu_requested() -> bool:
    return os.environ.get("COURSE_SANDBOX_GPU") == "1"


def gpu_devices() -> list[str]:
    """The NVIDIA device nodes of this host (/dev/nvidia0, /dev/nvidiactl, /dev/nvidia-uvm, ...)."""
    try:
        return sorted(os.path.join("/dev", n) for n in os.listdir("/dev") if n.startswith("nvidia")
                      and not os.path.isdir(os.path.join("/dev", n)))
    except OSError:
        return []


def set_limits(lim: dict[str, int]) -> None:
    """Apply the RLIMITs to this process (inherited by bwrap and the kernel); no address-space
    limit for a GPU kernel."""
    mb = 2**20
    for what, value in ((resource.RLIMIT_CPU, lim["CPU_S"]), (resource.RLIMIT_AS, lim["MEMORY_MB"] * mb),
                        (resource.RLIMIT_FSIZE, lim["FILE_MB"] * mb), (resource.RLIMIT_NPROC, lim["NPROC"]),
                        (resource.RLIMIT_CORE, 0)):
        if what == resource.RLIMIT_AS and gpu_requested():
            continue
        # CPU: soft limit sends SIGXCPU (kills the kernel), the hard one a second later SIGKILL
        hard = value + 1 if what == resource.RLIMIT_CPU else value
        resource.setrlimit(what, (value, hard))


def probe() -> str | None:
    """None if a bubblewrap sandbox like the kernel's can start here, else the reason it cannot."""
    bwrap = bwrap_path()
    if bwrap is None:
        return (f"bubblewrap ({os.environ.get('COURSE_BWRAP', 'bwrap')}) is not installed "
                "(Debian/Ubuntu: apt-get install bubblewrap)")
    cmd = [bwrap, "--unshare-net", "--unshare-pid", "--die-with-parent", "--ro-bind", "/", "/",
           "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "true"]
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{bwrap} could not run: {err}"
    if proc.returncode != 0:
        return (f"{bwrap} failed ({proc.stdout.strip()[:300]}): this machine does not allow new "
                "namespaces for this user (user namespaces disabled, or a container without them)")
    return None


def kernel_command(argv: list[str], guard_path: str) -> list[str]:
    """``python -m ipykernel_launcher ARGV`` with the monkeypatch guard run at kernel start."""
    line = (f"__import__('runpy').run_path({guard_path!r}, run_name='course_kernel_guard')"
            "['install'](get_ipython())")
    return [sys.executable, "-m", "ipykernel_launcher", *argv,
            f"--IPKernelApp.exec_lines={json.dumps([line])}"]


def _connection(argv: list[str]) -> tuple[str, dict]:
    path = argv[argv.index("-f") + 1]
    with open(path, encoding="utf-8") as f:
        return path, json.load(f)


def run_kernel(argv: list[str]) -> int:
    """The kernelspec entry point: exec the sandboxed kernel (or refuse, exit 3)."""
    lim = limits()
    conn_file, info = _connection(argv)
    reason = probe()
    if reason is None and info.get("transport") != "ipc":
        reason = ("the connection file uses transport %r; the sandboxed kernel has no network and "
                  "needs transport 'ipc' (autograder.sandboxed_execute sets it)" % info.get("transport"))
    if reason is not None:
        if os.environ.get(ALLOW_ENV) != "1":
            print(f"sandbox: refusing to start the kernel unprotected: {reason}. "
                  f"Set {ALLOW_ENV}=1 to run student code without isolation.", file=sys.stderr)
            return 3
        print(f"sandbox: WARNING running the kernel WITHOUT isolation ({ALLOW_ENV}=1): {reason}",
              file=sys.stderr)
        set_limits(lim)
        os.execv(sys.executable, kernel_command(argv, str(GUARD_FILE)))
    private = os.path.dirname(os.path.abspath(info["ip"]))
    if os.path.dirname(os.path.abspath(conn_file)) != private:
        print("sandbox: the connection file and the ipc sockets must share one private folder",
              file=sys.stderr)
        return 3
    uid = None
    if os.getuid() == 0:
        uid = 100000 + os.getpid()
        os.chown(private, uid, uid)
        os.chown(conn_file, uid, uid)
    cmd = [bwrap_path(), *bwrap_args(os.getcwd(), private, lim["TMP_MB"], uid), "--"]
    if uid is not None:
        cmd += [sys.executable, "-I", "-c", INNER, str(uid)]
    cmd += kernel_command(argv, GUARD_MOUNT)
    set_limits(lim)
    os.execv(cmd[0], cmd)
    return 0  # not reached


def install(prefix: str = sys.prefix, name: str = KERNEL_NAME, python: str = sys.executable,
            display_name: str = "Python 3 (debug course, autograder sandbox)") -> Path:
    """Write the ``debug-course-sandboxed`` kernelspec (or ``name``, running ``python``) into
    ``prefix`` (the venv); return its folder."""
    folder = Path(prefix) / "share" / "jupyter" / "kernels" / name
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"argv": [python, str(HERE / "sandbox.py"), "-f", "{connection_file}"],
            "display_name": display_name, "language": "python",
            # interrupts travel as messages: a signal to the process group would hit bubblewrap
            "interrupt_mode": "message", "metadata": {"debugger": False}}
    (folder / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")
    return folder


def main(argv: list[str]) -> int:
    if argv[:1] == ["install"]:
        opts = dict(zip(argv[1::2], argv[2::2]))  # install [--name N] [--python P] [--display-name D]
        name = opts.get("--name", KERNEL_NAME)
        folder = install(name=name, python=opts.get("--python", sys.executable),
                         display_name=opts.get("--display-name", "Python 3 (debug course, autograder sandbox)"))
        print(f"installed kernelspec {name} in {folder}")
        return 0
    if argv[:1] == ["check"]:
        reason = probe()
        print("sandbox: ok (bubblewrap works)" if reason is None else f"sandbox: NOT available: {reason}")
        return 0 if reason is None else 1
    return run_kernel(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
