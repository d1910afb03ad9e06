"""The course's JupyterHub on this machine, with real Unix accounts (``make hub``; the hub test).

    sudo .venv/bin/python -m autograder.hub [--port 8000] [--assignment 00_start_here]

As root, ``main`` creates an instructor and two learner accounts (``dc-instructor``,
``dc-learner1``, ``dc-learner2``) with random passwords and homes of mode 700, lets them reach
this venv's Python (``grant_interpreter``: enter-only ACL entries where it lies under a private
folder, such as pyenv's under /root; taken back on exit), a temporary
exchange (mode 1777, as nbgrader's exchange wants: everyone may write, nobody may delete another's
entries) and hub state, the instructor's course folder ``~/debug-course`` (the course's
``nbgrader_config.py`` and the assignment's source notebook, released into the exchange by the
instructor's own nbgrader), then starts JupyterHub with ``hub/jupyterhub_config.py`` on 127.0.0.1
and prints the URL and the three accounts. Ctrl-C (or SIGTERM) stops the hub (which stops every
account's server and its proxy) and removes the accounts, their homes and the temporary folders;
it prints what it removed and anything it could not.

Contract of the helpers (the test uses them too):
- ``create_account`` refuses a name that already exists (it never takes over, or later deletes,
  an account it did not create); ``remove_account`` ends nothing but the account's own processes
  (``userdel`` refuses while any run) and removes its home.
- ``as_user`` runs a command as that account (its uid, gid, no supplementary groups, HOME and
  USER set, a minimal environment), as a login through the hub would.
- ``Hub`` starts ``jupyterhub -f hub/jupyterhub_config.py`` and waits until it answers;
  ``stop`` sends SIGTERM and waits (JupyterHub then stops the servers and the proxy it started).
Limits: Linux, root only (creating accounts, switching users); passwords are printed to the
terminal of whoever ran it.
"""
from __future__ import annotations

import argparse
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HUB_DIR = REPO / "hub"
CONFIG = HUB_DIR / "jupyterhub_config.py"
PROXY = HUB_DIR / "node_modules" / ".bin" / "configurable-http-proxy"
VENV_BIN = Path(sys.executable).parent
COURSE_FOLDER = "debug-course"  # the instructor's course folder, in their home
INSTRUCTOR, LEARNERS = "dc-instructor", ("dc-learner1", "dc-learner2")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def create_account(name: str, password: str) -> Path:
    """A Unix account with a home of mode 700 and this password; returns the home."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        pass
    else:
        raise RuntimeError(f"the account {name} already exists: not touched (remove it, or pick other names)")
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
    subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True)
    home = Path(pwd.getpwnam(name).pw_dir)
    home.chmod(0o700)  # Debian's useradd makes it 755 (UMASK 022): every account could read it
    return home


def remove_account(name: str) -> str | None:
    """Remove the account and its home; None when done, else what stayed and why."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        return None
    left = subprocess.run(["pgrep", "-u", name], capture_output=True, text=True).stdout.split()
    for pid in left:  # the account's own processes (a kernel the hub did not stop)
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    done = subprocess.run(["userdel", "--remove", name], capture_output=True, text=True)
    # userdel warns (exit 12) when the mail spool it would remove does not exist
    if done.returncode not in (0, 12):
        return f"{name}: userdel said {done.stderr.strip()}"
    return None


def private_folders(path: Path) -> list[Path]:
    """``path`` (a folder) and the folders above it that other accounts cannot enter (no x bit
    for "others")."""
    path = Path(path).resolve()
    return [f for f in [*reversed(path.parents), path] if not os.stat(f).st_mode & 0o001]


def grant_interpreter(names: list[str]) -> list[tuple[Path, bool]]:
    """Let the accounts ``names`` reach this checkout and its Python (the venv's interpreter and its
    standard library): each folder on the way that others cannot enter (pyenv's Python under /root, mode
    700, say) gets an ACL entry ``u:NAME:x`` per account, enter-only, no listing. Returns the
    folders (with whether each had an ACL before), for ``revoke_interpreter``. Needs setfacl (Debian's acl: make system-deps)."""
    # the checkout (venv, course package, hub/ and autograder/) and the Python the venv was made from
    folders = sorted({f for p in (REPO, Path(sys.prefix), Path(sys.base_prefix))
                      for f in private_folders(p)})
    if folders and not shutil.which("setfacl"):
        raise RuntimeError(f"other accounts cannot reach this Python ({', '.join(map(str, folders))} "
                           f"closed to them) and setfacl is missing: apt-get install acl (make system-deps)")
    granted = []
    for folder in folders:
        had_acl = subprocess.run(["getfacl", "--skip-base", "--absolute-names", str(folder)],
                                 capture_output=True, text=True).stdout.strip() != ""
        for name in names:
            subprocess.run(["setfacl", "-m", f"u:{name}:x", str(folder)], check=True)
        granted.append((folder, had_acl))
    return granted


def revoke_interpreter(names: list[str], granted: list[tuple[Path, bool]]) -> None:
    """Take back what ``grant_interpreter`` gave: a folder that had no ACL before loses its ACL
    (mask included), one that had keeps it less the accounts' entries."""
    for folder, had_acl in granted:
        if had_acl:
            for name in names:
                subprocess.run(["setfacl", "-x", f"u:{name}", str(folder)], capture_output=True)
        else:
            subprocess.run(["setfacl", "-b", str(folder)], capture_output=True)


def user_env(name: str, **extra) -> dict:
    """The environment of a command run as ``name``: what a hub login gives (PATH with the venv,
    HOME, USER, nbgrader's config folder and the exchange) and ``extra``."""
    home = pwd.getpwnam(name).pw_dir
    env = {"HOME": home, "USER": name, "LOGNAME": name, "SHELL": "/bin/bash", "LANG": "C.UTF-8",
           "PATH": os.pathsep.join([str(VENV_BIN), "/usr/local/bin", "/usr/bin", "/bin"]),
           "JUPYTER_CONFIG_PATH": str(HUB_DIR / "jupyter")}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def as_user(name: str, cmd: list[str], cwd: Path | str | None = None, env: dict | None = None,
            check: bool = False, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``cmd`` as the account ``name`` (stdout and stderr together, as text)."""
    entry = pwd.getpwnam(name)
    return subprocess.run(cmd, user=entry.pw_uid, group=entry.pw_gid, extra_groups=[],
                          cwd=cwd or entry.pw_dir, env=env or user_env(name), check=check,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)


def make_exchange(path: Path) -> Path:
    """nbgrader's exchange: a folder every account may write into, sticky (mode 1777)."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o1777)
    return path


def instructor_course(instructor: str, assignments: list[str], exchange: Path) -> Path:
    """The instructor's course folder ``~/debug-course``: the course's nbgrader_config.py and each
    assignment's source notebook, owned by the instructor; each assignment generated (gradebook
    in that folder) and released into ``exchange`` by the instructor's own nbgrader."""
    home = Path(pwd.getpwnam(instructor).pw_dir)
    course = home / COURSE_FOLDER
    entry = pwd.getpwnam(instructor)
    for a in assignments:
        src = REPO / "solutions" / a / f"{a}.ipynb"
        dest = course / "solutions" / a / src.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)
    shutil.copy2(REPO / "nbgrader_config.py", course / "nbgrader_config.py")
    for p in [course, *course.rglob("*")]:
        os.chown(p, entry.pw_uid, entry.pw_gid)
    env = instructor_env(instructor, exchange)
    for a in assignments:
        for step in (["generate_assignment", a], ["release_assignment", a]):
            done = as_user(instructor, [str(VENV_BIN / "python"), "-m", "nbgrader", *step], cwd=course, env=env)
            if done.returncode:
                raise RuntimeError(f"nbgrader {' '.join(step)} as {instructor} failed:\n{done.stdout[-3000:]}")
    return course


def instructor_env(instructor: str, exchange: Path) -> dict:
    """The instructor's environment for the course's commands (the checkout's autograder importable)."""
    return user_env(instructor, COURSE_EXCHANGE=exchange, PYTHONPATH=REPO)


@dataclass
class Hub:
    """JupyterHub started from hub/jupyterhub_config.py; ``url`` is its public address."""
    state: Path
    exchange: Path
    users: list[str]
    admin: str
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.state / "jupyterhub.log"

    def start(self, timeout: float = 120) -> "Hub":
        if not PROXY.exists():
            raise RuntimeError(f"{PROXY} is missing: run `make proxy` (npm ci in hub/)")
        self.state.mkdir(parents=True, exist_ok=True)
        self.state.chmod(0o700)
        env = dict(os.environ, COURSE_HUB_STATE=self.state, COURSE_EXCHANGE=self.exchange,
                   COURSE_HUB_PORT=self.port, COURSE_HUB_API_PORT=free_port(),
                   COURSE_HUB_PROXY_API_PORT=free_port(), COURSE_HUB_USERS=",".join(self.users),
                   COURSE_HUB_ADMIN=self.admin)
        env = {k: str(v) for k, v in env.items()}
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([str(VENV_BIN / "jupyterhub"), "-f", str(CONFIG)],
                                         cwd=self.state, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyterhub exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/hub/api/", timeout=5) as r:
                    json.load(r)
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"jupyterhub did not answer in {timeout:.0f} s:\n{self.log_tail()}")
                time.sleep(0.5)

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM: JupyterHub stops every server it spawned and its proxy, then exits."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--assignment", action="append", default=None,
                        help="assignment to release (repeatable; default 00_start_here)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("make hub creates Unix accounts and switches users: run it as root (sudo make hub)")
        return 2
    assignments = args.assignment or ["00_start_here"]
    tmp = Path(tempfile.mkdtemp(prefix="debug-course-hub-"))
    tmp.chmod(0o755)  # the accounts reach the exchange inside it
    exchange = make_exchange(tmp / "exchange")
    created, problems, granted = [], [], []
    hub = Hub(state=tmp / "state", exchange=exchange, users=[INSTRUCTOR, *LEARNERS], admin=INSTRUCTOR,
              port=args.port)
    # Ctrl-C and SIGTERM end the try below (a shell's background job starts with SIGINT ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        passwords = {}
        for name in (INSTRUCTOR, *LEARNERS):
            passwords[name] = secrets.token_urlsafe(9)
            create_account(name, passwords[name])
            created.append(name)
        granted = grant_interpreter(created)
        course = instructor_course(INSTRUCTOR, assignments, exchange)
        hub.start()
        print(f"\nThe course's hub: {hub.url}   (log: {hub.log})")
        print(f"  instructor  {INSTRUCTOR:<12} password {passwords[INSTRUCTOR]}   course folder {course}")
        for name in LEARNERS:
            print(f"  learner     {name:<12} password {passwords[name]}")
        print(f"Released: {', '.join(assignments)} (learners: Nbgrader > Assignments).")
        print(f"The instructor, in a terminal on the hub: cd ~/{COURSE_FOLDER}; nbgrader collect <a>;\n"
              f"  PYTHONPATH={REPO} python -m autograder.grade_class <a> --root ~/{COURSE_FOLDER}\n"
              f"Ctrl-C stops the hub and removes the three accounts, their homes and {tmp}.", flush=True)
        while hub.proc.poll() is None:
            time.sleep(1)
        print(f"jupyterhub exited with {hub.proc.returncode}:\n{hub.log_tail()}")
    except KeyboardInterrupt:
        print("\nstopping the hub", flush=True)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as err:
        problems.append(str(err))
    finally:
        hub.stop()
        revoke_interpreter(created, granted)
        for name in created:
            why = remove_account(name)
            if why:
                problems.append(why)
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"removed: the accounts {', '.join(created) or '(none created)'} with their homes, and {tmp}"
              + ("" if not tmp.exists() else " (partly: it is still there)"))
        for p in problems:
            print(f"problem: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
