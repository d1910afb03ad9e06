"""Bugs that move the parameters by the wrong gradient (notebook 03).

Registered in the catalogue of ``course.bugs`` (family wrong-gradient) when ``course`` is imported.
"""

from __future__ import annotations

from .bugs import bug  # noqa: F401
