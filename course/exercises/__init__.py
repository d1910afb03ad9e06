"""The course's exercise and grading machinery: mystery pipelines, graded calls run apart, the
capstone's draws, the learner's identity and diagnosis record. No other module of ``course`` imports
it but ``course/__init__.py``, which imports ``isolation`` and ``mystery`` at ``import course`` (the
grading kernel needs them bound before any learner code runs).
"""
