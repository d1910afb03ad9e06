"""The course's key of hidden draws: a secret of the course's own that every hidden draw is mixed with.

    python -m autograder.draw_key new [--tries N] [--print]   (make draw-key)
    python -m autograder.draw_key check [ASSIGNMENT...]

A hidden test draws its cases with a salt written in the test cell (``salt="h-04-v2d"``). That text
is in the course's repository, which learners can clone, and a submission's own code can read it
in the grading kernel and print it into its feedback (a red team's tenth pass); whoever has it can
make the same draws at home and answer them from a table. With a key, the grader mixes a secret into
every salted draw (``course.toolkit.salts``): for each test cell,

    secret = HMAC-SHA256(key, assignment | grade_id)

so the hidden draws are not the ones the repository's text describes, and another course with
another key draws other cases. Every submission of one course gets the same draws (a regrade gives
the same score, and every learner is graded on the same cases).

**A key must suit the solutions.** A mystery's draws are random, and not every draw shows its bug
within the steps a test trains (measured: under one of two random keys the solution of 04 missed a
hidden draw and its fixed pipeline still spiked). So ``new`` draws a key, runs every solution
notebook with the key's secrets set before each test cell (``check``: the test cells assert, as
grading does) and keeps the key only when every solution passes every test; otherwise it draws
another, up to ``--tries`` times. Run ``check`` again after changing a notebook's tests. A key can
also let a wrong answer through that a test's own draws catch (under the tests' key, two wrong fp16
detectors pass 10's ``test_fp16_detect``); ``check`` cannot see that, the wrong answers of
``tests/`` can: ``COURSE_DRAW_KEY=<key> make test-autograde``.

**Where it lives:** ``COURSE_DRAW_KEY`` in the grader's environment when set, else the file
``.draw_key`` in the course root (mode 0600; the sandboxed kernel sees no file of the course root,
and the variable is removed from the kernel's environment). Keep it with the gradebook: another key
draws other cases. Without a key, nothing is mixed: the hidden draws are the test cells' own, as
every earlier version graded them, and the class runner says so. Dask workers get the
coordinator's key with each job.
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ENV = "COURSE_DRAW_KEY"
KEY_FILE = ".draw_key"
CELL_TIMEOUT_S = 300


def course_key(root: Path | str) -> bytes | None:
    """The key: ``$COURSE_DRAW_KEY``, else the contents of ``<root>/.draw_key``; None without one."""
    env = os.environ.get(ENV, "").strip()
    if env:
        return env.encode()
    try:
        key = (Path(root) / KEY_FILE).read_bytes().strip()
    except FileNotFoundError:
        return None
    return key or None


def write_key(root: Path | str, key: bytes) -> Path:
    """Write ``key`` to ``<root>/.draw_key``, readable by its owner only (replacing any old one)."""
    path = Path(root) / KEY_FILE
    tmp = path.with_name(f"{KEY_FILE}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key + b"\n")
    os.replace(tmp, path)
    return path


def cell_secret(key: bytes | None, assignment: str, grade_id: str) -> str:
    """The secret of one test cell (``""`` without a key: nothing is mixed)."""
    if not key:
        return ""
    return hmac.new(key, f"{assignment}|{grade_id}".encode(), hashlib.sha256).hexdigest()[:32]


def _with_secrets(nb, key: bytes, assignment: str):
    """``nb`` with a cell before each autograder-test cell that puts its secret in the box, and one
    after it that empties the box, as the grading kernel's guard does."""
    import nbformat

    def setter(value: str):
        return nbformat.v4.new_code_cell(f"import course.toolkit.salts as _draw_key_salts\n"
                                         f"_draw_key_salts.CURRENT[:] = [{value!r}]")
    cells = []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        test = cell.cell_type == "code" and meta.get("grade") and not meta.get("solution")
        if test:
            cells.append(setter(cell_secret(key, assignment, meta.get("grade_id", ""))))
        cells.append(cell)
        if test:
            cells.append(setter(""))
    nb.cells = cells
    return nb


def check(key: bytes, assignments: list[str], echo=print) -> dict[str, list[str]]:
    """Run each solution notebook under ``key``'s secrets; {assignment: the test cells that failed,
    with their errors} (an empty list: every test passed)."""
    import nbformat

    from autograder import grading
    from autograder.kernel_polls import CourseNotebookClient
    failed = {}
    with tempfile.TemporaryDirectory(prefix="draw-key-") as tmp:
        for a in assignments:
            folder = Path(tmp) / a
            shutil.copytree(grading.source_path(a).parent, folder)
            nb = _with_secrets(nbformat.read(folder / f"{a}.ipynb", as_version=4), key, a)
            client = CourseNotebookClient(nb, kernel_name=grading.KERNEL_NAME, timeout=CELL_TIMEOUT_S,
                                    allow_errors=True, resources={"metadata": {"path": str(folder)}})
            client.execute(stdin=subprocess.DEVNULL)
            failed[a] = [f"{c.metadata.get('nbgrader', {}).get('grade_id', '?')}: {o['ename']}: {o['evalue'][:200]}"
                         for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
            echo(f"{a}: {'every test passed' if not failed[a] else '; '.join(failed[a])}", flush=True)
    return failed


def main(argv: list[str]) -> int:
    from autograder import grading
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    new = sub.add_parser("new", help="draw a key the solutions pass under, and keep it")
    new.add_argument("--tries", type=int, default=4, help="keys to try before giving up (default 4)")
    new.add_argument("--print", action="store_true", help="print the key instead of writing .draw_key")
    chk = sub.add_parser("check", help="run the solutions under the course's key")
    chk.add_argument("assignments", nargs="*")
    args = parser.parse_args(argv)
    root = grading.course_root()
    if args.command == "check":
        key = course_key(root)
        if key is None:
            print(f"no key: set {ENV} or run `python -m autograder.draw_key new` (make draw-key)")
            return 2
        names = args.assignments or grading.assignments()
        bad = {a: f for a, f in check(key, names).items() if f}
        print("the key suits every solution" if not bad else f"the key does not suit: {', '.join(bad)}")
        return 1 if bad else 0
    for attempt in range(1, args.tries + 1):
        key = secrets.token_hex(32).encode()
        print(f"key {attempt} of {args.tries}: running every solution under it", flush=True)
        bad = {a: f for a, f in check(key, grading.assignments()).items() if f}
        if not bad:
            if args.print:
                print(key.decode())
            else:
                print(f"kept: {write_key(root, key)} (keep it with the gradebook)")
            return 0
        print(f"key {attempt} does not suit {', '.join(bad)}; drawing another", flush=True)
    print(f"no key suited every solution in {args.tries} tries: a test whose hidden draws fail this often "
          f"needs draws that show their bug more surely (the failures are listed above)")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
