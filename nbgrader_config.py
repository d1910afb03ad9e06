"""nbgrader 0.9.6 configuration of the course. The repository root is the course root.

nbgrader reads this file from the current directory, so run nbgrader from the repository root
(the Makefile does). Each setting below was checked against the installed nbgrader source.
"""
import os
import sys

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

# The autograder package (sandbox, preprocessors) lives next to the installed `course` package;
# this file is also copied into throw-away course roots, so find it through `course`: located,
# not imported (importing it imports torch, 1.4 s of every nbgrader command that needs none).
try:
    import autograder.sandboxed_execute  # noqa: F401
except ImportError:
    import importlib.util
    sys.path.insert(0, os.path.dirname(os.path.dirname(importlib.util.find_spec("course").origin)))

# Layout: solutions/ holds the nbgrader SOURCE notebooks, notebooks/ the RELEASE (student)
# versions made by `nbgrader generate_assignment` and committed.
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "debug-course"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
# The gradebook: one setting, the environment variable COURSE_DB_URL (autograder/database.py).
# Unset: SQLite <root>/gradebook.db (git-ignored), waiting up to 300 s for a lock instead of
# nbgrader's 5 s; set: any SQLAlchemy URL (postgresql://... for concurrent graders).
from autograder.database import db_url  # noqa: E402

c.CourseDirectory.db_url = db_url(c.CourseDirectory.root)

# The exchange (nbgrader's release_assignment / fetch_assignment / submit / collect /
# release_feedback / fetch_feedback route on one shared server, e.g. JupyterHub): one setting, the
# environment variable COURSE_EXCHANGE. Unset, this file sets nothing, so nbgrader's own choice
# stands: a system-wide /etc/jupyter/nbgrader_config.py (which students' nbgrader reads too) or
# nbgrader 0.9.6's default /usr/local/share/nbgrader/exchange. (This file is read last, so a value
# here would override the system-wide one.) A command line's --Exchange.root=... overrides both.
# The git route (notebooks/ committed, submissions copied into submitted/) never uses it.
if os.environ.get("COURSE_EXCHANGE", "").strip():
    c.Exchange.root = os.path.abspath(os.environ["COURSE_EXCHANGE"].strip())

# Not copied into releases or autograded folders: nbgrader's defaults plus the jupytext text
# twin solutions/<a>/<a>.py of each solution notebook (it holds the solutions).
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.py"]

# Every notebook runs on the course kernel (the venv's Python, registered by `make venv`),
# whatever kernel a submission's metadata names.
c.Execute.kernel_name = "debug-course"
# Seconds per cell (nbgrader's default is 30). A cell past it is interrupted, gets a
# CellTimeoutError output, and execution goes on with the next cell.
c.Execute.timeout = 120
# One-line tracebacks ("AssertionError: message"): IPython's default traceback quotes the source
# lines around the failing line, so a failing hidden test would print itself into the
# autograded notebook and so into the feedback. (nbclient still adds the in-memory history file.)
c.Execute.extra_arguments = ["--InteractiveShell.xmode=Minimal"]

# Autograde runs student code only in the sandboxed kernel (autograder/sandbox.py: bubblewrap,
# no network, no course root, an unprivileged uid, CPU/memory/process/file limits), through
# SandboxedExecute in place of nbgrader's Execute. It refuses to grade when the sandbox cannot
# run here, unless COURSE_ALLOW_UNSANDBOXED=1. It stops a notebook at the first cell past a limit
# (time, output, a dead kernel): later cells get a NotRun error, so later tests score 0. It runs
# the monkeypatch guard around each test cell. `nbgrader validate` keeps Execute and debug-course.
# The c.Execute settings above apply to it too (subclass); the other six are nbgrader's defaults.
c.Autograde.autograde_preprocessors = [
    "autograder.sandboxed_execute.SandboxedExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.SandboxedExecute.kernel_name = "debug-course-sandboxed"
# Every output is in once the last cell has run: the kernel is killed, not asked to stop (a graceful
# shutdown of the sandboxed kernel waited about a second per submission for it to exit).
c.SandboxedExecute.shutdown_kernel = "immediate"
c.SandboxedExecute.cpu_seconds = 600      # RLIMIT_CPU, whole kernel (a cell's wall limit is timeout)
c.SandboxedExecute.memory_mb = 8192       # RLIMIT_AS (torch maps a few GB of address space)
c.SandboxedExecute.max_processes = 256    # RLIMIT_NPROC of the kernel's own uid (threads count)
c.SandboxedExecute.max_file_mb = 64       # RLIMIT_FSIZE
c.SandboxedExecute.tmp_mb = 256           # each writable tmpfs (working directory, /tmp)
c.SandboxedExecute.max_output_bytes = 2_000_000  # per cell; more is cut and the cell interrupted

# Late work (autograder/late_policy.py): the due date of each assignment is in the gradebook
# (nbgrader db assignment add A --duedate=..., make duedate); AssignLatePenalties, in the list above,
# asks this subclass of nbgrader's LateSubmissionPlugin for the penalty of a late submission:
# 10% of the score for each day or part of a day late, never more than the score.
c.AssignLatePenalties.plugin_class = "autograder.late_policy.LatePenalty"
c.LatePenalty.penalty_method = "per_day"
c.LatePenalty.per_day = 0.1

# A submission that deleted a test cell (or stripped its metadata) gets that cell back from the
# gradebook and is graded on it, instead of "needs manual grade" (and a forced regrade no longer
# keeps the old score).
c.OverwriteCells.add_missing_cells = True

# Feedback must not show hidden tests: the autograded notebook carries them again (OverwriteCells
# restores test cells from the gradebook), so feedback strips them. nbgrader's default list is
# [GetGrades, CSSHTMLHeaderPreprocessor] (nbgrader/converters/generate_feedback.py).
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "autograder.gpu_points.GpuPointsApart",  # a GPU test a CPU grader left unrun: not in the denominator
    "nbgrader.preprocessors.ClearHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]

# `nbgrader export` (make export): nbgrader's CSV, each submission's max_score over the points its
# grader could award (a GPU test left unrun by a grader without CUDA is apart, in not_graded_gpu).
c.ExportApp.plugin_class = "autograder.gpu_points.CpuGradedExport"
