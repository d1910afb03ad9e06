"""Bugs that open a gap between training and validation, or leak one into the other (notebook 05).

Registered in the catalogue of ``course.bugs`` (family val-gap / leakage) when ``course`` is imported.
"""

from __future__ import annotations

from .bugs import bug  # noqa: F401
