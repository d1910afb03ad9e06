"""Monkeypatch guard, run inside the grading kernel at start (before any student code).

``install(shell)`` snapshots what test cells rely on, while it is still pristine:
- every entry of ``builtins`` (``abs``, ``isinstance``, ``AssertionError``, ``__import__``, ...);
- the public attributes of the guarded modules (COURSE_GUARDED, space-separated module names;
  default ``GUARDED``), and each module's class and ``sys.modules`` entry. A module already
  imported is snapshotted now; one imported later (torch) right after its own import finishes, by
  an import hook, so a student cell that imports and patches torch at once is still caught.
It registers an IPython ``pre_run_cell`` hook that reacts to two control cells the grader sends
(``autograder.sandboxed_execute``), never to student cells:
- ``#course-guard pre NAMES``  before each autograder-test cell: put every snapshotted reference
  back, point the user namespace's ``__builtins__`` at the real module, drop user globals that
  shadow a builtin named in the test (NAMES: JSON list of the names the test uses) and rebind a
  guarded module's own name (``math``, ``torch``) if it was rebound; report what it restored;
- ``#course-guard post``  after the test cell: report what changed while the test ran (a patch made
  inside a graded function), then restore it.
Reports are one stdout line ``course-guard: {json}``; the grader decides what they cost.

Limits (stated in the instructor guide): student code shares the interpreter with the tests, so
code written to find and disable this guard (through IPython's event registry or the garbage
collector) can; a patch that undoes itself before the test cell ends is not seen; objects returned
by student code (``__eq__`` that always says True) are the tests' job. The guard stops the
ordinary ways of making a test pass by replacing what it calls.
"""
import builtins
import importlib.abc
import json
import os
import sys
import types

GUARDED = ("math", "cmath", "operator", "functools", "numpy", "numpy.testing", "torch",
           "torch.testing", "torch.nn.functional", "course.grading", "course.checks")
MARK = "#course-guard"


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
    modules = sys.modules
    real_stdout = sys.stdout
    write, flush = real_stdout.write, real_stdout.flush
    dumps = json.dumps
    getattr_, setattr_, hasattr_ = getattr, setattr, hasattr
    user_ns = shell.user_ns

    def snapshot(name, module):
        attrs = {k: v for k, v in module.__dict__.items() if not k.startswith("_")}
        snap[name] = (module, type(module), attrs)

    for name in wanted:
        if name in modules:
            snapshot(name, modules[name])

    class Hook(importlib.abc.MetaPathFinder):
        """Snapshot a guarded module right after its first import completes."""
        def find_spec(self, name, path=None, target=None):
            if name not in wanted or name in snap:
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

            def exec_module(module):
                inner(module)
                snapshot(name, module)
            try:
                loader.exec_module = exec_module
            except (AttributeError, TypeError):
                pass
            return spec

    sys.meta_path.insert(0, Hook())

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
        for k in test_names:
            if k in pristine_builtins and k in user_ns and user_ns[k] is not pristine_builtins[k]:
                del user_ns[k]
                fixed.append(f"global {k} (shadows the builtin)")
            elif k in snap and k in user_ns and user_ns[k] is not snap[k][0]:
                user_ns[k] = snap[k][0]
                fixed.append(f"global {k} (rebound module)")
        return fixed

    def hook(info=None):
        cell = getattr_(info, "raw_cell", "") or ""
        if not cell.startswith(MARK):
            return
        parts = cell.split(None, 2)
        stage = parts[1] if len(parts) > 1 else ""
        if stage == "pre":
            names = json.loads(parts[2]) if len(parts) > 2 else []
            report = {"stage": "pre", "restored": restore(names)}
        else:
            report = {"stage": "post", "changed": changed()}
            restore([])
        write("course-guard: " + dumps(report) + "\n")
        flush()

    shell.events.register("pre_run_cell", hook)
