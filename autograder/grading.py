"""Helpers shared by the Makefile scripts and the tests: find assignments, run nbgrader, read scores.

Contracts:
- The repository root is the nbgrader course root; ``solutions/<a>/<a>.ipynb`` is the source of
  assignment ``<a>`` and ``notebooks/<a>/<a>.ipynb`` its committed release.
- ``COURSE_ROOT`` (environment) points the content functions at another course root with the same
  layout (used to try this machinery on a toy course); the nbgrader configuration always comes
  from this repository's ``nbgrader_config.py``.
- Nothing here decides a score: ``nbgrader autograde`` does, and ``scores`` reads its gradebook.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KERNEL_NAME = "debug-course"
CONFIG_FILE = "nbgrader_config.py"
HIDDEN = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
SOLUTION = ("### BEGIN SOLUTION", "### END SOLUTION")


@dataclass
class Case:
    """One targeted submission for tests/test_autograde.py.

    A copy of the SOLUTION notebook of ``assignment``, with the source of each cell whose
    ``metadata.nbgrader.grade_id`` is a key of ``edits`` replaced by the value (``None`` deletes
    the cell), is submitted as ``student`` and autograded. Expected: the autograder-test cells
    named in ``expect_lost`` score 0 and every other autograder-test cell full marks."""
    assignment: str
    student: str
    edits: dict[str, str | None]
    expect_lost: set[str] = field(default_factory=set)
    alone: bool = False  # never graded in one submission with other cases (see ``pack``)


def pack(cases: list[Case], source: dict, most: int = 8) -> list[list[Case]]:
    """Group the cases of one assignment into submissions: each autograde runs the whole notebook,
    so cases that edit different answer cells and expect different test cells lost share one
    submission (up to ``most`` a group). A case stays alone when it says so, deletes a cell, or
    edits anything but answer (solution) cells: those exercise nbgrader's own restore rules.
    Order is kept, so the grouping is deterministic."""
    answer_cells = {nbgrader_meta(c).get("grade_id") for c in source["cells"]
                    if nbgrader_meta(c).get("solution") and not nbgrader_meta(c).get("grade")}
    groups: list[list[Case]] = []
    shared: list[bool] = []  # may the group take more cases?
    for case in cases:
        packable = (not case.alone and set(case.edits) <= answer_cells
                    and all(v is not None for v in case.edits.values()))
        for i, group in enumerate(groups):
            if (packable and shared[i] and len(group) < most
                    and all(not (set(c.edits) & set(case.edits)) and not (c.expect_lost & case.expect_lost)
                            for c in group)):
                group.append(case)
                break
        else:
            groups.append([case])
            shared.append(packable)
    return groups


def course_root() -> Path:
    """The course root whose solutions/ and notebooks/ are used: $COURSE_ROOT or this repository."""
    return Path(os.environ.get("COURSE_ROOT") or REPO).resolve()


def assignments(root: Path | None = None) -> list[str]:
    """Sorted names ``a`` such that ``<root>/solutions/<a>/<a>.ipynb`` exists."""
    root = Path(root or course_root())
    return sorted(p.parent.name for p in root.glob("solutions/*/*.ipynb")
                  if p.stem == p.parent.name)


def source_path(assignment: str, root: Path | None = None) -> Path:
    """The nbgrader source (solution) notebook of ``assignment``."""
    return Path(root or course_root()) / "solutions" / assignment / f"{assignment}.ipynb"


def release_path(assignment: str, root: Path | None = None) -> Path:
    """The committed release (student) notebook of ``assignment``."""
    return Path(root or course_root()) / "notebooks" / assignment / f"{assignment}.ipynb"


def make_course_copy(dst: Path, assignment_names: list[str] | None = None) -> Path:
    """Lay out a throw-away course root at ``dst`` (created): this repository's nbgrader config and
    ``solutions/<a>/`` of each named assignment (default: all). Returns ``dst``."""
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / CONFIG_FILE, dst / CONFIG_FILE)
    for a in assignment_names if assignment_names is not None else assignments():
        shutil.copytree(source_path(a).parent, dst / "solutions" / a,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    return dst


def db_url(root: Path) -> str:
    """The SQLite gradebook inside course root ``root``. Deliberately not ``COURSE_DB_URL``: the
    throw-away course roots of the tests never touch an instructor's database."""
    from .database import sqlite_url
    return sqlite_url(root)


def nbgrader(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``python -m nbgrader ARGS`` (this interpreter, so the venv's nbgrader) in course root
    ``root``, pinned to that root and its own gradebook whatever the config says. Output is
    captured (stdout and stderr merged, in ``.stdout``). With ``check``, a non-zero exit raises
    RuntimeError carrying the log. This interpreter's bin folder goes first on PATH: nbgrader
    runs the ``alembic`` executable by name when it creates a gradebook (nbgrader/api.py)."""
    root = Path(root).resolve()
    cmd = [sys.executable, "-m", "nbgrader", *args,
           f"--CourseDirectory.root={root}", f"--CourseDirectory.db_url={db_url(root)}"]
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent),
                                                 os.environ.get("PATH", "")]))
    proc = subprocess.run(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, stdin=subprocess.DEVNULL, env=env)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}")
    return proc


def regions(source: str, markers: tuple[str, str]) -> list[str]:
    """The text strictly between each ``markers[0]`` line and the next ``markers[1]`` line."""
    found, current = [], None
    for line in source.splitlines():
        if markers[0] in line:
            current = []
        elif markers[1] in line and current is not None:
            found.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return found


def secret_lines(nb: dict, markers: tuple[str, str]) -> set[str]:
    """Stripped, non-blank lines inside ``markers`` regions of notebook ``nb`` (a JSON dict) that
    appear nowhere else in the notebook's sources: text whose presence elsewhere is a leak."""
    inside, outside = set(), set()
    for cell in nb["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        secret = {ln.strip() for r in regions(source, markers) for ln in r.splitlines()}
        inside |= secret
        in_region = False
        for line in source.splitlines():
            if markers[0] in line:
                in_region = True
            elif markers[1] in line:
                in_region = False
            elif not in_region:
                outside.add(line.strip())
    return {ln for ln in inside - outside if ln}


def nbgrader_meta(cell: dict) -> dict:
    """The cell's ``metadata.nbgrader`` dict ({} when absent)."""
    return cell.get("metadata", {}).get("nbgrader", {})


def edit_cells(nb: dict, edits: dict) -> dict:
    """A copy of notebook ``nb`` with cell sources replaced (or cells deleted, for None) by grade_id.
    Raises KeyError naming any grade_id of ``edits`` that the notebook lacks."""
    nb = json.loads(json.dumps(nb))
    missing = set(edits) - {nbgrader_meta(c).get("grade_id") for c in nb["cells"]}
    if missing:
        raise KeyError(f"no cell with grade_id {sorted(missing)}")
    cells = []
    for cell in nb["cells"]:
        gid = nbgrader_meta(cell).get("grade_id")
        if gid in edits:
            if edits[gid] is None:
                continue
            cell["source"] = edits[gid]
        cells.append(cell)
    nb["cells"] = cells
    return nb


def graded_cells(nb: dict) -> dict[str, str]:
    """grade_id -> "auto" or "manual" for every cell nbgrader scores in source notebook ``nb``.
    "auto": a code cell with grade and no solution (autograder tests; full marks unless it
    errors or writes to stderr). "manual": any other grade or task cell (a human scores it)."""
    kinds = {}
    for cell in nb["cells"]:
        meta = nbgrader_meta(cell)
        if meta.get("grade") or meta.get("task"):
            auto = (cell["cell_type"] == "code" and meta.get("grade") and not meta.get("solution")
                    and not meta.get("task"))
            kinds[meta["grade_id"]] = "auto" if auto else "manual"
    return kinds


def scores(root: Path, assignment: str, student: str) -> dict[str, tuple[float, float, bool]]:
    """grade_id -> (score, max_score, needs_manual_grade) recorded by nbgrader for one submission
    of the single notebook ``<assignment>.ipynb``. Raises nbgrader.api.MissingEntry when
    autograde recorded no such submission."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url(root)) as gb:
        nb = gb.find_submission_notebook(assignment, assignment, student)
        return {g.name: (float(g.score), float(g.max_score), bool(g.needs_manual_grade))
                for g in nb.grades}
