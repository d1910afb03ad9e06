"""The package and the libraries a graded call runs on, put back as they were first imported.

A graded call (``course.exercises.isolation.run_apart``) runs in a process forked from a kernel in
which learner code has run, and it makes the hidden draws there. Code planted beforehand in
anything a draw or a check calls would run with the answer on the stack: a module's function or
class (``random.Random`` rebound to a subclass), a class's method (``random.Random.getstate``,
``inspect.Signature.from_callable``), a function's code, defaults or closure, a torch global hook.
``snapshot()`` records these for every module of ``MODULES`` that is imported when it runs;
``course.exercises.isolation`` calls it once, at its own import (the grading kernel imports the
package before any submitted code), after importing what torch would otherwise import lazily
inside a graded call (``torch._dynamo``, which rebinds ``torch.manual_seed`` on purpose).
``restore()`` puts back everything that differs and names it; ``changed()`` names it and touches
nothing. Recorded, per module:

* its ``sys.modules`` entry, its class, and every entry of its ``__dict__`` that holds code (a
  function, a class, a module, any callable); entries that hold data (``tempfile.tempdir``, a
  cache) change as a library runs and are not recorded; an entry added later is put back only
  where it shadows a builtin or is a module ``__getattr__``/``__dir__`` (imports add submodules,
  which stay);
* for each class it defines: every entry of its ``__dict__`` that is code (a function, a
  descriptor such as a property, any callable); an entry of code added later is removed; data
  (``__slotnames__``, a counter, a cache) is neither recorded nor removed;
* for each function it defines, and each method of those classes: ``__code__``, ``__defaults__``,
  ``__kwdefaults__``, and the cells of its closure that held a callable (the function a wrapper
  wraps; a closure's own counters and flags change legitimately and are left alone);
* the contents of torch's global hook registries (``GLOBAL_HOOKS``): a global forward hook or
  optimizer hook registered beforehand would run inside every draw and every check.

Limits: only modules of ``MODULES``, only what they define, only at the level above (an instance's
attributes, ``random._inst``'s say, are not recorded; a graded call builds its own instances).
Builtin types cannot be changed from Python. The records are tuples, bound in this module, which
the grading kernel's guard puts back before each test; code written to find and change them
(through the garbage collector, ``ctypes``) is an attack on the grader, for the reviewer.
"""

from __future__ import annotations

import builtins
import sys
import types

# The modules, by name or by package prefix (a name ending in "."), whose state is recorded.
# course, torch's modules that build, run and train a model (not its compilers, whose config
# modules change as they run), and the standard-library modules the package's code calls.
MODULES = ("course", "course.", "torch", "torch.nn.", "torch.optim.", "torch.autograd.", "torch.random",
           "torch._tensor", "torch.functional", "torch.serialization", "torch.utils.data.", "torch.utils.hooks",
           "torch.utils._contextlib", "torch.amp.", "torch.overrides", "torch._utils", "torch.types",
           "torch.testing.", "torch.nn", "torch.optim", "torch.autograd", "torch.utils.data",
           "random", "inspect", "dataclasses", "functools", "copy", "copyreg", "weakref", "json", "json.",
           "types", "typing", "contextlib", "collections", "collections.", "abc", "enum", "math",
           "operator", "itertools", "hashlib", "marshal", "statistics", "numbers", "heapq", "bisect",
           "string", "re", "io", "os", "posixpath", "time", "traceback", "linecache", "dis")
# (module, attribute): a registry of global hooks whose contents are put back too.
GLOBAL_HOOKS = (
    ("torch.nn.modules.module", "_global_buffer_registration_hooks"),
    ("torch.nn.modules.module", "_global_module_registration_hooks"),
    ("torch.nn.modules.module", "_global_parameter_registration_hooks"),
    ("torch.nn.modules.module", "_global_backward_pre_hooks"),
    ("torch.nn.modules.module", "_global_backward_hooks"),
    ("torch.nn.modules.module", "_global_forward_pre_hooks"),
    ("torch.nn.modules.module", "_global_forward_hooks"),
    ("torch.nn.modules.module", "_global_forward_hooks_always_called"),
    ("torch.nn.modules.module", "_global_forward_hooks_with_kwargs"),
    ("torch.optim.optimizer", "_global_optimizer_pre_hooks"),
    ("torch.optim.optimizer", "_global_optimizer_post_hooks"),
)
_SHADOWS = frozenset(vars(builtins)) | {"__getattr__", "__dir__"}
_FunctionType, _ModuleType, _CodeType = types.FunctionType, types.ModuleType, types.CodeType
_isinstance, _type, _id, _callable, _setattr, _delattr = isinstance, type, id, callable, setattr, delattr
_modules = sys.modules
_WRAPPER_FILES: frozenset = frozenset()  # the files of torch's own wrappers (``_adopted``)

# Filled by snapshot(): tuples, so what they hold cannot be changed in place.
_RECORD: tuple = ()
_FUNCTIONS: tuple = ()
_HOOKS: tuple = ()


def wanted(name: str) -> bool:
    """Whether the module ``name`` is one ``snapshot`` records."""
    return any(name == m or (m.endswith(".") and name.startswith(m)) for m in MODULES)


def _methods(value):
    """The functions behind a class attribute (a function, a static or class method, a property)."""
    if _isinstance(value, _FunctionType):
        return (value,)
    if _isinstance(value, (staticmethod, classmethod)):
        inner = value.__func__
        return (inner,) if _isinstance(inner, _FunctionType) else ()
    if _isinstance(value, property):
        return tuple(f for f in (value.fget, value.fset, value.fdel) if _isinstance(f, _FunctionType))
    return ()


def _code(value) -> bool:
    """Whether a class attribute is code (callable, or a descriptor such as a property)."""
    return _callable(value) or hasattr(_type(value), "__get__")


def _adopted(recorded, now) -> bool:
    """A rebinding that torch makes on purpose, with a wrapper of its own around what was there:
    importing ``torch._dynamo`` (lazily, at an optimizer's first step) wraps ``torch.manual_seed``
    (``torch._compile``); an optimizer class's first instance wraps its class's ``step``
    (``torch.optim.optimizer``, for the profiler and the step hooks; ``recorded`` is None where the
    class inherited ``step``)."""
    code = getattr(now, "__code__", None)
    if code is None or code.co_filename not in _WRAPPER_FILES:
        return False
    inner = getattr(now, "__wrapped__", None)
    return inner is recorded or (recorded is None and inner is not None)


def _function_record(fn) -> tuple:
    cells = ()
    if fn.__closure__:
        cells = tuple((i, cell, cell.cell_contents) for i, cell in enumerate(fn.__closure__)
                      if _cell_callable(cell))
    return (fn, fn.__code__, fn.__defaults__, fn.__kwdefaults__, cells)


def _cell_callable(cell) -> bool:
    try:
        value = cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return _callable(value) and not _isinstance(value, type)


def snapshot() -> None:
    """Record the modules of ``MODULES`` that are imported now (see the module docstring), in place
    of any earlier record: call it only before any learner code has run (``isolation`` at its
    import; the grading kernel's guard again once it has imported every module of ``course``). A
    module still being imported is left out (its code is not all there yet); ``restore`` and
    ``changed`` record a module they see for the first time as it is then."""
    global _RECORD, _FUNCTIONS, _HOOKS, _WRAPPER_FILES
    _WRAPPER_FILES = frozenset(f for f in (getattr(_modules.get(m), "__file__", None)
                                           for m in ("torch._compile", "torch.optim.optimizer")) if f)
    _RECORD, _FUNCTIONS = _records(set())
    hooks = []
    for module_name, attr in GLOBAL_HOOKS:
        owner = _modules.get(module_name)
        registry = getattr(owner, attr, None)
        if registry is not None and hasattr(registry, "items"):
            hooks.append((f"{module_name}.{attr}", owner, attr, registry, tuple(registry.items())))
    _HOOKS = tuple(hooks)


def _records(known: set) -> tuple[tuple, tuple]:
    """Records of the wanted, fully imported modules whose names are not in ``known``."""
    record, functions, seen_fn, seen_cls = [], [], set(), set()
    for name, module in list(_modules.items()):
        if name in known or not _isinstance(module, _ModuleType) or not wanted(name) \
                or getattr(getattr(module, "__spec__", None), "_initializing", False):
            continue
        entries = tuple((k, v) for k, v in module.__dict__.items() if _callable(v) or _isinstance(v, _ModuleType))
        classes = []
        for key, value in entries:
            if _isinstance(value, _FunctionType) and getattr(value, "__module__", None) == name \
                    and _id(value) not in seen_fn:
                seen_fn.add(_id(value))
                functions.append(_function_record(value))
            elif _isinstance(value, type) and getattr(value, "__module__", None) == name \
                    and _id(value) not in seen_cls and not _immutable(value):
                seen_cls.add(_id(value))
                members = tuple((k, v) for k, v in value.__dict__.items() if _code(v))
                classes.append((value, members))
                for _, member in members:
                    for fn in _methods(member):
                        if _id(fn) not in seen_fn:
                            seen_fn.add(_id(fn))
                            functions.append(_function_record(fn))
        record.append((name, module, _type(module), entries, frozenset(module.__dict__), tuple(classes)))
    return tuple(record), tuple(functions)


def _immutable(cls) -> bool:
    """A builtin or extension type whose attributes Python code cannot set."""
    try:
        return not (cls.__flags__ & (1 << 9))  # Py_TPFLAGS_HEAPTYPE: only heap types can change
    except AttributeError:
        return True


def _sweep(fix: bool) -> list[str]:
    global _RECORD, _FUNCTIONS
    late, late_functions = _records({r[0] for r in _RECORD})
    if late:
        _RECORD, _FUNCTIONS = _RECORD + late, _FUNCTIONS + late_functions
    out = []
    missing = out  # a sentinel no module holds
    for name, module, cls, entries, keys, classes in _RECORD:
        if _modules.get(name) is not module:
            out.append(f"sys.modules[{name!r}] (replaced)")
            if fix:
                _modules[name] = module
        if _type(module) is not cls:
            out.append(f"{name}.__class__ (replaced)")
            if fix:
                module.__class__ = cls
        d = module.__dict__
        for key, value in entries:
            now = d.get(key, missing)
            if now is not value and not _adopted(value, now):
                out.append(f"{name}.{key} (replaced)")
                if fix:
                    d[key] = value
        for key in _SHADOWS.intersection(d).difference(keys):
            out.append(f"{name}.{key} (added)")
            if fix:
                del d[key]
        for klass, members in classes:
            have = klass.__dict__
            for key, value in members:
                now = have.get(key, missing)
                if now is not value and not _adopted(value, now):
                    out.append(f"{name}.{klass.__qualname__}.{key} (replaced in the class)")
                    if fix:
                        _setattr(klass, key, value)
            if len(have) != len(members):
                known = {key for key, _ in members}
                for key in [k for k in have if k not in known and _code(have[k]) and not _adopted(None, have[k])]:
                    out.append(f"{name}.{klass.__qualname__}.{key} (added to the class)")
                    if fix:
                        _delattr(klass, key)
    for fn, code, defaults, kwdefaults, cells in _FUNCTIONS:
        where = f"{fn.__module__}.{fn.__qualname__}"
        if fn.__code__ is not code:
            out.append(f"{where}.__code__ (replaced)")
            if fix:
                fn.__code__ = code
        if fn.__defaults__ is not defaults:
            out.append(f"{where}.__defaults__ (replaced)")
            if fix:
                fn.__defaults__ = defaults
        if fn.__kwdefaults__ is not kwdefaults:
            out.append(f"{where}.__kwdefaults__ (replaced)")
            if fix:
                fn.__kwdefaults__ = kwdefaults
        for i, cell, value in cells:
            try:
                now = cell.cell_contents
            except ValueError:
                now = missing
            if now is not value:
                out.append(f"{where} closure cell {i} (replaced)")
                if fix:
                    cell.cell_contents = value
    for label, owner, attr, registry, items in _HOOKS:
        if owner.__dict__.get(attr, missing) is not registry:
            out.append(f"{label} (replaced)")
            if fix:
                _setattr(owner, attr, registry)
        now = tuple(registry.items())
        if len(now) != len(items) or any(a[0] != b[0] or a[1] is not b[1] for a, b in zip(now, items)):
            out.append(f"{label} (a global hook registered)")
            if fix:
                registry.clear()
                registry.update(items)
    return out


def changed() -> list[str]:
    """What differs from the snapshot now, by name; nothing is touched."""
    return _sweep(False)


def restore() -> list[str]:
    """Put back everything that differs from the snapshot; the names of what was put back."""
    return _sweep(True)
