"""The shared-server route end to end: nbgrader's exchange, two students, the class runner.

On one shared server (JupyterHub) the course goes out and comes back through nbgrader's exchange
folder instead of git. This test runs that route on the toy course (autograder/toy_course.py:
test_square 1 point, test_cube 2, explain 1 manual), with a temporary exchange root:

    instructor (course root, COURSE_EXCHANGE set)   generate_assignment toy, release_assignment toy
    alice, bob (each their own HOME and folder)       fetch_assignment toy, edit, submit toy
    instructor                                        collect toy
                                                      python -m autograder.grade_class toy
                                                      generate_feedback toy, release_feedback toy
    alice, bob                                        fetch_feedback toy

and checks the scores in the gradebook and that no hidden-test text reaches a student: not in
the notebook they fetch, not in the feedback they fetch (bob fails a hidden test, the case where
a traceback could quote it).

Simulation limits: the test runs as one OS user, so each student is a separate HOME (nbgrader's
cache of submissions lives there), working folder, and ``--student`` (nbgrader names a
submission after the OS user, or $JUPYTERHUB_USER when that user is ``jovyan``); collect's
owner check therefore warns that root owns the submissions. File permissions between real users
are not exercised. The instructor's exchange root comes from ``COURSE_EXCHANGE`` (read by
nbgrader_config.py); students' nbgrader does not read the course's config, so they pass
``--Exchange.root`` (on a server: a system-wide /etc/jupyter/nbgrader_config.py). The nbgrader
commands of one stretch run in one Python process (``DRIVER``: a fresh app per command, in the
command's own folder and environment), to pay nbgrader's import once per stretch, not per command.
"""
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jupytext
import pytest

from autograder import database, execute_notebooks, grading, toy_course

A = "toy"
COURSE = "debug-course"  # c.CourseDirectory.course_id in nbgrader_config.py
STUDENTS = {
    # alice: the solution; bob: square right, cube passes its visible test and fails a hidden one
    "alice": ({"square": "def square(x):\n    return x * x",
               "cube": "def cube(x):\n    return x * x * x"},
              {"test_square": 1.0, "test_cube": 2.0}),
    "bob": ({"square": "def square(x):\n    return x ** 2",
             "cube": "def cube(x):\n    return abs(x) ** 3"},
            {"test_square": 1.0, "test_cube": 0.0}),
}


def _env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("JUPYTER_") and k not in (database.ENV, "COURSE_EXCHANGE")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env.update(extra)
    return env


# Runs a list of steps in ONE Python process: each nbgrader step is `nbgrader ARGS` in its own
# working directory and environment, as its command line would run it (a fresh NbGraderApp that
# loads nbgrader_config.py from that directory), without paying nbgrader's import (seconds of
# CPU) once per command. "copy" and "edit" steps are a student's file operations.
DRIVER = r"""
import json, logging, os, shutil, sys
from io import StringIO
from jupyter_core.application import NoStart
from nbgrader.apps import NbGraderApp
from autograder.grading import edit_cells  # imported while the working directory is the repository

base_env = dict(os.environ)
for step in json.loads(sys.stdin.read()):
    if "copy" in step:
        shutil.copy(*step["copy"]); continue
    if "edit" in step:  # what the student types into the answer cells, saved
        path, edits = step["edit"]
        nb = edit_cells(json.load(open(path, encoding="utf-8")), edits)
        open(path, "w", encoding="utf-8").write(json.dumps(nb)); continue
    os.environ.clear(); os.environ.update(base_env); os.environ.update(step["env"])
    os.chdir(step["cwd"])
    log = StringIO()
    app = NbGraderApp.instance()
    code = 0
    try:
        app.initialize(step["args"])
        app.init_logging(logging.StreamHandler, [log], color=False, subapps=True)
        app.start()
    except NoStart:  # how a subcommand that ran tells its parent app it is done
        pass
    except SystemExit as e:
        code = e.code or 0
    finally:
        NbGraderApp.clear_instance()
    print(json.dumps({"label": step["label"], "code": code, "log": log.getvalue()}), flush=True)
    if code:
        sys.exit(1)
"""


def _drive(steps) -> dict[str, str]:
    """Run ``steps`` (see DRIVER); return each nbgrader step's label -> its log."""
    proc = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps(steps), cwd=grading.REPO,
                          env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    logs = {}
    for line in proc.stdout.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        logs[rec["label"]] = rec["log"]
    assert proc.returncode == 0, f"an nbgrader step failed:\n{proc.stdout[-6000:]}"
    return logs


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The whole route, once; returns the folders and logs each check reads."""
    tmp = tmp_path_factory.mktemp("exchange")
    root, exchange = tmp / "course", tmp / "exchange"
    # the toy course, as `python -m autograder.toy_course` builds it (generate_assignment below)
    folder = root / "solutions" / A
    folder.mkdir(parents=True)
    jupytext.write(toy_course.toy_notebook(), folder / f"{A}.py", fmt="py:percent")
    execute_notebooks.execute(folder / f"{A}.ipynb")
    shutil.copy(grading.REPO / grading.CONFIG_FILE, root / grading.CONFIG_FILE)
    homes = {s: tmp / "home" / s for s in STUDENTS}
    for home in homes.values():
        home.mkdir(parents=True)

    def instructor(*args):
        # The course's nbgrader_config.py (copied into the toy root) reads COURSE_EXCHANGE.
        return {"label": " ".join(args), "args": [*args, f"--CourseDirectory.root={root}",
                         f"--CourseDirectory.db_url={grading.db_url(root)}"],
                "cwd": str(root), "env": {"COURSE_EXCHANGE": str(exchange)}}

    def student(name, *args):
        return {"label": f"{args[0]} {name}", "args": [*args, f"--course={COURSE}", f"--Exchange.root={exchange}",
                         f"--CourseDirectory.student_id={name}"],
                "cwd": str(homes[name]),
                "env": {"HOME": str(homes[name]), "USER": name, "LOGNAME": name}}

    steps = [instructor("generate_assignment", A), instructor("release_assignment", A)]
    for name, (edits, _) in STUDENTS.items():
        path = homes[name] / A / f"{A}.ipynb"
        steps += [student(name, "fetch_assignment", A),
                  {"copy": [str(path), str(tmp / f"fetched-{name}.ipynb")]},
                  {"edit": [str(path), edits]},
                  student(name, "submit", A)]
    steps.append(instructor("collect", A))
    logs = _drive(steps)
    grade = subprocess.run([sys.executable, "-m", "autograder.grade_class", A, "--root", str(root),
                            "--jobs", "2"], cwd=grading.REPO, env=_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    assert grade.returncode == 0, grade.stdout
    logs["grade_class"] = grade.stdout
    logs.update(_drive([instructor("generate_feedback", A), instructor("release_feedback", A)]
                       + [student(name, "fetch_feedback", A) for name in STUDENTS]))
    return dict(root=root, exchange=exchange, homes=homes, logs=logs,
                fetched={s: (tmp / f"fetched-{s}.ipynb").read_text(encoding="utf-8")
                         for s in STUDENTS},
                feedback={s: sorted((homes[s] / A / "feedback").rglob("*.html")) for s in STUDENTS})


def _visible_text(page: str) -> str:
    """What an HTML page says, without its tags (pygments splits code into spans)."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def _secret(root, markers):
    source = json.loads(grading.source_path(A, root).read_text(encoding="utf-8"))
    secret = grading.secret_lines(source, markers)
    assert secret, f"the toy source has no {markers[0]} text: this test would prove nothing"
    return secret


def test_exchange_root_comes_from_course_exchange(course):
    """release_assignment wrote into the COURSE_EXCHANGE folder (nbgrader_config.py)."""
    assert (course["exchange"] / COURSE / "outbound" / A / f"{A}.ipynb").is_file(), \
        course["logs"]["release_assignment toy"]


def test_students_fetch_the_release_without_hidden_tests_or_solutions(course):
    released = grading.release_path(A, course["root"]).read_text(encoding="utf-8")
    for name, text in course["fetched"].items():
        assert json.loads(text)["cells"] == json.loads(released)["cells"], \
            f"{name} fetched something else than notebooks/{A}/{A}.ipynb"
        sources = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"])
        for markers in (grading.HIDDEN, grading.SOLUTION):
            leaked = sorted(ln for ln in _secret(course["root"], markers) if ln in sources)
            assert not leaked and markers[0] not in text, \
                f"{name}'s fetched notebook shows {markers[0]} text: {leaked[:3]}"


def test_collect_puts_each_submission_under_its_student(course):
    for name in STUDENTS:
        assert (course["root"] / "submitted" / name / A / f"{A}.ipynb").is_file(), \
            course["logs"]["collect toy"]


def test_class_runner_scores_the_collected_submissions(course):
    for name, (_, expected) in STUDENTS.items():
        scores = grading.scores(course["root"], A, name)
        got = {k: v[0] for k, v in scores.items() if k in expected}
        assert got == expected, f"{name}: {scores}\n{course['logs']['grade_class']}"


def test_each_student_fetches_only_their_feedback_without_hidden_tests(course):
    hidden = _secret(course["root"], grading.HIDDEN)
    for name in STUDENTS:
        files = course["feedback"][name]
        assert [f.name for f in files] == [f"{A}.html"], \
            f"{name} fetched {files}:\n{course['logs'][f'fetch_feedback {name}']}"
        page = _visible_text(files[0].read_text(encoding="utf-8"))
        leaked = sorted(ln for ln in hidden if ln in page)
        assert not leaked and grading.HIDDEN[0] not in page, \
            f"{name}'s feedback shows hidden tests: {leaked[:3]}"
        # the feedback is this student's: their own answer is in it, the other's is not
        own = STUDENTS[name][0]["cube"].splitlines()[1].strip()
        other = next(e["cube"] for s, (e, _) in STUDENTS.items() if s != name).splitlines()[1].strip()
        assert own in page and other not in page, f"{name} got someone else's feedback"


@pytest.mark.parametrize("value", ["", "/srv/nbgrader/exchange", "relative/exchange"])
def test_course_exchange_is_the_one_exchange_setting(value, monkeypatch):
    """COURSE_EXCHANGE sets c.Exchange.root (a relative path from the course root); unset, the
    course's config sets nothing, so a system-wide nbgrader_config.py (read before it) or
    nbgrader's default decides."""
    from traitlets.config import Config

    monkeypatch.setenv("COURSE_EXCHANGE", value)
    monkeypatch.chdir(grading.REPO)
    config = Config()
    path = grading.REPO / grading.CONFIG_FILE
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"),
         {"get_config": lambda: config, "__file__": str(path)})
    expected = str(grading.REPO / value) if value else None
    assert config.Exchange.get("root") == expected
