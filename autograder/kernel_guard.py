"""Monkeypatch and shell guard, run inside the grading kernel at start (before any student code).

``install(shell)`` snapshots what test cells rely on, while it is still pristine:
- every entry of ``builtins`` (``abs``, ``isinstance``, ``AssertionError``, ``__import__``, ...);
- the public attributes of the guarded modules (COURSE_GUARDED, space-separated module names;
  default ``GUARDED``: a few standard and torch modules, and every module of ``course``), and each module's class and ``sys.modules`` entry. A module already
  imported is snapshotted now; one imported later (torch, course.exercises.mystery) right after its own
  import finishes, by an import hook, so a student cell that imports and patches it at once is
  still caught. A library import that rebinds a guarded module's attribute on purpose (importing
  ``torch._dynamo``, lazily, wraps ``torch.manual_seed``) is adopted into the snapshot: what that
  import changed, and was untouched when it began (``SIDE_EFFECT_IMPORTS``);
- IPython's execution path, from source to result (the "shell"): the methods and helper objects
  on it (``run_cell``, ``transform_cell``, ``compile``, ``displayhook``, ``showtraceback``, the
  kernel's ``do_execute`` and session, ...), the classes and modules they come from, the input
  transformers (cleanup, line, token, post), the prefilter's transformers/checkers/handlers, the
  AST transformers, the event callbacks, the custom exception handler, the traceback mode, and
  that no trace or profile function is set.
It registers an IPython ``pre_run_cell`` hook that reacts to two control cells the grader sends
(``autograder.sandboxed_execute``), and to the one cell between them, never to other cells:
- ``#course-guard pre {"names": [...], "sha": ...}`` before each autograder-test cell: put every
  snapshotted reference back, point the user namespace's ``__builtins__`` at the real module, drop
  user globals that shadow a builtin named in the test and rebind a guarded module's own name
  (``math``, ``torch``) if it was rebound; put IPython's execution path back: what the submission
  replaced (a method, a helper object, a class or module function) is restored for good and
  reported as ``tampered``; what IPython lets a notebook add for its own cells (input/AST
  transformers, event callbacks, a custom exception handler) is *suspended*: the test runs without
  it, and ``post`` puts it back; a trace/profile function is removed. Report: ``restored``,
  ``suspended`` (the submission's own additions, by name; a library's are suspended quietly),
  ``tampered``;
- the test cell itself (at its ``pre_run_cell``, after IPython transformed it, before it is
  compiled): check again, and that the hook was called by IPython's own event manager from
  IPython's own ``run_cell`` path, that no other ``pre_run_cell`` callback runs in this cell, that
  the cell is the one announced (sha256) and was transformed exactly as the pristine path does;
  then, last, take the test's secret out of the request's metadata (``SECRET_METADATA``; never in a
  cell's text, which the submission's input transformers are handed before any hook runs) into
  ``course.toolkit.salts``. Report ``{"stage": "test", "tampered": [...], "keyed": bool}`` (the
  grader requires exactly one such line in the test cell, and removes it);
- ``#course-guard post``  after the test cell: empty the secret's box first, then run the
  suspended transformers on the test's source (one that would have changed its code is reported in
  ``rewrote``), report what changed while the test ran (a patch made inside a graded function, a
  hook added), restore it, and put the suspended additions back. For a test with a secret
  (``"keyed"`` in the pre payload), what was alive at the end of the pre stage is held until here, so
  no finalizer of the submission's runs while the secret is out.
Reports are one stdout line ``course-guard: {json}``; the grader decides what they cost.

Limits (stated in the instructor guide): student code shares the interpreter with the tests, so
code written to find and disable this guard (through the garbage collector, frame objects,
``ctypes``, or functions disguised as library code) can; a patch that undoes itself before the test
cell ends is not seen; an audit hook (``sys.addaudithook``) cannot be removed; objects returned
by student code (``__eq__`` that always says True) are the tests' job. The guard stops the
ordinary ways of making a test pass by replacing what it calls or how IPython runs it.
"""
import ast
import builtins
import contextvars
import datetime
import gc
import hashlib
import importlib.abc
import io
import json
import os
import sys
import threading
import types

# What a test cell's name may keep after the test (kernel_guard's forget_test): a definition or an
# import, and, for a name the notebook bound before the test, its old value when also a plain constant
DEFINITION_TYPES = frozenset({types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type})
KEPT_TYPES = DEFINITION_TYPES | frozenset({int, float, complex, str, bytes, bool, type(None)})


def course_modules() -> tuple:
    """Every module of the ``course`` package, named from its files (nothing is imported): hidden
    tests call the package's checks (``course.lessons.throughput.problems``, ``course.lessons.valgap...``), so a
    submission must not be able to replace any of them. Empty where ``course`` is not installed."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("course")
    if spec is None or not spec.submodule_search_locations:
        return ()
    root = Path(list(spec.submodule_search_locations)[0])
    names = []
    for f in sorted(root.rglob("*.py")):
        parts = f.relative_to(root).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        names.append(".".join(("course",) + parts))
    return tuple(names)


GUARDED = ("math", "cmath", "operator", "functools", "numpy", "numpy.testing", "torch",
           "torch.testing", "torch.nn.functional") + course_modules()
# importing the key rebinds attributes of the listed guarded modules on purpose
SIDE_EFFECT_IMPORTS = {"torch._dynamo": ("torch",)}
# modules of IPython's execution path: their functions and classes must stay the originals
PATH_MODULES = ("IPython.core.interactiveshell", "IPython.core.events", "IPython.core.inputtransformer2",
                "IPython.core.compilerop", "IPython.core.prefilter", "IPython.core.displayhook",
                "IPython.core.displaypub", "IPython.core.ultratb", "IPython.core.builtin_trap",
                "IPython.core.display_trap", "ipykernel.ipkernel", "ipykernel.kernelbase",
                "ipykernel.zmqshell", "ipykernel.iostream", "ipykernel.displayhook", "ipykernel.compiler",
                "jupyter_client.session", "ast", "codeop")
PATH_PACKAGES = ("IPython", "ipykernel", "jupyter_client")
# helper objects of the shell (owner, attribute): replacing one is tampering
PATH_ATTRS = (("shell", "kernel"), ("shell.kernel", "session"), ("shell", "events"),
              ("shell.events", "callbacks"), ("shell", "compile"), ("shell", "displayhook"),
              ("shell", "display_pub"), ("shell", "display_trap"), ("shell", "builtin_trap"),
              ("shell", "input_transformer_manager"), ("shell", "prefilter_manager"),
              ("shell", "InteractiveTB"), ("shell", "SyntaxTB"), ("shell", "user_module"),
              ("shell", "user_ns"), ("shell.display_trap", "hook"), ("shell.displayhook", "pub_socket"),
              ("shell.kernel", "iopub_socket"), ("shell.kernel", "iopub_thread"))
# parts of the path that only display an error: replacing them hides nothing from nbgrader
DISPLAY_ONLY = ("showtraceback", "_showtraceback", "showsyntaxerror", "showindentationerror")
MARK = "#course-guard"
# "0" when no cell of the assignment's source notebook or of the submission imports course (set by
# autograder.sandboxed_execute.imports_course): the package is then not imported at the kernel's
# start (about 2.4 s: torch and torch._dynamo with it)
PRELOAD_ENV = "COURSE_GUARD_PRELOAD"
# the key of the test cell's request metadata that carries the test's secret (course.toolkit.salts)
SECRET_METADATA = "course-guard-secret"
_MISSING = object()


def install(shell) -> None:
    """Snapshot and register the hook on IPython ``shell`` (``get_ipython()``)."""
    if os.environ.get("COURSE_GUARD", "1") == "0":
        return
    wanted = tuple((os.environ.get("COURSE_GUARDED") or " ".join(GUARDED)).split())
    bdict = builtins.__dict__
    # ipykernel rebinds builtins.input around every execution (stdin forwarding),
    # and IPython re-adds get_ipython/display/exit/quit (new bound methods) around every cell
    managed = ("input", "_", "__", "___", "get_ipython", "display", "exit", "quit")
    pristine_builtins = {k: v for k, v in bdict.items() if k not in managed}
    snap = {}            # module name -> (module, its class, {public name: object})
    course_classes = {}  # a class defined in course -> its __dict__ when its module was imported
    modules = sys.modules
    real_stdout = sys.stdout
    write, flush = real_stdout.write, real_stdout.flush
    dumps, loads = json.dumps, json.loads
    getattr_, setattr_, hasattr_, delattr_, isinstance_, id_ = getattr, setattr, hasattr, delattr, isinstance, id
    callable_, type_, list_, dict_, tuple_, len_ = callable, type, list, dict, tuple, len
    settrace, gettrace, setprofile, getprofile = sys.settrace, sys.gettrace, sys.setprofile, sys.getprofile
    getframe, referrers = sys._getframe, gc.get_referrers
    get_objects = gc.get_objects
    gc_collect, gc_freeze, gc_unfreeze = gc.collect, gc.freeze, gc.unfreeze  # the gc module is the submission's too
    sha256 = hashlib.sha256
    no_secret = sha256(b"").hexdigest()  # the digest the guard keeps while no secret is out
    parse, dump = ast.parse, ast.dump
    user_ns = shell.user_ns
    import linecache
    line_cache, filename_map = linecache.cache, getattr(shell.compile, "_filename_map", {})
    compilerop = modules.get("IPython.core.compilerop")

    # No other process of the kernel's user may read the kernel's memory or a graded call's (fork)
    # while a test runs: a helper process the submission started could otherwise sample the sealed
    # call's stack with py-spy, or read the test's locals (red team, run 11). PR_SET_DUMPABLE 0 does
    # that (ptrace and /proc/<pid>/mem need CAP_SYS_PTRACE, which nothing in the sandbox has; a fork
    # keeps it, an exec resets it). Set now and before each test; a test during which it was set back
    # is void.
    try:
        import ctypes
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl.restype = ctypes.c_int
    except (ImportError, OSError, AttributeError):
        prctl = None

    def undumpable():
        """Make this process undumpable; the problems found (names), none when it already was."""
        if prctl is None:
            return []
        was = prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
        prctl(4, 0, 0, 0, 0)         # PR_SET_DUMPABLE 0
        return [] if was == 0 else ["the kernel's process was made readable by other processes (PR_SET_DUMPABLE)"]

    undumpable()

    def cache_check():
        """IPython writes every cell's text, a test's included, to ``linecache.cache`` as it compiles
        it: that dict, and the module IPython's compiler reaches it through, must be the originals."""
        out = []
        if compilerop is not None and compilerop.__dict__.get("linecache") is not linecache:
            compilerop.__dict__["linecache"] = linecache
            out.append("IPython.core.compilerop.linecache (replaced)")
        if linecache.__dict__.get("cache") is not line_cache:
            linecache.__dict__["cache"] = line_cache
            out.append("linecache.cache (replaced)")
        return out
    prefixes = tuple(sorted({os.path.realpath(p) + os.sep for p in
                             (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}))

    part_codes: list = []  # the code objects a mystery part copies (``snapshot``)

    def snapshot(name, module):
        # course's own modules: private names too (the graded-call isolation and the mystery
        # registry are private), and the methods of the classes they define
        own = name == "course" or name.startswith("course.")
        attrs = {k: v for k, v in module.__dict__.items()
                 if not k.startswith("_") or (own and not (k.startswith("__") and k.endswith("__")))}
        snap[name] = (module, type(module), attrs)
        if name == "course.exercises.mystery":  # as imported, before any submitted code could change it
            part_codes.extend(c for c in getattr_(module, "_HOLDER_CODES", ()) if type_(c) is types.CodeType)
        if own:
            for v in attrs.values():
                if isinstance_(v, type) and getattr_(v, "__module__", None) == name:
                    course_classes[v] = dict(v.__dict__)

    # the package and the libraries a graded call runs on (course.exercises.pristine), recorded now,
    # before any submitted code, and again right after each guarded module's import (torch, each
    # module of course): put back before each test, so the test cell's own work runs on them too.
    # The file is loaded on its own, under its package name: importing the package would import
    # torch in every kernel, a toy course's too
    import importlib.util
    try:
        course_spec = importlib.util.find_spec("course")
    except (ImportError, ValueError):
        course_spec = None

    def load_alone(name, *parts):
        """The module ``name`` of course (its file: ``parts`` under the package), loaded on its own
        under its name unless already imported; None when course or the file is missing."""
        module = modules.get(name)
        if module is None and course_spec is not None and course_spec.submodule_search_locations:
            path = os.path.join(list(course_spec.submodule_search_locations)[0], *parts)
            if os.path.isfile(path):
                spec = importlib.util.spec_from_file_location(name, path)
                module = importlib.util.module_from_spec(spec)
                modules[name] = module
                spec.loader.exec_module(module)
        return module

    if os.environ.get("COURSE_STUDENT_ID"):
        # the grader's student id, read before any submitted code runs (course.exercises.identity), and
        # snapshotted with the rest of course: a test cell always sees the id the grader passed. The
        # whole package is imported with it (every module of course snapshotted before any submitted
        # code, torch with it), unless the grader says no cell of the source or the submission
        # imports course (``PRELOAD_ENV`` "0": a toy course's, sandboxed_execute.imports_course); then the
        # file is loaded on its own, and a later import of course is snapshotted by the hook below
        try:
            if os.environ.get(PRELOAD_ENV, "1") == "0":
                load_alone("course.exercises.identity", "exercises", "identity.py")
            else:
                __import__("course.exercises.identity")
        except (ImportError, OSError, SyntaxError):
            pass
    pristine_record = pristine_restore = pristine_code = None
    try:
        pristine = load_alone("course.exercises.pristine", "exercises", "pristine.py")
        if pristine is not None:
            pristine_record, pristine_restore = pristine.record, pristine.restore
            pristine_code = (pristine_record.__code__, pristine_restore.__code__)
            pristine_record()
    except (ImportError, AttributeError, OSError, SyntaxError):
        pristine_record = pristine_restore = None
    # the box of the grader's secret for each test's hidden draws (course.toolkit.salts), loaded on
    # its own like pristine (it imports nothing) and held here: the test cell's own start fills it
    # (the secret comes in that request's metadata, never in a cell's text), the control cell after
    # it empties it, and a test during which it changed is void
    salt_box = None
    try:
        box = getattr(load_alone("course.toolkit.salts", "toolkit", "salts.py"), "CURRENT", None)
        salt_box = box if type(box) is list else None
    except (ImportError, AttributeError, OSError, SyntaxError):
        salt_box = None
    for name in wanted:
        if name in modules:
            snapshot(name, modules[name])

    def drifted(name):
        """Public names of guarded module ``name`` that differ from its snapshot now."""
        module, _, attrs = snap[name]
        d = module.__dict__
        return {k for k, v in attrs.items() if d.get(k, _MISSING) is not v}

    def adopt(targets, before):
        """After a side-effect import: take into the snapshot what the import itself changed."""
        for name in targets:
            if name not in snap or name not in before:
                continue
            module, _, attrs = snap[name]
            for k, v in list_(module.__dict__.items()):
                if not k.startswith("_") and k not in before[name] and attrs.get(k, _MISSING) is not v:
                    attrs[k] = v

    class Hook(importlib.abc.MetaPathFinder):
        """Snapshot a guarded module right after its first import completes."""
        def find_spec(self, name, path=None, target=None):
            side = SIDE_EFFECT_IMPORTS.get(name)
            if (name not in wanted or name in snap) and side is None:
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr_(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
            loader = spec.loader
            if loader is None or not hasattr_(loader, "exec_module"):
                return spec
            inner = loader.exec_module

            if side is None:
                def exec_module(module):
                    inner(module)
                    snapshot(name, module)
                    for then in after_import:
                        then()
                    if pristine_record is not None:
                        # this module now, as its code left it (its import has not returned yet,
                        # so a plain record would leave it for later, after the submission's code)
                        pristine_record(name)
                    if name == "course.exercises.isolation":
                        warm_up(module)
            else:
                def exec_module(module):
                    before = {m: drifted(m) for m in side if m in snap}
                    try:
                        inner(module)
                    finally:
                        adopt(side, before)
            try:
                loader.exec_module = exec_module
            except (AttributeError, TypeError):
                pass
            return spec

    def warm_up(isolation):
        # what torch imports on a first optimizer step, imported while no test runs: else the
        # first graded call imports it twice (in its own process, and again in the kernel), about
        # a second each
        warm = isolation.__dict__.get("_warm_up")
        if callable_(warm):
            warm()

    after_import = []  # more to record after a guarded import (the modules' specs, below)
    sys.meta_path.insert(0, Hook())
    if "course.exercises.isolation" in modules:  # imported above, with the student id; after the
        # hook, so what torch._dynamo's import rebinds in torch is adopted as the library's own
        warm_up(modules["course.exercises.isolation"])

    # No audit hook of a submission's: one cannot be removed, and it would see every test cell's
    # source as it is compiled. A process forked from the kernel (a graded call's, course.exercises.isolation)
    # may add its own seal.
    kernel_pid, getpid = os.getpid(), os.getpid
    # Nor a copy of a function of the course package (``types.FunctionType(f.__code__, ...)``, red team,
    # 2026-12-07): a test's ``off=`` switches the package's function off, never a copy of it, so a copy
    # made in an answer cell ran the package's answer inside the graded call. Only the package's own
    # copies are made: by a module of ``course`` at its import (``nonfinite._bad``) and by
    # ``course.exercises.isolation._switch_off_for_good`` (its gates, in a graded call's process). Any
    # other caller is refused, a package function included: one that calls a callable the notebook
    # handed it (a ``functools.partial`` of ``FunctionType`` as an optimizer's ``step``) would make
    # the copy for it (a fresh reader, 2026-12-07). The seal refuses the same
    # (course.exercises.isolation).
    course_spec = importlib.util.find_spec("course")  # located, not imported (that imports torch)
    course_dir = os.path.dirname(os.path.abspath(course_spec.origin)) + os.sep \
        if course_spec is not None and course_spec.origin else None
    code_type = types.CodeType
    own_copiers = frozenset({"<module>", "_switch_off_for_good"})

    def no_more_hooks(event, args):
        if event == "sys.addaudithook" and getpid() == kernel_pid:
            raise RuntimeError("audit hooks are refused in the grading kernel")
        if event == "function.__new__" and course_dir and args and type_(args[0]) is code_type \
                and args[0].co_filename.startswith(course_dir):
            for code in part_codes:  # a mystery part's own code, copied into each part it makes:
                if code is args[0]:  # no test switches it off (course.exercises.mystery._HOLDER_CODES)
                    return
            caller = getframe(1).f_code
            if not (caller.co_filename.startswith(course_dir) and caller.co_name in own_copiers):
                raise PermissionError("copying a function of the course package (types.FunctionType on its "
                                      "code) is refused while grading: a test switches the package's "
                                      "function off, and a copy of it would answer for you")
    sys.addaudithook(no_more_hooks)

    # ---- IPython's execution path ---------------------------------------------------------
    refs = {"shell": shell}
    for owner, attr in PATH_ATTRS:
        refs[f"{owner}.{attr}"] = getattr(refs.get(owner), attr, None)
    streams = {"sys.stdout": sys.stdout, "sys.stderr": sys.stderr}
    stream_parents = {name: getattr_(stream, "set_parent", None) for name, stream in streams.items()}
    plain = (dict, list, tuple, types.ModuleType, type(None))
    objects, seen = {}, set()
    for k, v in [*refs.items(), *streams.items()]:
        if k not in ("shell.user_module", "shell.user_ns") and not isinstance(v, plain) \
                and hasattr(v, "__dict__") and id(v) not in seen:
            objects[k] = v
            seen.add(id(v))
    kernel = refs["shell.kernel"]
    # the running shell request: ipykernel keeps it in a ContextVar, bound here before any code of
    # the submission's runs, so taking the test's secret out of it calls nothing of theirs
    parent_var = getattr(kernel, "_shell_parent", None)
    parent_var = parent_var if type(parent_var) is contextvars.ContextVar else None
    var_get, dict_get, dict_pop = contextvars.ContextVar.get, dict.get, dict.pop
    # The kernel's own I/O objects, every attribute as first seen (not only their methods): the
    # grader writes through them during a test, its guard's report included, so an object of the
    # submission's planted in one (a stream's ``echo``, a wrapped lock, a session's signer) would
    # run there, on the test's frames (red team, run 7)
    pub_thread = getattr(sys.stdout, "pub_thread", None)
    io_objects = {}
    for name, obj in (("sys.stdout", sys.stdout), ("sys.stderr", sys.stderr),
                      ("shell.kernel.session", getattr(kernel, "session", None)),
                      ("sys.stdout.pub_thread", pub_thread),
                      ("shell.displayhook", getattr(shell, "displayhook", None)),
                      ("shell.display_pub", getattr(shell, "display_pub", None))):
        if obj is not None and isinstance(getattr(obj, "__dict__", None), dict):
            io_objects[name] = (obj, dict(obj.__dict__))
    buffers_factory = {name: getattr(d.get("_buffers"), "default_factory", None)
                       for name, (_, d) in io_objects.items()}
    tables = {f"kernel.{t}": (getattr(kernel, t), dict(getattr(kernel, t)))
              for t in ("shell_handlers", "control_handlers") if isinstance(getattr(kernel, t, None), dict)}
    # CustomTB and its exception tuple are the custom-exception family (suspended, below);
    # a stream's ``write`` is rebound by IPython's output capture around every cell
    skip = {("shell", "CustomTB"), ("shell", "custom_exceptions"), ("sys.stdout", "write"),
            ("sys.stderr", "write")}

    def members(obj):
        d = getattr(obj, "__dict__", None) or {}
        out = dict(d)
        tv = d.get("_trait_values")
        if isinstance(tv, dict):
            out.update({f"trait {k}": v for k, v in tv.items()})
        return out

    def codeish(v):
        return callable(v) and not isinstance(v, (dict, list, tuple))

    inst = {name: {k: v for k, v in members(obj).items() if codeish(v)} for name, obj in objects.items()}
    classes = {}
    extra = [getattr(modules.get("IPython.core.interactiveshell"), n, None)
             for n in ("ExecutionResult", "ExecutionInfo")]
    for cls0 in [*(type(o) for o in objects.values()), *(c for c in extra if isinstance(c, type))]:
        for cls in cls0.__mro__:
            if cls.__module__.split(".")[0] in PATH_PACKAGES and cls not in classes:
                classes[cls] = dict(vars(cls))
    pmods = {}
    for name in PATH_MODULES:
        mod = modules.get(name)
        if mod is not None:
            pmods[name] = (mod, {k: v for k, v in vars(mod).items() if codeish(v)})
    trigger_code = type(shell.events).trigger.__code__
    run_async_code = type(shell).run_cell_async.__code__
    do_execute = getattr(type(refs["shell.kernel"]), "do_execute", None)
    stop_codes = {getattr(do_execute, "__code__", None)}
    allowed_codes = set()
    for d in [*classes.values(), *(m for _, m in pmods.values())]:
        for v in d.values():
            v = getattr(v, "__func__", v)
            code = getattr(v, "__code__", None)
            if code is not None:
                allowed_codes.add(code)
    pristine_transform = type(shell).transform_cell
    xmode = getattr(shell.InteractiveTB, "mode", None)
    flags = getattr(shell.compile, "flags", None)

    def path_check(fix):
        """Replaced parts of the execution path (names); restore them when ``fix``."""
        out = []
        for owner, attr in PATH_ATTRS:
            want = refs[f"{owner}.{attr}"]
            holder = refs.get(owner)
            if getattr_(holder, attr, _MISSING) is not want:
                out.append(f"{owner}.{attr} (replaced)")
                if fix:
                    setattr_(holder, attr, want)
        for name, obj in objects.items():
            have = members(obj)
            d = obj.__dict__
            tv = d.get("_trait_values") if isinstance_(d.get("_trait_values"), dict) else {}
            for k, v in inst[name].items():
                if (name, k) in skip or have.get(k, _MISSING) is v:
                    continue
                out.append(f"{name}.{k.replace('trait ', '')} (replaced)")
                if fix:
                    (tv if k.startswith("trait ") else d)[k.replace("trait ", "", 1)] = v
            for k in list_(d):
                if k not in inst[name] and (name, k) not in skip and hasattr_(type_(obj), k) \
                        and callable_(d[k]) and callable_(getattr_(type_(obj), k, None)):
                    out.append(f"{name}.{k} (replaced on the instance)")
                    if fix:
                        del d[k]
        for cls, want in classes.items():
            have = vars(cls)
            for k, v in want.items():
                if have.get(k, _MISSING) is not v:
                    out.append(f"{cls.__module__}.{cls.__qualname__}.{k} (replaced in the class)")
                    if fix:
                        setattr_(cls, k, v)
            for k in [k for k in have if k not in want]:
                out.append(f"{cls.__module__}.{cls.__qualname__}.{k} (added to the class)")
                if fix:
                    delattr_(cls, k)
        for name, (mod, want) in pmods.items():
            d = mod.__dict__
            for k, v in want.items():
                if d.get(k, _MISSING) is not v:
                    out.append(f"{name}.{k} (replaced)")
                    if fix:
                        d[k] = v
        for name, (table, want) in tables.items():
            for k, v in want.items():
                if table.get(k, _MISSING) is not v:
                    out.append(f"{name}[{k!r}] (replaced)")
                    if fix:
                        table[k] = v
        if flags is not None and getattr_(shell.compile, "flags", flags) != flags:
            out.append("compile.flags (changed)")
            if fix:
                shell.compile.flags = flags
        return out

    def rebound(fix):
        """``sys.stdout`` / ``sys.stderr`` bound to anything but the kernel's own streams (names);
        put back when ``fix``. The grader writes to them during a test (what a graded call printed
        is echoed there): a stream of the submission's would run on the test's frames."""
        out = []
        for name, want in streams.items():
            attr = name.split(".")[1]
            if getattr_(sys, attr, None) is not want:
                out.append(f"{name} (rebound)")
                if fix:
                    setattr_(sys, attr, want)
                    # ipykernel tells the stream which request it writes for only when sys.stdout
                    # is that stream as the request starts: else this cell's output (the guard's
                    # report too) would go out as the previous request's, and be lost
                    if stream_parents[name] is not None:
                        stream_parents[name](getattr_(shell, "parent_header", {}))
        return out

    # message headers carry their date as a datetime (jupyter_client): exactly that type, no subclass
    plain_types = (type(None), bool, int, float, complex, str, bytes, datetime.datetime)

    def plain(v, depth=0):
        """Data that runs nothing when the kernel uses it: builtin scalars and containers of them."""
        kind = type_(v)
        if kind in plain_types:
            return True
        if depth > 3:
            return False
        if kind in (list, tuple, set, frozenset):
            return all(plain(x, depth + 1) for x in v)
        if kind is dict:
            return all(plain(k, depth + 1) and plain(x, depth + 1) for k, x in v.items())
        return False

    def io_state_ok(name, key, value):
        """A change the kernel itself makes to an attribute of its I/O objects between cells."""
        if plain(value):
            return True
        if key == "write":  # rebound by IPython's output capture: a library function
            return library(value)
        if key == "_buffers":  # a fresh buffer per request, of the kind it had
            return type_(value).__name__ == "defaultdict" and value.default_factory is buffers_factory[name] \
                and all(type_(b) is io.StringIO for b in value.values())
        return name == "shell.displayhook" and key in ("_", "__", "___")  # the last results shown

    def io_check(fix):
        """Attributes of the kernel's I/O objects that the submission replaced or added (names),
        and callables it scheduled on the I/O thread; put back / removed when ``fix``."""
        out = []
        for name, (obj, want) in io_objects.items():
            d = obj.__dict__
            for k in list_(d):
                v = d[k]
                if want.get(k, _MISSING) is v or io_state_ok(name, k, v):
                    continue
                out.append(f"{name}.{k} ({'replaced' if k in want else 'added'})")
                if fix:
                    if k in want:
                        d[k] = want[k]
                    else:
                        del d[k]
            for k in want:
                if k not in d:
                    out.append(f"{name}.{k} (deleted)")
                    if fix:
                        d[k] = want[k]
        events = getattr_(pub_thread, "_events", None)
        if events is not None:
            foreign = [e for e in list_(events) if not library(e)]
            for e in foreign:
                out.append(f"a callable scheduled on the I/O thread ({describe(e)})")
                if fix:
                    try:
                        events.remove(e)
                    except ValueError:
                        pass
        return out

    def side_hooks(fix):
        """Trace/profile functions and the traceback mode: removed, named (no cost)."""
        out = []
        if gettrace() is not None:
            out.append(f"sys.settrace({describe(gettrace())})")
        if getprofile() is not None:
            out.append(f"sys.setprofile({describe(getprofile())})")
        for attr, what in (("_trace_hook", "threading.settrace"), ("_profile_hook", "threading.setprofile")):
            if getattr_(threading, attr, None) is not None:
                out.append(f"{what}({describe(getattr_(threading, attr))})")
                if fix:
                    setattr_(threading, attr, None)
        if fix:
            settrace(None)
            setprofile(None)
        if xmode is not None and getattr_(shell.InteractiveTB, "mode", xmode) != xmode:
            out.append(f"the traceback mode ({shell.InteractiveTB.mode})")
            if fix:
                shell.InteractiveTB.set_mode(xmode)
        return out

    # ---- the import machinery: what CPython reads or calls when a test imports a module -------
    # Every ``import x`` / ``from x import y`` of a module already imported reads
    # ``x.__spec__._initializing`` (and ``__path__``, and a module ``__getattr__`` for a missing
    # name); a module not yet imported goes through ``sys.meta_path``, ``sys.path_hooks``,
    # ``sys.path_importer_cache`` and importlib's own functions and classes. An object of the
    # submission's in any of them would run on the test's frames (red team, run 8: a ModuleSpec
    # subclass whose ``_initializing`` property read the test cell's source at its first import).
    import asyncio
    running_loop = asyncio.get_running_loop
    ModuleType_, FunctionType_ = types.ModuleType, types.FunctionType
    module_dict = ModuleType_.__dict__["__dict__"].__get__  # a module's namespace, whatever its class
    type_dict = type.__dict__["__dict__"].__get__
    type_mro = type.__dict__["__mro__"].__get__
    object_dict = object.__getattribute__
    bootstrap = [m for m in (modules.get("_frozen_importlib"), modules.get("_frozen_importlib_external"))
                 if m is not None]
    ModuleSpec_ = type_(sys.__spec__)
    import_code = {(m, k): v for m in bootstrap for k, v in vars(m).items() if codeish(v)}
    import_classes = {v: {k: x for k, x in vars(v).items() if codeish(x) or hasattr(type_(x), "__get__")}
                      for m in bootstrap for v in vars(m).values()
                      if isinstance(v, type) and getattr(v, "__module__", "") in
                      ("_frozen_importlib", "_frozen_importlib_external")}
    import_lists = {"sys.meta_path": sys.meta_path, "sys.path_hooks": sys.path_hooks,
                    "sys.path_importer_cache": sys.path_importer_cache}
    sys_path = sys.path
    module_specs = {}  # module name -> its spec as first seen clean (install, and each guarded import)

    def codes_of(x):
        """The code objects behind a class attribute, without running anything of its own."""
        kind = type_(x)
        if kind is FunctionType_:
            return (x.__code__,)
        if kind is staticmethod or kind is classmethod:
            return codes_of(x.__func__)
        if kind is property:
            return tuple_(c for f in (x.fget, x.fset, x.fdel) if f is not None for c in codes_of(f))
        return ()

    def foreign_class(cls, memo):
        """Whether class ``cls`` (or one it inherits from) has a method of the submission's."""
        verdict = memo.get(cls)
        if verdict is None:
            memo[cls] = False  # (a class reached again while it is being looked at)
            verdict = False
            for c in type_mro(cls):
                for x in type_dict(c).values():
                    if any(submission_file(code.co_filename) for code in codes_of(x)) or \
                            (type_(x) not in plain_types and type_(x) is not FunctionType_ and
                             type not in type_mro(type_(x)) and foreign_class(type_(x), memo)):
                        verdict = True
                        break
                if verdict:
                    break
            memo[cls] = verdict
        return verdict

    def foreign(v, memo):
        """Whether ``v`` is code of the submission's, or an object of a class with such code."""
        kind = type_(v)
        if kind in plain_types:
            return False
        if kind is FunctionType_ or kind is types.MethodType:
            return submission_callable(v)
        if kind is list or kind is tuple:
            return any(foreign(x, memo) for x in v)
        return foreign_class(v if type in type_mro(kind) else kind, memo)

    qualname_of = type.__dict__["__qualname__"].__get__

    def class_name(cls):
        """A class's name, read without running anything of its own (or of its metaclass)."""
        mod = type_dict(cls).get("__module__")
        name = qualname_of(cls)
        return name if type_(mod) is not str or mod in ("__main__", "builtins") else f"{mod}.{name}"

    def spec_ok(spec, memo):
        if spec is None:
            return True
        if type_(spec) is not ModuleSpec_:
            return False
        d = object_dict(spec, "__dict__")
        if "_initializing" in d and type_(d["_initializing"]) is not bool:
            return False
        return not any(foreign(v, memo) for v in d.values())

    def clean_spec(spec, memo):
        d = object_dict(spec, "__dict__")
        for k, v in list_(d.items()):
            if (k == "_initializing" and type_(v) is not bool) or foreign(v, memo):
                d[k] = False if k == "_initializing" else None

    def record_specs():
        memo = {}
        for name, m in list_(modules.items()):
            if name not in module_specs and type_(m) is ModuleType_:
                spec = module_dict(m).get("__spec__")
                if type_(spec) is ModuleSpec_ and spec_ok(spec, memo):
                    module_specs[name] = spec

    def import_check(fix):
        """What the submission put where the import machinery reads or calls it (names); put
        back or removed when ``fix``."""
        out, memo = [], {}
        if sys.__dict__.get("modules") is not modules:
            out.append("sys.modules (rebound)")
            if fix:
                sys.modules = modules
        for label, want in import_lists.items():
            attr = label.split(".", 1)[1]
            if sys.__dict__.get(attr) is not want:
                out.append(f"{label} (rebound)")
                if fix:
                    setattr_(sys, attr, want)
        for label in ("sys.meta_path", "sys.path_hooks"):
            lst = import_lists[label]
            bad = [x for x in list_(lst) if foreign(x, memo)]
            out += [f"{label}: {class_name(x if type in type_mro(type_(x)) else type_(x))}" for x in bad]
            if fix and bad:
                lst[:] = [x for x in lst if all(x is not b for b in bad)]
        cache = import_lists["sys.path_importer_cache"]
        for k, v in list_(cache.items()):
            if foreign(k, memo) or foreign(v, memo):
                out.append(f"sys.path_importer_cache entry ({class_name(type_(k))}: {class_name(type_(v))})")
                if fix:
                    del cache[k]
        path = sys.__dict__.get("path")
        if type_(path) is not list:  # a notebook may set sys.path to a list of its own, no more
            out.append("sys.path (rebound)")
            if fix:
                sys.path = path = sys_path
            else:
                path = []
        bad = [x for x in list_(path) if foreign(x, memo)]
        out += [f"sys.path: an object of {class_name(type_(x))}" for x in bad]
        if fix and bad:
            path[:] = [x for x in path if all(x is not b for b in bad)]
        for (m, k), v in import_code.items():
            if module_dict(m).get(k, _MISSING) is not v:
                out.append(f"{module_dict(m).get('__name__', '?')}.{k} (replaced)")
                if fix:
                    module_dict(m)[k] = v
        for cls, want in import_classes.items():
            have = type_dict(cls)
            for k, v in want.items():
                if have.get(k, _MISSING) is not v:
                    out.append(f"{class_name(cls)}.{k} (replaced)")
                    if fix:
                        type.__setattr__(cls, k, v)
            for k in [k for k, x in have.items() if k not in want and (codeish(x) or foreign(x, memo))]:
                out.append(f"{class_name(cls)}.{k} (added)")
                if fix:
                    type.__delattr__(cls, k)
        for name, m in list_(modules.items()):
            kind = type_(m)
            if kind is not ModuleType_ and foreign_class(kind, memo):
                out.append(f"sys.modules[{name!r}] (of the submission's class {class_name(kind)})")
                if fix:
                    if ModuleType_ in type_mro(kind):
                        object.__setattr__(m, "__class__", ModuleType_)
                    else:
                        del modules[name]
                        continue
            if ModuleType_ not in type_mro(type_(m)):  # (isinstance would read the object's __class__)
                continue
            d = module_dict(m)
            spec = d.get("__spec__")
            if not spec_ok(spec, memo):
                out.append(f"{name}.__spec__ (replaced)")
                if fix:
                    want = module_specs.get(name)
                    want = want if want is not None else spec if type_(spec) is ModuleSpec_ else None
                    if want is not None:
                        clean_spec(want, memo)
                    d["__spec__"] = want
            for k in ("__loader__", "__path__", "__getattr__", "__dir__"):
                if k in d and foreign(d[k], memo):
                    out.append(f"{name}.{k} (the submission's)")
                    if fix:
                        del d[k]
        return out

    # ---- what a notebook may add for its own cells: suspended around tests -----------------
    itm, pm, callbacks = refs["shell.input_transformer_manager"], refs["shell.prefilter_manager"], \
        refs["shell.events.callbacks"]
    containers = [("input transformer (cleanup)", itm, "cleanup_transforms"),
                  ("input transformer (line)", itm, "line_transforms"),
                  ("input transformer (token)", itm, "token_transformers"),
                  ("input transformer (post)", shell, "input_transformers_post"),
                  ("AST transformer", shell, "ast_transformers"),
                  ("prefilter transformer", pm, "_transformers"),
                  ("prefilter checker", pm, "_checkers"),
                  ("prefilter handler", pm, "_handlers"),
                  ("prefilter escape handler", pm, "_esc_handlers")]
    containers = [(label, owner, attr) for label, owner, attr in containers if hasattr(owner, attr)]
    transformer_labels = {label for label, _, _ in containers}
    containers.append(("gc callback", gc, "callbacks"))  # runs inside any allocation of the test
    for event in callbacks:
        containers.append((f"{event} callback", callbacks, event))

    def cget(owner, attr):
        return owner[attr] if isinstance_(owner, dict) else getattr_(owner, attr, None)

    def cset(owner, attr, value):
        if isinstance_(owner, dict):
            owner[attr] = value
        else:
            setattr_(owner, attr, value)

    def contents(c):
        return dict_(c) if isinstance_(c, dict) else list_(c) if isinstance_(c, (list, tuple)) else c

    def items(c):
        return list_(c.values()) if isinstance_(c, dict) else list_(c) if isinstance_(c, (list, tuple)) else [c]

    def describe(f):
        if isinstance_(f, str):
            return f
        name = getattr_(f, "__qualname__", None) or type_(f).__qualname__
        mod = getattr_(f, "__module__", None) or type_(f).__module__
        return f"{name}" if mod in (None, "__main__", "builtins") else f"{mod}.{name}"

    def library(f):
        """Defined in a file of this Python or its venv (matplotlib_inline's flush_figures ...)."""
        f = getattr_(f, "__func__", f)
        code = getattr_(f, "__code__", None)
        if code is not None:
            path = code.co_filename
        else:
            mod = type_(f).__module__
            path = "" if mod == "__main__" else getattr_(modules.get(mod), "__file__", None) or ""
        return path.startswith(prefixes) and os.path.isfile(path)

    pristine_c = {label: (owner, attr, cget(owner, attr), contents(cget(owner, attr)))
                  for label, owner, attr in containers}
    custom = (shell.custom_exceptions, shell.__dict__.get("CustomTB"))

    def container_check(fix):
        """{label: contents now} for every container that differs from its pristine state, and
        the additions by name; restore the pristine state when ``fix``."""
        saved, added = {}, []
        for label, (owner, attr, obj, want) in pristine_c.items():
            cur = cget(owner, attr)
            have = contents(cur) if cur is not None else None
            same = cur is obj and (have == want if isinstance_(want, dict) else
                                   len_(have) == len_(want) and all(a is b for a, b in zip(have, want)))
            if same:
                continue
            saved[label] = have
            known = {id_(x) for x in items(want)}
            added += [(label, x) for x in items(have or []) if id_(x) not in known]
            if fix:
                if isinstance_(obj, dict):
                    obj.clear()
                    obj.update(want)
                else:
                    obj[:] = want
                if cur is not obj:
                    cset(owner, attr, obj)
        if (shell.custom_exceptions, shell.__dict__.get("CustomTB")) != custom:
            saved["custom exception handler"] = (shell.custom_exceptions, shell.__dict__.get("CustomTB"))
            caught = tuple_(getattr_(e, "__name__", "?") for e in (shell.custom_exceptions or ()))
            added.append(("custom exception handler", f"(set_custom_exc for {', '.join(caught) or 'nothing'})"))
            if fix:
                shell.custom_exceptions, shell.CustomTB = custom
        return saved, added

    def put_back(saved):
        for label, have in saved.items():
            if label == "custom exception handler":
                shell.custom_exceptions, shell.CustomTB = have
                continue
            owner, attr, obj, _ = pristine_c[label]
            if isinstance_(obj, dict):
                obj.clear()
                obj.update(have)
            else:
                obj[:] = have

    def changed():
        """Names whose current binding differs from the snapshot."""
        out = []
        for k, v in pristine_builtins.items():
            if bdict.get(k, out) is not v:
                out.append(f"builtins.{k}")
        if user_ns.get("__builtins__") is not builtins:
            out.append("__builtins__")
        for name, (module, cls, attrs) in snap.items():
            if modules.get(name) is not module:
                out.append(f"sys.modules[{name!r}]")
            if type(module) is not cls:
                out.append(f"{name}.__class__")
            d = module.__dict__
            out += [f"{name}.{k}" for k, v in attrs.items() if d.get(k, out) is not v]
        for cls, members in course_classes.items():
            out += [f"{cls.__module__}.{cls.__qualname__}.{k}" for k, v in members.items()
                    if k not in ("__dict__", "__weakref__", "__doc__") and cls.__dict__.get(k, out) is not v]
        return out

    def restore(test_names):
        fixed = changed()
        bdict.update(pristine_builtins)
        user_ns["__builtins__"] = builtins
        for name, (module, cls, attrs) in snap.items():
            modules[name] = module
            if type(module) is not cls:
                object.__setattr__(module, "__class__", cls)
            module.__dict__.update(attrs)
        for cls, members in course_classes.items():
            for k, v in members.items():
                if k not in ("__dict__", "__weakref__", "__doc__") and cls.__dict__.get(k, _MISSING) is not v:
                    try:
                        type.__setattr__(cls, k, v)
                    except (AttributeError, TypeError):
                        pass
        if pristine_restore is not None:
            pristine_record.__code__, pristine_restore.__code__ = pristine_code
            fixed += [r for r in pristine_restore() if r.split(" ")[0] not in fixed]
        for k in test_names:
            if k in pristine_builtins and k in user_ns and user_ns[k] is not pristine_builtins[k]:
                del user_ns[k]
                fixed.append(f"global {k} (shadows the builtin)")
            elif k in snap and k in user_ns and user_ns[k] is not snap[k][0]:
                user_ns[k] = snap[k][0]
                fixed.append(f"global {k} (rebound module)")
        return fixed

    def caller_problems(f):
        """The hook must be called (from frame ``f``) by IPython's own event manager, inside its
        own run_cell_async."""
        if f is None or f.f_code is not trigger_code:
            return [f"the guard's hook was called by {getattr_(getattr_(f, 'f_code', None), 'co_qualname', '?')} (wrapped)"]
        f = f.f_back
        if f is None or f.f_code is not run_async_code:
            return [f"pre_run_cell was triggered by {getattr_(getattr_(f, 'f_code', None), 'co_qualname', '?')}"]
        return []

    fork_, exit_, waitpid_ = os.fork, os._exit, os.waitpid
    course_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    signal_mod = sys.modules.get("signal") or __import__("signal")
    known_handlers = {n: signal_mod.getsignal(n) for n in signal_mod.valid_signals()
                      if not isinstance_(signal_mod.getsignal(n), int)} if hasattr_(signal_mod, "valid_signals") else {}

    def submission_file(path) -> bool:
        """Code that is neither this Python's or its venv's, nor the course's or the grader's."""
        return not (path.startswith(prefixes) or path.startswith(course_root) or path.startswith("<frozen "))

    def fork_handlers():
        """The submission's os.register_at_fork handlers: a probe fork, profiled (its child exits at
        once). A handler runs inside every graded call's fork, on the stack of the test."""
        seen = []

        def probe(frame, event, arg):
            if event == "call" and submission_file(frame.f_code.co_filename):
                seen.append(f"{frame.f_code.co_qualname} (a fork handler)")
        old = getprofile()
        setprofile(probe)
        try:
            pid = fork_()
            if pid == 0:
                exit_(0)
        finally:
            setprofile(old)
        waitpid_(pid, 0)
        return sorted(set(seen))

    def submission_callable(c):
        """A callable whose code the submission wrote (a function, a bound method, a partial of
        one, or an object of a class of its own)."""
        for _ in range(4):
            inner = getattr_(c, "func", None)  # functools.partial
            if inner is None:
                break
            c = inner
        c = getattr_(c, "__func__", c)
        code = getattr_(c, "__code__", None)
        if code is not None:
            return submission_file(code.co_filename)
        run = getattr_(type_(c), "__call__", None)
        code = getattr_(run, "__code__", None)
        return code is not None and submission_file(code.co_filename)

    def running_threads():
        """Threads other than this one that are running the submission's code, or will: a thread
        whose target (or class's ``run``) is the submission's, sleeping in a library wait."""
        out = []
        me = threading.get_ident()
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            f = frame
            while f is not None:
                if submission_file(f.f_code.co_filename):
                    out.append(f"a thread running {f.f_code.co_qualname} (started by the submission)")
                    break
                f = f.f_back
        for t in threading.enumerate():
            if t.ident == me or not t.is_alive():
                continue
            target = t.__dict__.get("_target") or t.__dict__.get("function")
            run = getattr_(type_(t).run, "__code__", None)
            if (target is not None and submission_callable(target)) or \
                    (run is not None and submission_file(run.co_filename)):
                what = f"a thread that will run {describe(target if target is not None else type_(t).run)}"
                if what not in [o.replace("(started by the submission)", "").strip() for o in out]:
                    out.append(what + " (started by the submission)")
        return out

    def loop_callbacks(fix):
        """Callbacks of the submission's waiting on the kernel's event loops (this thread's and the
        I/O thread's): they would run during the test; cancelled when ``fix``."""
        out = []
        loops = [getattr_(getattr_(pub_thread, "io_loop", None), "asyncio_loop", None)]
        try:
            loops.append(running_loop())
        except RuntimeError:
            pass
        for loop in loops:
            if loop is None:
                continue
            handles = list_(getattr_(loop, "_ready", ())) + list_(getattr_(loop, "_scheduled", ()))
            for h in handles:
                parts = [getattr_(h, "_callback", None), *(getattr_(h, "_args", None) or ())]
                if any(callable_(x) and submission_callable(x) for x in parts):
                    out.append(f"a callback scheduled on the kernel's event loop ({describe(parts[0])})")
                    if fix:
                        h.cancel()
        return out

    def suspend_signals():
        """Python signal handlers the submission set: ignored while the test runs (a handler runs on the
        test's frames); the originals, to put back."""
        held = {}
        if not known_handlers and not hasattr_(signal_mod, "valid_signals"):
            return held
        for n in signal_mod.valid_signals():
            try:
                h = signal_mod.getsignal(n)
            except (OSError, ValueError):
                continue
            if callable_(h) and h is not known_handlers.get(n) and not library(h):
                try:
                    signal_mod.signal(n, signal_mod.SIG_IGN)
                    held[n] = h
                except (OSError, ValueError, RuntimeError):
                    pass
        return held

    def free_stored(stores):
        """Drop the old values of the names the test will assign now, and collect the garbage; the
        pre stage then freezes what is left (``gc.freeze``) last, for good: a finalizer of the
        submission's (``__del__``, ``weakref.finalize``) runs here, before the guard's checks, when
        its object is freed by the drop or collected now, or never; never on the test's frames.
        What the test itself allocates is collected as usual, and after it by the post stage. A
        frozen object is never traversed again, so each of these collections looks only at what
        was made since the last test (unfreezing and collecting the whole kernel, torch's objects
        included, after every test cost 02's solution 2.85 s in its 11 post stages; now 0.86 s). An
        object frozen alive that later becomes garbage in a cycle is never freed (the kernel ends
        with the notebook). A module is kept (exactly a module: an object of a class of the
        submission's is dropped, whatever its ``__class__`` says)."""
        for k in stores:
            if k in user_ns and type_(user_ns[k]) is not types.ModuleType and k not in ("In", "Out", "get_ipython"):
                del user_ns[k]
        gc_collect()

    def cached_cells():
        """(name, text) of each cell's source in IPython's compile cache (``linecache``)."""
        for name, entry in list_(line_cache.items()):
            lines = entry[2] if type_(entry) is tuple and len_(entry) > 2 and type_(entry[2]) is list else None
            if lines is not None and all(type_(x) is str for x in lines):
                yield name, "".join(lines)

    def is_test_text(text, text_sha):
        return sha256(text.rstrip("\n").encode()).hexdigest() == text_sha

    def cached_text(text_sha):
        """The test's text as IPython's compile cache holds it (None if it is not there)."""
        for _, text in cached_cells():
            if is_test_text(text, text_sha):
                return text
        return None

    def forget_test(names, kept, text_sha):
        """After a test: what the kernel would keep of it, dropped before the submission's next cell
        runs (red team, run 10, read earlier test cells from the input history and printed them into
        its feedback). Of the names a test with hidden parts bound: one the notebook had before the
        test gets its old value back when that was a module, function, class or plain constant
        (``kept``: the notebook's own imports, ``IGNORE``, ``batch_at``, which its later cells use);
        any other keeps what the test bound only when it is a module, function or class (an import
        of the test's), and is dropped otherwise (the test's data: its draws, labels and salts).
        Then the test's text and the grader's control cells in IPython's compile cache, and the last
        exception (its traceback holds the test's frames). A test cell runs outside the input history
        (``SandboxedExecute``), so ``In``, ``_i`` and the history file never hold it."""
        for k in names:
            if k in ("In", "Out", "get_ipython"):
                continue
            if k in kept:
                user_ns[k] = kept[k]
            elif k in user_ns and type_(user_ns[k]) not in DEFINITION_TYPES:
                del user_ns[k]
        for name, text in cached_cells():
            if text.startswith(MARK) or is_test_text(text, text_sha):
                del line_cache[name]
                filename_map.pop(name, None)
        for k in ("last_type", "last_value", "last_traceback", "last_exc"):
            sys.__dict__.pop(k, None)

    def stack_problems(f):
        """Every frame from run_cell_async up to the kernel's do_execute is IPython's/ipykernel's."""
        f, out = getattr_(getattr_(f, "f_back", None), "f_back", None), []
        for _ in range(12):
            if f is None or f.f_code in stop_codes:
                break
            if str(f.f_globals.get("__name__", "")).split(".")[0] in ("asyncio", "tornado"):
                break
            if f.f_code not in allowed_codes:
                out.append(f"the test cell was run through {f.f_code.co_qualname} "
                           f"({os.path.basename(f.f_code.co_filename)})")
                break
            f = f.f_back
        return out

    def copy_problems():
        """Other pre_run_cell callbacks that run in this very cell (the event manager's copy)."""
        live = callbacks.get("pre_run_cell")
        want = [id_(x) for x in pristine_c["pre_run_cell callback"][3]]
        for lst in referrers(hook):
            if type_(lst) is not list or lst is live or [id_(x) for x in lst] == want:
                continue
            if any(type_(r).__name__ == "list_iterator" for r in referrers(lst)):
                return [f"pre_run_cell callback {describe(x)} (runs in this cell)"
                        for x in lst if x is not hook and id_(x) not in want] or \
                       ["the pre_run_cell callbacks of this cell (reordered)"]
        return []

    def rewrites(saved, raw):
        """Would the suspended transformers have changed the test's code? (the reason, or None)"""
        mine = {label: have for label, have in saved.items() if label in transformer_labels}
        if not mine:
            return None
        expect = pristine_transform(shell, raw)
        try:
            put_back(mine)
            try:
                text = pristine_transform(shell, raw)
            finally:
                container_check(True)
            tree = parse(text)
            for t in (mine.get("AST transformer") or pristine_c["AST transformer"][3]):
                tree = t.visit(tree)
            same = dump(tree) == dump(parse(expect))
        except BaseException as err:  # noqa: BLE001 - student code
            return f"raised {type_(err).__name__} on it"
        return None if same else "rewrote its code"

    state = {"armed": None, "saved": {}, "pending": None, "salt": no_secret}

    def hook(info=None):
        trace, profile = gettrace(), getprofile()
        if trace is not None or profile is not None:
            settrace(None)
            setprofile(None)
        if state["pending"] is not None:
            # the post_* callbacks suspended for the last test (see control_stage)
            put_back(state["pending"])
            state["pending"] = None
        cell = getattr_(info, "raw_cell", "") or ""
        control = cell.startswith(MARK)
        if not control and state["armed"] is None:
            if trace is not None or profile is not None:
                settrace(trace)     # a notebook's own tracer keeps tracing its own cells
                setprofile(profile)
            return
        state["trace"] = (trace, profile)
        caller = getframe(1)
        try:
            report = control_stage(info, cell, caller) if control else test_stage(info, cell, caller)
        except Exception as err:  # noqa: BLE001 - a guard failure must show, and void the test
            report = {"stage": "error", "error": f"{type_(err).__name__}: {err}"}
        write("course-guard: " + dumps(report) + "\n")
        flush()
        if report.get("stage") == "post" or (report.get("stage") == "error" and control):
            # the test's own garbage is collected here, once the report is out (a finalizer could
            # otherwise edit it). What was frozen before the test stays frozen: its garbage was
            # collected then, before the guard's checks (``free_stored``), and nothing frozen is
            # collected later, at some allocation of a later test, where a finalizer would run on
            # that test's frames (red team, run 9)
            gc_collect()

    def traced():
        trace, profile = state.pop("trace", (None, None))
        return ([f"sys.settrace({describe(trace)})"] if trace is not None else []) + \
               ([f"sys.setprofile({describe(profile)})"] if profile is not None else [])

    def control_stage(info, cell, caller):
        parts = cell.split(None, 2)
        stage = parts[1] if len(parts) > 1 else ""
        if stage == "pre":
            payload = loads(parts[2]) if len(parts) > 2 else {}
            if isinstance_(payload, list):
                payload = {"names": payload}
            forget = [k for k in (payload.get("forget") or []) if type_(k) is str]
            kept = {k: user_ns[k] for k in forget if k in user_ns and type_(user_ns[k]) in KEPT_TYPES}
            free_stored(payload.get("stores", []))
            replaced = path_check(True)
            imports = import_check(True)  # before anything below imports or reads a module
            # the error display alone (a rich-traceback library replaces showtraceback): restored,
            # noted, and the test graded honestly, as nbgrader does (errors come from the kernel's
            # reply, not the display); any other part of the path replaced voids the test
            shown = [r for r in replaced if r.split(" ")[0].rsplit(".", 1)[-1] in DISPLAY_ONLY]
            tampered = caller_problems(caller) + [r for r in replaced if r not in shown] + cache_check() + \
                undumpable()
            state["signals"] = suspend_signals()
            removed = traced() + side_hooks(True)
            saved, added = container_check(True)
            done = getattr_(info, "transformed_cell", None)
            if done is not None and pristine_transform(shell, cell) != done:
                tampered.append("an input transformer rewrote the grader's control cell")
            state["armed"] = payload.get("sha", "")
            state["saved"] = saved
            state["forget"] = (forget, kept, payload.get("text_sha", ""))
            state["salt"] = no_secret
            restored = imports + restore(payload.get("names", [])) + shown + rebound(True) + \
                io_check(True) + loop_callbacks(True)
            # What was put back may have been the submission's last reference to an object whose
            # finalizer then ran here and planted again: look once more; anything found now was
            # planted by the submission's own code while the guard restored it, and voids the test
            again = restore([]) + path_check(True) + import_check(True) + rebound(True) + io_check(True) + \
                loop_callbacks(True) + side_hooks(True)
            _, added_again = container_check(True)
            again += [f"{label} {class_name(type_(x))}" for label, x in added_again]
            if again:
                tampered.append(f"planted again while the grader put it back: {', '.join(again)}")
            tampered += fork_handlers() + running_threads()
            # for a test with a secret, held until the post stage: every object the collector tracks,
            # frozen ones included (an instance of any Python class is tracked: whatever can carry a
            # finalizer or a weakref callback of the submission's). So nothing that exists before the
            # test is freed while it runs, and no such code runs there: an object the submission hung
            # on something the kernel lets go during the test (its own request, a replaced attribute)
            # is freed at the post stage, after the secret is gone. A test without a secret, which has
            # nothing of the grader's to keep, skips it (about 0.04 s a test: 9 tests of 04 took 1.04-1.08 s
            # of pre stages without it, 1.41-1.47 s with it)
            gc_unfreeze()
            if payload.get("keyed") is True:
                state["held"] = get_objects()
            # frozen last, for good: garbage made by any of the above since ``free_stored`` collected
            # (a learner object in a cycle that a restore let go) is never collected, so its finalizer
            # never runs, here or on a later test's frames
            gc_freeze()
            return {"stage": "pre", "restored": restored, "tampered": tampered, "removed": removed,
                    "suspended": [f"{label} {describe(x)}" for label, x in added
                                  if label == "custom exception handler" or not library(x)]}
        state["armed"] = None
        # the secret first: nothing below runs while it is out
        # (the guard keeps only the secret's digest: its own state is reachable from the submission's
        # code, through this hook's closure, in the kernel and in every graded call's process)
        salt_changed = salt_box is not None and (len_(salt_box) != 1 or type_(salt_box[0]) is not str or
                                                 sha256(salt_box[0].encode()).hexdigest() != state.get("salt", ""))
        if salt_box is not None:
            salt_box[:] = [""]
        state["salt"] = no_secret
        # then what the pre stage held: what the kernel let go of during the test is freed here, and
        # a finalizer of the submission's runs now, before the checks below (what it plants is seen)
        held = state.pop("held", None)
        if held is not None:
            held.clear()  # by hand: the list can refer to itself (through a namespace it holds)
        saved, added = container_check(True)
        # the submission's transformers are tried on the test's text only now, with the secret gone
        # (they are the submission's code: at the test's start they would run beside it). The text is
        # read back from IPython's compile cache, which a graded call's process empties: a copy kept
        # by the guard would be reachable there, through its hook's closure
        text = cached_text(state.get("forget", ([], {}, ""))[2])
        why = rewrites(state["saved"], text) if text is not None else None
        rewrote = ([f"{label} {describe(x)} {why}" for label in state["saved"] if label in transformer_labels
                    for x in items(state["saved"][label] or [])
                    if id_(x) not in {id_(y) for y in items(pristine_c[label][3])}] or [why]) if why else []
        during = path_check(True) + import_check(True) + traced() + side_hooks(True) + rebound(True) + \
            io_check(True) + loop_callbacks(True) + \
            [f"{label} {describe(x)} (added)" for label, x in added] + fork_handlers() + running_threads()
        for n, h in state.pop("signals", {}).items():
            try:
                signal_mod.signal(n, h)
            except (OSError, ValueError, RuntimeError):
                pass
        # what the test's own run changed and the restore put back: a binding (``changed``) or, from
        # ``pristine``'s records, a function's code, defaults or closure swapped while it ran
        if salt_changed:
            during.append("the grader's salt for this test's hidden draws (course.toolkit.salts.CURRENT)")
        forget_test(*state.pop("forget", ([], {}, "")))
        during += undumpable()
        report = {"stage": "post", "changed": restore([]) + during, "rewrote": rewrote}
        # post_* callbacks come back at the next cell: in this control cell they would run after
        # its report and could clear it; the rest now, so the next cell is transformed as before
        late = ("post_execute callback", "post_run_cell callback")
        put_back({k: v for k, v in state["saved"].items() if k not in late})
        state["pending"] = {k: v for k, v in state["saved"].items() if k in late}
        state["saved"] = {}
        return report

    def test_stage(info, cell, caller):
        want, state["armed"] = state["armed"], None
        problems = []
        problems += caller_problems(caller) + stack_problems(caller) + copy_problems()
        problems += path_check(True) + import_check(True) + cache_check() + undumpable() + \
            [f"{h} (set after the grader's check)" for h in traced() + side_hooks(True)]
        _, added = container_check(True)
        problems += [f"{label} {describe(x)} (added after the grader's check)" for label, x in added]
        if want and sha256(cell.encode()).hexdigest() != want:
            problems.append("the cell that ran is not the test cell the grader sent")
        if pristine_transform(shell, cell) != getattr_(info, "transformed_cell", None):
            problems.append("the test cell was transformed by something other than IPython's own path")
        # last, once every check has run: the test's secret, from this request's metadata (never from
        # a cell's text, which the submission's input transformers read before any hook runs), taken
        # out of the request and put in the box for the test's draws; the post stage empties it
        secret = take_secret()
        state["salt"] = sha256(secret.encode()).hexdigest()
        if salt_box is not None:
            salt_box[:] = [secret]
        return {"stage": "test", "tampered": problems, "keyed": bool(secret)}

    def take_secret():
        """The test's secret from the running request's metadata, removed from it ("" if none)."""
        msg = var_get(parent_var, None) if parent_var is not None else None
        md = dict_get(msg, "metadata") if type_(msg) is dict else None
        secret = dict_pop(md, SECRET_METADATA, "") if type_(md) is dict else ""
        return secret if type_(secret) is str else ""

    record_specs()
    after_import.append(record_specs)
    shell.events.register("pre_run_cell", hook)
    pristine_c["pre_run_cell callback"] = (callbacks, "pre_run_cell", callbacks["pre_run_cell"],
                                           list(callbacks["pre_run_cell"]))
