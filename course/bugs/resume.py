"""Bugs of notebook 07 (family ``resume``): a resumed or re-run training that silently is not what its config says.

Registered in the catalogue of ``course.bugs`` when ``course`` is imported.
"""

from __future__ import annotations

from .registry import bug  # noqa: F401
