"""Lesson material: one module per notebook topic that is not part of the toolkit (demonstrations,
widgets, the checks a notebook builds on the reference run). Imports the toolkit, the reference run,
other lessons and the bug catalogue (``replay`` reads one constant of ``course.bugs.spike``); never
the exercises.
"""
