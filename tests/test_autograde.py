"""End-to-end grading with nbgrader's own commands, in a throw-away course root per assignment.

For each assignment in solutions/ (``COURSE_ROOT`` may point at another course root), one
module-scoped run: ``generate_assignment`` (fills a fresh SQLite gradebook), submissions under
submitted/<student>/<a>/, ONE ``autograde`` of all students (it creates each student in the
gradebook: ``Autograde.create_student`` is on by default, so no ``db student add`` process per
student), then ``generate_feedback`` and ``export``. The tests read what nbgrader recorded:

- the solution as submitted earns full marks on every autograder-test cell;
- the untouched release earns 0 on every graded cell, and its only errors are
  NotImplementedError (the placeholders), never a crash elsewhere;
- each targeted case of tests/autograde_cases.py loses exactly the cells it expects;
- no feedback page shows hidden-test text (checked against a control page made without
  ClearHiddenTests, which must show it), and the CSV export has every submission.
"""
import csv
import html.parser
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from autograde_cases import CASES as REAL_CASES
from autograder import bench, demo_cells, draw_key, grading, toy_course
from autograder.sandboxed_execute import NOT_GRADED_GPU, gpu_cells
from course.exercises import capstone

# GPU tests (test cells tagged gpu) are graded only where the grading kernel has CUDA; make test-gpu
# runs this file with GRADE_KERNEL=gpu. Elsewhere they must be recorded as not graded.
GPU_GRADING = os.environ.get("GRADE_KERNEL", "").strip().lower() == "gpu"

ASSIGNMENTS = grading.assignments()
# The course's key of hidden draws (autograder/draw_key.py) for the assignments of KEYED, so their
# hidden draws are mixed with a secret as in a course with a key, and the replay cases
# (autograde_cases_replay.py) show what that buys. Every solution passes under it
# (`COURSE_DRAW_KEY=course-tests-key-1 python -m autograder.draw_key check`), but a key also moves
# the draws that some hidden tests were written to catch particular wrong answers on: under this one,
# 10's test_fp16_detect let two wrong detectors (fp16_detect_any_skip, fp16_detect_one_skip_allowed)
# pass. So only the assignments where every case holds under it are graded with it here; the others
# are graded on their test cells' own draws. COURSE_DRAW_KEY set in the environment grades every
# assignment with that key instead: how an instructor checks a key of their own against every case.
TEST_DRAW_KEY = b"course-tests-key-1"
KEYED = ("01_baselines", "03_overfit_controls", "04_late_spike", "12_lr_instability")
CASES = REAL_CASES + [c for c in toy_course.CASES if c.assignment in ASSIGNMENTS]
SOLUTION, RELEASE = "solution", "release_untouched"
# The assignment whose cases are submitted with their demos as written (elsewhere, demos_as_imports):
# there a case's unreadable cell (planted_11_24's) still makes the grading kernel run demo bodies,
# under the sandbox's limits and the guard, end to end. The solution and the untouched release of
# every assignment are submitted as they are.
DEMOS_KEPT = "11_capstone"


@dataclass
class Graded:
    """What one autograde run of an assignment left behind."""
    root: Path
    assignment: str
    source: dict            # the source (solution) notebook, as JSON
    kinds: dict             # grade_id -> "auto" | "manual"
    students: list
    log: str                # autograde + feedback output, for failure messages
    unusable: dict          # id(case) -> why that case could not be submitted
    packed: dict            # id(case) -> (the student it was submitted as, every cell its group loses)
    control_log: str        # generate_feedback of the solution without ClearHiddenTests (feedback_control/)
    export_log: str         # nbgrader export to grades.csv

    def scores(self, student):
        return grading.scores(self.root, self.assignment, student)

    def autograded(self, student):
        path = self.root / "autograded" / student / self.assignment / f"{self.assignment}.ipynb"
        return json.loads(path.read_text(encoding="utf-8"))

    def feedback(self, student, folder="feedback"):
        path = self.root / folder / student / self.assignment / f"{self.assignment}.html"
        return path.read_text(encoding="utf-8")

    def why(self, student, grade_id):
        """What the autograded cell ``grade_id`` showed that costs points: errors and stderr."""
        path = self.root / "autograded" / student / self.assignment / f"{self.assignment}.ipynb"
        if not path.exists():
            return [f"autograde failed for this submission{self.context(student)}"]
        for cell in self.autograded(student)["cells"]:
            if grading.nbgrader_meta(cell).get("grade_id") == grade_id:
                return [f"{o['ename']}: {o['evalue'][:200]}" if o["output_type"] == "error"
                        else f"stderr: {''.join(o['text'])[:200]}" for o in cell.get("outputs", [])
                        if o["output_type"] == "error" or o.get("name") == "stderr"]
        return ["cell missing from the autograded notebook"]

    def auto_ids(self):
        """The autograder-test cells graded on this machine (GPU tests only under GRADE_KERNEL=gpu)."""
        return {gid for gid, kind in self.kinds.items() if kind == "auto"} - self.gpu_ids()

    def gpu_ids(self):
        """The GPU tests that this grader leaves unrun (none under GRADE_KERNEL=gpu)."""
        return set() if GPU_GRADING else gpu_cells(self.source)

    def context(self, student=None):
        """The part of the nbgrader log about ``student`` (default: its end), for failure messages."""
        text = self.log
        if student is not None:
            start = text.find(f"/submitted/{student}/")
            end = text.find("Sanitizing", start + 1)
            text = text[start:end] if start >= 0 else text
        return f"\n--- nbgrader log (last 3000 chars) ---\n{text[-3000:]}"


@dataclass
class Plan:
    """What will be submitted for one assignment: every submission's notebook, by student (a case's
    before ``grade`` cuts its demos, for the students in ``cut_demos``)."""
    assignment: str
    source: dict
    submissions: dict       # student -> notebook JSON (a case's with its demos still whole)
    unusable: dict
    packed: dict
    demos: frozenset = frozenset()  # the source's demo cells (demo_cells.demo_sources)
    cut_demos: frozenset = frozenset()  # students submitted with demos_as_imports (made in grade)


def plan(assignment: str) -> Plan:
    """The solution, the untouched release and the cases of ``assignment``, packed into submissions."""
    source = json.loads(grading.source_path(assignment).read_text(encoding="utf-8"))
    submissions = {SOLUTION: source}
    release = grading.release_path(assignment)
    if release.exists():
        submissions[RELEASE] = json.loads(release.read_text(encoding="utf-8"))
    unusable, usable, names = {}, [], set(submissions)
    for case in CASES:
        if case.assignment == assignment:
            try:
                if case.student in names:
                    raise ValueError(f"student name {case.student!r} is taken")
                names.add(case.student)
                grading.edit_cells(source, case.edits)
                usable.append(case)
            except (KeyError, ValueError) as err:
                unusable[id(case)] = str(err)
    # cases on different answer cells share a submission (grading.pack): one autograde each group
    packed, cut = {}, set()
    demos = demo_cells.demo_sources(nbformat.reads(json.dumps(source), as_version=4))
    for group in grading.pack(usable, source):
        student = group[0].student if len(group) == 1 else "pack_" + "_".join(c.student for c in group)[:80]
        submissions[student] = grading.edit_cells(source, {k: v for c in group for k, v in c.edits.items()})
        if assignment != DEMOS_KEPT:
            cut.add(student)
        for case in group:
            packed[id(case)] = (student, set().union(*(c.expect_lost for c in group)))
    return Plan(assignment, source, submissions, unusable, packed, frozenset(demos), frozenset(cut))


def demos_as_imports(nb: dict, demos: set) -> dict:
    """``nb`` with each demonstration cell (``autograder.demo_cells``) that only a cell the analysis
    cannot read would make grading run cut to its import statements: what grading runs of a demo
    it leaves unrun.

    A case's submission is the solution with a few answer cells edited (edits go by grade_id; a
    demo has none). A case whose code the analysis cannot read (``globals()``, ``get_ipython()``:
    the integrity cases' planted code) makes grading run every demo before that cell, as it must
    for a learner; their training runs then cost 10-25 s a submission (35 of 168 submissions,
    2026-12-07). Here the demos are judged as if those cells read nothing, so a demo whose name a
    readable cell of the case reads (``one_step_report``, which 00's and 01's ``detect_delegates``
    call) is kept and runs in grading as it would; the others are cut. For a submission where every
    cell can be read, this cuts exactly what grading would skip anyway."""
    cells = nbformat.reads(json.dumps(nb), as_version=4).cells
    readable = [c if c.cell_type != "code" or demo_cells.reads(c.source) is not None
                else nbformat.v4.new_code_cell("") for c in cells]
    out = json.loads(json.dumps(nb))
    for i in demo_cells.skippable(readable, demos):
        out["cells"][i]["source"] = demo_cells.imports(cells[i].source)
        out["cells"][i]["outputs"], out["cells"][i]["execution_count"] = [], None
    return out


def grade(tmp: Path, planned: Plan) -> Graded:
    """Run the whole nbgrader pipeline for ``planned`` in course root ``tmp``."""
    assignment = planned.assignment
    root = grading.make_course_copy(tmp, [assignment])
    if assignment in KEYED:
        draw_key.write_key(root, TEST_DRAW_KEY)
    grading.nbgrader(root, "generate_assignment", assignment, "--force")
    for student, nb in planned.submissions.items():
        # cut here, in the pipeline's thread: the demo analysis of every case took about 14 s of
        # the fixture's start, with one core idle (fresh-clone run of 847b048)
        if student in planned.cut_demos:
            nb = demos_as_imports(nb, planned.demos)
        folder = root / "submitted" / student / assignment
        folder.mkdir(parents=True)
        (folder / f"{assignment}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    log = grading.nbgrader(root, "autograde", assignment, "--force", check=False).stdout
    log += grading.nbgrader(root, "generate_feedback", assignment, "--force", check=False).stdout
    # What the feedback and export tests read is made here too, in the pipeline's own thread. Run
    # by those tests, one after another once every pipeline had ended, these two steps kept the
    # phase going on one core for about 110 s after the last pipeline (fresh-clone run of 11c5380:
    # pipelines done at 1141 s, phase at 1252 s).
    # The control page: the solution's feedback without ClearHiddenTests, which must show them.
    control = grading.nbgrader(root, "generate_feedback", assignment, "--force", f"--student={SOLUTION}",
                               "--CourseDirectory.feedback_directory=feedback_control",
                               "--GenerateFeedback.preprocessors=nbgrader.preprocessors.GetGrades",
                               "--GenerateFeedback.preprocessors=nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
                               check=False)
    export = grading.nbgrader(root, "export", f"--to={root / 'grades.csv'}", check=False)
    return Graded(root, assignment, planned.source, grading.graded_cells(planned.source),
                  list(planned.submissions), log, planned.unusable, planned.packed,
                  control.stdout, export.stdout)


def _selected_assignments(request) -> list:
    """The assignments that the selected tests of this module grade (all, unless -k narrowed them)."""
    wanted = set()
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.module is request.module:
            wanted.add(params.get("assignment") or getattr(params.get("case"), "assignment", None))
    return [a for a in ASSIGNMENTS if a in wanted]


@pytest.fixture(scope="module")
def graded(request, tmp_path_factory):
    """graded(assignment) -> Graded. Every selected assignment is graded at once, one nbgrader
    pipeline per core (each is a chain of subprocesses, so threads suffice), the longest expected
    first (``bench.longest_first``: its submissions times the committed bench record's seconds per
    submission), so the pipelines end close together; later calls reuse it. At the end, a table of
    when each pipeline ran, on which worker, prints below the tests."""
    plans = {a: plan(a) for a in _selected_assignments(request)}
    order = bench.longest_first({a: len(p.submissions) for a, p in plans.items()}, bench.load_record())
    timings = {}   # assignment -> (worker, start, end), seconds from the fixture's start
    start = time.perf_counter()

    def timed(tmp, planned):
        began = time.perf_counter() - start
        try:
            return grade(tmp, planned)
        finally:
            timings[planned.assignment] = (threading.current_thread().name, began, time.perf_counter() - start)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        runs = {a: pool.submit(timed, tmp_path_factory.mktemp(f"course-{a}"), plans[a]) for a in order}

        def get(assignment):
            if assignment not in runs:
                runs[assignment] = pool.submit(timed, tmp_path_factory.mktemp(f"course-{assignment}"),
                                               plan(assignment))
            return runs[assignment].result()
        yield get
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None and timings:
        with capture.global_and_fixture_disabled():  # what capsys.disabled() does: past the capture
            costs = {a: run_costs(run.result()) for a, run in runs.items()
                     if a in timings and run.done() and run.exception() is None}
            for line in timing_table(timings, {a: len(p.submissions) for a, p in plans.items()}, costs):
                reporter.write_line(line)


def run_costs(graded: "Graded") -> dict:
    """Where the pipeline's submissions spent their runs (``bench.where_the_time_went`` summed over
    every autograded notebook): seconds inside cells, seconds between them, and the dearest cell."""
    cells = between = span = 0.0
    by_cell = {}
    for student in graded.students:
        path = graded.root / "autograded" / student / graded.assignment / f"{graded.assignment}.ipynb"
        if not path.exists():
            continue
        got = bench.where_the_time_went(json.loads(path.read_text(encoding="utf-8")))
        cells, between, span = cells + got["cells"], between + got["between"], span + got["span"]
        for name, seconds in got["by_cell"].items():
            by_cell[name] = by_cell.get(name, 0.0) + seconds
    dearest = max(by_cell, key=by_cell.get) if by_cell else "-"
    return {"cells": cells, "between": between, "span": span, "dearest": (dearest, by_cell.get(dearest, 0.0))}


def timing_table(timings: dict, submissions: dict, costs: dict | None = None) -> list:
    """Lines of a table: per assignment (in the order they started), its worker, start, end and
    seconds per submission, and (from ``costs``: assignment -> ``run_costs``) how a submission's
    seconds split: inside the notebook's code cells, between them (the guard's control cells around
    each test, the grader's round trips), and outside its run (kernel start and stop, nbgrader's own
    steps, the assignment's generate, feedback and export); then the cell that cost most per
    submission, and each worker's idle time before the last pipeline ended."""
    costs = costs or {}
    end = max(t[2] for t in timings.values())
    lines = ["", "end-to-end autograde: one nbgrader pipeline per assignment, seconds from the first start",
             f"{'assignment':<24}{'worker':>24}{'start':>8}{'end':>8}{'subs':>6}{'s/sub':>7}"
             f"{'cells':>7}{'between':>8}{'outside':>8}  dearest cell (s/sub)"]
    for a, (worker, began, ended) in sorted(timings.items(), key=lambda kv: kv[1][1]):
        n = submissions.get(a, 0)
        per = (lambda x: x / n) if n else (lambda x: float("nan"))
        c = costs.get(a)
        split = (f"{per(c['cells']):>7.1f}{per(c['between']):>8.1f}{per(ended - began - c['span']):>8.1f}"
                 f"  {c['dearest'][0]} ({per(c['dearest'][1]):.1f})") if c else ""
        lines.append(f"{a:<24}{worker:>24}{began:>8.0f}{ended:>8.0f}{n:>6}{per(ended - began):>7.1f}{split}")
    for worker in sorted({t[0] for t in timings.values()}):
        last = max(t[2] for t in timings.values() if t[0] == worker)
        lines.append(f"{worker}: idle for the last {end - last:.0f} s of {end:.0f} s")
    return lines


def _text(page: str) -> str:
    """The visible text of an HTML page (tags, styles and scripts dropped, entities decoded)."""
    class Text(html.parser.HTMLParser):
        def __init__(self):
            super().__init__()
            self.parts, self.skip = [], 0

        def handle_starttag(self, tag, attrs):
            self.skip += tag in ("style", "script")

        def handle_endtag(self, tag):
            self.skip -= tag in ("style", "script")

        def handle_data(self, data):
            if not self.skip:
                self.parts.append(data)
    parser = Text()
    parser.feed(page)
    return "".join(parser.parts)


def _lines(page: str) -> set:
    """The stripped lines of an HTML page's visible text."""
    return {ln.strip() for ln in _text(page).splitlines()}


def _own_lines(nb: dict) -> set:
    """The stripped source lines of notebook ``nb``'s cells other than autograder tests: what the
    student wrote or was given, never a hidden test."""
    return {ln.strip() for c in nb["cells"] if not (grading.nbgrader_meta(c).get("grade")
                                                    and not grading.nbgrader_meta(c).get("solution"))
            for ln in "".join(c["source"]).splitlines()}


def test_nbgrader_config_values():
    """The settings nbgrader must run with, read back through nbgrader's own classes."""
    from traitlets.config.loader import PyFileConfigLoader
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.preprocessors import Execute, OverwriteCells

    config = PyFileConfigLoader(grading.CONFIG_FILE, path=str(grading.REPO)).load_config()
    course = CourseDirectory(config=config)
    assert (course.course_id, course.source_directory, course.release_directory) == \
        ("debug-course", "solutions", "notebooks")
    assert Path(course.root) == grading.REPO
    assert "*.py" in course.ignore
    execute = Execute(config=config)
    assert execute.kernel_name == grading.KERNEL_NAME
    assert execute.timeout == 120
    assert OverwriteCells(config=config).add_missing_cells is True
    assert "nbgrader.preprocessors.ClearHiddenTests" in config.GenerateFeedback.preprocessors


def test_course_kernel_runs_this_venv():
    """The course kernel (registered by `make venv`) runs this environment's Python, so notebooks,
    nbval and nbgrader see the packages the tests see."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec(grading.KERNEL_NAME)
    assert Path(spec.argv[0]).parent.resolve() == Path(sys.executable).parent.resolve(), spec.argv


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solution_earns_full_marks(graded, assignment):
    run = graded(assignment)
    scores = run.scores(SOLUTION)
    auto = run.auto_ids()
    assert auto <= set(scores), f"no score for {sorted(auto - set(scores))}{run.context(SOLUTION)}"
    short = {gid: (scores[gid], run.why(SOLUTION, gid)) for gid in sorted(auto)
             if scores[gid][0] != scores[gid][1] or scores[gid][2]}
    assert not short, f"solution lost points ((score, max, needs manual grade), outputs): " \
                      f"{short}\n(a test cell scores 0 on any error or stderr output)"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solution_demonstrations_are_not_run_while_grading(graded, assignment):
    """Every cell tagged demo in the source is left unrun when the solution is graded (its output
    is the autograder's one-line note), and every other code cell ran: the grading time the tags
    promise is really saved, and nothing else is skipped."""
    run = graded(assignment)
    demos = demo_cells.demo_sources(nbformat.reads(json.dumps(run.source), as_version=4))
    if not demos:
        pytest.skip(f"{assignment} tags no cell demo")
    graded_nb = nbformat.reads(json.dumps(run.autograded(SOLUTION)), as_version=4)
    code = [(i, c) for i, c in enumerate(graded_nb.cells) if c.cell_type == "code"]
    noted = {i for i, c in code if [(o.output_type, o.get("name"), o.get("text")) for o in c.outputs]
             == [("stream", "stdout", demo_cells.NOTE)]}
    ran = [i for i, c in code if c.source in demos and i not in noted]
    assert not ran, f"demo cells that ran while grading (cell indices): {ran}{run.context(SOLUTION)}"
    skipped = [i for i, c in code if c.source not in demos and i in noted]
    assert not skipped, f"untagged cells that were not run: {skipped}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_untouched_release_earns_zero_and_fails_only_on_placeholders(graded, assignment):
    run = graded(assignment)
    assert RELEASE in run.students, f"notebooks/{assignment}/{assignment}.ipynb missing: make release"
    scores = run.scores(RELEASE)
    assert set(run.kinds) <= set(scores), f"no score for {sorted(set(run.kinds) - set(scores))}"
    earned = {gid: s for gid, s in scores.items() if s[0] != 0}
    assert not earned, f"the untouched release earned points: {earned}{run.context(RELEASE)}"
    errors = [(i, grading.nbgrader_meta(cell).get("grade_id"), out["ename"], out["evalue"])
              for i, cell in enumerate(run.autograded(RELEASE)["cells"])
              for out in cell.get("outputs", []) if out["output_type"] == "error"]
    other = [e for e in errors if e[2] != "NotImplementedError"]
    assert not other, f"errors other than NotImplementedError (cell, grade_id, ename, evalue): {other}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_gpu_tests_are_recorded_as_not_graded_without_cuda(graded, assignment):
    """Without CUDA in the grading kernel a GPU test is not run: no automatic score, a manual grade
    needed, and the one line in its output, for every submission (never passed, never a silent 0)."""
    run = graded(assignment)
    if not run.gpu_ids():
        pytest.skip("no GPU tests, or graded on a GPU kernel (GRADE_KERNEL=gpu)")
    for student in run.students:
        scores = run.scores(student)
        for gid in sorted(run.gpu_ids()):
            assert scores[gid][0] == 0 and scores[gid][2], f"{student} {gid}: {scores[gid]} (expected no " \
                                                           f"score and needs manual grade){run.context(student)}"
            cell = next(c for c in run.autograded(student)["cells"] if grading.nbgrader_meta(c).get("grade_id") == gid)
            text = "".join("".join(o["text"]) if isinstance(o.get("text"), list) else o.get("text", "")
                           for o in cell.get("outputs", []))
            assert text.strip() == NOT_GRADED_GPU, f"{student} {gid}: output {text!r}"


@pytest.mark.parametrize("case", CASES, ids=[f"{c.assignment}-{c.student}" for c in CASES])
def test_case_loses_exactly_the_expected_cells(graded, case):
    if case.assignment not in ASSIGNMENTS:
        pytest.skip(f"assignment {case.assignment} is not in solutions/ yet")
    run = graded(case.assignment)
    assert id(case) not in run.unusable, f"case not submitted: {run.unusable.get(id(case))}"
    auto = run.auto_ids()
    assert case.expect_lost <= auto, f"expect_lost names no autograder-test cell: " \
                                     f"{sorted(case.expect_lost - auto)}"
    # A packed case shares its submission with cases on other answers: its own lost cells must score
    # 0, and every cell that no case of the group expects lost must score full.
    student, group_lost = run.packed[id(case)]
    others = group_lost - case.expect_lost
    scores = run.scores(student)
    assert auto <= set(scores), f"no score for {sorted(auto - set(scores))}" \
                                f"{run.context(student)}"
    wrong = {gid: f"scored {scores[gid][0]:g}/{scores[gid][1]:g}, expected "
                  f"{0 if gid in case.expect_lost else scores[gid][1]:g}; "
                  f"outputs {run.why(student, gid)}"
             for gid in sorted(auto - others) if (scores[gid][0] == 0) != (gid in case.expect_lost)
             or 0 < scores[gid][0] < scores[gid][1]}
    assert not wrong, f"test cells not scored as the case expects (submitted as {student}): {wrong}" \
                      f"{run.context(student)}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_feedback_shows_no_hidden_tests(graded, assignment):
    run = graded(assignment)
    secret = grading.secret_lines(run.source, grading.HIDDEN)
    if not secret:
        pytest.skip(f"{assignment} has no hidden tests")
    for student in run.students:
        # a line the student wrote in their own cells (``out = []``) is theirs to see, not a leak
        leaked = sorted((secret - _own_lines(run.autograded(student))) & _lines(run.feedback(student)))
        assert not leaked, f"feedback of {student} shows hidden-test lines: {leaked[:5]}"
    # control: the same feedback without ClearHiddenTests (made by ``grade``) does show them, so
    # the check can see
    control = run.root / "feedback_control" / SOLUTION / assignment / f"{assignment}.html"
    assert control.exists(), f"the control feedback page was not made:\n{run.control_log[-3000:]}"
    missing = secret - _lines(run.feedback(SOLUTION, "feedback_control"))
    assert not missing, f"control feedback lacks hidden-test lines: {sorted(missing)[:5]}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_export_has_every_submission(graded, assignment):
    run = graded(assignment)
    assert (run.root / "grades.csv").exists(), f"nbgrader export (run by ``grade``) wrote no CSV:\n" \
                                               f"{run.export_log[-3000:]}"
    with open(run.root / "grades.csv", newline="") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f) if r["assignment"] == assignment}
    assert set(run.students) <= set(rows), f"missing rows: {sorted(set(run.students) - set(rows))}"
    full = sum(max_score for gid, (_, max_score, _) in run.scores(SOLUTION).items()
               if run.kinds.get(gid) == "auto" and gid not in run.gpu_ids())
    assert float(rows[SOLUTION]["score"]) == pytest.approx(full)
    if RELEASE in rows:
        assert float(rows[RELEASE]["score"]) == 0


@pytest.mark.parametrize("assignment", [a for a in ASSIGNMENTS if a == capstone.ASSIGNMENT])
def test_capstone_draws_show_in_the_summary_and_in_no_feedback(graded, assignment):
    """make summary puts each student's draw (computed from the id graded) on that student's row;
    the feedback a student gets never names the bug drawn."""
    run = graded(assignment)
    env = {k: v for k, v in os.environ.items() if k != "COURSE_DB_URL"}
    proc = subprocess.run([sys.executable, "-m", "autograder.summary", assignment, "--root", str(run.root)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {line.split()[0]: line for line in proc.stdout.splitlines() if line.split()}
    bugs = set()
    for student in run.students:
        family, bug = capstone.summary_row(student)
        bugs.add(bug)
        assert f"{family}: {bug}" in rows.get(student, ""), \
            f"the summary row of {student} lacks its draw {family}: {bug}\n{proc.stdout}"
    assert "-- mean score by the family drawn" in proc.stdout, proc.stdout
    for student in run.students:
        shown = _text(run.feedback(student))
        assert not [b for b in bugs if b in shown], f"the feedback of {student} names a drawn bug"
