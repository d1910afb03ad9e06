"""Which gradebook the grading scripts use: one setting, the ``COURSE_DB_URL`` environment variable.

- Unset or empty: SQLite at ``<course root>/gradebook.db``, opened with a busy timeout of
  ``SQLITE_BUSY_TIMEOUT_S`` seconds (``?timeout=`` in the URL, which SQLAlchemy's pysqlite driver
  passes to ``sqlite3.connect``). nbgrader 0.9.6 opens SQLite with SQLAlchemy's defaults, i.e.
  Python's 5 s: a grading process that finds the database locked for longer (another grader
  committing, an instructor saving manual grades, a slow disk) fails with "database is locked",
  and nbgrader then abandons its whole batch. With the timeout it waits instead.
- Set: any SQLAlchemy URL, e.g. ``postgresql://user@127.0.0.1:5432/gradebook`` (driver:
  ``psycopg[binary]`` from requirements.txt, SQLAlchemy 2.1's default for ``postgresql://``).
  nbgrader's FAQ recommends PostgreSQL when several graders write at once.

``autograder.grade_class`` and ``autograder.summary`` read the setting through ``db_url``, and
pass it to every nbgrader command they run (``--CourseDirectory.db_url``), so the config file
and the scripts cannot disagree. Plain ``nbgrader`` commands typed by hand read
``nbgrader_config.py``, which should take the same variable (see docs/instructors.md).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

ENV = "COURSE_DB_URL"
SQLITE_BUSY_TIMEOUT_S = 300


def sqlite_url(root: Path, timeout: float | None = SQLITE_BUSY_TIMEOUT_S) -> str:
    """The SQLite gradebook of course root ``root``; ``timeout=None`` gives nbgrader's plain URL."""
    url = f"sqlite:///{Path(root).resolve() / 'gradebook.db'}"
    return url if timeout is None else f"{url}?timeout={timeout:g}"


def db_url(root: Path) -> str:
    """The gradebook URL: ``$COURSE_DB_URL`` when set, else ``sqlite_url(root)``."""
    return os.environ.get(ENV, "").strip() or sqlite_url(root)


def describe(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for logs and reports)."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)
