"""The reference run: the data with known answers, the tiny transformer, the ``Pipeline`` of
replaceable parts (and the healthy default of each), the instrumented training loop and its
checkpoints. It imports ``course.toolkit`` and itself, never the lessons or the exercises, and its
module graph has no cycle (``tests/test_layout.py``).
"""
