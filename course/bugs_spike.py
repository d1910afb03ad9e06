"""Bugs and triggers behind a late loss spike in an otherwise healthy run (notebook 04).

Registered in the catalogue of ``course.bugs`` (family late-spike) when ``course`` is imported.
"""

from __future__ import annotations

from .bugs import bug  # noqa: F401
