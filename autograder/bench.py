"""Print how long each solution notebook takes to execute and to autograde, on this machine.

    python -m autograder.bench [--copies N] [--class-size M] [--class-only]     (make bench)

For each assignment in solutions/: the seconds to execute the solution notebook once with
nbclient on the course kernel (a copy, in a temporary folder; nothing in the repository changes),
and the seconds per submission of one ``nbgrader autograde`` of N copies of the solution in a
throw-away course root. Then the class bench: M (default 30) generated submissions of the toy
course (autograder/toy_course.py: no torch, a second or two of work each) graded by
autograder.grade_class once sequentially (jobs=1) and once with jobs = the machine's cores, each
in a fresh copy of the course with its own SQLite gradebook; it prints seconds per submission and
the speed-up. Prints tables; it checks nothing and has no thresholds.

The autograde table also prints, per assignment, the ratio of autograde seconds per submission to
execute seconds (what grading adds to a run of the notebook: the sandbox, the guard before each
test, the hidden tests), and the change from the committed record ``benchmarks/autograde_record.json``
when this machine is of the record's kind (the vector capability torch uses, e.g. AVX512 or AVX2:
figures from another kind are not comparable, and the table says so). ``--record`` rewrites the record
from this run. An author who adds a hidden test sees its cost there; docs/authors.md (*Time*) says when a
notebook's grading grew by more than 10% and what that bought.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient.exceptions import CellTimeoutError

from autograder import class_runner, database, grading, toy_course
from autograder.kernel_polls import CourseNotebookClient


CELL_TIMEOUT_S = 300
RECORD = grading.REPO / "benchmarks" / "autograde_record.json"


def machine_kind() -> str:
    """The kind of machine a timing belongs to: the vector capability torch uses here."""
    import torch
    return torch.backends.cpu.get_cpu_capability()


def load_record(path: Path = RECORD) -> dict:
    """The committed record: {"kind", "copies", "machine", "seconds": {assignment: s/submission}}."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def change(now: float, record: dict, assignment: str) -> str:
    """``now`` against the record's figure for ``assignment``, as a signed percentage, or why not."""
    if not record:
        return "no record"
    if record.get("kind") != machine_kind():
        return f"record is {record.get('kind')}"
    was = record.get("seconds", {}).get(assignment)
    if not was or now != now:
        return "not recorded" if not was else "n/a"
    return f"{(now - was) / was:+.0%}"


def longest_first(counts: dict, record: dict | None = None) -> list:
    """The assignments of ``counts`` (assignment -> submissions to grade), the longest expected
    grading first: submissions times the record's seconds per submission (an assignment the record
    lacks counts at the median of its figures). The record of any machine kind will do: only the
    ratios between assignments matter. Jobs handed to a pool of workers in this order (longest
    processing time first) leave a short job, not a long one, running alone at the end. Without a
    record the order of ``counts`` is kept: submissions alone mislead (in a fresh-clone run, 13 had
    the fewest submissions and the dearest ones, and ordering by count alone put it last and left a
    worker idle for 225 s of 1374). Ties keep the order of ``counts``."""
    seconds = (record or {}).get("seconds", {})
    usable = {a: v for a, v in seconds.items() if isinstance(v, (int, float)) and v > 0}  # NaN > 0 is False
    if not usable:
        return list(counts)
    known = sorted(usable.values())
    default = known[len(known) // 2]
    return sorted(counts, key=lambda a: -counts[a] * usable.get(a, default))


def cell_seconds(cell: dict) -> tuple[float, float] | None:
    """When a code cell of an executed notebook started and ended (epoch seconds: the kernel's
    receipt of the request and its reply, from the ``metadata.execution`` timestamps nbclient and
    JupyterLab record on code cells), or None for a cell without both (not run, or not code)."""
    from datetime import datetime
    stamps = cell.get("metadata", {}).get("execution", {})
    if "iopub.execute_input" not in stamps or "shell.execute_reply" not in stamps:
        return None
    began, ended = (datetime.fromisoformat(stamps[k].replace("Z", "+00:00")).timestamp()
                    for k in ("iopub.execute_input", "shell.execute_reply"))
    return began, ended


def where_the_time_went(nb: dict) -> dict:
    """How one executed notebook (nbformat JSON, as nbclient leaves it: each code cell's
    ``metadata.execution`` timestamps) spent its run: ``cells``, the seconds inside code cells
    (request received to reply sent); ``between``, the rest of the span from the first cell's start
    to the last cell's reply (in a graded run: the guard's control cells before and after each test,
    and the grader's round trips); ``by_cell``, seconds per cell (its ``grade_id``, or ``cell <i>``).
    A cell without both timestamps (not run, or a demo that grading skipped) counts nowhere. Kernel
    start and everything nbgrader does outside the run are not in the notebook: a caller gets them
    as its own wall time minus the span."""
    cells, by_cell, first, last = 0.0, {}, None, None
    for i, cell in enumerate(nb.get("cells", [])):
        when = cell_seconds(cell)
        if when is None:
            continue
        began, ended = when
        name = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"cell {i}"
        by_cell[name] = by_cell.get(name, 0.0) + ended - began
        cells += ended - began
        first = began if first is None else min(first, began)
        last = ended if last is None else max(last, ended)
    span = last - first if first is not None else 0.0
    return {"cells": cells, "between": max(span - cells, 0.0), "span": span, "by_cell": by_cell}


def time_execution(assignment: str, workdir: Path) -> float:
    """Seconds to run the solution notebook top to bottom (kernel start included), or NaN after
    printing which cell ran past ``CELL_TIMEOUT_S``. The kernel gets no stdin (/dev/null): a bench
    started as a background job must not share the terminal with it."""
    folder = workdir / "exec" / assignment
    shutil.copytree(grading.source_path(assignment).parent, folder)
    nb = nbformat.read(folder / f"{assignment}.ipynb", as_version=4)
    current = {}
    client = CourseNotebookClient(nb, kernel_name=grading.KERNEL_NAME, timeout=CELL_TIMEOUT_S,
                            resources={"metadata": {"path": str(folder)}},
                            on_cell_start=lambda cell, cell_index: current.update(cell=cell, index=cell_index))
    start = time.perf_counter()
    try:
        client.execute(stdin=subprocess.DEVNULL)
    except CellTimeoutError:
        first = (current["cell"].source.splitlines() or [""])[0]
        print(f"{assignment}: cell {current['index']} ran past {CELL_TIMEOUT_S} s ({first!r}); "
              f"timing skipped", flush=True)
        return float("nan")
    return time.perf_counter() - start


def time_autograde(assignment: str, workdir: Path, copies: int) -> float:
    """Seconds per submission of one ``nbgrader autograde`` over ``copies`` solution copies."""
    root = grading.make_course_copy(workdir / "course" / assignment, [assignment])
    grading.nbgrader(root, "generate_assignment", assignment, "--force")
    for i in range(copies):
        folder = root / "submitted" / f"bench{i}" / assignment
        folder.mkdir(parents=True)
        shutil.copy(grading.source_path(assignment), folder)
    start = time.perf_counter()
    grading.nbgrader(root, "autograde", assignment, "--force")
    return (time.perf_counter() - start) / copies


def build_toy_class(root: Path, size: int) -> None:
    """A released toy course at ``root`` with ``size`` submissions: in turn the solution, the
    untouched release and each targeted case of the toy (wrong, hidden-fail, tampered, ...)."""
    import contextlib
    import io
    import json

    with contextlib.redirect_stdout(io.StringIO()):
        toy_course.main([str(root)])
    source = json.loads(grading.source_path("toy", root).read_text(encoding="utf-8"))
    variants = [source, json.loads(grading.release_path("toy", root).read_text(encoding="utf-8"))]
    for case in toy_course.CASES:
        nb = json.loads(json.dumps(source))
        nb["cells"] = [dict(c, source=case.edits.get(grading.nbgrader_meta(c).get("grade_id"), c["source"]))
                       for c in nb["cells"]
                       if not (grading.nbgrader_meta(c).get("grade_id") in case.edits
                               and case.edits[grading.nbgrader_meta(c)["grade_id"]] is None)]
        variants.append(nb)
    for i in range(size):
        folder = root / "submitted" / f"student{i:03d}" / "toy"
        folder.mkdir(parents=True)
        (folder / "toy.ipynb").write_text(json.dumps(variants[i % len(variants)]), encoding="utf-8")


def time_class(workdir: Path, size: int, jobs: int) -> tuple[float, dict]:
    """Seconds to grade the toy class of ``size`` in a fresh copy with ``jobs`` workers, and the
    count of submissions per final state."""
    root = workdir / f"class-jobs{jobs}"
    shutil.copytree(workdir / "toy-class", root)
    runner = class_runner.Runner(root, "toy", database.sqlite_url(root), jobs, class_runner.DEFAULT_TIMEOUT_S)
    names = class_runner.students(root, "toy")
    start = time.perf_counter()
    results = runner.run(names, echo=lambda *a, **k: None)
    seconds = time.perf_counter() - start
    states = {}
    for r in results:
        states[r.state] = states.get(r.state, 0) + 1
    return seconds, states


def class_bench(workdir: Path, size: int) -> None:
    """Print the class bench (see the module docstring)."""
    cores = os.cpu_count() or 1
    build_toy_class(workdir / "toy-class", size)
    print(f"\nclass bench: {size} generated submissions of the toy course (autograder/toy_course.py, "
          f"no torch), autograder.grade_class, SQLite; {cores} cores; load before: "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    print(f"{'jobs':>6}{'total s':>10}{'s/submission':>15}{'speed-up':>10}  states", flush=True)
    base = None
    for jobs in sorted({1, cores}):
        seconds, states = time_class(workdir, size, jobs)
        base = base or seconds
        print(f"{jobs:>6}{seconds:>10.1f}{seconds / size:>15.2f}{base / seconds:>9.2f}x  {states}",
              flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=3, help="submissions per autograde run")
    parser.add_argument("--class-size", type=int, default=30, help="toy class size (0: skip)")
    parser.add_argument("--class-only", action="store_true", help="only the class bench")
    parser.add_argument("--record", action="store_true",
                        help="write this run's autograde figures to benchmarks/autograde_record.json")
    parser.add_argument("assignments", nargs="*", help="assignments to time (default: all)")
    args = parser.parse_args(argv)
    if args.class_only:
        with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
            class_bench(Path(tmp), args.class_size)
        return 0
    names = [a for a in grading.assignments() if not args.assignments or a in args.assignments]
    unknown = sorted(set(args.assignments) - set(names))
    if unknown:
        print(f"no such assignment in solutions/: {', '.join(unknown)}")
        return 2
    if not names:
        print("no assignments in solutions/")
        return 0
    record = load_record()
    print(f"machine kind {machine_kind()}; record: {record.get('kind', 'none')} "
          f"(N={record.get('copies', '-')}, {record.get('machine', '')})")
    print(f"{'assignment':<24}{'execute s':>10}{'autograde s/sub':>17}{'ratio':>7}{'vs record':>12}  (N={args.copies})")
    measured = {}
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        for a in names:
            execute = time_execution(a, Path(tmp))
            autograde = measured[a] = time_autograde(a, Path(tmp), args.copies)
            print(f"{a:<24}{execute:>10.1f}{autograde:>17.1f}{autograde / execute:>7.2f}"
                  f"{change(autograde, record, a):>12}", flush=True)
        if args.record:
            from autograder.machine import fingerprint
            seconds = {**(record.get("seconds", {}) if record.get("kind") == machine_kind() else {}),
                       **{a: round(v, 1) for a, v in measured.items()}}
            RECORD.write_text(json.dumps({"kind": machine_kind(), "copies": args.copies, "machine": fingerprint(),
                                          "seconds": seconds}, indent=1, sort_keys=True) + "\n", encoding="utf-8")
            print(f"record written: {RECORD.relative_to(grading.REPO)}")
        if args.class_size > 0:
            class_bench(Path(tmp), args.class_size)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
