"""Print a class summary of an assignment from the gradebook (``make summary``).

    python -m autograder.summary [ASSIGNMENT...] [--root DIR]

For each assignment (default: every one in the gradebook that has submissions) it prints, from
the gradebook of ``autograder.database.db_url`` (``COURSE_DB_URL``):

- a table, one row per submission: the score of every graded cell (``?`` where the cell needs a
  manual grade and has none), the total, the points it is out of (a GPU test left unrun is not
  among them: ``autograder.gpu_points``), and the runner's state;
- "not graded": submissions rejected or failed by ``autograder.grade_class`` with its reason
  (from ``autograded/_reports/<a>.json``), those whose grading was interrupted, those whose
  gradebook rows are incomplete (an autograded cell without a score), folders in ``submitted/``
  with no gradebook row, and folders that changed since they were graded;
- "lost points": per submission and cell, why (errors and stderr seen in the autograded notebook);
- "not graded: needs a GPU kernel": GPU tests (tagged ``gpu``) that a grader without CUDA left
  unrun; shown as ``n/g`` in the table, counted in no total, listed nowhere else;
- "needs manual grade": the cells a person still has to grade;
- the due date (from the gradebook, where ``nbgrader db assignment add --duedate`` keeps it) and
  "late": each submission after it, by how long, and the penalty nbgrader's late-submission
  plugin gave it (``autograder.late_policy``); the table's ``penalty`` column holds that penalty
  and ``total`` is the score after it (as the feedback and the export give it);
- "graded on": the kind of machine (``autograder.machine.fingerprint``) that graded each graded
  submission, with the count per kind; the students (and their Dask worker) are listed when more
  than one kind graded or a Dask worker did, since their saved numbers may differ by kind;
- for the capstone (``course.exercises.capstone.ASSIGNMENT``), each student's draw (family and bug, computed
  from the student id as the grader computes it) beside the score, and the mean score per family,
  so an instructor sees which families the class finds hard. Only this instructor report shows
  draws: they are in no feedback file.

Scores always come from the gradebook; the report only adds reasons. Exit status 0 (1 when an
assignment named is not in the gradebook).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from autograder import class_runner, database, gpu_points, grading


def gradebook_rows(url: str, assignment: str) -> tuple[list[str], dict[str, dict]]:
    """(grade ids in notebook order, student -> grade_id -> (score, max_score, needs_manual,
    auto_score, manual_score)) for every submission of ``assignment`` in the gradebook."""
    from nbgrader.api import Gradebook

    course = class_runner.course_id(url, assignment)
    with Gradebook(url, course) as gb:
        a = gb.find_assignment(assignment)
        ids = [gc.name for nb in a.notebooks for gc in nb.grade_cells]
        rows = {}
        for sub in a.submissions:
            rows[sub.student.id] = {g.name: (float(g.score), float(g.max_score),
                                             bool(g.needs_manual_grade), g.auto_score, g.manual_score)
                                    for nb in sub.notebooks for g in nb.grades}
    return ids, rows


def lateness(url: str, assignment: str) -> tuple[str | None, dict[str, tuple[float, float]]]:
    """(the assignment's due date as nbgrader keeps it, or None; student -> (seconds late, late
    penalty)) for every submission after the due date, from the gradebook."""
    from nbgrader.api import Gradebook

    course = class_runner.course_id(url, assignment)
    with Gradebook(url, course) as gb:
        a = gb.find_assignment(assignment)
        late = {sub.student.id: (float(sub.total_seconds_late), float(sub.late_submission_penalty or 0))
                for sub in a.submissions if sub.total_seconds_late > 0}
        return (f"{a.duedate:%Y-%m-%d %H:%M:%S} UTC" if a.duedate else None), late


def _duration(seconds: float) -> str:
    """3d 4h, 2h 5m, 7m 3s, 12s."""
    d, rest = divmod(int(round(seconds)), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    parts = [f"{d}d", f"{h}h", f"{m}m", f"{s}s"]
    first = next((i for i, v in enumerate((d, h, m, s)) if v), 3)
    return " ".join(parts[first:first + 2])


def load_report(root: Path, assignment: str) -> dict:
    path = Path(root) / class_runner.REPORTS / f"{assignment}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("students", {})
    except (OSError, ValueError):
        return {}


def summarize(root: Path, assignment: str, url: str) -> str:
    """The summary text of one assignment."""
    root = Path(root).resolve()
    ids, rows = gradebook_rows(url, assignment)
    report = load_report(root, assignment)
    submitted = class_runner.students(root, assignment)
    out = [f"== {assignment}  ({len(rows)} submissions in the gradebook "
           f"{database.describe(url)})"]
    maximum = {}
    for grades in rows.values():
        for gid, (_, mx, *_) in grades.items():
            maximum[gid] = mx
    draw = capstone_draws(assignment)
    duedate, late = lateness(url, assignment)
    out.append(f"due {duedate}; {late_policy_text(root)}" if duedate else
               "no due date (nbgrader db assignment add ... --duedate=..., make duedate)")
    headers = ["student"] + ids + ["penalty", "total", "of", "state"] + (["draw"] if draw else [])
    table = [headers, [""] + [f"/{maximum.get(g, 0):g}" for g in ids] + ["", f"/{sum(maximum.values()):g}", "", ""]
             + ([""] if draw else [])]
    by_family: dict[str, list[float]] = {}
    not_graded, lost, manual, gpu = [], [], [], []
    machines: dict[str, list[str]] = {}
    for student in sorted(set(rows) | set(submitted)):
        entry = report.get(student, {})
        grades = rows.get(student)
        family, drawn = draw(student) if draw else (None, None)
        if grades is None:
            table.append([student] + ["-"] * len(ids) + ["-", "-", "-", "no row"] + ([drawn] if draw else []))
            not_graded.append(f"{student}: submitted but not in the gradebook (run make autograde)")
            continue
        marked = gpu_tests(root, assignment) | {gid for gid, c in entry.get("cells", {}).items()
                                                if c.get("not_graded")}
        unrun = gpu_points.unrun({gid: grades[gid] for gid in ids if gid in grades}, marked)
        cells = []
        for gid in ids:
            if gid not in grades:
                cells.append("-")
                continue
            score, _, man, auto, by_hand = grades[gid]
            cells.append("n/g" if gid in unrun else
                         "?" if man and auto is None and by_hand is None else f"{score:g}")
        if unrun:
            gpu.append(f"{student}: {', '.join(unrun)}")
        state = entry.get("state", "no report")
        penalty = late.get(student, (0.0, 0.0))[1]
        total = sum(g[0] for g in grades.values()) - penalty
        out_of = sum(g[1] for gid, g in grades.items() if gid not in unrun)  # a GPU test left unrun: apart
        table.append([student] + cells + [f"-{penalty:g}" if penalty else "0", f"{total:g}", f"{out_of:g}", state]
                     + ([drawn] if draw else []))
        if draw:
            by_family.setdefault(family, []).append(total)
        if state in (class_runner.FAILED, class_runner.REJECTED, class_runner.INTERRUPTED):
            not_graded.append(f"{student}: {entry.get('reason', '')}")
        elif state == class_runner.GRADING:
            not_graded.append(f"{student}: grading was interrupted (the runner stopped); the "
                              f"gradebook may hold an older or incomplete grade: re-run make autograde")
        incomplete = [gid for gid, (_, _, man, auto, _) in grades.items() if gid not in unrun
                      and auto is None and man and grading_kind(root, assignment).get(gid) == "auto"]
        if incomplete:
            not_graded.append(f"{student}: autograded cells without a score ({', '.join(incomplete)}): "
                              f"grading did not finish; re-run make autograde")
        if entry.get("sha256") and student in submitted:
            now = class_runner.folder_hash(root / "submitted" / student / assignment)
            if now != entry["sha256"]:
                not_graded.append(f"{student}: resubmitted after it was graded: the score is for the "
                                  f"previous submission; re-run make autograde")
        if state == class_runner.GRADED:
            machines.setdefault(entry.get("machine") or "not recorded", []).append(
                student + (f" ({entry['worker']})" if entry.get("worker") else ""))
            for gid, cell in entry.get("cells", {}).items():
                if not cell.get("manual") and cell.get("score", 0) < cell.get("max_score", 0):
                    why = "; ".join(cell.get("why") or []) or "no error shown (partial credit?)"
                    lost.append(f"{student} {gid} {cell['score']:g}/{cell['max_score']:g}: {why}")
            for note in entry.get("notes", []):
                lost.append(f"{student} (note) {note}")
        todo = [gid for gid, (_, _, man, *_) in grades.items() if man and gid not in unrun]
        if todo:
            manual.append(f"{student}: {', '.join(todo)}")
    widths = [max(len(str(row[i])) for row in table) for i in range(len(headers))]
    out += ["  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip() for row in table]
    late_lines = [f"{s}: submitted {_duration(secs)} after the due date, penalty {pen:g}"
                  for s, (secs, pen) in sorted(late.items())]
    for title, items in (("not graded", not_graded), ("lost points", lost), ("late", late_lines),
                         (class_runner.NOT_GRADED_GPU, gpu), ("needs manual grade", manual)):
        out.append(f"-- {title} ({len(items)})")
        out += [f"  {item}" for item in items] or ["  none"]
    out.append(f"-- graded on ({len(machines)} kind(s) of machine)")
    for kind, who in sorted(machines.items()):
        out.append(f"  {kind}: {len(who)} submission(s)"
                   + (f": {', '.join(who)}" if len(machines) > 1 or any("(" in w for w in who) else ""))
    if not machines:
        out.append("  none")
    if draw:
        out.append(f"-- mean score by the family drawn ({len(by_family)} families)")
        out += [f"  {family}: {sum(v) / len(v):.2f} over {len(v)} student(s)"
                for family, v in sorted(by_family.items())] or ["  none"]
    return "\n".join(out)


def late_policy_text(root: Path) -> str:
    """The late policy the course root's nbgrader_config.py sets, in one sentence."""
    from traitlets.config import Config

    from autograder import late_policy

    config = Config()
    path = Path(root) / grading.CONFIG_FILE
    if not path.exists():
        path = grading.REPO / grading.CONFIG_FILE
    try:
        exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"),
             {"get_config": lambda: config, "__file__": str(path)})
    except Exception as err:  # noqa: BLE001 (a summary must still print)
        return f"late policy unknown ({err})"
    plugin = str(config.AssignLatePenalties.get("plugin_class", "nbgrader's LateSubmissionPlugin"))
    method = config.LatePenalty.get("penalty_method", config.LateSubmissionPlugin.get("penalty_method", "none"))
    if plugin.endswith("late_policy.LatePenalty") and method == "per_day":
        return late_policy.LatePenalty.describe(float(config.LatePenalty.get("per_day", 0.1)))
    return f"late policy: {plugin}, penalty_method {method}"


def capstone_draws(assignment: str):
    """For the capstone: student id -> (family, "family: bug"); None for every other assignment."""
    try:
        from course.exercises import capstone
    except ImportError:
        return None
    if assignment != getattr(capstone, "ASSIGNMENT", None):
        return None

    def draw(student: str) -> tuple[str, str]:
        family, bug = capstone.summary_row(student)
        return family, f"{family}: {bug}"
    return draw


_KINDS: dict = {}
gpu_tests = gpu_points.gpu_tests  # the grade ids of the GPU tests (autograder.gpu_points)


def grading_kind(root: Path, assignment: str) -> dict:
    """grade_id -> "auto" | "manual" from the source notebook (cached)."""
    key = (str(root), assignment)
    if key not in _KINDS:
        try:
            nb = json.loads(grading.source_path(assignment, root).read_text(encoding="utf-8"))
            _KINDS[key] = grading.graded_cells(nb)
        except (OSError, ValueError):
            _KINDS[key] = {}
    return _KINDS[key]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*")
    parser.add_argument("--root", type=Path, default=None,
                        help="course root (default: $COURSE_ROOT or this repository)")
    args = parser.parse_args(argv)
    root = (args.root or grading.course_root()).resolve()
    url = database.db_url(root)
    names = args.assignments or [a for a in grading.assignments(root)
                                 if class_runner.course_id(url, a) is not None
                                 and (class_runner.students(root, a) or gradebook_rows(url, a)[1])]
    if not names:
        print(f"nothing graded in {database.describe(url)}")
        return 0
    status = 0
    for a in names:
        if class_runner.course_id(url, a) is None:
            print(f"== {a}: not in the gradebook {database.describe(url)}")
            status = 1
            continue
        print(summarize(root, a, url), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
