"""Run a learner's graded function where the answer to the exercise does not exist.

A mystery's answer (which bug a drawn pipeline carries) lives in the kernel that made the draw:
``course.exercises.mystery`` has to remember it to grade. Hiding it behind a private name does not help, since
code in the same interpreter can read anything there: a module's private registry, the garbage
collector, the caller's frame, a closure's cells, the test cell's own source in IPython's history.
So no grade is decided from a call of a learner's ``detect`` / ``name_cause`` / ``fix`` in the
kernel, and none is made there (``check_fix`` trains a fix's pipeline in the child too: ``then``).
``run_apart(fn, cases)`` forks the kernel, calling nothing until then but the primitives bound below
(and whatever fork handlers ``os.fork`` runs: the grading kernel's guard voids a test when the
submission registered one), and, in the child, before any learner code runs:

0. **puts back** the package and the libraries it runs on as first imported
   (``course.exercises.pristine``), and says what it put back; only then reads the random state
   and the shell;
1. **forgets the answers**: the draw registry of ``course.exercises.mystery`` is emptied; the data the running
   test cell assigns at its top level, in any of its statements (its expected answers, its labelled
   draws and inputs; the functions, classes and modules it binds stay, with their closures), is
   deleted, so a wrapper the test hands to a graded call gets its inputs through its case; IPython's input and output history, the source
   cache (``linecache``: the test cell's source, with its hidden bug names and salts) and the
   kernel's copy of the request are blanked; ``sys.last_*`` cleared; every Python signal handler is
   reset (a handler runs on the frames of the test);
2. **switches off** the package functions the test names for good (the child is thrown away), and
   their private helpers and private copies (``private_helpers``: same-module ``_`` functions they
   reach by name) for the notebook: those still answer the package's own code;
3. **seals introspection** with an audit hook, which cannot be removed and whose rules live in its
   own closure (``_make_hook``): the garbage collector's walks, other threads' frames, tracing,
   ``ctypes``, ``/proc``, IPython's history database, new processes, links and renames, and
   replacing a function's code (but by ``switched_off``, with a stand-in that only raises, and
   back) are refused to everyone; a frame inside a mystery part (or below
   one) is refused to everyone, a library's helper too; any frame is refused to a notebook's code;
   a part keeps its function as a local of a suspended generator (``course.exercises.mystery.Part``), and
   that generator cannot be opened;
   then makes the **hidden draws** among the cases (``course.exercises.mystery.Hidden``, plain data
   until now), storing no answer: before the fork they existed nowhere;
4. runs the calls in a fresh thread (whose stack holds none of the test's frames), in an order
   shuffled from ``os.urandom``, each from the same random state, so the position of a call says
   nothing; the thread is started with ``_thread`` (no ``threading.Thread`` holds its arguments),
   the box it takes its work from is empty by then, and the
   child's main frame keeps every case, its fields and its parts' generators alive, so learner code
   can free nothing of a draw and no reference count changes to say which function a part held;
5. once the calls began, the main thread calls only what it bound before, and no frame can be read
   on it (``_child_tail``): it waits until the threads started since are counted ended, and reads
   the results with primitives, as plain data (the parent checks there is one per case);
   with ``then`` (``check_fix``), it then switches the functions of 2. on again and checks each
   result on a thread of its own whose first frame is in a sealed file.

Only plain data comes back, as JSON over a pipe, with a random token that no learner code can reach
(it lives on the main thread's stack, where no learner code runs: ``_child_tail``): a bool, a string, a fix's
signature, or the exception a call raised (its type, message, and the names and lines of the
notebook's own functions it passed). What the learner's code printed comes back too and is printed
on stdout (a warning never costs the cell).

Limits, stated plainly. Learner code that runs *outside* a graded call (an ordinary cell) is not
isolated: it can read the answers of the notebook's visible draws, which is why every graded cell also grades fresh draws made inside the
test cell with a salt the learner never sees. A draw the test cell makes with ``mystery.make``
(not ``hidden``) exists in the kernel while the test runs: there, only the grading guard's restore
keeps planted code from running beside it. ``pristine`` puts back code, not data, and only for the
modules it lists (its docstring says what that leaves). A function rebuilt before the test from a copy of a package function's code object
escapes the switch-off; code compiled under a library's file name passes for library code; raw
memory read through a buffer protocol (numpy's array interface at an address) is not audited.
Where ``os.fork`` does not exist (Windows), ``run_apart`` calls in-process and says so once.
"""

from __future__ import annotations

import _thread
import ast
import builtins
import dis
import gc
import io
import json
import linecache
import os
import re
import select
import signal
import stat
import sys
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

# The primitives, bound when the package is imported (the grading kernel imports ``course`` before
# any submitted code; its guard restores these bindings before every test).
_fork = getattr(os, "fork", None)
_pipe, _read, _write, _close, _dup2 = os.pipe, os.read, os.write, os.close, os.dup2
_exit_now, _kill, _getpid, _waitpid, _urandom = os._exit, os.kill, os.getpid, os.waitpid, os.urandom
_select = select.select
_TextIOWrapper, _FileIO = io.TextIOWrapper, io.FileIO
_addaudithook, _getframe = sys.addaudithook, sys._getframe
_base_getattribute = object.__getattribute__
_start_new_thread, _allocate_lock, _thread_count = _thread.start_new_thread, _thread.allocate_lock, _thread._count
_gc_isenabled, _gc_disable, _gc_enable = gc.isenabled, gc.disable, gc.enable
# the event a mystery part raises before its function runs: the seal refuses it beside another thread
PART_RUNS = "course.exercises.isolation.part_runs"
_sleep = time.sleep
_encode_json_str = json.encoder.encode_basestring_ascii  # C, as json.dumps writes a str
_dumps, _loads = json.dumps, json.loads
_FunctionType, _ModuleType = types.FunctionType, types.ModuleType
_isinstance, _type, _getattr, _tuple = isinstance, type, getattr, tuple
_modules = sys.modules
_compile, _line_cache = compile, linecache.cache  # the dict IPython's compiler writes each cell's text to
_parse, _walk, _Import, _ImportFrom, _Name, _Store = ast.parse, ast.walk, ast.Import, ast.ImportFrom, ast.Name, ast.Store

from . import pristine as _pristine  # noqa: E402
from ..toolkit.guards import switched_off as _switched_off  # noqa: E402

_SWITCHER_CODE = _switched_off.__wrapped__.__code__  # the one frame that may swap a __code__ once sealed

_pristine.record()
_restore = _pristine.restore

# Audit events refused in a sealed process, whoever asks. Prefixes end with a dot.
DENIED_EVENTS = frozenset({
    "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    "sys._current_frames", "sys._current_exceptions",
    "sys.settrace", "sys.setprofile", "sys.addaudithook", "sys.monitoring.register_callback",
    "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.startfile",
    "os.link", "os.symlink", "os.rename", "subprocess.Popen", "pty.spawn",
    "sqlite3.connect", "sqlite3.connect/handle",
})
DENIED_PREFIXES = ("ctypes.", "cffi.")
# Attribute reads that CPython audits, each of which hands out a frame or a frame's code.
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame",
                              "ag_code", "f_code"})
_COURSE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the course package
_LIBRARY_DIRS = tuple(sorted({os.path.realpath(p) + os.sep for p in
                              (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)} |
                             {os.path.dirname(os.__file__) + os.sep}))
# Frames whose variables hold a mystery part's function or a bug's settings.
_SEALED_FILES = (os.path.join(_COURSE_DIR, "exercises", "mystery.py"), os.path.join(_COURSE_DIR, "bugs") + os.sep)


class Sealed(PermissionError):
    """Raised, in a graded call's process, by an introspection route that could reach the answer."""


def _make_hook(keeper_code=None, part_codes=(), threads=None):
    """The seal: an audit hook that, once ``course.exercises.isolation.seal`` is raised, refuses

    * every event of ``DENIED_EVENTS`` and ``DENIED_PREFIXES``, to anyone;
    * a frame whose own code, or the code of any frame above it, is inside a mystery part
      (``_SEALED_FILES``): by ``sys._getframe``, a traceback's ``tb_frame`` or a generator's
      ``gi_frame``, to anyone (a library's helper too: ``inspect.getgeneratorlocals``,
      ``traceback.walk_stack``), and a part's generator itself (``gi_frame``, ``gi_code``);
    * any frame to a notebook's code (code outside the installed libraries and ``course``);
    * replacing a function's ``__code__`` (but in ``switched_off``'s own frame: a stand-in of
      ``_raiser``'s shape, and back the code it replaced), and copying a function of ``course`` (``types.FunctionType``
      on its code object) from code outside the package: a copy is not switched off with it;
    * opening anything under ``/proc`` or IPython's profile folder (its history database), or any
      ``*.sqlite`` file.

    One read is allowed: ``gi_frame`` of a part's generator by ``keeper_code``
    (``course.exercises.mystery._keeper``, whose frame keeps what it reads and is itself refused);
    and copies of ``part_codes`` (``course.exercises.mystery._HOLDER_CODES``: the code a mystery
    part copies into each part it makes; no test switches any of it off), by anyone.

    The thread rule: with ``threads`` given (``_thread._count()`` as the graded call's process began),
    the event ``course.exercises.isolation.part_runs`` (a mystery part, before its function runs) is
    refused while more than one thread started in this process is alive: the calls' worker (or a
    check's thread) and no other. A thread of the learner's that runs while a part does could watch
    the process (``sys.getrefcount`` of the catalogue's functions rises while one runs).

    Everything it uses is bound here, in the hook's own closure: rebinding the module's names
    later changes nothing, and nothing of anyone else's runs inside it (its checks are suspended
    while it runs). Only the hook (which no Python object references) holds its state."""
    sealed, inside, locked = [False], set(), [False]  # ``inside``: the threads running the hook now
    count, part_runs = _thread_count, PART_RUNS
    most = None if threads is None else threads + 1
    alone = ("a mystery part does not run while another thread of yours is alive in a graded call (it "
             "could watch what the part does): end or join your threads before you call a part")
    get_ident, gc_isenabled, gc_disable, gc_enable = _thread.get_ident, gc.isenabled, gc.disable, gc.enable
    main_ident = get_ident()  # the hook is made on the graded call's main thread (``seal``)
    denied, prefixes, frame_attrs = DENIED_EVENTS, DENIED_PREFIXES, FRAME_ATTRIBUTES
    libraries, course_dir, sealed_files = _LIBRARY_DIRS, _COURSE_DIR, _SEALED_FILES
    getframe, type_, str_, bytes_, len_, id_ = sys._getframe, type, str, bytes, len, id
    issubclass_, startswith, endswith, join = issubclass, str.startswith, str.endswith, "".join
    decode, sealed_error = bytes.decode, Sealed
    frame_type, traceback_type, generator_type = types.FrameType, types.TracebackType, types.GeneratorType
    code_type, function_type = types.CodeType, types.FunctionType
    own_copier = "<module>"  # the gates are made before the seal
    switcher_code, raiser_shaped, replaced = _SWITCHER_CODE, _raiser_shape(), {}
    holder_codes: list = []
    resolve = _path_resolver()
    ipython_dir = resolve(os.path.expanduser("~/.ipython")) + os.sep
    message = "{} is not allowed while your answer is graded: test the pipeline's behaviour instead"
    debugger = ("{} is not allowed while your answer is graded (a debugger or tracer does not run "
                "inside a graded call): call your function in a cell of its own to debug it")

    # Nothing in here may run code of anyone else's: every check is suspended while the hook runs
    # (``inside``), so code run from here could walk the garbage collector. Hence: types compared by
    # identity (``isinstance`` reads ``__class__``, ``in`` calls ``__eq__``); a string that may be a
    # subclass read with ``str``'s own methods, never formatted; every name bound above; paths
    # resolved with the OS's primitives (``_path_resolver``), not ``posixpath``.
    def library(filename) -> bool:
        return startswith(filename, libraries) or startswith(filename, course_dir) or startswith(filename, "<frozen ")

    def chain_sealed(frame) -> bool:
        while frame is not None:
            if startswith(frame.f_code.co_filename, sealed_files):
                return True
            frame = frame.f_back
        return False

    def held(code) -> bool:
        for c in holder_codes:
            if c is code:
                return True
        return False

    def why(event, args):
        if event in denied or startswith(event, prefixes):
            return debugger.format(event) if event == "sys.settrace" or event == "sys.setprofile" else message.format(event)
        if locked[0] and (event == "sys._getframe" or event == "object.__getattr__") and get_ident() == main_ident:
            # once the calls have begun no frame is read on the main thread, whose frames hold the
            # reply's token: a finalizer of the learner's can run there (``_child_tail``)
            if event == "sys._getframe" or (len_(args) > 1 and type_(args[1]) is str_ and args[1] in frame_attrs):
                return message.format("reading a frame on the graded call's main thread")
        if event == "sys._getframe":
            frame = args[0] if len_(args) else None
            if type_(frame) is not frame_type:
                return None
            # refused: a notebook's frame (``inspect.currentframe()``), a frame in or below a mystery
            # part. Not refused: a library frame to a notebook's code (``sys._getframe(1)`` from the
            # learner's function is the package frame that called it): refusing it voided honest
            # grading in 06 (docs/grading-integrity.md, (f)), so no package frame that calls learner
            # code may hold a reference result
            if not library(frame.f_code.co_filename) or chain_sealed(frame):
                return message.format("sys._getframe")
            return None
        if event == "object.__getattr__" and len_(args) > 1 and type_(args[1]) is str_ and args[1] in frame_attrs:
            obj, attr = args[0], args[1]
            kind = type_(obj)
            if kind is generator_type and held(obj.gi_code):
                if attr == "gi_frame" and keeper_code is not None and getframe(2).f_code is keeper_code:
                    return None
                return message.format(f"opening a mystery part (.{attr})")
            frame = obj if kind is frame_type else obj.tb_frame if kind is traceback_type else \
                obj.gi_frame if kind is generator_type else None
            if frame is not None and chain_sealed(frame):
                return message.format(f"reading .{attr} inside a mystery part")
            caller = getframe(2)
            if caller is None or not library(caller.f_code.co_filename):
                return message.format(f"reading .{attr}")
            return None
        if event == "object.__setattr__" and len_(args) > 1 and type_(args[1]) is str_ and args[1] == "__code__":
            # one frame may, two things: ``switched_off``'s own may put a stand-in that only raises
            # (``_raiser``'s shape, checked here: its helpers can be rebound) in a function's place,
            # and put back the code it replaced (a check of a fix's pipeline switches the package
            # off around the fix's code). Nothing else: no code of anyone's choosing goes in.
            fn, value = args[0], args[2] if len_(args) > 2 else None
            if getframe(2).f_code is not switcher_code or type_(fn) is not function_type or type_(value) is not code_type:
                return message.format("replacing a function's __code__")
            stack = replaced.setdefault(id_(fn), [])
            if raiser_shaped(value):
                stack.append(fn.__code__)
            elif stack and value is stack[-1]:
                stack.pop()
            else:
                return message.format("replacing a function's __code__")
            return None
        if event == "function.__new__" and len_(args) and type_(args[0]) is code_type \
                and startswith(args[0].co_filename, course_dir):
            for code in part_codes:
                if code is args[0]:
                    return None
            # a copy of a package function (``types.FunctionType(f.__code__, ...)``) is not the
            # function that ``off=`` switched off. Only the package's own copies are made: at a
            # module's import (``nonfinite._bad``, a module first imported in this process). Any
            # other caller is refused, a package function that calls a callable handed to it too
            caller = getframe(2).f_code
            name = caller.co_name
            if not (startswith(caller.co_filename, course_dir) and type_(name) is str_ and name == own_copier):
                return message.format("copying a function of the course package")
            return None
        if event == "open" and len_(args):
            path = args[0]
            if len_(args) > 1 and args[1] is None and issubclass_(type_(path), (str_, bytes_)) \
                    and not (startswith(path, "/") if issubclass_(type_(path), str_) else bytes_.startswith(path, b"/")):
                # ``os.open`` (its event carries no mode) may take a directory's descriptor (``dir_fd``),
                # which the event does not carry: a relative path could name anything
                return message.format("os.open of a relative path")
            if issubclass_(type_(path), bytes_):
                path = decode(path, "utf-8", "surrogateescape")
            elif issubclass_(type_(path), str_):
                path = join((path,))  # an exact str, whatever its class was
            else:
                return None
            full = resolve(path)
            if startswith(full, "/proc/") or full == "/proc" or startswith(full, ipython_dir) \
                    or endswith(full, (".sqlite", ".sqlite-journal")):
                return message.format("opening " + path)
        return None

    def hook(event, args):
        if type_(event) is not str_:
            return
        if event == "course.exercises.isolation.lock_main":  # anyone may: it only refuses more
            locked[0] = True
            return
        if event == part_runs:  # anyone may: it only refuses
            if sealed[0] and most is not None and count() > most:
                raise sealed_error(alone)
            return
        if event == "course.exercises.isolation.seal":
            if not sealed[0]:  # only the first: ``seal`` raises it once
                for code in args:
                    if type_(code) is code_type:
                        holder_codes.append(code)
                sealed[0] = True
            return
        me = get_ident()
        if not sealed[0] or me in inside:  # the hook's own frame reads, on this thread
            return
        # this thread only (another thread's events are checked meanwhile), and with the collector
        # off, so that no finalizer runs in here, where this thread's checks are suspended
        inside.add(me)
        collecting = gc_isenabled()
        if collecting:
            gc_disable()
        try:
            refused = why(event, args)
        finally:
            if collecting:
                gc_enable()
            inside.discard(me)
        if refused is not None:
            raise sealed_error(refused)
    return hook


def _path_resolver():
    """``resolve(path)``: the absolute path ``path`` (an exact ``str``) names once every symbolic link
    is followed, as ``os.path.realpath`` gives it, made only with the OS's own functions (``lstat``,
    ``readlink``, ``getcwd``) and ``str``'s methods, all bound here: the audit hook uses it, and code
    run from there (a rebound ``posixpath`` function) would run with the seal suspended."""
    lstat, readlink, getcwd, is_link, oserror = os.lstat, os.readlink, os.getcwd, stat.S_ISLNK, OSError
    startswith, split, rfind, list_, reversed_ = str.startswith, str.split, str.rfind, list, reversed

    def resolve(path: str) -> str:
        if not startswith(path, "/"):
            path = getcwd() + "/" + path
        todo = list_(reversed_(split(path, "/")))
        result, links = "", 0
        while todo:
            part = todo.pop()
            if part == "" or part == ".":
                continue
            if part == "..":
                result = result[:rfind(result, "/")] if result else ""
                continue
            candidate = result + "/" + part
            try:
                link = is_link(lstat(candidate).st_mode)
            except oserror:
                link = False
            if link and links < 40:
                links += 1
                try:
                    target = readlink(candidate)
                except oserror:
                    result = candidate
                    continue
                if startswith(target, "/"):
                    result = ""
                todo.extend(reversed_(split(target, "/")))
            else:
                result = candidate
        return result or "/"
    return resolve


def _raiser_shape():
    """``shaped(code)``: whether ``code`` does what a switched-off stand-in does and nothing else
    (``course.toolkit.guards._raiser``): the same bytecode, names and exception table as a stand-in
    made here with as many free variables (up to 16), and only strings and None for constants. So
    it raises ``_course_grading_SwitchedOff(message)`` from its function's globals. Every template
    is made now, before any learner code runs: ``shaped`` runs inside the audit hook."""
    from ..toolkit.guards import _raiser as make

    templates = []
    for n in range(17):
        names = [f"v{i}" for i in range(n)]
        scope: dict = {}
        exec(compile("def outer():\n" + "".join(f"    {v} = None\n" for v in names)
                     + "    def f():\n        " + (f"({', '.join(names)},)" if names else "pass")
                     + "\n    return f\n", "<template>", "exec"), scope)
        templates.append(make(scope["outer"]()))
    templates, type_, str_, bytes_, len_, zip_ = tuple(templates), type, str, bytes, len, zip

    def shaped(code) -> bool:  # every value compared is first checked to be exactly a str or bytes
        n = len_(code.co_freevars)
        if n >= len_(templates):
            return False
        t = templates[n]
        body, table = code.co_code, code.co_exceptiontable
        names, local = code.co_names, code.co_varnames
        if type_(body) is not bytes_ or type_(table) is not bytes_ or body != t.co_code:
            return False
        if table != t.co_exceptiontable or len_(names) != len_(t.co_names) or len_(local) != len_(t.co_varnames):
            return False
        for a, b in zip_(names + local, t.co_names + t.co_varnames):
            if type_(a) is not str_ or a != b:
                return False
        for a, b in ((code.co_flags, t.co_flags), (code.co_argcount, t.co_argcount), (code.co_nlocals, t.co_nlocals),
                     (code.co_kwonlyargcount, t.co_kwonlyargcount), (code.co_posonlyargcount, t.co_posonlyargcount),
                     (code.co_stacksize, t.co_stacksize), (len_(code.co_consts), len_(t.co_consts))):
            if a != b:
                return False
        for c in code.co_consts:
            if c is not None and type_(c) is not str_:
                return False
        return True
    return shaped


def _random_key(_) -> bytes:
    return _urandom(8)


def _part_codes() -> tuple:
    """The code objects a mystery part copies (``course.exercises.mystery._HOLDER_CODES``), exactly
    code objects, or none."""
    codes = _getattr(sys.modules.get("course.exercises.mystery"), "_HOLDER_CODES", ())
    return _tuple(c for c in codes if _type(c) is types.CodeType) if _type(codes) is tuple else ()


def seal(threads: int | None = None, part_codes: tuple = ()) -> None:
    """Refuse the routes of ``_make_hook`` for the rest of this process (one way: nothing unseals),
    with its thread rule when ``threads`` is given, and copies of ``part_codes`` allowed (``_part_codes``,
    read before any learner code ran here). Raises RuntimeError if the seal is not in force
    afterwards (another audit hook refused ours)."""
    mystery = sys.modules.get("course.exercises.mystery")
    _addaudithook(_make_hook(getattr(mystery, "_KEEPER_CODE", None), part_codes, threads))
    sys.audit("course.exercises.isolation.seal", getattr(mystery, "_HOLDER_CODE", None), _library_only.__code__)
    try:
        gc.get_referrers(seal)
    except Sealed:
        return
    raise RuntimeError("the grading process could not be sealed")


def plain_str(text) -> str:
    """``text`` if it is exactly a ``str``, else ``"?"``: formatting a subclass would run its code."""
    return text if _type(text) is str else "?"


def _cell_full(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


# ----- what the child forgets ---------------------------------------------------------------------
def _stored_names(code: types.CodeType) -> set[str]:
    """Names a cell's module-level code assigns (``STORE_NAME``/``STORE_GLOBAL``)."""
    return {i.argval for i in dis.get_instructions(code) if i.opname in ("STORE_NAME", "STORE_GLOBAL")}


def _cell_stored_names(code: types.CodeType) -> set[str]:
    """Names the whole running cell assigns at its top level. IPython compiles and runs a cell one
    statement at a time, so the running frame's code holds only its own statement's names (a
    test's expected values, stored by an earlier statement, are not among them); the cell's text,
    as IPython compiled it, is in its compile cache (``linecache``) under the frame's file name.
    That entry is written as the test cell is compiled, and the grading guard checks at the test
    cell's start that the cache is the original dict. Names the cell binds only by importing them
    stay. Without an entry, the statement's own names."""
    names = _stored_names(code)
    entry = _line_cache.get(code.co_filename)
    if _type(entry) is _tuple and len(entry) >= 3 and _type(entry[2]) is list:
        text = "".join(entry[2])
        try:
            stored = _stored_names(_compile(text, code.co_filename, "exec", dont_inherit=True))
            tree = _parse(text)
        except (SyntaxError, ValueError, TypeError):
            return names
        # a name the cell only imports stays: a package constant (``from course import IGNORE``)
        # holds no answer, and the learner's code may read the same name from its own import
        imported = {(a.asname or a.name).split(".")[0] for n in _walk(tree) if _isinstance(n, (_Import, _ImportFrom))
                    for a in n.names}
        assigned = {n.id for n in _walk(tree) if _isinstance(n, _Name) and _isinstance(n.ctx, _Store)}
        names |= stored - (imported - assigned)
    return names


def _forget(user_ns: dict | None, frame) -> None:
    """Drop every answer this process holds (called in the child, before the seal)."""
    for name, clear in (("course.exercises.mystery", "forget_all"), ("course.exercises.capstone", "forget_all")):
        module = sys.modules.get(name)
        if module is not None and _getattr(module, clear, None) is not None:
            _getattr(module, clear)()
    sys.last_type = sys.last_value = sys.last_traceback = None
    # the grader's secret of the running test (course.toolkit.salts): the hidden draws were mixed
    # with it in the kernel (each ``Hidden`` record holds its mixed salt), so nothing here needs it,
    # and the learner's function, which runs here, could read it and rebuild the draws
    salts = sys.modules.get("course.toolkit.salts")
    box = _getattr(salts, "CURRENT", None) if salts is not None else None
    if type(box) is list:
        box[:] = [""]
    if user_ns is not None:
        # the running cell's own assignments that hold data (a test's expected answers, labelled
        # draws, loop variables); functions, classes and modules it defined stay callable
        while frame is not None:
            if frame.f_globals is user_ns and frame.f_code.co_name == "<module>":
                for name in _cell_stored_names(frame.f_code):
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
    import linecache
    linecache.cache.clear()  # IPython registers every cell's source here, the running test's too
    filename_map = _getattr(_getattr(shell, "compile", None), "_filename_map", None)
    if _isinstance(filename_map, dict):
        filename_map.clear()
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


def _reset_signals() -> None:
    for number in signal.valid_signals():
        try:
            if callable(signal.getsignal(number)):
                signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError, TypeError):
            pass


class _NoStacks:
    """Stands in for ``traceback`` in torch's device modules (``torch.cuda``, ``torch.xpu``): there, every ``torch.manual_seed`` on a machine
    whose CUDA is not initialised keeps ``traceback.format_stack()`` (for an error message should a
    lazy CUDA call fail later). Called inside a mystery part, that walk would pass the part's frames
    (refused by the seal) and keep their file and function names where any code can read them."""

    @staticmethod
    def format_stack(*args, **kwargs):
        return []

    def __getattr__(self, name):
        import traceback
        return getattr(traceback, name)


def _lazy_device_modules() -> list[str]:
    """torch's device modules that keep stacks for a lazy call (torch.cuda, torch.xpu, torch.mtia)."""
    return [name for name, module in list(sys.modules.items())
            if name.startswith("torch.") and module is not None and "_lazy_call" in vars(module)
            and "traceback" in vars(module)]


# found once, where torch is imported before the package (it always is: ``course`` imports it);
# a walk over every module in each graded call's process costs ~10 ms of copied pages
_LAZY_DEVICE_MODULES = _lazy_device_modules() if "torch" in sys.modules else None


def _quiet_torch_stacks() -> None:
    names = _LAZY_DEVICE_MODULES if _LAZY_DEVICE_MODULES is not None else _lazy_device_modules()
    for name in names:
        module = _modules.get(name)
        if module is not None and "traceback" in vars(module):
            module.traceback = _NoStacks()
            tracker = vars(module).get("_lazy_seed_tracker")
            if tracker is not None:  # the kernel's last stacks, kept before the fork
                try:
                    module._lazy_seed_tracker = type(tracker)()
                except Exception:  # noqa: BLE001
                    pass
            queued = vars(module).get("_queued_calls")
            if isinstance(queued, list):
                queued.clear()


def _no_tqdm_monitor() -> None:
    """tqdm starts a monitor thread at its first progress bar (``tqdm.monitor_interval``); in a
    graded call's process every thread started since the calls began must have ended before their
    results are read (``_child_tail``), so none is started there."""
    std = _modules.get("tqdm.std")
    if std is not None and _getattr(std, "tqdm", None) is not None:
        std.tqdm.monitor_interval = 0


# C functions that write or keep the stack (file, line, function of every frame: in a part, the bug's)
# with no audit event (a red team read 04's and 12's answers from faulthandler's dumps, 2026-12-07)
_STACK_DUMPERS = {"faulthandler": ("dump_traceback", "dump_traceback_later", "register", "enable"),
                  "tracemalloc": ("start", "take_snapshot", "get_object_traceback", "_get_traces", "_get_object_traceback"),
                  "_tracemalloc": ("start", "_get_traces", "_get_object_traceback")}


def _no_stack_dumps() -> None:
    """In a graded call's process, before any learner code: ``faulthandler`` and ``tracemalloc``
    are switched off (and their functions replaced in their modules, so an import finds the stand-ins).
    A reference to one of them taken before the fork is not reached (docs/grading-integrity.md)."""
    import faulthandler

    faulthandler.disable()
    faulthandler.cancel_dump_traceback_later()
    for module_name, names in _STACK_DUMPERS.items():
        module = _modules.get(module_name)
        if module_name != "faulthandler" and module is None:
            try:
                module = __import__(module_name)
            except ImportError:
                continue
        if module_name == "tracemalloc" and module.is_tracing():
            module.stop()
        for name in names:
            if _getattr(module, name, None) is not None:
                setattr(module, name, _refuses(f"{module_name}.{name}"))


def _refuses(what: str):
    def refused(*args, **kwargs):
        raise Sealed(f"{what} is not allowed while your answer is graded: test the pipeline's behaviour instead")
    return refused


_warmed = [False]


def _warm_up() -> None:
    """Run what torch imports lazily on a first optimizer step (``torch._dynamo``, ...) and on a
    first ``torch.save`` and ``torch.load`` (whose lazy import reads its caller's frame through
    ``typing_extensions``) once in the kernel, so a graded call's process never imports it from
    inside a mystery part or a fix's check, where a library's own look at its caller's frame is
    refused (a red team's honest 07 restore failed its check that way, 2026-12-07)."""
    if _warmed[0]:
        return
    _warmed[0] = True
    try:
        import torch
        p = torch.nn.Parameter(torch.zeros(1))
        for opt in (torch.optim.AdamW([p], lr=0.0), torch.optim.SGD([p], lr=0.0)):
            p.grad = torch.zeros(1)
            opt.step()
        torch.nn.utils.clip_grad_norm_([p], 1.0)
        buffer = io.BytesIO()
        torch.save({"p": p.detach(), "step": opt.state_dict()}, buffer)
        buffer.seek(0)
        torch.load(buffer, weights_only=True)
    except Exception:  # noqa: BLE001 - warming up is an optimisation, never a failure
        pass


# ----- switching off, for good, in the child --------------------------------------------------------
def _codes_in(code: types.CodeType) -> list[types.CodeType]:
    """``code`` and every code object nested in it (its functions, comprehensions, classes)."""
    out, todo = [], [code]
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(k for k in c.co_consts if _isinstance(k, types.CodeType))
    return out


def _names_in(fn) -> set[str]:
    return {name for code in _codes_in(fn.__code__) for name in code.co_names}


# Modules whose private functions are the pipeline's own working parts (stored in parts, called by
# the loop): never looked into for a check's helpers.
MACHINERY = ("course.exercises.mystery", "course.reference.pipeline", "course.reference.train",
             "course.reference.data", "course.reference.model", "course.toolkit.batch", "course.bugs",
             "course.exercises.isolation", "course.exercises.grading", "course.toolkit.guards")


def private_helpers(functions: Iterable[Callable]) -> list[_FunctionType]:
    """The private functions (a ``_`` name) that do the work of ``functions``: those they call,
    directly or through each other, defined in the same module or imported from another module of
    ``course`` (read from their code's names: ``course.reference.diagnose.locate`` works through
    ``course.toolkit.nonfinite._any_bad``), and private copies of them (a function of the module
    with the same code object), outside the pipeline's own machinery (``MACHINERY``)."""
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
                    and not target.__name__.startswith("__")
                    and (target.__module__ == fn.__module__ or str(target.__module__).startswith("course."))
                    and not str(target.__module__).startswith(MACHINERY) and id(target) not in found):
                todo.append(target)
    return [f for f in found.values() if id(f) not in {id(getattr(g, "__func__", g)) for g in functions}]


def _library_only(original: _FunctionType, name: str, lever=(False,), helper: bool = True, entry=None):
    """A suspended generator that calls ``original`` for the package's own code only (a ``helper``:
    the caller of the trampoline that sends to it must be a file of ``course``), or for no one (not
    a ``helper``); once ``lever[0]`` is true, for everyone. The only references to ``original`` and
    to ``lever`` are locals of this frame and of the frame that made it (``run_apart``'s child, which
    no learner code can open; ``course.exercises.mystery._holder`` explains why that holds)."""
    from ..toolkit.guards import SwitchedOff

    # bound now, before any learner code runs in this process: a rebound module name is not used
    getframe, sealed, startswith, course_dir, base_exception = _getframe, Sealed, str.startswith, _COURSE_DIR, BaseException
    switched_off = SwitchedOff
    request = yield
    while True:
        args, kwargs = request
        del request
        trampoline = caller = None
        try:
            try:
                if lever[0]:
                    ours = True
                elif not helper:
                    ours = False
                else:
                    trampoline = getframe(1)
                    caller = trampoline.f_back
                    ours = (trampoline.f_code is entry[0] and caller is not None
                            and startswith(caller.f_code.co_filename, course_dir))
            except sealed:
                ours = False
            del trampoline, caller
            if not ours:
                raise switched_off(f"{name} is switched off while your answer is graded: write it yourself")
            answer = (True, original(*args, **kwargs))
        except base_exception as err:  # noqa: BLE001
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


def _switch_off_for_good(functions: Sequence[Callable], lever: list | None = None) -> None:
    """In a graded call's process: ``functions`` raise ``SwitchedOff`` for everyone; their private
    helpers and copies (``private_helpers``) answer only the package's own code (a check that an
    allowed tool uses keeps working for the tool, not for the notebook). With a ``lever`` (a list
    that only the caller's frame holds), all of them answer everyone once ``lever[0]`` is set: the
    check of a fix's pipeline (``run_apart``'s ``then``) runs after every decision is made."""
    from ..toolkit.guards import _functions, _raiser

    fns = _functions(functions)  # with the functions of course they wrap (``__wrapped__``)
    for fn, helper in [(f, True) for f in private_helpers(fns)] + ([(f, False) for f in fns] if lever is not None else []):
        original = _FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
        original.__kwdefaults__ = fn.__kwdefaults__
        entry = [_trampoline(fn, id(fn))]  # the gate knows its trampoline by identity
        gate = _library_only(original, f"{fn.__module__}.{fn.__qualname__}", (False,) if lever is None else lever,
                             helper, entry)
        next(gate)
        gates = fn.__globals__.setdefault("_course_isolation_gates", {})
        gates[id(fn)] = gate
        fn.__code__ = entry[0]
        del original, gate, entry
    if lever is None:
        for fn in fns:
            fn.__code__ = _raiser(fn)


# ----- results as plain data ------------------------------------------------------------------------
def _describe_error(err: BaseException, rejects: tuple) -> dict:
    from ..toolkit.guards import SwitchedOff

    kind = "unfinished" if _isinstance(err, NotImplementedError) else \
        "switched-off" if _isinstance(err, SwitchedOff) else \
        "sealed" if _isinstance(err, Sealed) else \
        "rejected" if rejects and _isinstance(err, rejects) else "error"
    text = str(err.args[0]) if _type(err) is KeyError and len(err.args) == 1 else str(err)
    where = _notebook_frames(err)
    if where and kind in ("error", "sealed", "switched-off"):
        text += f" (raised in your code at {where})"
    return {"error": kind, "type": _type(err).__name__, "message": text[:2000]}


def _notebook_frames(err: BaseException) -> str:
    """Where in the notebook's own code ``err`` passed: "detect line 4, helper line 2" (the cells'
    functions and line numbers; no library frames, no source, which the child has forgotten)."""
    import traceback
    out = []
    try:
        for frame, lineno in traceback.walk_tb(err.__traceback__):
            code = frame.f_code
            if not (code.co_filename.startswith(_LIBRARY_DIRS) or code.co_filename.startswith(_COURSE_DIR)):
                out.append(f"{code.co_name} line {lineno}")
    except Exception:  # noqa: BLE001
        return ""
    return ", ".join(out[-4:])


def _raise_error(info: dict) -> None:
    from ..toolkit.guards import SwitchedOff

    message = info["message"]
    kind = info["error"]
    if kind == "unfinished":
        raise NotImplementedError(message)
    if kind == "switched-off":
        raise SwitchedOff(message)
    if kind == "sealed":
        raise Sealed(message)
    cls = _getattr(builtins, info["type"], None)
    err = None
    if _isinstance(cls, type) and issubclass(cls, Exception) and cls.__module__ == "builtins":
        try:
            err = cls(message)
        except TypeError:  # a builtin exception that takes other arguments (UnicodeDecodeError)
            pass
    if err is None:
        err = RuntimeError(f"{info['type']}: {message}")
    raise err


@dataclass(frozen=True)
class Outcome:
    """One call's result: ``value`` (plain data) or ``error`` (a dict from the child); with
    ``run_apart``'s ``then``, ``then`` is what the check of the returned value found (a string, or
    None). ``kept``: in the child only, what the call returned, for ``then``."""
    value: Any = None
    error: dict | None = None
    then: Any = None
    kept: Any = field(default=None, repr=False, compare=False)

    def get(self):
        """The value, or the call's exception raised again (same builtin type and message)."""
        if self.error is not None:
            _raise_error(self.error)
        return self.value


# ----- the fork ---------------------------------------------------------------------------------
_warned_no_fork = [False]


def run_apart(fn: Callable, cases: Sequence, encode: Callable[[Any, Any], Any],
              off: Iterable[Callable] = (), rejects: tuple = (), then: tuple | None = None) -> tuple[Outcome, ...]:
    """``(Outcome of encode(case, fn(case)) for case in cases)``, computed in a sealed child
    process that holds no answer (see the module docstring). ``encode`` runs in the child and must
    return JSON data; an exception in ``fn`` or ``encode`` becomes that case's error. ``rejects``:
    exception classes reported as ``"rejected"``. Raises AssertionError when the child dies without
    answering (the message says how).

    ``then``: ``(make_checker, check)``, to check what each call returned, in the same child, once
    every call has returned and every ``encode`` is written down (``course.exercises.mystery.check_fix``
    trains a fix's pipeline there). ``make_checker()`` is called before any learner code runs in the
    child and returns ``(checker, snap)``; ``snap(case)`` is taken then too. After the calls, the
    functions in ``off`` answer again, and for each call that returned, ``checker(job)`` runs in a
    thread of its own (its first frame is in a sealed file, so no code can read any frame of it)
    and appends to ``job``'s list a string (what it found) or None; that is the Outcome's ``then``.
    ``check``'s notebook names are checked too: see ``_names_read``."""
    # Until the fork, this process calls only primitives bound at import: code planted in anything
    # else (a random-state getter, IPython's accessor, a stream's flush) would run here with the
    # test's cases on the stack. (os.fork runs the fork handlers registered with
    # os.register_at_fork; the grading kernel's guard voids a test when the submission has one.) The random state, the shell and the warm-up are read in the child,
    # after it has put the package and the libraries back as first imported (``pristine``).
    cases = list(cases)
    off = tuple(off)
    if _fork is None:
        if not _warned_no_fork[0]:
            print("[grading] no os.fork here: graded calls run in this process, not isolated")
            _warned_no_fork[0] = True
        _restore()
        state = rng_state()
        if then is None:
            return _tuple(_call(fn, _realized(c), encode, rejects, state) for c in cases)
        checker, snap = then[0]()
        out = []
        for c in cases:
            case = _realized(c)
            snapped = snap(case)
            o = _call(fn, case, encode, rejects, state)
            found, done = [], _allocate_lock()
            done.acquire()
            if o.error is None:
                checker([(then[1], case, o.kept, _json_writer()(o.value), state, found, done, None, snapped, None)])
            out.append(Outcome(value=o.value, error=o.error, then=found[0] if found else None))
        return _tuple(out)
    token = _urandom(16).hex()
    result_r, result_w = _pipe()
    out_r, out_w = _pipe()
    frame = _getframe(1)
    pid = _fork()
    if pid == 0:  # the child: never returns
        # the threads alive here (a fork copies only this one; the count is the parent's): from now
        # on, any other is the learner's (a finalizer's), and no part runs beside it (``seal``)
        threads = _thread_count()
        part_codes = _part_codes()  # as the grading kernel's guard put the module back before the test
        collecting = _gc_isenabled()
        _gc_disable()  # no finalizer runs while the hidden draws are made (it could watch them made)
        try:
            _close(result_r)
            _close(out_r)
            _dup2(out_w, 1)
            _dup2(out_w, 2)
            stream = _TextIOWrapper(_FileIO(out_w, "w", closefd=False), line_buffering=True,
                                    errors="replace")
            sys.stdout = sys.stderr = stream
            restored = _restore()  # before anything that is not a bound primitive runs here
            if restored:
                print(f"[grading] this graded call ran on the package and libraries as first imported "
                      f"(put back: {', '.join(restored[:8])}{', ...' if len(restored) > 8 else ''})")
            state = rng_state()  # every call starts from it: the order of the calls changes nothing
            user_ns = _user_ns()
            _str_keys_only(user_ns)
            # what ``then``'s check reads of the notebook, as it is now, before the test's data is forgotten
            watched = _names_read(then[1], user_ns) if then is not None else ({}, ())
            _forget(user_ns, frame)
            del frame
            _reset_signals()  # a handler planted by the notebook would run on this thread's frames
            _quiet_torch_stacks()
            _no_tqdm_monitor()
            _no_stack_dumps()
            _warm_up()
            lever = [False] if then is not None else None  # only this frame and the gates hold it
            _switch_off_for_good(off, lever)
            if _thread_count() != threads:
                raise RuntimeError("a thread was started in the graded call's process before its calls began "
                                   "(by a finalizer of your code's?): nothing may run beside the hidden draws")
            seal(threads, part_codes)
            # hidden draws are made only now, sealed, on what was just put back: before the fork
            # their answers existed nowhere in this process tree but in the test's own source
            # in an order of its own (``os.urandom``), not the test's: objects made one after the
            # other lie close in memory, and a red team ordered a call's cases by the ids of what
            # each draw made, then read each one's answer off the test's text (2026-12-08)
            order = sorted(range(len(cases)), key=_random_key)
            made, held, slots, snaps = [None] * len(cases), [None] * len(cases), [None] * len(cases), {}
            if then is not None:
                checker, snap = then[0]()  # before any learner code runs here: it binds what it uses
            for i in order:
                made[i] = _realized(cases[i])
                # this frame (which no learner code can open) keeps every case, its fields and its
                # parts' generators alive: whatever learner code drops, nothing of a draw is freed,
                # so no reference count changes to say which function a part held
                held[i] = _hold(made[i])
                slots[i] = _urandom(8).hex()  # each case under a random slot: the calls run in their order
                if then is not None:
                    snaps[slots[i]] = snap(made[i])
            held = _tuple(held)
            pairs = list(zip(slots, made))  # in the cases' order, which the reply keeps
            del cases, made, order
            if then is not None:
                then = (checker, then[1], snaps, _pristine_baseline())
            tail = _child_tail(token)  # from here on, this thread calls only what the tail bound now
            if collecting:
                _gc_enable()
        except BaseException as err:  # noqa: BLE001  (the child must answer whatever happened)
            payload = _dumps({"token": token, "failed": f"{_type(err).__name__}: {err}"})
            data = payload.encode("utf-8")
            try:
                while data:
                    data = data[_write(result_w, data):]
            finally:
                _exit_now(0)
        exit_now = _exit_now
        try:
            tail(result_w, stream, fn, pairs, encode, rejects, state, then, lever, user_ns, watched, held)
        finally:
            exit_now(1)  # the tail ends the process itself; should it fail, the child still ends here
    _close(result_w)
    _close(out_w)
    status = None
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
    # The reply is read, checked and turned into the result before anything that is not a bound
    # primitive runs: echoing the child's output calls the stream's ``write``, and code there would
    # run on this frame (the reply, the token) and the caller's (the test's expected answers).
    try:
        message = _loads(b"".join(chunks).decode("utf-8"))
    except ValueError:
        message = None
    del chunks
    text = b"".join(output).decode("utf-8", "replace")
    del output
    if not _isinstance(message, dict) or message.get("token") != token:
        _echo(text)
        raise AssertionError(f"the graded call's process ended without an answer (exit status {status}): "
                             "your code must return, not end the process or write to its pipes")
    if "failed" in message:
        _echo(text)
        raise AssertionError(f"the graded call could not run: {message['failed']}")
    if not _isinstance(message.get("results"), list) or len(message["results"]) != len(cases):
        _echo(text)
        raise AssertionError("the graded call's process answered for another number of cases than it was given")
    outcomes = _tuple(Outcome(error=r["error"]) if "error" in r else Outcome(value=r["value"], then=r.get("then"))
                      for r in message["results"])
    del message
    _warm_up()  # here too, after the child: later graded calls need not import it again
    _echo(text)
    return outcomes


def _echo(text: str) -> None:
    """Print what a graded call printed (its child's stdout and stderr), on the kernel's stdout.

    Called only once the call's result is made (a tuple of frozen ``Outcome``): the stream is the
    kernel's own during a test (the grading kernel's guard puts back a rebound ``sys.stdout``), and
    whatever runs in it can no longer change what the call answered."""
    if text:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _user_ns():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return shell.user_ns if shell is not None else None


def _realized(case):
    """A case as the learner's function receives it: a hidden draw (``course.exercises.mystery.hidden``)
    made now, without its answer stored anywhere; any other case as it is."""
    realize = _getattr(_type(case), "_course_realize", None)
    return realize(case)[0] if realize is not None and _type(case).__module__ == "course.exercises.mystery" else case


def _hold(case) -> tuple:
    """What the child keeps alive for ``case`` (``course.exercises.mystery._held``)."""
    held = _getattr(_modules.get("course.exercises.mystery"), "_held", None)
    return held(case) if held is not None else (case,)


def _names_read(check, ns: dict | None) -> tuple[dict, tuple]:
    """What ``check`` reads of the notebook's namespace ``ns``: ``({name: value now}, ((function,
    __defaults__, __kwdefaults__), ...))`` for every global name that its code reads, and the code
    of each notebook function it reaches that way (through a name, a closure, ``functools.partial``
    or a method), and each such function's defaults. Taken in a graded call's process before any
    learner code runs there (and before the test's data is forgotten); ``run_apart``'s ``then``
    puts them back before each check and fails a check during which one changed."""
    import functools

    names: dict = {}
    defaults: list = []
    if ns is None:
        return names, ()
    plain = {key: value for key, value in dict.items(ns) if _type(key) is str}  # no key's __eq__ runs
    todo, seen = [check], set()
    while todo:
        fn = todo.pop()
        if _type(fn) is functools.partial:
            todo.extend([fn.func, *fn.args, *fn.keywords.values()])
            continue
        fn = _getattr(fn, "__func__", fn) if _type(fn) is types.MethodType else fn
        if _type(fn) is not _FunctionType or id(fn) in seen or fn.__globals__ is not ns:
            continue
        seen.add(id(fn))
        defaults.append((fn, fn.__defaults__, fn.__kwdefaults__))
        todo.extend(c.cell_contents for c in (fn.__closure__ or ()) if _cell_full(c))
        for name in sorted(_globals_read(fn.__code__)):
            if name in plain:
                names[name] = plain[name]
                todo.append(plain[name])
    return names, _tuple(defaults)


def _globals_read(code: types.CodeType) -> set[str]:
    """The global names ``code`` (and the code nested in it) loads: not its attribute names."""
    return {i.argval for c in _codes_in(code) for i in dis.get_instructions(c)
            if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}


def _str_keys_only(ns: dict | None) -> None:
    """Drop every key of the notebook's namespace that is not exactly a ``str``, without comparing
    it to anything (a planted key whose ``__eq__`` or ``__hash__`` is code would run on the first
    lookup of a name it collides with): in a graded call's process, before anything reads a name."""
    if _type(ns) is not dict:
        return
    kept = [(key, value) for key, value in dict.items(ns) if _type(key) is str]
    if len(kept) != dict.__len__(ns):
        dict.clear(ns)
        dict.update(ns, kept)


def _pristine_baseline():
    """``lasting()``: what differs from the package and the libraries as they are now
    (``pristine.changed``), with ``pristine``'s own module entries compared first; every name it
    uses is bound here, in a graded call's process before any learner code runs there."""
    changed, base = _pristine.changed, frozenset(_pristine.changed())
    own, pdict, dict_get = _tuple(_pristine.__dict__.items()), _pristine.__dict__, dict.get
    # and ``builtins`` (which ``pristine`` leaves to the grading kernel's guard): a builtin rebound
    # in this process (``abs`` answering 0 to the check's comparisons, a red team's pass) stays
    bdict, type_, str_ = builtins.__dict__, type, str
    bold = {key: value for key, value in dict.items(bdict) if type_(key) is str_}

    def lasting() -> list:
        out = [f"course.exercises.pristine.{key} (replaced)" for key, value in own if dict_get(pdict, key) is not value]
        if out:
            return out
        out = [f"builtins.{key} (replaced)" for key, value in bold.items() if dict_get(bdict, key) is not value]
        out += [f"builtins.{key} (added)" for key, _ in dict.items(bdict) if type_(key) is not str_ or key not in bold]
        return out + [change for change in changed() if change not in base]
    return lasting


def _json_writer():
    """``as_json(value)``: plain data (a dict with ``str`` keys, a list or tuple, a ``str``, ``int``,
    ``float``, ``bool`` or None, each of exactly that type) as JSON text, or None for anything else.
    No method of the value runs, and every name used is bound now (``_child_tail``)."""
    type_, str_, int_, float_, dict_, list_, tuple_ = _type, str, int, float, dict, list, _tuple
    encode_str, int_repr, float_repr, dict_items, inf = _encode_json_str, int.__repr__, float.__repr__, dict.items, float("inf")

    def as_json(value, depth=0):
        if depth > 64:
            return None
        if value is None:
            return "null"
        if value is True:
            return "true"
        if value is False:
            return "false"
        kind = type_(value)
        if kind is str_:
            return encode_str(value)
        if kind is int_:
            return int_repr(value)
        if kind is float_:
            return "NaN" if value != value else "Infinity" if value == inf else "-Infinity" if value == -inf \
                else float_repr(value)
        parts = []
        if kind is list_ or kind is tuple_:
            for item in value:
                text = as_json(item, depth + 1)
                if text is None:
                    return None
                parts.append(text)
            return "[" + ",".join(parts) + "]"
        if kind is dict_:
            for key, item in dict_items(value):
                text = as_json(item, depth + 1) if type_(key) is str_ else None
                if text is None:
                    return None
                parts.append(encode_str(key) + ":" + text)
            return "{" + ",".join(parts) + "}"
        return None
    return as_json


_NOT_PLAIN = ('{"error":{"error":"error","type":"TypeError","message":"the graded call\'s result was '
              'changed after it returned, or is not plain data"}}')


def _child_tail(token: str):
    """The rest of a graded call's child process, from its first learner call on: run the calls on
    a worker thread, check what they returned (``run_apart``'s ``then``) on a thread each, write the
    reply to the parent and end the process. This, the child's main thread, holds the reply's token
    on its frames, and learner code runs meanwhile on the other threads and may rebind any module's
    names (this module's, ``builtins``', ``json``'s, ``threading``'s); so the tail calls only what it
    binds here, in its closure, before the first call, and from its first line no frame can be read
    on this thread, by anyone (the seal's ``lock_main``): a finalizer of the learner's can still run
    here (garbage made after a freeze, by a thread's last finalizers), but finds nothing to use:

    * what the calls left is read with primitives, as plain data of exact types (a call's
      ``Outcome`` through its instance dict, every dict by iterating its items: a lookup would
      compare keys, a key's ``__eq__`` being code; ``_json_writer``);
    * nothing the calls made is freed here (a finalizer would run on this thread): every object read
      is kept until the process ends, and once the other threads have ended the collector is
      frozen (``gc.freeze``), so no garbage of theirs is collected here either;
    * no exception of a class anyone can change is raised here, the stream is flushed on a thread
      of its own, and a reply of failure is made now, before the first call."""
    start, new_lock, count, sleep, range_, freeze = _start_new_thread, _allocate_lock, _thread_count, _sleep, range, gc.freeze
    type_, getattribute, dict_items, outcome, str_, dict_, len_ = _type, _base_getattribute, dict.items, Outcome, str, dict, len
    write, exit_now, flush, encode_str, base_exception = _write, _exit_now, _TextIOWrapper.flush, _encode_json_str, BaseException
    work, as_json, tuple_, not_plain, sort, first = _take_and_work, _json_writer(), _tuple, _NOT_PLAIN, sorted, _first
    audit = sys.audit
    head = '{"token":' + encode_str(token)
    still_running = (head + ',"failed":' + encode_str(
        "code of your function was still running 2 s after the calls returned (a thread of its own, or a "
        "call that did not return in time): a graded function must return, and leave nothing running") + "}").encode("utf-8")
    failed = (head + ',"failed":"the graded call\'s process failed"}').encode("utf-8")

    def alone(n: int) -> bool:
        """Whether every thread started since ``count()`` was ``n`` has ended (waits up to 2 s)."""
        for _ in range_(2000):
            if count() <= n:
                return True
            sleep(0.001)
        return False

    def send(data: bytes) -> None:
        try:
            while data:
                data = data[write(result_w_[0], data):]
        finally:
            exit_now(0)

    def plain_fields(obj) -> dict:
        """``obj``'s instance dict as a new dict of its exact-str keys, read without a lookup."""
        out = {}
        fields = getattribute(obj, "__dict__")
        if type_(fields) is dict_:
            for key, value in dict_items(fields):
                if type_(key) is str_:
                    out[key] = value
        return out

    result_w_ = [None]

    def tail(result_w, stream, fn, pairs, encode, rejects, state, then, lever, user_ns, watched, held):
        audit("course.exercises.isolation.lock_main")  # from now on no frame is read on this thread
        result_w_[0] = result_w
        keep = [held]  # everything read from the calls stays alive here until the process ends
        try:
            threads = count()
            results: dict = {}
            keep.append(results)
            done = new_lock()
            done.acquire()
            # the worker's own arguments hold only an empty box once it has taken its work
            start(work, ([(fn, tuple_(sort(pairs, key=first)), encode, rejects, results, state, done)],))
            done.acquire()
            if not alone(threads):
                send(still_running)
            freeze()
            mine = {}
            for key, value in dict_items(results):
                if type_(key) is str_:
                    mine[key] = value
            keep.append(mine)
            rows = []
            for slot, case in pairs:
                got = mine.get(slot)
                row = None
                if type_(got) is outcome:
                    fields = plain_fields(got)
                    keep.append(fields)
                    error = fields.get("error")
                    text = as_json(error if error is not None else fields.get("value"))
                    row = None if text is None else [error is not None, text, fields.get("kept"), case, slot, None]
                rows.append(row)
            if then is not None:
                checker, check, snaps, lasting = then
                lever[0] = True  # every decision is written down: the switched-off functions answer again
                for row in rows:
                    if row is None or row[0]:
                        continue
                    found = []
                    keep.append(found)
                    done = new_lock()
                    done.acquire()
                    start(checker, ([(check, row[3], row[2], row[1], state, found, done, (user_ns, watched),
                                      snaps.get(row[4]), lasting)],))
                    done.acquire()
                    if not alone(threads):
                        send(still_running)
                    freeze()
                    verdict = found[0] if len_(found) else "the check of your fixed pipeline did not finish"
                    row[5] = verdict if verdict is None or type_(verdict) is str_ else "?"
            flushed = new_lock()
            flushed.acquire()
            start(flush_and_release, (stream, flushed))  # the stream's objects are the learner's to change
            flushed.acquire(True, 2)
            parts = []
            for row in rows:
                parts.append(not_plain if row is None else '{"error":' + row[1] + "}" if row[0] else
                             '{"value":' + row[1] + ',"then":' + as_json(row[5]) + "}")
            payload = head + ',"results":[' + ",".join(parts) + "]}"
        except base_exception:
            send(failed)
        send(payload.encode("utf-8"))

    def flush_and_release(stream, flushed) -> None:
        try:
            flush(stream)
        finally:
            flushed.release()
    return tail


def _first(pair):
    return pair[0]


def _take_and_work(job: list) -> None:
    work = job.pop()  # the box the thread's caller holds is empty before any learner code runs
    done = work[-1]
    try:
        _work(*work[:-1])
    finally:
        done.release()


def _work(fn, shuffled, encode, rejects, results, state) -> None:
    from ..toolkit.guards import captured_warnings

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
        result = fn(case)
        return Outcome(value=encode(case, result), kept=result)
    except BaseException as err:  # noqa: BLE001
        return Outcome(error=_describe_error(err, rejects))
