"""The registry behind ``course.bugs``: a bug is a named, documented ``Pipeline -> Pipeline``.

``@bug(family, symptom)`` registers a function under its name with dashes (``lr_zero`` becomes
``lr-zero``); ``catalogue``, ``get`` and ``inject`` read the registry. A family must be one of
``FAMILIES``, so a typo in a family name fails at import, not when a notebook draws from it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from ..reference.pipeline import Pipeline


@dataclass(frozen=True)
class Bug:
    name: str
    family: str
    symptom: str
    doc: str
    apply: Callable[[Pipeline], Pipeline]

    def __call__(self, pipe: Pipeline) -> Pipeline:
        broken = self.apply(pipe)
        return replace(broken, bugs=pipe.bugs + (self.name,))


_REGISTRY: dict[str, Bug] = {}
FAMILIES = (
    "no-updates", "context-unused", "too-good", "bad-loss", "batch",  # notebooks 00 and 01
    "non-finite",  # notebook 02
    "wrong-gradient",  # notebook 03
    "late-spike",  # notebook 04
    "val-gap", "leakage",  # notebook 05
    "throughput",  # notebook 06
    "resume",  # notebook 07
    "generation",  # notebook 08
    "evaluation",  # notebook 09
    "amp-memory", "fp16-overflow",  # notebook 10
    "lr-instability",  # notebook 12
)


def bug(family: str, symptom: str):
    """Register the decorated ``Pipeline -> Pipeline`` function as a bug named after it."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}")

    def register(fn):
        name = fn.__name__.replace("_", "-")
        _REGISTRY[name] = Bug(name, family, symptom, (fn.__doc__ or "").strip(), fn)
        return fn

    return register


def catalogue(family: str | None = None) -> list[Bug]:
    """The registered bugs, optionally only those of one family, in registration order."""
    return [b for b in _REGISTRY.values() if family is None or b.family == family]


def get(name: str) -> Bug:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no bug named {name!r}; known: {sorted(_REGISTRY)}") from None


def inject(pipe: Pipeline, *names: str) -> Pipeline:
    """``pipe`` with each named bug applied, in order."""
    for name in names:
        pipe = get(name)(pipe)
    return pipe
