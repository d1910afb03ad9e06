"""The package and the libraries a graded call runs on, put back as they were first imported.

A graded call (``course.exercises.isolation.run_apart``) runs in a process forked from a kernel in
which learner code has run, and it makes the hidden draws there. Code planted beforehand in
anything a draw or a check calls would run with the answer on the stack: a module's function or
class (``random.Random`` rebound to a subclass), a class's method (``inspect.Signature.
from_callable``), a function's code, defaults or wrapped function, a torch global hook.
``record()`` records these for every module of ``MODULES`` that is fully imported and not yet
recorded; ``restore()`` puts back everything that differs and names it; ``changed()`` names it and
touches nothing. Who records when: the grading kernel's guard (``autograder/kernel_guard.py``)
loads this file before any submitted code, records what is imported then, and records again right
after each import of torch or of a module of ``course`` finishes; ``course.exercises.isolation``
records at its own import; ``restore`` and ``changed`` record a module they see for the first time
as it is then (outside the grading kernel, that may be after learner code ran). Recorded, per module:

* its ``sys.modules`` entry, its class, and every entry of its ``__dict__`` that holds code (a
  function, a class, a module, any callable); entries that hold data (``tempfile.tempdir``, a
  counter, a cache) change as a library runs and are not recorded; an entry added later is put
  back only where it shadows a builtin or is a module ``__getattr__``/``__dir__`` (imports add
  submodules, which stay);
* for each class it defines: every entry of its ``__dict__`` that is code (a function, a
  descriptor such as a property, any callable); an entry of code added later is removed; data
  (``__slotnames__``, a counter, a cache) is neither recorded nor removed;
* for each function it defines, and each method of those classes: ``__code__``, ``__defaults__``,
  ``__kwdefaults__``, and the cells of its closure that held a callable (the function a wrapper
  wraps; a closure's own counters and flags change legitimately and are left alone); for a function
  of ``course``'s own files, its attributes too (``__signature__``, ``__wrapped__``: what
  ``inspect.signature`` follows; a library marks its own functions as it runs, so theirs are not);
* for a module of ``course``, the fields of each frozen dataclass instance it holds at module level
  (a ``Pipeline``, and in turn the ``ModelConfig`` it holds): ``object.__setattr__`` changes them in
  place, where a check by identity sees the same object;
* the contents of torch's global hook registries (``GLOBAL_HOOKS``): a global forward hook or
  optimizer hook registered beforehand would run inside every draw and every check;
* for the data modules (``DATA_MODULES``: the bug catalogue, the notebooks' mystery sets): the
  contents of every module-level dict and list, and the fields of the objects in them (a ``Bug``
  whose ``apply`` was wrapped, a registry entry replaced), and the fields of the frozen dataclass
  instances those fields hold (a mystery set's base pipeline): a draw dispatches through them.

A change whose new value is a function of a library's own files (site-packages or the standard
library, not ``course`` and not a notebook) is a library's doing and is kept: torch wraps
``torch.manual_seed`` when ``torch._dynamo`` is imported and an optimizer class's ``step`` at its
first instance; ``transformers`` adds methods to ``torch.nn.Module``.

Limits: only modules of ``MODULES``, only what they define, only at the level above (an instance's
attributes, ``random._inst``'s say, are not recorded; a graded call builds its own instances).
Builtin types cannot be changed from Python. A callable compiled under a library's file name passes
for the library's. The records live in the closure of this module's functions; code written to find
and change them (``__closure__``, the garbage collector, ``ctypes``) is an attack on the grader,
for the reviewer.
"""

from __future__ import annotations

import builtins
import operator
import os
import sys
import types

# The modules, by name or by package prefix (a name ending in "."), whose state is recorded.
# course, torch's modules that build, run and train a model (not its compilers, whose config
# modules change as they run), and the standard-library modules the package's code calls.
MODULES = ("course", "course.", "torch", "torch.nn", "torch.nn.", "torch.optim", "torch.optim.",
           "torch.autograd", "torch.autograd.", "torch.random", "torch._tensor", "torch.functional",
           "torch.serialization", "torch.utils.data", "torch.utils.data.", "torch.utils.hooks",
           "torch.utils._contextlib", "torch.amp", "torch.amp.", "torch.overrides", "torch._utils",
           "torch.types", "torch.testing", "torch.testing.",
           "random", "inspect", "dataclasses", "functools", "copy", "copyreg", "weakref", "json", "json.",
           "types", "typing", "contextlib", "collections", "collections.", "abc", "enum", "math",
           "operator", "itertools", "hashlib", "marshal", "statistics", "numbers", "heapq", "bisect",
           "string", "re", "io", "os", "posixpath", "time", "traceback", "linecache", "dis")
# (module, attribute): a registry of global hooks whose contents are put back too.
GLOBAL_HOOKS = tuple(("torch.nn.modules.module", f"_global_{kind}") for kind in (
    "buffer_registration_hooks", "module_registration_hooks", "parameter_registration_hooks",
    "backward_pre_hooks", "backward_hooks", "forward_pre_hooks", "forward_hooks",
    "forward_hooks_always_called", "forward_hooks_with_kwargs")) + \
    (("torch.optim.optimizer", "_global_optimizer_pre_hooks"), ("torch.optim.optimizer", "_global_optimizer_post_hooks"))

# Modules whose module-level dicts and lists are data a draw or a test is built from (the bug
# catalogue, the notebooks' mystery sets): their contents, and the fields of the objects in them,
# are recorded and put back too.
DATA_MODULES = ("course.bugs", "course.bugs.", "course.exercises.sets")
_SHADOWS = frozenset(vars(builtins)) | {"__getattr__", "__dir__"}
_FunctionType, _ModuleType, _CodeType = types.FunctionType, types.ModuleType, types.CodeType
_isinstance, _type, _id, _callable, _setattr, _delattr = isinstance, type, id, callable, setattr, delattr
_getattr, _hasattr, _len, _tuple = getattr, hasattr, len, tuple
_all, _map, _is = all, map, operator.is_
_modules = sys.modules
# importlib's ModuleSpec, read as this file loads (in the grading kernel: before any submitted code)
_ModuleSpec = type(sys.__spec__)
_module_dict = _ModuleType.__dict__["__dict__"].__get__  # a module's namespace, whatever its class
_object_getattribute = object.__getattribute__
_function_dict = _FunctionType.__dict__["__dict__"].__get__  # a function's attributes, past any subclass
# a library's own files: site-packages and the standard library (course is not among them: it is
# installed in place, from the repository)
_LIBRARY_DIRS = tuple(sorted({os.path.realpath(p) + os.sep for p in
                              (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)} |
                             {os.path.dirname(os.__file__) + os.sep}))
_COURSE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _initializing(module) -> bool:
    """Whether ``module`` is still being imported, read without running anything of a learner's: a
    ``__spec__`` that is not a plain ``ModuleSpec``, or whose ``_initializing`` is not ``True``
    itself, counts as imported (a spec's property would run on every read; red team, run 8)."""
    if not _isinstance(module, _ModuleType):
        return False
    spec = _module_dict(module).get("__spec__")
    if _type(spec) is not _ModuleSpec:
        return False
    return _object_getattribute(spec, "__dict__").get("_initializing") is True


def wanted(name: str) -> bool:
    """Whether the module ``name`` is one ``record`` records."""
    return any(name == m or (m.endswith(".") and name.startswith(m)) for m in MODULES)


def _methods(value):
    """The functions behind a class attribute (a function, a static or class method, a property)."""
    if _isinstance(value, _FunctionType):
        return (value,)
    if _isinstance(value, (staticmethod, classmethod)):
        inner = value.__func__
        return (inner,) if _isinstance(inner, _FunctionType) else ()
    if _isinstance(value, property):
        return _tuple(f for f in (value.fget, value.fset, value.fdel) if _isinstance(f, _FunctionType))
    return ()


def _code(value) -> bool:
    """Whether a class attribute is code (callable, or a descriptor such as a property)."""
    return _callable(value) or _hasattr(_type(value), "__get__")


def _library(value) -> bool:
    """Whether ``value`` is a function (or a method wrapping one) of a library's own files."""
    fn = _getattr(value, "__func__", value)
    code = _getattr(fn, "__code__", None)
    if not _isinstance(code, _CodeType):
        return False
    name = code.co_filename
    return name.startswith(_LIBRARY_DIRS) and not name.startswith(_COURSE_DIR)


def _cell_callable(cell) -> bool:
    try:
        value = cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return _callable(value) and not _isinstance(value, type)


def _function_record(fn) -> tuple:
    cells = ()
    if fn.__closure__:
        cells = _tuple((i, cell, cell.cell_contents) for i, cell in enumerate(fn.__closure__) if _cell_callable(cell))
    # a function of course's own files: its attributes too (``__signature__``, ``__wrapped__``, which
    # ``inspect.signature`` follows); a library's functions are left alone (torch marks its own as it runs)
    attrs = _tuple(_function_dict(fn).items()) if fn.__code__.co_filename.startswith(_COURSE_DIR) else None
    return (fn, fn.__code__, fn.__defaults__, fn.__kwdefaults__, cells, attrs)


def _immutable(cls) -> bool:
    """A builtin or extension type whose attributes Python code cannot set."""
    try:
        return not (cls.__flags__ & (1 << 9))  # Py_TPFLAGS_HEAPTYPE: only heap types can change
    except AttributeError:
        return True


def _module_record(name, module, seen_fn, seen_cls, functions) -> tuple:
    entries = _tuple((k, v) for k, v in module.__dict__.items() if _callable(v) or _isinstance(v, _ModuleType))
    classes = []
    for _, value in entries:
        if _isinstance(value, _FunctionType) and _getattr(value, "__module__", None) == name \
                and _id(value) not in seen_fn:
            seen_fn.add(_id(value))
            functions.append(_function_record(value))
        elif _isinstance(value, type) and _getattr(value, "__module__", None) == name \
                and _id(value) not in seen_cls and not _immutable(value):
            seen_cls.add(_id(value))
            members = _tuple((k, v) for k, v in value.__dict__.items() if _code(v))
            data = _tuple((k, v) for k, v in value.__dict__.items() if not _code(v))
            # (for the sweep's fast path: every key, and the data entries, as they are now)
            classes.append((value, members, _split(members), frozenset(value.__dict__), _split(data)))
            for _, member in members:
                for fn in _methods(member):
                    if _id(fn) not in seen_fn:
                        seen_fn.add(_id(fn))
                        functions.append(_function_record(fn))
    return (name, module, _type(module), entries, frozenset(module.__dict__), _tuple(classes), _split(entries))


def _split(pairs: tuple) -> tuple:
    """``((key, ...), (value, ...))`` of ``pairs``."""
    return _tuple(k for k, _ in pairs), _tuple(v for _, v in pairs)


def _same(have, split) -> bool:
    """Whether ``have`` (a dict or mapping proxy) holds each recorded value under its key, the very
    object (a test by identity, in C: no code of a value's runs)."""
    keys, values = split
    return _all(_map(_is, values, _map(have.get, keys)))


def _put_back(have, entries, prefix, why, setter, out, missing) -> None:
    """Name (and with a ``setter``, put back) each recorded entry that ``have`` no longer holds,
    unless a library's own code replaced it."""
    for key, value in entries:
        now = have.get(key, missing)
        if now is not value and not _library(now):
            out.append(f"{prefix}{key}{why}")
            if setter is not None:
                setter(key, value)


def _sweep_module(rec, fix, out, missing) -> None:
    name, module, cls, entries, keys, classes, split = rec
    if _modules.get(name) is not module:
        out.append(f"sys.modules[{name!r}] (replaced)")
        if fix:
            _modules[name] = module
    if _type(module) is not cls:
        out.append(f"{name}.__class__ (replaced)")
        if fix:
            module.__class__ = cls
    d = module.__dict__
    if not _same(d, split):
        _put_back(d, entries, f"{name}.", " (replaced)", d.__setitem__ if fix else None, out, missing)
    for key in _SHADOWS.intersection(d).difference(keys):
        if not _library(d[key]):
            out.append(f"{name}.{key} (added)")
            if fix:
                del d[key]
    for klass, members, member_split, all_keys, data_split in classes:
        have = klass.__dict__
        if _same(have, member_split) and have.keys() == all_keys and _same(have, data_split):
            continue  # (the fast path: every key as recorded, each holding the same object)
        _put_back(have, members, f"{name}.{klass.__qualname__}.", " (replaced in the class)",
                  (lambda k, v, klass=klass: _setattr(klass, k, v)) if fix else None, out, missing)
        if _len(have) != _len(members):
            known = {key for key, _ in members}
            for key in [k for k in have if k not in known and _code(have[k]) and not _library(have[k])]:
                out.append(f"{name}.{klass.__qualname__}.{key} (added to the class)")
                if fix:
                    _delattr(klass, key)


def _data_record(name, module) -> tuple:
    """(container, its items, ((member, its __dict__ items), ...)) for each module-level dict or
    list of a data module."""
    out = []
    for key, value in list(module.__dict__.items()):
        if key.startswith("__"):  # __builtins__ and the like: the interpreter's, not the catalogue's
            continue
        if _type(value) is dict:
            items = _tuple(value.items())
            members = [v for _, v in items]
        elif _type(value) is list:
            items = _tuple(value)
            members = list(items)
        else:
            continue
        fields = _tuple((m, _tuple(m.__dict__.items())) for m in members
                        if _hasattr(m, "__dict__") and not _isinstance(m, (type, _ModuleType, _FunctionType)))
        out.append((f"{name}.{key}", value, items, fields))
    return _tuple(out)


def _frozen(value) -> bool:
    """A frozen dataclass instance (a ``Pipeline``, a ``ModelConfig``): only ``object.__setattr__``
    changes its fields, in place, so the object stays the same and a check by identity misses it."""
    if _isinstance(value, type):
        return False
    for klass in _type(value).__mro__:  # read from the classes' dicts: no class attribute hook runs
        params = klass.__dict__.get("__dataclass_params__")
        if params is not None:
            if _getattr(params, "frozen", False) is not True:
                return False
            try:  # a slotted one has no __dict__ (object.__getattribute__: no __getattr__ runs)
                return _isinstance(_object_getattribute(value, "__dict__"), dict)
            except AttributeError:
                return False
    return False


def _constants(values, seen: set) -> tuple:
    """(instance, its fields) for each frozen dataclass instance among ``values`` and, in turn, among
    their fields (a pipeline's model config), each once (``seen``: ids)."""
    out, stack = [], list(values)
    while stack:
        value = stack.pop()
        if _id(value) in seen or not _frozen(value):
            continue
        seen.add(_id(value))
        items = _tuple(_object_getattribute(value, "__dict__").items())
        out.append((value, items))
        stack.extend(v for _, v in items)
    return _tuple(out)


def _put_back_fields(value, want, what, fix, out) -> None:
    """Name (``what``; with ``fix``, put back) the fields of ``value`` that differ from ``want``."""
    have = _object_getattribute(value, "__dict__")
    if _len(have) != _len(want) or any(have.get(k, out) is not v for k, v in want):
        out.append(what)
        if fix:
            for k in [k for k in have if k not in dict(want)]:
                object.__delattr__(value, k)
            for k, v in want:
                object.__setattr__(value, k, v)


def _sweep_constant(rec, fix, out) -> None:
    value, want = rec
    _put_back_fields(value, want, f"a {_type(value).__name__}'s fields (changed in place)", fix, out)


def _sweep_data(rec, fix, out) -> None:
    label, container, items, fields = rec
    now = _tuple(container.items()) if _type(container) is dict else _tuple(container)
    if _len(now) != _len(items) or any((a[0] != b[0] or a[1] is not b[1]) if _type(container) is dict else a is not b
                                       for a, b in zip(now, items)):
        out.append(f"{label} (its contents changed)")
        if fix:
            if _type(container) is dict:
                container.clear()
                container.update(items)
            else:
                container[:] = items
    for member, want in fields:
        _put_back_fields(member, want, f"{label}: a {_type(member).__name__}'s fields (changed)", fix, out)


def _where(fn) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def _sweep_function(rec, fix, out, missing) -> None:
    fn, code, defaults, kwdefaults, cells, attrs = rec
    if fn.__code__ is not code:
        out.append(f"{_where(fn)}.__code__ (replaced)")
        if fix:
            fn.__code__ = code
    if fn.__defaults__ is not defaults:
        out.append(f"{_where(fn)}.__defaults__ (replaced)")
        if fix:
            fn.__defaults__ = defaults
    if fn.__kwdefaults__ is not kwdefaults:
        out.append(f"{_where(fn)}.__kwdefaults__ (replaced)")
        if fix:
            fn.__kwdefaults__ = kwdefaults
    for i, cell, value in cells:
        try:
            now = cell.cell_contents
        except ValueError:
            now = missing
        if now is not value and not _library(now):
            out.append(f"{_where(fn)} closure cell {i} (replaced)")
            if fix:
                cell.cell_contents = value
    if attrs is not None:
        have = _function_dict(fn)
        if _len(have) != _len(attrs) or any(have.get(k, missing) is not v for k, v in attrs):
            out.append(f"{_where(fn)}.__dict__ (its attributes changed)")
            if fix:
                have.clear()
                have.update(attrs)


_get_code, _get_defaults, _get_kwdefaults = (operator.attrgetter(a) for a in ("__code__", "__defaults__", "__kwdefaults__"))


def _code_writes():
    """``(count, hook)``: an audit hook that counts every write of a function's ``__code__``,
    ``__defaults__`` or ``__kwdefaults__`` (CPython raises ``object.__setattr__`` for each, refused
    or not), and the one-item list it counts in. Reading each recorded function's ``__code__`` and
    ``__defaults__`` raises an audit event too (about 10,000 a sweep, most of a sweep's time), so a
    sweep reads them only when the count has moved since its last clean look."""
    count, type_, len_, str_, names = [0], type, len, str, ("__code__", "__defaults__", "__kwdefaults__")

    def hook(event, args):
        if event == "object.__setattr__" and len_(args) > 1 and type_(args[1]) is str_:
            for name in names:
                if str_.__eq__(args[1], name):
                    count[0] += 1
    return count, hook


_writes, _writes_hook = _code_writes()
sys.addaudithook(_writes_hook)


def _functions_same(functions: list, batch: list) -> bool:
    """Whether every recorded function still holds its code, defaults, closure cells and attributes
    (the fast path of a sweep: each compared by identity in C loops; ``batch`` caches the records
    as columns, remade when more are recorded)."""
    if not batch or batch[0] != _len(functions):
        fns = _tuple(r[0] for r in functions)
        with_cells = _tuple(r for r in functions if r[4])
        with_attrs = _tuple(r for r in functions if r[5] is not None)
        batch[:] = [_len(functions), fns, _tuple(r[1] for r in functions), _tuple(r[2] for r in functions),
                    _tuple(r[3] for r in functions), with_cells, with_attrs, [-1]]
    _, fns, codes, defaults, kwdefaults, with_cells, with_attrs, seen = batch
    if seen[0] != _writes[0]:  # a function's code or defaults were written since the last clean look
        seen[0] = _writes[0]
        if not (_all(_map(_is, codes, _map(_get_code, fns))) and _all(_map(_is, defaults, _map(_get_defaults, fns)))
                and _all(_map(_is, kwdefaults, _map(_get_kwdefaults, fns)))):
            seen[0] = -1  # and look again next time
            return False
    for rec in with_cells:
        for _, cell, value in rec[4]:
            try:
                if cell.cell_contents is not value:
                    return False
            except ValueError:
                return False
    for rec in with_attrs:
        have, attrs = _function_dict(rec[0]), rec[5]
        if _len(have) != _len(attrs) or not _all(_map(_is, (v for _, v in attrs), _map(have.get, (k for k, _ in attrs)))):
            return False
    return True


def _sweep_hooks(rec, fix, out) -> None:
    label, owner, attr, registry, items = rec
    if owner.__dict__.get(attr) is not registry:
        out.append(f"{label} (replaced)")
        if fix:
            _setattr(owner, attr, registry)
    now = _tuple(registry.items())
    if _len(now) != _len(items) or any(a[0] != b[0] or a[1] is not b[1] for a, b in zip(now, items)):
        out.append(f"{label} (a global hook registered)")
        if fix:
            registry.clear()
            registry.update(items)


def _recorder():
    """``record``, ``sweep`` and ``recorded``, sharing records that no module attribute holds."""
    modules_done, functions, hooks, data, constants = [], [], [], [], []
    names, seen_fn, seen_cls, hooked, passed, data_done = set(), set(), set(), set(), set(), set()
    seen_const = set()
    batch: list = []  # the functions' records as columns, for ``_functions_same``

    def record(finished: str | None = None) -> int:
        """Record every wanted, fully imported module not recorded yet; how many were new.
        ``finished``: a module whose code has run to its end though its import has not returned yet
        (an import hook calls this from its loader's ``exec_module``): it is recorded now too."""
        new = 0
        if _len(_modules) == _len(names) + _len(passed) and not (data_names() - data_done):
            return 0  # (a cheap test: sys.modules only grows, save a deleted entry)
        for name, module in list(_modules.items()):
            if name in names or name in passed:
                continue
            if not _isinstance(module, _ModuleType) or not wanted(name):
                passed.add(name)
                continue
            if _initializing(module) and name != finished:
                continue
            names.add(name)
            modules_done.append(_module_record(name, module, seen_fn, seen_cls, functions))
            if name == "course" or name.startswith("course."):  # its module-level pipelines and configs
                constants.extend(_constants(_tuple(module.__dict__.values()), seen_const))
        for name in sorted(names - data_done):  # data once its package has finished importing (the
            if not any(name == m or (m.endswith(".") and name.startswith(m)) for m in DATA_MODULES):
                continue  # catalogue fills its registry as the package imports its families)
            pname = name.split(".")[0] + "." + name.split(".")[1] if name.count(".") else None
            package = _modules.get(pname) if pname else None
            if package is None or (_initializing(package) and pname != finished):
                continue
            data_done.add(name)
            records = _data_record(name, _modules[name])
            data.extend(records)
            # and the pipelines and configs the catalogue's entries hold (a mystery set's base)
            constants.extend(_constants(_tuple(v for *_, fields in records for _, items in fields
                                               for _, v in items), seen_const))
            new += 1
        for module_name, attr in GLOBAL_HOOKS:
            owner = _modules.get(module_name)
            registry = _getattr(owner, attr, None)
            if (module_name, attr) not in hooked and registry is not None and _hasattr(registry, "items"):
                hooked.add((module_name, attr))
                hooks.append((f"{module_name}.{attr}", owner, attr, registry, _tuple(registry.items())))
        return new

    def data_names() -> set:
        return {n for n in names if any(n == m or (m.endswith(".") and n.startswith(m)) for m in DATA_MODULES)}

    def sweep(fix: bool) -> list:
        record()
        out, missing = [], object()
        for rec in modules_done:
            _sweep_module(rec, fix, out, missing)
        if not _functions_same(functions, batch):
            for rec in functions:
                _sweep_function(rec, fix, out, missing)
        for rec in hooks:
            _sweep_hooks(rec, fix, out)
        for rec in data:
            _sweep_data(rec, fix, out)
        for rec in constants:
            _sweep_constant(rec, fix, out)
        return out

    def recorded() -> tuple:
        return _tuple(sorted(names))
    return record, sweep, recorded


record, _sweep, recorded = _recorder()
record.__doc__ = """Record every module of ``MODULES`` that is fully imported now and not recorded yet (a
module still being imported is left for later: its code is not all there), and the module named
``finished`` (an import hook's, whose code has just run to its end); return how many. Call it
before learner code can have changed what it records."""
recorded.__doc__ = """The names of the modules recorded so far."""


def changed() -> list[str]:
    """What differs from the records now, by name; nothing is touched."""
    return _sweep(False)


def restore() -> list[str]:
    """Put back everything that differs from the records; the names of what was put back."""
    return _sweep(True)
