"""The run manifest: what a run was made of, as hashes and values you can diff (notebook 07).

A manifest has four **components** and a ``run`` block:

* ``code``: a SHA-256 of every source file of the ``course`` package, and one entry per pipeline
  part: a package function by its qualified name (its file's hash covers its code), a function
  defined elsewhere (a notebook cell) by a hash of its compiled code (bytecode, constants, names,
  defaults and closure values; not its file name or line numbers, which change from session to
  session; nor the module globals it reads when called: a notebook function that reads a global
  keeps its hash when the global changes);
* ``config``: every setting of the pipeline (its repr), the seed and the number of steps;
* ``data``: hashes of the training and validation windows and of the exact batches (inputs and
  targets) the run trains on, in order;
* ``environment``: Python, torch and numpy versions, the platform, torch's thread count, the
  determinism flags and the settings that change numerics.

The ``run`` block (when it was made, where the run writes) differs for every run by design and is
not a component. ``diff`` names, per component, the entries that were added, removed or changed.

A manifest shows what *went into* a run. It cannot show what the run did with it: a run whose
config says ``lr=0.003`` and that trained at 0.01 (a stale resume) has a correct manifest. Compare
the used-LR telemetry for that.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import platform
import sys
import time
import types
from pathlib import Path

import torch

COMPONENTS = ("code", "config", "data", "environment")
PACKAGE = Path(__file__).resolve().parent.parent  # the course package (this file is course/lessons/manifest.py)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _code_bytes(code: types.CodeType) -> bytes:
    parts = [code.co_code, repr(code.co_names).encode(), repr(code.co_varnames).encode(),
             repr(code.co_freevars).encode()]
    for c in code.co_consts:
        parts.append(_code_bytes(c) if isinstance(c, types.CodeType) else repr(c).encode())
    return b"\x00".join(parts)


def function_hash(fn) -> str:
    """What a callable *does*, as a short hash: for a package function, its qualified name; for a
    Python function defined elsewhere, its compiled code, defaults and closure values; for another
    callable object, its type and repr (a ``functools.partial``: its function and arguments).

    The limit: the hash covers what the function's code object holds, not the globals it reads at
    call time (``SCALE * loss`` with a module-level ``SCALE``: changing ``SCALE`` leaves the hash
    unchanged), nor other functions it calls by name. Make such values arguments, defaults or closure
    values, or record them in the config, if the manifest must see them."""
    module = getattr(fn, "__module__", "") or ""
    if isinstance(fn, types.FunctionType):
        if module.split(".")[0] == "course":
            return f"{module}.{fn.__qualname__}"
        closure = tuple(repr(c.cell_contents) for c in (fn.__closure__ or ()))
        return _sha(_code_bytes(fn.__code__) + repr((fn.__defaults__, fn.__kwdefaults__, closure)).encode())
    if hasattr(fn, "func") and hasattr(fn, "args"):  # functools.partial
        return _sha(f"{function_hash(fn.func)}|{fn.args!r}|{fn.keywords!r}".encode())
    return _sha(f"{type(fn).__module__}.{type(fn).__qualname__}|{fn!r}".encode())


def code_hashes(pipe) -> dict[str, str]:
    """The ``code`` component: each source file of the package, then each part of ``pipe``."""
    from ..reference.pipeline import PARTS

    out = {str(p.relative_to(PACKAGE.parent)): _sha(p.read_bytes()) for p in sorted(PACKAGE.rglob("*.py"))}
    for name in PARTS:
        fn = getattr(pipe, name)
        out[f"part {name}"] = "None" if fn is None else function_hash(fn)
    return out


def config_of(pipe, seed: int, steps: int) -> dict[str, str]:
    """The ``config`` component: every setting of ``pipe`` (parts excluded), the seed and the steps."""
    from ..reference.pipeline import PARTS

    out = {f.name: repr(getattr(pipe, f.name)) for f in dataclasses.fields(pipe)
           if f.name not in PARTS and f.name != "bugs"}
    out["seed"], out["steps"] = repr(seed), repr(steps)
    return out


def _tensor_hash(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(repr((tuple(t.shape), str(t.dtype))).encode())
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def data_hashes(pipe, seed: int, steps: int, start: int = 0) -> dict[str, str]:
    """The ``data`` component: the training and validation windows, and the batches of data indices
    ``start`` to ``start + steps - 1`` as the loop would get them (``course.reference.train.batch_at``)."""
    from ..reference.train import batch_at

    batches = [batch_at(pipe, seed, s) for s in range(start, start + steps)]
    return {
        "train windows": _tensor_hash(pipe.windows("train")),
        "val windows": _tensor_hash(pipe.windows("val")),
        f"batches {start}-{start + steps - 1}": _tensor_hash(*[t for b in batches for t in (b.inputs, b.targets)]),
    }


def environment() -> dict[str, str]:
    """The ``environment`` component: versions, platform, threads and the numerics settings."""
    try:
        import numpy
        numpy_version = numpy.__version__
    except ImportError:  # pragma: no cover
        numpy_version = "absent"
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy_version,
        "platform": f"{platform.system()} {platform.machine()}",
        "torch threads": str(torch.get_num_threads()),
        "deterministic algorithms": str(torch.are_deterministic_algorithms_enabled()),
        "default dtype": str(torch.get_default_dtype()),
        "float32 matmul precision": torch.get_float32_matmul_precision(),
        "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG", "unset"),
    }


def manifest(pipe, seed: int, steps: int, directory=None) -> dict:
    """The manifest of a run of ``pipe`` from ``seed`` for ``steps`` steps, writing to ``directory``:
    ``{"code": {...}, "config": {...}, "data": {...}, "environment": {...}, "run": {...}}``, every
    value a string."""
    return {
        "code": code_hashes(pipe),
        "config": config_of(pipe, seed, steps),
        "data": data_hashes(pipe, seed, steps),
        "environment": environment(),
        "run": {"created": time.strftime("%Y-%m-%dT%H:%M:%S"), "directory": str(directory),
                "argv": " ".join(sys.argv[:1])},
    }


def diff(old: dict, new: dict) -> dict[str, list[str]]:
    """For each component that differs, the sorted names of its entries that were added, removed or
    changed; components that agree are left out, and so is the ``run`` block. ``{}``: the same run
    inputs."""
    out = {}
    for component in COMPONENTS:
        a, b = old.get(component, {}), new.get(component, {})
        changed = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        if changed:
            out[component] = changed
    return out
