"""Lesson material: one module per notebook topic that is not part of the toolkit (demonstrations,
widgets, the checks a notebook builds on the reference run). Imports the toolkit, the reference run
and other lessons; never the exercises.
"""
