"""A throw-away PostgreSQL server on loopback, for tests and for trying the PostgreSQL gradebook.

    with postgres.temporary_server() as url:     # postgresql://postgres@127.0.0.1:PORT/gradebook
        ...

Uses Debian's server binaries (``/usr/lib/postgresql/<version>/bin``, package ``postgresql``;
``make postgres`` installs it when run as root). ``initdb`` refuses to run as root, so as root the
cluster is made and run by the unprivileged ``postgres`` user (``nobody`` when that user does not
exist) through ``runuser``. The data directory and the unix socket live in a fresh temporary
folder, the server listens on 127.0.0.1 only, on a free port, with ``trust`` authentication
(anyone on this machine may connect while it runs), and everything is removed on exit.
``Unavailable`` says why a server could not be started.
"""
from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator


class Unavailable(RuntimeError):
    """PostgreSQL cannot be started here; the message says why."""


def bin_dir() -> Path:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding ``initdb``."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if not found:
        raise Unavailable("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin/initdb): "
                          "install Debian's 'postgresql' package (make postgres, as root)")
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _runner() -> tuple[list[str], str | None]:
    """The command prefix that runs a server binary unprivileged, and that user's name."""
    if os.geteuid() != 0:
        return [], None
    for user in ("postgres", "nobody"):
        try:
            pwd.getpwnam(user)
        except KeyError:
            continue
        if shutil.which("runuser") is None:
            raise Unavailable("running as root and 'runuser' is missing: cannot run initdb unprivileged")
        return ["runuser", "-u", user, "--"], user
    raise Unavailable("running as root and neither user 'postgres' nor 'nobody' exists")


@contextlib.contextmanager
def temporary_server(database: str = "gradebook") -> Iterator[str]:
    """Start a server, create ``database``, yield its SQLAlchemy URL; stop and delete on exit."""
    bindir = bin_dir()
    prefix, user = _runner()
    tmp = Path(tempfile.mkdtemp(prefix="pg-"))
    data, sock = tmp / "data", tmp / "sock"
    sock.mkdir()
    if user:
        info = pwd.getpwnam(user)
        for p in (tmp, sock):
            os.chown(p, info.pw_uid, info.pw_gid)
    port = _free_port()

    def run(*cmd: str) -> None:
        proc = subprocess.run([*prefix, *cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, stdin=subprocess.DEVNULL, cwd=tmp)
        if proc.returncode != 0:
            raise Unavailable(f"{Path(cmd[0]).name} failed ({proc.returncode}):\n{proc.stdout[-2000:]}")

    started = False
    try:
        run(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
            "--encoding=UTF8", "--no-sync")
        run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(tmp / "server.log"), "-w", "-t", "60",
            "-o", f"-c listen_addresses=127.0.0.1 -p {port} -k {sock} -c fsync=off "
                  f"-c max_connections=200", "start")
        started = True
        run(str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", database)
        yield f"postgresql://postgres@127.0.0.1:{port}/{database}"
    finally:
        if started:
            subprocess.run([*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate",
                            "-w", "stop"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           cwd=tmp)
        shutil.rmtree(tmp, ignore_errors=True)
