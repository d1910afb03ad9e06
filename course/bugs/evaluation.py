"""Bugs of notebook 09 (family ``evaluation``): good likelihood, weak task score.

Registered in the catalogue of ``course.bugs`` when ``course`` is imported.
"""

from __future__ import annotations

from .registry import bug  # noqa: F401
