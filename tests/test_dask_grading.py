"""Grading a class on Dask workers (``grade_class --scheduler``, autograder/dask_grading.py), with
real processes on the loopback: a ``dask scheduler``, ``dask worker`` processes (each with its own
nanny, one thread, its own directory holding its own copy of the toy course; as root each also
runs in a mount namespace where the coordinators' folder is an empty tmpfs, so it cannot read the
coordinator's course), and a PostgreSQL gradebook (autograder/postgres.py). Every course copy has
the short limits of tests/test_hostile_submissions.py (6 s per cell ...), so hostile cases are cheap.

- the same class graded by the local pool (SQLite, as today) and through two workers gives the same
  grades cell by cell, the same states and reasons; the report and the summary name the worker and
  the kind of machine;
- SIGKILL of the worker grading a submission: it is graded again on another worker; a submission
  whose worker is killed twice is zeroed with that reason; one gradebook row per student;
- hostile submissions keep their results through a worker;
- a scheduler address with SQLite refuses before grading anything;
- the scheduler killed mid-run (the module's, so that test comes after the others using it): the
  runner exits 3 and ``--unfinished`` grades only what is left;
- on a second scheduler, one worker at a time: a worker with a changed ``course/`` refuses its jobs
  naming both versions; a worker that cannot reach the gradebook (``PGHOSTADDR`` sends its
  connections to 127.0.0.2, where nothing listens) gives grader errors and writes nothing;
- ``--shard K/N`` and ``--merge`` (local pool, pre-check rejects only: no notebook runs).
Under CI a missing PostgreSQL or ``dask`` fails; elsewhere it skips.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autograder import class_runner, database, grade_class, grading, postgres

distributed = pytest.importorskip("distributed") if not os.environ.get("CI") else __import__("distributed")

from test_hostile_submissions import toy_cases  # noqa: E402 (the hostile class's expectations)

A = "toy"
AUTO = {"test_square": 1.0, "test_cube": 2.0}
VENV_BIN = Path(sys.executable).parent
SHORT_LIMITS = """
# tests/test_dask_grading.py: the short limits tests/test_hostile_submissions.py passes
c.SandboxedExecute.timeout = 6
c.SandboxedExecute.memory_mb = 1536
c.SandboxedExecute.max_processes = 64
c.SandboxedExecute.max_output_bytes = 200000
"""
SLOW_SQUARE = "import time\ntime.sleep(2)\ndef square(x):\n    return x * x"


def env(bare=False, **extra):
    """This venv first on PATH (nbgrader runs ``alembic``), this checkout first on PYTHONPATH (so
    ``autograder`` and ``course`` are this worktree's in every process), no COURSE_DB_URL.
    ``bare``: no PYTHONPATH and no DASK_* settings at all, as in a fresh shell in the checkout, where
    the commands of docs/instructors.md start the scheduler and the workers."""
    out = {k: v for k, v in os.environ.items() if k not in (database.ENV, "COURSE_ROOT")
           and not (bare and (k == "PYTHONPATH" or k.startswith("DASK_")))}
    out["PATH"] = f"{VENV_BIN}{os.pathsep}{out.get('PATH', '')}"
    if not bare:
        out["PYTHONPATH"] = os.pathsep.join([str(grading.REPO)] + ([out["PYTHONPATH"]] if out.get("PYTHONPATH") else []))
    out.update(extra)
    return out


def need(what, err):
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the Dask grading tests: {what}: {err}")
    pytest.skip(f"{what} not available here: {err}")


# ----------------------------------------------------------------- processes

class Scheduler:
    """The scheduler as docs/instructors.md starts it (``python -m autograder.dask_grading scheduler``, in
    the checkout, from a bare environment) on 127.0.0.1, a free port, no dashboard; ``tls``: the
    three PEM files' options."""

    def __init__(self, folder: Path, tls=()):
        folder.mkdir(parents=True, exist_ok=True)
        info = folder / "scheduler.json"
        self.log = folder / "scheduler.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autograder.dask_grading", "scheduler", "--host", "127.0.0.1",
             "--port", "0", "--no-dashboard", "--scheduler-file", str(info), *tls],
            cwd=grading.REPO, env=env(bare=True), stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 90
        while time.time() < deadline and not (info.exists() and info.read_text().strip()):
            if self.proc.poll() is not None:
                raise RuntimeError(f"dask scheduler exited:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)
        self.address = json.loads(info.read_text())["address"]

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def start_worker(address, folder: Path, course: Path, hide: Path | None, extra_env=None, pythonpath=None, tls=()):
    """A worker as docs/instructors.md starts one (``python -m autograder.dask_grading worker ADDRESS
    --root ...``, in the checkout, from a bare environment: a nanny and one one-thread worker),
    grading with a copy of ``course``'s config and solutions as its course root (a toy course:
    ``--root``); ``hide``: a folder it must not see (as root); ``pythonpath``: a folder before the
    checkout on its PYTHONPATH (a changed ``course``)."""
    folder.mkdir(parents=True)
    mine = folder / "course"
    (mine / "solutions").mkdir(parents=True)
    shutil.copy(course / grading.CONFIG_FILE, mine / grading.CONFIG_FILE)
    shutil.copytree(course / "solutions" / A, mine / "solutions" / A)
    cmd = [sys.executable, "-m", "autograder.dask_grading", "worker", address, "--root", str(mine),
           "--host", "127.0.0.1", "--name", folder.name, "--local-directory", str(folder / "dask"), *tls]
    if hide is not None and os.geteuid() == 0 and shutil.which("unshare"):
        cmd = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
               'mount -t tmpfs -o size=1m none "$0" && exec "$@"', str(hide), *cmd]
    extra = dict(extra_env or {})
    if pythonpath:
        extra["PYTHONPATH"] = str(pythonpath)
    return subprocess.Popen(cmd, cwd=grading.REPO, env=env(bare=True, **extra), stdout=open(folder / "worker.log", "w"),
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def new_gradebook(server_url: str, name: str, root: Path) -> str:
    """A new database ``name`` on the test's PostgreSQL server, with the toy released into it."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(server_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    url = server_url.rsplit("/", 1)[0] + f"/{name}"
    proc = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", A, "--force",
                           f"--CourseDirectory.root={root}", f"--CourseDirectory.db_url={url}"],
                          cwd=root, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, proc.stdout
    return url


def rows(url):
    """student -> grade_id -> (auto_score, score, needs_manual_grade)."""
    from nbgrader.api import Gradebook

    with Gradebook(url, "debug-course") as gb:
        return {sub.student.id: {g.name: (g.auto_score, float(g.score), bool(g.needs_manual_grade))
                                 for nb in sub.notebooks for g in nb.grades}
                for sub in gb.find_assignment(A).submissions}


def submission_counts(url):
    import sqlalchemy

    engine = sqlalchemy.create_engine(url)
    with engine.connect() as conn:
        found = dict(conn.execute(sqlalchemy.text(
            "SELECT student_id, count(*) FROM submitted_assignment GROUP BY student_id")).all())
    engine.dispose()
    return found


def run_class(root, *args, url=None, timeout=600):
    extra = {database.ENV: url} if url else {}
    proc = subprocess.run([sys.executable, "-m", "autograder.grade_class", A, "--root", str(root), *args],
                          cwd=grading.REPO, env=env(**extra), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL, timeout=timeout)
    return proc.returncode, proc.stdout, report_of(root)


def report_of(root, name=A):
    path = Path(root) / class_runner.REPORTS / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8"))["students"] if path.exists() else {}


def submit(root, student, nb):
    folder = Path(root) / "submitted" / student / A
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{A}.ipynb").write_text(nb if isinstance(nb, str) else json.dumps(nb), encoding="utf-8")


def source(root):
    return json.loads(grading.source_path(A, root).read_text(encoding="utf-8"))


# ----------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def pg():
    try:
        server = postgres.temporary_server("postgres_tests")
        url = server.__enter__()
    except postgres.Unavailable as err:
        need("PostgreSQL", err)
    yield url
    server.__exit__(None, None, None)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """The toy course, built and released once, with the short limits in its config."""
    root = tmp_path_factory.mktemp("toy") / "course"
    proc = subprocess.run([sys.executable, "-m", "autograder.toy_course", str(root)], cwd=grading.REPO,
                          env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, proc.stdout
    with open(root / grading.CONFIG_FILE, "a", encoding="utf-8") as f:
        f.write(SHORT_LIMITS)
    return root


@pytest.fixture(scope="module")
def coordinators(tmp_path_factory):
    """The folder under which every coordinator course root of this module lives (hidden from
    the workers)."""
    base = tmp_path_factory.mktemp("coordinators")
    (base / "probe").write_text("the workers must not see this")
    return base


def course_copy(toy, coordinators, name, keep_sqlite=False):
    return Path(shutil.copytree(toy, coordinators / name, ignore=None if keep_sqlite
                                else shutil.ignore_patterns("gradebook.db")))


@pytest.fixture(scope="module")
def cluster(toy, coordinators, tmp_path_factory, pg):
    """A scheduler and two workers; yields (scheduler, client, the workers' base folder)."""
    from distributed import Client

    base = tmp_path_factory.mktemp("workers")
    try:
        scheduler = Scheduler(base / "scheduler")
    except (OSError, RuntimeError) as err:
        need("dask scheduler", err)
    workers = [start_worker(scheduler.address, base / f"w{i}", toy, coordinators) for i in (1, 2)]
    client = Client(scheduler.address, timeout=60, set_as_default=False)
    try:
        client.wait_for_workers(2, timeout=180)
        if os.geteuid() == 0:  # the coordinators' folder is an empty tmpfs for every worker
            seen = client.run(os.path.exists, str(coordinators / "probe"))
            assert seen and not any(seen.values()), seen
        yield scheduler, client, base
    finally:
        for w in workers:
            stop(w)
        scheduler.kill()   # (the scheduler-lost test has killed it already)
        try:
            client.close(timeout=5)
        except Exception:  # noqa: BLE001 (the scheduler is gone)
            pass


@pytest.fixture(scope="module")
def spare(tmp_path_factory, pg):
    """A second scheduler, for the tests that bring their own worker (and the one that kills it)."""
    base = tmp_path_factory.mktemp("spare")
    try:
        scheduler = Scheduler(base / "scheduler")
    except (OSError, RuntimeError) as err:
        need("dask scheduler", err)
    yield scheduler, base
    scheduler.kill()


# ----------------------------------------------------------------- the same grades

def duplicated_test(root):
    nb = source(root)
    i = [grading.nbgrader_meta(c).get("grade_id") for c in nb["cells"]].index("test_square")
    nb["cells"].insert(i, json.loads(json.dumps(nb["cells"][i])))
    return nb


def the_class(root):
    """student -> notebook: the solution, a wrong answer, a deleted test cell (put back), one
    nbgrader cannot grade (failed) and one corrupt (rejected by the pre-check)."""
    from autograder.toy_course import CASES

    subs = {"solution": source(root), "duplicated": duplicated_test(root),
            "corrupt": json.dumps(source(root))[:300]}
    for case in CASES:
        if case.student in ("wrong_square", "deleted_test"):
            subs[case.student] = grading.edit_cells(source(root), case.edits)
    return subs


def test_dask_grades_like_the_local_pool_cell_by_cell(toy, coordinators, cluster, pg):
    scheduler, client, workers_base = cluster
    local = course_copy(toy, coordinators, "local", keep_sqlite=True)
    remote = course_copy(toy, coordinators, "remote")
    url = new_gradebook(pg, "same_grades", remote)
    for student, nb in the_class(local).items():
        submit(local, student, nb)
        submit(remote, student, nb)
    rc_local, out_local, rep_local = run_class(local, "--jobs", "2")
    rc_dask, out_dask, rep_dask = run_class(remote, "--scheduler", scheduler.address, url=url)
    assert rc_local == rc_dask == 1, out_local + out_dask     # one failed, one rejected
    assert "Dask scheduler" in out_dask and "postgresql://" in out_dask, out_dask
    assert rows(url) == rows(database.sqlite_url(local)), (out_local, out_dask)
    fields = ("state", "reason", "score", "max_score", "cells", "notes")
    assert {s: {f: e[f] for f in fields} for s, e in rep_dask.items()} == \
           {s: {f: e[f] for f in fields} for s, e in rep_local.items()}
    workers = set(client.scheduler_info()["workers"])
    graded = [s for s, e in rep_dask.items() if e["state"] == "graded"]
    assert graded and all(rep_dask[s]["worker"] in workers and rep_dask[s]["machine"] for s in graded)
    assert all(rep_local[s]["worker"] is None and rep_local[s]["machine"] for s in graded)
    assert len({rep_dask[s]["worker"] for s in graded}) == 2, "one worker graded everything"
    # the coordinator has the autograded notebooks (for feedback) and the logs; the workers keep nothing
    for s in graded:
        assert (remote / "autograded" / s / A / f"{A}.ipynb").is_file()
        assert "Autograding" in (remote / rep_dask[s]["log"]).read_text()
    assert not list(workers_base.rglob("grade-toy-*")), "a worker left a grading folder behind"
    summary = subprocess.run([sys.executable, "-m", "autograder.summary", A, "--root", str(remote)],
                             cwd=grading.REPO, env=env(**{database.ENV: url}), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    assert summary.returncode == 0, summary.stdout
    section = summary.stdout.split("-- graded on")[1]
    assert rep_dask["solution"]["machine"] in section and rep_dask["solution"]["worker"] in section


def test_a_scheduler_with_sqlite_refuses_before_grading(toy, coordinators, cluster):
    scheduler, _, _ = cluster
    root = course_copy(toy, coordinators, "sqlite", keep_sqlite=True)
    submit(root, "alice", source(root))
    before = (root / "gradebook.db").read_bytes()
    rc, out, report = run_class(root, "--scheduler", scheduler.address)
    assert rc == 2 and "SQLite" in out and "PostgreSQL" in out, out
    assert report == {} and not (root / "autograded").exists(), out
    assert (root / "gradebook.db").read_bytes() == before


# ----------------------------------------------------------------- a worker killed

def nbgrader_processes(under: Path):
    """pid -> student of the nbgrader autograde processes whose course root is below ``under``."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        argv = [a.decode(errors="replace") for a in argv]
        if "autograde" in argv and "--student" in argv and any(
                a.startswith(f"--CourseDirectory.root={under}") for a in argv):
            found[int(proc.name)] = argv[argv.index("--student") + 1]
    return found


def parent(pid):
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


class Killer(threading.Thread):
    """Kills (SIGKILL) the worker process running nbgrader for a student, ``plan[student]`` times,
    each time 1.5 s after that run's nbgrader process appeared (the notebook is being graded).
    Also records the most jobs the scheduler ever had on one worker at once (``most_held``)."""

    def __init__(self, under, plan, client):
        super().__init__(daemon=True)
        self.under, self.plan, self.kills, self.done = under, dict(plan), [], threading.Event()
        self.client, self.most_held = client, 0

    def run(self):
        first_seen, handled = {}, set()
        deadline = time.time() + 400
        while not self.done.is_set() and time.time() < deadline:
            now = time.time()
            for pid, student in nbgrader_processes(self.under).items():
                first_seen.setdefault(pid, now)
                left = self.plan.get(student, 0) - sum(s == student for s, _ in self.kills)
                if pid not in handled and left > 0 and now - first_seen[pid] >= 1.5:
                    handled.add(pid)
                    try:
                        worker = parent(pid)
                        os.kill(worker, signal.SIGKILL)
                        self.kills.append((student, worker))
                    except (OSError, ValueError, IndexError):
                        pass
            try:
                held = [len(keys) for keys in self.client.processing().values()]
                self.most_held = max([self.most_held, *held])
            except Exception:  # noqa: BLE001 (a worker just died)
                pass
            time.sleep(0.1)


def test_a_killed_worker_regrades_once_then_zeroes(toy, coordinators, cluster, pg):
    """SIGKILL of the worker grading ``a_once``: graded again on another worker. ``b_twice``'s
    worker is killed on both attempts: zeroed with that reason. The others graded; one gradebook
    row each; no worker ever held more than the one job it ran (three jobs, two workers)."""
    scheduler, client, workers_base = cluster
    root = course_copy(toy, coordinators, "killed")
    url = new_gradebook(pg, "killed", root)
    slow = grading.edit_cells(source(root), {"square": SLOW_SQUARE})
    for student in ("a_once", "b_twice"):
        submit(root, student, slow)
    submit(root, "c_plain", source(root))
    killer = Killer(workers_base, {"a_once": 1, "b_twice": 2}, client)
    killer.start()
    try:
        rc, out, report = run_class(root, "--scheduler", scheduler.address, url=url)
    finally:
        killer.done.set()
        killer.join()
        client.wait_for_workers(2, timeout=180)   # the nannies restart the killed workers
    assert sorted(s for s, _ in killer.kills) == ["a_once", "b_twice", "b_twice"], (killer.kills, out)
    # a worker held only the job it ran, so each death was blamed on that job alone
    assert killer.most_held == 1, f"a worker held {killer.most_held} jobs at once"
    assert rc == 1, out
    grades = rows(url)
    for student in ("a_once", "c_plain"):
        assert report[student]["state"] == "graded", (student, report[student], out)
        assert {g: grades[student][g][0] for g in AUTO} == AUTO, (student, grades[student])
    # each death is named as it happens, in the output and in that submission's notes
    assert out.count("a_once: the Dask worker grading it") == 1, out
    assert any("worker grading it" in n and "died" in n for n in report["a_once"]["notes"]), report["a_once"]
    assert "b_twice: the Dask worker grading it" in out and "b_twice: a second Dask worker" in out, out
    entry = report["b_twice"]
    assert entry["state"] == "failed" and "died, twice" in entry["reason"], entry
    assert all(auto == 0 and score == 0 and not manual for auto, score, manual in grades["b_twice"].values())
    assert not (root / "autograded" / "b_twice").exists()
    assert submission_counts(url) == {s: 1 for s in ("a_once", "b_twice", "c_plain")}


def processed(client, student) -> int:
    """How many times the scheduler sent ``student``'s grading job to a worker (its transition log:
    every move of a ``grade-toy-<student>-*`` task into ``processing``)."""
    prefix = f"grade-{A}-{student}-"
    return client.run_on_scheduler(lambda dask_scheduler: sum(
        1 for t in dask_scheduler.transition_log if str(t[0]).startswith(prefix) and t[2] == "processing"))


def test_a_finished_submission_is_not_graded_again_when_its_worker_dies(toy, coordinators, cluster, pg):
    """Kill the worker that graded ``a_first`` as soon as the report says it is graded, while the
    others are still graded: the coordinator has released its result, so Dask forgets the task and
    never sends it to a worker again (a held future keeps the result on that worker, and Dask
    recomputes a lost result: ``a_first`` would be graded twice, silently). The output names the
    worker's death."""
    scheduler, client, workers_base = cluster
    root = course_copy(toy, coordinators, "released")
    url = new_gradebook(pg, "released", root)
    submit(root, "a_first", source(root))
    slow = grading.edit_cells(source(root), {"square": SLOW_SQUARE.replace("(2)", "(4.5)")})
    for student in ("b_slow", "c_slow"):
        submit(root, student, slow)
    proc = subprocess.Popen([sys.executable, "-m", "autograder.grade_class", A, "--root", str(root),
                             "--scheduler", scheduler.address], cwd=grading.REPO,
                            env=env(**{database.ENV: url}), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and report_of(root).get("a_first", {}).get("state") != "graded":
            time.sleep(0.05)
        worker = report_of(root)["a_first"]["worker"]
        pids = client.run(os.getpid)
        os.kill(pids[worker], signal.SIGKILL)
        out = proc.communicate(timeout=300)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
        client.wait_for_workers(2, timeout=180)   # the nanny restarts the killed worker
    assert processed(client, "a_first") == 1, f"a_first was sent to a worker again after its result:\n{out}"
    # the death is in the output: as a worker that left, or (when it had taken the next job) as the
    # death of the worker grading that job
    assert (f"Dask worker {worker} left the cluster" in out
            or f"the Dask worker grading it ({worker}) died" in out), out
    report = report_of(root)
    assert all(report[s]["state"] == "graded" for s in ("a_first", "b_slow", "c_slow")), out
    assert submission_counts(url) == {"a_first": 1, "b_slow": 1, "c_slow": 1}


def test_a_plain_dask_scheduler_is_refused_with_the_command_that_works(toy, coordinators, pg, tmp_path):
    """A ``dask scheduler`` started as Dask documents it, with the two settings but without this
    checkout on its path, cannot unpickle a job (every job would fail): the coordinator refuses
    before grading anything and names ``python -m autograder.dask_grading scheduler``."""
    info = tmp_path / "scheduler.json"
    plain = subprocess.Popen(
        [sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
         "--scheduler-file", str(info)], cwd=tmp_path,
        env=env(bare=True, DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES="1",
                DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION="1.0"),
        stdout=open(tmp_path / "scheduler.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 90
        while time.time() < deadline and not (info.exists() and info.read_text().strip()):
            time.sleep(0.2)
        address = json.loads(info.read_text())["address"]
        root = course_copy(toy, coordinators, "plain")
        url = new_gradebook(pg, "plain", root)
        submit(root, "solution", source(root))
        rc, out, report = run_class(root, "--scheduler", address, url=url)
    finally:
        stop(plain)
    assert rc == 2 and "cannot import this course's grading code" in out, out
    assert "python -m autograder.dask_grading scheduler" in out, out
    assert report == {}, "something was graded"


def make_certificates(folder: Path) -> dict:
    """A CA and one certificate it signed for 127.0.0.1 (openssl), as the three TLS options."""
    if not shutil.which("openssl"):
        need("openssl", "not on PATH")
    folder.mkdir(parents=True, exist_ok=True)

    def run(*args):
        proc = subprocess.run(["openssl", *args], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.returncode == 0, proc.stdout

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=course-test-ca",
        "-keyout", "ca.key", "-out", "ca.pem")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "node.key", "-out", "node.csr")
    (folder / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
        "-extfile", "ext.cnf", "-out", "node.pem")
    return {"--tls-ca-file": folder / "ca.pem", "--tls-cert": folder / "node.pem", "--tls-key": folder / "node.key"}


def test_one_class_graded_over_tls(toy, coordinators, pg, tmp_path_factory):
    """The scheduler and a worker started with the TLS options of docs/instructors.md (self-made CA and
    certificate, loopback): the scheduler listens on tls:// only, a coordinator with the same three
    options grades the class, one without them cannot connect and grades nothing."""
    base = tmp_path_factory.mktemp("tls")
    tls = [str(x) for kv in make_certificates(base / "certs").items() for x in kv]
    scheduler = Scheduler(base / "scheduler", tls=tls)
    worker = None
    try:
        assert scheduler.address.startswith("tls://"), scheduler.address
        worker = start_worker(scheduler.address, base / "w1", toy, coordinators, tls=tls)
        root = course_copy(toy, coordinators, "tls")
        url = new_gradebook(pg, "tls", root)
        submit(root, "solution", source(root))
        submit(root, "wrong", grading.edit_cells(source(root), {"square": "def square(x):\n    return x + x"}))
        rc, out, _ = run_class(root, "--scheduler", scheduler.address.replace("tls://", "tcp://"), url=url, timeout=120)
        assert rc == 2 and "cannot reach the Dask scheduler" in out, out
        rc, out, report = run_class(root, "--scheduler", scheduler.address, *tls, url=url)
    finally:
        if worker is not None:
            stop(worker)
        scheduler.kill()
    assert rc == 0, out
    assert report["solution"]["state"] == "graded", (report, out)
    assert {g: report["solution"]["cells"][g]["score"] for g in AUTO} == AUTO, report["solution"]
    assert report["wrong"]["state"] == "graded" and report["wrong"]["cells"]["test_square"]["score"] == 0, report


def test_the_readme_starts_the_cluster_with_the_commands_these_tests_use():
    """Every by-hand line of docs/instructors.md that starts a scheduler or a worker is
    ``python -m autograder.dask_grading scheduler|worker`` (what ``Scheduler`` and ``start_worker``
    run here), and its options are ones that command takes: the page cannot drift to a command the
    tests do not run. Negative control: the old by-hand line (a plain ``dask scheduler``) is caught."""
    import shlex

    from autograder import dask_grading

    def starts(text):
        """The lines of the text's ```bash blocks that start a scheduler or a worker."""
        found = []
        for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
            for line in block.splitlines():
                line = line.strip().rstrip("\\").strip()
                if line.startswith("#") or not re.search(r"\bdask(_grading)? (scheduler|worker)\b", line):
                    continue
                found.append(line.split("  #")[0].replace("$TLS", "--tls-ca-file a --tls-cert b --tls-key c")
                             .replace('"$(nproc)"', "2"))
        return found

    def problems(lines):
        out = []
        for line in lines:
            words = shlex.split(line)
            words = words[words.index("-m") + 1:] if "-m" in words else words
            if words[:1] != ["autograder.dask_grading"] or words[1:2] not in (["scheduler"], ["worker"]):
                out.append(f"not a course command: {line}")
                continue
            try:
                dask_grading._cluster_parser(words[1]).parse_args(words[2:])
            except SystemExit:
                out.append(f"options the command does not take: {line}")
        return out

    readme = (grading.REPO / "docs" / "instructors.md").read_text(encoding="utf-8")
    lines = starts(readme)
    assert len(lines) >= 4, lines
    assert problems(lines) == []
    old = ("DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=1 .venv/bin/dask scheduler --port 8786",
           ".venv/bin/python -m autograder.dask_grading worker tcp://h:8786 --nthreads 1")
    assert len(problems(starts("```bash\n" + "\n".join(old) + "\n```\n"))) == 2


# ----------------------------------------------------------------- hostile submissions

# a limit that stops the notebook (and NotRun after it), the snoop (the sandbox on a worker), a guard
# case; the other families run in tests/test_hostile_submissions.py and nothing in them depends on
# where nbgrader runs
HOSTILE = ("loop_after", "snoop", "hook_input_post")


def test_hostile_submissions_keep_their_results_on_a_worker(toy, coordinators, cluster, pg):
    """Part of the hostile class of tests/test_hostile_submissions.py graded through the workers:
    the same scores and reasons as there."""
    import socket

    scheduler, _, workers_base = cluster
    root = course_copy(toy, coordinators, "hostile")
    url = new_gradebook(pg, "hostile", root)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(5)
        listener.settimeout(0.1)
        # the snoop reaches for a worker's own course root (solutions, a gradebook file there)
        cases = toy_cases(workers_base / "w1" / "course", listener.getsockname()[1])
        for student in HOSTILE:
            submit(root, student, grading.edit_cells(source(root), cases[student][0]))
        rc, out, report = run_class(root, "--scheduler", scheduler.address, url=url)
        with pytest.raises(OSError):
            listener.accept()
    grades = rows(url)
    for student in HOSTILE:
        _, expect, reason = cases[student]
        path = root / "autograded" / student / A / f"{A}.ipynb"
        assert path.is_file(), (student, report.get(student), out)
        nb = json.loads(path.read_text())
        outs = {grading.nbgrader_meta(c).get("grade_id") or i:
                "".join(f"{o['ename']}: {o['evalue']}\n" if o["output_type"] == "error" else
                        "".join(o.get("text", "")) for o in c.get("outputs", []))
                for i, c in enumerate(nb["cells"])}
        for gid in AUTO:
            auto, score, manual = grades[student][gid]
            assert not manual, (student, gid, outs.get(gid))
            if expect is not None:
                assert (score == AUTO[gid]) == expect[gid], (student, gid, score, outs.get(gid))
        for text in (reason,) if isinstance(reason, str) else reason or ():
            assert any(text in o for o in outs.values()), (student, text, outs)
    snoop = outs_of(root, "snoop")["square"]
    assert "LEAK" not in snoop and snoop.count("BLOCKED") == 9, snoop
    assert not (workers_base / "w1" / "course" / "gradebook.db").exists()


def outs_of(root, student):
    nb = json.loads((root / "autograded" / student / A / f"{A}.ipynb").read_text())
    return {grading.nbgrader_meta(c).get("grade_id") or i: "".join(
        "".join(o.get("text", "")) for o in c.get("outputs", [])) for i, c in enumerate(nb["cells"])}


# ----------------------------------------------------------------- the scheduler lost (last)

def test_the_scheduler_lost_mid_run_then_unfinished_only(toy, coordinators, cluster, pg):
    """Kill the scheduler (the module's: this test comes last) while one submission is graded and
    one is done: exit 3, the journal shows the one in flight interrupted; ``--unfinished`` (here
    on the local pool) grades only that one."""
    scheduler, _, base = cluster
    root = course_copy(toy, coordinators, "lost")
    url = new_gradebook(pg, "lost", root)
    submit(root, "a_fast", source(root))
    # b_slow sleeps long enough that a loaded machine still reports a_fast graded while b_slow is
    # in flight (at 5 s both had finished before the kill once, under a full unit phase), in two
    # cells of 4.5 s each: one cell of 20 s ran past the toy's cell timeout (6 s, SHORT_LIMITS) and
    # b_slow then scored 0 when it was graded again
    slow = SLOW_SQUARE.replace("(2)", "(4.5)")
    slow_cube = "import time\ntime.sleep(4.5)\ndef cube(x):\n    return x ** 3"
    submit(root, "b_slow", grading.edit_cells(source(root), {"square": slow, "cube": slow_cube}))
    submit(root, "c_slow", grading.edit_cells(source(root), {"square": slow, "cube": slow_cube}))
    submit(root, "d_queued", source(root))   # sent, but both workers are busy: waits in the queue
    try:
        proc = subprocess.Popen([sys.executable, "-m", "autograder.grade_class", A, "--root", str(root),
                                 "--scheduler", scheduler.address], cwd=grading.REPO,
                                env=env(**{database.ENV: url}), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
        deadline = time.time() + 300
        while time.time() < deadline and not (
                report_of(root).get("a_fast", {}).get("state") == "graded"
                and {"b_slow", "c_slow"} <= set(nbgrader_processes(base).values())):
            time.sleep(0.2)
        scheduler.kill()
        out = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, out
    assert "--unfinished" in out and "restart the scheduler and the workers" in out, out
    assert "Traceback" not in out, f"a traceback after the runner's message:\n{out}"
    assert "2 submission(s) interrupted while a worker graded them, 1 sent but not started" in out, out
    report = report_of(root)
    assert report["a_fast"]["state"] == "graded", report
    for student in ("b_slow", "c_slow"):
        entry = report[student]
        assert entry["state"] == "interrupted" and "scheduler was lost while worker" in entry["reason"], entry
    assert report["d_queued"]["state"] == "interrupted" and report["d_queued"]["reason"].startswith(
        "not started: the Dask scheduler was lost while it waited"), report["d_queued"]
    graded_at = report["a_fast"]["finished"]
    rc, out, report = run_class(root, "--unfinished", "--jobs", "2", url=url)
    assert rc == 0, out
    assert "1 submission(s) already finished" in out and "grading 3" in out, out
    assert report["a_fast"]["finished"] == graded_at, "a finished submission was graded again"
    grades = rows(url)
    for student in ("a_fast", "b_slow", "c_slow", "d_queued"):
        assert report[student]["state"] == "graded", report[student]
        assert {g: grades[student][g][0] for g in AUTO} == AUTO
    assert submission_counts(url) == {"a_fast": 1, "b_slow": 1, "c_slow": 1, "d_queued": 1}


# ----------------------------------------------------------------- one worker at a time

def wait_workers(address, n, timeout=180):
    from distributed import Client

    with Client(address, timeout=60, set_as_default=False) as client:
        client.wait_for_workers(n, timeout=timeout)
        return list(client.scheduler_info()["workers"])


def wait_no_workers(address, timeout=60):
    from distributed import Client

    with Client(address, timeout=60, set_as_default=False) as client:
        deadline = time.time() + timeout
        while client.scheduler_info()["workers"] and time.time() < deadline:
            time.sleep(0.2)


def test_a_worker_with_a_changed_course_refuses(toy, coordinators, spare, pg, tmp_path):
    scheduler, base = spare
    changed = tmp_path / "changed"
    shutil.copytree(grading.REPO / "course", changed / "course",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(changed / "course" / "checks.py", "a", encoding="utf-8") as f:
        f.write("\n# a hidden test's helper changed on this worker only\n")
    worker = start_worker(scheduler.address, base / "changed", toy, coordinators, pythonpath=changed)
    try:
        wait_workers(scheduler.address, 1)
        root = course_copy(toy, coordinators, "changed")
        url = new_gradebook(pg, "changed", root)
        submit(root, "alice", source(root))
        rc, out, report = run_class(root, "--scheduler", scheduler.address, url=url)
    finally:
        stop(worker)
        wait_no_workers(scheduler.address)
    from autograder import dask_grading
    ours = dask_grading.course_version(root)
    entry = report["alice"]
    assert rc == 1 and entry["state"] == "failed" and "GRADER ERROR" in entry["reason"], out
    assert "refused" in entry["reason"] and ours in entry["reason"], entry["reason"]
    theirs = [w for w in entry["reason"].split() if len(w) == 16 and w != ours]
    assert theirs, entry["reason"]                         # the worker's own version is named too
    assert f"has course version {theirs[0]}" in out, out   # and the coordinator warned first
    assert "alice" not in submission_counts(url), "a refused job wrote to the gradebook"


def test_a_worker_that_cannot_reach_the_gradebook_writes_nothing(toy, coordinators, spare, pg):
    scheduler, base = spare
    # libpq takes PGHOSTADDR when the URL names no hostaddr: this worker's connections go to
    # 127.0.0.2, where nothing listens (the server listens on 127.0.0.1 only)
    worker = start_worker(scheduler.address, base / "nodb", toy, coordinators,
                          extra_env={"PGHOSTADDR": "127.0.0.2"})
    try:
        wait_workers(scheduler.address, 1)
        root = course_copy(toy, coordinators, "nodb")
        url = new_gradebook(pg, "nodb", root)
        for student in ("alice", "bob"):
            submit(root, student, source(root))
        rc, out, report = run_class(root, "--scheduler", scheduler.address, url=url)
    finally:
        stop(worker)
        wait_no_workers(scheduler.address)
    assert rc == 1, out
    for student in ("alice", "bob"):
        entry = report[student]
        assert entry["state"] == "failed" and entry["reason"].startswith("failed: GRADER ERROR"), entry
        assert "could not reach the gradebook" in entry["reason"] and entry["score"] is None, entry
    assert submission_counts(url) == {}, "nothing may be written"
    assert not (root / "autograded" / "alice").exists()


# ----------------------------------------------------------------- shards

def test_shards_grade_disjoint_students_and_merge(toy, tmp_path):
    """``--shard K/N`` by a stable hash of the student id, each shard its own report; ``--merge``
    joins them. Corrupt notebooks only: the pre-check rejects them, no notebook runs."""
    root = Path(shutil.copytree(toy, tmp_path / "course"))
    students = [f"s{i:02d}" for i in range(5)]
    for s in students:
        submit(root, s, "{ not json")
    assert class_runner.shard_of("alice", 4) == class_runner.shard_of("alice", 4) == 3  # stable: recorded once
    for k in range(2):
        rc, out, _ = run_class(root, "--shard", f"{k}/2")
        assert rc == 1, out
    parts = [report_of(root, f"{A}.shard-{k}-of-2") for k in range(2)]
    for k, part in enumerate(parts):
        assert set(part) == {s for s in students if class_runner.shard_of(s, 2) == k}
        assert part, "a shard got no student: pick other ids"
    assert sum(len(p) for p in parts) == len(students)
    assert not report_of(root)
    assert grade_class.main([A, "--root", str(root), "--merge"]) == 0    # --merge grades nothing
    report = report_of(root)
    assert set(report) == set(students) and all(e["state"] == "rejected" for e in report.values())
    (root / class_runner.REPORTS / f"{A}.shard-1-of-2.json").unlink()
    _, problems = class_runner.merge_reports(root, A)
    assert problems == ["no report from shard(s) 1 of 2: their students are not in the merge"]


def test_what_dasks_client_logs_goes_to_the_log_not_the_runners_output(tmp_path):
    """The tracebacks Dask's client logs when its scheduler is gone (``distributed.client`` errors
    with their traceback, asyncio's) go to the log file, not to the console handlers Dask's own
    logging set-up gives its loggers (``distributed``, ``distributed.client``, ...: the runner's
    output), nor up to the root logger. Control: with Dask's set-up as importing it leaves it, the
    console gets the traceback."""
    import io
    import logging

    from autograder import dask_grading
    family = [n for n, lg in logging.root.manager.loggerDict.items() if isinstance(lg, logging.Logger)
              and n.split(".")[0] in ("distributed", "tornado", "bokeh", "asyncio")] + ["asyncio"]
    saved = {n: (list(logging.getLogger(n).handlers), logging.getLogger(n).propagate) for n in family}
    console, root_seen = io.StringIO(), io.StringIO()
    root_handler = logging.StreamHandler(root_seen)

    def log_a_traceback():
        try:
            raise ConnectionRefusedError("[Errno 111] Connection refused")
        except ConnectionRefusedError:
            logging.getLogger("distributed.client").exception("reconnect failed")
        logging.getLogger("asyncio").error("Task exception was never retrieved")

    try:
        # Dask's set-up as importing it leaves it in a plain process (checked there): each of these
        # loggers has a console handler of its own and does not propagate
        for n in ("distributed", "distributed.client", "tornado", "tornado.application"):
            logger = logging.getLogger(n)
            logger.addHandler(logging.StreamHandler(console))
            logger.propagate = False
        logging.getLogger("asyncio").addHandler(logging.StreamHandler(console))
        log_a_traceback()
        assert "Traceback" in console.getvalue(), "control: Dask's console handlers get the traceback"
        console.truncate(0)
        console.seek(0)
        logging.getLogger().addHandler(root_handler)
        dask_grading.log_to_file(tmp_path / "dask-client.log")
        log_a_traceback()
        assert console.getvalue() == "" and root_seen.getvalue() == "", (console.getvalue(), root_seen.getvalue())
        text = (tmp_path / "dask-client.log").read_text()
        assert "Traceback" in text and "never retrieved" in text
    finally:
        logging.getLogger().removeHandler(root_handler)
        for n, (handlers, propagate) in saved.items():
            logger = logging.getLogger(n)
            for h in list(logger.handlers):
                logger.removeHandler(h)
            for h in handlers:
                logger.addHandler(h)
            logger.propagate = propagate
