"""The class runner (autograder/class_runner.py, its command line autograder/grade_class.py), its gradebooks and the summary, on the toy course.

Each test grades generated submissions of the toy assignment (autograder/toy_course.py: three
graded cells, test_square 1 point, test_cube 2, explain 1 manual) in its own copy of a toy course
root, through the runner's command line, and reads what the gradebook recorded. Where a behaviour
needs a protection that plain nbgrader lacks, the test first shows plain nbgrader failing
(a control), so the test could fail without the protection.
"""
import copy
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autograder import class_runner, database, grading, postgres

A = "toy"
AUTO = {"test_square": 1.0, "test_cube": 2.0}


@pytest.fixture(scope="module")
def toy_root(tmp_path_factory):
    """A built and released toy course (solutions/, notebooks/, config, SQLite gradebook)."""
    root = tmp_path_factory.mktemp("toy") / "course"
    proc = subprocess.run([sys.executable, "-m", "autograder.toy_course", str(root)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          cwd=grading.REPO)
    assert proc.returncode == 0, proc.stdout
    return root


def fresh_course(toy_root, dst, keep_db=True):
    """A copy of the toy course at ``dst`` (with its gradebook unless ``keep_db`` is False)."""
    shutil.copytree(toy_root, dst, ignore=None if keep_db else shutil.ignore_patterns("gradebook.db"))
    return dst


def source_nb(root):
    return json.loads(grading.source_path(A, root).read_text(encoding="utf-8"))


def edited(root, **sources):
    """The toy solution with the source of cells (by grade_id) replaced; None deletes the cell."""
    return grading.edit_cells(source_nb(root), sources)


def submit(root, student, content, name=f"{A}.ipynb", timestamp=None):
    """Write a submission; ``content`` is a notebook dict, raw text, or None (empty folder)."""
    folder = Path(root) / "submitted" / student / A
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.ipynb"):
        old.unlink()
    if content is not None:
        text = content if isinstance(content, str) else json.dumps(content)
        (folder / name).write_text(text, encoding="utf-8")
    if timestamp:
        (folder / "timestamp.txt").write_text(timestamp, encoding="utf-8")


def run_class(root, *args, db=None, check_rc=None):
    """Run ``python -m autograder.grade_class toy --root ROOT ARGS``; return (rc, output, report)."""
    env = dict(os.environ)
    env.pop(database.ENV, None)
    if db:
        env[database.ENV] = db
    proc = subprocess.run([sys.executable, "-m", "autograder.grade_class", A, "--root", str(root), *args],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          cwd=grading.REPO, env=env, stdin=subprocess.DEVNULL)
    if check_rc is not None:
        assert proc.returncode == check_rc, proc.stdout
    return proc.returncode, proc.stdout, report_of(root)


def report_of(root):
    path = Path(root) / class_runner.REPORTS / f"{A}.json"
    return json.loads(path.read_text(encoding="utf-8"))["students"] if path.exists() else {}


def gradebook(url):
    """student -> grade_id -> (auto_score, score, needs_manual_grade), every submission row."""
    from nbgrader.api import Gradebook

    with Gradebook(url, "debug-course") as gb:
        return {sub.student.id: {g.name: (g.auto_score, float(g.score), bool(g.needs_manual_grade))
                                 for nb in sub.notebooks for g in nb.grades}
                for sub in gb.find_assignment(A).submissions}


def plain_nbgrader(root, *args, url=None):
    """nbgrader itself, with its default (plain) SQLite URL: the control without protections."""
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    return subprocess.run([sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={root}",
                           f"--CourseDirectory.db_url={url or database.sqlite_url(root, None)}"],
                          cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env, stdin=subprocess.DEVNULL)


def tree_hashes(folder):
    return {str(p.relative_to(folder)): class_runner.folder_hash(p)
            for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def zero_everywhere(grades):
    return all(auto == 0 and score == 0 and not manual for auto, score, manual in grades.values())


# ----------------------------------------------------------------- a class with bad submissions

BAD = {  # student -> (what it submits, words its reason must contain)
    "corrupt": (lambda r: json.dumps(source_nb(r))[:400], "not valid JSON"),
    "wrong_name": (lambda r: ("Toy (copy).ipynb", source_nb(r)), "wrong notebook name"),
    "missing": (lambda r: None, "missing"),
    "not_notebook": (lambda r: "[1, 2, 3]", "not a Jupyter notebook"),
    "duplicated": (lambda r: duplicated_test(r), "more than once"),
    "stripped": (lambda r: stripped_metadata(r), "metadata stripped"),
}
GOOD = {  # student -> (submission, expected autograded scores)
    "solution": (lambda r: source_nb(r), AUTO),
    "wrong_square": (lambda r: edited(r, square="def square(x):\n    return 2 * x"),
                     {"test_square": 0.0, "test_cube": 2.0}),
}


def duplicated_test(root):
    nb = source_nb(root)
    i = [grading.nbgrader_meta(c).get("grade_id") for c in nb["cells"]].index("test_square")
    nb["cells"].insert(i, copy.deepcopy(nb["cells"][i]))
    return nb


def stripped_metadata(root):
    nb = source_nb(root)
    for cell in nb["cells"]:
        cell["metadata"].pop("nbgrader", None)
    return nb


@pytest.fixture(scope="module")
def graded_class(toy_root, tmp_path_factory):
    """The class above, graded twice by the runner (jobs=2), with what each run left."""
    root = fresh_course(toy_root, tmp_path_factory.mktemp("class") / "course")
    for student, (make, _) in {**BAD, **GOOD}.items():
        content = make(root)
        if isinstance(content, tuple):
            submit(root, student, content[1], name=content[0])
        else:
            submit(root, student, content)
    # the solution as a symlink: nbgrader would follow it and grade the solutions
    folder = root / "submitted" / "symlink" / A
    folder.mkdir(parents=True)
    (folder / f"{A}.ipynb").symlink_to(grading.source_path(A, root))
    before = tree_hashes(root / "submitted")
    first = run_class(root, "--jobs", "2")
    gb_first = gradebook(database.sqlite_url(root))
    second = run_class(root, "--jobs", "2")
    return dict(root=root, before=before, first=first, second=second, gb_first=gb_first,
                gb_second=gradebook(database.sqlite_url(root)), after=tree_hashes(root / "submitted"))


def test_plain_nbgrader_leaves_bad_submissions_ungraded(toy_root, tmp_path):
    """Control: nbgrader alone gives a missing notebook no row and a corrupt one "needs manual
    grade" on every cell, which is what the runner's pre-check replaces."""
    root = fresh_course(toy_root, tmp_path / "course")
    submit(root, "corrupt", BAD["corrupt"][0](root))
    submit(root, "missing", None)
    proc = plain_nbgrader(root, "autograde", A, "--force")
    assert proc.returncode != 0, proc.stdout
    rows = gradebook(database.sqlite_url(root))
    assert "missing" not in rows, rows
    assert all(manual for _, _, manual in rows["corrupt"].values()), rows


def test_every_bad_submission_gets_zero_and_a_reason(graded_class):
    """Each bad submission: a gradebook row, 0 on every cell, no manual grade pending, and a
    readable reason; the rest of the class is graded; the exit status says some failed."""
    rc, out, report = graded_class["first"]
    rows = graded_class["gb_first"]
    assert rc == 1, out
    for student, (_, words) in {**BAD, "symlink": (None, "symbolic link")}.items():
        assert student in rows, f"{student} has no gradebook row\n{out}"
        assert zero_everywhere(rows[student]), f"{student}: {rows[student]}\n{out}"
        entry = report[student]
        assert entry["state"] in ("rejected", "failed"), entry
        assert words in entry["reason"], f"{student}: reason {entry['reason']!r} lacks {words!r}"
    for student, (_, expected) in GOOD.items():
        assert report[student]["state"] == "graded", f"{student}: {report[student]}\n{out}"
        got = {gid: rows[student][gid][0] for gid in AUTO}
        assert got == expected, f"{student}: {got} != {expected}"
        assert rows[student]["explain"][2], f"{student}: the written answer must await a manual grade"


def test_reasons_name_the_failing_cell(graded_class):
    """A graded submission that lost points says which cell and why (the assertion message)."""
    _, _, report = graded_class["first"]
    cells = report["wrong_square"]["cells"]
    assert cells["test_square"]["score"] == 0 and cells["test_cube"]["score"] == 2
    assert any("square(3) should be 9" in why for why in cells["test_square"]["why"]), cells
    assert "test_square" in report["wrong_square"]["reason"]


def test_regrading_unchanged_submissions_is_idempotent(graded_class):
    """A second run over the same submissions leaves the same rows and scores, the same states."""
    assert graded_class["gb_second"] == graded_class["gb_first"]
    first, second = graded_class["first"][2], graded_class["second"][2]
    assert {s: (e["state"], e["reason"], e["score"]) for s, e in first.items()} == \
           {s: (e["state"], e["reason"], e["score"]) for s, e in second.items()}


def test_grading_never_modifies_submissions(graded_class):
    """Every file under submitted/ has the same bytes after two gradings of the class."""
    assert graded_class["after"] == graded_class["before"]


def test_summary_shows_cells_failures_and_manual_grading(graded_class):
    root = graded_class["root"]
    proc = subprocess.run([sys.executable, "-m", "autograder.summary", A, "--root", str(root)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=grading.REPO)
    assert proc.returncode == 0, proc.stdout
    lines = proc.stdout.splitlines()
    row = next(ln.split() for ln in lines if ln.startswith("wrong_square "))
    assert row[1:6] == ["0", "2", "?", "0", "2"], row       # per cell, late penalty, total; ? = manual pending
    section = proc.stdout.split("-- not graded")[1].split("-- lost points")[0]
    for student in BAD:
        assert f"  {student}: " in section, f"{student} missing from the failures:\n{proc.stdout}"
    assert "wrong_square test_square 0/1: AssertionError: square(3) should be 9" in proc.stdout
    manual = proc.stdout.split("-- needs manual grade")[1]
    assert "solution: explain" in manual and "corrupt" not in manual, manual


# ----------------------------------------------------------------- regrading, stale scores

def test_resubmission_replaces_score_and_failure_does_not_keep_a_stale_one(toy_root, tmp_path):
    root = fresh_course(toy_root, tmp_path / "course")
    url = database.sqlite_url(root)
    submit(root, "alice", source_nb(root), timestamp="2030-01-01 10:00:00 UTC")
    run_class(root, check_rc=0)
    assert gradebook(url)["alice"]["test_square"][0] == 1.0
    # a changed notebook with a later timestamp replaces the score and the autograded output
    submit(root, "alice", edited(root, square="def square(x):\n    return 2 * x"),
           timestamp="2030-01-02 10:00:00 UTC")
    run_class(root, check_rc=0)
    assert gradebook(url)["alice"]["test_square"][0] == 0.0
    autograded = (root / "autograded" / "alice" / A / f"{A}.ipynb").read_text(encoding="utf-8")
    assert "return 2 * x" in autograded
    # a resubmission that nbgrader cannot grade: plain nbgrader keeps the old score (control) ...
    submit(root, "alice", duplicated_test(root), timestamp="2030-01-03 10:00:00 UTC")
    control = plain_nbgrader(root, "autograde", A, "--student", "alice", "--force")
    assert control.returncode != 0
    assert gradebook(url)["alice"]["test_cube"][0] == 2.0, "control: nbgrader kept the stale score"
    # ... the runner records 0 with the reason
    rc, out, report = run_class(root)
    assert rc == 1 and zero_everywhere(gradebook(url)["alice"]), out
    assert "more than once" in report["alice"]["reason"]
    assert not (root / "autograded" / "alice" / A).exists(), "stale autograded output left"


# ----------------------------------------------------------------- parallel grading, databases

def hold_write_lock(db_path, started, release, cap_s=300):
    """Hold SQLite's write lock (BEGIN IMMEDIATE: others may read, nobody may write) until
    ``release`` is set (at most ``cap_s``), as a long writer elsewhere would."""
    con = sqlite3.connect(db_path, isolation_level=None, timeout=60)
    con.execute("BEGIN IMMEDIATE")
    started.set()
    release.wait(cap_s)
    con.execute("COMMIT")
    con.close()


def locked(db_path):
    """(thread holding the write lock, the event that releases it), the lock already taken."""
    started, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=hold_write_lock, args=(db_path, started, release))
    holder.start()
    started.wait()
    return holder, release


def test_parallel_sqlite_waits_for_a_locked_gradebook_and_loses_no_row(toy_root, tmp_path):
    """6 submissions graded 3 at a time while another connection holds the SQLite gradebook's
    write lock until a worker has waited 8 s for it (longer than the 5 s busy timeout nbgrader
    gets by default): every row arrives. Control: nbgrader with its plain URL, under the same
    lock, fails with "database is locked"."""
    root = fresh_course(toy_root, tmp_path / "course")
    db = str(root / "gradebook.db")
    submit(root, "control", source_nb(root))
    holder, release = locked(db)
    try:
        control = plain_nbgrader(root, "autograde", A, "--student", "control", "--force")
    finally:
        release.set()
        holder.join()
    assert control.returncode != 0 and "database is locked" in control.stdout, control.stdout[-2000:]
    shutil.rmtree(root / "submitted" / "control")
    students = [f"s{i:02d}" for i in range(6)]
    for i, s in enumerate(students):
        submit(root, s, source_nb(root) if i % 2 else edited(root, cube="def cube(x):\n    return x"))
    holder, release = locked(db)
    env = {k: v for k, v in os.environ.items() if k != database.ENV}
    try:
        proc = subprocess.Popen([sys.executable, "-m", "autograder.grade_class", A, "--root", str(root),
                                 "--jobs", "3"], cwd=grading.REPO, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        logs = root / class_runner.REPORTS / f"{A}.logs"
        deadline = time.time() + 300
        while time.time() < deadline and not any(
                "Creating/updating student" in p.read_text(errors="replace") for p in logs.glob("*.log")):
            time.sleep(0.2)
        time.sleep(8)   # a worker is now waiting for the lock longer than the default 5 s
    finally:
        release.set()
        holder.join()
    out = proc.communicate()[0]
    assert proc.returncode == 0, out
    rows = gradebook(database.sqlite_url(root))
    for i, s in enumerate(students):
        expected = AUTO if i % 2 else {"test_square": 1.0, "test_cube": 0.0}
        assert {g: rows[s][g][0] for g in AUTO} == expected, f"{s}: {rows.get(s)}\n{out}"


def test_postgres_gradebook_parallel(toy_root, tmp_path):
    """The same runner on a PostgreSQL gradebook (COURSE_DB_URL), started here on loopback."""
    try:
        server = postgres.temporary_server()
        url = server.__enter__()
    except postgres.Unavailable as err:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the PostgreSQL test: {err}")
        pytest.skip(f"PostgreSQL not available here: {err}")
    try:
        root = fresh_course(toy_root, tmp_path / "course", keep_db=False)
        proc = plain_nbgrader(root, "generate_assignment", A, "--force", url=url)
        assert proc.returncode == 0, proc.stdout
        students = [f"p{i}" for i in range(4)]
        for i, s in enumerate(students):
            submit(root, s, source_nb(root) if i % 2 else edited(root, square="def square(x):\n    return x"))
        rc, out, report = run_class(root, "--jobs", "2", db=url)
        assert rc == 0, out
        assert "postgresql://" in out
        rows = gradebook(url)
        assert not (root / "gradebook.db").exists(), "graded into SQLite instead of PostgreSQL"
        for i, s in enumerate(students):
            expected = AUTO if i % 2 else {"test_square": 0.0, "test_cube": 2.0}
            assert {g: rows[s][g][0] for g in AUTO} == expected, f"{s}: {rows.get(s)}\n{out}"
    finally:
        server.__exit__(None, None, None)


# ----------------------------------------------------------------- a crash mid-batch

# Slow only while the submission folder holds the file "slow" (the sandbox gives the kernel read-only
# copies of the folder's files): the killed run is mid-grading for 20 s, the re-run of the same
# notebook is not kept waiting.
SLOW = "import os, time\ndef square(x):\n    if os.path.exists('slow'):\n        time.sleep(20)\n    return x * x"


def grader_pids(root):
    """Processes whose command line names this course root (nbgrader workers of this test)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if proc.name.isdigit() and f"--CourseDirectory.root={root}" in cmd:
            pids.append(int(proc.name))
    return pids


def test_crash_mid_batch_is_visible_and_a_rerun_completes_it(toy_root, tmp_path):
    """The runner is killed (SIGKILL) while it grades a resubmission. Its workers die with it; the
    report still says that submission is being graded, so the summary lists it as interrupted
    instead of showing the old score as current; a re-run grades it."""
    root = fresh_course(toy_root, tmp_path / "course")
    url = database.sqlite_url(root)
    for s in ("a", "c"):
        submit(root, s, edited(root, cube="def cube(x):\n    return 0"))
    run_class(root, check_rc=0)
    submit(root, "c", edited(root, square=SLOW), timestamp="2030-01-02 10:00:00 UTC")
    slow = root / "submitted" / "c" / A / "slow"
    slow.write_text("sleep in square")
    env = {k: v for k, v in os.environ.items() if k != database.ENV}
    log = root / class_runner.REPORTS / f"{A}.logs" / "c.log"
    log.unlink()  # the first run's log says "Autograding" too: wait for this run's, not that one
    proc = subprocess.Popen([sys.executable, "-m", "autograder.grade_class", A, "--root", str(root),
                             "--jobs", "1", "--students", "c"], cwd=grading.REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not (log.exists() and "Autograding" in log.read_text()
                                          and report_of(root).get("c", {}).get("state") == "grading"):
        time.sleep(0.5)
    time.sleep(3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for _ in range(20):
        if not grader_pids(root):
            break
        time.sleep(0.5)
    assert not grader_pids(root), "nbgrader workers outlived the killed runner"
    assert report_of(root)["c"]["state"] == "grading"
    rows = gradebook(url)
    assert rows["c"]["test_cube"][0] == 0.0, "the old score is what the gradebook holds"
    with sqlite3.connect(root / "gradebook.db") as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    summary = subprocess.run([sys.executable, "-m", "autograder.summary", A, "--root", str(root)],
                             stdout=subprocess.PIPE, text=True, cwd=grading.REPO).stdout
    not_graded = summary.split("-- not graded")[1].split("-- lost points")[0]
    assert "c: grading was interrupted" in not_graded, summary
    slow.unlink()  # the same notebook, graded again without the wait
    started = time.monotonic()
    run_class(root, "--students", "c", check_rc=0)
    assert time.monotonic() - started < 60, "the re-run waited in square: the 'slow' file reached it"
    rows = gradebook(url)
    assert {g: rows["c"][g][0] for g in AUTO} == AUTO, rows["c"]
    assert {g: rows["a"][g][0] for g in AUTO} == {"test_square": 1.0, "test_cube": 0.0}
    assert report_of(root)["c"]["state"] == "graded"


def test_grader_errors_are_not_blamed_on_the_submission():
    """A refused sandbox or a locked gradebook is the grader's failure (nothing is zeroed);
    a notebook nbgrader cannot match to the assignment is the submission's."""
    cases = [
        ("RuntimeError: refusing to autograde without the sandbox: bwrap missing", True, "sandbox"),
        ("sqlite3.OperationalError: database is locked", True, "locked"),
        ("  File \".../overwritecells.py\", line 140, in add_missing_grade_cells\nKeyError: 'square'",
         False, "test cells back"),
        ("ValueError: something odd", False, "ValueError: something odd"),
    ]
    for log, grader_error, words in cases:
        reason, is_grader = class_runner.failure_reason(log, 1, None)
        assert is_grader == grader_error and words in reason, (log, reason, is_grader)


# ----------------------------------------------------------------- due dates and the late policy

def test_late_work_loses_the_policys_penalty_in_summary_export_and_feedback(toy_root, tmp_path):
    """The due date where nbgrader keeps it (``nbgrader db assignment add --duedate``), one
    submission before it and one 25 hours after: the late one loses 2 days x 10% of its score
    (autograder.late_policy, configured in nbgrader_config.py), the early one nothing; the summary,
    nbgrader's export and the learner's feedback all show it."""
    root = fresh_course(toy_root, tmp_path / "course")
    done = plain_nbgrader(root, "db", "assignment", "add", A, "--duedate=2026-01-10 12:00:00 UTC",
                          url=database.sqlite_url(root))
    assert done.returncode == 0, done.stdout
    submit(root, "early", source_nb(root), timestamp="2026-01-10 11:59:00.000000 UTC")
    submit(root, "late", source_nb(root), timestamp="2026-01-11 13:00:00.000000 UTC")
    run_class(root, "--jobs", "2", check_rc=0)
    summary = subprocess.run([sys.executable, "-m", "autograder.summary", A, "--root", str(root)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=grading.REPO).stdout
    assert "due 2026-01-10 12:00:00 UTC; late work loses 10% of its score" in summary, summary
    late = summary.split("-- late")[1].split("\n-- ")[0]
    assert "late: submitted 1d 1h after the due date, penalty 0.6" in late and "early" not in late, summary
    row = next(ln.split() for ln in summary.splitlines() if ln.startswith("late "))
    assert row[-4:] == ["-0.6", "2.4", "4", "graded"], row   # 3 auto points less 0.6, of 4
    export = tmp_path / "grades.csv"
    assert plain_nbgrader(root, "export", f"--to={export}", url=database.sqlite_url(root)).returncode == 0
    import csv
    rows = {r["student_id"]: r for r in csv.DictReader(export.open())}
    assert (float(rows["late"]["late_submission_penalty"]), float(rows["late"]["score"])) == (0.6, 2.4), rows["late"]
    assert float(rows["early"]["late_submission_penalty"]) == 0.0 and float(rows["early"]["score"]) == 3.0
    fb = plain_nbgrader(root, "generate_feedback", A, url=database.sqlite_url(root))
    assert fb.returncode == 0, fb.stdout
    page = (root / "feedback" / "late" / A / f"{A}.html").read_text(encoding="utf-8")
    assert "Late submission penalty (Score: -0.6)" in page
    assert "Late submission penalty" not in (root / "feedback" / "early" / A / f"{A}.html").read_text(encoding="utf-8")


def test_late_policy_per_day_and_nbgraders_methods():
    """10% per day or part of a day, never more than the score; nbgrader's own methods kept.
    Control: nbgrader's plugin as configured by default gives no penalty at all."""
    from nbgrader.plugins import LateSubmissionPlugin

    from autograder.late_policy import LatePenalty

    p = LatePenalty()
    assert [p.late_submission_penalty("s", 10.0, s) for s in (1, 86400, 86401, 9 * 86400 + 1, 30 * 86400)] \
        == [1.0, 1.0, 2.0, 10.0, 10.0]
    assert LatePenalty(penalty_method="zero").late_submission_penalty("s", 7.0, 5) == 7.0
    assert LatePenalty(penalty_method="none").late_submission_penalty("s", 7.0, 5) is None
    assert LateSubmissionPlugin().late_submission_penalty("s", 7.0, 5) is None


def test_another_assignments_notebook_under_this_name_is_rejected():
    """01's release saved as 00_start_here.ipynb is rejected, naming 01_baselines; controls: 00's
    release, the same with its nbgrader metadata stripped, and a notebook without cell ids pass."""
    def nb(a):
        return json.loads(grading.release_path(a).read_text(encoding="utf-8"))

    reason = class_runner.another_notebook(grading.REPO, "00_start_here", nb("01_baselines"))
    assert reason and "not 00_start_here's notebook" in reason and "it is 01_baselines's notebook" in reason, reason
    assert class_runner.another_notebook(grading.REPO, "00_start_here", nb("00_start_here")) is None
    stripped = nb("00_start_here")
    for cell in stripped["cells"]:
        cell["metadata"].pop("nbgrader", None)
    assert class_runner.another_notebook(grading.REPO, "00_start_here", stripped) is None
    no_ids = nb("01_baselines")
    for cell in no_ids["cells"]:
        cell.pop("id", None)
    assert class_runner.another_notebook(grading.REPO, "00_start_here", no_ids) is None
