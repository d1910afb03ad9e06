"""Print how long each solution notebook takes to execute and to autograde, on this machine.

    python -m autograder.bench [--copies N]     (make bench; N defaults to 3)

For each assignment in solutions/: the seconds to execute the solution notebook once with
nbclient on the course kernel (a copy, in a temporary folder; nothing in the repository changes),
and the seconds per submission of one ``nbgrader autograde`` of N copies of the solution in a
throw-away course root. Prints a table; it checks nothing and has no thresholds.
"""
import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from autograder import grading


def time_execution(assignment: str, workdir: Path) -> float:
    """Seconds to run the solution notebook top to bottom (kernel start included)."""
    folder = workdir / "exec" / assignment
    shutil.copytree(grading.source_path(assignment).parent, folder)
    nb = nbformat.read(folder / f"{assignment}.ipynb", as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, kernel_name=grading.KERNEL_NAME, timeout=None,
                   resources={"metadata": {"path": str(folder)}}).execute()
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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=3, help="submissions per autograde run")
    args = parser.parse_args(argv)
    names = grading.assignments()
    if not names:
        print("no assignments in solutions/")
        return 0
    print(f"{'assignment':<24}{'execute s':>12}{'autograde s/submission':>26}  (N={args.copies})")
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        for a in names:
            execute = time_execution(a, Path(tmp))
            autograde = time_autograde(a, Path(tmp), args.copies)
            print(f"{a:<24}{execute:>12.1f}{autograde:>26.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
