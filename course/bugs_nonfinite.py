"""Bugs that make a loss, an activation or a gradient non-finite (notebook 02).

Registered in the catalogue of ``course.bugs`` (family non-finite) when ``course`` is imported.
"""

from __future__ import annotations

from .bugs import bug  # noqa: F401
