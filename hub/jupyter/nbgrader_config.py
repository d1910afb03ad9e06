"""nbgrader's configuration for every account on the course's hub (learners and instructor alike).

hub/jupyterhub_config.py puts this folder on every account's JUPYTER_CONFIG_PATH; on a server of
your own it may be /etc/jupyter/nbgrader_config.py instead. nbgrader reads it before the course's
own nbgrader_config.py (the instructor's course folder), which it does not replace.

- The exchange: COURSE_EXCHANGE (default /srv/nbgrader/exchange), a folder every account can
  write to (mode 1777; nbgrader makes the course's inbound folder 2733, so a learner cannot list
  other learners' submissions, and names each submission with a random string).
- What a submission may hold (checked by nbgrader's submit, so the learner is told at once):
  every notebook of the release must be there (ExchangeSubmit.strict: a missing one refuses the
  submission, saying which), and the folder may hold at most MAX_SUBMISSION_KB kilobytes
  (CourseDirectory.max_dir_size: nbgrader refuses a larger one, "Directory size is too big");
  a single file over that size is left out of a copy, with a warning (max_file_size).
  autograder/class_runner.py rejects a notebook over 50 MiB again at grading time.
"""
import os

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

MAX_SUBMISSION_KB = 50 * 1024  # nbgrader counts a kilobyte as 1000 bytes: 52.4 MB

c.Exchange.root = os.environ.get("COURSE_EXCHANGE", "/srv/nbgrader/exchange")
c.ExchangeSubmit.strict = True
c.CourseDirectory.max_dir_size = MAX_SUBMISSION_KB
c.CourseDirectory.max_file_size = MAX_SUBMISSION_KB
