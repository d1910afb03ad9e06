"""nbgrader 0.9.6 configuration of the course. The repository root is the course root.

nbgrader reads this file from the current directory, so run nbgrader from the repository root
(the Makefile does). Each setting below was checked against the installed nbgrader source.
"""
import os

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

# Layout: solutions/ holds the nbgrader SOURCE notebooks, notebooks/ the RELEASE (student)
# versions made by `nbgrader generate_assignment` and committed.
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "debug-course"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
# The gradebook defaults to sqlite:///<root>/gradebook.db (git-ignored); CourseDirectory.db_url
# takes any SQLAlchemy URL (nbgrader's FAQ recommends PostgreSQL for concurrent graders).

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

# A submission that deleted a test cell (or stripped its metadata) gets that cell back from the
# gradebook and is graded on it, instead of "needs manual grade" (and a forced regrade no longer
# keeps the old score).
c.OverwriteCells.add_missing_cells = True

# Feedback must not show hidden tests: the autograded notebook carries them again (OverwriteCells
# restores test cells from the gradebook), so feedback strips them. nbgrader's default list is
# [GetGrades, CSSHTMLHeaderPreprocessor] (nbgrader/converters/generate_feedback.py).
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbgrader.preprocessors.ClearHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
