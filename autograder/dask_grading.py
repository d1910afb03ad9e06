"""Grade a class on the workers of a Dask scheduler (``grade_class ... --scheduler ADDRESS``).

    python -m autograder.dask_grading scheduler [--host H] [--port P] [--no-dashboard] [--tls-...]
    python -m autograder.dask_grading worker ADDRESS [--root ROOT] [--nworkers N] [--host H] [--tls-...]
    python -m autograder.dask_grading version [ROOT]      print the course version of ROOT

``scheduler`` and ``worker`` start Dask's own ``dask scheduler`` and ``dask worker`` (they replace
this process) with what grading needs, so that no by-hand command can miss it: this checkout on
``PYTHONPATH`` (the scheduler unpickles each job's task, ``autograder.dask_grading.grade_job`` and
its ``GradingJob``, so it must import this package; a plain ``dask scheduler`` fails every job with
"Error during deserialization of the task graph"), the two scheduler settings below, one thread per
worker, the worker's course root (``--root``, default this checkout: a toy or other course root is
named here, never through ``COURSE_ROOT=$PWD``), and every listening address bound to ``--host``
(default 127.0.0.1; the scheduler's dashboard too, or ``--no-dashboard``). Dask's connections carry
no authentication and no encryption unless TLS is set up: ``--tls-ca-file``, ``--tls-cert`` and
``--tls-key`` (PEM files) make the scheduler listen on ``tls://`` and the workers use it, and the
coordinator passes the same three options to ``grade_class``.

The coordinator (``autograder.grade_class`` with ``--scheduler``) keeps everything that is the
class's: the pre-check, the journal and report, ``record_zero``, the logs and the autograded
output. Each submission that passes the pre-check becomes one ``GradingJob``, a plain picklable
value: assignment, student, the submission folder's files as bytes, the gradebook URL, the
coordinator's course version and the timeout. A worker (``grade_job``) grades it in a temporary
course root of its own (its own ``nbgrader_config.py`` and ``solutions/<a>/``, the job's files in
``submitted/``) with nbgrader's ``autograde`` in the sandbox, exactly as the local pool does
(``class_runner.nbgrader_command``), and sends back nbgrader's exit status and log, the autograded
folder's files, the kind of machine (``autograder.machine``) and whether the files changed while
they were graded. No filesystem is shared: only the gradebook (PostgreSQL) is, and nbgrader on the
worker writes the grades there.

Contracts:
- **Course version** (``course_version``): SHA-256 over the ``course`` package as the process
  imports it (``*.py``), ``nbgrader_config.py``, the cells of every ``solutions/<a>/<a>.ipynb``
  (sources and metadata, not outputs, which differ by machine), and the kernels: the course's two
  kernelspecs (argv with paths reduced to file names), the kernel-side grading code
  (``sandbox.py``, ``kernel_guard.py``, ``sandboxed_execute.py``, ``demo_cells.py``), the Python
  version and the installed version of every package ``requirements.txt`` pins. A worker whose
  version differs from the job's refuses it (a grader error naming both versions; nothing is
  written); ``connect`` also warns about such workers before grading starts.
- **The scheduler** must run with ``distributed.scheduler.allowed-failures: 1`` and
  ``distributed.scheduler.worker-saturation: 1.0`` (``connect`` checks both and refuses
  otherwise). Jobs are submitted as root-ish tasks (``dask._task_spec.Task(...,
  _data_producer=True)``, a private parameter of the pinned dask), which with saturation 1.0 the
  scheduler queues and hands to a worker only when one of its threads is free: a worker never
  holds a job it is not running, so a worker's death counts against the submission it was grading
  and no other. Dask then regrades that submission on another worker, once; when that worker dies
  too the task ends in ``KilledWorker`` and the coordinator zeroes it with that reason. Start
  workers with ``--nthreads 1`` (``--nworkers N`` for more per machine) so one submission's crash
  takes no other submission's worker with it.
- **The gradebook**: the worker first opens a connection to the job's URL; when it cannot, the job
  ends as a grader error naming the worker and the reason, and nbgrader is not run (nothing is
  written, the next run grades it).
- **The scheduler lost**: the client cancels every future ("scheduler-connection-lost"); the
  coordinator marks the submissions in flight *interrupted* and raises ``SchedulerLost``;
  ``grade_class`` exits 3. ``--unfinished`` on the next run grades only what the journal shows
  unfinished. A worker may still finish a job it had started and write its grades; the re-run
  grades the same files again (nbgrader's ``--force`` replaces the rows: one row per student).
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from autograder import class_runner, database, draw_key, grading

ALLOWED_FAILURES = 1
WORKER_SATURATION = 1.0
POLL_S = 2.0
KERNEL_FILES = ("sandbox.py", "kernel_guard.py", "sandboxed_execute.py", "demo_cells.py")
KERNEL_NAMES = ("debug-course", "debug-course-sandboxed")
MAX_RETURNED_BYTES = 256 * 2**20   # the autograded folder a worker sends back


class SetupError(RuntimeError):
    """The cluster cannot grade for this course (the message says why); nothing was graded."""


class SchedulerLost(RuntimeError):
    """The client lost the scheduler in the middle of a run."""


# --------------------------------------------------------------------------- course version

def _course_package() -> Path | None:
    spec = importlib.util.find_spec("course")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def _pinned_packages() -> list[str]:
    try:
        lines = (grading.REPO / "requirements.txt").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    names = []
    for line in lines:
        m = re.match(r"^\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*==", line)
        if m:
            names.append(m.group(1))
    return sorted(names)


def _kernelspec(name: str) -> dict | None:
    """The parts of a kernelspec that decide how the kernel runs (paths reduced to file names);
    None when it is not installed. Read up to three times: ``sandbox install`` rewriting the file
    while it is read must not give a wrong version for the life of a worker."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    for attempt in range(3):
        try:
            spec = KernelSpecManager().get_kernel_spec(name)
            break
        except NoSuchKernel:
            return None
        except Exception:  # noqa: BLE001 (a half-written kernel.json: read it again)
            if attempt == 2:
                return None
            time.sleep(0.2)
    return {"argv": [os.path.basename(a) if os.path.isabs(a) else a for a in spec.argv],
            "language": spec.language, "interrupt_mode": spec.interrupt_mode}


_VERSIONS: dict = {}


def version_inputs(root: Path) -> list[Path]:
    """The files whose contents make the course version (besides kernels and packages)."""
    root = Path(root)
    files = [root / grading.CONFIG_FILE]
    package = _course_package()
    if package is not None:
        files += sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)
    files += [grading.source_path(a, root) for a in grading.assignments(root)]
    here = Path(__file__).resolve().parent
    files += [here / name for name in KERNEL_FILES]
    return files


def course_version(root: Path) -> str:
    """The course version of course root ``root`` as this process sees it (16 hex digits; see
    the module docstring). Cached per process while no input file changes."""
    root = Path(root).resolve()
    files = version_inputs(root)
    stamp = tuple((str(p), *(lambda st: (st.st_mtime_ns, st.st_size))(p.stat())) if p.exists()
                  else (str(p), None, None) for p in files)
    key = (str(root), stamp)
    if key in _VERSIONS:
        return _VERSIONS[key]
    h = hashlib.sha256()
    package = _course_package()

    def part(label: str, data: bytes) -> None:
        h.update(label.encode() + b"\0" + hashlib.sha256(data).digest())

    for path in files:
        if not path.exists():
            part(f"missing:{path.name}", b"")
            continue
        if path.suffix == ".ipynb":
            nb = json.loads(path.read_text(encoding="utf-8"))
            cells = [{"cell_type": c.get("cell_type"), "source": c.get("source"),
                      "metadata": c.get("metadata", {})} for c in nb.get("cells", [])]
            part(f"source:{path.parent.name}", json.dumps(cells, sort_keys=True).encode())
        elif package is not None and path.is_relative_to(package):
            part(f"course:{path.relative_to(package)}", path.read_bytes())
        else:
            part(f"file:{path.name}", path.read_bytes())
    for name in KERNEL_NAMES:
        part(f"kernel:{name}", json.dumps(_kernelspec(name), sort_keys=True).encode())
    part("python", sys.version.split()[0].encode())
    for name in _pinned_packages():
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = "missing"
        part(f"package:{name}", version.encode())
    _VERSIONS.clear()
    _VERSIONS[key] = h.hexdigest()[:16]
    return _VERSIONS[key]


# --------------------------------------------------------------------------- starting the cluster

REPO = Path(__file__).resolve().parent.parent
SCHEDULER_ENV = {"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": str(ALLOWED_FAILURES),
                 "DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION": f"{WORKER_SATURATION:g}"}
TLS_OPTIONS = ("tls_ca_file", "tls_cert", "tls_key")


def _with_repo_path(env: dict) -> dict:
    """``env`` with this checkout on PYTHONPATH (``autograder`` and ``course`` importable), after
    whatever PYTHONPATH already holds."""
    rest = env.get("PYTHONPATH")
    return dict(env, PYTHONPATH=os.pathsep.join(([rest] if rest else []) + [str(REPO)]))


def _tls_args(args) -> list[str]:
    given = [getattr(args, k) for k in TLS_OPTIONS]
    if any(given) and not all(given):
        raise SystemExit("TLS needs all three of --tls-ca-file, --tls-cert and --tls-key")
    return [x for k, v in zip(TLS_OPTIONS, given) if v
            for x in (f"--{k.replace('_', '-')}", str(Path(v).resolve()))]


def scheduler_command(args, env: dict) -> tuple[list[str], dict]:
    """The ``dask scheduler`` command line and environment for ``scheduler`` (see the module
    docstring)."""
    tls = _tls_args(args)
    cmd = [sys.executable, "-m", "dask", "scheduler", "--host", args.host, "--port", str(args.port)]
    cmd += ["--protocol", "tls"] if tls else []
    cmd += (["--no-dashboard"] if args.no_dashboard
            else ["--dashboard-address", f"{args.host}:{args.dashboard_port}"])
    cmd += (["--scheduler-file", str(args.scheduler_file)] if args.scheduler_file else []) + tls
    return cmd, _with_repo_path(dict(env, **SCHEDULER_ENV))


def worker_command(args, env: dict) -> tuple[list[str], dict]:
    """The ``dask worker`` command line and environment for ``worker`` (see the module docstring)."""
    root = Path(args.root).resolve()
    if not (root / grading.CONFIG_FILE).is_file():
        raise SystemExit(f"--root {root} is not a course root (no {grading.CONFIG_FILE} there)")
    host = args.host
    if host is None:
        scheme_less = args.address.split("://", 1)[-1]
        if not scheme_less.startswith(("127.", "localhost", "[::1]")):
            raise SystemExit("give --host: the address of this machine that the scheduler and the "
                             "other workers reach (the worker listens there only)")
        host = "127.0.0.1"
    tls = _tls_args(args)
    if tls and not args.address.startswith("tls://"):
        raise SystemExit(f"with TLS options the scheduler's address is tls://..., not {args.address}")
    cmd = [sys.executable, "-m", "dask", "worker", args.address, "--nthreads", "1",
           "--nworkers", str(args.nworkers), "--host", host, "--no-dashboard"]
    cmd += (["--name", args.name] if args.name else [])
    cmd += (["--local-directory", str(args.local_directory)] if args.local_directory else []) + tls
    return cmd, _with_repo_path(dict(env, COURSE_ROOT=str(root)))


def _cluster_parser(what: str):
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m autograder.dask_grading {what}")
    if what == "worker":
        parser.add_argument("address", help="the scheduler: tcp://HOST:PORT (tls://HOST:PORT with TLS)")
        parser.add_argument("--root", default=str(REPO),
                            help="the course root this worker grades with (default: this checkout)")
        parser.add_argument("--nworkers", type=int, default=1, help="one-thread workers to start")
        parser.add_argument("--host", default=None,
                            help="the interface to listen on (default 127.0.0.1 for a scheduler on "
                                 "this machine; required otherwise)")
        parser.add_argument("--name", default=None)
        parser.add_argument("--local-directory", default=None)
    else:
        parser.add_argument("--host", default="127.0.0.1",
                            help="the interface the scheduler and its dashboard listen on")
        parser.add_argument("--port", type=int, default=8786)
        parser.add_argument("--dashboard-port", type=int, default=8787)
        parser.add_argument("--no-dashboard", action="store_true")
        parser.add_argument("--scheduler-file", default=None)
    for option in TLS_OPTIONS:
        parser.add_argument(f"--{option.replace('_', '-')}", default=None)
    return parser


# --------------------------------------------------------------------------- the job

@dataclass
class GradingJob:
    """One submission to grade: everything a worker needs, nothing of the coordinator's disk."""
    assignment: str
    student: str
    files: dict[str, bytes]          # relative path in the submission folder -> contents
    db_url: str
    course_version: str
    timeout: float
    draw_key: bytes = b""            # the course's key of hidden draws (autograder.draw_key)


@dataclass
class JobResult:
    """What a worker sends back for one job."""
    rc: int | None
    log: str
    timed_out: float | None = None
    seconds: float | None = None
    changed: bool = False
    autograded: dict[str, bytes] = field(default_factory=dict)
    machine: str | None = None
    worker: str | None = None
    grader_error: str | None = None


def submission_files(folder: Path) -> dict[str, bytes]:
    """The regular files below a submission folder (links are left out: the pre-check already
    rejected a linked notebook, and the local runner's nbgrader does not copy links either)."""
    folder = Path(folder)
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink() and not any(
                p.is_symlink() for p in path.relative_to(folder).parents if str(p) != "."):
            files[str(path.relative_to(folder))] = path.read_bytes()
    return files


def _safe_path(base: Path, rel: str) -> Path:
    path = (base / rel).resolve()
    if not path.is_relative_to(base.resolve()) or path == base.resolve():
        raise ValueError(f"refusing a path outside its folder: {rel!r}")
    return path


def _files_hash(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + hashlib.sha256(files[rel]).digest())
    return h.hexdigest()


def _worker_name() -> str:
    try:
        from distributed import get_worker
        return get_worker().address
    except (ImportError, ValueError):
        return socket.gethostname()


def _gradebook_reachable(url: str) -> str | None:
    """None when the gradebook at ``url`` answers a connection, else why not (one line)."""
    import sqlalchemy

    args = {"connect_timeout": 15} if url.startswith("postgresql") else {}
    try:
        engine = sqlalchemy.create_engine(url, connect_args=args)
        try:
            with engine.connect() as conn:
                conn.execute(sqlalchemy.text("SELECT 1"))
        finally:
            engine.dispose()
    except Exception as err:  # noqa: BLE001 (any failure to connect is the answer)
        text = str(err).strip().splitlines()
        return f"{type(err).__name__}: {text[0] if text else ''}"
    return None


def grade_job(job: GradingJob) -> JobResult:
    """Run on a Dask worker: grade ``job`` in a temporary course root made from this worker's
    own course (``COURSE_ROOT`` or the repository this module is in)."""
    worker = _worker_name()
    root = grading.course_root()
    mine = course_version(root)
    kind = class_runner.machine_kind()
    if mine != job.course_version:
        return JobResult(None, "", machine=kind, worker=worker, grader_error=(
            f"GRADER ERROR: worker {worker} refused the job: its course version is {mine} "
            f"(course root {root}), the coordinator's is {job.course_version}; grades from two "
            f"versions of the hidden tests must not mix. Update that worker's course (the same "
            f"commit, kernels and packages) and re-run"))
    unreachable = _gradebook_reachable(job.db_url)
    if unreachable:
        return JobResult(None, "", machine=kind, worker=worker, grader_error=(
            f"GRADER ERROR: worker {worker} could not reach the gradebook "
            f"{database.describe(job.db_url)} ({unreachable}); nothing was written, re-run"))
    a, s = job.assignment, job.student
    base = None
    try:
        from distributed import get_worker
        base = get_worker().local_directory
    except (ImportError, ValueError):
        pass
    tmp = Path(tempfile.mkdtemp(prefix=f"grade-{a}-", dir=base))
    try:
        shutil.copy(root / grading.CONFIG_FILE, tmp / grading.CONFIG_FILE)
        shutil.copytree(grading.source_path(a, root).parent, tmp / "solutions" / a,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        folder = tmp / "submitted" / s / a
        folder.mkdir(parents=True)
        for rel, data in job.files.items():
            path = _safe_path(folder, rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        log_path = tmp / "nbgrader.log"
        start = time.perf_counter()
        # the coordinator's key of hidden draws, so this worker draws what the class runner would
        env = {draw_key.ENV: job.draw_key.decode()} if job.draw_key else None
        rc, timed_out = class_runner.run_nbgrader(
            class_runner.nbgrader_command(tmp, a, s, job.db_url), tmp, log_path, job.timeout, env=env)
        seconds = time.perf_counter() - start
        changed = _files_hash(submission_files(folder)) != _files_hash(job.files)
        out, total = {}, 0
        autograded = tmp / "autograded" / s / a
        if autograded.is_dir():
            for rel, data in submission_files(autograded).items():
                total += len(data)
                if total > MAX_RETURNED_BYTES:
                    break
                out[rel] = data
        return JobResult(rc, log_path.read_text(encoding="utf-8", errors="replace"), timed_out,
                         seconds, changed, out, kind, worker)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _worker_version(root: str | None = None) -> str:
    """A worker's course version (``connect`` asks every worker); also computes its machine kind
    once, so the first job does not pay for importing torch."""
    class_runner.machine_kind()
    return course_version(Path(root) if root else grading.course_root())


# --------------------------------------------------------------------------- the coordinator

class Cluster:
    """A client of the scheduler, checked for grading (see ``connect``)."""

    def __init__(self, client, address: str, version: str):
        self.client, self.address, self.version = client, address, version

    def threads(self) -> int:
        try:
            return sum(self.client.nthreads().values())
        except Exception:  # noqa: BLE001 (the scheduler is gone: the futures say so)
            return 0

    def close(self) -> None:
        try:   # a client that lost its scheduler has nobody to say goodbye to: do not wait
            self.client.close(timeout=10 if self.client.status == "running" else 1)
        except Exception:  # noqa: BLE001
            pass


def security(tls_ca_file: str | None = None, tls_cert: str | None = None, tls_key: str | None = None):
    """The client's ``distributed.Security``: TLS with these PEM files (all three, or none: then
    Dask's own configuration decides, plain TCP by default)."""
    from distributed import Security

    given = (tls_ca_file, tls_cert, tls_key)
    if not any(given):
        return None
    if not all(given):
        raise SetupError("TLS needs all three of --tls-ca-file, --tls-cert and --tls-key")
    return Security(tls_ca_file=str(tls_ca_file), tls_client_cert=str(tls_cert), tls_client_key=str(tls_key),
                    require_encryption=True)


START_SCHEDULER = "python -m autograder.dask_grading scheduler (from a checkout of the course)"
CLIENT_LOG = Path("autograded") / "_reports" / "dask-client.log"


def log_to_file(path: Path) -> None:
    """Send what Dask's client logs (reconnect attempts, and the tracebacks it logs when the
    scheduler is lost) to ``path`` instead of the runner's output, where they followed its own
    one-line message. Dask's logging set-up gives ``distributed``, ``distributed.client``,
    ``tornado`` and others each a console handler of their own and stops them propagating: every
    such handler is removed, the children pass their records up again, and the top loggers
    (``distributed``, ``tornado``, ``bokeh``, ``asyncio``) write to the file."""
    import logging

    tops = ("distributed", "tornado", "bokeh", "asyncio")
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and name.split(".")[0] in tops and name not in tops:
            for old in list(logger.handlers):
                logger.removeHandler(old)
            logger.propagate = True
    for name in tops:
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.propagate = False


def connect(address: str, root: Path, timeout: float = 30, tls: dict | None = None) -> Cluster:
    """Connect to the scheduler at ``address`` (with ``tls``: the keyword arguments of
    ``security``) and check it can grade course root ``root``: it imports this package (it
    unpickles every job), its retry settings, and the course version of the workers there now (a
    warning for each that differs; each of them would refuse its jobs)."""
    import importlib.util as _util

    import dask.config
    from distributed import Client

    version = course_version(root)
    secure = security(**(tls or {}))
    log_to_file(Path(root) / CLIENT_LOG)
    try:
        client = Client(address, timeout=timeout, security=secure)  # the default: distributed.wait uses it
    except (OSError, TimeoutError) as err:
        raise SetupError(f"cannot reach the Dask scheduler {address}: {err}") from err
    try:
        importable = client.run_on_scheduler(_util.find_spec, "autograder") is not None
        failures = client.run_on_scheduler(dask.config.get, "distributed.scheduler.allowed-failures")
        saturation = client.run_on_scheduler(dask.config.get, "distributed.scheduler.worker-saturation")
    except Exception as err:  # noqa: BLE001
        client.close()
        raise SetupError(f"cannot read the settings of the Dask scheduler {address}: {err}") from err
    if not importable:
        client.close()
        raise SetupError(
            f"refusing to grade on the Dask scheduler {address}: it cannot import this course's "
            f"grading code (autograder), and it unpickles every job, so every job would fail with "
            f"'Error during deserialization of the task graph'. Start it as: {START_SCHEDULER}")
    if failures != ALLOWED_FAILURES or float(saturation) != WORKER_SATURATION:
        client.close()
        raise SetupError(
            f"refusing to grade on the Dask scheduler {address}: it runs with allowed-failures "
            f"{failures} and worker-saturation {saturation}; grading needs allowed-failures "
            f"{ALLOWED_FAILURES} (a submission whose worker dies is graded again once, and zeroed "
            f"when the second worker dies too) and worker-saturation {WORKER_SATURATION:g} (a worker "
            f"holds only the jobs it runs, so a death is blamed on the submission it was grading). "
            f"Start it as: {START_SCHEDULER}")
    try:
        versions = client.run(_worker_version)
    except Exception as err:  # noqa: BLE001 (a worker without the course: its jobs fail and say so)
        print(f"warning: could not ask the workers for their course version: {err}", file=sys.stderr)
        versions = {}
    for worker, theirs in sorted(versions.items()):
        if theirs != version:
            print(f"warning: worker {worker} has course version {theirs}, this course is {version}: "
                  f"it will refuse every job", file=sys.stderr)
    print(f"Dask: {len(versions)} worker(s), course version {version}", flush=True)
    return Cluster(client, address, version)


def _flight_view(keys: list, dask_scheduler=None) -> tuple[list, dict]:
    """Run on the scheduler (``Client.run_on_scheduler``): the workers there now, and for each of
    ``keys`` still known, (its state, the worker processing it or None, how many workers died
    while running it: ``TaskState.suspicious``)."""
    tasks = {}
    for key in keys:
        ts = dask_scheduler.tasks.get(key)
        if ts is not None:
            tasks[key] = (ts.state, ts.processing_on.address if ts.processing_on else None, ts.suspicious)
    return list(dask_scheduler.workers), tasks


class DaskRunner(class_runner.Runner):
    """``class_runner.Runner`` whose nbgrader runs happen on Dask workers."""

    def __init__(self, cluster: Cluster, root: Path, assignment: str, url: str, timeout: float,
                 report_name: str | None = None, unfinished: bool = False):
        super().__init__(root, assignment, url, 1, timeout, report_name=report_name,
                         unfinished=unfinished)
        self.cluster = cluster

    def job(self, student: str) -> GradingJob:
        return GradingJob(self.assignment, student, submission_files(self.submission(student)),
                          self.url, self.cluster.version, self.timeout, draw_key.course_key(self.root) or b"")

    def submit(self, student: str):
        from dask._task_spec import Task

        key = f"grade-{self.assignment}-{student}-{uuid.uuid4().hex[:8]}"
        # A root-ish task (data producer): the scheduler queues it until a worker thread is free
        task = Task(key, grade_job, self.job(student), _data_producer=True)
        return self.cluster.client.get({key: task}, key, sync=False)

    def receive(self, student: str, future) -> class_runner.Outcome:
        """The outcome of one finished future; the log and autograded files written here."""
        from distributed.scheduler import KilledWorker

        log_path = self.log_dir / f"{student}.log"
        if future.status == "cancelled" or self.cluster.client.status not in ("running", "connecting"):
            raise SchedulerLost(f"lost the Dask scheduler {self.cluster.address} while grading")
        if future.status == "error":
            err = future.exception()
            if isinstance(err, KilledWorker):
                text = (f"the worker grading it died, twice: it was graded again on another worker "
                        f"after the first died, and that one died too (last: "
                        f"{err.last_worker.address}); graded 0, check it by hand (a crash or "
                        f"memory the sandbox did not contain?)")
                log_path.write_text(f"Dask: {err}\n", encoding="utf-8")
                return class_runner.Outcome(None, failure=text, worker=err.last_worker.address)
            log_path.write_text(f"Dask: the job failed on the worker: {type(err).__name__}: {err}\n",
                                encoding="utf-8")
            return class_runner.Outcome(None, grader_error=(
                f"GRADER ERROR: the Dask worker could not run the grading job "
                f"({type(err).__name__}: {err}); is the course on the worker's PYTHONPATH?"))
        result: JobResult = future.result()
        log_path.write_text(result.log, encoding="utf-8")
        if not result.grader_error:
            self.remove_outputs(student)
            if result.autograded:
                base = self.root / "autograded" / student / self.assignment
                for rel, data in result.autograded.items():
                    path = _safe_path(base, rel)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(data)
        return class_runner.Outcome(result.rc, result.timed_out, result.seconds, result.changed,
                                   result.machine, result.worker, result.grader_error)

    def watch(self, flight: dict) -> None:
        """One look at the scheduler (``_flight_view``): which worker runs each job in ``flight``,
        how many workers died while running it (Dask's own count, ``TaskState.suspicious``), and
        which workers have left since the last look. A death is named at once, in the output and in
        that submission's notes; Dask grades the job again on another worker (once: a second death
        ends in ``KilledWorker``, see ``receive``)."""
        by_key = {f.key: item for f, item in flight.items()}
        try:
            workers, tasks = self.cluster.client.run_on_scheduler(_flight_view, list(by_key))
        except Exception:  # noqa: BLE001 (the scheduler is gone: the futures say so)
            return
        for key, (_, worker, deaths) in tasks.items():
            seen = self.deaths.get(key, 0)
            if deaths > seen and key in by_key:
                student, notes, _ = by_key[key]
                who = self.running.get(key) or "(not seen)"
                note = (f"the Dask worker grading it ({who}) died; Dask grades it again on another worker"
                        if deaths == 1 else f"a second Dask worker grading it ({who}) died")
                notes.append(note)
                print(f"{self.assignment} {student}: {note}", flush=True)
            self.deaths[key] = max(seen, deaths)
        blamed = {self.running.get(k) for k, (_, _, d) in tasks.items() if d > 0}
        for worker in sorted(set(self.workers) - set(workers) - blamed):
            print(f"{self.assignment}: Dask worker {worker} left the cluster (it was grading none of "
                  f"this run's submissions)", flush=True)
        self.workers = set(workers)
        self.running.update({k: w for k, (_, w, _) in tasks.items() if w})
        self.states = {k: state for k, (state, _, _) in tasks.items()}

    def grade_all(self, todo: list, done, results: list) -> None:
        """Submit the jobs (at most two per worker thread ahead of the results: the scheduler's
        queue stays short and the journal's ``grading`` entries mean sent), take results as they
        come, refill. A result's future is released as soon as it is read, so that Dask forgets
        the task and never grades a finished submission again when the worker that ran it dies
        (a held future keeps its result on that worker, and Dask recomputes lost results)."""
        from distributed import wait

        pending = deque(todo)
        flight: dict = {}
        self.workers, self.running, self.deaths, self.states = set(), {}, {}, {}
        self.watch(flight)
        try:
            while pending or flight:
                room = max(2, 2 * self.cluster.threads())
                while pending and len(flight) < room:
                    student, notes = pending.popleft()
                    before = self.begin(student)
                    flight[self.submit(student)] = (student, notes, before)
                try:
                    finished = wait(list(flight), timeout=POLL_S, return_when="FIRST_COMPLETED").done
                except TimeoutError:
                    finished = set()
                except Exception as err:  # noqa: BLE001 (cancelled futures: the scheduler is gone)
                    if self.cluster.client.status in ("running", "connecting") and not any(
                            f.status == "cancelled" for f in flight):
                        raise
                    raise SchedulerLost(f"lost the Dask scheduler {self.cluster.address} while "
                                        f"grading ({type(err).__name__})") from err
                self.watch(flight)
                while finished:
                    fut = finished.pop()
                    student, notes, before = flight.pop(fut)
                    try:
                        outcome = self.receive(student, fut)
                    except SchedulerLost:
                        flight[fut] = (student, notes, before)
                        raise
                    fut.release()   # Dask forgets it: a worker's death cannot make it run again
                    del fut
                    done(self.conclude(student, notes, before, outcome))
        except BaseException as err:
            self.stopping = True
            lost = isinstance(err, SchedulerLost)
            started = 0
            for fut, (student, _, before) in flight.items():
                if not lost:
                    fut.cancel()
                running = self.states.get(fut.key) == "processing"
                started += running
                if lost and not running:
                    reason = ("not started: the Dask scheduler was lost while it waited in the "
                              "scheduler's queue (no worker was grading it when the coordinator last "
                              f"looked, at most {POLL_S:g} s before)")
                elif lost:
                    reason = (f"interrupted: the Dask scheduler was lost while worker "
                              f"{self.running.get(fut.key, '(not seen)')} was grading it")
                else:
                    reason = "interrupted: the run was stopped while it was being graded"
                with self.lock:
                    self.save(class_runner.Result(
                        student, class_runner.INTERRUPTED, reason + "; the gradebook may hold an older "
                        "or incomplete grade (re-run with --unfinished)", sha256=before))
            if lost:
                raise SchedulerLost(f"{err}: {started} submission(s) interrupted while a worker graded "
                                    f"them, {len(flight) - started} sent but not started, "
                                    f"{len(pending)} not sent; restart the scheduler and the workers "
                                    f"(they exit with it), then re-run with --unfinished to grade only "
                                    f"what the journal shows unfinished") from None
            raise


def main(argv: list[str]) -> int:
    if argv[:1] == ["version"]:
        root = Path(argv[1]) if len(argv) > 1 else grading.course_root()
        print(course_version(root))
        return 0
    if argv[:1] in (["scheduler"], ["worker"]):
        args = _cluster_parser(argv[0]).parse_args(argv[1:])
        build = scheduler_command if argv[0] == "scheduler" else worker_command
        cmd, env = build(args, dict(os.environ))
        print(" ".join(cmd), flush=True)
        if argv[0] == "worker":  # python -m puts the working folder first on sys.path: the course root's
            os.chdir(Path(args.root).resolve())
        os.execve(cmd[0], cmd, env)
    print("\n".join(__doc__.splitlines()[2:5]))
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
