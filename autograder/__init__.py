"""Build, release and grading scripts of the course (not installed; run from the repository root).

Scores always come from nbgrader's own commands and its gradebook; these modules only
prepare inputs, call nbgrader and read what it recorded.
"""
