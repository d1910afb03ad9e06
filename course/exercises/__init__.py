"""The course's exercise and grading machinery: mystery pipelines, graded calls run apart, the
capstone's draws, the learner's identity and diagnosis record. Nothing outside ``exercises`` imports
it (``course/__init__.py`` binds ``isolation`` and ``mystery`` at import, for the grading kernel).
"""
