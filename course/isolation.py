"""Run a learner's graded function where the answer to the exercise does not exist.

A mystery's answer (which bug a drawn pipeline carries) lives in the kernel that made the draw:
``course.mystery`` has to remember it to grade. Hiding it behind a private name does not help, since
code in the same interpreter can read anything there: a module's private registry, the garbage
collector, the caller's frame, a closure's cells, the test cell's own source in IPython's history.
So a test never calls a learner's ``detect`` / ``name_cause`` / ``fix`` in the kernel itself.
``run_apart(fn, cases)`` forks the kernel and, in the child, before any learner code runs:

1. **forgets every answer**: the draw registry of ``course.mystery`` and the capstone's caches are
   emptied, the globals the running test cell assigned (its expected answers, its labelled draws)
   are deleted, IPython's input and output history (the test cell's source, with its hidden bug
   names and salts) and the kernel's copy of the request are blanked, ``sys.last_*`` cleared;
2. **switches off** the package functions the test names and every private helper they call, for
   good (the child is thrown away);
3. **seals introspection** with an audit hook, which cannot be removed (``Sealed``): the garbage
   collector's object walks, other threads' frames, tracing and profiling hooks, ``ctypes``,
   reading ``/proc``, history databases, new processes and replacing a function's code are
   refused to everyone; a frame (``sys._getframe``, a traceback's, generator's or coroutine's
   frame) is refused to a notebook's code, and a frame of a notebook or inside a mystery part to
   everyone. A part of a mystery pipeline keeps its function inside a suspended generator
   (``course.mystery.Part``), which only those routes could open;
4. runs the calls in a fresh thread (whose stack holds none of the test's frames), in an order
   shuffled from ``os.urandom``, so the position of a call says nothing either.

Only plain data comes back, as JSON over a pipe, with a random token the child's learner code cannot
read (so it cannot write a result of its own): a bool, a string, a fix's pipeline as "kept field"
/ reference by module and name / setting value, or the exception a call raised (its type and
message). What the learner's code printed comes back too and is printed, on stdout (a warning never
costs the cell).

Limits, stated plainly. Learner code that runs *outside* a graded call (an ordinary cell) is not
isolated: it can read the answers of the notebook's visible draws, which is why every graded cell
also grades fresh draws made inside the test cell with a salt the learner never sees. A function
rebuilt before the test from a copy of a package function's code object escapes the switch-off.
Code compiled under a library's file name passes for library code, and a callback that a part calls
(a learner's own object handed to a part) can walk the stack through a library helper that returns
frames it found itself (``traceback.walk_stack``): that shows the bug's code, not a stored answer.
Where ``os.fork`` does not exist (Windows), ``run_apart`` calls in-process and says so once.
"""

from __future__ import annotations

import builtins
import dataclasses
import dis
import gc
import io
import json
import os
import re
import select
import signal
import sys
import threading
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

# The primitives, bound when the package is imported (the grading kernel imports ``course`` before
# any submitted code; its guard restores these bindings before every test).
_fork = getattr(os, "fork", None)
_pipe, _read, _write, _close, _dup2 = os.pipe, os.read, os.write, os.close, os.dup2
_exit_now, _kill, _getpid, _waitpid, _urandom = os._exit, os.kill, os.getpid, os.waitpid, os.urandom
_select = select.select
_addaudithook, _getframe = sys.addaudithook, sys._getframe
_Thread = threading.Thread
_dumps, _loads = json.dumps, json.loads
_FunctionType, _ModuleType = types.FunctionType, types.ModuleType
_isinstance, _type, _getattr = isinstance, type, getattr

# Audit events refused in a sealed process, whoever asks. Prefixes end with a dot.
DENIED_EVENTS = frozenset({
    "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    "sys._current_frames", "sys._current_exceptions",
    "sys.settrace", "sys.setprofile", "sys.addaudithook", "sys.monitoring.register_callback",
    "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.startfile",
    "subprocess.Popen", "pty.spawn", "sqlite3.connect", "sqlite3.connect/handle",
})
DENIED_PREFIXES = ("ctypes.", "cffi.")
# Attribute reads that CPython audits, each of which hands out a frame or a frame's code: refused
# when code outside the libraries (a notebook's) reads them.
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame",
                              "ag_code", "f_code"})
_COURSE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_LIBRARY_DIRS = tuple(sorted({os.path.realpath(p) + os.sep for p in
                              (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)} |
                             {os.path.dirname(os.__file__) + os.sep}))
# Frames whose variables hold a mystery part's function or a bug's settings.
_SEALED_FILES = (os.path.join(_COURSE_DIR, "mystery.py"), os.path.join(_COURSE_DIR, "bugs") + os.sep)


class Sealed(PermissionError):
    """Raised, in a graded call's process, by an introspection route that could reach the answer."""


def _library(filename: str) -> bool:
    return filename.startswith(_LIBRARY_DIRS) or filename.startswith(_COURSE_DIR) or filename.startswith("<frozen ")


def _denies(event: str, args: tuple, caller) -> str | None:
    """Why ``event`` is refused in a sealed process, or None. ``caller``: the frame that raised it."""
    if event in DENIED_EVENTS or event.startswith(DENIED_PREFIXES):
        return event
    if event == "sys._getframe":
        # library code may look at library frames (namedtuple, typing, warnings do); nobody gets
        # a notebook's frame (the way up a call stack) or a frame inside a mystery part
        frame = args[0] if args else None
        name = frame.f_code.co_filename if frame is not None else ""
        if not _library(name) or name.startswith(_SEALED_FILES):
            return "sys._getframe"
        return None
    if event == "object.__getattr__" and len(args) > 1 and args[1] in FRAME_ATTRIBUTES:
        if caller is None or not _library(caller.f_code.co_filename):
            return f"reading .{args[1]}"
        return None
    if event == "object.__setattr__" and len(args) > 1 and args[1] == "__code__":
        return "replacing a function's __code__"
    if event == "open" and args and _isinstance(args[0], (str, bytes)):
        path = os.fsdecode(args[0])
        if path.startswith("/proc/") or path.endswith((".sqlite", ".sqlite-journal")):
            return f"opening {path}"
    return None


def _make_hook():
    state = [False, False]  # [sealed, inside the hook]; only the hook (no Python object) holds it

    def hook(event, args):
        if event == "course.isolation.seal":
            state[0] = True
            return
        if not state[0] or state[1]:
            return
        state[1] = True
        try:
            why = _denies(event, args, _getframe(1))
        finally:
            state[1] = False
        if why is not None:
            raise Sealed(f"{why} is not allowed while your answer is graded: test the pipeline's behaviour instead")
    return hook


def seal() -> None:
    """Refuse every route in ``DENIED_EVENTS`` for the rest of this process (one way: nothing
    unseals). Raises RuntimeError if the seal is not in force afterwards (another audit hook
    refused ours)."""
    _addaudithook(_make_hook())
    sys.audit("course.isolation.seal")
    try:
        gc.get_referrers(seal)
    except Sealed:
        return
    raise RuntimeError("the grading process could not be sealed")


# ----- what the child forgets ---------------------------------------------------------------------
def _stored_names(code: types.CodeType) -> set[str]:
    """Names a cell's module-level code assigns (``STORE_NAME``/``STORE_GLOBAL``)."""
    return {i.argval for i in dis.get_instructions(code) if i.opname in ("STORE_NAME", "STORE_GLOBAL")}


def _forget(user_ns: dict | None, frame) -> None:
    """Drop every answer this process holds (called in the child, before the seal)."""
    for name, clear in (("course.mystery", "forget_all"), ("course.capstone", "forget_all")):
        module = sys.modules.get(name)
        if module is not None and _getattr(module, clear, None) is not None:
            _getattr(module, clear)()
    sys.last_type = sys.last_value = sys.last_traceback = None
    if user_ns is not None:
        # the running cell's own assignments that hold data (a test's expected answers, labelled
        # draws, loop variables); functions, classes and modules it defined stay callable
        while frame is not None:
            if frame.f_globals is user_ns and frame.f_code.co_name == "<module>":
                for name in _stored_names(frame.f_code):
                    value = user_ns.get(name, _FunctionType)
                    if not _isinstance(value, (_FunctionType, type, _ModuleType)):
                        user_ns.pop(name, None)
            frame = frame.f_back
    _forget_ipython(user_ns)


def _forget_ipython(user_ns: dict | None) -> None:
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    hm = _getattr(shell, "history_manager", None)
    if hm is not None:
        for name in ("input_hist_parsed", "input_hist_raw", "db_input_cache", "db_output_cache"):
            seq = _getattr(hm, name, None)
            if _isinstance(seq, list):
                seq[:] = [""] * len(seq) if name.startswith("input") else []
        for name in ("output_hist", "output_hist_reprs"):
            table = _getattr(hm, name, None)
            if _isinstance(table, dict):
                table.clear()
        try:
            hm.db = None
        except Exception:
            pass
    ns = user_ns if user_ns is not None else shell.user_ns
    for name in list(ns):  # IPython's output and input variables: _, __, ___, _i, _ii, _iii, _N, _iN
        if name in ("_", "__", "___", "_i", "_ii", "_iii") or re.fullmatch(r"_i?\d+", name):
            ns.pop(name, None)
    for name in ("In", "_ih"):
        if _isinstance(ns.get(name), list):
            ns[name][:] = [""] * len(ns[name])
    for name in ("Out", "_oh"):
        if _isinstance(ns.get(name), dict):
            ns[name].clear()
    kernel = _getattr(shell, "kernel", None)
    if kernel is not None:
        import contextvars
        for name in ("_shell_parent", "_control_parent"):
            var = _getattr(kernel, name, None)
            if _isinstance(var, contextvars.ContextVar):
                var.set({})
            elif var is not None:
                try:
                    setattr(kernel, name, {})
                except Exception:
                    pass
        try:
            kernel._shell_context = contextvars.Context()
        except Exception:
            pass


# ----- switching off, for good, in the child --------------------------------------------------------
def _names_in(fn) -> set[str]:
    codes, names = [fn.__code__], set()
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if _isinstance(c, types.CodeType))
    return names


# Modules whose private functions are the pipeline's own working parts (stored in parts, called by
# the loop): never looked into for a check's helpers.
MACHINERY = ("course.mystery", "course.pipeline", "course.train", "course.data", "course.model",
             "course.bugs", "course.isolation", "course.grading")


def private_helpers(functions: Iterable[Callable]) -> list[_FunctionType]:
    """The private functions (a ``_`` name) that do the work of ``functions``: those they call,
    directly or through each other, defined in the same module (read from their code's names), and
    private copies of them (a function of the module with the same code object), outside the
    pipeline's own machinery (``MACHINERY``)."""
    found: dict[int, _FunctionType] = {}
    todo = [getattr(f, "__func__", f) for f in functions]
    codes = {id(f.__code__) for f in todo if _isinstance(f, _FunctionType)}
    for f in list(todo):
        module = sys.modules.get(getattr(f, "__module__", None) or "")
        if module is not None and not module.__name__.startswith(MACHINERY):
            todo += [v for k, v in vars(module).items() if k.startswith("_") and not k.startswith("__")
                     and _isinstance(v, _FunctionType) and id(v.__code__) in codes and v is not f]
    while todo:
        fn = todo.pop()
        if not _isinstance(fn, _FunctionType):
            continue
        if fn.__name__.startswith("_") and id(fn) not in found:
            found[id(fn)] = fn
        for name in _names_in(fn):
            target = fn.__globals__.get(name)
            target = getattr(target, "__func__", target)
            if (_isinstance(target, _FunctionType) and target.__name__.startswith("_")
                    and not target.__name__.startswith("__") and target.__module__ == fn.__module__
                    and not str(target.__module__).startswith(MACHINERY) and id(target) not in found):
                todo.append(target)
    return [f for f in found.values() if id(f) not in {id(getattr(g, "__func__", g)) for g in functions}]


def _library_only(original: _FunctionType, name: str):
    """A suspended generator that calls ``original`` for the package's own code only: the caller
    of the trampoline that sends to it must be a file of ``course``. The only reference to
    ``original`` is a local of this frame (``course.mystery._holder`` explains why that holds)."""
    from .grading import SwitchedOff

    request = yield
    while True:
        args, kwargs = request
        del request
        trampoline = caller = None
        try:
            try:
                trampoline = _getframe(1)
                caller = trampoline.f_back
                ours = (trampoline.f_code.co_name == "_course_library_only"
                        and trampoline.f_code.co_filename == __file__ and caller is not None
                        and caller.f_code.co_filename.startswith(_COURSE_DIR))
            except Sealed:
                ours = False
            del trampoline, caller
            if not ours:
                raise SwitchedOff(f"{name} is switched off while your answer is graded: write it yourself")
            answer = (True, original(*args, **kwargs))
        except BaseException as err:  # noqa: BLE001
            answer = (False, err.with_traceback(None))
        del args, kwargs
        request = yield answer
        answer = None


def _trampoline(fn: _FunctionType, key: int) -> types.CodeType:
    """Code with ``fn``'s free variables that hands its call to the gate ``key`` (see
    ``_library_only``), compiled under this file's name."""
    names = fn.__code__.co_freevars
    src = "def _outer():\n" + "".join(f"    {n} = None\n" for n in names)
    src += "    def _course_library_only(*args, **kwargs):\n"
    if names:
        src += f"        ({', '.join(names)},)\n"
    src += f"        ok, value = _course_isolation_gates[{key}].send((args, kwargs))\n"
    src += "        if ok:\n            return value\n        raise value\n"
    src += "    return _course_library_only\n"
    scope: dict = {}
    exec(compile(src, __file__, "exec"), scope)
    return scope["_outer"]().__code__


def _switch_off_for_good(functions: Sequence[Callable]) -> None:
    """In a graded call's process: ``functions`` raise ``SwitchedOff`` for everyone; their private
    helpers and copies (``private_helpers``) answer only the package's own code (a check that an
    allowed tool uses keeps working for the tool, not for the notebook)."""
    from .grading import _function, _raiser

    fns = [_function(f) for f in functions]
    for fn in private_helpers(fns):
        original = _FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
        original.__kwdefaults__ = fn.__kwdefaults__
        gate = _library_only(original, f"{fn.__module__}.{fn.__qualname__}")
        next(gate)
        gates = fn.__globals__.setdefault("_course_isolation_gates", {})
        gates[id(fn)] = gate
        fn.__code__ = _trampoline(fn, id(fn))
        del original, gate
    for fn in fns:
        fn.__code__ = _raiser(fn)


# ----- results as plain data ------------------------------------------------------------------------
def _describe_error(err: BaseException, rejects: tuple) -> dict:
    from .grading import SwitchedOff

    kind = "unfinished" if _isinstance(err, NotImplementedError) else \
        "switched-off" if _isinstance(err, SwitchedOff) else \
        "sealed" if _isinstance(err, Sealed) else \
        "rejected" if rejects and _isinstance(err, rejects) else "error"
    return {"error": kind, "type": _type(err).__name__, "message": str(err)[:2000]}


def _raise_error(info: dict) -> None:
    from .grading import SwitchedOff

    message = info["message"]
    kind = info["error"]
    if kind == "unfinished":
        raise NotImplementedError(message)
    if kind == "switched-off":
        raise SwitchedOff(message)
    if kind == "sealed":
        raise Sealed(message)
    cls = _getattr(builtins, info["type"], None)
    if _isinstance(cls, type) and issubclass(cls, Exception) and cls.__module__ == "builtins":
        try:
            raise cls(message)
        except TypeError:
            pass
    raise RuntimeError(f"{info['type']}: {message}")


@dataclass(frozen=True)
class Outcome:
    """One call's result: ``value`` (plain data) or ``error`` (a dict from the child)."""
    value: Any = None
    error: dict | None = None

    def get(self):
        """The value, or the call's exception raised again (same builtin type and message)."""
        if self.error is not None:
            _raise_error(self.error)
        return self.value


# ----- the fork ---------------------------------------------------------------------------------
_warned_no_fork = [False]


def run_apart(fn: Callable, cases: Sequence, encode: Callable[[Any, Any], Any],
              off: Iterable[Callable] = (), rejects: tuple = ()) -> list[Outcome]:
    """``[Outcome of encode(case, fn(case)) for case in cases]``, computed in a sealed child
    process that holds no answer (see the module docstring). ``encode`` runs in the child and must
    return JSON data; an exception in ``fn`` or ``encode`` becomes that case's error. ``rejects``:
    exception classes reported as ``"rejected"``. Raises AssertionError when the child dies without
    answering (the message says how)."""
    cases = list(cases)
    off = tuple(off)
    if _fork is None:
        if not _warned_no_fork[0]:
            print("[grading] no os.fork here: graded calls run in this process, not isolated")
            _warned_no_fork[0] = True
        state = rng_state()
        return [_call(fn, c, encode, rejects, state) for c in cases]
    token = _urandom(16).hex()
    state = rng_state()  # every call starts from it: the order of the calls changes nothing
    result_r, result_w = _pipe()
    out_r, out_w = _pipe()
    frame = _getframe(1)
    try:
        from IPython import get_ipython
        shell = get_ipython()
    except ImportError:
        shell = None
    user_ns = shell.user_ns if shell is not None else None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = _fork()
    if pid == 0:  # the child: never returns
        try:
            _close(result_r)
            _close(out_r)
            _dup2(out_w, 1)
            _dup2(out_w, 2)
            stream = io.TextIOWrapper(io.FileIO(out_w, "w", closefd=False), line_buffering=True,
                                      errors="replace")
            sys.stdout = sys.stderr = stream
            _forget(user_ns, frame)
            del frame
            _switch_off_for_good(off)
            seal()
            # each case under a random slot, in the order of the slots: the worker thread (whose
            # target any code can reach) holds no index that says where a case came from
            slots = [_urandom(8).hex() for _ in cases]
            shuffled = sorted(zip(slots, cases), key=lambda sc: sc[0])
            del cases
            results: dict = {}
            worker = _Thread(target=_work, args=(fn, shuffled, encode, rejects, results, state), daemon=True)
            del shuffled
            worker.start()
            worker.join()
            stream.flush()
            payload = _dumps({"token": token, "results": [
                {"value": results[s].value} if results[s].error is None else {"error": results[s].error}
                for s in slots]})
        except BaseException as err:  # noqa: BLE001  (the child must answer whatever happened)
            payload = _dumps({"token": token, "failed": f"{_type(err).__name__}: {err}"})
        data = payload.encode("utf-8")
        try:
            while data:
                data = data[_write(result_w, data):]
        finally:
            _exit_now(0)
    _close(result_w)
    _close(out_w)
    chunks, output = [], []
    try:
        open_fds = {result_r: chunks, out_r: output}
        while open_fds:
            ready, _, _ = _select(list(open_fds), [], [])
            for fd in ready:
                block = _read(fd, 1 << 16)
                if block:
                    open_fds[fd].append(block)
                else:
                    _close(fd)
                    del open_fds[fd]
        _, status = _waitpid(pid, 0)
        pid = 0
    finally:
        if pid:
            try:
                _kill(pid, signal.SIGKILL)
                _waitpid(pid, 0)
            except OSError:
                pass
            for fd in (result_r, out_r):
                try:
                    _close(fd)
                except OSError:
                    pass
    text = b"".join(output).decode("utf-8", "replace")
    if text:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    try:
        message = _loads(b"".join(chunks).decode("utf-8"))
    except ValueError:
        message = None
    if not _isinstance(message, dict) or message.get("token") != token:
        raise AssertionError(f"the graded call's process ended without an answer (exit status {status}): "
                             "your code must return, not end the process or write to its pipes")
    if "failed" in message:
        raise AssertionError(f"the graded call could not run: {message['failed']}")
    return [Outcome(error=r["error"]) if "error" in r else Outcome(value=r["value"])
            for r in message["results"]]


def _work(fn, shuffled, encode, rejects, results, state) -> None:
    from .grading import captured_warnings

    for slot, case in shuffled:
        with captured_warnings():
            results[slot] = _call(fn, case, encode, rejects, state)


def rng_state() -> tuple:
    """The random state a graded call starts from: torch's, Python's ``random`` and numpy's (when
    numpy is imported)."""
    import random as _random
    import torch
    numpy = sys.modules.get("numpy")
    return (torch.random.get_rng_state(), _random.getstate(),
            numpy.random.get_state() if numpy is not None else None)


def set_rng_state(state: tuple) -> None:
    import random as _random
    import torch
    torch.random.set_rng_state(state[0])
    _random.setstate(state[1])
    if state[2] is not None:
        sys.modules["numpy"].random.set_state(state[2])


def _call(fn, case, encode, rejects, state=None) -> Outcome:
    if state is not None:
        set_rng_state(state)
    try:
        return Outcome(value=encode(case, fn(case)))
    except BaseException as err:  # noqa: BLE001
        return Outcome(error=_describe_error(err, rejects))
