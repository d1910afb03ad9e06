"""Grade a whole class with nbgrader, in parallel, and say for every submission what happened:
the command line of the class runner (its library, and the contract per submission, is
``autograder/class_runner.py``).

    python -m autograder.grade_class ASSIGNMENT... [--jobs N] [--students S...] [--timeout S]
    python -m autograder.grade_class --all          (every assignment with submissions; make autograde)
    python -m autograder.grade_class A --scheduler tcp://HOST:8786   (on Dask workers: dask_grading)
    python -m autograder.grade_class A --shard K/N   (students whose stable hash is K mod N)
    python -m autograder.grade_class A --merge       (join the shard reports into A.json)
    python -m autograder.grade_class A --unfinished  (only what the journal shows unfinished)

"""
from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from pathlib import Path

from autograder import database, grading
from autograder.class_runner import (DEFAULT_TIMEOUT_S, FAILED, GRADED, REJECTED, Runner, merge_reports, shard_of,
                                     shard_report_name, students)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def parse_shard(text: str) -> tuple[int, int]:
    """``K/N`` -> (K, N), 0 <= K < N (K as Slurm's array index from 0 or a Kubernetes Indexed
    Job's completion index)."""
    m = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not m or not 0 <= int(m.group(1)) < int(m.group(2)):
        raise argparse.ArgumentTypeError(f"--shard wants K/N with 0 <= K < N, got {text!r}")
    return int(m.group(1)), int(m.group(2))


SQLITE_WITH_SCHEDULER = (
    "refusing to grade on a Dask scheduler with an SQLite gradebook ({url}): the workers run on "
    "other machines, which cannot share one SQLite file (no shared filesystem is assumed, and "
    "SQLite's locks do not hold over a network filesystem). Set COURSE_DB_URL to a PostgreSQL URL "
    "that every worker can reach, e.g. postgresql://grader@db-host:5432/gradebook, and run "
    "`make release` against it once.")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*", help="assignment names (or --all)")
    parser.add_argument("--all", action="store_true", help="every assignment with submissions")
    parser.add_argument("--students", nargs="+", help="only these students")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="submissions graded at once (default: the machine's cores; with "
                             "--scheduler: unused, one per worker thread)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds one submission may take in all (default {DEFAULT_TIMEOUT_S})")
    parser.add_argument("--root", type=Path, default=None,
                        help="course root (default: $COURSE_ROOT or this repository)")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="grade on the workers of this Dask scheduler (tcp://host:8786; "
                             "autograder/dask_grading.py); needs a PostgreSQL gradebook")
    for option, what in (("--tls-ca-file", "the CA certificate(s)"), ("--tls-cert", "this client's certificate"),
                         ("--tls-key", "this client's private key")):
        parser.add_argument(option, default=None, metavar="PEM",
                            help=f"with --scheduler tls://...: {what} (all three, as the scheduler was started with)")
    parser.add_argument("--shard", type=parse_shard, metavar="K/N",
                        help="grade only the students whose stable hash falls in shard K of N "
                             "(0 <= K < N); the report is <a>.shard-K-of-N.json (--merge joins them)")
    parser.add_argument("--unfinished", action="store_true",
                        help="grade only what the journal (the report) shows unfinished: no entry, "
                             "interrupted, a grader error, or files changed since")
    parser.add_argument("--merge", action="store_true",
                        help="grade nothing: merge the shard reports <a>.shard-K-of-N.json into <a>.json")
    args = parser.parse_args(argv)
    root = (args.root or grading.course_root()).resolve()
    names = args.assignments
    if args.all:
        names = [a for a in grading.assignments(root) if students(root, a)]
        if not names:
            print("no submissions in submitted/*/<assignment>/: nothing to grade")
            return 0
    if not names:
        parser.error("name an assignment or give --all")
    if args.merge:
        status = 0
        for a in names:
            out, problems = merge_reports(root, a)
            for problem in problems:
                print(f"{a}: {problem}", file=sys.stderr)
            status = 1 if problems else status
            if out is not None:
                print(f"{a}: merged report {out.relative_to(root)}")
        return status
    url = database.db_url(root)
    if args.scheduler and url.startswith("sqlite"):
        print(SQLITE_WITH_SCHEDULER.format(url=database.describe(url)), file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupt)
    status = 0
    cluster = None
    if args.scheduler:
        from autograder import dask_grading
        try:
            cluster = dask_grading.connect(args.scheduler, root, tls={
                "tls_ca_file": args.tls_ca_file, "tls_cert": args.tls_cert, "tls_key": args.tls_key})
        except dask_grading.SetupError as err:
            print(err, file=sys.stderr)
            return 2
        print(f"gradebook: {database.describe(url)}; Dask scheduler {args.scheduler}", flush=True)
    else:
        print(f"gradebook: {database.describe(url)}; {args.jobs} job(s)", flush=True)
    try:
        for a in names:
            found = students(root, a)
            chosen = [s for s in found if s in set(args.students)] if args.students else found
            unknown = sorted(set(args.students or []) - set(found))
            if unknown:
                print(f"{a}: no submitted/<student>/{a} for {', '.join(unknown)}", file=sys.stderr)
                status = 1
            if args.shard:
                chosen = [s for s in chosen if shard_of(s, args.shard[1]) == args.shard[0]]
            report = shard_report_name(a, args.shard)
            if cluster is not None:
                runner = dask_grading.DaskRunner(cluster, root, a, url, args.timeout,
                                                 report_name=report, unfinished=args.unfinished)
            else:
                runner = Runner(root, a, url, args.jobs, args.timeout, report_name=report,
                                unfinished=args.unfinished)
            try:
                results = runner.run(chosen)
            except KeyboardInterrupt:
                print(f"interrupted; report: {runner.report_path}", file=sys.stderr)
                return 130
            except Exception as err:
                if cluster is not None and isinstance(err, dask_grading.SchedulerLost):
                    print(f"{a}: {err}; report: {runner.report_path.relative_to(root)}", file=sys.stderr)
                    return 3
                raise
            counts = {state: sum(r.state == state for r in results) + sum(
                e.get("state") == state for e in runner.skipped.values()) for state in (GRADED, FAILED, REJECTED)}
            print(f"{a}: {counts[GRADED]} graded, {counts[FAILED]} failed, {counts[REJECTED]} rejected; "
                  f"report {runner.report_path.relative_to(root)}", flush=True)
            if counts[FAILED] or counts[REJECTED]:
                status = 1
    finally:
        if cluster is not None:
            cluster.close()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
