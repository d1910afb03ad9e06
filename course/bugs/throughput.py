"""Bugs of notebook 06 (family ``throughput``): a run that slows down at a step.

Registered in the catalogue of ``course.bugs`` when ``course`` is imported.
"""

from __future__ import annotations

from .registry import bug  # noqa: F401
