"""The class runner's library: grade a whole class with nbgrader, in parallel, and say for every
submission what happened. Its command line is ``autograder/grade_class.py``; grading on Dask
workers (``autograder/dask_grading.py``) builds on ``Runner`` here. Neither is imported here.

Contract, per assignment ``a`` (which ``nbgrader generate_assignment`` must have put in the
gradebook), for each student ``s`` with a folder ``submitted/s/a/`` (or those named):

1. Pre-check, without running anything: ``a.ipynb`` must exist there as a regular file (not a
   link, not a folder), under ``MAX_NOTEBOOK_BYTES``, be JSON and a Jupyter notebook, and not
   another assignment's notebook under this one's name (``another_notebook``). A submission
   that fails is *rejected*: the gradebook gets a submission whose every grade is 0 and needs no
   manual grade -- exactly what nbgrader itself records for a missing notebook
   (``nbgrader/converters/autograde.py``, ``init_assignment``) -- and any earlier autograded and
   feedback output of it is removed. (Plain nbgrader skips an empty folder with no row at all and
   leaves the others as "needs manual grade" on every cell.)
2. Otherwise nbgrader's own ``autograde a --student s --force`` runs, one process per submission,
   up to ``--jobs`` at once (default: the machine's cores), with the gradebook of
   ``autograder.database.db_url`` (``COURSE_DB_URL``). nbgrader's configuration applies as is:
   kernel, sandbox, timeouts, preprocessors. Its log goes to
   ``autograded/_reports/a.logs/s.log``. A process still running after ``--timeout`` seconds is
   killed. Workers die with the runner (``setpriv --pdeathsig``).
3. If nbgrader failed (non-zero exit, killed, an autograded cell left without a score, or the
   submission's files changed while it ran), the submission is *failed*: every grade is set to 0
   as in 1. (plain nbgrader keeps the previous run's score, or "needs manual grade" on a first
   run), and nbgrader has already removed its autograded output. Database errors are *grader
   errors*: nothing is written and the reason says so.
4. Every outcome has a reason an instructor can read, from the pre-check, nbgrader's exit status
   and log, and the autograded notebook's outputs per graded cell (timeouts, dead kernel,
   MemoryError, NotImplementedError, assertion messages, stderr).

The report ``autograded/_reports/a.json`` is rewritten (atomically) whenever a submission starts or
ends; it is also the journal: a submission whose entry still says ``grading`` was interrupted
(runner killed) and its gradebook rows may be the previous run's or incomplete; re-running grades
it again. Each entry keeps the SHA-256 of the submission folder it graded, so a later resubmission
shows as not yet graded. Submissions are only read, never written. Each entry also names the kind
of machine that ran nbgrader (``machine``, ``autograder.machine.fingerprint``) and, on Dask, the
worker (``worker``).

``--unfinished`` grades only what the journal shows unfinished: no entry, ``grading`` or
``interrupted``, a grader error, or a folder whose hash is not the one graded; the rest keep their
entries. ``--scheduler ADDRESS`` sends every nbgrader run to a Dask worker
(``autograder/dask_grading.py``; everything else stays here) and refuses an SQLite gradebook before
grading anything. ``--shard K/N`` grades the students with ``shard_of(s, N) == K`` into the report
``a.shard-K-of-N.json``; ``--merge`` joins those into ``a.json``.

Exit status: 0 when every submission was graded, 1 when any was rejected or failed (after all were
tried), 2 on a usage or set-up error, 3 when the Dask scheduler was lost mid-run (re-run with
``--unfinished``), 130 when interrupted.
"""
from __future__ import annotations

import concurrent.futures
import datetime
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autograder import database, grading
from autograder.gpu_points import NOT_GRADED_GPU  # the line a GPU test left unrun gets (one source)

MAX_NOTEBOOK_BYTES = 50 * 2**20
DEFAULT_TIMEOUT_S = 1800
REPORTS = Path("autograded") / "_reports"

GRADED, FAILED, REJECTED, GRADING, INTERRUPTED = "graded", "failed", "rejected", "grading", "interrupted"


@dataclass
class Result:
    """What happened to one submission (one entry of the report)."""
    student: str
    state: str                       # graded | failed | rejected | grading | interrupted
    reason: str = ""
    score: float | None = None
    max_score: float | None = None
    cells: dict = field(default_factory=dict)   # grade_id -> {score, max_score, manual, why}
    notes: list = field(default_factory=list)
    log: str | None = None           # path of nbgrader's log, relative to the course root
    seconds: float | None = None
    sha256: str | None = None        # of the submission folder as graded
    finished: str | None = None      # UTC time the entry was written
    machine: str | None = None       # the kind of machine that ran nbgrader (autograder.machine)
    worker: str | None = None        # the Dask worker that graded it (None: this machine's pool)


@dataclass
class Outcome:
    """What one nbgrader run left, wherever it ran (the log is already in the report's logs)."""
    rc: int | None                   # nbgrader's exit status (None: it never finished)
    timed_out: float | None = None   # the runner's --timeout, when it stopped the run
    seconds: float | None = None
    changed: bool = False            # the submission's files changed while it was graded
    machine: str | None = None
    worker: str | None = None
    grader_error: str | None = None  # the grader's fault (nothing written): the reason
    failure: str | None = None       # the submission's fault before nbgrader could say (zeroed)


# --------------------------------------------------------------------------- submissions

def students(root: Path, assignment: str) -> list[str]:
    """Sorted names ``s`` that have a folder ``submitted/s/assignment`` (a link or file there too:
    the pre-check rejects those with a reason)."""
    base = Path(root) / "submitted"
    return sorted(p.parent.name for p in base.glob(f"*/{assignment}")
                  if p.exists() or p.is_symlink())


def folder_hash(folder: Path) -> str | None:
    """SHA-256 over the relative paths and contents of every file below ``folder`` (links hashed by
    their target text, never followed); None when ``folder`` is missing."""
    folder = Path(folder)
    if not folder.exists() and not folder.is_symlink():
        return None
    h = hashlib.sha256()
    if folder.is_symlink() or not folder.is_dir():
        h.update(os.readlink(folder).encode() if folder.is_symlink() else folder.read_bytes())
        return h.hexdigest()
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            path = Path(dirpath) / name
            h.update(str(path.relative_to(folder)).encode() + b"\0")
            if path.is_symlink():
                h.update(b"link:" + os.readlink(path).encode())
            elif path.is_file():
                with open(path, "rb") as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        h.update(block)
            h.update(b"\0")
    return h.hexdigest()


def precheck(root: Path, assignment: str, student: str) -> tuple[str | None, list[str]]:
    """(reason to reject or None, notes). Reads the submission only."""
    folder = Path(root) / "submitted" / student / assignment
    expected = f"{assignment}.ipynb"
    if folder.is_symlink() or not folder.is_dir():
        return f"submitted/{student}/{assignment} is not a folder", []
    path = folder / expected
    if not path.exists() and not path.is_symlink():
        others = sorted(p.name for p in folder.glob("*.ipynb"))
        if others:
            return (f"wrong notebook name: found {', '.join(others)}, expected {expected} "
                    f"(rename it and resubmit)"), []
        files = sorted(p.name for p in folder.iterdir())
        return (f"no notebook: {expected} is missing"
                + (f" (the folder holds: {', '.join(files[:10])})" if files else " (empty folder)")), []
    if path.is_symlink():
        return f"{expected} is a symbolic link, not a file: not graded", []
    if not path.is_file():
        return f"{expected} is not a regular file", []
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        return f"{expected} is {size / 2**20:.0f} MiB, over the {MAX_NOTEBOOK_BYTES / 2**20:.0f} MiB limit", []
    try:
        nb = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        return f"corrupt notebook: {expected} is not UTF-8 text ({err.reason} at byte {err.start})", []
    except json.JSONDecodeError as err:
        return (f"corrupt notebook: {expected} is not valid JSON ({err.msg} at line {err.lineno}, "
                f"column {err.colno}); was it saved completely?"), []
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return f"not a Jupyter notebook: {expected} is JSON without a list of cells", []
    if not isinstance(nb.get("nbformat"), int) or nb["nbformat"] < 4:
        return f"not a Jupyter notebook of format 4: nbformat is {nb.get('nbformat')!r}", []
    other = another_notebook(root, assignment, nb)
    if other:
        return other, []
    return None, structure_notes(root, assignment, nb)


def _cell_ids(nb: dict) -> set:
    return {c.get("id") for c in nb.get("cells", []) if isinstance(c, dict) and isinstance(c.get("id"), str)}


def another_notebook(root: Path, assignment: str, nb: dict) -> str | None:
    """The reason to reject a notebook of another assignment saved under this one's name, or None.

    Rule: the submission carries nbgrader cells (so it came from some release) but holds fewer
    than a fifth of the source notebook's cell ids (nbformat 4.5 ids, which a release keeps and a
    learner's edits keep too); where another assignment's source in ``root`` shares more than half
    of the submission's ids, that one is named. Limits: a submission without cell ids (nbformat
    4.4 or older) or a source without them is never rejected by this rule; a learner who deleted
    four fifths of the notebook's cells would be."""
    try:
        source = json.loads(grading.source_path(assignment, root).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    own, mine = _cell_ids(source), _cell_ids(nb)
    graded = [grading.nbgrader_meta(c).get("grade_id") for c in nb["cells"] if isinstance(c, dict)
              and isinstance(c.get("metadata"), dict)]
    if not own or not mine or not any(graded) or len(own & mine) * 5 >= len(own):
        return None
    best, shared = None, 0
    for other in grading.assignments(root):
        if other == assignment:
            continue
        try:
            ids = _cell_ids(json.loads(grading.source_path(other, root).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
        if len(ids & mine) > shared:
            best, shared = other, len(ids & mine)
    which = (f"it is {best}'s notebook ({shared} of its {len(mine)} cells are {best}'s)"
             if best and shared * 2 > len(mine) else "it looks like another assignment's notebook")
    return (f"not {assignment}'s notebook: it holds {len(own & mine)} of the {len(own)} cells of "
            f"{assignment}; {which}. Fetch {assignment}, put your answers in it and submit again")


def structure_notes(root: Path, assignment: str, nb: dict) -> list[str]:
    """Differences between a submission's graded cells and the source's, for reasons: duplicated
    grade ids, cells missing, cells whose nbgrader metadata was stripped."""
    try:
        source = json.loads(grading.source_path(assignment, root).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    wanted = {grading.nbgrader_meta(c).get("grade_id"): c.get("id") for c in source["cells"]}
    wanted.pop(None, None)
    ids, stripped = [], []
    for cell in nb["cells"]:
        if not isinstance(cell, dict):
            continue
        meta = cell.get("metadata", {}).get("nbgrader") if isinstance(cell.get("metadata"), dict) else None
        gid = meta.get("grade_id") if isinstance(meta, dict) else None
        if gid:
            ids.append(gid)
        elif cell.get("id") in wanted.values():
            stripped.append(cell.get("id"))
    notes = []
    dups = sorted({g for g in ids if ids.count(g) > 1})
    if dups:
        notes.append(f"cells duplicated: {', '.join(dups)}")
    if stripped:
        notes.append(f"nbgrader metadata stripped from {len(stripped)} cell(s): {', '.join(stripped[:8])}")
    missing = sorted(set(wanted) - set(ids) - set(stripped))
    if missing:
        notes.append(f"cells missing: {', '.join(missing)}")
    return notes


# --------------------------------------------------------------------------- gradebook

def course_id(url: str, assignment: str) -> str | None:
    """The course id nbgrader recorded for ``assignment`` (None when it is not in the gradebook)."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            if not sqlalchemy.inspect(conn).has_table("assignment"):
                return None
            return conn.execute(sqlalchemy.text("SELECT course_id FROM assignment WHERE name = :a"),
                                {"a": assignment}).scalar()
    finally:
        engine.dispose()


def read_grades(url: str, course: str, assignment: str, student: str) -> dict | None:
    """grade_id -> {auto_score, score, max_score, manual} for every grade of the submission
    (all notebooks), or None when nbgrader recorded no submission."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(url, course) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return None
        return {g.name: {"auto_score": g.auto_score, "score": float(g.score),
                         "max_score": float(g.max_score), "manual": bool(g.needs_manual_grade)}
                for nb in sub.notebooks for g in nb.grades}


def record_zero(url: str, course: str, assignment: str, student: str, timestamp: str | None) -> None:
    """Give every grade of the submission 0 and no manual grade, creating the student and the
    submission when needed: what nbgrader records itself for a missing notebook. A manual score an
    instructor gave stays (nbgrader's ``score`` prefers it)."""
    import warnings

    from nbgrader.api import Gradebook
    from sqlalchemy.exc import SAWarning

    with Gradebook(url, course) as gb, warnings.catch_warnings():
        # nbgrader's add_submission trips SQLAlchemy's autoflush warning; the rows are written
        warnings.simplefilter("ignore", SAWarning)
        gb.update_or_create_student(student)
        kwargs = {"timestamp": timestamp} if timestamp else {}
        sub = gb.update_or_create_submission(assignment, student, **kwargs)
        for nb in sub.notebooks:
            for grade in nb.grades:
                grade.auto_score = 0
                grade.needs_manual_grade = False
        gb.db.commit()


def submission_timestamp(folder: Path) -> str | None:
    """The text of ``timestamp.txt`` when nbgrader can parse it, else None."""
    from nbgrader.utils import parse_utc

    path = Path(folder) / "timestamp.txt"
    try:
        text = path.read_text(encoding="utf-8").strip() if path.is_file() and not path.is_symlink() else ""
        return text if text and parse_utc(text) else None
    except (OSError, ValueError, UnicodeDecodeError):
        return None


# --------------------------------------------------------------------------- reasons

def _only_line(outputs: list) -> str:
    texts = [o.get("text", "") for o in outputs]
    if len(outputs) != 1 or outputs[0].get("output_type") != "stream" or outputs[0].get("name") != "stdout":
        return ""
    text = texts[0]
    return ("".join(text) if isinstance(text, list) else text).strip()


def _first_line(text: str, limit: int = 200) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(text)).strip()
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= limit else line[:limit] + "..."


def output_problems(outputs: list) -> list[str]:
    """Readable reasons from a cell's outputs: errors and stderr."""
    found = []
    for out in outputs:
        if out.get("output_type") == "error":
            ename, evalue = out.get("ename", ""), _first_line(out.get("evalue", ""))
            if ename == "CellTimeoutError":
                found.append("timed out (CellTimeoutError: the cell ran past Execute.timeout)")
            elif ename == "NotImplementedError":
                found.append("not answered (NotImplementedError)")
            elif ename == "MemoryError":
                found.append("ran out of memory (MemoryError)")
            else:
                found.append(f"{ename}: {evalue}" if evalue else ename)
        elif out.get("output_type") == "stream" and out.get("name") == "stderr":
            text = "".join(out.get("text", "")) if isinstance(out.get("text"), list) else out.get("text", "")
            found.append(f"wrote to stderr (scores 0): {_first_line(text, 120)}")
    return found


def autograded_reasons(path: Path) -> tuple[dict[str, list[str]], list[str]]:
    """(grade_id -> problems of that graded cell, problems of other cells as notes) read from an
    autograded notebook; ({}, [note]) when it cannot be read."""
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        return {}, [f"autograded notebook unreadable: {err}"]
    per_cell, notes = {}, []
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        problems = output_problems(cell.get("outputs", []))
        gid = grading.nbgrader_meta(cell).get("grade_id")
        meta = grading.nbgrader_meta(cell)
        if meta.get("grade"):
            if not problems and _only_line(cell.get("outputs", [])) == NOT_GRADED_GPU:
                problems = [NOT_GRADED_GPU]
            per_cell[gid] = problems
        else:  # stderr outside a grade cell costs nothing; errors there are worth a note
            where = f"cell {gid}" if gid else f"cell #{index + 1} (not graded)"
            notes.extend(f"{where}: {p}" for p in problems if not p.startswith("wrote to stderr"))
    return per_cell, notes


LOG_PATTERNS = [  # (regex on nbgrader's log, reason); first match wins
    (r"DeadKernelError|Kernel died", "the kernel died while running the notebook (DeadKernelError): "
     "the code ended the Python process (os._exit, a crash) or it was killed, e.g. for memory"),
    (r"UnresponsiveKernelError|kernel became unresponsive",
     "the kernel stopped responding and could not be interrupted"),
    (r"Invalid timestamp string", "timestamp.txt holds no valid time"),
    (r"exists multiple times", "a graded cell appears more than once (duplicated cell): "
     "nbgrader cannot match the notebook to the assignment"),
    (r"add_missing_grade_cells|Missing grade cell .* encountered",
     "nbgrader could not put the test cells back: the notebook's cells no longer match the "
     "assignment (cells deleted or duplicated, or their nbgrader metadata stripped)"),
    (r"NotJSONError|does not appear to be JSON", "corrupt notebook: not valid JSON"),
    (r"NotebookValidationError|ValidationError", "the notebook does not validate as a Jupyter notebook"),
]
GRADER_ERRORS = [  # the grader's fault, not the submission's: nothing is written to the gradebook
    (r"refusing to autograde without the sandbox|refusing to start the kernel unprotected",
     "GRADER ERROR: grading refused, the sandbox cannot run on this machine (see the log; "
     "fix the machine or set COURSE_ALLOW_UNSANDBOXED=1 to grade unprotected)"),
    (r"database is locked", "GRADER ERROR: the gradebook was locked (SQLite); re-run"),
    (r"OperationalError|error accessing the nbgrader database",
     "GRADER ERROR: the gradebook could not be reached or written; re-run"),
    (r"No assignment with ID", "GRADER ERROR: the assignment is not in the gradebook "
     "(run make release / nbgrader generate_assignment)"),
]


def last_exception(log: str) -> str | None:
    """The last 'SomeError: message' line of a traceback in ``log``."""
    hits = re.findall(r"^(?:\[\w+ \| ERROR\])?\s*((?:[\w.]+\.)?\w*(?:Error|Exception|Exit|Interrupt)\b:?.*)$",
                      log, flags=re.MULTILINE)
    hits = [h for h in hits if not h.startswith(("There was an error", "Traceback"))]
    return _first_line(hits[-1]) if hits else None


def failure_reason(log: str, returncode: int | None, timed_out: float | None) -> tuple[str, bool]:
    """(reason, is_grader_error) for an nbgrader run that failed."""
    if timed_out:
        return (f"grading took longer than {timed_out:g} s and was stopped "
                f"(runner --timeout; the notebook as a whole, not one cell)", False)
    for pattern, reason in GRADER_ERRORS:
        if re.search(pattern, log):
            return reason, True
    if returncode is not None and returncode < 0:
        return f"the grading process was killed (signal {signal.Signals(-returncode).name})", False
    for pattern, reason in LOG_PATTERNS:
        if re.search(pattern, log):
            return reason, False
    exc = last_exception(log)
    return (f"nbgrader could not grade it: {exc}" if exc
            else f"nbgrader exited with status {returncode}; see the log"), False


def graded_reason(cells: dict) -> str:
    """One line: which cells lost points and why, and which need a manual grade."""
    lost = [f"{gid} {c['score']:g}/{c['max_score']:g}" + (f" ({'; '.join(c['why'])})" if c["why"] else "")
            for gid, c in cells.items() if not c["manual"] and c["score"] < c["max_score"]]
    gpu = [gid for gid, c in cells.items() if c.get("not_graded")]
    manual = [gid for gid, c in cells.items() if c["manual"] and not c.get("not_graded")]
    parts = ["lost points: " + ", ".join(lost)] if lost else \
        ["every autograded cell passed" + (" that was run" if gpu else "")]
    if gpu:
        parts.append(f"{NOT_GRADED_GPU}: " + ", ".join(gpu))
    if manual:
        parts.append("needs manual grade: " + ", ".join(manual))
    return "; ".join(parts)


# --------------------------------------------------------------------------- one nbgrader run

def nbgrader_command(root: Path, assignment: str, student: str, url: str) -> list[str]:
    """``nbgrader autograde ASSIGNMENT --student STUDENT --force`` pinned to ``root`` and ``url``."""
    cmd = [sys.executable, "-m", "nbgrader", "autograde", assignment, "--student", student,
           "--force", f"--CourseDirectory.root={root}", f"--CourseDirectory.db_url={url}"]
    if shutil.which("setpriv"):   # the worker dies when the runner dies (no orphan graders)
        cmd = ["setpriv", "--pdeathsig", "KILL", "--"] + cmd
    return cmd


def run_nbgrader(cmd: list[str], root: Path, log_path: Path, timeout: float,
                 procs: dict | None = None, key: str | None = None,
                 env: dict | None = None) -> tuple[int, float | None]:
    """Run ``cmd`` in ``root`` with its output in ``log_path``; kill it after ``timeout`` seconds.
    Returns (exit status, ``timeout`` when it was killed for it, else None). ``procs[key]`` holds
    the process while it runs (so an interrupted runner can kill it); ``env`` adds variables."""
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent),
                                                 os.environ.get("PATH", "")]), **(env or {}))
    timed_out = None
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, cwd=root, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env)
        if procs is not None:
            procs[key] = proc
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc, timed_out = proc.wait(), timeout
        finally:
            if procs is not None:
                procs.pop(key, None)
    return rc, timed_out


_MACHINE: list[str] = []


def machine_kind() -> str:
    """This machine's kind (``autograder.machine.fingerprint``), computed once per process."""
    if not _MACHINE:
        try:
            from autograder import machine
            _MACHINE.append(machine.fingerprint())
        except Exception as err:  # noqa: BLE001 (torch missing: say so, grade anyway)
            _MACHINE.append(f"unknown ({type(err).__name__}: {err})")
    return _MACHINE[0]


def shard_of(student: str, shards: int) -> int:
    """The shard (0 .. shards-1) of a student id: a stable hash (SHA-256), the same on every
    machine and every run (Python's own hash() is salted per process)."""
    return int.from_bytes(hashlib.sha256(student.encode("utf-8")).digest()[:8], "big") % shards


def shard_report_name(assignment: str, shard: tuple[int, int] | None) -> str:
    return assignment if shard is None else f"{assignment}.shard-{shard[0]}-of-{shard[1]}"


def merge_reports(root: Path, assignment: str) -> tuple[Path | None, list[str]]:
    """Merge ``<a>.shard-K-of-N.json`` (each shard's own report) into ``<a>.json``. Returns (the
    merged report, problems): a missing shard, shards of different N, a student in two shards.
    Writes nothing (and returns None) when there is no shard report."""
    base = Path(root) / REPORTS
    found = {}
    for path in sorted(base.glob(f"{assignment}.shard-*-of-*.json")):
        m = re.fullmatch(re.escape(assignment) + r"\.shard-(\d+)-of-(\d+)\.json", path.name)
        if m:
            found[(int(m.group(1)), int(m.group(2)))] = path
    if not found:
        return None, [f"no shard reports {assignment}.shard-K-of-N.json in {base}"]
    problems, students, gradebooks, owner = [], {}, set(), {}
    sizes = {n for _, n in found}
    if len(sizes) > 1:
        problems.append(f"shard reports of different shard counts: {sorted(sizes)}")
    for n in sizes:
        missing = sorted(set(range(n)) - {k for k, m in found if m == n})
        if missing:
            problems.append(f"no report from shard(s) {', '.join(map(str, missing))} of {n}: "
                            f"their students are not in the merge")
    for (k, n), path in sorted(found.items()):
        doc = json.loads(path.read_text(encoding="utf-8"))
        gradebooks.add(doc.get("gradebook"))
        for student, entry in doc.get("students", {}).items():
            if student in students:
                problems.append(f"{student} is in shard {owner[student]} and shard {k}/{n}: kept "
                                f"the entry finished last")
                if (entry.get("finished") or "") < (students[student].get("finished") or ""):
                    continue
            students[student], owner[student] = entry, f"{k}/{n}"
    if len(gradebooks) > 1:
        problems.append(f"shards graded into different gradebooks: {sorted(map(str, gradebooks))}")
    out = base / f"{assignment}.json"
    doc = {"assignment": assignment, "gradebook": sorted(map(str, gradebooks))[0],
           "merged_from": [p.name for _, p in sorted(found.items())],
           "students": dict(sorted(students.items()))}
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    os.replace(tmp, out)
    return out, problems


# --------------------------------------------------------------------------- the run

class Runner:
    """Grades the submissions of one assignment; see the module docstring."""

    def __init__(self, root: Path, assignment: str, url: str, jobs: int, timeout: float,
                 report_name: str | None = None, unfinished: bool = False):
        self.root, self.assignment, self.url = Path(root).resolve(), assignment, url
        self.jobs, self.timeout = max(1, jobs), timeout
        self.unfinished = unfinished          # grade only what the journal shows unfinished
        self.report_path = self.root / REPORTS / f"{report_name or assignment}.json"
        self.log_dir = self.root / REPORTS / f"{assignment}.logs"
        self.lock = threading.Lock()          # report and the runner's own gradebook writes
        self.procs: dict[str, subprocess.Popen] = {}
        self.skipped: dict[str, dict] = {}    # journal entries left as they were (--unfinished)
        self.stopping = False
        self.course = None
        self.entries: dict[str, dict] = {}

    # report ---------------------------------------------------------------
    def load_report(self) -> None:
        try:
            self.entries = json.loads(self.report_path.read_text(encoding="utf-8")).get("students", {})
        except (OSError, ValueError):
            self.entries = {}

    def save(self, result: Result) -> None:
        """Record ``result`` and rewrite the report atomically (caller holds ``self.lock``)."""
        result.finished = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        self.entries[result.student] = asdict(result)
        self.report_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.report_path.with_name(self.report_path.name + f".tmp{os.getpid()}")
        doc = {"assignment": self.assignment, "gradebook": database.describe(self.url),
               "students": dict(sorted(self.entries.items()))}
        tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        os.replace(tmp, self.report_path)

    # helpers ----------------------------------------------------------------
    def submission(self, student: str) -> Path:
        return self.root / "submitted" / student / self.assignment

    def remove_outputs(self, student: str) -> None:
        """Remove autograded and feedback output of a submission that has no valid grading."""
        for top in ("autograded", "feedback"):
            base = (self.root / top).resolve()
            path = base / student / self.assignment
            if path.is_symlink():
                path.unlink()
            elif path.is_dir() and path.resolve().is_relative_to(base):
                shutil.rmtree(path)

    def nbgrader_cmd(self, student: str) -> list[str]:
        return nbgrader_command(self.root, self.assignment, student, self.url)

    def finished(self, student: str) -> bool:
        """Whether the journal shows this submission finished: graded, failed (not by a grader
        error) or rejected, for the files the folder holds now."""
        entry = self.entries.get(student) or {}
        if entry.get("state") not in (GRADED, FAILED, REJECTED):
            return False
        if entry["state"] == FAILED and "GRADER ERROR" in entry.get("reason", ""):
            return False
        return entry.get("sha256") is not None and entry["sha256"] == folder_hash(self.submission(student))

    # one submission -------------------------------------------------------
    def reject(self, student: str, reason: str) -> Result:
        start = time.perf_counter()
        with self.lock:
            record_zero(self.url, self.course, self.assignment, student,
                        submission_timestamp(self.submission(student)))
        self.remove_outputs(student)
        return Result(student, REJECTED, f"rejected: {reason}", *self.totals(student),
                      cells=self.cell_table(student, {}), seconds=time.perf_counter() - start,
                      sha256=folder_hash(self.submission(student)))

    def grade(self, student: str, notes: list[str]) -> Result:
        if self.stopping:
            return Result(student, INTERRUPTED, "not started: the run was interrupted")
        before = self.begin(student)
        return self.conclude(student, notes, before, self.execute(student))

    def begin(self, student: str) -> str | None:
        """Journal that grading starts (the entry says ``grading``); the submission's hash."""
        before = folder_hash(self.submission(student))
        with self.lock:
            self.save(Result(student, GRADING, "grading started; if this stays, the run was "
                             "interrupted and the gradebook may hold an older or incomplete grade",
                             sha256=before))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return before

    def execute(self, student: str) -> Outcome:
        """nbgrader on this machine, in the course root; its log in the report's logs."""
        start = time.perf_counter()
        rc, timed_out = run_nbgrader(self.nbgrader_cmd(student), self.root,
                                     self.log_dir / f"{student}.log", self.timeout, self.procs, student)
        return Outcome(rc, timed_out, time.perf_counter() - start, machine=machine_kind())

    def conclude(self, student: str, notes: list[str], before: str | None, outcome: Outcome) -> Result:
        """The report entry of a run (``outcome``): graded, failed (zeroed) or a grader error."""
        folder = self.submission(student)
        log_path = self.log_dir / f"{student}.log"
        log_text = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else ""
        after = folder_hash(folder)
        changed = outcome.changed or after != before
        rc, seconds = outcome.rc, outcome.seconds
        rel_log = str(log_path.relative_to(self.root))
        where = dict(machine=outcome.machine, worker=outcome.worker)
        if self.stopping and rc != 0:
            return Result(student, INTERRUPTED, "interrupted: the run was stopped while grading it; "
                          "the gradebook may hold an older or incomplete grade",
                          log=rel_log, seconds=seconds, sha256=before, **where)
        if outcome.grader_error:  # nothing was written; the next run grades it again
            reason = outcome.grader_error + (f" [{'; '.join(notes)}]" if notes else "")
            return Result(student, FAILED, f"failed: {reason}", notes=notes, log=rel_log,
                          seconds=seconds, sha256=before, **where)
        grades = read_grades(self.url, self.course, self.assignment, student) if rc == 0 else None
        incomplete = grades is not None and any(
            g["auto_score"] is None and not g["manual"] for g in grades.values())
        if rc == 0 and grades and not incomplete and not changed and not outcome.failure:
            per_cell, extra = autograded_reasons(
                self.root / "autograded" / student / self.assignment / f"{self.assignment}.ipynb")
            cells = self.cell_table(student, per_cell, grades)
            return Result(student, GRADED, graded_reason(cells), *self.totals(student, grades),
                          cells=cells, notes=notes + extra, log=rel_log, seconds=seconds,
                          sha256=before, **where)
        if outcome.failure:
            reason, grader_error = outcome.failure, False
        elif changed:
            reason, grader_error = ("the submission's files changed while it was graded (did its code "
                                    "write to them?); graded 0, check it by hand", False)
        elif rc == 0:
            reason, grader_error = ("nbgrader finished but left graded cells without a score", False)
        else:
            reason, grader_error = failure_reason(log_text, rc, outcome.timed_out)
        if not grader_error:
            with self.lock:
                record_zero(self.url, self.course, self.assignment, student, submission_timestamp(folder))
            self.remove_outputs(student)
        totals = self.totals(student) if not grader_error else (None, None)
        if notes:
            reason += f" [{'; '.join(notes)}]"
        return Result(student, FAILED, f"failed: {reason}", *totals,
                      cells=self.cell_table(student, {}) if not grader_error else {},
                      notes=notes, log=rel_log, seconds=seconds, sha256=before, **where)

    def totals(self, student: str, grades: dict | None = None) -> tuple[float | None, float | None]:
        grades = grades if grades is not None else read_grades(self.url, self.course, self.assignment, student)
        if not grades:
            return None, None
        return (sum(g["score"] for g in grades.values()), sum(g["max_score"] for g in grades.values()))

    def cell_table(self, student: str, per_cell: dict, grades: dict | None = None) -> dict:
        grades = grades if grades is not None else read_grades(self.url, self.course, self.assignment, student)
        table = {gid: {"score": g["score"], "max_score": g["max_score"], "manual": g["manual"],
                       "why": per_cell.get(gid, [])} for gid, g in (grades or {}).items()}
        for gid, g in (grades or {}).items():  # a GPU test left unrun: no score, and the reason
            if g.get("auto_score") is None and table[gid]["why"] == [NOT_GRADED_GPU]:
                table[gid]["not_graded"] = NOT_GRADED_GPU
        return table

    # the class --------------------------------------------------------------
    def run(self, names: list[str], echo=print) -> list[Result]:
        self.course = course_id(self.url, self.assignment)
        if self.course is None:
            raise SystemExit(f"assignment {self.assignment!r} is not in the gradebook "
                             f"{database.describe(self.url)}: run `make release` "
                             f"(nbgrader generate_assignment) first")
        self.load_report()
        if self.unfinished:
            done_before = [s for s in names if self.finished(s)]
            names = [s for s in names if s not in set(done_before)]
            self.skipped = {s: self.entries[s] for s in done_before}
            echo(f"{self.assignment}: {len(done_before)} submission(s) already finished in the journal "
                 f"{self.report_path.name} (--unfinished): grading {len(names)}", flush=True)
        results, todo = [], []
        total = len(names)

        def done(result: Result) -> None:
            with self.lock:
                self.save(result)
                results.append(result)
                score = ("-" if result.score is None else f"{result.score:g}/{result.max_score:g}")
                secs = f"{result.seconds:.1f} s" if result.seconds is not None else ""
                echo(f"[{len(results)}/{total}] {self.assignment} {result.student}: {score} "
                     f"{result.state} ({secs}) {result.reason}", flush=True)

        for student in names:
            reason, notes = precheck(self.root, self.assignment, student)
            if reason:
                done(self.reject(student, reason))
            else:
                todo.append((student, notes))
        self.grade_all(todo, done, results)
        return results

    def grade_all(self, todo: list, done, results: list) -> None:
        """Grade ``todo`` ((student, notes) pairs), ``self.jobs`` at a time, calling ``done`` with
        each result; on an interrupt, journal what was not finished and re-raise."""
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.jobs)
        futures = {pool.submit(self.grade, s, n): s for s, n in todo}
        try:
            for fut in concurrent.futures.as_completed(futures):
                try:
                    done(fut.result())
                except Exception as err:  # a bug or an unreachable gradebook: that one only
                    done(Result(futures[fut], FAILED, f"failed: GRADER ERROR: {type(err).__name__}: {err}"))
        except BaseException:
            self.stopping = True
            for proc in list(self.procs.values()):
                proc.kill()
            pool.shutdown(wait=True, cancel_futures=True)
            finished = {r.student for r in results}
            for fut, student in futures.items():
                if student not in finished:
                    result = fut.result() if fut.done() and not fut.cancelled() and fut.exception() is None \
                        else Result(student, INTERRUPTED, "interrupted before it was graded")
                    with self.lock:
                        self.save(result)
            raise
        pool.shutdown()
