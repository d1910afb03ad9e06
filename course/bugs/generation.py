"""Bugs of notebook 08 (family ``generation``): low teacher-forced loss, poor generation.

Registered in the catalogue of ``course.bugs`` when ``course`` is imported.
"""

from __future__ import annotations

from .registry import bug  # noqa: F401
