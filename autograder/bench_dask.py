"""Print how fast a class is graded by the local pool and through Dask workers, on this machine.

    python -m autograder.bench_dask [--class-size M]          (make bench-dask)

One toy class (``autograder.bench.build_toy_class``: M submissions, default 12, in turn the
solution, the untouched release and the toy's targeted cases), one throw-away PostgreSQL server
(``autograder.postgres``), each run in a fresh copy of the course and a fresh database:

- the local pool (``class_runner.Runner``, jobs = the machine's cores);
- a ``dask scheduler`` with one ``dask worker`` (one thread, nanny, its own folder and copy of the
  course), then with two (``dask_grading.DaskRunner``, as ``grade_class --scheduler`` runs it).

For each: submissions per minute (wall time of the whole run, after the workers are up) and the
states. For the Dask runs also the coordinator's own seconds per submission: the pre-check, the
journal entry, reading and sending the files, and on the way back writing the log and the
autograded files, reading the grades and rewriting the report (time spent in this process, not
waiting for workers). How many workers one coordinator could keep busy follows from the two
figures; it is printed as an estimate, not as a measurement. Prints; checks nothing.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder import bench, class_runner, dask_grading, grading, postgres

def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_DB_URL", "COURSE_ROOT")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(grading.REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(extra)
    return env


class Timed(dask_grading.DaskRunner):
    """DaskRunner that adds up the seconds this process spends on its own work."""
    own = 0.0

    def _timed(self, name, *args):
        start = time.perf_counter()
        try:
            return getattr(super(), name)(*args)
        finally:
            Timed.own += time.perf_counter() - start

    def begin(self, student):
        return self._timed("begin", student)

    def submit(self, student):
        return self._timed("submit", student)

    def receive(self, student, future):
        return self._timed("receive", student, future)

    def conclude(self, student, notes, before, outcome):
        return self._timed("conclude", student, notes, before, outcome)


def _database(server_url: str, name: str, root: Path) -> str:
    import sqlalchemy

    engine = sqlalchemy.create_engine(server_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    url = server_url.rsplit("/", 1)[0] + f"/{name}"
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", "toy", "--force",
                    f"--CourseDirectory.root={root}", f"--CourseDirectory.db_url={url}"], cwd=root,
                   env=_env(), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return url


def _start(cmd, folder: Path, **extra):
    folder.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(cmd, cwd=folder, env=_env(**extra), stdout=open(folder / "log", "w"),
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def _stop(proc) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _run(runner, root: Path) -> tuple[float, dict]:
    names = class_runner.students(root, "toy")
    start = time.perf_counter()
    results = runner.run(names, echo=lambda *a, **k: None)
    seconds = time.perf_counter() - start
    states: dict = {}
    for r in results:
        states[r.state] = states.get(r.state, 0) + 1
    return seconds, states


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--class-size", type=int, default=12)
    args = parser.parse_args(argv)
    size, cores = args.class_size, os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="bench-dask-") as tmp, postgres.temporary_server() as server:
        tmp = Path(tmp)
        with contextlib.redirect_stdout(io.StringIO()):
            bench.build_toy_class(tmp / "toy-class", size)
        print(f"Dask bench: {size} toy submissions (autograder/toy_course.py, no torch), PostgreSQL "
              f"gradebook, {cores} cores on this machine, scheduler and workers on the loopback; "
              f"load before: {os.getloadavg()[0]:.1f}", flush=True)
        print(f"{'how':<28}{'total s':>9}{'subs/min':>10}{'coord. s/sub':>14}  states", flush=True)
        figures = {}

        def course(name):
            root = tmp / name
            shutil.copytree(tmp / "toy-class", root, ignore=shutil.ignore_patterns("gradebook.db"))
            return root, _database(server, name.replace("-", "_"), root)

        root, url = course("local")
        runner = class_runner.Runner(root, "toy", url, cores, class_runner.DEFAULT_TIMEOUT_S)
        seconds, states = _run(runner, root)
        print(f"{f'local pool, jobs={cores}':<28}{seconds:>9.1f}{60 * size / seconds:>10.1f}{'':>14}  {states}",
              flush=True)
        info = tmp / "scheduler" / "scheduler.json"
        # started as docs/instructors.md starts them (autograder.dask_grading scheduler / worker)
        scheduler = _start([sys.executable, "-m", "autograder.dask_grading", "scheduler", "--host", "127.0.0.1",
                            "--port", "0", "--no-dashboard", "--scheduler-file", str(info)], tmp / "scheduler")
        workers = []
        try:
            while not (info.exists() and info.read_text().strip()):
                time.sleep(0.2)
            address = json.loads(info.read_text())["address"]
            for n in (1, 2):
                folder = tmp / f"worker{n}"
                shutil.copytree(tmp / "toy-class" / "solutions", folder / "course" / "solutions")
                shutil.copy(tmp / "toy-class" / grading.CONFIG_FILE, folder / "course")
                workers.append(_start([sys.executable, "-m", "autograder.dask_grading", "worker", address,
                                       "--root", str(folder / "course"), "--host", "127.0.0.1",
                                       "--local-directory", str(folder / "dask")], folder))
                root, url = course(f"dask{n}")
                with contextlib.redirect_stdout(io.StringIO()):
                    cluster = dask_grading.connect(address, root)
                try:
                    cluster.client.wait_for_workers(n, timeout=300)
                    cluster.client.run(dask_grading._worker_version)   # the workers' torch import, once
                    Timed.own = 0.0
                    pre = time.perf_counter()
                    for s in class_runner.students(root, "toy"):
                        class_runner.precheck(root, "toy", s)
                    Timed.own += time.perf_counter() - pre
                    seconds, states = _run(Timed(cluster, root, "toy", url, class_runner.DEFAULT_TIMEOUT_S), root)
                finally:
                    cluster.close()
                figures[n] = (seconds, Timed.own / size)
                print(f"{f'Dask, {n} worker(s)':<28}{seconds:>9.1f}{60 * size / seconds:>10.1f}"
                      f"{Timed.own / size:>14.3f}  {states}", flush=True)
        finally:
            for w in workers:
                _stop(w)
            _stop(scheduler)
        seconds, own = figures[1]
        per_sub = seconds / size
        print(f"estimate, not measured: one worker thread takes {per_sub:.1f} s a toy submission here and "
              f"the coordinator {own:.3f} s of its own, so one coordinator could keep about "
              f"{per_sub / own:.0f} such worker threads busy (real notebooks take longer on a worker, "
              f"and cost the coordinator more too: not measured here)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
